//! `sluice bench <scenario>`: the seeds' failures as reproducible runs with figures and charts.
//!
//! Every run starts the loopback receivers it needs, starts a sluice in this process (embedded
//! SQLite in a fresh directory unless `--database-url`/`--redis-url`, or drives `--target`),
//! sends traffic for a bounded time, and reports a table (or `--json`) and an SVG chart.
//!
//! # Layout
//! - [`harness`]: the sluice under test and its API; [`probe`]: its live dispatcher state.
//! - [`receiver`]: timing receivers; [`load`]: producers; [`timeline`]: per-second latencies.
//! - [`phase`]: healthy customers next to one bad one, the shape of most scenarios; [`compare`]:
//!   the figures and chart panel of healthy latency with and without it.
//! - [`watch`]: sampling and the progress bar; [`sys`]: CPU and memory from `/proc`.
//! - [`report`] and [`chart`]: the output.
//! - One file per scenario: [`throughput`], [`slow_consumer`], [`dead_endpoint`],
//!   [`throttled`], [`flood`].

pub mod chart;
pub mod compare;
pub mod dead_endpoint;
pub mod flood;
pub mod harness;
pub mod load;
pub mod phase;
pub mod probe;
pub mod receiver;
pub mod report;
pub mod slow_consumer;
pub mod sys;
pub mod throttled;
pub mod throughput;
pub mod timeline;
pub mod watch;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};

use report::Report;

/// The scenarios, named after what they prove.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// Many endpoints, fast receivers, 32 producers: ingest and delivery rates, CPU, memory.
    Throughput,
    /// Seed 000: one endpoint answering in seconds at a high rate among healthy ones.
    SlowConsumer,
    /// Seed 003: a blackhole endpoint with steady arrivals and a small pool.
    DeadEndpoint,
    /// An endpoint answering 429 + Retry-After above its capacity: the governor at work.
    Throttled,
    /// One tenant enqueues a large backlog while the others send normally.
    Flood,
}

impl Scenario {
    /// The name used on the command line and in file names.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Throughput => "throughput",
            Scenario::SlowConsumer => "slow-consumer",
            Scenario::DeadEndpoint => "dead-endpoint",
            Scenario::Throttled => "throttled",
            Scenario::Flood => "flood",
        }
    }
}

/// `sluice bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Which scenario to run.
    #[arg(value_enum)]
    pub scenario: Scenario,
    /// Seconds of load per phase (scenarios with a baseline run two phases).
    #[arg(long)]
    pub duration: Option<f64>,
    /// A very short run for CI: checks that the scenario works, not how fast.
    #[arg(long)]
    pub smoke: bool,
    /// The full-size run where it differs (flood: a 1,000,000-event backlog).
    #[arg(long, conflicts_with = "smoke")]
    pub full: bool,
    /// Print JSON with every figure and series instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Directory for the SVG charts.
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// PostgreSQL for the embedded sluice (use an empty database).
    #[arg(long, conflicts_with = "target")]
    pub database_url: Option<String>,
    /// Redis for fleet-wide lanes in the embedded sluice.
    #[arg(long, conflicts_with = "target")]
    pub redis_url: Option<String>,
    /// Drive an already running sluice at this URL (it must allow 127.0.0.0/8 as a destination).
    #[arg(long, requires = "admin_token")]
    pub target: Option<String>,
    /// The operator token of `--target`.
    #[arg(long)]
    pub admin_token: Option<String>,
    /// Global concurrency of the embedded sluice (default: the scenario's).
    #[arg(long)]
    pub concurrency: Option<u32>,
    /// Healthy endpoints (throughput: endpoints of the one tenant).
    #[arg(long)]
    pub endpoints: Option<usize>,
    /// Events per second each healthy customer sends.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Events per second sent to the slow, dead or throttling endpoint.
    #[arg(long)]
    pub bad_rate: Option<f64>,
    /// How long the slow endpoint (slow-consumer) or the noisy one (flood) takes to answer, ms.
    #[arg(long)]
    pub slow_ms: Option<u64>,
    /// Concurrent producers (throughput, and the flooding tenant).
    #[arg(long)]
    pub producers: Option<usize>,
    /// flood: events the noisy tenant enqueues.
    #[arg(long)]
    pub backlog: Option<u64>,
    /// throttled: requests the endpoint serves at once before answering 429.
    #[arg(long)]
    pub capacity: Option<usize>,
    /// throttled: seconds in the Retry-After header.
    #[arg(long)]
    pub retry_after: Option<u64>,
}

impl BenchArgs {
    /// Load duration of one phase: `--duration`, else `default` seconds (2 s with `--smoke`).
    pub fn duration(&self, default: f64) -> Duration {
        let secs = match (self.smoke, self.duration) {
            (true, Some(d)) => d.min(3.0),
            (true, None) => 2.0,
            (false, Some(d)) => d,
            (false, None) => default,
        };
        Duration::from_secs_f64(secs.max(0.5))
    }

    /// `value` unless smoke, where it is `smoke`.
    pub fn sized<T>(&self, value: T, smoke: T) -> T {
        if self.smoke { smoke } else { value }
    }

    /// What is measured, in words.
    pub fn describe(&self) -> String {
        if let Some(target) = &self.target {
            return format!("target {target} (CPU and memory figures are this bench process only)");
        }
        let store = match &self.database_url {
            Some(_) => "PostgreSQL store",
            None => "embedded SQLite store (synchronous=FULL)",
        };
        let redis = if self.redis_url.is_some() {
            ", Redis lanes"
        } else {
            ""
        };
        format!(
            "sluice in this process with the receivers and producers, {store}{redis}, all on loopback"
        )
    }
}

/// Write the scenario's chart under `--out` and list it in the report.
pub fn save_chart(
    args: &BenchArgs,
    report: &mut Report,
    title: &str,
    panels: &[chart::Panel],
) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out).with_context(|| format!("create {}", args.out.display()))?;
    let path = args.out.join(format!("{}.svg", args.scenario.name()));
    chart::draw(&path, title, panels)?;
    report.charts.push(path.display().to_string());
    Ok(())
}

/// Run the scenario and print its report.
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    if args.duration.is_some_and(|d| !(d > 0.0 && d <= 86_400.0)) {
        anyhow::bail!("--duration must be within (0, 86400] seconds");
    }
    let report = match args.scenario {
        Scenario::Throughput => throughput::run(&args).await?,
        Scenario::SlowConsumer => slow_consumer::run(&args).await?,
        Scenario::DeadEndpoint => dead_endpoint::run(&args).await?,
        Scenario::Throttled => throttled::run(&args).await?,
        Scenario::Flood => flood::run(&args).await?,
    };
    if args.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.table());
    }
    Ok(())
}
