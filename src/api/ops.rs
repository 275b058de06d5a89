//! Operations routes: liveness, readiness, Prometheus metrics, and the 404 fallback.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;

use super::AppState;
use super::error::Problem;
use crate::metrics::{StateLabel, TenantLabel};

/// `GET /healthz`: the process is up.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, body = String, content_type = "text/plain")))]
pub async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: the store answers.
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses((status = 200, body = String, content_type = "text/plain"),
        (status = 503, body = Problem, content_type = "application/problem+json")))]
pub async fn readyz(State(state): State<AppState>) -> Result<&'static str, Problem> {
    state.store.ping().await.map_err(|e| {
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("store not reachable: {e}"),
        )
    })?;
    Ok("ready\n")
}

/// `GET /metrics`: Prometheus text format.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, body = String,
        content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8")))]
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    refresh_gauges(&state).await;
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}

/// Set the gauges that are read rather than counted: queue depth and age, per-endpoint state.
async fn refresh_gauges(state: &AppState) {
    let m = &state.metrics;
    if let Ok(stats) = state.store.queue_stats(crate::clock::now_ms()).await {
        let signal = super::scale::signal_from(state, &stats, None);
        m.desired_replicas.set(i64::from(signal.desired_replicas));
        for (name, n) in [
            ("ready", stats.ready),
            ("leased", stats.leased),
            ("delivered", stats.delivered),
            ("dead", stats.dead),
        ] {
            m.queue_depth
                .get_or_create(&StateLabel { state: name })
                .set(n as i64);
        }
        m.oldest_ready_age.clear();
        for (tenant, age_ms) in stats.oldest_ready_age_ms {
            m.oldest_ready_age
                .get_or_create(&TenantLabel { tenant })
                .set(age_ms as f64 / 1000.0);
        }
    }
    if let Some(ctx) = &state.dispatcher {
        let concurrency = ctx.concurrency();
        m.lane_size.clear();
        m.lane_in_flight.clear();
        m.governor_limit.clear();
        m.breaker_state.clear();
        for rt in ctx.endpoints.all() {
            let label = crate::metrics::Metrics::endpoint(&rt.id);
            // Touch the seed counters so every known endpoint has a series from zero (a
            // family without samples is not exported, and `rate()` needs the zero).
            let _ = m.deliveries_ok.get_or_create(&label);
            let _ = m.deliveries_shed.get_or_create(&label);
            let s = rt.state();
            m.lane_size
                .get_or_create(&label)
                .set(i64::from(s.lane_size(&state.settings, concurrency)));
            m.lane_in_flight
                .get_or_create(&label)
                .set(i64::from(rt.lane.in_use()));
            m.governor_limit.get_or_create(&label).set(s.governor.limit);
            m.breaker_state
                .get_or_create(&label)
                .set(i64::from(s.breaker.state_code()));
        }
    }
}

/// Unknown routes.
pub async fn not_found() -> Problem {
    Problem::new(StatusCode::NOT_FOUND, "no such route")
}
