//! How people get into the portal and out of the console: a one-time link made by
//! `POST /v1/portal-links` ([`crate::api::portal_links`]) opens a page whose button exchanges
//! the link for a session cookie and redirects to a clean URL, so no token stays in the address
//! bar or history. Signing out deletes the session row.

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::html;
use serde::Deserialize;

use super::Console;
use super::guard::CsrfForm;
use super::page::{ConsoleError, Nav, csrf_field, layout};
use super::session::{self, Principal};
use crate::api::portal_links::{link_expiry, link_key};
use crate::ids::token_fingerprint;
use crate::model::Tenant;

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
    if token_fingerprint(&tenant.token_hash) != fp {
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
