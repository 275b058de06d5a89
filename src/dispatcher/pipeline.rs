//! One claimed delivery's path: admit (disabled? paused? breaker? lane?) → deliver → decide.
//!
//! Only the admission decision and the bookkeeping take the endpoint's mutex, briefly; nothing
//! here holds a lock, a transaction or a slot longer than the attempt that needs it.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;
use tracing::Instrument;

use super::Ctx;
use super::conclude::{Attempt, FailingChange, conclude};
use super::endpoints::{EndpointRuntime, Pending};
use crate::admission::breaker::Admission;
use crate::admission::governor::{self, Observation};
use crate::delivery::{self, Report};
use crate::metrics::{Count, ErrorKindLabel, HostLabel, Metrics, PhaseLabel};
use crate::notify;
use crate::store::{AttemptRecord, Claimed, EndpointEvent, SettleOutcome, Settlement, StoreError};

/// Why a delivery was requeued without an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// The lane stayed full past its deadline.
    Shed,
    /// Retry-After pause.
    Paused,
    /// Breaker open.
    BreakerOpen,
    /// Endpoint disabled.
    Disabled,
    /// The endpoint's configuration could not be read (the store did not answer in time).
    StoreUnavailable,
    /// Drain started before the attempt.
    Draining,
}

/// Run one delivery to a settlement.
pub async fn run(ctx: &Arc<Ctx>, d: &Claimed, pending: Pending) -> Settlement {
    let endpoint = match ctx.endpoints.get(&d.endpoint_id).await {
        Ok(rt) => rt,
        Err(StoreError::NotFound(_)) => {
            return settlement(
                d,
                SettleOutcome::Dead {
                    reason: "endpoint no longer exists".into(),
                },
                None,
            );
        }
        Err(e) => {
            tracing::warn!(error = %e, endpoint = %d.endpoint_id, "cannot load endpoint");
            return requeue(ctx, d, None, Held::StoreUnavailable);
        }
    };
    let now = Instant::now();
    let concurrency = ctx.concurrency();
    let (target, probe) = {
        let mut s = endpoint.state();
        s.record_offered(now);
        if !s.enabled {
            drop(s);
            return requeue(ctx, d, Some(&endpoint), Held::Disabled);
        }
        if governor::is_paused(&s.governor, now) {
            let until = s.governor.paused_until;
            s.window.record_held(now);
            drop(s);
            return requeue_until(ctx, d, until, Held::Paused);
        }
        let probe = match s.breaker.admit(now) {
            Admission::Allow => false,
            Admission::Probe => true,
            Admission::Hold { until } => {
                s.window.record_held(now);
                drop(s);
                return requeue_until(ctx, d, Some(until), Held::BreakerOpen);
            }
        };
        match &s.target {
            Ok(t) => (t.clone(), probe),
            Err(reason) => {
                let reason = reason.clone();
                if probe {
                    s.breaker.cancel_probe();
                }
                drop(s);
                return settlement(d, SettleOutcome::Dead { reason }, None);
            }
        }
    };

    // The lane: wait at most the deadline, then shed. The limit follows the governor.
    let limit = || endpoint.state().effective_lane(&ctx.settings, concurrency);
    let acquired = endpoint
        .lane
        .acquire(limit, ctx.settings.lane_deadline)
        .instrument(tracing::debug_span!("admit"))
        .await;
    // Past the lane (admitted or about to be shed): no longer counted against its room.
    drop(pending);
    let slot = match acquired {
        Ok(slot) => slot,
        Err(_) => return shed(ctx, d, &endpoint, probe),
    };
    let fleet_slot = match &ctx.fleet.lanes {
        Some(fleet) => match super::fleet_slot(ctx, fleet, &endpoint, concurrency).await {
            Ok(admit) => Some(admit),
            Err(super::Shed) => {
                drop(slot);
                return shed(ctx, d, &endpoint, probe);
            }
        },
        None => None,
    };
    if ctx.is_draining() {
        drop(slot);
        if let (Some(fleet), Some(admit)) = (&ctx.fleet.lanes, fleet_slot) {
            super::fleet_release(fleet, &endpoint, admit).await;
        }
        return settlement(d, SettleOutcome::Release, None);
    }
    let _permit = ctx.attempts.acquire().await;
    ctx.metrics.in_flight.inc();
    let report = ctx
        .clients
        .attempt(&target, &d.message_id, &d.payload)
        .instrument(tracing::debug_span!("attempt"))
        .await;
    tracing::debug!(
        status = report.result.as_ref().ok().map(|r| r.status),
        error = report.result.as_ref().err().map(|f| f.kind.as_str()),
        duration_ms = report.duration.as_millis() as u64,
        "attempted"
    );
    ctx.metrics.in_flight.dec();
    ctx.tenants.occupied(&d.tenant_id, report.duration);
    drop(_permit);
    drop(slot);
    if let (Some(fleet), Some(admit)) = (&ctx.fleet.lanes, fleet_slot) {
        super::fleet_release(fleet, &endpoint, admit).await;
    }
    settle_attempt(ctx, d, &endpoint, report).await
}

/// Feed the attempt to the governor, breaker, statistics and metrics, then decide.
async fn settle_attempt(
    ctx: &Arc<Ctx>,
    d: &Claimed,
    endpoint: &Arc<EndpointRuntime>,
    report: Report,
) -> Settlement {
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
    let (effects, host) = {
        let mut s = endpoint.state();
        let lane = s.lane_size(&ctx.settings, ctx.concurrency());
        // This attempt's slot is free again: the limit bound if the lane is full without it,
        // or deliveries are waiting at it.
        let limit_bound = endpoint.pending() > 0
            || endpoint.lane.in_use() + 1 >= governor::effective_limit(&s.governor, lane);
        let attempt = Attempt {
            took: report.duration,
            lane,
            limit_bound,
        };
        let effects = conclude(&mut s, &ctx.settings, &decision, attempt, now, now_ms);
        (effects, s.host.clone())
    };
    observe(
        &ctx.metrics,
        &endpoint.id,
        &host,
        &report,
        &decision.observation,
        decision.failed,
    );

    if let Some(t) = effects.transition {
        record_event(ctx, endpoint, &format!("breaker_{}", t.to), &t.reason).await;
    }
    match effects.failing {
        FailingChange::Began(since) => {
            let _ = ctx
                .store
                .set_endpoint_failing(&endpoint.id, Some(since))
                .await;
        }
        FailingChange::Ended => {
            let _ = ctx.store.set_endpoint_failing(&endpoint.id, None).await;
        }
        FailingChange::Disable { since_ms } => {
            let reason = format!(
                "auto-disabled: failing continuously since {} ({} h)",
                crate::clock::rfc3339(since_ms),
                (now_ms - since_ms) / 3_600_000
            );
            disable(ctx, endpoint, &reason).await;
        }
        FailingChange::Unchanged => {}
    }
    if let Some(reason) = &decision.disable {
        disable(ctx, endpoint, reason).await;
    }

    let attempt = delivery::attempt_record(&report, ctx.settings.max_response_bytes);
    if matches!(decision.outcome, SettleOutcome::Delivered) {
        let e2e = (now_ms - d.message_created_at_ms).max(0) as f64 / 1000.0;
        ctx.metrics.end_to_end_seconds.observe(e2e);
    }
    settlement(d, decision.outcome, Some(attempt))
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
        ("http", p.http, true),
        ("body", p.body, true),
    ] {
        if measured {
            m.phase_seconds
                .get_or_create(&PhaseLabel { phase })
                .observe(took.as_secs_f64());
        }
    }
}

async fn disable(ctx: &Arc<Ctx>, endpoint: &Arc<EndpointRuntime>, reason: &str) {
    let now_ms = crate::clock::now_ms();
    if let Err(e) = ctx
        .store
        .set_endpoint_enabled(&endpoint.id, false, Some(reason), now_ms)
        .await
    {
        tracing::warn!(error = %e, endpoint = %endpoint.id, "cannot disable endpoint");
        return;
    }
    endpoint.state().enabled = false;
    tracing::info!(endpoint = %endpoint.id, reason, "endpoint disabled");
    record_event(ctx, endpoint, "disabled", reason).await;
    notify::notify(
        &ctx.store,
        &endpoint.tenant_id,
        notify::ENDPOINT_DISABLED,
        notify::disabled_payload(&endpoint.id, reason),
    )
    .await;
}

async fn record_event(ctx: &Arc<Ctx>, endpoint: &Arc<EndpointRuntime>, kind: &str, detail: &str) {
    let event = EndpointEvent {
        tenant_id: endpoint.tenant_id.clone(),
        endpoint_id: endpoint.id.clone(),
        kind: kind.to_owned(),
        detail: detail.to_owned(),
        at_ms: crate::clock::now_ms(),
    };
    if let Err(e) = ctx.store.record_event(&event).await {
        tracing::warn!(error = %e, "cannot record endpoint event");
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

/// Shed at the lane (local or fleet): counted in the endpoint's window, a breaker probe it
/// carried given back, and requeued after a jittered delay; not an attempt.
fn shed(ctx: &Arc<Ctx>, d: &Claimed, endpoint: &Arc<EndpointRuntime>, probe: bool) -> Settlement {
    let mut s = endpoint.state();
    s.window.record_shed(Instant::now());
    if probe {
        s.breaker.cancel_probe();
    }
    drop(s);
    requeue(ctx, d, Some(endpoint), Held::Shed)
}

/// Requeue without an attempt after a jittered delay.
fn requeue(
    ctx: &Arc<Ctx>,
    d: &Claimed,
    endpoint: Option<&Arc<EndpointRuntime>>,
    why: Held,
) -> Settlement {
    let delay = ctx.settings.shed.random_delay();
    count_held(ctx, &d.endpoint_id, endpoint.is_some(), why);
    settlement(
        d,
        SettleOutcome::Shed {
            at_ms: crate::clock::now_ms() + delay.as_millis() as i64,
        },
        None,
    )
}

/// Requeue without an attempt until `until` (plus up to a second of jitter).
fn requeue_until(ctx: &Arc<Ctx>, d: &Claimed, until: Option<Instant>, why: Held) -> Settlement {
    let wait = until.map_or(Duration::ZERO, |u| {
        u.saturating_duration_since(Instant::now())
    });
    let jitter = Duration::from_millis(rand::rng().random_range(0..1000));
    count_held(ctx, &d.endpoint_id, true, why);
    settlement(
        d,
        SettleOutcome::Shed {
            at_ms: crate::clock::now_ms() + (wait + jitter).as_millis() as i64,
        },
        None,
    )
}

fn count_held(ctx: &Arc<Ctx>, endpoint: &str, known: bool, why: Held) {
    let m = &ctx.metrics;
    match why {
        Held::Shed if known => m.count(endpoint, Count::Shed),
        Held::Shed | Held::Draining => {}
        Held::Paused | Held::BreakerOpen | Held::Disabled | Held::StoreUnavailable => {
            let reason = match why {
                Held::Paused => "paused",
                Held::BreakerOpen => "breaker_open",
                Held::StoreUnavailable => "store_unavailable",
                _ => "disabled",
            };
            m.held(reason);
        }
    }
}
