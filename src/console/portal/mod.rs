//! The customer portal: one tenant's endpoints (list, create, edit, pause, rotate, delete),
//! each endpoint's evidence, the message log with deliveries and attempts, and dead letters
//! with replay. Every id in a URL is looked up within the session's tenant, so another tenant's
//! ids are 404 pages, as in the API.
//!
//! # Layout
//! - [`endpoints`]: the list and the actions on an endpoint.
//! - [`form`]: the endpoint form, parsed into the API's own request types, with its HTTPS
//!   section ([`form::https`]).
//! - [`certificate`]: the page that rotates an endpoint's client certificate.
//! - [`evidence`]: one endpoint's page: the evidence panel, charts over the last hour, events.
//! - [`messages`]: the message log and its filters, dead letters, replay and resend.
//! - [`message`]: one message: its payload, deliveries and attempts.
//! - [`payload`]: a payload shown as stored, only re-indented.

pub mod certificate;
pub mod endpoints;
pub mod evidence;
pub mod form;
pub mod message;
pub mod messages;
pub mod payload;

use axum::Router;
use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::routing::{get, post};
use maud::Markup;

use super::Console;
use super::page::{ConsoleError, Nav, layout};
use super::session::{self, Principal};
use crate::model::Tenant;

/// A request inside a tenant's portal session.
pub struct Portal {
    /// The session's tenant.
    pub tenant: Tenant,
    /// The CSRF token for this page's forms.
    pub csrf: String,
}

impl Portal {
    /// A page of this portal.
    pub fn page(&self, title: &str, body: Markup) -> Markup {
        let nav = Nav::Portal {
            tenant: &self.tenant.name,
            csrf: &self.csrf,
        };
        layout(title, &nav, body)
    }
}

impl FromRequestParts<Console> for Portal {
    type Rejection = ConsoleError;

    async fn from_request_parts(
        parts: &mut Parts,
        console: &Console,
    ) -> Result<Self, ConsoleError> {
        match session::lookup(console, &parts.headers).await? {
            Some(s) => match s.principal {
                Principal::Tenant(tenant) => Ok(Portal {
                    tenant,
                    csrf: s.csrf,
                }),
                Principal::Admin => Err(ConsoleError::forbidden(
                    "this is a tenant's portal: open it with a portal link (the operator's \
                     session has the dashboard)",
                )),
            },
            None => Err(ConsoleError::new(
                StatusCode::UNAUTHORIZED,
                "Not signed in",
                "Your portal session has ended or was never opened: open the portal again from \
                 the link your platform gives you.",
            )),
        }
    }
}

/// The portal's routes (under `/console`).
pub fn routes() -> Router<Console> {
    Router::new()
        .route(
            "/portal",
            get(|| async { axum::response::Redirect::to("/console/portal/") }),
        )
        .route("/portal/", get(endpoints::list))
        .route("/portal/endpoints/new", get(endpoints::new_form))
        .route("/portal/endpoints", post(endpoints::create))
        .route("/portal/endpoints/{id}", get(evidence::show))
        .route(
            "/portal/endpoints/{id}/edit",
            get(endpoints::edit_form).post(endpoints::update),
        )
        .route("/portal/endpoints/{id}/enable", post(endpoints::enable))
        .route("/portal/endpoints/{id}/disable", post(endpoints::disable))
        .route(
            "/portal/endpoints/{id}/rotate-secret",
            post(endpoints::rotate),
        )
        .route(
            "/portal/endpoints/{id}/client-certificate",
            get(certificate::rotate_form).post(certificate::rotate),
        )
        .route(
            "/portal/endpoints/{id}/delete",
            get(endpoints::delete_form).post(endpoints::delete),
        )
        .route(
            "/portal/endpoints/{id}/replay",
            post(messages::replay_endpoint),
        )
        .route("/portal/messages", get(messages::log))
        .route("/portal/messages/{id}", get(message::show))
        .route(
            "/portal/deliveries/{id}/replay",
            post(messages::replay_delivery),
        )
        .route(
            "/portal/deliveries/{id}/resend",
            post(messages::resend_delivery),
        )
        .route("/portal/dead-letters", get(messages::dead_letters))
}
