//! Operations routes: liveness, readiness, Prometheus metrics, and the 404 fallback.
//!
//! The metrics name every tenant's endpoints and destination hosts, so they are the operator's:
//! on the API listener only with the admin token, or without one on the operator listener
//! (`--operator-listen`, or a dispatcher's `--listen`), which tenants are not meant to reach.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::auth::Admin;
use crate::metrics::endpoints::BREAKER_STATES;
use crate::metrics::{EndpointGauges, StateLabel, TenantLabel};
use crate::model::DeliveryState;
use crate::web::problem::Problem;

/// `GET /healthz`: the process is up.
#[utoipa::path(get, path = "/healthz", operation_id = "getHealth", tag = "operations",
    responses((status = 200, body = String, content_type = "text/plain")))]
pub(super) async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: not draining (503 from the moment shutdown begins), and the store takes
/// writes: producers' latest write did not find the database full, and a write probe (a heartbeat committed through the producers' write path, after
/// checking there is room) succeeds within the store deadline.
#[utoipa::path(get, path = "/readyz", operation_id = "getReadiness", tag = "operations",
    responses((status = 200, body = String, content_type = "text/plain"),
        (status = 503, body = Problem, content_type = "application/problem+json")))]
pub(super) async fn readyz(State(state): State<AppState>) -> Result<&'static str, Problem> {
    if state.shutdown.is_draining() {
        return Err(Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "draining: this process is shutting down and takes no new work",
        ));
    }
    if let Some(cause) = state.ingest.full_recently() {
        return Err(Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the store cannot take writes: producers' writes found the database full: {cause}"
            ),
        ));
    }
    state.store.probe_write().await.map_err(|e| {
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the store cannot take writes: {e}"),
        )
    })?;
    Ok("ready\n")
}

/// `GET /metrics` on the API listener: Prometheus text format, or OpenMetrics when the scraper
/// asks for it (`Accept: application/openmetrics-text`, as Prometheus does); admin token only.
#[utoipa::path(get, path = "/metrics", operation_id = "getMetrics", tag = "operations", security(("admin" = [])),
    responses((status = 200, body = String, content_type = "text/plain; version=0.0.4"),
        (status = 401, body = Problem, content_type = "application/problem+json")))]
pub(super) async fn metrics(
    State(state): State<AppState>,
    _: Admin,
    headers: HeaderMap,
) -> Response {
    exposition(&state, &headers).await
}

/// `GET /metrics` on the operator listener: no token (the listener itself is the operator's).
pub(super) async fn operator_metrics(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Response {
    exposition(&state, &headers).await
}

/// OpenMetrics's content type.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

async fn exposition(state: &AppState, headers: &HeaderMap) -> Response {
    refresh_gauges(state).await;
    let wants_openmetrics = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    let (content_type, body) = match wants_openmetrics {
        true => (OPENMETRICS, state.metrics.encode()),
        false => (
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            state.metrics.encode_prometheus_text(),
        ),
    };
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// Set the gauges that are read rather than counted: the queue, the scale signal and the
/// fleet, and this process's endpoints (lanes, governors, breakers).
pub(crate) async fn refresh_gauges(state: &AppState) {
    let m = &state.metrics;
    let fleet = super::scale::fleet(state).await.unwrap_or_default();
    m.fleet.dispatchers.set(i64::from(fleet.dispatchers));
    m.fleet.in_flight.set(i64::from(fleet.in_flight));
    m.fleet.concurrency.set(i64::from(fleet.concurrency));
    m.fleet.arrivals_per_s.set(fleet.arrivals_per_s);
    m.fleet.mean_service_s.set(fleet.mean_service_s);
    if let Ok(stats) = state.store.queue_stats(crate::clock::now_ms()).await {
        let signal = super::scale::signal_from(state, &stats, &fleet, None);
        m.desired_replicas.set(i64::from(signal.desired_replicas));
        for (state, n) in [
            (DeliveryState::Ready, stats.ready),
            (DeliveryState::Leased, stats.leased),
            (DeliveryState::Dead, stats.dead),
        ] {
            m.queue_depth
                .get_or_create(&StateLabel {
                    state: state.name(),
                })
                .set(n as i64);
        }
        // The longest-waiting tenants only: the ones an age alert is about.
        let mut ages = stats.oldest_ready_age_ms;
        ages.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        ages.truncate(m.settings().top_tenants);
        m.oldest_ready_age.clear();
        for (tenant, age_ms) in ages {
            m.oldest_ready_age
                .get_or_create(&TenantLabel { tenant })
                .set(age_ms as f64 / 1000.0);
        }
    }
    if m.delivered_due() {
        match state.store.delivered_count().await {
            Ok(n) => m.delivered_counted(n),
            Err(e) => tracing::debug!(error = %e, "delivered deliveries not counted"),
        }
    }
    if let Some(ctx) = &state.dispatcher {
        m.heartbeat_age_seconds.set(ctx.heartbeat_age_s());
        let view = ctx.view(crate::dispatcher::Look::Endpoints { windows: false });
        let gauges: Vec<(String, EndpointGauges)> = view
            .endpoints
            .into_iter()
            .map(|e| {
                let g = EndpointGauges {
                    lane_size: e.lane_size,
                    lane_in_flight: e.lane_in_use,
                    governor_limit: e.governor_limit,
                    breaker: e.breaker,
                };
                (e.id, g)
            })
            .collect();
        for breaker in BREAKER_STATES {
            let n = gauges.iter().filter(|(_, g)| g.breaker == breaker).count();
            m.breakers
                .get_or_create(&StateLabel { state: breaker })
                .set(n as i64);
        }
        m.endpoints.set_gauges(gauges);
        tenant_gauges(m, &ctx.tenants());
    }
}

/// The tenants' shares of this dispatcher's pool: the top-N by occupancy with series of their
/// own, the others added up in `tenant="other"`.
fn tenant_gauges(m: &crate::metrics::Metrics, views: &[crate::dispatcher::TenantView]) {
    let t = &m.tenants;
    t.clear();
    let competing: Vec<&crate::dispatcher::TenantView> = views
        .iter()
        .filter(|v| v.in_flight > 0 || v.occupancy > 0.005)
        .collect();
    let shares = crate::fairness::fair_shares(
        &competing
            .iter()
            .map(|v| (v.weight, v.max_share))
            .collect::<Vec<_>>(),
    );
    let top = m.settings().top_tenants;
    let (mut other_occupancy, mut other_in_flight) = (0.0, 0);
    // `views` is busiest first.
    for (i, v) in views.iter().enumerate() {
        if i >= top {
            other_occupancy += v.occupancy;
            other_in_flight += i64::from(v.in_flight);
            continue;
        }
        let label = TenantLabel {
            tenant: v.tenant_id.clone(),
        };
        let fair = competing
            .iter()
            .position(|c| c.tenant_id == v.tenant_id)
            .map_or(0.0, |j| shares[j]);
        t.occupancy_share.get_or_create(&label).set(v.occupancy);
        t.fair_share.get_or_create(&label).set(fair);
        t.in_flight
            .get_or_create(&label)
            .set(i64::from(v.in_flight));
        t.weight.get_or_create(&label).set(i64::from(v.weight));
        t.max_share.get_or_create(&label).set(v.max_share);
    }
    if views.len() > top {
        let other = TenantLabel {
            tenant: crate::metrics::endpoints::OTHER.to_owned(),
        };
        t.occupancy_share.get_or_create(&other).set(other_occupancy);
        t.in_flight.get_or_create(&other).set(other_in_flight);
    }
}

/// Unknown routes.
pub(super) async fn not_found() -> Problem {
    Problem::new(StatusCode::NOT_FOUND, "no such route")
}
