//! `sluice-bench <scenario>` (also reached as `sluice bench <scenario>`): slow, dead, throttling
//! and flooding endpoints as reproducible runs with figures and charts.
//!
//! A crate of its own so the server's binary carries none of it (no chart or progress-bar
//! libraries in its dependency graph); the loopback receivers come from `sluice-testkit`.
//!
//! Every run starts the loopback receivers it needs, starts a sluice in this process (embedded
//! SQLite in a fresh directory unless `--database-url`/`--redis-url`, or drives `--target`),
//! sends traffic for a bounded time, and reports a table (or `--json`) and an SVG chart. `fleet`
//! instead runs `sluice serve` processes (the binary beside this one) on PostgreSQL and a
//! `redis-server` of its own, and kills, stops and restarts them under load.
//!
//! # Layout
//! - [`harness`]: the sluice under test and its API; [`probe`]: its live dispatcher state.
//! - [`receiver`]: receivers that time deliveries into the [`timeline`] (per-second latencies);
//!   [`load`]: producers; [`producer`]: the fleet scenarios' producer (one POST, or retried on
//!   its `Idempotency-Key`) and [`arrivals`]: what their receivers saw.
//! - [`phase`]: healthy customers next to one bad one, the shape of most scenarios; [`compare`]:
//!   the figures and chart panel of healthy latency with and without it.
//! - [`watch`]: sampling and the progress bar; [`sys`]: CPU and memory from `/proc`.
//! - [`report`] and [`chart`]: the output (figures, notes, PASS/FAIL verdicts).
//! - A scenario of substance is a folder: `mod.rs` (its entry), `run.rs` (drives processes and
//!   load), `verdicts.rs` (pure judgements over the numbers collected, unit-tested) and
//!   `figures.rs` (the report): [`soak`] (and its fault `schedule`), [`fleet`], [`replay`],
//!   [`tenants`], [`hostile`] (and its `token_answer`), [`history`] (and its `fill`), [`scale`]
//!   (reports, judges nothing; its `burst` is `history`'s and `destinations`' too),
//!   [`destinations`] (and its broker `consumers`). The small ones are a file each:
//!   [`throughput`], [`slow_consumer`], [`dead_endpoint`], [`throttled`], [`flood`], [`tls`],
//!   [`rate_limited`], [`fifo`], [`drain`], [`backlog`], [`saturation`], [`enqueue`].
//! - [`procs`]: the `sluice serve` processes of a fleet, or a lone one (their flags from the
//!   testkit's process harness; the `redis-server` is the testkit's too, and so is `soak`'s
//!   freezing database proxy); [`stage`]: the sluice a phase drives, in this process or on such
//!   a fleet (`--dispatchers`).

mod arrivals;
mod backlog;
mod blocked_broker;
mod chart;
mod cloud_sink;
mod compare;
mod dead_endpoint;
mod destinations;
mod drain;
mod enqueue;
mod fifo;
mod fleet;
mod flood;
mod harness;
mod history;
mod hostile;
mod load;
mod otlp_sink;
mod phase;
mod probe;
mod procs;
mod producer;
mod rate_limited;
mod receiver;
mod replay;
mod report;
mod saturation;
mod scale;
mod slow_consumer;
mod soak;
mod stage;
mod store_cpu;
mod sys;
mod tenants;
mod throttled;
mod throughput;
mod timeline;
mod tls;
mod watch;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, ValueEnum};

use report::Report;

/// The scenarios, named after what they prove.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// Many endpoints, fast receivers, 32 producers: ingest and delivery rates, CPU, memory.
    Throughput,
    /// The same burst spread over 10 … 100,000 endpoints of one tenant: what each endpoint costs.
    Scale,
    /// One endpoint answering in seconds at a high rate among healthy ones: their latency must not move.
    SlowConsumer,
    /// A blackhole endpoint (accepts, never answers) with steady arrivals and a small pool.
    DeadEndpoint,
    /// An endpoint answering 429 + Retry-After above its capacity: the governor at work.
    Throttled,
    /// A RabbitMQ destination whose broker blocks publishers (a memory alarm) with steady
    /// arrivals beside healthy HTTP endpoints on a small pool: their latency must not move.
    BlockedBroker,
    /// One tenant enqueues a large backlog while the others send normally.
    Flood,
    /// An endpoint with a rate limit, offered three times its limit, among healthy ones: what
    /// it receives per second against its limit, and the healthy endpoints' latency.
    RateLimited,
    /// FIFO endpoints (one delivery at a time, in acceptance order) offered more than they
    /// can take, beside healthy ones: deliveries/s of each, the order read back from the store,
    /// and the healthy endpoints' latency.
    Fifo,
    /// A recorded peak shape (mixed, throttling, slow, dead endpoints) at 1×, 2× and 4×: oldest
    /// ready age, pool utilisation, 429 share, with pass/fail verdicts (a full run exits non-zero on
    /// a failure).
    Replay,
    /// One `sluice serve` process under a steady load (the baseline), then one API and three
    /// dispatcher processes on PostgreSQL + Redis under the same load: `kill -9` of
    /// one, SIGTERM of another, a Redis restart; lane bound, loss, duplicates, leases and
    /// `/v1/scale`, with pass/fail verdicts (a full run exits non-zero on a failure).
    Fleet,
    /// One tenant's backlog (2,000 endpoints, 200,000 deliveries) beside a quiet tenant, weights
    /// 1:2:4, a trickle: fair shares across tenants, with pass/fail verdicts.
    Tenants,
    /// A healthy tenant (5 messages/s, one fast endpoint) beside a hostile one on a pool of 64:
    /// 16 endpoints whose OAuth2 token URL never answers, 16 endpoints answering in 9.5 s (with
    /// and without a ceiling of half the pool), and a sluice process beside a 200 MB token
    /// answer: the healthy tenant's latency, duplicates, peak RSS, with pass/fail verdicts.
    Hostile,
    /// HTTPS receivers (a test CA made for the run) over keep-alive and with a handshake per
    /// delivery, beside plain HTTP: connect and TLS phases, what keep-alive saves.
    Tls,
    /// A seeded, randomized fault soak of a fleet (one API and three dispatcher processes on
    /// PostgreSQL behind a proxy that freezes and drops connections, a redis-server of its own):
    /// kill -9 and SIGTERM of dispatchers, kill -9 of the API, database freezes and restarts,
    /// Redis killed and started empty, under steady load with producers retrying on the same
    /// Idempotency-Key; loss, duplicates, exits, the lane bound and each fault's tail.
    Soak,
    /// The standard burst into an empty store, into one holding `--history N` delivered
    /// messages spread over 30 days, and into the same while the retention purge runs:
    /// throughput, claim time, store CPU and table sizes against the empty store's.
    History,
    /// The standard burst (20,000 messages) to one endpoint of each destination kind: a
    /// loopback HTTP receiver, RabbitMQ, NATS JetStream and Redis Streams on 127.0.0.1, SQS,
    /// SNS, EventBridge and Pub/Sub (see `--cloud`): deliveries/s, latency and the broker's
    /// acknowledgement time, each kind against HTTP.
    Destinations,
    /// PostgreSQL's two ways in, same tenant and fan-out (10 endpoints): 32 HTTP producers
    /// POSTing to /v1/messages, then 32 connections calling sluice.send_message (a transaction
    /// each), in alternating rounds: messages/s of each (medians), every delivery made.
    Enqueue,
}

impl Scenario {
    /// The name used on the command line and in file names.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Throughput => "throughput",
            Scenario::Scale => "scale",
            Scenario::SlowConsumer => "slow-consumer",
            Scenario::DeadEndpoint => "dead-endpoint",
            Scenario::BlockedBroker => "blocked-broker",
            Scenario::Throttled => "throttled",
            Scenario::Flood => "flood",
            Scenario::RateLimited => "rate-limited",
            Scenario::Fifo => "fifo",
            Scenario::Replay => "replay",
            Scenario::Fleet => "fleet",
            Scenario::Tenants => "tenants",
            Scenario::Hostile => "hostile",
            Scenario::Tls => "tls",
            Scenario::Soak => "soak",
            Scenario::History => "history",
            Scenario::Destinations => "destinations",
            Scenario::Enqueue => "enqueue",
        }
    }
}

/// What `destinations` delivers its cloud kinds (SQS, SNS, EventBridge, Pub/Sub) to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Cloud {
    /// A stand-in in the bench process that answers each service's success reply at once
    /// (signatures not verified, unsigned AWS calls counted): sluice's own ceiling per kind,
    /// the figure compared with HTTP's.
    #[default]
    Sink,
    /// moto (signature and IAM checking on) and Google's Pub/Sub emulator, each with its own
    /// ceiling from a client that is not sluice and its CPU beside it; 1,000 messages unless
    /// `--messages` says otherwise, as emulators are slow.
    Emulators,
}

/// What the throttling endpoint of `throttled` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum ThrottledKind {
    /// An HTTP receiver answering 429 with Retry-After.
    #[default]
    Http,
    /// An SQS destination whose service answers `RequestThrottled` (no Retry-After).
    Sqs,
    /// An SNS destination whose service answers `Throttling` (no Retry-After).
    Sns,
    /// An EventBridge destination whose service answers `ThrottlingException` (no Retry-After).
    Eventbridge,
    /// A Pub/Sub destination whose service answers `RESOURCE_EXHAUSTED` (no Retry-After).
    Pubsub,
}

/// `sluice-bench`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "sluice-bench",
    version,
    about = "Reproducible runs of sluice against slow, dead, throttling and flooding endpoints, with figures and charts"
)]
pub struct BenchArgs {
    /// Which scenario to run.
    #[arg(value_enum)]
    pub scenario: Scenario,
    /// Seconds of load per phase (scenarios with a baseline run two phases; fleet: the whole
    /// load, 80 s by default, its events at fixed fractions of it; soak: the whole load, 1800 s
    /// by default, its faults spread over it by `--seed`).
    #[arg(long)]
    pub duration: Option<f64>,
    /// A very short run for CI: checks that the scenario works, not how fast.
    #[arg(long)]
    pub smoke: bool,
    /// The full-size run where it differs (flood: 1,000,000 ready deliveries over 10,000
    /// endpoints, already in the store, drained beside the healthy tenants).
    #[arg(long, conflicts_with = "smoke")]
    pub full: bool,
    /// Print JSON with every figure and series instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Directory for the SVG charts.
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// PostgreSQL for the embedded sluice: throughput, scale and every phase of the mixed
    /// scenarios run in a fresh database created beside this one (and dropped after it). fleet
    /// always runs on PostgreSQL: this one, else `SLUICE_TEST_DATABASE_URL`, else
    /// `postgres://postgres@127.0.0.1:5432/postgres`.
    #[arg(long, conflicts_with = "target")]
    pub database_url: Option<String>,
    /// Redis for fleet-wide lanes in the embedded sluice.
    #[arg(long, conflicts_with = "target")]
    pub redis_url: Option<String>,
    /// Tracing on in the embedded sluice at full sampling (`always_on`): a span for every
    /// attempt exported over OTLP/HTTP to this collector (`…/v1/traces`), or to a stub in this
    /// process that answers 200 to every export with `sink` (default: tracing off).
    #[arg(long, conflicts_with = "target")]
    pub otlp_endpoint: Option<String>,
    /// Drive an already running sluice at this URL (it must allow 127.0.0.0/8 as a destination).
    #[arg(long, requires = "admin_token")]
    pub target: Option<String>,
    /// The operator token of `--target`.
    #[arg(long)]
    pub admin_token: Option<String>,
    /// Where `--target` serves `/metrics`, when it has an `--operator-listen` address
    /// (default: `/metrics` on `--target`, with the admin token).
    #[arg(long, requires = "target")]
    pub metrics_url: Option<String>,
    /// Global concurrency of the embedded sluice (default: the scenario's; hostile: 64; fleet:
    /// the saturation run's total, 512, split over the dispatchers).
    #[arg(long)]
    pub concurrency: Option<u32>,
    /// Healthy endpoints (throughput: endpoints of the one tenant; scale: run only this count
    /// instead of 10, 1,000, 10,000 and 100,000; tenants: the quiet tenant's, default 10).
    #[arg(long)]
    pub endpoints: Option<usize>,
    /// Events per second each healthy customer sends (hostile: the healthy tenant, default 5).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Events per second sent to the slow, dead or throttling endpoint (fifo: messages per
    /// second, each to every FIFO endpoint; default 100).
    #[arg(long)]
    pub bad_rate: Option<f64>,
    /// How long the slow endpoint (slow-consumer), the noisy one (flood), the busy tenant's
    /// (tenants, default 200) or the hostile tenant's (hostile, default 9500) takes to answer, ms.
    #[arg(long)]
    pub slow_ms: Option<u64>,
    /// Concurrent producers (throughput, and the flooding tenant).
    #[arg(long)]
    pub producers: Option<usize>,
    /// flood: events the noisy tenant enqueues (with `--full`: ready deliveries already in the
    /// store when the phase starts); tenants: messages the busy tenant fans out (default 100);
    /// hostile: messages the hostile tenant fans out (default 100);
    /// fleet: deliveries of the saturation backlog (default 30,000).
    #[arg(long)]
    pub backlog: Option<u64>,
    /// flood --full: endpoints of the noisy tenant the backlog is spread over (default 10,000);
    /// tenants: endpoints of the busy tenant (default 2,000); hostile: of the hostile tenant
    /// (default 16); fifo: FIFO endpoints (default 10).
    #[arg(long)]
    pub backlog_endpoints: Option<usize>,
    /// fleet: the slow endpoint's lane (`lane_size`), shared by the fleet through Redis
    /// (default 4).
    #[arg(long)]
    pub lane: Option<u32>,
    /// rate-limited: the endpoint's limit, events/s (default 50; it is offered three times that
    /// unless --bad-rate says otherwise, with bursts of twice the limit).
    #[arg(long)]
    pub limit: Option<f64>,
    /// throttled: requests the endpoint serves at once before answering 429.
    #[arg(long)]
    pub capacity: Option<usize>,
    /// throttled: seconds in the Retry-After header (an HTTP endpoint's; the cloud services
    /// send none).
    #[arg(long)]
    pub retry_after: Option<u64>,
    /// throttled: what the throttling endpoint is; a cloud kind's calls go to a stand-in for
    /// the service in the bench process that answers its success reply below the capacity
    /// and its throttling error above it.
    #[arg(long, value_enum, default_value_t)]
    pub kind: ThrottledKind,
    /// destinations: what the cloud kinds (SQS, SNS, EventBridge, Pub/Sub) deliver to.
    #[arg(long, value_enum, default_value_t)]
    pub cloud: Cloud,
    /// scale: endpoints each message reaches (default 1).
    #[arg(long)]
    pub fan_out: Option<usize>,
    /// scale, destinations: messages in the burst (default 20,000; destinations with
    /// `--cloud emulators`: 1,000).
    #[arg(long)]
    pub messages: Option<u64>,
    /// replay: the objective for the oldest ready delivery's age, seconds (default 5).
    #[arg(long)]
    pub objective: Option<f64>,
    /// tenants, hostile and the baseline-vs-bad scenarios (slow-consumer, dead-endpoint,
    /// throttled, flood, rate-limited, fifo): run each phase on a fleet of one API process and
    /// this many dispatcher processes (`sluice serve`, on PostgreSQL: `--database-url` or the test
    /// database, and a `redis-server` of their own) instead of in this process.
    #[arg(long)]
    pub dispatchers: Option<u32>,
    /// With `--dispatchers`: run the fleet without Redis (each dispatcher holds its share of
    /// every lane and rate limit, counted from the heartbeats).
    #[arg(long, requires = "dispatchers")]
    pub no_redis: bool,
    /// scale: endpoints registered beside the active ones (another tenant, written straight to
    /// the store, never sent to): what registered-but-idle endpoints cost.
    #[arg(long)]
    pub registered: Option<u64>,
    /// history: delivered messages (each with its delivery and attempt) written to the store
    /// before the burst, spread over the last 30 days (default 10,000,000).
    #[arg(long)]
    pub history: Option<u64>,
    /// soak: the seed of the fault schedule (the same seed and duration give the same faults
    /// at the same times; default 23).
    #[arg(long)]
    pub seed: Option<u64>,
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
        if let Some(n) = self.dispatchers.filter(|n| *n > 0) {
            let redis = if self.no_redis {
                "without Redis"
            } else {
                "and Redis"
            };
            return format!(
                "a fleet: one API process and {n} dispatcher processes (sluice serve) on \
                 PostgreSQL {redis}, receivers and producers in this process, all on loopback"
            );
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
        let traces = match self.otlp_endpoint.as_deref() {
            Some("sink") => ", tracing on (always_on) to an OTLP stub in this process",
            Some(_) => ", tracing on (always_on) to the given OTLP collector",
            None => "",
        };
        format!(
            "sluice in this process with the receivers and producers, {store}{redis}{traces}, all on loopback"
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

fn main() -> anyhow::Result<()> {
    let args = BenchArgs::parse();
    // The sluice under test runs in this process: `RUST_LOG` (e.g. `sluice=info`) shows its
    // log on standard error; without it the run is quiet.
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?
        .block_on(run(args))
}

/// Run the scenario and print its report.
async fn run(args: BenchArgs) -> anyhow::Result<()> {
    if args.duration.is_some_and(|d| !(d > 0.0 && d <= 86_400.0)) {
        anyhow::bail!("--duration must be within (0, 86400] seconds");
    }
    let report = match args.scenario {
        Scenario::Throughput => throughput::run(&args).await?,
        Scenario::Scale => scale::run(&args).await?,
        Scenario::SlowConsumer => slow_consumer::run(&args).await?,
        Scenario::DeadEndpoint => dead_endpoint::run(&args).await?,
        Scenario::BlockedBroker => blocked_broker::run(&args).await?,
        Scenario::Throttled => throttled::run(&args).await?,
        Scenario::Flood => flood::run(&args).await?,
        Scenario::RateLimited => rate_limited::run(&args).await?,
        Scenario::Fifo => fifo::run(&args).await?,
        Scenario::Replay => replay::run(&args).await?,
        Scenario::Fleet => fleet::run(&args).await?,
        Scenario::Tenants => tenants::run(&args).await?,
        Scenario::Hostile => hostile::run(&args).await?,
        Scenario::Tls => tls::run(&args).await?,
        Scenario::Soak => soak::run(&args).await?,
        Scenario::History => history::run(&args).await?,
        Scenario::Destinations => destinations::run(&args).await?,
        Scenario::Enqueue => enqueue::run(&args).await?,
    };
    if args.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.table(args.smoke));
    }
    // A smoke run checks that the scenario works and that the claims holding at any size
    // (order, nothing lost) held, not that its timing claims hold at that size.
    let failed = report.claims_failed(args.smoke);
    if failed > 0 {
        eprintln!("{}: {failed} claim(s) failed", args.scenario.name());
        std::process::exit(1);
    }
    Ok(())
}
