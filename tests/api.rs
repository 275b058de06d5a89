//! The HTTP API end to end: a real sluice on 127.0.0.1:0 (SQLite), real loopback receivers,
//! `reqwest` as the client. Every route's happy path and its errors, tenant isolation,
//! idempotency under concurrency, dead letters and replay, the evidence, metrics, OpenAPI.

#[path = "api/deliveries.rs"]
mod deliveries;
#[path = "api/delivery_ids.rs"]
mod delivery_ids;
#[path = "api/errors.rs"]
mod errors;
#[path = "api/evidence.rs"]
mod evidence;
#[path = "api/hostile.rs"]
mod hostile;
#[path = "api/metrics.rs"]
mod metrics;
#[path = "api/operator.rs"]
mod operator;
#[path = "api/ordering.rs"]
mod ordering;
#[path = "api/rate_limit.rs"]
mod rate_limit;
#[path = "api/resources.rs"]
mod resources;
#[path = "api/schema.rs"]
mod schema;
use sluice_testkit as support;

pub use support::api::{Reply, assert_problem, states};
pub use support::{ADMIN, Sluice};
