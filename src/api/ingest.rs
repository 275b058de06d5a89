//! Group commit on ingest: concurrent message POSTs are gathered into one store transaction,
//! and each request is answered only after that transaction commits.
//!
//! While one batch commits, the next gathers, so batches grow with load by themselves and an
//! idle system adds no delay. A request waits for its commit at most the store deadline, queue
//! included: on a hung database it gets a 503 in time, and if its batch commits later after all,
//! the producer's retry with the same `Idempotency-Key` finds it.
//!
//! The batcher also remembers when producers' writes last found the database full, for
//! `/readyz`: on a full filesystem SQLite can still commit a small probe into WAL space it
//! already has while a batch of messages cannot grow the files, so only the producers' own
//! writes tell.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::model::{Enqueued, NewMessage};
use crate::store::deadline::within;
use crate::store::{SharedStore, StoreError};

/// Most messages in one transaction.
const MAX_BATCH: usize = 512;

type Reply = oneshot::Sender<Result<Enqueued, StoreError>>;
type Job = (NewMessage, Reply);

/// How long producers' writes that found the database full keep `/readyz` failing when none
/// has succeeded since: long enough not to flap between probes, short enough that a process
/// taken out of rotation is tried again soon after an operator makes room.
pub const FULL_HOLD: Duration = Duration::from_secs(30);

/// When producers' writes last failed for lack of room, and why; cleared by one that succeeds.
#[derive(Default)]
struct LastFull(Mutex<Option<(Instant, String)>>);

impl LastFull {
    fn record<T>(&self, result: &Result<T, StoreError>) {
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(_) => *last = None,
            Err(StoreError::Full(cause)) => *last = Some((Instant::now(), cause.clone())),
            Err(_) => {}
        }
    }

    fn recent(&self) -> Option<String> {
        let last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        last.as_ref()
            .filter(|(at, _)| at.elapsed() < FULL_HOLD)
            .map(|(at, cause)| format!("{cause} ({}s ago)", at.elapsed().as_secs()))
    }
}

/// A handle for submitting messages to the batcher.
#[derive(Clone)]
pub struct Ingest {
    tx: mpsc::Sender<Job>,
    deadline: Duration,
    full: Arc<LastFull>,
}

impl Ingest {
    /// Start the batcher task; each submission waits at most `deadline` for its commit.
    pub fn start(store: SharedStore, metrics: Arc<Metrics>, deadline: Duration) -> Self {
        let (tx, rx) = mpsc::channel(4096);
        let full = Arc::new(LastFull::default());
        tokio::spawn(run(store, metrics, rx, full.clone()));
        Self { tx, deadline, full }
    }

    /// Why producers' writes cannot go in, when the latest of them found the database full
    /// (within [`FULL_HOLD`] and none has succeeded since).
    pub fn full_recently(&self) -> Option<String> {
        self.full.recent()
    }

    /// Store one message (fanned out) and return once it is durable, or `Unavailable` when
    /// that takes longer than the store deadline.
    pub async fn submit(&self, message: NewMessage) -> Result<Enqueued, StoreError> {
        within(self.deadline, async {
            let (tx, rx) = oneshot::channel();
            self.tx
                .send((message, tx))
                .await
                .map_err(|_| StoreError::Unavailable("ingest stopped".into()))?;
            rx.await
                .map_err(|_| StoreError::Unavailable("ingest stopped".into()))?
        })
        .await
    }
}

async fn run(
    store: SharedStore,
    metrics: Arc<Metrics>,
    mut rx: mpsc::Receiver<Job>,
    full: Arc<LastFull>,
) {
    let mut batch: Vec<NewMessage> = Vec::with_capacity(MAX_BATCH);
    let mut replies: Vec<Reply> = Vec::with_capacity(MAX_BATCH);
    let mut jobs: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    // Wait for one message, then take every other one already waiting, up to a batch.
    while rx.recv_many(&mut jobs, MAX_BATCH).await > 0 {
        for (message, reply) in jobs.drain(..) {
            // A producer that has stopped waiting (its deadline passed while the database hung)
            // was told nothing was stored: keep it that way.
            if !reply.is_closed() {
                batch.push(message);
                replies.push(reply);
            }
        }
        if batch.is_empty() {
            continue;
        }
        let enqueued = store.enqueue(&batch, crate::clock::now_ms()).await;
        full.record(&enqueued);
        match enqueued {
            Ok(results) => {
                metrics
                    .messages_accepted
                    .inc_by(results.iter().filter(|r| !r.duplicate).count() as u64);
                for (reply, result) in replies.drain(..).zip(results) {
                    let _ = reply.send(Ok(result));
                }
            }
            Err(e) if batch.len() > 1 => {
                // One bad message (or a deadlock with another process) must not fail its
                // neighbours: retry them one by one. Producers whose deadline has passed were
                // answered already and are skipped, so a hung database costs one more deadline
                // here, not one per message.
                tracing::debug!(error = %e, "batch enqueue failed; retrying singly");
                for (message, reply) in batch.iter().zip(replies.drain(..)) {
                    if reply.is_closed() {
                        continue;
                    }
                    let result = store
                        .enqueue(std::slice::from_ref(message), crate::clock::now_ms())
                        .await
                        .map(|mut r| r.remove(0));
                    full.record(&result);
                    if result.as_ref().is_ok_and(|r| !r.duplicate) {
                        metrics.messages_accepted.inc();
                    }
                    let _ = reply.send(result);
                }
            }
            Err(e) => {
                for reply in replies.drain(..) {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
        batch.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_full_database_is_remembered_until_a_write_succeeds_or_the_hold_passes() {
        let last = LastFull::default();
        let full: Result<(), StoreError> = Err(StoreError::Full("disk full".into()));
        last.record(&full);
        assert!(last.recent().is_some_and(|c| c.starts_with("disk full")));
        last.record(&Err::<(), _>(StoreError::Unavailable("blip".into())));
        assert!(last.recent().is_some(), "other errors do not clear it");
        last.record(&Ok(()));
        assert_eq!(last.recent(), None);
        last.record(&full);
        tokio::time::advance(FULL_HOLD).await;
        assert_eq!(last.recent(), None);
    }
}
