//! The settler: gathers settlements from delivery tasks and writes them in batches.
//!
//! A batch the store cannot reach is retried with backoff until its leases would expire (the
//! last wait shortened to end [`LEASE_MARGIN`] before they do, so a store back in time still
//! gets the write), then dropped: the reaper returns those deliveries (at-least-once, same
//! `webhook-id`). A batch the store refuses for any other reason is split in halves until the
//! settlement at fault stands alone; that one is written once more with its free text replaced
//! by a note, and dropped if even that is refused. So one bad settlement never holds up the
//! others, and because every write is all-or-nothing and fenced by lease tokens, splitting
//! neither loses nor repeats an outcome.
//!
//! It is the one room that writes what deliveries came to: settlements, dead-letter notices,
//! and what attempts changed about their endpoints ([`EndpointWrites`]: breaker events, the
//! failing-since mark, disables), written beside the batch they came with.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument;

use super::Ctx;
use super::endpoints::Runtime;
use super::pipeline::{Concluded, EndpointWrites};
use crate::admission::endpoint::FailingChange;
use crate::delivery::{MAX_ERROR_BYTES, storable};
use crate::metrics::{Count, PhaseLabel};
use crate::model::{EndpointEvent, SettleOutcome, Settlement};
use crate::operational_webhooks;
use crate::retry::Backoff;
use crate::store::{Store, StoreError, StoreResult};

/// Most settlements written in one statement.
const SETTLE_BATCH: usize = 512;
/// The last write to an unreachable store is started this long before the settle's deadline:
/// room for the write's round trip.
const LEASE_MARGIN: Duration = Duration::from_millis(500);

/// One settlement on its way to the store.
pub(super) struct SettleItem {
    /// What to write, and what the attempt changed about its endpoint.
    pub(super) concluded: Concluded,
    /// When the delivery was leased (for `webhook_service_seconds`).
    pub(super) leased_at: Instant,
    /// Endpoint id (metrics).
    pub(super) endpoint_id: String,
    /// Tenant id.
    pub(super) tenant_id: String,
    /// Message id (for dead-letter notices).
    pub(super) message_id: String,
}

/// Who a settlement was for, kept beside the batch for metrics and notices after the write.
struct Meta {
    leased_at: Instant,
    endpoint_id: String,
    tenant_id: String,
    message_id: String,
}

/// Write settlements until the channel closes.
pub(super) async fn run(ctx: Arc<Ctx>, mut rx: mpsc::Receiver<SettleItem>) {
    let mut batch: Vec<Settlement> = Vec::with_capacity(SETTLE_BATCH);
    let mut metas: Vec<Meta> = Vec::with_capacity(SETTLE_BATCH);
    let mut items: Vec<SettleItem> = Vec::with_capacity(SETTLE_BATCH);
    // Wait for one settlement, then take every other one already waiting, up to a batch.
    while rx.recv_many(&mut items, SETTLE_BATCH).await > 0 {
        let mut endpoint_writes = Vec::new();
        for item in items.drain(..) {
            batch.push(item.concluded.settlement);
            endpoint_writes.extend(item.concluded.writes);
            metas.push(Meta {
                leased_at: item.leased_at,
                endpoint_id: item.endpoint_id,
                tenant_id: item.tenant_id,
                message_id: item.message_id,
            });
        }
        let started = Instant::now();
        let span = tracing::debug_span!("settle", batch = batch.len());
        let settle = async {
            let written = settle_batch(&*ctx.store, &batch, started + ctx.settings.lease_ttl)
                .instrument(span)
                .await;
            (written, started.elapsed().as_secs_f64())
        };
        // Endpoint writes are rare (a breaker moved, a run of failures began or ended, an
        // endpoint is gone) and go beside the batch, never ahead of it: a disable already holds
        // this process's deliveries in memory (see `pipeline`).
        let endpoint_writes = endpoint_writes
            .into_iter()
            .map(|w| write_endpoint(&ctx, *w));
        let ((written, settle_took), _) =
            futures_util::future::join(settle, futures_util::future::join_all(endpoint_writes))
                .await;
        let m = &ctx.metrics;
        m.phase_seconds
            .get_or_create(&PhaseLabel { phase: "settle" })
            .observe(settle_took);
        for (settlement, meta) in batch.iter().zip(&metas) {
            m.service_seconds
                .observe(meta.leased_at.elapsed().as_secs_f64());
            if let SettleOutcome::Dead { reason } = &settlement.outcome
                && written.applied.contains(&settlement.delivery_id)
            {
                m.count(&meta.endpoint_id, Count::DeadLettered);
                let delivery_id = ctx
                    .store
                    .row_ids()
                    .format(crate::ids::DELIVERY, settlement.delivery_id);
                let payload = operational_webhooks::dead_letter_payload(
                    &meta.endpoint_id,
                    &meta.message_id,
                    &delivery_id,
                    reason,
                );
                let (store, tenant) = (ctx.store.clone(), meta.tenant_id.clone());
                tokio::spawn(async move {
                    operational_webhooks::send(
                        &store,
                        &tenant,
                        operational_webhooks::MESSAGE_DEAD_LETTERED,
                        payload,
                    )
                    .await;
                });
            }
        }
        ctx.settled(batch.len());
        batch.clear();
        metas.clear();
    }
}

/// Write what one attempt changed about its endpoint, in order: its breaker event, its failing
/// mark, its disable.
async fn write_endpoint(ctx: &Ctx, w: EndpointWrites) {
    let endpoint = &w.endpoint;
    if let Some(t) = &w.transition {
        record_event(ctx, endpoint, &format!("breaker_{}", t.to), &t.reason).await;
    }
    match w.failing {
        FailingChange::Began(since) => {
            let _ = ctx
                .store
                .set_endpoint_failing(endpoint.id(), Some(since))
                .await;
        }
        FailingChange::Ended => {
            let _ = ctx.store.set_endpoint_failing(endpoint.id(), None).await;
        }
        FailingChange::Disable { since_ms } => {
            let now_ms = crate::clock::now_ms();
            let reason = format!(
                "auto-disabled: failing continuously since {} ({} h)",
                crate::clock::rfc3339(since_ms),
                (now_ms - since_ms) / 3_600_000
            );
            disable(ctx, endpoint, &reason).await;
        }
        FailingChange::Unchanged => {}
    }
    if let Some(reason) = &w.disable {
        disable(ctx, endpoint, reason).await;
    }
}

async fn disable(ctx: &Ctx, endpoint: &Runtime, reason: &str) {
    let now_ms = crate::clock::now_ms();
    if let Err(e) = ctx
        .store
        .set_endpoint_enabled(endpoint.id(), false, Some(reason), now_ms)
        .await
    {
        tracing::warn!(error = %e, endpoint = %endpoint.id(), "cannot disable endpoint");
        endpoint.set_enabled(true);
        return;
    }
    endpoint.set_enabled(false);
    tracing::info!(endpoint = %endpoint.id(), reason, "endpoint disabled");
    record_event(ctx, endpoint, "disabled", reason).await;
    operational_webhooks::send(
        &ctx.store,
        endpoint.tenant_id(),
        operational_webhooks::ENDPOINT_DISABLED,
        operational_webhooks::disabled_payload(endpoint.id(), reason),
    )
    .await;
}

async fn record_event(ctx: &Ctx, endpoint: &Runtime, kind: &str, detail: &str) {
    let event = EndpointEvent {
        tenant_id: endpoint.tenant_id().to_owned(),
        endpoint_id: endpoint.id().to_owned(),
        kind: kind.to_owned(),
        detail: detail.to_owned(),
        at_ms: crate::clock::now_ms(),
    };
    if let Err(e) = ctx.store.record_event(&event).await {
        tracing::warn!(error = %e, "cannot record endpoint event");
    }
}

/// What became of a batch.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Written {
    /// Deliveries whose outcome was applied (a stale lease token applies nothing).
    pub applied: Vec<i64>,
    /// Deliveries written with their free text replaced by a note (the store refused the rest).
    pub replaced: Vec<i64>,
    /// Deliveries not written at all: their leases expire and the reaper returns them.
    pub dropped: Vec<i64>,
}

/// Where a part of a batch is written, all or nothing: the store (unit tests use a stand-in
/// that refuses what they choose).
#[async_trait]
pub(crate) trait Sink: Send {
    /// Apply `part`; returns the ids whose outcome was applied.
    async fn settle(&mut self, part: &[Settlement]) -> StoreResult<Vec<i64>>;
}

#[async_trait]
impl Sink for &dyn Store {
    async fn settle(&mut self, part: &[Settlement]) -> StoreResult<Vec<i64>> {
        Store::settle(*self, part, crate::clock::now_ms()).await
    }
}

/// Write `batch` to `store` before `deadline` (see [`write_batch`]).
pub async fn settle_batch(
    mut store: &dyn Store,
    batch: &[Settlement],
    deadline: Instant,
) -> Written {
    write_batch(batch, deadline, &mut store).await
}

/// A part of the batch still to write.
enum Part {
    /// These settlements, as they came.
    Slice(Range<usize>),
    /// One settlement the store refused, with its free text replaced.
    StandIn(Settlement),
}

/// Write `batch` to `sink`, which must apply all of a part or nothing. The store being
/// unavailable is retried with backoff until `deadline` (its leases' expiry): a wait that would
/// pass `deadline` less [`LEASE_MARGIN`] is shortened to end there, for one last write, and only
/// when no time is left is the rest dropped; any other refusal splits the part in halves down
/// to the one settlement at fault, which is written once more as its [`stand_in`] and dropped
/// if that is refused too.
pub(crate) async fn write_batch(
    batch: &[Settlement],
    deadline: Instant,
    sink: &mut dyn Sink,
) -> Written {
    let mut written = Written::default();
    // A stack, first half on top, so outcomes are written in the order they came.
    let mut todo = vec![Part::Slice(0..batch.len())];
    let mut backoff = Backoff::STORE;
    while let Some(part) = todo.pop() {
        let items = match &part {
            Part::Slice(range) => &batch[range.clone()],
            Part::StandIn(s) => std::slice::from_ref(s),
        };
        if items.is_empty() {
            continue;
        }
        let result = sink.settle(items).await;
        match (result, part) {
            (Ok(ids), part) => {
                if let Part::StandIn(s) = &part
                    && ids.contains(&s.delivery_id)
                {
                    written.replaced.push(s.delivery_id);
                }
                written.applied.extend(ids);
                backoff.reset();
            }
            (Err(StoreError::Unavailable(e)), part) => {
                // The last write is due at `last`; a wait that would pass it is shortened to
                // end there (an outage a little shorter than the leases is still ridden out).
                let last = deadline.checked_sub(LEASE_MARGIN).unwrap_or(deadline);
                let now = Instant::now();
                if now >= last {
                    todo.push(part);
                    let left: Vec<i64> = todo.iter().flat_map(|p| ids_of(batch, p)).collect();
                    tracing::error!(error = %e, n = left.len(),
                        "cannot settle before the leases expire; the reaper will return them");
                    written.dropped.extend(left);
                    break;
                }
                let wait = backoff.next_wait().min(last - now);
                tracing::warn!(error = %e, n = items_len(&part), "settle failed; retrying in {wait:?}");
                tokio::time::sleep(wait).await;
                todo.push(part);
            }
            (Err(e), Part::Slice(range)) if range.len() > 1 => {
                let mid = range.start + range.len() / 2;
                todo.push(Part::Slice(mid..range.end));
                todo.push(Part::Slice(range.start..mid));
                tracing::debug!(error = %e, n = range.len(), "settle refused; splitting the batch");
            }
            (Err(e), Part::Slice(range)) => {
                let s = &batch[range.start];
                tracing::warn!(error = %e, delivery = s.delivery_id,
                    "the store refused a settlement; writing it with its text replaced");
                todo.push(Part::StandIn(stand_in(s, &e)));
            }
            (Err(e), Part::StandIn(s)) => {
                tracing::error!(error = %e, delivery = s.delivery_id,
                    "the store refused a settlement even without its text; the reaper will return it");
                written.dropped.push(s.delivery_id);
            }
        }
    }
    written
}

fn items_len(part: &Part) -> usize {
    match part {
        Part::Slice(range) => range.len(),
        Part::StandIn(_) => 1,
    }
}

fn ids_of<'a>(batch: &'a [Settlement], part: &'a Part) -> Vec<i64> {
    match part {
        Part::Slice(range) => batch[range.clone()].iter().map(|s| s.delivery_id).collect(),
        Part::StandIn(s) => vec![s.delivery_id],
    }
}

/// `s` with its free text made storable and its response replaced by a note naming the
/// refusal: what is written when the store refused `s` itself, so the delivery still moves on
/// and its attempt still counts toward the retry schedule.
fn stand_in(s: &Settlement, refused: &StoreError) -> Settlement {
    let text = |t: &str| storable(t.as_bytes(), MAX_ERROR_BYTES);
    let mut s = s.clone();
    if let Some(a) = &mut s.attempt {
        a.response = Some(text(&format!(
            "[response not stored: the store refused it: {refused}]"
        )));
        a.error_kind = a.error_kind.as_deref().map(text);
    }
    if let SettleOutcome::Dead { reason } = &mut s.outcome {
        *reason = text(reason);
    }
    s
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::model::AttemptRecord;

    /// A table that applies a part only when it refuses none of it, like one transaction, and
    /// fails the test if a settlement already applied is ever written again.
    struct Table {
        stored: HashMap<i64, Settlement>,
        order: Vec<i64>,
        refuse: fn(&Settlement) -> bool,
        /// Writes (numbered from 1) that find the store unreachable.
        outage: Range<usize>,
        /// Until when every write finds the store unreachable (a restart), if ever.
        down_until: Option<Instant>,
        writes: usize,
    }

    impl Table {
        fn new(refuse: fn(&Settlement) -> bool) -> Self {
            Self {
                stored: HashMap::new(),
                order: Vec::new(),
                refuse,
                outage: 0..0,
                down_until: None,
                writes: 0,
            }
        }
    }

    #[async_trait]
    impl Sink for Table {
        async fn settle(&mut self, part: &[Settlement]) -> StoreResult<Vec<i64>> {
            self.writes += 1;
            if self.outage.contains(&self.writes)
                || self.down_until.is_some_and(|t| Instant::now() < t)
            {
                return Err(StoreError::Unavailable("connection refused".into()));
            }
            if part.iter().any(self.refuse) {
                return Err(StoreError::Database("invalid byte sequence: 0x00".into()));
            }
            for s in part {
                assert!(
                    !self.stored.contains_key(&s.delivery_id),
                    "delivery {} settled twice",
                    s.delivery_id
                );
                self.stored.insert(s.delivery_id, s.clone());
                self.order.push(s.delivery_id);
            }
            Ok(part.iter().map(|s| s.delivery_id).collect())
        }
    }

    fn batch(n: i64, nul_in: Option<i64>) -> Vec<Settlement> {
        (0..n)
            .map(|id| Settlement {
                delivery_id: id,
                lease_token: 100 + id,
                outcome: SettleOutcome::Retry { at_ms: 5_000 },
                attempt: Some(AttemptRecord {
                    started_at_ms: 1,
                    duration_ms: 2,
                    status: Some(500),
                    error_kind: Some("http_500".into()),
                    response: Some(if nul_in == Some(id) {
                        "bad\0body".into()
                    } else {
                        format!("body {id}")
                    }),
                }),
            })
            .collect()
    }

    fn has_nul(s: &Settlement) -> bool {
        s.attempt
            .as_ref()
            .and_then(|a| a.response.as_deref())
            .is_some_and(|r| r.contains('\0'))
    }

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[tokio::test]
    async fn one_refused_settlement_is_isolated_and_written_as_a_stand_in() {
        let mut table = Table::new(has_nul);
        let batch = batch(10, Some(6));
        let written = write_batch(&batch, later(), &mut table).await;
        assert_eq!(
            written.applied,
            (0..10).collect::<Vec<_>>(),
            "all, once, in order"
        );
        assert_eq!(table.order, written.applied);
        assert_eq!(written.replaced, vec![6]);
        assert!(written.dropped.is_empty());
        // Halving finds it in a few writes, not one write per settlement.
        assert!(table.writes <= 10, "{} writes", table.writes);
        let stored = &table.stored[&6];
        assert_eq!(stored.outcome, batch[6].outcome);
        let attempt = stored.attempt.as_ref().unwrap();
        assert_eq!(attempt.status, Some(500), "the attempt still counts");
        let note = attempt.response.as_deref().unwrap();
        assert!(
            note.starts_with("[response not stored: the store refused it"),
            "{note}"
        );
        for id in [0, 5, 7, 9] {
            assert_eq!(table.stored[&id], batch[id as usize], "written as it came");
        }
    }

    #[tokio::test]
    async fn a_settlement_refused_even_as_a_stand_in_is_dropped_alone() {
        let mut table = Table::new(|s| s.delivery_id == 3);
        let written = write_batch(&batch(8, None), later(), &mut table).await;
        assert_eq!(written.applied, vec![0, 1, 2, 4, 5, 6, 7]);
        assert_eq!(written.dropped, vec![3]);
        assert!(written.replaced.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreachable_store_is_retried_whole_without_splitting() {
        let mut table = Table::new(|_| false);
        table.outage = 1..4;
        let written = write_batch(&batch(10, None), later(), &mut table).await;
        assert_eq!(written.applied, (0..10).collect::<Vec<_>>());
        assert_eq!(table.writes, 4);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreachable_store_past_the_deadline_leaves_the_batch_to_the_reaper() {
        let mut table = Table::new(has_nul);
        table.outage = 1..usize::MAX;
        let deadline = Instant::now() + Duration::from_secs(3);
        let written = write_batch(&batch(10, Some(2)), deadline, &mut table).await;
        assert!(written.applied.is_empty());
        assert_eq!(written.dropped, (0..10).collect::<Vec<_>>());
        assert!(Instant::now() < deadline);
    }

    /// Issue 23, item 2: the database refuses for 7.3 s and the leases end 10 s after the
    /// first write. The backoff reaches 3.2 s (writes at 0, 0.1, 0.3, 0.7, 1.5, 3.1 and 6.3 s);
    /// the next 5 s wait would pass the leases, so it is shortened to end 0.5 s before them and
    /// the write at 9.5 s lands, instead of the batch going to the reaper and being sent again.
    #[tokio::test(start_paused = true)]
    async fn the_last_wait_is_shortened_to_write_before_the_leases_expire() {
        let mut table = Table::new(|_| false);
        let start = Instant::now();
        table.down_until = Some(start + Duration::from_millis(7_300));
        let deadline = start + Duration::from_secs(10);
        let written = write_batch(&batch(10, None), deadline, &mut table).await;
        assert!(written.dropped.is_empty(), "dropped {:?}", written.dropped);
        assert_eq!(written.applied, (0..10).collect::<Vec<_>>());
        assert_eq!(table.writes, 8);
        assert!(Instant::now() <= deadline - LEASE_MARGIN);
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_in_the_middle_of_a_split_loses_and_repeats_nothing() {
        let mut table = Table::new(has_nul);
        // Write 1 (all) is refused, write 2 (first half) applies, writes 3-4 meet an outage.
        table.outage = 3..5;
        let written = write_batch(&batch(16, Some(12)), later(), &mut table).await;
        assert_eq!(written.applied, (0..16).collect::<Vec<_>>());
        assert_eq!(written.replaced, vec![12]);
        assert_eq!(table.stored.len(), 16);
    }
}
