//! Ingest from a queue: events taken from a RabbitMQ queue, a NATS JetStream consumer or a
//! Redis stream the producer already writes to (`--ingest-from`), each stored exactly as
//! `POST /v1/messages` stores one (through [`crate::api::messages::accept`], into the same group
//! commit, [`crate::api::ingest`]).
//!
//! A message is acknowledged to its broker only once its event is durable, so a crash in
//! between redelivers it, and its idempotency key (its own, else one derived from its broker
//! identity, [`event`]) makes the redelivery harmless. A message that is not a valid event is
//! refused the broker's own way (RabbitMQ `basic.reject` without requeue, to the queue's
//! dead-letter exchange; JetStream `Term` with the reason; Redis, an entry in a stream of
//! refusals) and counted; one the store cannot take now is kept unacknowledged and tried again
//! with [`backoff`], never refused.
//!
//! # Layout
//! - [`settings`]: the `--ingest-from` URLs.
//! - [`event`]: the message's envelope and its idempotency key.
//! - [`backoff`]: the waits between tries.
//! - `tenants`: the tenants known to exist, remembered as briefly as the API's tokens.
//! - [`rabbitmq`], [`nats`], [`redis`]: one consumer per broker kind, each reconnecting with
//!   backoff on its own task.

pub mod backoff;
pub mod event;
mod nats;
mod rabbitmq;
mod redis;
pub mod settings;
mod tenants;

use crate::api::AppState;
use crate::api::messages::{Submission, accept, trace_context_of};
use crate::metrics::IngestLabel;
use crate::shutdown::{Phase, Shutdown};
use crate::store::StoreError;

use backoff::Backoff;
use settings::{Broker, Source};
use tenants::KnownTenants;

/// What became of one message: what its consumer tells the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Durable (or a repeat of one that is, with the same event): acknowledge.
    Stored {
        /// A repeat of an idempotency key already stored.
        duplicate: bool,
    },
    /// Not a valid event, and never will be: refuse it to the dead-letter place, with why.
    Refused(String),
}

impl Outcome {
    /// The metric's `outcome` label.
    fn label(&self) -> &'static str {
        match self {
            Outcome::Stored { duplicate: false } => "stored",
            Outcome::Stored { duplicate: true } => "duplicate",
            Outcome::Refused(_) => "refused",
        }
    }
}

/// Every `outcome` label, created at 0 for each source: `retried` counts the tries that found
/// the store unavailable.
const OUTCOMES: [&str; 4] = ["stored", "duplicate", "refused", "retried"];

/// Start one consumer per source on `shutdown`'s tracker, each until the drain begins (a
/// message taken but not yet acknowledged then is redelivered by its broker).
pub fn start(state: &AppState, sources: &[Source], shutdown: &Shutdown) {
    for source in sources {
        let taker = Taker {
            state: state.clone(),
            source: source.name(),
            tenants: KnownTenants::default(),
        };
        for outcome in OUTCOMES {
            let _ = taker.counter(outcome);
        }
        let source = source.clone();
        tracing::info!(source = %taker.source, broker = %source.host(), "ingesting");
        shutdown.spawn_until(Phase::StopClaiming, async move {
            // A broker that goes away, or is not there yet, is waited for with backoff, on
            // this source's task alone; each consumer resets it once connected.
            let mut backoff = Backoff::default();
            loop {
                let ended = match &source.broker {
                    Broker::Rabbitmq { .. } => {
                        rabbitmq::consume(&taker, &source, &mut backoff).await
                    }
                    Broker::Nats { .. } => nats::consume(&taker, &source, &mut backoff).await,
                    Broker::Redis { .. } => redis::consume(&taker, &source, &mut backoff).await,
                };
                let wait = backoff.failed();
                tracing::warn!(source = %taker.source, broker = %source.host(), error = %ended,
                    retry_in = ?wait, "ingest: no consumer on the broker; trying again");
                tokio::time::sleep(wait).await;
            }
        });
    }
}

/// A message's W3C trace context as its broker carried it (headers, or a Redis entry's fields
/// named `traceparent` and `tracestate`), not yet checked.
#[derive(Debug, Default)]
pub(super) struct Trace {
    /// `traceparent`.
    pub parent: Option<String>,
    /// `tracestate`.
    pub state: Option<String>,
}

/// Stores the events of one source, as the API would.
struct Taker {
    state: AppState,
    /// The source's name, its metrics' `source` label.
    source: String,
    /// Tenants its messages named that exist.
    tenants: KnownTenants,
}

impl Taker {
    fn counter(&self, outcome: &'static str) -> prometheus_client::metrics::counter::Counter {
        self.state
            .metrics
            .ingest_messages
            .get_or_create(&IngestLabel {
                source: self.source.clone(),
                outcome,
            })
            .clone()
    }

    /// Store the event in `body` (its broker identity `identity`), trying again with backoff
    /// for as long as the store cannot take it: the answer is always final, and the message is
    /// acknowledged or refused by it.
    async fn take(&self, body: &[u8], identity: Option<&str>, trace: &Trace) -> Outcome {
        let mut backoff = Backoff::default();
        loop {
            match self.try_take(body, identity, trace).await {
                Ok(Outcome::Refused(reason)) => return self.refuse(reason),
                Ok(outcome) => {
                    self.counter(outcome.label()).inc();
                    return outcome;
                }
                Err(cause) => {
                    self.counter("retried").inc();
                    let wait = backoff.failed();
                    tracing::warn!(source = %self.source, identity, %cause, retry_in = ?wait,
                        "ingest: the store cannot take a message now; keeping it");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// Refuse a message for `reason`: counted and logged; the consumer refuses it to its broker.
    fn refuse(&self, reason: String) -> Outcome {
        self.counter("refused").inc();
        tracing::warn!(source = %self.source, %reason, "ingest: refused a message");
        Outcome::Refused(reason)
    }

    /// One try: the outcome, or why the store could not take it now.
    async fn try_take(
        &self,
        body: &[u8],
        identity: Option<&str>,
        trace: &Trace,
    ) -> Result<Outcome, String> {
        let event = match event::read(body, identity) {
            Ok(event) => event,
            Err(reason) => return Ok(Outcome::Refused(reason)),
        };
        // The API knows its tenant from the token; a message names it, so it must exist.
        if !self.tenants.knows(&event.tenant_id) {
            match self.state.store.tenant(&event.tenant_id).await {
                Ok(_) => self.tenants.found(&event.tenant_id),
                Err(StoreError::NotFound(_)) => {
                    return Ok(Outcome::Refused(format!(
                        "tenant_id: no tenant {:?}",
                        event.tenant_id
                    )));
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        // Read as `POST /v1/messages` reads its headers: an invalid context is ignored.
        let (traceparent, tracestate) = match &trace.parent {
            Some(parent) => trace_context_of(parent, trace.state.as_deref()),
            None => (None, None),
        };
        let submission = Submission {
            tenant_id: event.tenant_id,
            event_type: event.event_type,
            payload: &event.payload,
            idempotency_key: event.idempotency_key.as_deref(),
            traceparent,
            tracestate,
        };
        match accept(&self.state, submission).await {
            Ok(enqueued) => Ok(Outcome::Stored {
                duplicate: enqueued.duplicate,
            }),
            // The store's trouble (unavailable, full, failing): the message is not at fault.
            Err(p) if p.status >= 500 => Err(p.detail),
            // A tenant deleted between the look-up and the insert is a conflict too.
            Err(p) => Ok(Outcome::Refused(match p.field {
                Some(field) => format!("{field}: {}", p.detail),
                None => p.detail,
            })),
        }
    }
}
