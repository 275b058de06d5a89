//! How people get into the portal and out of the console: `POST /v1/portal-links` (the
//! platform, with its tenant token or the admin token naming the tenant) makes a one-time link;
//! opening it shows a button whose form exchanges the link for a session cookie and redirects
//! to a clean URL, so no token stays in the address bar or history. Signing out deletes the
//! session row.
//!
//! A link is a row `console_link:{expiry}:{SHA-256 of the token}` in the store's settings: it
//! works once because exactly one `delete_setting` of it succeeds, whichever process serves
//! the exchange, and expired ones are purged by range as new links are made. The row keeps
//! the tenant and a fingerprint of its API token at minting: rotating the token voids the link.

use axum::Json;
use axum::Router;
use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::html;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::Console;
use super::guard::CsrfForm;
use super::page::{ConsoleError, Nav, csrf_field, layout};
use super::session::{self, Principal};
use crate::api::auth::{Admin, TenantAuth};
use crate::api::error::{ApiResult, Problem};
use crate::api::{AppState, Body};
use crate::ids::hash_token;
use crate::store::Tenant;

/// Link rows: `console_link:{expiry ms, 13 digits}:{SHA-256 hex of the token}`.
pub const LINK_PREFIX: &str = "console_link:";
/// Shortest lifetime a caller may ask for, seconds.
const MIN_LINK_S: u32 = 1;

/// `POST /v1/portal-links`
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePortalLink {
    /// The tenant whose portal the link opens: required with the admin token; with a tenant
    /// token, omitted or that tenant's own id.
    pub tenant_id: Option<String>,
    /// Seconds the link stays usable, from 1 up to the configured link lifetime (the default).
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
    pub expires_at: crate::api::time::Timestamp,
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
            crate::api::views::check_id("tenant", id).map_err(|p| p.field("tenant_id"))?;
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
    let max_s = state.console.link_ttl.as_secs().min(u64::from(u32::MAX)) as u32;
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
    let token = format!("pl_{exp}_{}", session::random_hex(24));
    session::purge_expired(state.store.as_ref(), LINK_PREFIX, now).await;
    // The fingerprint of the tenant's token now: a rotation before the exchange voids the link.
    let fp = session::fingerprint(&tenant.token_hash);
    let row = serde_json::json!({ "tenant": tenant.id, "fp": fp, "at": now }).to_string();
    state.store.set_setting(&link_key(&token)?, &row).await?;
    let path = format!("/console/enter?token={token}");
    Ok(PortalLink {
        url: base.map_or_else(|| path.clone(), |b| format!("{b}{path}")),
        path,
        tenant_id: tenant.id.clone(),
        expires_at: crate::api::time::Timestamp(exp),
    })
}

/// Where links point: the configured public URL; without it, this request's Host only when it
/// names this machine's loopback (`localhost`, `127.…`, `[::1]`, over plain HTTP), so a Host or
/// `X-Forwarded-Proto` a client chose can never send the one-time token to another host.
/// Anywhere else the link is its path alone, and a warning says to set the public URL.
pub fn base_url(state: &AppState, headers: &HeaderMap) -> Option<String> {
    if let Some(u) = &state.console.public_url {
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
fn link_key(token: &str) -> Result<String, Problem> {
    let bad = || Problem::not_found("portal link");
    let rest = token.strip_prefix("pl_").ok_or_else(bad)?;
    let (exp, random) = rest.split_once('_').ok_or_else(bad)?;
    let exp: i64 = exp.parse().map_err(|_| bad())?;
    if exp < 0 || random.len() != 48 || !random.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    Ok(format!("{LINK_PREFIX}{exp:013}:{}", hash_token(token)))
}

fn link_expiry(token: &str) -> i64 {
    token
        .split('_')
        .nth(1)
        .and_then(|e| e.parse().ok())
        .unwrap_or(0)
}

/// The stored tenant of a usable link.
async fn tenant_of_link(console: &Console, token: &str) -> Result<Tenant, ConsoleError> {
    let gone = || {
        ConsoleError::new(
            StatusCode::GONE,
            "This link no longer works",
            "Portal links work once and expire after a few minutes: ask for a new one where you \
             found this one.",
        )
    };
    let key = link_key(token).map_err(|_| gone())?;
    if link_expiry(token) <= crate::clock::now_ms() {
        return Err(gone());
    }
    let row = console.app.store.setting(&key).await?.ok_or_else(gone)?;
    let row = serde_json::from_str::<serde_json::Value>(&row).map_err(|_| gone())?;
    let (Some(id), Some(fp)) = (row["tenant"].as_str(), row["fp"].as_str()) else {
        return Err(gone());
    };
    let tenant = console.app.store.tenant(id).await.map_err(|_| gone())?;
    // Minted under a token that has since been rotated (or before links carried one).
    if session::fingerprint(&tenant.token_hash) != fp {
        return Err(gone());
    }
    Ok(tenant)
}

/// The console routes of this module.
pub fn routes() -> Router<Console> {
    Router::new()
        .route("/enter", get(enter_page).post(enter))
        .route("/logout", post(logout))
}

/// `?token=` of the link.
#[derive(Debug, Deserialize)]
pub struct EnterQuery {
    token: Option<String>,
}

/// The form that exchanges the link.
#[derive(Debug, Deserialize)]
pub struct EnterForm {
    token: String,
}

/// `GET /console/enter?token=…`: a button, not an exchange, so link previews and prefetches
/// cannot use the link up.
async fn enter_page(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(q): Query<EnterQuery>,
) -> Result<Response, ConsoleError> {
    let token = q.token.unwrap_or_default();
    let tenant = tenant_of_link(&console, &token).await?;
    let (csrf, set) = session::csrf_for(&console, &headers).await?;
    let body = html! {
        section.narrow {
            h1 { "Webhook portal" }
            p { "Open the webhook portal of " strong { (tenant.name) } ": endpoints, delivery logs and evidence." }
            form method="post" action="/console/enter" {
                (csrf_field(&csrf))
                input type="hidden" name="token" value=(token);
                button.primary type="submit" id="enter" { "Open the portal" }
            }
            p.muted { "This link works once. Your session lasts until you sign out or it expires." }
        }
    };
    let mut response = layout("Open the portal", &Nav::Bare, body).into_response();
    if let Some(set) = set {
        response.headers_mut().append(header::SET_COOKIE, set);
    }
    Ok(response)
}

/// `POST /console/enter`: use the link up, begin the session, go to a clean URL.
async fn enter(
    State(console): State<Console>,
    headers: HeaderMap,
    CsrfForm(form): CsrfForm<EnterForm>,
) -> Result<Response, ConsoleError> {
    let tenant = tenant_of_link(&console, &form.token).await?;
    let key = link_key(&form.token).map_err(ConsoleError::from)?;
    if !console.app.store.delete_setting(&key).await? {
        // Another exchange of the same link won the race.
        return Err(ConsoleError::new(
            StatusCode::GONE,
            "This link no longer works",
            "This portal link has already been used: ask for a new one.",
        ));
    }
    session::revoke(&console, &headers).await?;
    let cookie = session::create(&console, &Principal::Tenant(tenant)).await?;
    let mut response = Redirect::to("/console/portal/").into_response();
    let h = response.headers_mut();
    h.append(header::SET_COOKIE, cookie);
    let pre = session::cookie_name(&console, true);
    h.append(
        header::SET_COOKIE,
        session::set_cookie(&console, pre, "", 0),
    );
    Ok(response)
}

/// No fields besides the CSRF token.
#[derive(Debug, Deserialize)]
pub struct Empty {}

/// `POST /console/logout`: delete the session row and the cookie.
async fn logout(
    State(console): State<Console>,
    headers: HeaderMap,
    CsrfForm(_): CsrfForm<Empty>,
) -> Result<Response, ConsoleError> {
    session::revoke(&console, &headers).await?;
    let body = html! {
        section.narrow {
            h1 { "Signed out" }
            p { "Your console session has ended. Customers open the portal again from their platform's link; operators "
                a href="/console/login" { "sign in" } " with the admin token." }
        }
    };
    let mut response = layout("Signed out", &Nav::Bare, body).into_response();
    let name = session::cookie_name(&console, false);
    response.headers_mut().append(
        header::SET_COOKIE,
        session::set_cookie(&console, name, "", 0),
    );
    Ok(response)
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
