//! Console sessions: a signed cookie naming a session row kept in the store's settings.
//!
//! - The cookie is `{expiry}.{session id}.{HMAC}`: HttpOnly, SameSite=Strict, `Secure` with the
//!   `__Host-` prefix unless configured off. A forged or altered cookie fails the HMAC before the
//!   store is asked.
//! - The row (`console_session:{expiry}:{SHA-256 of the id}`) is what makes a session revocable:
//!   signing out deletes it, rotating a tenant's API token or changing the admin token ends its
//!   sessions (the row holds a fingerprint of the token hash in force at sign-in), deleting the
//!   tenant ends them, and the expiry in the key lets one range delete purge expired rows.
//!   Portal links carry the same fingerprint, so a link minted before a rotation opens nothing.
//! - The signing key comes from configuration, or is generated once and kept in the store's
//!   settings so every process on that store signs alike.
//! - CSRF tokens are HMACs of the session id (or, before sign-in, of a random pre-session
//!   nonce in its own cookie): nothing to store, nothing an attacker can compute.

use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, HeaderValue, header};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Console;
use super::page::ConsoleError;
use crate::ids::{hash_token, random_hex, token_fingerprint};
use crate::model::Tenant;
use crate::store::{Store, StoreError, StoreResult, purge_expired};

/// The store setting holding a generated cookie-signing key.
pub const KEY_SETTING: &str = "console_cookie_key";
/// Session rows: `console_session:{expiry ms, 13 digits}:{SHA-256 hex of the session id}`.
pub const SESSION_PREFIX: &str = "console_session:";
/// How long a pre-session nonce (the CSRF binding of the sign-in forms) lives, seconds.
const PRE_SESSION_S: u64 = 3600;

/// An HMAC-SHA256 key.
pub struct Key([u8; 32]);

impl Key {
    fn from_secret(text: &str) -> Key {
        Key(Sha256::digest(text.as_bytes()).into())
    }

    fn mac(&self, purpose: &str, data: &str) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(purpose.as_bytes());
        mac.update(b"|");
        mac.update(data.as_bytes());
        mac
    }

    /// The tag of `data` for `purpose`, base64url.
    pub fn sign(&self, purpose: &str, data: &str) -> String {
        URL_SAFE_NO_PAD.encode(self.mac(purpose, data).finalize().into_bytes())
    }

    /// Does `tag` sign `data` for `purpose`? (Constant-time.)
    pub fn verify(&self, purpose: &str, data: &str, tag: &str) -> bool {
        match URL_SAFE_NO_PAD.decode(tag) {
            Ok(bytes) => self.mac(purpose, data).verify_slice(&bytes).is_ok(),
            Err(_) => false,
        }
    }
}

/// The configured key, or the generated one read from the store (cached).
pub struct Keys {
    configured: Option<Arc<Key>>,
    cached: Mutex<Option<Arc<Key>>>,
}

impl Keys {
    /// Keys from the configured secret, if any.
    pub fn new(configured: Option<&str>) -> Self {
        Self {
            configured: configured.map(|k| Arc::new(Key::from_secret(k))),
            cached: Mutex::new(None),
        }
    }

    /// The key in force, generating and storing one on first use.
    pub async fn get(&self, store: &dyn Store) -> StoreResult<Arc<Key>> {
        if let Some(k) = &self.configured {
            return Ok(k.clone());
        }
        if let Some(k) = self
            .cached
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            return Ok(k.clone());
        }
        let text = match store.setting(KEY_SETTING).await? {
            Some(text) => text,
            // Of processes starting together, one key wins and every one gets it.
            None => store.init_setting(KEY_SETTING, &random_hex(32)).await?,
        };
        let key = Arc::new(Key::from_secret(&text));
        *self.cached.lock().unwrap_or_else(|p| p.into_inner()) = Some(key.clone());
        Ok(key)
    }
}

/// Load (or generate) the key as the console starts, so the first request does not.
pub fn warm_up(console: &Console) {
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        let console = console.clone();
        rt.spawn(async move {
            if let Err(e) = console.keys.get(console.app.store.as_ref()).await {
                tracing::warn!(error = %e, "console: cannot load the cookie key yet");
            }
        });
    }
}

/// Who a session belongs to.
#[derive(Debug, Clone)]
pub enum Principal {
    /// The operator (admin token).
    Admin,
    /// One tenant (portal link).
    Tenant(Tenant),
}

/// A live session.
#[derive(Debug, Clone)]
pub struct Session {
    /// Who.
    pub principal: Principal,
    /// The CSRF token its forms carry.
    pub csrf: String,
    /// When it ends (epoch ms).
    pub expires_at_ms: i64,
}

impl Session {
    /// Is this the operator's session?
    pub fn is_admin(&self) -> bool {
        matches!(self.principal, Principal::Admin)
    }
}

/// The stored row of a session.
#[derive(Debug, Serialize, Deserialize)]
struct Row {
    /// `admin` or `tenant`.
    kind: String,
    /// The tenant, for a portal session.
    tenant: Option<String>,
    /// The first 16 hex digits of the token hash in force at sign-in.
    fp: String,
    /// When it began (epoch ms).
    at: i64,
}

/// The name of the session cookie (or of the pre-session cookie).
pub fn cookie_name(console: &Console, pre: bool) -> &'static str {
    match (console.settings().secure_cookies, pre) {
        (true, false) => "__Host-sluice_console",
        (true, true) => "__Host-sluice_console_pre",
        (false, false) => "sluice_console",
        (false, true) => "sluice_console_pre",
    }
}

/// The value of cookie `name` in the request.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// A `Set-Cookie` value for a console cookie lasting `max_age_s` (0 deletes it).
pub fn set_cookie(console: &Console, name: &str, value: &str, max_age_s: u64) -> HeaderValue {
    let text = if console.settings().secure_cookies {
        // `__Host-` cookies must be Secure, for Path=/ and without Domain.
        format!("{name}={value}; Path=/; Max-Age={max_age_s}; HttpOnly; Secure; SameSite=Strict")
    } else {
        format!("{name}={value}; Path=/console; Max-Age={max_age_s}; HttpOnly; SameSite=Strict")
    };
    HeaderValue::from_str(&text).expect("cookie values are ASCII")
}

/// The (expiry, session id) of a session cookie whose signature holds.
fn signed_session(key: &Key, value: &str) -> Option<(i64, String)> {
    let mut parts = value.splitn(3, '.');
    let (exp, sid, tag) = (parts.next()?, parts.next()?, parts.next()?);
    let ok = sid.len() == 64 && sid.bytes().all(|b| b.is_ascii_hexdigit());
    let exp: i64 = exp.parse().ok()?;
    (ok && key.verify("session", &format!("{exp}.{sid}"), tag)).then(|| (exp, sid.to_owned()))
}

fn row_key(exp: i64, sid: &str) -> String {
    format!("{SESSION_PREFIX}{exp:013}:{}", hash_token(sid))
}

/// Begin a session for `principal`: store its row, and return the `Set-Cookie` value.
pub async fn create(console: &Console, principal: &Principal) -> Result<HeaderValue, ConsoleError> {
    let store = console.app.store.as_ref();
    let key = console.keys.get(store).await?;
    let now = crate::clock::now_ms();
    let ttl = console.settings().session_ttl;
    let exp = now + ttl.as_millis() as i64;
    let sid = random_hex(32);
    let row = match principal {
        Principal::Admin => Row {
            kind: "admin".into(),
            tenant: None,
            fp: token_fingerprint(&console.app.admin_hash),
            at: now,
        },
        Principal::Tenant(t) => Row {
            kind: "tenant".into(),
            tenant: Some(t.id.clone()),
            fp: token_fingerprint(&t.token_hash),
            at: now,
        },
    };
    purge_expired(store, SESSION_PREFIX, now).await;
    let json = serde_json::to_string(&row).expect("a row serialises");
    store.set_setting(&row_key(exp, &sid), &json).await?;
    let tag = key.sign("session", &format!("{exp}.{sid}"));
    Ok(set_cookie(
        console,
        cookie_name(console, false),
        &format!("{exp}.{sid}.{tag}"),
        ttl.as_secs(),
    ))
}

/// The live session the request's cookie names, if any.
pub async fn lookup(
    console: &Console,
    headers: &HeaderMap,
) -> Result<Option<Session>, ConsoleError> {
    let Some(value) = cookie(headers, cookie_name(console, false)) else {
        return Ok(None);
    };
    let store = console.app.store.as_ref();
    let key = console.keys.get(store).await?;
    let Some((exp, sid)) = signed_session(&key, value) else {
        return Ok(None);
    };
    if exp <= crate::clock::now_ms() {
        return Ok(None);
    }
    let Some(json) = store.setting(&row_key(exp, &sid)).await? else {
        return Ok(None);
    };
    let Ok(row) = serde_json::from_str::<Row>(&json) else {
        return Ok(None);
    };
    let principal = match (row.kind.as_str(), row.tenant) {
        ("admin", _) if row.fp == token_fingerprint(&console.app.admin_hash) => Principal::Admin,
        ("tenant", Some(id)) => match store.tenant(&id).await {
            Ok(t) if row.fp == token_fingerprint(&t.token_hash) => Principal::Tenant(t),
            Ok(_) | Err(StoreError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        },
        _ => return Ok(None),
    };
    Ok(Some(Session {
        principal,
        csrf: key.sign("csrf", &sid),
        expires_at_ms: exp,
    }))
}

/// End the request's session (delete its row); true when there was one.
pub async fn revoke(console: &Console, headers: &HeaderMap) -> Result<bool, ConsoleError> {
    let Some(value) = cookie(headers, cookie_name(console, false)) else {
        return Ok(false);
    };
    let store = console.app.store.as_ref();
    let key = console.keys.get(store).await?;
    match signed_session(&key, value) {
        Some((exp, sid)) => Ok(store.delete_setting(&row_key(exp, &sid)).await?),
        None => Ok(false),
    }
}

fn pre_nonce(value: &str) -> Option<&str> {
    (value.len() == 32 && value.bytes().all(|b| b.is_ascii_hexdigit())).then_some(value)
}

/// The CSRF token for the forms of a page, and the `Set-Cookie` of a fresh pre-session nonce
/// when the request had neither a signed session cookie nor a nonce.
pub async fn csrf_for(
    console: &Console,
    headers: &HeaderMap,
) -> Result<(String, Option<HeaderValue>), ConsoleError> {
    let key = console.keys.get(console.app.store.as_ref()).await?;
    if let Some((_, sid)) =
        cookie(headers, cookie_name(console, false)).and_then(|v| signed_session(&key, v))
    {
        return Ok((key.sign("csrf", &sid), None));
    }
    if let Some(nonce) = cookie(headers, cookie_name(console, true)).and_then(pre_nonce) {
        return Ok((key.sign("csrf-pre", nonce), None));
    }
    let nonce = random_hex(16);
    let set = set_cookie(console, cookie_name(console, true), &nonce, PRE_SESSION_S);
    Ok((key.sign("csrf-pre", &nonce), Some(set)))
}

/// Does `submitted` match the CSRF token of this request's cookies? With a signed session
/// cookie only that session's token counts (a token of a pre-login cookie, which another
/// site may have planted, never acts for a session); without one, the pre-login cookie's.
/// The same order as [`csrf_for`], so a page's forms always carry the token checked here.
pub async fn csrf_ok(
    console: &Console,
    headers: &HeaderMap,
    submitted: &str,
) -> Result<bool, ConsoleError> {
    let key = console.keys.get(console.app.store.as_ref()).await?;
    if let Some((_, sid)) =
        cookie(headers, cookie_name(console, false)).and_then(|v| signed_session(&key, v))
    {
        return Ok(key.verify("csrf", &sid, submitted));
    }
    Ok(cookie(headers, cookie_name(console, true))
        .and_then(pre_nonce)
        .is_some_and(|nonce| key.verify("csrf-pre", nonce, submitted)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_verify_only_for_their_purpose_and_data() {
        let key = Key::from_secret("k");
        let tag = key.sign("session", "1.abc");
        assert!(key.verify("session", "1.abc", &tag));
        assert!(!key.verify("csrf", "1.abc", &tag));
        assert!(!key.verify("session", "2.abc", &tag));
        assert!(!Key::from_secret("other").verify("session", "1.abc", &tag));
        assert!(!key.verify("session", "1.abc", "not base64!"));
    }

    #[test]
    fn session_cookies_need_a_valid_signature_and_shape() {
        let key = Key::from_secret("k");
        let sid = "a".repeat(64);
        let tag = key.sign("session", &format!("42.{sid}"));
        assert_eq!(
            signed_session(&key, &format!("42.{sid}.{tag}")),
            Some((42, sid.clone()))
        );
        assert_eq!(signed_session(&key, &format!("43.{sid}.{tag}")), None);
        assert_eq!(
            signed_session(&key, &format!("42.{}.{tag}", "b".repeat(64))),
            None
        );
        assert_eq!(signed_session(&key, "42"), None);
    }

    #[test]
    fn cookies_are_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_static("a=1; b=2;c=3"));
        assert_eq!(cookie(&h, "b"), Some("2"));
        assert_eq!(cookie(&h, "c"), Some("3"));
        assert_eq!(cookie(&h, "d"), None);
    }

    #[test]
    fn row_keys_sort_by_expiry() {
        assert!(row_key(999, "x") < row_key(1_000, "x"));
        assert!(row_key(1_700_000_000_000, "x").starts_with("console_session:1700000000000:"));
    }
}
