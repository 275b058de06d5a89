//! `GET /v1/endpoints/{id}/status`: the evidence a tenant reads about its own endpoint —
//! measured response times, lane, in-flight, governor, breaker, rates, sustainable throughput
//! and the one sentence that states them, from the live dispatcher or, in a process without
//! one, from the attempts recorded in the store.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use serde::Serialize;
use utoipa::ToSchema;

use crate::api::AppState;
use crate::api::auth::TenantAuth;
use crate::api::tenants::status::ShareStatus;
use crate::api::time::Timestamp;
use crate::api::views::check_id;
use crate::dispatcher::{EndpointView, LaneBasis, Look};
use crate::model::{AttemptView, Endpoint};
use crate::stats::window::DEFAULT_WINDOW;
use crate::stats::{AttemptKind, Condition, FailureCounts, Standing, WindowSnapshot, evidence};
use crate::web::problem::{ApiResult, Problem};

/// Most attempts read from the store for the fallback figures.
const STORE_SAMPLE: u32 = 10_000;

/// The evidence for one endpoint.
#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointStatus {
    /// `ep_…`
    pub endpoint_id: String,
    /// What it is doing: `delivering`, `failing` (more attempts failed than were delivered),
    /// `paused` (a Retry-After pause), `breaker_open`, `disabled`, or `idle` (no attempt in the
    /// window). The sentence leads with it.
    pub condition: Condition,
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
    /// 95th-percentile response time of the delivered attempts only, seconds: what the
    /// sustainable rate is computed from.
    pub delivered_p95_s: Option<f64>,
    /// Failed attempts in the window, by how they failed.
    pub failures: FailureCounts,
    /// The lane: concurrent deliveries allowed (the endpoint's override as stored now, else
    /// Little's Law on its window — offered rate × mean service time × headroom, widened until
    /// at most 1 % of Poisson arrivals would wait past the lane deadline — else the default;
    /// within the fairness ceiling).
    pub lane_size: u32,
    /// `override`, `measured` or `default`: where `lane_size` comes from (`default` without a
    /// dispatcher, or before the window holds 20 attempts).
    pub lane_basis: crate::dispatcher::LaneBasis,
    /// The lane in force now: min(lane size, governor limit).
    pub effective_lane: u32,
    /// Deliveries in flight now (null without a dispatcher).
    pub in_flight: Option<u32>,
    /// The AIMD governor's limit (null without a dispatcher).
    pub governor_limit: Option<f64>,
    /// Is a Retry-After pause running (null without a dispatcher)?
    pub paused: Option<bool>,
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
    /// Deliveries held by the endpoint's rate limit (requeued at their turns), per second.
    pub rate_limited_per_s: f64,
    /// Shed ÷ offered, 0 to 1.
    pub shed_share: f64,
    /// What the lane sustains at the deliveries' p95: effective lane ÷ delivered p95, per
    /// second, never above the rate limit (null without a delivery in the window).
    pub sustainable_per_s: Option<f64>,
    /// The figures in one sentence; when the account's deliveries are being held to its share
    /// of the pool, it says so (see `account_share`).
    pub sentence: String,
    /// The account's share of the pool: whether its deliveries wait for their turn beside other
    /// accounts' (`condition: held`), with the figures. It names no other account.
    pub account_share: crate::api::tenants::status::ShareStatus,
    /// For a FIFO endpoint: the delivery everything else waits behind, and how many wait
    /// (null for an unordered endpoint).
    pub fifo: Option<FifoStatus>,
}

/// A FIFO endpoint's queue as the store holds it now.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FifoStatus {
    /// The head: the earliest accepted message not yet delivered or dead-lettered, attempted
    /// (or waiting for its turn) alone; null when nothing is pending.
    pub head: Option<FifoHead>,
    /// Deliveries waiting behind it.
    pub behind: u64,
    /// Whether the head is failing and holding the rest: its last attempt failed.
    pub held_by_head: bool,
}

/// The head of a FIFO endpoint's queue.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FifoHead {
    /// Its delivery (`dlv_…`).
    pub delivery_id: String,
    /// Its message.
    pub message_id: String,
    /// `ready` (waiting for its turn or its retry) or `leased` (being attempted).
    pub state: crate::api::views::StateParam,
    /// Attempts made so far.
    pub attempts: u32,
    /// When it is (or was) next due.
    pub next_attempt_at: Timestamp,
    /// The last attempt's HTTP status, if it got one.
    pub last_status: Option<u16>,
    /// The last attempt's error kind, if it failed without one.
    pub last_error: Option<String>,
}

/// The endpoint's evidence; another tenant's endpoint is a 404.
#[utoipa::path(get, path = "/v1/endpoints/{id}/status", operation_id = "getEndpointStatus", tag = "endpoints",
    security(("tenant" = [])),
    params(("id" = String, Path, description = "`ep_…`")),
    responses((status = 200, body = EndpointStatus),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn status(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> ApiResult<Json<EndpointStatus>> {
    endpoint_status(&state, &tenant.id, &id).await.map(Json)
}

/// A FIFO endpoint's head and backlog (a store that does not answer leaves them empty, not the
/// evidence).
async fn fifo_status(state: &AppState, id: &str) -> FifoStatus {
    let head = state.store.fifo_head(id).await.ok().flatten();
    let waiting = state.store.endpoint_waiting(id).await.unwrap_or(0);
    // The ready count includes the head unless it is in flight.
    let behind = match &head {
        Some(h) if h.state == crate::model::DeliveryState::Ready => waiting.saturating_sub(1),
        _ => waiting,
    };
    let failing = head
        .as_ref()
        .is_some_and(|h| h.attempts > 0 && (h.last_status.is_some() || h.last_error.is_some()));
    FifoStatus {
        held_by_head: failing && behind > 0,
        behind,
        head: head.map(|h| FifoHead {
            delivery_id: state.store.row_ids().format(crate::ids::DELIVERY, h.id),
            message_id: h.message_id,
            state: h.state.into(),
            attempts: h.attempts,
            next_attempt_at: Timestamp::from_ms(h.visible_at_ms),
            last_status: h.last_status,
            last_error: h.last_error,
        }),
    }
}

/// The evidence for `tenant`'s endpoint `id` (another tenant's id is a 404): what the JSON
/// route answers and what the console shows.
pub(crate) async fn endpoint_status(
    state: &AppState,
    tenant: &str,
    id: &str,
) -> ApiResult<EndpointStatus> {
    check_id("endpoint", id)?;
    let endpoint = state.store.endpoint(Some(tenant), id).await?;
    let policy = state.store.tenant(tenant).await?.share;
    let share = crate::api::tenants::status::share_status(state, tenant, policy).await?;
    // Counted only where a rate limit may be holding deliveries back: the sentence says how many
    // wait. A store that does not answer leaves the count out, not the evidence.
    let waiting = match endpoint.rate_limit {
        Some(_) => state.store.endpoint_waiting(&endpoint.id).await.ok(),
        None => None,
    };
    let fifo = endpoint.ordering.is_fifo();
    let mut out = match &state.dispatcher {
        Some(ctx) => live(state, ctx, endpoint, share, waiting),
        None => from_store(state, endpoint, share, waiting).await?,
    };
    if fifo {
        out.fifo = Some(fifo_status(state, &out.endpoint_id).await);
    }
    if let Some(FifoStatus {
        head: Some(head),
        behind,
        held_by_head: true,
    }) = &out.fifo
    {
        let last = match (head.last_status, &head.last_error) {
            (Some(status), _) => format!("HTTP {status}"),
            (None, Some(error)) => error.clone(),
            (None, None) => "a failure".into(),
        };
        out.sentence = format!(
            "FIFO: {behind} deliveries wait behind message {} ({} attempts, last {last}); they go \
             once it is delivered or dead-lettered; {}",
            head.message_id, head.attempts, out.sentence
        );
    }
    if out.account_share.condition == crate::api::tenants::status::ShareCondition::Held {
        out.sentence = format!(
            "{}; your account's deliveries are {}",
            out.sentence, out.account_share.sentence
        );
    }
    Ok(out)
}

fn live(
    state: &AppState,
    ctx: &crate::dispatcher::Ctx,
    e: Endpoint,
    share: ShareStatus,
    waiting: Option<u64>,
) -> EndpointStatus {
    let view = ctx.view(Look::Endpoint(&e.id));
    // The lane as stored now, not as the dispatcher last loaded it: a change shows at once.
    let lane = configured_lane(state, &e, view.pool.concurrency);
    let Some(live) = view.endpoints.into_iter().next() else {
        let note = "no delivery to this endpoint has been handled by this dispatcher yet";
        return build(
            e,
            "dispatcher",
            Some(note.into()),
            &empty(),
            lane,
            lane,
            None,
            share,
            waiting,
        );
    };
    let snapshot = live.window.clone().unwrap_or_else(empty);
    // An override is read from the store, so a change shows before the dispatcher reloads the
    // endpoint; without one, the dispatcher's measured (or default) lane, unless what it holds
    // is an override the store no longer has.
    let (lane, basis) = match (e.lane_size, live.lane_basis) {
        (Some(_), _) => (lane, LaneBasis::Override),
        (None, LaneBasis::Override) => (lane, LaneBasis::Default),
        (None, basis) => (live.lane_size, basis),
    };
    let effective = live_lane(lane, live.governor_limit);
    let mut out = build(
        e,
        "dispatcher",
        None,
        &snapshot,
        lane,
        effective,
        Some(&live),
        share,
        waiting,
    );
    out.lane_basis = basis;
    out.in_flight = Some(live.lane_in_use);
    out.governor_limit = Some(live.governor_limit);
    out.paused = Some(live.paused);
    out.breaker_state = Some(live.breaker.to_owned());
    out
}

/// The lane in force: the stored lane, narrowed by the governor's live limit (at least 1).
fn live_lane(lane: u32, governor_limit: f64) -> u32 {
    (governor_limit.floor() as u32).min(lane).max(1)
}

async fn from_store(
    state: &AppState,
    e: Endpoint,
    share: ShareStatus,
    waiting: Option<u64>,
) -> ApiResult<EndpointStatus> {
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
    Ok(build(
        e,
        "store",
        Some(note),
        &snapshot,
        lane,
        lane,
        None,
        share,
        waiting,
    ))
}

fn configured_lane(state: &AppState, e: &Endpoint, concurrency: u32) -> u32 {
    e.lane_size
        .unwrap_or(state.settings.lane_size)
        .min(state.settings.lane_ceiling(concurrency))
        .max(1)
}

#[allow(clippy::too_many_arguments)]
fn build(
    e: Endpoint,
    source: &str,
    note: Option<String>,
    s: &WindowSnapshot,
    lane: u32,
    effective: u32,
    live: Option<&EndpointView>,
    account_share: ShareStatus,
    waiting: Option<u64>,
) -> EndpointStatus {
    let standing = Standing {
        disabled: (!e.enabled).then(|| e.disabled_reason.as_deref().unwrap_or("disabled")),
        breaker_open: live.is_some_and(|l| l.breaker_holding),
        paused: live.is_some_and(|l| l.paused),
        rate_limit: e.rate_limit,
        waiting,
    };
    let ev = evidence(s, effective, standing);
    let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
    EndpointStatus {
        condition: ev.condition,
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
        delivered_p95_s: secs(s.delivered_p95),
        failures: s.failures,
        lane_size: lane,
        lane_basis: if e.lane_size.is_some() {
            LaneBasis::Override
        } else {
            LaneBasis::Default
        },
        effective_lane: effective,
        in_flight: None,
        governor_limit: None,
        paused: None,
        breaker_state: None,
        offered_per_s: s.offered_per_s,
        delivered_per_s: s.delivered_per_s,
        failed_per_s: s.failed_per_s,
        shed_per_s: s.shed_per_s,
        rate_limited_per_s: s.rate_limited_per_s,
        shed_share: s.shed_share,
        sustainable_per_s: ev.sustainable_per_s,
        sentence: ev.sentence,
        fifo: None,
        account_share,
    }
}

fn empty() -> WindowSnapshot {
    snapshot_of(&[], Duration::ZERO)
}

/// The `q` quantile of sorted millisecond durations, by nearest rank.
fn nearest_rank(sorted: &[u32], q: f64) -> Option<Duration> {
    let n = sorted.len();
    (n > 0).then(|| {
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        Duration::from_millis(u64::from(sorted[rank - 1]))
    })
}

/// A window snapshot from recorded attempts: quantiles by nearest rank, rates over `span`,
/// failures by kind from each attempt's status or error. Shedding is never recorded as an
/// attempt, so it reads zero here.
pub(crate) fn snapshot_of(attempts: &[AttemptView], span: Duration) -> WindowSnapshot {
    let mut durations: Vec<u32> = attempts.iter().map(|a| a.duration_ms).collect();
    durations.sort_unstable();
    let n = durations.len();
    let quantile = |q: f64| nearest_rank(&durations, q);
    let mean = (n > 0).then(|| {
        let total: u64 = durations.iter().map(|d| u64::from(*d)).sum();
        Duration::from_secs_f64(total as f64 / n as f64 / 1000.0)
    });
    let mut failures = FailureCounts::default();
    let mut delivered: Vec<u32> = Vec::new();
    for a in attempts {
        match AttemptKind::classify(a.status, a.error_kind.as_deref()) {
            AttemptKind::Delivered => delivered.push(a.duration_ms),
            kind => failures.record(kind),
        }
    }
    delivered.sort_unstable();
    let ok = delivered.len();
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
        rate_limited_per_s: 0.0,
        shed_share: 0.0,
        failure_ratio: if n == 0 {
            0.0
        } else {
            (n - ok) as f64 / n as f64
        },
        delivered_p95: nearest_rank(&delivered, 0.95),
        delivered: ok as u64,
        failures,
    }
}
