//! The leaser: claims batches as far as free capacity allows and hands each delivery to its task.
//!
//! A claim is one short transaction that commits before any delivery starts; the lease
//! (`lease_until` + a fresh token) is what protects the work afterwards, never a held lock.

use std::sync::Arc;
use std::time::Duration;

use super::Ctx;
use crate::model::ClaimRequest;
use crate::retry::Backoff;
use crate::shutdown::Phase;

/// Claim batches until drain begins; every delivery a claim returns is handed to a task.
pub(super) async fn leaser(ctx: Arc<Ctx>) {
    let signal = ctx.store.work_signal();
    let mut backoff = Backoff::STORE;
    loop {
        if ctx.is_draining() {
            return;
        }
        let concurrency = ctx.concurrency() as usize;
        let free = concurrency.saturating_sub(ctx.outstanding());
        if free == 0 {
            ctx.capacity_freed(Duration::from_millis(100)).await;
            continue;
        }
        // The last few free slots are kept for tenants holding none, so a tenant that becomes
        // due starts at once: while more are free, a claim takes the rest for anyone; once only
        // those are, it takes them only for tenants holding none here.
        let reserve = crate::fairness::reserve_slots(concurrency as u32) as usize;
        let reserve_only = free <= reserve;
        let room = if reserve_only { free } else { free - reserve };
        let limit = room.min(ctx.settings.claim_batch as usize) as u32;
        let per_endpoint = ctx.settings.lane_size.max(1);
        let view = ctx.claim_view(per_endpoint, limit, reserve_only);
        let (fair_floor, charges) = ctx.tenants.for_claim();
        // The leases end `lease_ttl` after the `now_ms` the claim sends, which is read after
        // this instant: attempts end by `lease_end` less the settle margin.
        let lease_end = tokio::time::Instant::now() + ctx.settings.lease_ttl;
        let mut request = ClaimRequest {
            now_ms: crate::clock::now_ms(),
            limit,
            per_endpoint,
            lease_ms: ctx.settings.lease_ttl.as_millis() as i64,
            exclude: view.exclude,
            room: view.room,
            tenant_room: view.tenant_room,
            fair_floor,
            charges,
            default_weight: ctx.settings.tenant_weight,
        };
        let started = std::time::Instant::now();
        let result = ctx.store.claim(&request).await;
        ctx.metrics
            .claim_seconds
            .observe(started.elapsed().as_secs_f64());
        let claimed = match result {
            Ok(batch) => {
                backoff.reset();
                ctx.tenants.claimed(batch.floor, &batch.claimed, |d| {
                    ctx.expected_cost(&d.endpoint_id)
                });
                batch.claimed
            }
            Err(e) => {
                // The claim may have committed its charges (PostgreSQL sends them ahead of it);
                // owing them again at worst charges a tenant twice for one claim.
                ctx.tenants.unapplied(std::mem::take(&mut request.charges));
                let wait = backoff.next_wait();
                tracing::warn!(error = %e, "claim failed; retrying in {wait:?}");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = ctx.shutdown.until(Phase::StopClaiming) => return,
                }
                continue;
            }
        };
        let got = claimed.len();
        // The batch's endpoints this process has not seen (or not lately) in one read.
        ctx.endpoints
            .load(claimed.iter().map(|d| d.endpoint_id.as_str()))
            .await;
        for d in claimed {
            ctx.spawn(d, lease_end);
        }
        if got == 0 {
            // Nothing claimable: every due endpoint is excluded (lane full, paused, breaker
            // open) or nothing is due. Sleep until new work is announced, capacity frees up
            // (a lane may have room again), or the idle poll (retries coming due) elapses.
            tokio::select! {
                _ = signal.notified() => {}
                _ = ctx.capacity_freed(ctx.settings.idle_poll) => {}
                _ = ctx.shutdown.until(Phase::StopClaiming) => return,
            }
        }
        // Otherwise claim again at once: a batch smaller than the limit only means each due
        // endpoint gave its per-endpoint share, not that the backlog is empty.
    }
}
