//! `POST /v1/portal-links`: the platform (with its tenant token, or the admin token naming the
//! tenant) makes a one-time link into a tenant's portal; the console exchanges it for a session
//! (`console::links`).
//!
//! A link is a row `console_link:{expiry}:{SHA-256 of the token}` in the store's settings: it
//! works once because exactly one `delete_setting` of it succeeds, whichever process serves
//! the exchange, and expired ones are purged by range as new links are made. The row keeps
//! the tenant and a fingerprint of its API token at minting: rotating the token voids the link.

use std::time::Duration;

use axum::Json;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::{Admin, TenantAuth};
use super::{AppState, Body};
use crate::ids::{hash_token, random_hex, token_fingerprint};
use crate::model::Tenant;
use crate::web::problem::{ApiResult, Problem};

/// Link rows: `console_link:{expiry ms, 13 digits}:{SHA-256 hex of the token}`.
pub const LINK_PREFIX: &str = "console_link:";
/// Shortest lifetime a caller may ask for, seconds.
const MIN_LINK_S: u32 = 1;

/// What portal links are made with (from `--console-link-ttl` and `--console-public-url`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortalLinkSettings {
    /// How long a link can be opened (it also works only once); 1m–7d.
    pub ttl: Duration,
    /// Public base URL of the console's host (`https://hooks.example.com`); without it links
    /// use the Host of the request that created them.
    pub public_url: Option<String>,
}

impl Default for PortalLinkSettings {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(15 * 60),
            public_url: None,
        }
    }
}

impl PortalLinkSettings {
    /// The longest lifetime a link may have, seconds.
    pub fn ttl_s(&self) -> u32 {
        self.ttl.as_secs().min(u64::from(u32::MAX)) as u32
    }
}

/// `POST /v1/portal-links`
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePortalLink {
    /// The tenant whose portal the link opens: required with the admin token; with a tenant
    /// token, omitted or that tenant's own id.
    pub tenant_id: Option<String>,
    /// Seconds the link stays usable, from 1 up to the configured link lifetime (the default).
    #[serde(default, deserialize_with = "super::whole::option")]
    pub expires_in_s: Option<u32>,
}

/// A one-time portal link.
#[derive(Debug, Serialize, ToSchema)]
pub struct PortalLink {
    /// The URL to give the customer: it works once, until `expires_at`. Absolute from the
    /// configured public URL (on loopback, from this request's loopback Host); else the path.
    pub url: String,
    /// The same link as a path on this host.
    pub path: String,
    /// `ten_…`
    pub tenant_id: String,
    /// When the link stops working if it has not been used.
    pub expires_at: super::time::Timestamp,
}

/// The caller of `POST /v1/portal-links`: the operator or a tenant.
pub enum Caller {
    /// The admin token.
    Admin,
    /// A tenant token.
    Tenant(Tenant),
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Problem> {
        if Admin::from_request_parts(parts, state).await.is_ok() {
            return Ok(Caller::Admin);
        }
        let TenantAuth(t) = TenantAuth::from_request_parts(parts, state).await?;
        Ok(Caller::Tenant(t))
    }
}

/// Create a one-time link into a tenant's portal; it is exchanged for a session cookie.
#[utoipa::path(post, path = "/v1/portal-links", operation_id = "createPortalLink", tag = "portal",
    security(("tenant" = []), ("admin" = [])),
    request_body = CreatePortalLink,
    responses((status = 201, body = PortalLink),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    Body(req): Body<CreatePortalLink>,
) -> ApiResult<(StatusCode, Json<PortalLink>)> {
    let tenant = match (caller, req.tenant_id.as_deref()) {
        (Caller::Admin, None) => {
            return Err(Problem::unprocessable(
                "tenant_id",
                "tenant_id is required with the admin token",
            ));
        }
        (Caller::Admin, Some(id)) => {
            super::views::check_id("tenant", id).map_err(|p| p.field("tenant_id"))?;
            state
                .store
                .tenant(id)
                .await
                .map_err(|e| Problem::from(e).field("tenant_id"))?
        }
        (Caller::Tenant(t), None) => t,
        (Caller::Tenant(t), Some(id)) if id == t.id => t,
        (Caller::Tenant(_), Some(_)) => {
            return Err(Problem::not_found("tenant").field("tenant_id"));
        }
    };
    let max_s = state.portal_links.ttl_s();
    let ttl_s = match req.expires_in_s {
        None => max_s,
        Some(s) if (MIN_LINK_S..=max_s).contains(&s) => s,
        Some(s) => {
            return Err(Problem::unprocessable(
                "expires_in_s",
                format!("expires_in_s {s} must be {MIN_LINK_S}–{max_s} (the configured lifetime)"),
            ));
        }
    };
    let link = issue(&state, &tenant, ttl_s, base_url(&state, &headers)).await?;
    Ok((StatusCode::CREATED, Json(link)))
}

/// Store a link for `tenant` lasting `ttl_s`; `base` prefixes its path into a URL.
pub async fn issue(
    state: &AppState,
    tenant: &Tenant,
    ttl_s: u32,
    base: Option<String>,
) -> ApiResult<PortalLink> {
    let now = crate::clock::now_ms();
    let exp = now + i64::from(ttl_s) * 1000;
    let token = format!("pl_{exp}_{}", random_hex(24));
    crate::store::purge_expired(state.store.as_ref(), LINK_PREFIX, now).await;
    // The fingerprint of the tenant's token now: a rotation before the exchange voids the link.
    let fp = token_fingerprint(&tenant.token_hash);
    let row = serde_json::json!({ "tenant": tenant.id, "fp": fp, "at": now }).to_string();
    state.store.set_setting(&link_key(&token)?, &row).await?;
    let path = format!("/console/enter?token={token}");
    Ok(PortalLink {
        url: base.map_or_else(|| path.clone(), |b| format!("{b}{path}")),
        path,
        tenant_id: tenant.id.clone(),
        expires_at: super::time::Timestamp(exp),
    })
}

/// Where links point: the configured public URL; without it, this request's Host only when it
/// names this machine's loopback (`localhost`, `127.…`, `[::1]`, over plain HTTP), so a Host or
/// `X-Forwarded-Proto` a client chose can never send the one-time token to another host.
/// Anywhere else the link is its path alone, and a warning says to set the public URL.
pub fn base_url(state: &AppState, headers: &HeaderMap) -> Option<String> {
    if let Some(u) = &state.portal_links.public_url {
        return Some(u.clone());
    }
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    if let Some(host) = host.filter(|h| is_loopback_authority(h)) {
        return Some(format!("http://{host}"));
    }
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            "portal links are paths without a host: set --console-public-url (e.g. \
             https://hooks.example.com) to give them absolute URLs"
        );
    });
    None
}

/// Is `authority` (a Host header) this machine's loopback, with an optional port?
fn is_loopback_authority(authority: &str) -> bool {
    let host = match authority.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((ip, port)) if port.is_empty() || port.strip_prefix(':').is_some_and(is_port) => {
                ip
            }
            _ => return false,
        },
        None => match authority.split_once(':') {
            Some((host, port)) if is_port(port) => host,
            Some(_) => return false,
            None => authority,
        },
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn is_port(digits: &str) -> bool {
    !digits.is_empty() && digits.len() <= 5 && digits.bytes().all(|b| b.is_ascii_digit())
}

/// The row key of a link token, checking its shape (`pl_{expiry}_{48 hex}`).
pub(crate) fn link_key(token: &str) -> Result<String, Problem> {
    let bad = || Problem::not_found("portal link");
    let rest = token.strip_prefix("pl_").ok_or_else(bad)?;
    let (exp, random) = rest.split_once('_').ok_or_else(bad)?;
    let exp: i64 = exp.parse().map_err(|_| bad())?;
    if exp < 0 || random.len() != 48 || !random.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    Ok(format!("{LINK_PREFIX}{exp:013}:{}", hash_token(token)))
}

/// The expiry (ms epoch) a link token carries; 0 when it carries none.
pub(crate) fn link_expiry(token: &str) -> i64 {
    token
        .split('_')
        .nth(1)
        .and_then(|e| e.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_hosts_make_absolute_links() {
        for host in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:9",
            "127.8.0.1",
            "[::1]:80",
        ] {
            assert!(is_loopback_authority(host), "{host}");
        }
        for host in [
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1.evil.example",
            "127.0.0.1:80@evil",
            "[::1]evil",
            "10.0.0.1:80",
            "localhost:",
            "localhost:8o",
            "",
        ] {
            assert!(!is_loopback_authority(host), "{host}");
        }
    }

    #[test]
    fn link_tokens_have_one_shape() {
        let good = format!("pl_1700000000000_{}", "a".repeat(48));
        assert!(
            link_key(&good)
                .unwrap()
                .starts_with("console_link:1700000000000:")
        );
        assert_eq!(link_expiry(&good), 1_700_000_000_000);
        for bad in [
            "",
            "pl_",
            "pl_x_aa",
            &format!("pl_-5_{}", "a".repeat(48)),
            &format!("pl_5_{}", "g".repeat(48)),
            &format!("xx_5_{}", "a".repeat(48)),
        ] {
            assert!(link_key(bad).is_err(), "{bad}");
        }
    }
}
