//! One token request and its answer (RFC 6749 §4.4.2 and §5.1, RFC 7523 §2.1): the form the
//! grant asks with, at most [`MAX_TOKEN_RESPONSE_BYTES`] of the answer read, and a token
//! longer than [`MAX_TOKEN_BYTES`] refused.

use std::time::Duration;

use serde::Deserialize;

use super::service_account::ServiceAccountKey;
use super::{Grant, GrantKind};
use crate::delivery::{ErrorKind, Failure, storable};
use crate::model::ClientAuth;

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
/// RFC 7523's grant type.
const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// A token and how long it is kept.
pub(super) struct Fresh {
    pub token: String,
    pub lifetime: Duration,
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

/// A failure of `grant`'s token endpoint (kind `token_endpoint`).
pub(super) fn failed(grant: &Grant, why: impl std::fmt::Display) -> Failure {
    Failure {
        kind: ErrorKind::TokenEndpoint,
        message: format!("token endpoint {}: {why}", grant.token_url),
    }
}

fn too_large(grant: &Grant, why: impl std::fmt::Display) -> Failure {
    Failure {
        kind: ErrorKind::TokenTooLarge,
        message: format!("token endpoint {}: {why}", grant.token_url),
    }
}

/// Ask `grant`'s token endpoint for a token, reading at most [`MAX_TOKEN_RESPONSE_BYTES`] of
/// its answer. A refusal by the egress guard keeps its kind (`destination_refused`); every
/// other failure is `token_endpoint` or `token_too_large`.
pub(super) async fn fetch(
    client: &reqwest::Client,
    grant: &Grant,
    total: Duration,
) -> Result<Fresh, Failure> {
    let mut request = client
        .post(&grant.token_url)
        .timeout(total)
        .header(reqwest::header::ACCEPT, "application/json");
    let body = match &grant.kind {
        GrantKind::ClientCredentials(creds) => {
            let mut form: Vec<(&str, &str)> = vec![("grant_type", "client_credentials")];
            if let Some(scope) = &creds.scope {
                form.push(("scope", scope));
            }
            if let Some(audience) = &creds.audience {
                form.push(("audience", audience));
            }
            match creds.auth {
                ClientAuth::Basic => {
                    // §2.3.1: both parts form-urlencoded before they are joined.
                    let enc =
                        |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
                    request =
                        request.basic_auth(enc(&creds.client_id), Some(enc(&creds.client_secret)));
                }
                ClientAuth::Post => {
                    form.push(("client_id", &creds.client_id));
                    form.push(("client_secret", &creds.client_secret));
                }
            }
            serde_urlencoded::to_string(&form)
        }
        GrantKind::JwtBearer { key, scope } => {
            // The assertion stands in for the client's id and secret; it carries the scope.
            let assertion = ServiceAccountKey::parse(key)
                .and_then(|k| k.assertion(scope, crate::clock::now_ms() / 1000))
                .map_err(|why| failed(grant, format_args!("the service account key {why}")))?;
            serde_urlencoded::to_string([("grant_type", JWT_BEARER), ("assertion", &assertion)])
        }
    }
    .map_err(|e| failed(grant, e))?;
    let mut response = request
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .body(body)
        .send()
        .await
        .map_err(|e| {
            let why = crate::delivery::classify(&e, Duration::ZERO, &token_timeouts(total), false);
            let mut f = failed(grant, format!("{} ({})", why.kind.as_str(), why.message));
            if why.kind == ErrorKind::Refused {
                f.kind = ErrorKind::Refused;
            }
            f
        })?;
    let status = response.status();
    if response
        .content_length()
        .is_some_and(|n| n > MAX_TOKEN_RESPONSE_BYTES as u64)
    {
        return Err(too_large(
            grant,
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
        .map_err(|e| failed(grant, format!("the answer broke off: {e}")))?
    {
        if bytes.len() + chunk.len() > MAX_TOKEN_RESPONSE_BYTES {
            if !status.is_success() {
                // An error page: what was read says enough.
                break;
            }
            return Err(too_large(
                grant,
                format_args!("the answer is longer than the {MAX_TOKEN_RESPONSE_BYTES} bytes read"),
            ));
        }
        bytes.extend_from_slice(&chunk);
    }
    if !status.is_success() {
        return Err(failed(
            grant,
            format!(
                "answered {}: {}",
                status.as_u16(),
                storable(&bytes, MAX_ERROR_BODY)
            ),
        ));
    }
    let parsed: TokenResponse = serde_json::from_slice(&bytes)
        .map_err(|e| failed(grant, format!("the answer is not a token response: {e}")))?;
    if let Some(kind) = &parsed.token_type
        && !kind.eq_ignore_ascii_case("bearer")
    {
        return Err(failed(
            grant,
            format!("the token type is {kind:?}, not Bearer"),
        ));
    }
    if parsed.access_token.len() > MAX_TOKEN_BYTES {
        return Err(too_large(
            grant,
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
            grant,
            "the access token is empty or not header-safe",
        ));
    }
    let lifetime = lifetime(parsed.expires_in).map_err(|why| failed(grant, why))?;
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
}
