//! OAuth2 access tokens for what sluice sends to: an HTTP endpoint behind an OAuth2-protected
//! API (client credentials, RFC 6749 §4.4) and a Google Cloud Pub/Sub topic published as a
//! service account (a JWT-bearer assertion, RFC 7523 §2.1, [`service_account`]). The grant is a
//! property of the set of credentials ([`Grant`]); everything else is one mechanism: sluice asks
//! the token endpoint for an access token, caches it per set of credentials until shortly
//! before it expires, refreshes it ahead of that (one request at a time, the others keep using
//! the token still valid), forgets it when the receiver answers 401, and sends it as
//! `Authorization: Bearer`. Tokens, client secrets and keys are never logged or stored.
//!
//! A token endpoint is the tenant's to choose, so nothing about it may hold an attempt longer
//! than the attempt's own deadline: one fetch per set of credentials runs at a time, in a task
//! of its own with its own deadline, and every attempt waiting for it waits only until its own
//! deadline; a failed fetch is remembered for a moment (growing while it keeps failing) so the
//! attempts that need a token fail at once instead of queueing; and at most
//! [`MAX_TOKEN_RESPONSE_BYTES`] of an answer are read, and tokens longer than
//! [`MAX_TOKEN_BYTES`] refused.

mod fetch;
mod service_account;

pub use fetch::{MAX_TOKEN_BYTES, MAX_TOKEN_RESPONSE_BYTES};
pub use service_account::ServiceAccountKey;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::watch;
use tokio::time::Instant;

use super::Failure;
use crate::model::{ClientAuth, Credentials};

/// A set of credentials tokens are fetched with: the token endpoint, the grant that asks it and
/// what the grant proves itself with. Made once per configuration change; tokens are cached
/// per distinct set.
#[derive(Clone)]
pub struct Grant {
    token_url: String,
    kind: GrantKind,
    fingerprint: [u8; 32],
}

#[derive(Clone)]
enum GrantKind {
    /// RFC 6749 §4.4: the client's id and secret.
    ClientCredentials(Credentials),
    /// RFC 7523 §2.1: an assertion signed with a service account's key (its JSON text, read
    /// when a token is fetched), asking for `scope`.
    JwtBearer { key: Arc<str>, scope: String },
}

impl Grant {
    /// Client credentials: an HTTP endpoint's `oauth2`.
    pub fn client_credentials(creds: Credentials) -> Grant {
        let auth = match creds.auth {
            ClientAuth::Basic => "basic",
            ClientAuth::Post => "post",
        };
        let fingerprint = fingerprint(&[
            "client_credentials",
            &creds.token_url,
            &creds.client_id,
            &creds.client_secret,
            creds.scope.as_deref().unwrap_or("\0"),
            creds.audience.as_deref().unwrap_or("\0"),
            auth,
        ]);
        Grant {
            token_url: creds.token_url.clone(),
            kind: GrantKind::ClientCredentials(creds),
            fingerprint,
        }
    }

    /// The JWT-bearer grant of the service account whose JSON key is `key`, asking for `scope`
    /// at the key's `token_uri`. A key that does not read (the API refuses one) fails each
    /// fetch as `token_endpoint`, saying why.
    pub fn jwt_bearer(key: &str, scope: &str) -> Grant {
        #[derive(Deserialize)]
        struct Where {
            token_uri: String,
        }
        let token_url = serde_json::from_str::<Where>(key)
            .map(|w| w.token_uri)
            .unwrap_or_default();
        Grant {
            token_url,
            kind: GrantKind::JwtBearer {
                key: key.into(),
                scope: scope.to_owned(),
            },
            fingerprint: fingerprint(&["jwt_bearer", key, scope]),
        }
    }

    /// Where its tokens are fetched.
    pub fn token_url(&self) -> &str {
        &self.token_url
    }
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            GrantKind::ClientCredentials(creds) => creds.fmt(f),
            GrantKind::JwtBearer { scope, .. } => f
                .debug_struct("JwtBearer")
                .field("token_url", &self.token_url)
                .field("key", &"<hidden>")
                .field("scope", scope)
                .finish(),
        }
    }
}

/// The SHA-256 of `parts`, each prefixed with its length.
fn fingerprint(parts: &[&str]) -> [u8; 32] {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for part in parts {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().into()
}

/// A failed fetch is remembered this long after a first failure (attempts that need a token
/// meanwhile fail at once, as `token_endpoint`), doubling with each failure in a row up to
/// [`MAX_FAILURE_MEMORY`].
const FAILURE_MEMORY: Duration = Duration::from_secs(1);
/// The longest a failed fetch is remembered.
const MAX_FAILURE_MEMORY: Duration = Duration::from_secs(30);

/// When to refresh a token that lives `lifetime`: a minute before it expires, or halfway
/// through a shorter life.
pub fn refresh_after(lifetime: Duration) -> Duration {
    lifetime - (lifetime / 2).min(Duration::from_secs(60))
}

/// How long a fetch that failed `failures` times in a row is remembered.
fn failure_memory(failures: u32) -> Duration {
    FAILURE_MEMORY
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(MAX_FAILURE_MEMORY)
}

#[derive(Clone)]
struct Cached {
    token: String,
    refresh_at: Instant,
    expires_at: Instant,
}

/// What a fetch under way will announce: the token, or why there is none.
type Announced = Option<Result<String, Failure>>;

#[derive(Default)]
struct SlotState {
    current: Option<Cached>,
    /// The fetch under way, if any: its outcome arrives on this channel. One fetch per set of
    /// credentials at a time (single flight); it runs in a task of its own, so an attempt that
    /// gives up waiting never cancels it for the others.
    fetching: Option<watch::Receiver<Announced>>,
    /// The last fetch failed: why, and until when attempts without a valid token fail with it.
    failed: Option<(Failure, Instant)>,
    /// Fetches failed in a row.
    failures: u32,
}

#[derive(Default)]
struct Slot {
    state: Mutex<SlotState>,
}

impl Slot {
    fn state(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The token caches of every set of credentials in use.
#[derive(Default)]
pub struct Tokens {
    slots: Mutex<HashMap<[u8; 32], Arc<Slot>>>,
}

/// A token to send, and whether it was fetched for this attempt.
#[derive(Clone)]
pub struct Bearer {
    /// The access token.
    pub token: String,
    /// Fetched while this attempt waited (rather than taken from the cache).
    pub fetched: bool,
}

/// How a token is fetched: the client to the token endpoint, and the fetch's own deadline.
pub struct Fetcher<'a> {
    /// The client (the endpoint's TLS setting, the token timeouts).
    pub client: &'a reqwest::Client,
    /// The longest one fetch may take, whoever waits for it.
    pub total: Duration,
}

impl Tokens {
    fn slot(&self, grant: &Grant) -> Arc<Slot> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if slots.len() > 10_000 {
            // Credentials no longer used: their tokens have expired, nothing is being fetched.
            let now = Instant::now();
            slots.retain(|_, s| {
                let s = s.state();
                s.fetching.is_some() || s.current.as_ref().is_some_and(|c| c.expires_at > now)
            });
        }
        slots.entry(grant.fingerprint).or_default().clone()
    }

    /// A token of `grant` by `deadline`: the cached one, or the one a fetch brings (started
    /// now, or already under way for another attempt). Fails at once, as `token_endpoint`,
    /// while the last fetch's failure is remembered, and when `deadline` passes first.
    pub async fn bearer(
        &self,
        fetcher: Fetcher<'_>,
        grant: &Grant,
        deadline: Instant,
    ) -> Result<Bearer, Failure> {
        let slot = self.slot(grant);
        let waited_from = Instant::now();
        let mut waiting = {
            let mut s = slot.state();
            let now = Instant::now();
            if let Some(c) = &s.current {
                if now < c.refresh_at {
                    return Ok(cached(c));
                }
                if now < c.expires_at {
                    // Time to refresh: one fetch does, and every attempt goes on with the
                    // token still valid meanwhile (and after, if the refresh fails).
                    let token = cached(c);
                    if s.fetching.is_none() && s.failed.as_ref().is_none_or(|f| now >= f.1) {
                        start(&slot, &mut s, &fetcher, grant);
                    }
                    return Ok(token);
                }
            }
            if let Some((why, until)) = &s.failed
                && now < *until
            {
                return Err(why.clone());
            }
            match &s.fetching {
                Some(rx) => rx.clone(),
                None => start(&slot, &mut s, &fetcher, grant),
            }
        };
        let announced = tokio::time::timeout_at(deadline, waiting.wait_for(Option::is_some)).await;
        match announced {
            Ok(Ok(outcome)) => match outcome.as_ref() {
                Some(Ok(token)) => Ok(Bearer {
                    token: token.clone(),
                    fetched: true,
                }),
                Some(Err(why)) => Err(why.clone()),
                None => unreachable!("waited for an announcement"),
            },
            Ok(Err(_)) => Err(fetch::failed(
                grant,
                "the token request ended without an answer",
            )),
            Err(_) => Err(fetch::failed(
                grant,
                format_args!(
                    "no token within the attempt's deadline (waited {} ms for the token endpoint)",
                    waited_from.elapsed().as_millis()
                ),
            )),
        }
    }

    /// Forget `token` (the receiver answered 401 to it); a newer token is kept.
    pub fn invalidate(&self, grant: &Grant, token: &str) {
        let slot = self.slot(grant);
        let mut s = slot.state();
        if s.current.as_ref().is_some_and(|c| c.token == token) {
            s.current = None;
        }
    }
}

fn cached(c: &Cached) -> Bearer {
    Bearer {
        token: c.token.clone(),
        fetched: false,
    }
}

/// Start the one fetch for `grant`, in a task of its own bounded by the fetcher's total; its
/// outcome is cached (or remembered, when it failed) and announced to every attempt waiting.
fn start(
    slot: &Arc<Slot>,
    s: &mut SlotState,
    fetcher: &Fetcher<'_>,
    grant: &Grant,
) -> watch::Receiver<Announced> {
    let (tx, rx) = watch::channel(None);
    s.fetching = Some(rx.clone());
    let (slot, client, grant, total) = (
        slot.clone(),
        fetcher.client.clone(),
        grant.clone(),
        fetcher.total,
    );
    tokio::spawn(async move {
        let fetched = tokio::time::timeout(total, fetch::fetch(&client, &grant, total))
            .await
            .unwrap_or_else(|_| {
                Err(fetch::failed(
                    &grant,
                    format_args!("no answer within {} ms", total.as_millis()),
                ))
            });
        let announced = {
            let mut s = slot.state();
            s.fetching = None;
            let now = Instant::now();
            match fetched {
                Ok(fresh) => {
                    s.failed = None;
                    s.failures = 0;
                    s.current = Some(Cached {
                        token: fresh.token.clone(),
                        refresh_at: now + refresh_after(fresh.lifetime),
                        expires_at: now + fresh.lifetime,
                    });
                    Ok(fresh.token)
                }
                Err(why) => {
                    s.failures = s.failures.saturating_add(1);
                    let memory = failure_memory(s.failures);
                    if s.current.as_ref().is_some_and(|c| now < c.expires_at) {
                        tracing::warn!(token_url = %grant.token_url, error = %why.message,
                            "cannot refresh an OAuth2 token; the current one is used until it expires");
                    }
                    s.failed = Some((why.clone(), now + memory));
                    Err(why)
                }
            }
        };
        tx.send_replace(Some(announced));
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_refreshed_a_minute_early_or_halfway() {
        assert_eq!(
            refresh_after(Duration::from_secs(3600)),
            Duration::from_secs(3540)
        );
        assert_eq!(
            refresh_after(Duration::from_secs(60)),
            Duration::from_secs(30)
        );
        assert_eq!(
            refresh_after(Duration::from_secs(2)),
            Duration::from_secs(1)
        );
        assert_eq!(refresh_after(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn a_failed_fetch_is_remembered_longer_each_time_up_to_a_bound() {
        let memory: Vec<u64> = (1..=8).map(|n| failure_memory(n).as_secs()).collect();
        assert_eq!(memory, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(failure_memory(u32::MAX), MAX_FAILURE_MEMORY);
    }

    #[test]
    fn secrets_are_never_in_debug_output() {
        let c = Credentials {
            token_url: "https://idp.example.com/token".into(),
            client_id: "sluice".into(),
            client_secret: "s3cr3t-value".into(),
            scope: None,
            audience: None,
            auth: ClientAuth::Basic,
        };
        assert!(!format!("{c:?}").contains("s3cr3t"));
        let grant = Grant::client_credentials(c);
        assert!(!format!("{grant:?}").contains("s3cr3t"));
        let key = r#"{"type":"service_account","private_key":"-----BEGIN PRIVATE KEY-----s3cr3t",
            "client_email":"a@b","token_uri":"https://oauth2.example.com/token"}"#;
        let grant = Grant::jwt_bearer(key, "scope");
        assert_eq!(grant.token_url(), "https://oauth2.example.com/token");
        assert!(!format!("{grant:?}").contains("s3cr3t"));
    }
}
