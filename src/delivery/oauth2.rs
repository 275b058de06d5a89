//! OAuth2 client credentials (RFC 6749 §4.4) for endpoints behind an OAuth2-protected API:
//! sluice asks the endpoint's token endpoint for an access token, caches it until shortly
//! before it expires, refreshes it ahead of that (one request at a time, the others keep using
//! the token still valid), fetches a fresh one once when the receiver answers 401, and sends
//! it as `Authorization: Bearer`. Tokens and client secrets are never logged or stored.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::{ErrorKind, Failure, storable};

/// How sluice authenticates to the token endpoint (RFC 6749 §2.3.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ClientAuth {
    /// HTTP Basic with the client id and secret (the default; every server must support it).
    #[default]
    Basic,
    /// `client_id` and `client_secret` in the form body.
    Post,
}

/// An endpoint's client credentials, as stored.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    /// The token endpoint (http or https; checked by the egress guard like a destination).
    pub token_url: String,
    /// The client id.
    pub client_id: String,
    /// The client secret: write-only, never shown or logged.
    pub client_secret: String,
    /// Space-separated scopes asked for, if any.
    #[serde(default)]
    pub scope: Option<String>,
    /// The audience (resource) asked for, if any (an extension many servers read).
    #[serde(default)]
    pub audience: Option<String>,
    /// How the client authenticates.
    #[serde(default)]
    pub auth: ClientAuth,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("token_url", &self.token_url)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<hidden>")
            .field("scope", &self.scope)
            .field("audience", &self.audience)
            .field("auth", &self.auth)
            .finish()
    }
}

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

/// When to refresh a token that lives `lifetime`: a minute before it expires, or halfway
/// through a shorter life.
pub fn refresh_after(lifetime: Duration) -> Duration {
    lifetime - (lifetime / 2).min(Duration::from_secs(60))
}

#[derive(Clone)]
struct Cached {
    token: String,
    refresh_at: Instant,
    expires_at: Instant,
}

#[derive(Default)]
struct Slot {
    current: Mutex<Option<Cached>>,
    /// Held while a token is being fetched: one request to the token endpoint at a time.
    fetching: tokio::sync::Mutex<()>,
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
    /// Fetched now (rather than taken from the cache).
    pub fetched: bool,
}

impl Tokens {
    fn slot(&self, creds: &Credentials) -> Arc<Slot> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if slots.len() > 10_000 {
            // Credentials no longer used: their tokens have expired.
            let now = Instant::now();
            slots.retain(|_, s| {
                let current = s.current.lock().unwrap_or_else(|p| p.into_inner());
                current.as_ref().is_some_and(|c| c.expires_at > now)
            });
        }
        slots.entry(creds.fingerprint()).or_default().clone()
    }

    /// A token for `creds`: the cached one, or one fetched with `client`.
    pub async fn bearer(
        &self,
        client: &reqwest::Client,
        creds: &Credentials,
        total: Duration,
    ) -> Result<Bearer, Failure> {
        let slot = self.slot(creds);
        let cached = slot
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let now = Instant::now();
        if let Some(c) = &cached {
            if now < c.refresh_at {
                return Ok(Bearer {
                    token: c.token.clone(),
                    fetched: false,
                });
            }
            if now < c.expires_at {
                // Time to refresh: one attempt does; the others go on with the valid token,
                // and so does this one if the refresh fails.
                let Ok(_fetching) = slot.fetching.try_lock() else {
                    return Ok(Bearer {
                        token: c.token.clone(),
                        fetched: false,
                    });
                };
                return Ok(match fetch(client, creds, total).await {
                    Ok(fresh) => store(&slot, fresh),
                    Err(f) => {
                        tracing::warn!(token_url = %creds.token_url, error = %f.message,
                            "cannot refresh an OAuth2 token; the current one is used until it expires");
                        Bearer {
                            token: c.token.clone(),
                            fetched: false,
                        }
                    }
                });
            }
        }
        let _fetching = slot.fetching.lock().await;
        // Another attempt may have fetched one while this one waited.
        if let Some(c) = slot
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            && Instant::now() < c.refresh_at
        {
            return Ok(Bearer {
                token: c.token.clone(),
                fetched: false,
            });
        }
        let fresh = fetch(client, creds, total).await?;
        Ok(store(&slot, fresh))
    }

    /// Forget `token` (the receiver answered 401 to it); a newer token is kept.
    pub fn invalidate(&self, creds: &Credentials, token: &str) {
        let slot = self.slot(creds);
        let mut current = slot.current.lock().unwrap_or_else(|p| p.into_inner());
        if current.as_ref().is_some_and(|c| c.token == token) {
            *current = None;
        }
    }
}

fn store(slot: &Slot, fresh: Fresh) -> Bearer {
    let now = Instant::now();
    let cached = Cached {
        token: fresh.token.clone(),
        refresh_at: now + refresh_after(fresh.lifetime),
        expires_at: now + fresh.lifetime,
    };
    *slot.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(cached);
    Bearer {
        token: fresh.token,
        fetched: true,
    }
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
    #[serde(default)]
    expires_in: Option<f64>,
}

fn failed(creds: &Credentials, why: impl std::fmt::Display) -> Failure {
    Failure {
        kind: ErrorKind::TokenEndpoint,
        message: format!("token endpoint {}: {why}", creds.token_url),
    }
}

/// Ask the token endpoint for a token (RFC 6749 §4.4.2).
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
    let response = request
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
    let bytes = response
        .bytes()
        .await
        .map_err(|e| failed(creds, format!("the answer broke off: {e}")))?;
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
    if parsed.access_token.is_empty()
        || reqwest::header::HeaderValue::from_str(&parsed.access_token).is_err()
    {
        return Err(failed(
            creds,
            "the access token is empty or not header-safe",
        ));
    }
    let lifetime = parsed
        .expires_in
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(DEFAULT_LIFETIME, |s| {
            Duration::from_secs_f64(s.min(86_400.0))
        });
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
