//! One claimed delivery's path: admit ([`crate::admission::admit`]) → attempt → conclude.
//!
//! Only the admission decision and the bookkeeping take the endpoint's mutex, briefly; nothing
//! here holds a lock, a transaction or a slot longer than the attempt that needs it. Nothing
//! here writes to the store either: what a delivery comes to ([`Concluded`]: its settlement and
//! what its attempt changed about the endpoint) goes to the settler, the one room that writes.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;
use tracing::Instrument;

use super::Ctx;
use super::endpoints::{Pending, Runtime};
use super::settings::SETTLE_MARGIN;
use super::trace::{self, AttemptTrace};
use crate::admission::breaker::Transition;
use crate::admission::endpoint::{FailingChange, Outcome};
use crate::admission::governor::Observation;
use crate::admission::{self, Held};
use crate::delivery::{self, Report};
use crate::metrics::{Count, ErrorKindLabel, HostLabel, Metrics, PhaseLabel};
use crate::model::{AttemptRecord, Claimed, SettleOutcome, Settlement};
use crate::store::StoreError;

/// Why a delivery was requeued without an attempt: admission turned it away, or the endpoint's
/// configuration could not be read (the store did not answer in time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    Admission(Held),
    StoreUnavailable,
}

impl Why {
    /// The reason a span event names (`sluice.reason`).
    fn reason(self) -> &'static str {
        match self {
            Why::Admission(Held::Shed) => "shed",
            Why::Admission(Held::Draining) => "draining",
            Why::Admission(Held::RateLimited { .. }) => "rate_limited",
            Why::Admission(Held::Paused { .. }) => "paused",
            Why::Admission(Held::BreakerOpen { .. }) => "breaker_open",
            Why::Admission(Held::Disabled) => "disabled",
            Why::Admission(Held::TenantFull) => "tenant_ceiling",
            Why::StoreUnavailable => "store_unavailable",
        }
    }
}

/// What one delivery came to, for the settler to write: its settlement and, rarely, what its
/// attempt changed about the endpoint.
pub(super) struct Concluded {
    pub(super) settlement: Settlement,
    pub(super) writes: Option<Box<EndpointWrites>>,
}

impl From<Settlement> for Concluded {
    fn from(settlement: Settlement) -> Self {
        Self {
            settlement,
            writes: None,
        }
    }
}

/// What an attempt changed about its endpoint beyond the delivery: a breaker transition to
/// record, the failing-since mark, a disable. Written by the settler beside the settlement.
pub(super) struct EndpointWrites {
    pub(super) endpoint: Arc<Runtime>,
    /// A breaker transition, recorded as an endpoint event.
    pub(super) transition: Option<Transition>,
    pub(super) failing: FailingChange,
    /// Disable the endpoint for this reason (the answer said it is gone, or it failed too long).
    pub(super) disable: Option<String>,
}

/// Run one delivery to what it came to: admit → attempt → conclude. Its lease ends at
/// `lease_end`: the admission is bounded by the lane's deadline and the attempt by its total
/// deadline, and both end before the lease does, with time left to write the settlement
/// ([`super::settings::SETTLE_MARGIN`]); an attempt that would not, extends its lease first.
pub(super) async fn run(
    ctx: &Arc<Ctx>,
    d: &Claimed,
    pending: Pending,
    lease_end: Instant,
) -> Concluded {
    let endpoint = match ctx.endpoints.get(&d.endpoint_id).await {
        Ok(rt) => rt,
        Err(StoreError::NotFound(_)) => {
            let reason = "endpoint no longer exists".into();
            return settlement(d, SettleOutcome::Dead { reason }, None).into();
        }
        Err(e) => {
            tracing::warn!(error = %e, endpoint = %d.endpoint_id, "cannot load endpoint");
            return requeue(ctx, d, Why::StoreUnavailable).into();
        }
    };
    let concurrency = ctx.concurrency();
    let (_, max_share) = super::in_force(
        d.tenant_share,
        ctx.settings.tenant_weight,
        ctx.settings.tenant_max_share,
    );
    let ceiling = if max_share < 1.0 {
        crate::fairness::ceiling_slots(max_share, concurrency)
    } else {
        u32::MAX
    };
    // Past the lane (admitted or about to be shed): no longer counted against its room.
    let admitted = admission::admit(&ctx.gate(), &endpoint, ceiling, move || drop(pending))
        .instrument(tracing::debug_span!("admit"))
        .await;
    let admitted = match admitted {
        Ok(admitted) => admitted,
        Err(held) => {
            let held = match held {
                Held::Draining => settlement(d, SettleOutcome::Release, None),
                Held::Paused { until } => requeue_until(ctx, d, until, held),
                Held::BreakerOpen { until } => requeue_until(ctx, d, Some(until), held),
                Held::RateLimited { until } => requeue_at(ctx, d, until),
                Held::Shed => requeue_shed(ctx, d, &endpoint),
                Held::TenantFull => requeue_until(ctx, d, None, held),
                Held::Disabled => requeue(ctx, d, Why::Admission(held)),
            };
            return held.into();
        }
    };
    let parsed = admitted.parsed.clone();
    let target = match &parsed.target {
        Ok(target) => target,
        Err(reason) => {
            if admitted.probe {
                endpoint.cancel_probe();
            }
            let reason = reason.clone();
            return settlement(d, SettleOutcome::Dead { reason }, None).into();
        }
    };
    let Some(deadline) = attempt_deadline(ctx, d, lease_end, target.timeouts.total).await else {
        // The lease is gone (reaped and claimed again elsewhere): this attempt is not ours to
        // make. The release is fenced by the lease token, so it changes nothing.
        if admitted.probe {
            endpoint.cancel_probe();
        }
        return settlement(d, SettleOutcome::Release, None).into();
    };
    ctx.metrics.in_flight.inc();
    let trace = AttemptTrace::begin(ctx, d, target);
    let trace_headers = trace.as_ref().and_then(|t| t.headers(d, target));
    // A broker gets the same admission, deadline and settle path; only the attempt differs.
    // Its future is boxed: inline, the broker clients' state would size every delivery task.
    let report = if target.destination.is_broker() {
        Box::pin(
            ctx.brokers
                .attempt(
                    &ctx.clients,
                    target,
                    &d.message_id,
                    &d.event_type,
                    &d.payload,
                    trace_headers.as_ref(),
                    deadline,
                )
                .instrument(tracing::debug_span!("publish")),
        )
        .await
    } else {
        ctx.clients
            .attempt(
                target,
                &d.message_id,
                &d.payload,
                trace_headers.as_ref(),
                deadline,
            )
            .instrument(tracing::debug_span!("attempt"))
            .await
    };
    tracing::debug!(
        status = report.result.as_ref().ok().map(|r| r.status),
        error = report.result.as_ref().err().map(|f| f.kind.as_str()),
        duration_ms = report.duration.as_millis() as u64,
        "attempted"
    );
    ctx.metrics.in_flight.dec();
    ctx.tenants.occupied(&d.tenant_id, report.duration);
    drop(admitted);
    let concluded = conclude_attempt(ctx, d, endpoint, &parsed.host, &report);
    if let Some(trace) = trace {
        let disabled = concluded
            .writes
            .as_ref()
            .is_some_and(|w| w.disable.is_some());
        let outcome = &concluded.settlement.outcome;
        trace.finish(ctx, d, target, &report, outcome, disabled);
    }
    concluded
}

/// When an attempt starting now must end: its total deadline from now. When that would not
/// leave [`SETTLE_MARGIN`] before the lease ends (the delivery waited long between its claim
/// and its admission, on a slow store), the lease is extended first, so the reaper never hands
/// out a delivery whose attempt is still running; when the lease is no longer this
/// dispatcher's, `None`. If the store cannot extend it, the attempt gets what the lease leaves.
async fn attempt_deadline(
    ctx: &Arc<Ctx>,
    d: &Claimed,
    lease_end: Instant,
    total: Duration,
) -> Option<Instant> {
    let now = Instant::now();
    if let Some(deadline) = deadline_within(now, lease_end, total) {
        return Some(deadline);
    }
    let lease_ttl = ctx.settings.lease_ttl;
    let until_ms = crate::clock::now_ms() + lease_ttl.as_millis() as i64;
    match ctx
        .store
        .extend_lease(d.delivery_id, d.lease_token, until_ms)
        .await
    {
        Ok(true) => {
            ctx.metrics.leases_extended.inc();
            deadline_within(now, now + lease_ttl, total)
        }
        Ok(false) => None,
        Err(e) => {
            tracing::warn!(error = %e, delivery_id = d.delivery_id,
                "cannot extend a lease; the attempt gets what is left of it");
            let cut = lease_end.checked_sub(SETTLE_MARGIN)?;
            (cut > Instant::now()).then_some(cut)
        }
    }
}

/// The deadline of an attempt starting `now` with `total` to run, when it ends at least
/// [`SETTLE_MARGIN`] before `lease_end`.
fn deadline_within(now: Instant, lease_end: Instant, total: Duration) -> Option<Instant> {
    let wanted = now + total;
    (wanted + SETTLE_MARGIN <= lease_end).then_some(wanted)
}

/// Feed the attempt to the governor, breaker, statistics and metrics, then decide what it
/// comes to.
fn conclude_attempt(
    ctx: &Arc<Ctx>,
    d: &Claimed,
    endpoint: Arc<Runtime>,
    host: &str,
    report: &Report,
) -> Concluded {
    let now_ms = crate::clock::now_ms();
    let attempts_made = d.attempts + 1;
    let decision = delivery::decide(
        &report.result,
        attempts_made,
        &ctx.settings.retry,
        ctx.settings.governor.max_pause,
        now_ms,
        rand::rng().random(),
    );
    let now = Instant::now();
    let outcome = Outcome {
        observation: decision.observation,
        failed: decision.failed,
        kind: decision.kind,
        disables: decision.disable.is_some(),
    };
    let policy = ctx.endpoint_policy();
    let effects = endpoint.conclude(&policy, &outcome, report.duration, now, now_ms);
    observe(
        &ctx.metrics,
        endpoint.id(),
        host,
        report,
        &decision.observation,
        decision.failed,
    );

    let writes = (effects.transition.is_some()
        || effects.failing != FailingChange::Unchanged
        || decision.disable.is_some())
    .then(|| {
        Box::new(EndpointWrites {
            endpoint,
            transition: effects.transition,
            failing: effects.failing,
            disable: decision.disable,
        })
    });

    let attempt = delivery::attempt_record(report, ctx.settings.max_response_bytes);
    if matches!(decision.outcome, SettleOutcome::Delivered) {
        let e2e = (now_ms - d.message_created_at_ms).max(0) as f64 / 1000.0;
        ctx.metrics.end_to_end_seconds.observe(e2e);
    }
    Concluded {
        settlement: settlement(d, decision.outcome, Some(attempt)),
        writes,
    }
}

fn observe(
    m: &Metrics,
    endpoint: &str,
    host: &str,
    report: &Report,
    observation: &Observation,
    failed: bool,
) {
    if failed {
        m.count(endpoint, Count::AttemptFailed);
    } else if matches!(observation, Observation::Success) {
        m.count(endpoint, Count::Delivered);
    }
    m.endpoints.occupied(endpoint, report.duration);
    m.delivery_duration
        .get_or_create(&HostLabel {
            host: host.to_owned(),
        })
        .observe(report.duration.as_secs_f64());
    m.host_time.add(host, report.duration);
    if let Err(f) = &report.result {
        m.attempt_errors
            .get_or_create(&ErrorKindLabel {
                kind: f.kind.as_str(),
            })
            .inc();
    }
    let p = &report.phases;
    for (phase, took, measured) in [
        ("token", p.token, p.fetched_token),
        ("sign", p.sign, true),
        ("connect", p.connect, p.connected),
        ("tls", p.tls, p.connected && p.tls > Duration::ZERO),
        ("http", p.http, !p.published),
        ("body", p.body, !p.published),
        ("publish", p.publish, p.published),
    ] {
        if measured {
            m.phase_seconds
                .get_or_create(&PhaseLabel { phase })
                .observe(took.as_secs_f64());
        }
    }
}

fn settlement(d: &Claimed, outcome: SettleOutcome, attempt: Option<AttemptRecord>) -> Settlement {
    Settlement {
        delivery_id: d.delivery_id,
        lease_token: d.lease_token,
        outcome,
        attempt,
    }
}

/// Requeue without an attempt after a jittered delay.
fn requeue(ctx: &Arc<Ctx>, d: &Claimed, why: Why) -> Settlement {
    requeue_after(ctx, d, why, ctx.settings.shed.random_delay())
}

/// Requeue without an attempt after `delay`.
fn requeue_after(ctx: &Arc<Ctx>, d: &Claimed, why: Why, delay: Duration) -> Settlement {
    count_held(ctx, d, why);
    settlement(
        d,
        SettleOutcome::Shed {
            at_ms: crate::clock::now_ms() + delay.as_millis() as i64,
        },
        None,
    )
}

/// Requeue a delivery shed at a full lane, without an attempt, after a jittered delay that fits
/// the lane: what is ahead of it (this dispatcher's deliveries in and on their way to the lane,
/// times the dispatchers sharing a fleet-wide one) at its measured service time, over its slots
/// ([`crate::retry::ShedSettings::delay_after`]).
fn requeue_shed(ctx: &Arc<Ctx>, d: &Claimed, rt: &Runtime) -> Settlement {
    let dispatchers = ctx.fleet.live_dispatchers();
    let ahead = rt.taken().saturating_mul(dispatchers);
    let reading = rt.claim_reading(Instant::now(), &ctx.endpoint_policy(), 0);
    let lane = reading.lane.max(1);
    let expected = reading
        .service
        .map(|t| t.mul_f64(f64::from(ahead.saturating_add(1)) / f64::from(lane)));
    let delay = ctx.settings.shed.delay_after(
        expected,
        ctx.settings.lane_deadline,
        rand::rng().random::<f64>(),
    );
    requeue_after(ctx, d, Why::Admission(Held::Shed), delay)
}

/// Requeue without an attempt until `until` (plus up to a second of jitter).
fn requeue_until(ctx: &Arc<Ctx>, d: &Claimed, until: Option<Instant>, held: Held) -> Settlement {
    let wait = until.map_or(Duration::ZERO, |u| {
        u.saturating_duration_since(Instant::now())
    });
    let jitter = Duration::from_millis(rand::rng().random_range(0..1000));
    count_held(ctx, d, Why::Admission(held));
    settlement(
        d,
        SettleOutcome::Shed {
            at_ms: crate::clock::now_ms() + (wait + jitter).as_millis() as i64,
        },
        None,
    )
}

/// Requeue without an attempt at exactly `until`, the endpoint's next turn under its rate limit
/// (rounded up to the store's millisecond, never early): no shed delay, no jitter. Turns are
/// spaced by the limit already, so deliveries held together come due one turn apart.
fn requeue_at(ctx: &Arc<Ctx>, d: &Claimed, until: Instant) -> Settlement {
    let wait = until.saturating_duration_since(Instant::now());
    let wait_ms = i64::try_from(wait.as_micros().div_ceil(1000)).unwrap_or(i64::MAX / 2);
    if ctx.tracer.exporting() {
        trace::held(ctx, d, "rate_limited");
    }
    ctx.metrics.count(&d.endpoint_id, Count::RateLimited);
    settlement(
        d,
        SettleOutcome::Shed {
            at_ms: crate::clock::now_ms() + wait_ms,
        },
        None,
    )
}

fn count_held(ctx: &Arc<Ctx>, d: &Claimed, why: Why) {
    if ctx.tracer.exporting() {
        trace::held(ctx, d, why.reason());
    }
    let endpoint = d.endpoint_id.as_str();
    let m = &ctx.metrics;
    let reason = match why {
        Why::Admission(Held::Shed) => return m.count(endpoint, Count::Shed),
        Why::Admission(Held::Draining) => return,
        Why::Admission(Held::RateLimited { .. }) => {
            return m.count(endpoint, Count::RateLimited);
        }
        Why::Admission(Held::Paused { .. }) => "paused",
        Why::Admission(Held::BreakerOpen { .. }) => "breaker_open",
        Why::Admission(Held::Disabled) => "disabled",
        Why::Admission(Held::TenantFull) => "tenant_ceiling",
        Why::StoreUnavailable => "store_unavailable",
    };
    m.held(reason);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An attempt keeps its total deadline only while it ends, with the settle margin, inside
    /// its lease; otherwise the lease must be extended first.
    #[test]
    fn an_attempt_ends_a_settle_margin_before_its_lease() {
        let now = Instant::now();
        let total = Duration::from_secs(15);
        let lease_end = now + Duration::from_secs(60);
        assert_eq!(deadline_within(now, lease_end, total), Some(now + total));
        let late = now + Duration::from_secs(41);
        assert_eq!(
            deadline_within(late, lease_end, total),
            None,
            "15 s from 41 s ends 4 s before the lease: less than the margin"
        );
        let edge = now + Duration::from_secs(40);
        assert_eq!(deadline_within(edge, lease_end, total), Some(edge + total));
    }
}
