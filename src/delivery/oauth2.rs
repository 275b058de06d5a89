//! OAuth2 client credentials (RFC 6749 §4.4) for endpoints behind an OAuth2-protected API:
//! sluice asks the endpoint's token endpoint for an access token, caches it until shortly
//! before it expires, refreshes it ahead of that (one request at a time, the others keep using
//! the token still valid), fetches a fresh one once when the receiver answers 401, and sends
//! it as `Authorization: Bearer`. Tokens and client secrets are never logged or stored.
//!
//! A token endpoint is the tenant's to choose, so nothing about it may hold an attempt longer
//! than the attempt's own deadline: one fetch per set of credentials runs at a time, in a task
//! of its own with its own deadline, and every attempt waiting for it waits only until its own
//! deadline; a failed fetch is remembered for a moment (growing while it keeps failing) so the
//! attempts that need a token fail at once instead of queueing; and at most
//! [`MAX_TOKEN_RESPONSE_BYTES`] of an answer are read, and tokens longer than
//! [`MAX_TOKEN_BYTES`] refused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{ErrorKind, Failure, storable};
use crate::model::{ClientAuth, Credentials};

impl Credentials {
    fn fingerprint(&self) -> [u8; 32] {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        let auth = match self.auth {
            ClientAuth::Basic => "basic",
            ClientAuth::Post => "post",
        };
        for part in [
            self.token_url.as_str(),
            &self.client_id,
            &self.client_secret,
            self.scope.as_deref().unwrap_or("\0"),
            self.audience.as_deref().unwrap_or("\0"),
            auth,
        ] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
        h.finalize().into()
    }
}

/// Longest a token without `expires_in` is kept (a 401 replaces it sooner).
const DEFAULT_LIFETIME: Duration = Duration::from_secs(3600);
/// Most token-endpoint bytes kept in a failure message.
const MAX_ERROR_BODY: usize = 300;
/// Most bytes of a token endpoint's answer read: a token response is a few hundred bytes, and
/// the answer is the tenant's to choose.
pub const MAX_TOKEN_RESPONSE_BYTES: usize = 64 * 1024;
/// Longest access token accepted: it is sent as a header on every attempt and cached until
/// it expires.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;
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
    fn slot(&self, creds: &Credentials) -> Arc<Slot> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if slots.len() > 10_000 {
            // Credentials no longer used: their tokens have expired, nothing is being fetched.
            let now = Instant::now();
            slots.retain(|_, s| {
                let s = s.state();
                s.fetching.is_some() || s.current.as_ref().is_some_and(|c| c.expires_at > now)
            });
        }
        slots.entry(creds.fingerprint()).or_default().clone()
    }

    /// A token for `creds` by `deadline`: the cached one, or the one a fetch brings (started
    /// now, or already under way for another attempt). Fails at once, as `token_endpoint`,
    /// while the last fetch's failure is remembered, and when `deadline` passes first.
    pub async fn bearer(
        &self,
        fetcher: Fetcher<'_>,
        creds: &Credentials,
        deadline: Instant,
    ) -> Result<Bearer, Failure> {
        let slot = self.slot(creds);
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
                        start(&slot, &mut s, &fetcher, creds);
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
                None => start(&slot, &mut s, &fetcher, creds),
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
            Ok(Err(_)) => Err(failed(creds, "the token request ended without an answer")),
            Err(_) => Err(failed(
                creds,
                format_args!(
                    "no token within the attempt's deadline (waited {} ms for the token endpoint)",
                    waited_from.elapsed().as_millis()
                ),
            )),
        }
    }

    /// Forget `token` (the receiver answered 401 to it); a newer token is kept.
    pub fn invalidate(&self, creds: &Credentials, token: &str) {
        let slot = self.slot(creds);
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

/// Start the one fetch for `creds`, in a task of its own bounded by the fetcher's total; its
/// outcome is cached (or remembered, when it failed) and announced to every attempt waiting.
fn start(
    slot: &Arc<Slot>,
    s: &mut SlotState,
    fetcher: &Fetcher<'_>,
    creds: &Credentials,
) -> watch::Receiver<Announced> {
    let (tx, rx) = watch::channel(None);
    s.fetching = Some(rx.clone());
    let (slot, client, creds, total) = (
        slot.clone(),
        fetcher.client.clone(),
        creds.clone(),
        fetcher.total,
    );
    tokio::spawn(async move {
        let fetched = tokio::time::timeout(total, fetch(&client, &creds, total))
            .await
            .unwrap_or_else(|_| {
                Err(failed(
                    &creds,
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
                        tracing::warn!(token_url = %creds.token_url, error = %why.message,
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

struct Fresh {
    token: String,
    lifetime: Duration,
}

/// The token endpoint's answer (RFC 6749 §5.1).
#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    token_type: Option<String>,
    /// Seconds; a number, or a numeric string as some identity providers send it.
    #[serde(default, deserialize_with = "seconds")]
    expires_in: Option<f64>,
}

/// `expires_in` as a JSON number or a string holding one.
fn seconds<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Seconds {
        Number(f64),
        Text(String),
    }
    match Option::<Seconds>::deserialize(d)? {
        None => Ok(None),
        Some(Seconds::Number(n)) => Ok(Some(n)),
        Some(Seconds::Text(t)) => t.trim().parse::<f64>().map(Some).map_err(|_| {
            serde::de::Error::custom(format_args!("expires_in {t:?} is not a number of seconds"))
        }),
    }
}

/// How long a token that says it lives `expires_in` seconds is kept: that long (at most a
/// day); an hour when it does not say; not at all when it says zero or less (it serves the
/// attempts that waited for it, and the next one fetches again).
fn lifetime(expires_in: Option<f64>) -> Result<Duration, &'static str> {
    match expires_in {
        None => Ok(DEFAULT_LIFETIME),
        Some(s) if !s.is_finite() => Err("expires_in is not a finite number"),
        Some(s) if s <= 0.0 => Ok(Duration::ZERO),
        Some(s) => Ok(Duration::from_secs_f64(s.min(86_400.0))),
    }
}

fn failed(creds: &Credentials, why: impl std::fmt::Display) -> Failure {
    Failure {
        kind: ErrorKind::TokenEndpoint,
        message: format!("token endpoint {}: {why}", creds.token_url),
    }
}

fn too_large(creds: &Credentials, why: impl std::fmt::Display) -> Failure {
    Failure {
        kind: ErrorKind::TokenTooLarge,
        message: format!("token endpoint {}: {why}", creds.token_url),
    }
}

/// Ask the token endpoint for a token (RFC 6749 §4.4.2), reading at most
/// [`MAX_TOKEN_RESPONSE_BYTES`] of its answer.
async fn fetch(
    client: &reqwest::Client,
    creds: &Credentials,
    total: Duration,
) -> Result<Fresh, Failure> {
    let mut form: Vec<(&str, &str)> = vec![("grant_type", "client_credentials")];
    if let Some(scope) = &creds.scope {
        form.push(("scope", scope));
    }
    if let Some(audience) = &creds.audience {
        form.push(("audience", audience));
    }
    let mut request = client
        .post(&creds.token_url)
        .timeout(total)
        .header(reqwest::header::ACCEPT, "application/json");
    match creds.auth {
        ClientAuth::Basic => {
            // §2.3.1: both parts form-urlencoded before they are joined.
            let enc = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
            request = request.basic_auth(enc(&creds.client_id), Some(enc(&creds.client_secret)));
        }
        ClientAuth::Post => {
            form.push(("client_id", &creds.client_id));
            form.push(("client_secret", &creds.client_secret));
        }
    }
    let body = serde_urlencoded::to_string(&form).map_err(|e| failed(creds, e))?;
    let mut response = request
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .body(body)
        .send()
        .await
        .map_err(|e| {
            let why = super::classify(&e, Duration::ZERO, &token_timeouts(total), false);
            failed(creds, format!("{} ({})", why.kind.as_str(), why.message))
        })?;
    let status = response.status();
    if response
        .content_length()
        .is_some_and(|n| n > MAX_TOKEN_RESPONSE_BYTES as u64)
    {
        return Err(too_large(
            creds,
            format_args!(
                "the answer is {} bytes, more than the {MAX_TOKEN_RESPONSE_BYTES} read",
                response.content_length().unwrap_or_default()
            ),
        ));
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| failed(creds, format!("the answer broke off: {e}")))?
    {
        if bytes.len() + chunk.len() > MAX_TOKEN_RESPONSE_BYTES {
            if !status.is_success() {
                // An error page: what was read says enough.
                break;
            }
            return Err(too_large(
                creds,
                format_args!("the answer is longer than the {MAX_TOKEN_RESPONSE_BYTES} bytes read"),
            ));
        }
        bytes.extend_from_slice(&chunk);
    }
    if !status.is_success() {
        return Err(failed(
            creds,
            format!(
                "answered {}: {}",
                status.as_u16(),
                storable(&bytes, MAX_ERROR_BODY)
            ),
        ));
    }
    let parsed: TokenResponse = serde_json::from_slice(&bytes)
        .map_err(|e| failed(creds, format!("the answer is not a token response: {e}")))?;
    if let Some(kind) = &parsed.token_type
        && !kind.eq_ignore_ascii_case("bearer")
    {
        return Err(failed(
            creds,
            format!("the token type is {kind:?}, not Bearer"),
        ));
    }
    if parsed.access_token.len() > MAX_TOKEN_BYTES {
        return Err(too_large(
            creds,
            format_args!(
                "the access token is {} bytes, more than the {MAX_TOKEN_BYTES} accepted",
                parsed.access_token.len()
            ),
        ));
    }
    if parsed.access_token.is_empty()
        || reqwest::header::HeaderValue::from_str(&parsed.access_token).is_err()
    {
        return Err(failed(
            creds,
            "the access token is empty or not header-safe",
        ));
    }
    let lifetime = lifetime(parsed.expires_in).map_err(|why| failed(creds, why))?;
    Ok(Fresh {
        token: parsed.access_token,
        lifetime,
    })
}

fn token_timeouts(total: Duration) -> crate::delivery::AttemptTimeouts {
    crate::delivery::AttemptTimeouts {
        connect: total,
        read: total,
        total,
    }
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
    fn expires_in_may_be_a_numeric_string_and_zero_or_less_is_not_kept() {
        let parse = |body: &str| {
            serde_json::from_str::<TokenResponse>(body)
                .map(|r| lifetime(r.expires_in))
                .map_err(|e| e.to_string())
        };
        let hour = Ok(Ok(Duration::from_secs(3600)));
        assert_eq!(parse(r#"{"access_token":"t","expires_in":3600}"#), hour);
        assert_eq!(parse(r#"{"access_token":"t","expires_in":"3600"}"#), hour);
        assert_eq!(
            parse(r#"{"access_token":"t","expires_in":" 90.5 "}"#),
            Ok(Ok(Duration::from_secs_f64(90.5)))
        );
        assert_eq!(parse(r#"{"access_token":"t"}"#), hour);
        assert_eq!(parse(r#"{"access_token":"t","expires_in":null}"#), hour);
        assert_eq!(
            parse(r#"{"access_token":"t","expires_in":0}"#),
            Ok(Ok(Duration::ZERO))
        );
        assert_eq!(
            parse(r#"{"access_token":"t","expires_in":-5}"#),
            Ok(Ok(Duration::ZERO))
        );
        assert_eq!(
            parse(r#"{"access_token":"t","expires_in":"-1"}"#),
            Ok(Ok(Duration::ZERO))
        );
        assert!(
            parse(r#"{"access_token":"t","expires_in":"soon"}"#)
                .unwrap_err()
                .contains("soon")
        );
        assert_eq!(
            parse(r#"{"access_token":"t","expires_in":1e9}"#),
            Ok(Ok(Duration::from_secs(86_400)))
        );
    }

    #[test]
    fn a_failed_fetch_is_remembered_longer_each_time_up_to_a_bound() {
        let memory: Vec<u64> = (1..=8).map(|n| failure_memory(n).as_secs()).collect();
        assert_eq!(memory, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(failure_memory(u32::MAX), MAX_FAILURE_MEMORY);
    }

    #[test]
    fn the_secret_is_never_in_debug_output() {
        let c = Credentials {
            token_url: "https://idp.example.com/token".into(),
            client_id: "sluice".into(),
            client_secret: "s3cr3t-value".into(),
            scope: None,
            audience: None,
            auth: ClientAuth::Basic,
        };
        assert!(!format!("{c:?}").contains("s3cr3t"));
    }
}
