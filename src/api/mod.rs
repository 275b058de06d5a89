//! The HTTP API: tenants, endpoints, messages, health and metrics.
//!
//! Every resource lives under `/v1`; a tenant token sees only its tenant's resources (another
//! tenant's id is a 404), errors are `application/problem+json` naming the field at fault.

pub mod auth;
mod body;
mod deliveries;
mod endpoint_actions;
mod endpoints;
pub mod error;
pub mod ingest;
mod messages;
pub mod openapi;
mod ops;
pub mod ops_webhooks;
mod page;
mod scale;
mod status;
mod tenants;
mod views;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

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
        if let Some(ctx) = &dispatcher {
            crate::notify::spawn_throttle_watch(Arc::downgrade(ctx), store.clone());
        }
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

/// The router with every route, each registered together with its OpenAPI description.
pub fn router(state: AppState) -> Router {
    let body_limit = state.max_payload_bytes + 64 * 1024;
    let (router, doc) = documented().split_for_parts();
    openapi::set_document(&doc);
    router
        .fallback(ops::not_found)
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}

/// The OpenAPI document, as the router builds it.
pub fn openapi_document() -> utoipa::openapi::OpenApi {
    documented().into_openapi()
}

fn documented() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(ops::healthz))
        .routes(routes!(ops::readyz))
        .routes(routes!(ops::metrics))
        .routes(routes!(openapi::document))
        .routes(routes!(tenants::create, tenants::list))
        .routes(routes!(tenants::get, tenants::delete))
        .routes(routes!(tenants::rotate_token))
        .routes(routes!(endpoints::create, endpoints::list))
        .routes(routes!(
            endpoints::get,
            endpoints::update,
            endpoints::delete
        ))
        .routes(routes!(endpoint_actions::enable))
        .routes(routes!(endpoint_actions::disable))
        .routes(routes!(endpoint_actions::rotate_secret))
        .routes(routes!(endpoint_actions::events))
        .routes(routes!(status::status))
        .routes(routes!(deliveries::by_endpoint))
        .routes(routes!(deliveries::endpoint_attempts))
        .routes(routes!(deliveries::replay_endpoint))
        .routes(routes!(messages::create, messages::list))
        .routes(routes!(messages::get))
        .routes(routes!(deliveries::by_message))
        .routes(routes!(deliveries::message_attempts))
        .routes(routes!(deliveries::get))
        .routes(routes!(deliveries::attempts))
        .routes(routes!(deliveries::replay_one))
        .routes(routes!(deliveries::dead_letters))
        .routes(routes!(scale::get))
        .routes(routes!(
            ops_webhooks::put,
            ops_webhooks::get,
            ops_webhooks::delete
        ))
}
