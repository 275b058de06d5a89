//! `fleet`: one API process and three dispatcher processes (`sluice serve --role …`, the
//! `sluice` binary beside this one) on a fresh PostgreSQL database and a `redis-server` of
//! their own, under steady load over healthy endpoints and one slow endpoint whose fleet-wide
//! lane is N. First the same customers and load run on one `sluice serve` process (API and
//! dispatcher) for as long as the fleet's steady phase, on a fresh database of its own: the
//! baseline the fleet's healthy latency is compared with. While the fleet's load runs, one dispatcher is killed (`kill -9`), a second is stopped
//! with SIGTERM (scale-in), and Redis is stopped and started again; then the load stops and the
//! run waits until every accepted message is delivered.
//!
//! It checks the fleet's claims and prints a verdict for each: the slow receiver never holds
//! more than N requests at once (overall and per phase); no acknowledged (202) message is lost;
//! duplicates come only from attempts in flight at the kill and carry the first delivery's
//! `webhook-id`; nothing the SIGTERM'd dispatcher claimed stays leased after it exits;
//! `GET /v1/scale` follows the live dispatcher count within one heartbeat; deliveries go on while
//! Redis is down. Last, a backlog is drained by one process and by the fleet with the same total
//! concurrency ([`crate::saturation`]): the fleet's deliveries per second at saturation beside one
//! process's.
//!
//! # Layout
//! - [`run`](mod@run): the fleet, the load and its events, what was observed;
//! - [`baseline`]: the same load on one process, what the fleet is compared with;
//! - [`verdicts`]: loss and duplicates, the `/v1/scale` lag, drain counts (pure, unit-tested);
//! - [`figures`]: the report and the chart.

mod baseline;
mod figures;
mod run;
mod verdicts;

use std::time::Duration;

use anyhow::{Context, bail};

use super::BenchArgs;
use super::procs::sluice_binary;
use super::producer::{Defaults, Sizes};
use super::report::Report;
use run::drive;

/// Timeline groups.
const HEALTHY: usize = 0;
const SLOW: usize = 1;
/// Dispatcher processes at the start.
const DISPATCHERS: u32 = 3;
/// In-flight attempts of the saturation run's layouts (one process's default `--concurrency`),
/// split evenly over the fleet's dispatchers.
const SATURATION_CONCURRENCY: u32 = 512;
/// The phases, in order: steady, after the `kill -9`, after the SIGTERM, Redis down, Redis back,
/// and the drain after the load stops.
const PHASES: [(&str, &str); 6] = [
    ("steady", "steady, three dispatchers"),
    ("after_kill", "after kill -9 of one"),
    ("after_sigterm", "after SIGTERM of another"),
    ("redis_down", "Redis down"),
    ("redis_back", "Redis back"),
    ("drain", "load stopped, draining"),
];
/// How often `/v1/scale` is read.
const SCALE_EVERY: Duration = Duration::from_millis(500);
/// How often the slow receiver's in-flight count is sampled for the chart (its peak is exact).
const IN_FLIGHT_EVERY: Duration = Duration::from_millis(50);
/// The PostgreSQL the fresh database is created beside, without `--database-url` or
/// `SLUICE_TEST_DATABASE_URL`.
const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// When things happen, seconds after the load starts.
#[derive(Debug, Clone, Copy)]
struct Plan {
    kill_s: f64,
    term_s: f64,
    redis_down_s: f64,
    redis_up_s: f64,
    end_s: f64,
    /// Gap between the lease snapshots that tell a lease nobody holds from one in use.
    lease_gap: Duration,
}

impl Plan {
    fn new(args: &BenchArgs) -> Self {
        if args.smoke {
            let p = 4.0;
            return Self {
                kill_s: p,
                term_s: 2.0 * p,
                redis_down_s: 3.0 * p,
                redis_up_s: 4.0 * p,
                end_s: 5.0 * p,
                lease_gap: Duration::from_secs(2),
            };
        }
        let t = args.duration.unwrap_or(80.0).max(20.0);
        Self {
            kill_s: 0.25 * t,
            term_s: 0.5 * t,
            redis_down_s: 0.6875 * t,
            redis_up_s: 0.8125 * t,
            end_s: t,
            lease_gap: Duration::from_secs(5),
        }
    }

    /// Phase boundaries: `PHASES[i]` runs from `bounds[i]` to `bounds[i + 1]`.
    fn bounds(&self, drained_s: f64) -> [f64; 7] {
        [
            0.0,
            self.kill_s,
            self.term_s,
            self.redis_down_s,
            self.redis_up_s,
            self.end_s,
            drained_s.max(self.end_s),
        ]
    }
}

/// Run the scenario and report.
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    if args.target.is_some() || args.redis_url.is_some() {
        bail!(
            "fleet starts its own processes and its own redis-server (it restarts it): \
             give it --database-url only"
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
        "sluice-bench-fleet-{}-{}",
        std::process::id(),
        sluice::ids::lease_token()
    ));
    std::fs::create_dir_all(&log_dir).with_context(|| format!("{}", log_dir.display()))?;
    let outcome = drive(args, binary, &server, &log_dir).await;
    match &outcome {
        // A smoke run's timing claims fail by design (phases of a few seconds).
        Ok(report) if report.claims_failed(args.smoke) == 0 => {
            let _ = std::fs::remove_dir_all(&log_dir);
        }
        _ => eprintln!("fleet: process logs kept in {}", log_dir.display()),
    }
    outcome
}

/// The load without its flags.
const LOAD: Defaults = Defaults {
    healthy: (8, 3),
    healthy_rate: (40.0, 10.0),
    slow_ms: 250,
    slow_rate: (14.0, 10.0),
};

/// The dispatchers' heartbeat interval (the default: the fleet runs with defaults).
fn heartbeat() -> Duration {
    sluice::dispatcher::DispatchSettings::default().heartbeat_interval
}

/// `v` to one decimal.
fn round(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}
