//! The console at `/console/`: a customer portal (one tenant, entered through a one-time portal
//! link the platform creates) and an operator dashboard (admin token sign-in). Pages are
//! rendered on the server, read without JavaScript, fit a 375 px screen, and draw their charts
//! as SVG on the server; the few scripts only enhance.
//!
//! The console never reaches into the dispatcher: evidence comes from
//! [`crate::api::endpoints::status`]'s `endpoint_status`, changes go through the same functions
//! as the JSON routes (so validation and the egress guard are shared, not copied), and
//! everything else is read through the [`crate::store::Store`] trait and this process's metrics.
//!
//! # Layout
//! - [`session`]: the cookie-signing key, signed session cookies backed by session rows in the
//!   store (revocable), CSRF tokens.
//! - [`links`]: the one-time exchange of a portal link (made by `POST /v1/portal-links`) for
//!   a session, and signing out.
//! - [`guard`]: security headers (CSP, framing) and the form extractor that checks CSRF.
//! - [`page`]: the HTML layout, errors as pages, formatting.
//! - [`charts`]: SVG charts drawn on the server.
//! - [`portal`]: the tenant's pages: endpoints, evidence, message log, dead letters.
//! - [`admin`]: the operator's pages: sign-in, fleet, tenants, plan.
//! - [`sampler`]: readings of this process's metrics and of the live dispatchers' heartbeats,
//!   kept for the fleet's rates and the occupancy shares.
//! - [`assets`]: the stylesheet, script and icon, embedded in the binary.
//! - [`settings`]: the console's settings (`--console-…`).

pub mod admin;
pub mod assets;
pub mod charts;
pub mod guard;
pub mod links;
pub mod page;
pub mod portal;
pub mod sampler;
pub mod session;
pub mod settings;

use std::sync::Arc;

use axum::Router;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use crate::api::AppState;

/// What every console handler can reach.
#[derive(Clone)]
pub struct Console {
    /// The API's state: store, settings, dispatcher handle (used only through API functions).
    pub app: AppState,
    /// The console's own settings.
    pub settings: Arc<settings::ConsoleSettings>,
    /// The key that signs cookies and CSRF tokens.
    pub keys: Arc<session::Keys>,
    /// Recent readings of this process's metrics and of the fleet's heartbeats.
    pub sampler: Arc<sampler::Sampler>,
}

impl Console {
    /// The console's settings.
    pub fn settings(&self) -> &settings::ConsoleSettings {
        &self.settings
    }
}

/// The console's routes, under `/console` (merged beside the API's routes on the API
/// listener); its errors are HTML pages.
pub fn router(app: &AppState, settings: settings::ConsoleSettings) -> Router {
    let console = Console {
        keys: Arc::new(session::Keys::new(settings.cookie_key.as_deref())),
        settings: Arc::new(settings),
        sampler: sampler::Sampler::start(
            &app.metrics,
            sampler::FleetSource {
                store: app.store.clone(),
                fresh: app.settings.heartbeat_fresh(),
            },
        ),
        app: app.clone(),
    };
    session::warm_up(&console);
    let inside = Router::new()
        .route("/", get(home))
        .route("/assets/{name}", get(assets::serve))
        .merge(links::routes())
        .merge(admin::routes())
        .merge(portal::routes())
        .fallback(page::not_found)
        .method_not_allowed_fallback(page::method_not_allowed);
    Router::new()
        // A nest matches `/console` and `/console/…` but not `/console/` itself.
        .route("/console/", get(home))
        .nest("/console", inside)
        .layer(axum::middleware::map_response(page::as_page))
        .layer(axum::middleware::from_fn_with_state(
            console.clone(),
            guard::security_headers,
        ))
        .with_state(console)
}

/// `/console/`: where the session belongs, or the sign-in page.
async fn home(
    axum::extract::State(console): axum::extract::State<Console>,
    headers: axum::http::HeaderMap,
) -> Response {
    match session::lookup(&console, &headers).await {
        Ok(Some(s)) if s.is_admin() => Redirect::to("/console/admin/").into_response(),
        Ok(Some(_)) => Redirect::to("/console/portal/").into_response(),
        Ok(None) => Redirect::to("/console/login").into_response(),
        Err(e) => e.into_response(),
    }
}
