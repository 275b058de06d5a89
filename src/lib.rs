//! sluice: a webhook dispatcher where one slow, dead or hostile endpoint never takes delivery
//! away from the others.
//!
//! # Layout
//!
//! The path of one event, and where each step lives:
//!
//! - [`api`]: producers POST messages; tenants manage endpoints and read the evidence.
//! - [`store`]: the durable queue (embedded SQLite or PostgreSQL): messages, one delivery row per
//!   subscribed endpoint, attempts; leases with fencing tokens.
//! - [`lease`]: the leaser claims batches as far as free capacity allows, the reaper returns
//!   expired leases, and drain releases what has not started.
//! - [`admission`]: per-endpoint lanes (bulkheads with an acquisition deadline), the AIMD
//!   governor, the latency and error breakers, and fleet-wide lanes in Redis.
//! - [`delivery`]: the signed HTTP attempt with its timeouts and response classification,
//!   behind the [`egress`] guard, signed by [`signing`].
//! - [`retry`]: the backoff schedule, Retry-After, shed delays.
//! - [`dispatcher`]: claim → admit → deliver → settle, wired together.
//! - [`stats`]: rolling per-endpoint windows and the evidence arithmetic.
//! - [`sizing`]: Little's Law, square-root staffing, Erlang C, layout, autoscaling.
//! - [`config`] and [`cli`]: settings validated once; the thin command line.

pub mod admission;
pub mod api;
pub mod bench;
pub mod cli;
pub mod clock;
pub mod config;
pub mod delivery;
pub mod dispatcher;
pub mod egress;
pub mod ids;
pub mod lease;
pub mod metrics;
pub mod notify;
pub mod plan;
pub mod receivers;
pub mod retry;
pub mod server;
pub mod signing;
pub mod sizing;
pub mod stats;
pub mod store;
