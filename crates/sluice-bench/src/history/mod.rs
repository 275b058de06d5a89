//! `history`: what months of delivered history cost the queue. The standard burst (`scale`'s:
//! 20,000 messages from 32 producers to 10 endpoints of one tenant, one endpoint each) runs
//! three times, each on a fresh store: **empty**; holding `--history N` delivered messages
//! (10,000,000 by default), each with its delivery and its attempt, spread over the last 30
//! days and written straight to the store (kept: retention 30 days); and the same history
//! with the **retention purge** running through the burst (retention 20 days, so the oldest
//! third is due for deletion when sluice starts and the reaper's first pass deletes it while
//! the burst runs). Per phase: deliveries/s, claim p50/p99, store CPU per delivery, the sizes
//! of the queue tables and their indexes before and after, and what the purge deleted; each
//! history phase's throughput and claim p99 against the empty store's.
//!
//! The history belongs to the burst's own endpoints (their delivered rows are in the same
//! indexes the burst writes), written between two starts of sluice on the same store: the
//! first creates the tenant and endpoints through the API, the second measures.
//!
//! # Layout
//! - [`run`](mod@run): one phase on a fresh store, the burst, the table sizes;
//! - [`fill`]: the history written straight to the store;
//! - [`verdicts`]: slowdowns against the empty store and their targets (pure, unit-tested);
//! - [`figures`]: the report and the chart.

mod figures;
mod fill;
mod run;
mod verdicts;

use crate::BenchArgs;
use crate::report::Report;
use crate::scale::Burst;
use run::phase;

/// Days the history spans, ending now.
const SPAN_DAYS: i64 = 30;
/// Retention of the history phase: everything written is kept.
const KEEP: &str = "31d";
/// Retention of the purge phase: a third of the history is older.
const PURGE: &str = "20d";
/// History rows written per statement.
const FILL_CHUNK: u64 = 250_000;
/// The payload of every history message (about the size of a small webhook body).
const PAYLOAD: &str = r#"{"type":"invoice.paid","data":{"id":"in_000000000000","amount":4200,"currency":"eur","customer":"cus_000000000000","lines":[{"sku":"plan-pro","quantity":1}],"note":"history written by sluice bench history"}}"#;
/// Throughput and claim p99 with history, at most this many times the empty store's.
const HISTORY_TARGET: f64 = 1.2;
/// The same with the purge running.
const PURGE_TARGET: f64 = 1.3;

/// The tables the history lives in.
const TABLES: [&str; 3] = ["messages", "deliveries", "attempts"];

/// One phase's figures.
struct Phase {
    name: &'static str,
    fill_s: f64,
    burst: Burst,
    before: Sizes,
    after: Sizes,
    /// History rows (deliveries) left at the end.
    history_left: u64,
}

/// Bytes of each queue table and of its indexes.
#[derive(Debug, Clone, Default)]
struct Sizes {
    /// (table, heap bytes, index bytes)
    tables: Vec<(&'static str, u64, u64)>,
}

impl Sizes {
    fn total_mib(&self) -> f64 {
        self.tables.iter().map(|(_, h, i)| h + i).sum::<u64>() as f64 / (1024.0 * 1024.0)
    }
}

/// Run and report.
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let history = args.history.unwrap_or(args.sized(10_000_000, 3_000));
    let endpoints = args.endpoints.unwrap_or(10).max(1);
    let messages = args.messages.unwrap_or(args.sized(20_000, 400)).max(1);
    let producers = args.producers.unwrap_or(32).max(1);
    let mut phases = Vec::new();
    for (name, rows, retention) in [
        ("empty", 0, KEEP),
        ("history", history, KEEP),
        ("purge", history, PURGE),
    ] {
        let phase = phase(args, name, rows, retention, endpoints, messages, producers).await?;
        if !args.json {
            eprintln!(
                "history: {name}: {:.0} deliveries/s, claim p99 {:.1} ms, {:.0} MiB of queue tables",
                phase.burst.delivery_per_s,
                phase.burst.claim_p99_ms.unwrap_or(f64::NAN),
                phase.after.total_mib()
            );
        }
        phases.push(phase);
    }

    figures::report(args, history, endpoints, messages, producers, &phases)
}
