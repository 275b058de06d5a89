//! `sluice receive`: a webhook receiver for trying sluice out. It prints each webhook it gets
//! and whether its signature verifies against the endpoint's secret (Standard Webhooks, ±5
//! minutes of clock skew), and answers 204; with `--secret`, a webhook whose signature is
//! missing, stale or wrong is answered 401, so sluice records a failed attempt, as a real
//! receiver would. Bodies are printed with control characters escaped: a webhook cannot drive
//! the terminal it is shown in.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::any;
use tokio::net::TcpListener;

/// Receive on `addr` until the process ends, checking signatures against `secret` if given.
pub async fn print_forever(
    addr: SocketAddr,
    secret: Option<crate::signing::Secret>,
) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    println!("receiving webhooks on http://{}/", listener.local_addr()?);
    let secret = Arc::new(secret);
    let app = Router::new().fallback(any(move |headers: HeaderMap, body: Bytes| {
        let secret = secret.clone();
        async move {
            let get = |name: &str| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned()
            };
            let (id, ts, sig) = (
                get("webhook-id"),
                get("webhook-timestamp"),
                get("webhook-signature"),
            );
            let (verdict, status) = match (secret.as_ref(), ts.parse::<i64>()) {
                (Some(secret), Ok(ts)) => {
                    let skew = (crate::clock::now_ms() / 1000 - ts).abs();
                    if skew > 300 {
                        (
                            "REFUSED: signature timestamp too old",
                            StatusCode::UNAUTHORIZED,
                        )
                    } else if crate::signing::verify(secret, &id, ts, &body, &sig) {
                        ("signature verified", StatusCode::NO_CONTENT)
                    } else {
                        ("REFUSED: SIGNATURE INVALID", StatusCode::UNAUTHORIZED)
                    }
                }
                (Some(_), Err(_)) => ("REFUSED: no webhook-timestamp", StatusCode::UNAUTHORIZED),
                (None, _) => (
                    "signature not checked (no --secret)",
                    StatusCode::NO_CONTENT,
                ),
            };
            println!(
                "{} {verdict}: {}",
                printable(&id),
                printable(&String::from_utf8_lossy(&body))
            );
            status
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
