//! The HTTP API: tenants, endpoints, messages, health and metrics.
//!
//! Every resource lives under `/v1`; a tenant token sees only its tenant's resources (another
//! tenant's id is a 404), errors are `application/problem+json` naming the field at fault.

pub mod auth;
mod body;
pub mod constraints;
pub(crate) mod endpoints;
mod event_types;
pub mod ingest;
pub(crate) mod messages;
pub mod openapi;
mod ops;
pub mod ops_webhooks;
mod page;
pub mod panics;
pub mod portal_links;
pub mod problems;
pub(crate) mod scale;
mod store_errors;
pub(crate) mod tenants;
pub mod time;
pub(crate) mod views;
mod whole;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::get;
use axum::{Extension, Router};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::dispatcher::{Ctx, DispatchSettings};
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
    /// How portal links are made (`POST /v1/portal-links`).
    pub portal_links: Arc<portal_links::PortalLinkSettings>,
    /// The process's shutdown: `/readyz` answers 503 from the moment it stops claiming.
    pub shutdown: crate::shutdown::Shutdown,
}

impl AppState {
    /// State over `store`; starts the ingest batcher, whose requests wait at most
    /// `store_deadline` for their commit.
    pub fn new(
        store: SharedStore,
        metrics: Arc<Metrics>,
        dispatcher: Option<Arc<Ctx>>,
        settings: Arc<DispatchSettings>,
        admin_hash: String,
        max_payload_bytes: usize,
        store_deadline: std::time::Duration,
    ) -> Self {
        Self {
            ingest: ingest::Ingest::start(store.clone(), metrics.clone(), store_deadline),
            egress: Arc::new(EgressPolicy::new(settings.allow_networks.clone())),
            store,
            metrics,
            dispatcher,
            settings,
            admin_hash: Arc::new(admin_hash),
            tokens: Arc::new(auth::TokenCache::default()),
            max_payload_bytes,
            portal_links: Arc::default(),
            shutdown: crate::shutdown::Shutdown::new(),
        }
    }

    /// The same state, stopped by `shutdown`.
    pub fn with_shutdown(mut self, shutdown: crate::shutdown::Shutdown) -> Self {
        self.shutdown = shutdown;
        self
    }

    /// The same state with these portal-link settings.
    pub fn with_portal_links(mut self, links: portal_links::PortalLinkSettings) -> Self {
        self.portal_links = Arc::new(links);
        self
    }
}

/// Where this process serves `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsOn {
    /// On the API listener, to the admin token only.
    ApiWithAdminToken,
    /// Only on the operator listener.
    OperatorListener,
}

/// The API router alone, ready to serve: [`routes`] inside [`edge`]. `sluice serve` merges
/// the console in between ([`crate::serve`]).
pub fn router(state: AppState, metrics: MetricsOn) -> Router {
    let metrics_registry = Arc::clone(&state.metrics);
    edge(routes(state, metrics), metrics_registry)
}

/// Every API route, each registered together with its OpenAPI description, answering its
/// errors as problem+json under the body limit. Routers answering otherwise (the console's
/// HTML pages) are merged beside it, not inside.
pub fn routes(state: AppState, metrics: MetricsOn) -> Router {
    let (router, doc) = documented(metrics).split_for_parts();
    let caps = state.settings.timeout_caps;
    let limits = constraints::Limits {
        timeout_caps_ms: [caps.connect, caps.read, caps.total].map(|d| d.as_millis() as u64),
        link_ttl_s: state.portal_links.ttl_s(),
    };
    let document = openapi::Document::new(&doc, &limits);
    finish(router.layer(Extension(document)), state)
}

/// What wraps a listener's whole router: a panicking handler answers 500 (and is counted),
/// and every request answered leaves one access-log line.
pub fn edge(router: Router, metrics: Arc<Metrics>) -> Router {
    access_log(panics::caught(router, metrics))
}

/// One `sluice::access` line per request answered: method, path (never the query string: a
/// portal link's token travels there), status and latency. Silence it with
/// `SLUICE_LOG=info,sluice::access=off`.
fn access_log(router: Router) -> Router {
    use tower_http::trace::TraceLayer;
    let layer = TraceLayer::new_for_http()
        .make_span_with(|req: &axum::http::Request<axum::body::Body>| {
            tracing::info_span!(
                target: "sluice::access",
                "request",
                method = %req.method(),
                path = %req.uri().path(),
            )
        })
        .on_request(())
        .on_response(
            |res: &axum::http::Response<axum::body::Body>,
             latency: std::time::Duration,
             _: &tracing::Span| {
                tracing::info!(
                    target: "sluice::access",
                    status = res.status().as_u16(),
                    latency_us = latency.as_micros() as u64,
                    "answered"
                );
            },
        )
        .on_body_chunk(())
        .on_eos(())
        .on_failure(());
    router.layer(layer)
}

/// The operator router: `/healthz`, `/readyz` and `/metrics` without a token, nothing else.
pub fn operator_router(state: AppState) -> Router {
    let router = Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::operator_metrics));
    let metrics = Arc::clone(&state.metrics);
    edge(finish(router, state), metrics)
}

/// What every router shares: problem+json for every error, the body limit.
fn finish(router: Router<AppState>, state: AppState) -> Router {
    let body_limit = state.max_payload_bytes + 64 * 1024;
    router
        .fallback(ops::not_found)
        .method_not_allowed_fallback(problems::method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::map_response(problems::as_problem))
        .with_state(state)
}

/// The OpenAPI document of the API listener when it serves `/metrics`.
pub fn openapi_document() -> utoipa::openapi::OpenApi {
    documented(MetricsOn::ApiWithAdminToken).into_openapi()
}

fn documented(metrics: MetricsOn) -> OpenApiRouter<AppState> {
    let routes = OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(ops::healthz))
        .routes(routes!(ops::readyz));
    let routes = match metrics {
        MetricsOn::ApiWithAdminToken => routes.routes(routes!(ops::metrics)),
        MetricsOn::OperatorListener => routes,
    };
    routes
        .routes(routes!(openapi::document))
        .routes(routes!(tenants::create, tenants::list))
        .routes(routes!(tenants::get, tenants::update, tenants::delete))
        .routes(routes!(tenants::status::status))
        .routes(routes!(tenants::rotate_token))
        .routes(routes!(endpoints::create, endpoints::list))
        .routes(routes!(
            endpoints::get,
            endpoints::update,
            endpoints::delete
        ))
        .routes(routes!(endpoints::actions::enable))
        .routes(routes!(endpoints::actions::disable))
        .routes(routes!(endpoints::actions::rotate_secret))
        .routes(routes!(endpoints::jwks::jwks))
        .routes(routes!(endpoints::tls::rotate_client_certificate))
        .routes(routes!(endpoints::actions::events))
        .routes(routes!(endpoints::status::status))
        .routes(routes!(messages::deliveries::by_endpoint))
        .routes(routes!(messages::deliveries::endpoint_attempts))
        .routes(routes!(messages::redelivery::replay_endpoint))
        .routes(routes!(messages::redelivery::recover))
        .routes(routes!(messages::create, messages::list))
        .routes(routes!(messages::get))
        .routes(routes!(messages::deliveries::by_message))
        .routes(routes!(messages::deliveries::message_attempts))
        .routes(routes!(messages::deliveries::get))
        .routes(routes!(messages::deliveries::attempts))
        .routes(routes!(messages::redelivery::replay_one))
        .routes(routes!(messages::redelivery::resend))
        .routes(routes!(messages::redelivery::dead_letters))
        .routes(routes!(scale::get))
        .routes(routes!(portal_links::create))
        .routes(routes!(
            ops_webhooks::put,
            ops_webhooks::get,
            ops_webhooks::delete
        ))
}
