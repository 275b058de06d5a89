//! The operator's dashboard: sign-in with the admin token (taken once, exchanged for the same
//! kind of session cookie as the portal's), the fleet, the tenants with their endpoints' breaker
//! and governor state, and `sluice plan`'s recommendation on this process's live figures.
//!
//! # Layout
//! - [`fleet`]: the fleet's rates and in-flight vs capacity from the dispatchers' heartbeats,
//!   replicas, oldest ready age, occupancy share.
//! - [`dispatchers`]: the fleet page's table of live dispatchers and the fleet's totals.
//! - [`tenants`]: tenants and endpoints, and portal links made for a tenant.
//! - [`plan`](mod@plan): the plan table.

pub mod dispatchers;
pub mod fleet;
pub mod plan;
pub mod tenants;

use std::time::Duration;

use axum::Router;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::{Markup, html};
use serde::Deserialize;

use super::Console;
use super::guard::CsrfForm;
use super::page::{ConsoleError, Nav, csrf_field, layout};
use super::session::{self, Principal};
use crate::ids::hash_token;

/// A request inside the operator's session.
pub struct Operator {
    /// The CSRF token for this page's forms.
    pub csrf: String,
}

impl Operator {
    /// A page of the dashboard.
    pub fn page(&self, title: &str, body: Markup) -> Markup {
        layout(title, &Nav::Admin { csrf: &self.csrf }, body)
    }
}

impl FromRequestParts<Console> for Operator {
    type Rejection = ConsoleError;

    async fn from_request_parts(
        parts: &mut Parts,
        console: &Console,
    ) -> Result<Self, ConsoleError> {
        match session::lookup(console, &parts.headers).await? {
            Some(s) if s.is_admin() => Ok(Operator { csrf: s.csrf }),
            _ => Err(ConsoleError::sign_in()),
        }
    }
}

/// The dashboard's routes (under `/console`).
pub fn routes() -> Router<Console> {
    Router::new()
        .route("/login", get(login_page).post(login))
        .route("/admin", get(|| async { Redirect::to("/console/admin/") }))
        .route("/admin/", get(fleet::show))
        .route("/admin/tenants", get(tenants::list))
        .route(
            "/admin/tenants/{id}/portal-link",
            post(tenants::portal_link),
        )
        .route("/admin/tenants/{id}/share", post(tenants::set_share))
        .route("/admin/plan", get(plan::show))
}

fn login_body(csrf: &str, error: Option<&str>) -> Markup {
    html! {
        section.narrow {
            h1 { "Operator sign-in" }
            @if let Some(e) = error { p.form-error role="alert" { (e) } }
            form method="post" action="/console/login" {
                (csrf_field(csrf))
                label for="token" { "Admin token" }
                input id="token" type="password" name="token" autocomplete="off" required;
                p { button.primary type="submit" id="sign-in" { "Sign in" } }
            }
            p.note { "The token is checked once; the session lasts until you sign out or it expires. "
                "Customers open their portal with the link their platform gives them." }
        }
    }
}

/// `GET /console/login`
async fn login_page(
    State(console): State<Console>,
    headers: HeaderMap,
) -> Result<Response, ConsoleError> {
    if session::lookup(&console, &headers)
        .await?
        .is_some_and(|s| s.is_admin())
    {
        return Ok(Redirect::to("/console/admin/").into_response());
    }
    let (csrf, set) = session::csrf_for(&console, &headers).await?;
    let mut response = layout("Sign in", &Nav::Bare, login_body(&csrf, None)).into_response();
    if let Some(set) = set {
        response.headers_mut().append(header::SET_COOKIE, set);
    }
    Ok(response)
}

/// The sign-in form.
#[derive(Debug, Deserialize)]
pub struct LoginForm {
    token: String,
}

/// `POST /console/login`: the admin token, once, for a session cookie.
async fn login(
    State(console): State<Console>,
    headers: HeaderMap,
    CsrfForm(form): CsrfForm<LoginForm>,
) -> Result<Response, ConsoleError> {
    if hash_token(form.token.trim()) != *console.app.admin_hash {
        // A pause makes guessing slower without holding anything but this request.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (csrf, _) = session::csrf_for(&console, &headers).await?;
        let body = login_body(&csrf, Some("That is not the admin token."));
        return Ok((
            StatusCode::UNAUTHORIZED,
            layout("Sign in", &Nav::Bare, body),
        )
            .into_response());
    }
    session::revoke(&console, &headers).await?;
    let cookie = session::create(&console, &Principal::Admin).await?;
    let mut response = Redirect::to("/console/admin/").into_response();
    let h = response.headers_mut();
    h.append(header::SET_COOKIE, cookie);
    let pre = session::cookie_name(&console, true);
    h.append(
        header::SET_COOKIE,
        session::set_cookie(&console, pre, "", 0),
    );
    Ok(response)
}
