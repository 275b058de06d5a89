//! The HTTP API: tenants, endpoints, messages, health and metrics.
//!
//! Every resource lives under `/v1`; a tenant token sees only its tenant's resources (another
//! tenant's id is a 404), errors are `application/problem+json` naming the field at fault.

pub mod auth;
mod body;
mod endpoints;
pub mod error;
pub mod ingest;
mod messages;
mod ops;
mod page;
mod tenants;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

use crate::config::DispatchSettings;
use crate::dispatcher::Ctx;
use crate::egress::EgressPolicy;
use crate::metrics::Metrics;
use crate::store::SharedStore;

pub use body::Body;

/// Everything a handler may need.
#[derive(Clone)]
pub struct AppState {
    /// The durable store.
    pub store: SharedStore,
    /// Metrics registry.
    pub metrics: Arc<Metrics>,
    /// The dispatcher in this process, if it runs one (live lane, governor and breaker state).
    pub dispatcher: Option<Arc<Ctx>>,
    /// Dispatcher settings (defaults, caps, rotation overlap).
    pub settings: Arc<DispatchSettings>,
    /// Destination checks for endpoint URLs.
    pub egress: Arc<EgressPolicy>,
    /// SHA-256 of the admin token.
    pub admin_hash: Arc<String>,
    /// Recently verified tenant tokens.
    pub tokens: Arc<auth::TokenCache>,
    /// Group-commit ingest.
    pub ingest: ingest::Ingest,
    /// Largest accepted payload, bytes.
    pub max_payload_bytes: usize,
}

impl AppState {
    /// State over `store`; starts the ingest batcher.
    pub fn new(
        store: SharedStore,
        metrics: Arc<Metrics>,
        dispatcher: Option<Arc<Ctx>>,
        settings: Arc<DispatchSettings>,
        admin_hash: String,
        max_payload_bytes: usize,
    ) -> Self {
        Self {
            ingest: ingest::Ingest::start(store.clone(), metrics.clone()),
            egress: Arc::new(EgressPolicy::new(settings.allow_networks.clone())),
            store,
            metrics,
            dispatcher,
            settings,
            admin_hash: Arc::new(admin_hash),
            tokens: Arc::new(auth::TokenCache::default()),
            max_payload_bytes,
        }
    }
}

/// The router with every route.
pub fn router(state: AppState) -> Router {
    let body_limit = state.max_payload_bytes + 64 * 1024;
    Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/v1/tenants", post(tenants::create).get(tenants::list))
        .route(
            "/v1/tenants/{id}",
            get(tenants::get).delete(tenants::delete),
        )
        .route("/v1/tenants/{id}/rotate-token", post(tenants::rotate_token))
        .route("/v1/endpoints", post(endpoints::create).get(endpoints::list))
        .route(
            "/v1/endpoints/{id}",
            get(endpoints::get)
                .patch(endpoints::update)
                .delete(endpoints::delete),
        )
        .route("/v1/messages", post(messages::create).get(messages::list))
        .route("/v1/messages/{id}", get(messages::get))
        .fallback(ops::not_found)
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}
