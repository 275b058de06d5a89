//! `sluice receive`: a receiver for trying sluice out. It prints each webhook it gets and
//! whether its signature verifies (Standard Webhooks, `v1` against the endpoint's secret or
//! `v1a` against its public key, ±5 minutes of clock skew). Over HTTP it answers 204; with a
//! key to check against, a webhook whose signature is missing, stale or wrong is answered 401,
//! so sluice records a failed attempt, as a real receiver would. From a broker ([`brokers`]) it
//! consumes the queue, stream or subject a broker destination publishes to, the way a
//! consumer would, and acknowledges what verifies. Bodies are printed with control characters
//! escaped: a webhook cannot drive the terminal it is shown in.

pub mod brokers;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::any;
use tokio::net::TcpListener;

/// What a received webhook's signature is checked against.
#[derive(Debug, Default)]
pub enum Check {
    /// Nothing: signatures are shown as not checked, and every webhook is accepted.
    #[default]
    Nothing,
    /// A `v1` endpoint's secret (`whsec_…`).
    Secret(crate::signing::Secret),
    /// A `v1a` endpoint's public key (`whpk_…`).
    PublicKey(String),
}

/// What the check found: the words printed, and whether the webhook is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// "signature verified", "REFUSED: SIGNATURE INVALID", …
    pub words: &'static str,
    /// Accepted (204, acknowledged) or refused (401, rejected).
    pub accepted: bool,
}

impl Check {
    /// The verdict on one webhook: its `webhook-id`, `webhook-timestamp` and
    /// `webhook-signature` (empty when absent) over `body`.
    pub fn verdict(&self, id: &str, timestamp: &str, signature: &str, body: &[u8]) -> Verdict {
        let refused = |words| Verdict {
            words,
            accepted: false,
        };
        if matches!(self, Check::Nothing) {
            return Verdict {
                words: "signature not checked (no --secret or --public-key)",
                accepted: true,
            };
        }
        let Ok(ts) = timestamp.parse::<i64>() else {
            return refused("REFUSED: no webhook-timestamp");
        };
        if (crate::clock::now_ms() / 1000 - ts).abs() > 300 {
            return refused("REFUSED: signature timestamp too old");
        }
        let verified = match self {
            Check::Secret(secret) => crate::signing::verify(secret, id, ts, body, signature),
            Check::PublicKey(key) => crate::signing::verify_v1a(key, id, ts, body, signature),
            Check::Nothing => true,
        };
        match verified {
            true => Verdict {
                words: "signature verified",
                accepted: true,
            },
            false => refused("REFUSED: SIGNATURE INVALID"),
        }
    }
}

/// Print one webhook's line: its id, the verdict and its body, escaped.
fn print(id: &str, verdict: Verdict, body: &[u8]) {
    println!(
        "{} {}: {}",
        printable(id),
        verdict.words,
        printable(&String::from_utf8_lossy(body))
    );
}

/// Receive on `addr` until the process ends, checking signatures as `check` says.
pub async fn print_forever(addr: SocketAddr, check: Check) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    println!("receiving webhooks on http://{}/", listener.local_addr()?);
    let check = Arc::new(check);
    let app = Router::new().fallback(any(move |headers: HeaderMap, body: Bytes| {
        let check = check.clone();
        async move {
            let get = |name: &str| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned()
            };
            let id = get("webhook-id");
            let verdict = check.verdict(
                &id,
                &get("webhook-timestamp"),
                &get("webhook-signature"),
                &body,
            );
            print(&id, verdict, &body);
            match verdict.accepted {
                true => StatusCode::NO_CONTENT,
                false => StatusCode::UNAUTHORIZED,
            }
        }
    }));
    axum::serve(listener, app).await
}

/// `text` with every control character escaped (`\u{1b}`), so escape sequences, bells and
/// carriage returns in a webhook are shown, not obeyed.
fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_escaped() {
        assert_eq!(
            printable("a\u{1b}[2Jb\u{7}\r\n\u{9b}é"),
            "a\\u{1b}[2Jb\\u{7}\\u{d}\\u{a}\\u{9b}é"
        );
    }
}
