//! The reaper: returns expired leases (a dispatcher that died mid-attempt, at once when it is
//! known dead rather than at its leases' expiry), dead-letters poison leases, forgets idle
//! endpoints' and tenants' runtime state, and applies retention now and then.

use std::sync::Arc;
use std::time::Duration;

use super::Ctx;
use crate::model::PurgeRequest;

/// How often the reaper also applies retention.
const PURGE_INTERVAL: Duration = Duration::from_secs(600);
/// Deliveries deleted per retention transaction (short transactions, many of them: on SQLite a
/// batch holds the one writer every enqueue and settle waits for).
const PURGE_BATCH: u32 = 250;
/// Between batches the purge rests this many times as long as the batch took, so it takes at
/// most a quarter of the store's time while deliveries run beside it (months of history
/// deleted at once cost the burst 8x its throughput on SQLite before).
const PURGE_REST: u32 = 3;
/// Heartbeat intervals without a beat (with its process's connection gone) after which a
/// dispatcher is dead and its leases are expired early: one missed beat is a hiccup, two are not.
const DEAD_AFTER_BEATS: u32 = 2;

/// Return expired leases on an interval until the drain stops it, and apply retention now and
/// then.
pub(super) async fn reaper(ctx: Arc<Ctx>) {
    let mut interval = tokio::time::interval(ctx.settings.reap_interval);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_purge: Option<tokio::time::Instant> = None;
    loop {
        interval.tick().await;
        let forgotten = ctx.endpoints.evict_idle(tokio::time::Instant::now());
        if forgotten > 0 {
            tracing::debug!(forgotten, "idle endpoints forgotten");
        }
        ctx.tenants.forget_idle();
        if last_purge.is_none_or(|at| at.elapsed() >= PURGE_INTERVAL) {
            last_purge = Some(tokio::time::Instant::now());
            purge(&ctx).await;
        }
        // A dispatcher killed outright leaves its leases; expire them once it is known dead
        // (two heartbeats missed, its connection gone) so this reap returns them, in seconds
        // where the lease TTL would take a minute.
        let dead_after_ms = (ctx.settings.heartbeat_interval * DEAD_AFTER_BEATS).as_millis() as i64;
        if let Err(e) = ctx
            .store
            .expire_leases_of_dead(crate::clock::now_ms(), dead_after_ms)
            .await
        {
            tracing::warn!(error = %e, "cannot expire the leases of dead dispatchers");
        }
        match ctx
            .store
            .reap(crate::clock::now_ms(), ctx.settings.max_lease_expiries)
            .await
        {
            Ok(r) if r.returned > 0 || r.dead > 0 => {
                tracing::info!(
                    returned = r.returned,
                    dead = r.dead,
                    "reaper returned expired leases"
                );
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "reap failed"),
        }
    }
}

/// Delete delivered history older than the retention period, in short batches walked in
/// message id order, resting between them.
async fn purge(ctx: &Ctx) {
    let before_ms = crate::clock::now_ms() - ctx.settings.retention.as_millis() as i64;
    let mut request = PurgeRequest {
        before_ms,
        limit: PURGE_BATCH,
        after: String::new(),
    };
    let (mut deliveries, mut messages) = (0, 0);
    loop {
        let started = tokio::time::Instant::now();
        match ctx.store.purge(&request).await {
            Ok(report) => {
                deliveries += report.deliveries;
                messages += report.messages;
                match report.next {
                    Some(next) => request.after = next,
                    None => break,
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "retention purge failed");
                break;
            }
        }
        tokio::time::sleep(started.elapsed() * PURGE_REST).await;
    }
    if deliveries + messages > 0 {
        tracing::info!(deliveries, messages, "retention: delivered history deleted");
    }
}
