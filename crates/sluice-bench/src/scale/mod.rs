//! `scale`: one burst (20,000 messages from 32 producers) into a tenant with 10, 1,000, 10,000
//! and 100,000 endpoints, each message reaching `--fan-out` of them (one by default; endpoint
//! `i` subscribes to `e.{i / fan-out}` and messages cycle through the types), all endpoints on
//! one fast loopback receiver. Per count: ingest and delivery rates, CPU per delivery, claim
//! time, enqueue→delivery latency and memory, from a fresh store each (a fresh PostgreSQL
//! database per count with `--database-url`): what sluice's cost per delivery owes to the
//! number of endpoints. `--registered N` adds N idle endpoints of another tenant, written straight
//! to the store: registered-but-idle endpoints should cost nothing but disk.
//!
//! # Layout
//! - [`burst`](mod@burst): the standard burst and what it measures (shared with `history`);
//! - [`run`](mod@run): one endpoint count on a fresh sluice;
//! - [`figures`]: the report and the chart. `scale` reports; it judges nothing.

mod burst;
mod figures;
mod run;

use std::time::Duration;

use crate::BenchArgs;
use crate::report::Report;
pub(crate) use burst::{Burst, BurstPlan, burst};
use run::one;

/// Endpoints created through the API at once.
const SETUP_CONCURRENCY: usize = 32;
/// Registered endpoints written to the store per transaction.
const REGISTER_BATCH: u64 = 2_000;
/// Longest wait for the burst to be delivered.
const DRAIN_LIMIT: Duration = Duration::from_secs(300);

/// What one endpoint count measured.
struct Row {
    endpoints: usize,
    setup_s: f64,
    register_s: Option<f64>,
    burst: Burst,
}

/// Run and report.
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let counts: Vec<usize> = match args.endpoints {
        Some(n) => vec![n.max(1)],
        None => args.sized(vec![10, 1_000, 10_000, 100_000], vec![10, 200]),
    };
    let fan_out = args.fan_out.unwrap_or(1).max(1);
    let messages = args.messages.unwrap_or(args.sized(20_000, 400)).max(1);
    let producers = args.producers.unwrap_or(32).max(1);
    let mut rows = Vec::with_capacity(counts.len());
    for &n in &counts {
        let row = match &args.database_url {
            Some(url) => {
                let db = super::harness::FreshDatabase::create(url).await?;
                let mut run_args = args.clone();
                run_args.database_url = Some(db.url.clone());
                let row = one(&run_args, n, fan_out, messages, producers).await;
                db.drop_it().await;
                row?
            }
            None => one(args, n, fan_out, messages, producers).await?,
        };
        if !args.json {
            eprintln!(
                "scale: {n} endpoints: {:.0} deliveries/s, {:.0} messages/s ingested",
                row.burst.delivery_per_s, row.burst.ingest_per_s
            );
        }
        rows.push(row);
    }

    figures::report(args, &counts, fan_out, messages, producers, &rows)
}
