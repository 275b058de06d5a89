//! sluice: a webhook dispatcher where one slow, dead or hostile endpoint never takes delivery
//! away from the others.
//!
//! # Layout
//!
//! The path of one event, and where each step lives:
//!
//! - [`api`]: producers POST messages; tenants manage endpoints, read the message log and the
//!   evidence, resend and recover deliveries.
//! - [`model`]: the nouns every part speaks in, one file per table: tenants, endpoints (with
//!   their rate limits, TLS settings and OAuth2 credentials), messages, deliveries and attempts,
//!   the queue's requests and reports, the fleet's heartbeats.
//! - [`store`]: the durable queue (embedded SQLite or PostgreSQL): messages, one delivery row per
//!   subscribed endpoint, attempts; leases with fencing tokens.
//! - [`admission`]: per-endpoint lanes (bulkheads with an acquisition deadline), the AIMD
//!   governor, the latency and error breakers, and fleet-wide lanes in Redis.
//! - [`delivery`]: the signed HTTP attempt with its timeouts, the endpoint's own headers and
//!   response classification, behind the [`egress`] guard, signed by [`signing`] (Standard
//!   Webhooks `v1` HMAC-SHA256 or `v1a` Ed25519); the OAuth2 tokens of HTTP endpoints and of
//!   Pub/Sub's service accounts.
//! - [`destinations`]: the broker attempt (RabbitMQ with publisher confirms, NATS
//!   JetStream, Redis Streams), signed like the HTTP one and judged by the same egress guard, over a bounded
//!   cache of broker connections; and the cloud ones (SQS, SNS, EventBridge signed with SigV4;
//!   Google Cloud Pub/Sub with a service account's token from delivery's OAuth2 tokens), an API
//!   call over delivery's HTTP clients.
//! - [`fairness`]: fair shares across tenants (start-time fair queuing over tenants with due
//!   work, weights and ceilings), applied by every claim.
//! - [`retry`]: the backoff schedule, Retry-After, shed delays.
//! - [`dispatcher`]: claim → admit → deliver → settle, wired together: the leaser claims batches
//!   as far as free capacity allows, the reaper returns expired leases and forgets idle
//!   endpoints, the auto-sizer follows live load, the heartbeat publishes this dispatcher's load
//!   to the store, and drain releases what has not started.
//! - [`ingest`]: events taken from the producer's own queue (a RabbitMQ queue, a JetStream
//!   consumer, a Redis stream, `--ingest-from`), stored as `POST /v1/messages` stores them and
//!   acknowledged to the broker only once durable.
//! - [`operational_webhooks`]: the notices sent to a tenant's operational webhook (an endpoint
//!   disabled, throttling, dead letters).
//! - [`traces`]: OpenTelemetry traces of deliveries: every attempt a span in the producer's
//!   trace (W3C `traceparent` kept with the message), sampled and exported over OTLP/HTTP in
//!   batches; off by default.
//! - [`metrics`]: the Prometheus registry (`webhook_deliveries_ok_total`,
//!   `webhook_deliveries_shed_total`, `delivery_duration_seconds{host}` and the `sluice_` family),
//!   per-endpoint series for the top-N endpoints by occupancy only, `process_*`.
//! - [`plan`]: `sluice plan`, sizing from a running sluice's measurements or its store.
//! - [`demo_receiver`]: `sluice receive`, a receiver that prints webhooks and checks their
//!   signatures.
//!
//! The benchmarks (`sluice bench`, crate `sluice-bench`) and what tests and benchmarks share
//! (loopback receivers, an in-process harness: crate `sluice-testkit`) live in their own
//! workspace members, so none of it is compiled into the server.
//! - [`clock`] and [`ids`]: wall-clock milliseconds and their RFC 3339 form; prefixed ids
//!   (`dlv_`/`att_` for the store's numbered rows, opaque under the installation's key), tokens
//!   and their hashes.
//! - [`stats`]: rolling per-endpoint windows and the evidence arithmetic.
//! - [`sizing`]: Little's Law, square-root staffing, Erlang C, layout, autoscaling.
//! - [`serve`]: `sluice serve` as a call: the store, the dispatcher, the API and the console
//!   wired together.
//! - [`shutdown`]: one shutdown for the process: a root cancellation token, a child token per
//!   phase of the drain, and the tracker every long-lived task is spawned on.
//! - [`listener`]: the HTTP listeners' defences against slow, idle and too many clients.
//! - [`web`]: what the API, the console and the listeners share: problem details
//!   (`application/problem+json`) and the request body's deadline.
//! - [`pem`]: certificates and keys as text, read strictly and written back canonically (an
//!   endpoint's CA bundle and client certificate, the operator's extra CAs).
//! - [`config`] and [`cli`]: settings validated once; the thin command line. Each component
//!   keeps its own settings type beside its code (`DispatchSettings` in [`dispatcher`],
//!   `ConsoleSettings` in [`console`], `ListenerSettings`, `EgressSettings`, …); `config`
//!   gathers them from above and names every bad value by its flag.
//! - [`setting`]: what every settings type shares, a leaf below them all: the shape of a value
//!   out of range and the duration syntax.
//! - [`console`]: the customer portal and the operator dashboard at `/console/`, server-rendered.
//!
//! # Floors
//!
//! A module imports only from the floors below its own (`.ci/import_circles.py` holds the same
//! table, and fails CI on an import that runs up a floor and on any circle):
//!
//! 1. The ground: [`clock`], [`ids`] (which reads the clock), [`setting`], [`pem`], [`web`] and
//!    [`shutdown`] import nothing else of sluice.
//! 2. [`model`], the nouns: only [`clock`] and [`ids`].
//! 3. Pure arithmetic: [`fairness`], [`retry`], [`stats`], [`sizing`] and [`signing`] import the
//!    nouns and the ground, never an I/O module (no store, delivery, egress, HTTP, console…).
//! 4. [`store`]: only [`model`], [`clock`], [`ids`] and [`fairness`] (its claim applies the fair
//!    shares). It never reaches up for a type: the nouns it keeps are the model's.
//! 5. The mechanisms: [`egress`], [`admission`], [`delivery`] (over admission and egress),
//!    [`destinations`] (over delivery's attempt report and clients), [`metrics`] (over delivery) and
//!    [`traces`] (over the nouns and [`setting`]), then
//!    [`listener`] and [`demo_receiver`]. None of them imports the
//!    store: what they need of a row comes as a noun.
//! 6. Orchestration and the edges, the only modules that hold a store:
//!    [`operational_webhooks`] (their sender), [`dispatcher`], [`plan`], [`api`], [`console`],
//!    [`ingest`] (over the API's acceptance); above them the start-up: [`config`], [`serve`]
//!    (the serve wiring) and [`cli`].

#![forbid(unsafe_code)]

pub mod admission;
pub mod api;
pub mod cli;
pub mod clock;
pub mod config;
pub mod console;
pub mod delivery;
pub mod demo_receiver;
pub mod destinations;
pub mod dispatcher;
pub mod egress;
pub mod fairness;
pub mod ids;
pub mod ingest;
pub mod listener;
pub mod metrics;
pub mod model;
pub mod operational_webhooks;
pub mod pem;
pub mod plan;
pub mod retry;
pub mod serve;
pub mod setting;
pub mod shutdown;
pub mod signing;
pub mod sizing;
pub mod stats;
pub mod store;
pub mod traces;
pub mod web;
