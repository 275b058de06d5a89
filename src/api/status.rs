//! `GET /v1/endpoints/{id}/status`: the evidence a tenant reads about its own endpoint —
//! measured response times, lane, in-flight, governor, breaker, rates, sustainable throughput
//! and the one sentence that states them, from the live dispatcher or, in a process without
//! one, from the attempts recorded in the store.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use super::auth::TenantAuth;
use super::error::{ApiResult, Problem};
use super::views::check_id;
use crate::stats::window::DEFAULT_WINDOW;
use crate::stats::{WindowSnapshot, evidence};
use crate::store::{AttemptView, Endpoint};

/// Most attempts read from the store for the fallback figures.
const STORE_SAMPLE: u32 = 10_000;

/// The evidence for one endpoint.
#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointStatus {
    /// `ep_…`
    pub endpoint_id: String,
    /// Is it enabled?
    pub enabled: bool,
    /// Why it was disabled.
    pub disabled_reason: Option<String>,
    /// `dispatcher`: live figures of the dispatcher in this process; `store`: computed from the
    /// attempts recorded in the store (this process runs no dispatcher).
    pub source: String,
    /// What the figures cannot show, when something is missing.
    pub note: Option<String>,
    /// The time the figures cover, seconds.
    pub window_s: f64,
    /// Response times measured in the window.
    pub samples: u64,
    /// Median response time, seconds.
    pub p50_s: Option<f64>,
    /// 95th-percentile response time, seconds.
    pub p95_s: Option<f64>,
    /// 99th-percentile response time, seconds.
    pub p99_s: Option<f64>,
    /// Mean response time, seconds.
    pub mean_s: Option<f64>,
    /// Configured lane: concurrent deliveries allowed (override or default, within the
    /// fairness ceiling).
    pub lane_size: u32,
    /// The lane in force now: min(lane size, governor limit).
    pub effective_lane: u32,
    /// Deliveries in flight now (null without a dispatcher).
    pub in_flight: Option<u32>,
    /// The AIMD governor's limit (null without a dispatcher).
    pub governor_limit: Option<f64>,
    /// `closed`, `open` or `half_open` (null without a dispatcher).
    pub breaker_state: Option<String>,
    /// Deliveries reaching admission, per second.
    pub offered_per_s: f64,
    /// Deliveries answered 2xx, per second.
    pub delivered_per_s: f64,
    /// Failed attempts, per second.
    pub failed_per_s: f64,
    /// Deliveries shed at the full lane, per second.
    pub shed_per_s: f64,
    /// Shed ÷ offered, 0 to 1.
    pub shed_share: f64,
    /// What the lane sustains at the p95: effective lane ÷ p95, per second.
    pub sustainable_per_s: Option<f64>,
    /// The figures in one sentence.
    pub sentence: String,
}

/// The endpoint's evidence; another tenant's endpoint is a 404.
#[utoipa::path(get, path = "/v1/endpoints/{id}/status", tag = "endpoints",
    security(("tenant" = [])),
    params(("id" = String, Path, description = "`ep_…`")),
    responses((status = 200, body = EndpointStatus),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub async fn status(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> ApiResult<Json<EndpointStatus>> {
    check_id("endpoint", &id)?;
    let endpoint = state.store.endpoint(Some(&tenant.id), &id).await?;
    match &state.dispatcher {
        Some(ctx) => Ok(Json(live(&state, ctx, endpoint))),
        None => from_store(&state, endpoint).await.map(Json),
    }
}

fn live(state: &AppState, ctx: &crate::dispatcher::Ctx, e: Endpoint) -> EndpointStatus {
    let concurrency = ctx.concurrency();
    let Some(rt) = ctx.endpoints.cached(&e.id) else {
        let lane = configured_lane(state, &e, concurrency);
        let note = "no delivery to this endpoint has been handled by this dispatcher yet";
        return build(e, "dispatcher", Some(note.into()), &empty(), lane, lane);
    };
    let in_flight = rt.lane.in_use();
    let (snapshot, lane, effective, limit, breaker) = {
        let s = rt.state();
        (
            s.window.snapshot(tokio::time::Instant::now()),
            s.lane_size(&state.settings, concurrency),
            s.effective_lane(&state.settings, concurrency),
            s.governor.limit,
            s.breaker.state_name(),
        )
    };
    let mut out = build(e, "dispatcher", None, &snapshot, lane, effective);
    out.in_flight = Some(in_flight);
    out.governor_limit = Some(limit);
    out.breaker_state = Some(breaker.to_owned());
    out
}

async fn from_store(state: &AppState, e: Endpoint) -> ApiResult<EndpointStatus> {
    let now = crate::clock::now_ms();
    let since = now - DEFAULT_WINDOW.as_millis() as i64;
    let attempts = state
        .store
        .endpoint_attempts(&e.tenant_id, &e.id, since, None, STORE_SAMPLE)
        .await
        .map_err(Problem::from)?;
    let snapshot = snapshot_of(&attempts, DEFAULT_WINDOW);
    let concurrency = state.settings.concurrency.initial();
    let lane = configured_lane(state, &e, concurrency);
    let note = format!(
        "this process runs no dispatcher: the figures are computed from the {} attempts recorded \
         in the store over the last {} s; shedding, in-flight, governor and breaker state live \
         in the dispatcher processes, so offered counts attempts only",
        attempts.len(),
        DEFAULT_WINDOW.as_secs()
    );
    Ok(build(e, "store", Some(note), &snapshot, lane, lane))
}

fn configured_lane(state: &AppState, e: &Endpoint, concurrency: u32) -> u32 {
    e.lane_size
        .unwrap_or(state.settings.lane_size)
        .min(state.settings.lane_ceiling(concurrency))
        .max(1)
}

fn build(
    e: Endpoint,
    source: &str,
    note: Option<String>,
    s: &WindowSnapshot,
    lane: u32,
    effective: u32,
) -> EndpointStatus {
    let ev = evidence(s, effective);
    let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
    EndpointStatus {
        endpoint_id: e.id,
        enabled: e.enabled,
        disabled_reason: e.disabled_reason,
        source: source.to_owned(),
        note,
        window_s: s.span.as_secs_f64(),
        samples: s.samples,
        p50_s: secs(s.p50),
        p95_s: secs(s.p95),
        p99_s: secs(s.p99),
        mean_s: secs(s.mean),
        lane_size: lane,
        effective_lane: effective,
        in_flight: None,
        governor_limit: None,
        breaker_state: None,
        offered_per_s: s.offered_per_s,
        delivered_per_s: s.delivered_per_s,
        failed_per_s: s.failed_per_s,
        shed_per_s: s.shed_per_s,
        shed_share: s.shed_share,
        sustainable_per_s: ev.sustainable_per_s,
        sentence: ev.sentence,
    }
}

fn empty() -> WindowSnapshot {
    snapshot_of(&[], Duration::ZERO)
}

/// A window snapshot from recorded attempts: quantiles by nearest rank, rates over `span`.
/// Shedding is never recorded as an attempt, so it reads zero here.
pub fn snapshot_of(attempts: &[AttemptView], span: Duration) -> WindowSnapshot {
    let mut durations: Vec<u32> = attempts.iter().map(|a| a.duration_ms).collect();
    durations.sort_unstable();
    let n = durations.len();
    let quantile = |q: f64| {
        (n > 0).then(|| {
            let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
            Duration::from_millis(u64::from(durations[rank - 1]))
        })
    };
    let mean = (n > 0).then(|| {
        let total: u64 = durations.iter().map(|d| u64::from(*d)).sum();
        Duration::from_secs_f64(total as f64 / n as f64 / 1000.0)
    });
    let ok = attempts
        .iter()
        .filter(|a| a.status.is_some_and(|s| (200..300).contains(&s)))
        .count();
    let per_s = |count: usize| {
        if span.is_zero() {
            0.0
        } else {
            count as f64 / span.as_secs_f64()
        }
    };
    WindowSnapshot {
        span,
        samples: n as u64,
        mean,
        p50: quantile(0.50),
        p95: quantile(0.95),
        p99: quantile(0.99),
        offered_per_s: per_s(n),
        delivered_per_s: per_s(ok),
        failed_per_s: per_s(n - ok),
        shed_per_s: 0.0,
        held_per_s: 0.0,
        shed_share: 0.0,
        failure_ratio: if n == 0 {
            0.0
        } else {
            (n - ok) as f64 / n as f64
        },
    }
}
