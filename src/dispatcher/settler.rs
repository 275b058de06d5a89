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

/// Who a settlement was for, kept beside the batch for metrics and notices after the write.
struct Meta {
    leased_at: Instant,
    endpoint_id: String,
    tenant_id: String,
    message_id: String,
}

/// Write settlements until the channel closes.
pub async fn run(ctx: Arc<Ctx>, mut rx: mpsc::Receiver<SettleItem>) {
    let mut batch: Vec<Settlement> = Vec::with_capacity(SETTLE_BATCH);
    let mut metas: Vec<Meta> = Vec::with_capacity(SETTLE_BATCH);
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(item) = next.take() {
            batch.push(item.settlement);
            metas.push(Meta {
                leased_at: item.leased_at,
                endpoint_id: item.endpoint_id,
                tenant_id: item.tenant_id,
                message_id: item.message_id,
            });
            if batch.len() < SETTLE_BATCH {
                next = rx.try_recv().ok();
            }
        }
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
        for (settlement, meta) in batch.iter().zip(&metas) {
            m.service_seconds
                .observe(meta.leased_at.elapsed().as_secs_f64());
            if let SettleOutcome::Dead { reason } = &settlement.outcome
                && applied.contains(&settlement.delivery_id)
            {
                m.dead_letters
                    .get_or_create(&Metrics::endpoint(&meta.endpoint_id))
                    .inc();
                let payload = notify::dead_letter_payload(
                    &meta.endpoint_id,
                    &meta.message_id,
                    settlement.delivery_id,
                    reason,
                );
                let (store, tenant) = (ctx.store.clone(), meta.tenant_id.clone());
                tokio::spawn(async move {
                    notify::notify(&store, &tenant, notify::MESSAGE_DEAD_LETTERED, payload).await;
                });
            }
        }
        ctx.settled(batch.len());
        batch.clear();
        metas.clear();
    }
}
