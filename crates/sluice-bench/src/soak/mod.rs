//! `soak`: a seeded, randomized fault soak of a fleet. One API process and three dispatcher
//! processes (`sluice serve --role …`, the binary beside this one) on a fresh PostgreSQL
//! database reached through a `FreezeProxy` (which freezes and drops connections), and a
//! `redis-server` of their own, under steady load: several fast endpoints and one slow endpoint
//! whose fleet-wide lane is N. Every POST carries an `Idempotency-Key` and is retried with the
//! same key (error, timeout, refused connection while the API is down) until it is
//! acknowledged. A schedule drawn from `--seed` spreads faults over `--duration` (default
//! 30 min; `--smoke`: one of each kind in about 45 s), one at a time, each followed by a quiet
//! gap so its tail can be read:
//!
//! - `dispatcher-kill`: `kill -9` of a dispatcher, started again a few seconds later;
//! - `dispatcher-sigterm`: SIGTERM (it drains and exits), started again after it exited;
//! - `api-kill`: `kill -9` of the API, started again on the same port;
//! - `db-freeze`: the proxy forwards nothing for 5–15 s (new connections wait too);
//! - `db-restart`: the proxy closes every connection and refuses new ones for 2–8 s;
//! - `redis-kill`: `kill -9` of Redis, started again empty a few seconds later.
//!
//! Then the load stops and the run waits (bounded) until every acknowledged message is
//! delivered. The verdicts:
//!
//! - **lost**: acknowledged (202/200) messages never delivered: 0 (holds at any size);
//! - **exits**: no process exits that the schedule did not stop (each child is polled every
//!   100 ms; holds at any size);
//! - **lane**: the slow receiver never serves more than N requests at once (any size);
//! - **duplicates**: every duplicate is *explained*: its message's first arrival lies within
//!   the total attempt deadline (15 s) before a dispatcher `kill -9` (up to 1 s after it), or
//!   from that long before a database freeze or restart until 1 s after its end; those cut an
//!   attempt off from its settle, and the delivery comes back when its lease expires. A
//!   SIGTERM, an API kill or a Redis kill explains none;
//! - **tails**: each fault's tail is back to baseline within twice its length (see
//!   [`verdicts::tail`]).
//!
//! A smoke run fails on the first three only (the others are timing claims).
//!
//! # Layout
//! - [`schedule`]: the kinds of fault and the seeded schedule (pure);
//! - [`rig`]: the fleet's processes, Redis and the proxy, each fault inflicted and undone;
//! - [`run`](mod@run): the fleet, the load through the schedule, the drain, what was observed;
//! - [`verdicts`]: tails, late requests, explained duplicates (pure, unit-tested);
//! - [`figures`](mod@figures): the report and the chart.

mod figures;
mod rig;
mod run;
mod schedule;
mod verdicts;

use std::time::Duration;

use anyhow::{Context, bail};

use super::BenchArgs;
use super::harness::FreshDatabase;
use super::procs::sluice_binary;
use super::producer::{Defaults, Sizes};
use super::report::Report;
use figures::{chart, figures};
use run::drive;
use schedule::Schedule;

/// Timeline groups.
const HEALTHY: usize = 0;
const SLOW: usize = 1;
/// Dispatcher processes.
const DISPATCHERS: usize = 3;
/// The schedule's seed without `--seed`.
const DEFAULT_SEED: u64 = 23;
/// The load without `--duration`, seconds.
const DEFAULT_DURATION_S: f64 = 1800.0;
/// The fleet's lease TTL (the default): what a killed dispatcher leaves leased does not wait
/// for it, but for the dispatcher to be known dead ([`KNOWN_DEAD_S`]).
const LEASE_TTL_S: f64 = 60.0;
/// A killed dispatcher is known dead once its heartbeat has missed two intervals (5 s, the
/// default) with its connection gone; its leases are then expired and returned by the next reap.
const KNOWN_DEAD_S: f64 = 10.0;
/// The dispatchers' reap interval (the default): an expired lease returns within it.
const REAP_S: f64 = 5.0;
/// The default total attempt deadline: an attempt in flight at a fault began at most this long
/// before it.
const ATTEMPT_S: f64 = 15.0;
/// After a fault's end, a duplicate's first arrival still counts as at the fault.
const EXPLAIN_AFTER_S: f64 = 1.0;
/// A tail is over when the healthy p99 per second is at most this many times the baseline p99…
const TAIL_FACTOR: f64 = 2.0;
/// … or this many milliseconds, whichever is larger (a debug build on a busy machine has a
/// baseline p99 of tens of milliseconds, where doubling means nothing).
const TAIL_FLOOR_MS: f64 = 250.0;
/// How often the children are polled for an exit.
const POLL: Duration = Duration::from_millis(100);
/// The PostgreSQL the fresh database is created beside, without `--database-url` or
/// `SLUICE_TEST_DATABASE_URL`.
const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// The load without its flags.
const LOAD: Defaults = Defaults {
    healthy: (5, 3),
    healthy_rate: (28.0, 20.0),
    slow_ms: 300,
    slow_rate: (8.0, 6.0),
};

/// Run the scenario and report.
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    if args.target.is_some() || args.redis_url.is_some() {
        bail!(
            "soak starts its own processes, database proxy and redis-server: give it \
             --database-url only"
        );
    }
    let server = args
        .database_url
        .clone()
        .or_else(|| std::env::var("SLUICE_TEST_DATABASE_URL").ok())
        .unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned());
    let binary = sluice_binary()?;
    // reqwest is built without a default TLS provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let log_dir = std::env::temp_dir().join(format!(
        "sluice-bench-soak-{}-{}",
        std::process::id(),
        sluice::ids::lease_token()
    ));
    std::fs::create_dir_all(&log_dir).with_context(|| format!("{}", log_dir.display()))?;
    let db = FreshDatabase::create(&server).await?;
    let outcome = async {
        let sizes = Sizes::of(args, LOAD);
        let seed = args.seed.unwrap_or(DEFAULT_SEED);
        let duration_s = args.duration.unwrap_or(DEFAULT_DURATION_S);
        let schedule = Schedule::new(seed, duration_s, args.smoke);
        let (seen, timeline) = drive(args, sizes, schedule, binary, &db.url, &log_dir).await?;
        let mut report = figures(args, sizes, seed, &timeline, &seen);
        chart(args, &mut report, &timeline, &seen)?;
        anyhow::Ok(report)
    }
    .await;
    db.drop_it().await;
    // The logs go only when every claim held, timing claims included (a long tail is read in
    // them too).
    match &outcome {
        Ok(report) if report.failures() == 0 => {
            let _ = std::fs::remove_dir_all(&log_dir);
        }
        _ => eprintln!("soak: process logs kept in {}", log_dir.display()),
    }
    outcome
}

/// `v` to one decimal.
fn round(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}
