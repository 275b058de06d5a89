//! Group commit on ingest: concurrent message POSTs are gathered into one store transaction,
//! and each request is answered only after that transaction commits.
//!
//! While one batch commits, the next gathers, so batches grow with load by themselves and an
//! idle system adds no delay.

use tokio::sync::{mpsc, oneshot};

use crate::metrics::Metrics;
use crate::store::{Enqueued, NewMessage, SharedStore, StoreError};

/// Most messages in one transaction.
const MAX_BATCH: usize = 512;

type Reply = oneshot::Sender<Result<Enqueued, StoreError>>;
type Job = (NewMessage, Reply);

/// A handle for submitting messages to the batcher.
#[derive(Clone)]
pub struct Ingest {
    tx: mpsc::Sender<Job>,
}

impl Ingest {
    /// Start the batcher task.
    pub fn start(store: SharedStore, metrics: std::sync::Arc<Metrics>) -> Self {
        let (tx, rx) = mpsc::channel(4096);
        tokio::spawn(run(store, metrics, rx));
        Self { tx }
    }

    /// Store one message (fanned out) and return once it is durable.
    pub async fn submit(&self, message: NewMessage) -> Result<Enqueued, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send((message, tx))
            .await
            .map_err(|_| StoreError::Unavailable("ingest stopped".into()))?;
        rx.await
            .map_err(|_| StoreError::Unavailable("ingest stopped".into()))?
    }
}

async fn run(store: SharedStore, metrics: std::sync::Arc<Metrics>, mut rx: mpsc::Receiver<Job>) {
    let mut batch: Vec<NewMessage> = Vec::with_capacity(MAX_BATCH);
    let mut replies: Vec<Reply> = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some((message, reply)) = next.take() {
            batch.push(message);
            replies.push(reply);
            if batch.len() < MAX_BATCH {
                next = rx.try_recv().ok();
            }
        }
        match store.enqueue(&batch, crate::clock::now_ms()).await {
            Ok(results) => {
                metrics
                    .messages_accepted
                    .inc_by(results.iter().filter(|r| !r.duplicate).count() as u64);
                for (reply, result) in replies.drain(..).zip(results) {
                    let _ = reply.send(Ok(result));
                }
            }
            Err(e) if batch.len() > 1 => {
                // One bad message must not fail its neighbours: retry them one by one.
                tracing::debug!(error = %e, "batch enqueue failed; retrying singly");
                for (message, reply) in batch.iter().zip(replies.drain(..)) {
                    let result = store
                        .enqueue(std::slice::from_ref(message), crate::clock::now_ms())
                        .await
                        .map(|mut r| r.remove(0));
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
