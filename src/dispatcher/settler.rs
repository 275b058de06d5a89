//! The settler: gathers settlements from delivery tasks and writes them in batches, retrying
//! while the store is unreachable. A batch that cannot be written before its leases expire is
//! dropped: the reaper returns those deliveries (at-least-once, same `webhook-id`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::Ctx;
use crate::metrics::{Metrics, PhaseLabel};
use crate::notify;
use crate::store::{SettleOutcome, Settlement};

/// Most settlements written in one statement.
const SETTLE_BATCH: usize = 512;

/// One settlement on its way to the store.
#[derive(Debug)]
pub struct SettleItem {
    /// What to write.
    pub settlement: Settlement,
    /// When the delivery was leased (for `webhook_service_seconds`).
    pub leased_at: Instant,
    /// Endpoint id (metrics).
    pub endpoint_id: String,
    /// Tenant id.
    pub tenant_id: String,
    /// Message id (for dead-letter notices).
    pub message_id: String,
}

/// Write settlements until the channel closes.
pub async fn run(ctx: Arc<Ctx>, mut rx: mpsc::Receiver<SettleItem>) {
    let mut items: Vec<SettleItem> = Vec::with_capacity(SETTLE_BATCH);
    let mut batch: Vec<Settlement> = Vec::with_capacity(SETTLE_BATCH);
    while let Some(first) = rx.recv().await {
        items.push(first);
        while items.len() < SETTLE_BATCH {
            match rx.try_recv() {
                Ok(item) => items.push(item),
                Err(_) => break,
            }
        }
        batch.clear();
        batch.extend(items.iter().map(|i| i.settlement.clone()));
        let started = Instant::now();
        let mut backoff = Duration::from_millis(100);
        let mut applied = Vec::new();
        loop {
            match ctx.store.settle(&batch, crate::clock::now_ms()).await {
                Ok(ids) => {
                    applied = ids;
                    break;
                }
                Err(e) => {
                    if started.elapsed() + backoff >= ctx.settings.lease_ttl {
                        tracing::error!(error = %e, n = batch.len(),
                            "cannot settle before the leases expire; the reaper will return them");
                        break;
                    }
                    tracing::warn!(error = %e, n = batch.len(), "settle failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
        let settle_took = started.elapsed().as_secs_f64();
        let m = &ctx.metrics;
        m.phase_seconds
            .get_or_create(&PhaseLabel { phase: "settle" })
            .observe(settle_took);
        for item in &items {
            m.service_seconds
                .observe(item.leased_at.elapsed().as_secs_f64());
            if let SettleOutcome::Dead { reason } = &item.settlement.outcome
                && applied.contains(&item.settlement.delivery_id)
            {
                m.dead_letters
                    .get_or_create(&Metrics::endpoint(&item.endpoint_id))
                    .inc();
                let payload = notify::dead_letter_payload(
                    &item.endpoint_id,
                    &item.message_id,
                    item.settlement.delivery_id,
                    reason,
                );
                let (store, tenant) = (ctx.store.clone(), item.tenant_id.clone());
                tokio::spawn(async move {
                    notify::notify(&store, &tenant, notify::MESSAGE_DEAD_LETTERED, payload).await;
                });
            }
        }
        ctx.settled(items.len());
        items.clear();
    }
}
