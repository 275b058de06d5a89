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
//! concurrency ([`saturation`]): the fleet's deliveries per second at saturation beside one
//! process's.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;
use sluice_testkit::RedisServer;
use sluice_testkit::receiver::{self, Behavior, Receiver};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::arrivals::{Arrival, Arrivals, queue};
use super::chart::{Line, Panel};
use super::harness::{FreshDatabase, Sluice, Tuning};
use super::procs::{Fleet, Proc, sluice_binary};
use super::producer::{Acks, Customer, Posting, produce};
use super::report::{Report, ratio};
use super::saturation;
use super::timeline::{Timeline, ms};
use super::{BenchArgs, save_chart, watch};

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

/// Leased deliveries now: `(delivery id, lease token)`.
async fn leased(pg: &tokio_postgres::Client) -> anyhow::Result<HashSet<(i64, Option<i64>)>> {
    let rows = pg
        .query(
            "SELECT id, lease_token FROM deliveries WHERE state = 1",
            &[],
        )
        .await
        .context("leased deliveries")?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// One reading of `/v1/scale`.
#[derive(Debug, Clone, Copy)]
struct ScaleSample {
    at_s: f64,
    current_replicas: Option<u32>,
    live: u32,
}

/// Read `/v1/scale` every [`SCALE_EVERY`] until `stop`, beside the live dispatcher count.
fn sample_scale(
    http: reqwest::Client,
    url: String,
    token: String,
    timeline: Arc<Timeline>,
    live: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<Vec<ScaleSample>> {
    tokio::spawn(async move {
        let mut out = Vec::new();
        let mut tick = tokio::time::interval(SCALE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !stop.load(Ordering::Acquire) {
            tick.tick().await;
            let current_replicas = match http.get(&url).bearer_auth(&token).send().await {
                Ok(r) if r.status().is_success() => r
                    .json::<Value>()
                    .await
                    .ok()
                    .and_then(|v| v["current_replicas"].as_u64())
                    .map(|n| n as u32),
                _ => None,
            };
            out.push(ScaleSample {
                at_s: timeline.elapsed(),
                current_replicas,
                live: live.load(Ordering::Acquire),
            });
        }
        out
    })
}

/// Sample the slow receiver's in-flight count every [`IN_FLIGHT_EVERY`] until `stop`.
fn sample_in_flight(
    rx: Arc<Receiver>,
    timeline: Arc<Timeline>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<Vec<(f64, f64)>> {
    tokio::spawn(async move {
        let mut out = Vec::new();
        let mut tick = tokio::time::interval(IN_FLIGHT_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        while !stop.load(Ordering::Acquire) {
            tick.tick().await;
            out.push((timeline.elapsed(), rx.record.in_flight() as f64));
        }
        out
    })
}

/// Seconds from `from_s` until the first reading before `until_s` that says `want` replicas.
fn lag(samples: &[ScaleSample], from_s: f64, until_s: f64, want: u32) -> Option<f64> {
    samples
        .iter()
        .filter(|s| s.at_s >= from_s && s.at_s < until_s)
        .find(|s| s.current_replicas == Some(want))
        .map(|s| s.at_s - from_s)
}

/// What the deliveries say about loss and duplicates.
#[derive(Debug, Default, PartialEq)]
struct Tally {
    acknowledged: u64,
    /// Acknowledged messages that reached their receiver at least once.
    delivered: u64,
    /// Events delivered whose POST got no 202 (the answer was lost, the message kept).
    delivered_unacknowledged: u64,
    /// Requests the receivers saw.
    requests: u64,
    /// Requests beyond the first for the same event.
    duplicates: u64,
    /// Events delivered more than once.
    duplicated_events: u64,
    /// Duplicates with the same `webhook-id` as the event's first delivery.
    duplicates_same_id: u64,
    /// Duplicated events whose first delivery arrived within `window_s` before the kill.
    duplicated_at_kill: u64,
    /// Deliveries whose `webhook-id` is not the id the API acknowledged for the event.
    wrong_id: u64,
}

/// Count loss and duplicates: an event's first delivery arrived "at the kill" when within
/// `window_s` before `kill_s` (plus a tenth of a second for the clock reads).
fn tally(
    arrivals: &[Arrival],
    acks: &HashMap<(u64, u64), String>,
    kill_s: f64,
    window_s: f64,
) -> Tally {
    let mut by_key: HashMap<(u64, u64), Vec<&Arrival>> = HashMap::new();
    for a in arrivals {
        by_key.entry(a.key).or_default().push(a);
    }
    let mut t = Tally {
        acknowledged: acks.len() as u64,
        requests: arrivals.len() as u64,
        ..Tally::default()
    };
    for (key, seen) in &by_key {
        match acks.get(key) {
            Some(id) => {
                t.delivered += 1;
                t.wrong_id += seen.iter().filter(|a| &a.webhook_id != id).count() as u64;
            }
            None => t.delivered_unacknowledged += 1,
        }
        if seen.len() > 1 {
            t.duplicated_events += 1;
            t.duplicates += seen.len() as u64 - 1;
            let first = *seen
                .iter()
                .min_by(|a, b| a.at_s.total_cmp(&b.at_s))
                .expect("non-empty");
            t.duplicates_same_id += seen
                .iter()
                .filter(|a| !std::ptr::eq(**a, first) && a.webhook_id == first.webhook_id)
                .count() as u64;
            if first.at_s >= kill_s - window_s && first.at_s <= kill_s + 0.1 {
                t.duplicated_at_kill += 1;
            }
        }
    }
    t
}

/// `finished=N released=M` from the `stopped:` line of a drained process.
fn drain_counts(said: &str) -> (Option<f64>, Option<f64>) {
    let line = said.lines().find(|l| l.contains("stopped:")).unwrap_or("");
    let field = |name: &str| {
        let at = line.find(&format!("{name}="))? + name.len() + 1;
        line[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    (field("finished"), field("released"))
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

/// The run's sizes, from the flags.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    healthy: usize,
    healthy_rate: f64,
    slow_ms: u64,
    slow_rate: f64,
    lane: u32,
}

impl Sizes {
    fn of(args: &BenchArgs) -> Self {
        Self {
            healthy: args.endpoints.unwrap_or(args.sized(8, 3)),
            healthy_rate: args.rate.unwrap_or(args.sized(40.0, 10.0)),
            slow_ms: args.slow_ms.unwrap_or(250),
            slow_rate: args.bad_rate.unwrap_or(args.sized(14.0, 10.0)),
            lane: args.lane.unwrap_or(4),
        }
    }
}

/// The dispatchers' heartbeat interval (the default: the fleet runs with defaults).
fn heartbeat() -> Duration {
    sluice::dispatcher::DispatchSettings::default().heartbeat_interval
}

/// How the sluice under load runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// One `sluice serve` process (API and dispatcher), the baseline.
    OneProcess,
    /// One API process and [`DISPATCHERS`] dispatcher processes.
    Fleet,
}

/// The fleet up and its customers created, ready for the load.
struct Started {
    fleet: Fleet,
    http: reqwest::Client,
    redis: RedisServer,
    redis_port: u16,
    api: Proc,
    dispatchers: Vec<Proc>,
    scale_url: String,
    /// Seconds from the dispatchers' readiness until `/v1/scale` counted all of them.
    start_lag: Option<f64>,
    timeline: Arc<Timeline>,
    arrivals: Arc<Arrivals>,
    /// The healthy endpoints' receivers, serving until the run ends.
    _receivers: Vec<Receiver>,
    slow_rx: Arc<Receiver>,
    /// The API process, driven as a client would.
    sluice: Sluice,
    /// `(token, customer, timeline group, events/s)`.
    customers: Vec<(String, u64, usize, f64)>,
}

/// What the run saw, for the figures and the chart.
struct Observed {
    kill_at: f64,
    term_at: f64,
    /// When the SIGTERM'd dispatcher exited, and how.
    exited_at: f64,
    exit: std::process::ExitStatus,
    /// Leases nobody held at the SIGTERM (the killed dispatcher's).
    orphaned: HashSet<(i64, Option<i64>)>,
    /// Leases right after the SIGTERM'd dispatcher's exit, and a lease gap later.
    at_exit: HashSet<(i64, Option<i64>)>,
    after_exit: HashSet<(i64, Option<i64>)>,
    /// The SIGTERM'd dispatcher's log.
    said: String,
    /// The slow receiver's most requests in flight, per phase.
    peaks: Vec<usize>,
    scale: Vec<ScaleSample>,
    in_flight: Vec<(f64, f64)>,
    load_end: f64,
    drained_s: f64,
    /// Everything acknowledged was delivered and nothing was left ready or leased.
    settled: bool,
    dead: i64,
    /// The surviving processes exited cleanly on SIGTERM at the end.
    survivors_ok: bool,
    acks: HashMap<(u64, u64), String>,
    arrivals: Vec<Arrival>,
}

/// Measure one process, then start the fleet, load it through its events, and report.
async fn drive(
    args: &BenchArgs,
    binary: PathBuf,
    server: &str,
    log_dir: &Path,
) -> anyhow::Result<Report> {
    let saturation = saturation::Sizes {
        backlog: args.backlog.unwrap_or(args.sized(30_000, 1_000)),
        concurrency: args.concurrency.unwrap_or(SATURATION_CONCURRENCY),
        dispatchers: DISPATCHERS,
    };
    if std::env::var_os("SLUICE_BENCH_SATURATION_ONLY").is_some() {
        let mut report = Report::new(
            "fleet",
            "saturation only (SLUICE_BENCH_SATURATION_ONLY): one process, then the fleet".into(),
        );
        let measured = saturation::measure(saturation, &binary, server, log_dir).await?;
        saturation::figures(&mut report, &measured);
        return Ok(report);
    }
    let sizes = Sizes::of(args);
    let plan = Plan::new(args);
    let one = one_process(args, sizes, plan, &binary, server, log_dir).await?;
    let db = FreshDatabase::create(server).await?;
    let fleet = async {
        let layout = Layout::Fleet;
        let started = start(args, sizes, layout, binary.clone(), &db.url, log_dir).await?;
        let (timeline, start_lag) = (started.timeline.clone(), started.start_lag);
        let seen = run_load(args, sizes, plan, &db.url, started).await?;
        let mut report = figures(sizes, plan, &timeline, start_lag, &seen, &one);
        chart(args, &mut report, sizes, plan, &timeline, &seen)?;
        anyhow::Ok(report)
    }
    .await;
    db.drop_it().await;
    let mut report = fleet?;
    let measured = saturation::measure(saturation, &binary, server, log_dir).await?;
    saturation::figures(&mut report, &measured);
    Ok(report)
}

/// The healthy endpoints' figures in one `sluice serve` process under the fleet's steady load.
struct OneProcess {
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    per_s: Option<f64>,
}

/// The baseline: the same customers and load, for as long as the fleet's steady phase, on one
/// `sluice serve` process (API and dispatcher) on a fresh database beside the fleet's.
async fn one_process(
    args: &BenchArgs,
    sizes: Sizes,
    plan: Plan,
    binary: &Path,
    server: &str,
    log_dir: &Path,
) -> anyhow::Result<OneProcess> {
    let db = FreshDatabase::create(server).await?;
    let measured = async {
        let layout = Layout::OneProcess;
        let started = start(args, sizes, layout, binary.to_owned(), &db.url, log_dir).await?;
        let timeline = started.timeline.clone();
        let pb = watch::progress(args.json, "fleet: one process", plan.kill_s);
        let acks = Arc::new(Acks::default());
        timeline.restart();
        let until = Instant::now() + Duration::from_secs_f64(plan.kill_s);
        let url: Arc<str> = started.sluice.messages_url().into();
        let producers: Vec<_> = started
            .customers
            .iter()
            .map(|(token, c, group, rate)| {
                let (http, url, timeline) = (started.http.clone(), url.clone(), timeline.clone());
                let who = Customer {
                    http,
                    url,
                    token: token.as_str().into(),
                    customer: *c,
                    group: *group,
                };
                produce(who, *rate, until, Posting::Once, timeline, acks.clone())
            })
            .collect();
        for p in producers {
            let _ = p.await;
        }
        pb.finish_and_clear();
        // The last second's deliveries land before the window is read.
        tokio::time::sleep(Duration::from_millis(sizes.slow_ms + 1000)).await;
        let (from, to) = steady_window(plan);
        let h = timeline.latency_between(HEALTHY, from, to);
        let span = (to - from) as f64;
        let delivered = timeline.delivered_between(HEALTHY, from, to) as f64;
        let Started {
            mut redis,
            mut api,
            sluice,
            ..
        } = started;
        if api.sigterm().await.is_ok() {
            let _ = tokio::time::timeout(Duration::from_secs(30), api.child.wait()).await;
        }
        redis.stop();
        sluice.stop().await;
        anyhow::Ok(OneProcess {
            p50_ms: h.quantile(0.5).map(ms),
            p99_ms: h.quantile(0.99).map(ms),
            per_s: (span > 0.0).then(|| delivered / span),
        })
    }
    .await;
    db.drop_it().await;
    measured
}

/// The whole seconds of the steady phase the healthy figures are read over: after 2 s of
/// warm-up when the phase is 10 s or longer.
fn steady_window(plan: Plan) -> (usize, usize) {
    let to = plan.kill_s;
    let from = if to >= 10.0 { 2 } else { 0 };
    (from, (to.floor() as usize).max(from))
}

/// The API process (which migrates the fresh database), the dispatchers, Redis, the receivers
/// and the customers.
async fn start(
    args: &BenchArgs,
    sizes: Sizes,
    layout: Layout,
    binary: PathBuf,
    database_url: &str,
    log_dir: &Path,
) -> anyhow::Result<Started> {
    let Sizes {
        healthy,
        healthy_rate,
        slow_ms,
        slow_rate,
        lane,
    } = sizes;
    let redis_port = sluice_testkit::free_port();
    let redis = RedisServer::start_on(redis_port).await?;
    let fleet = Fleet {
        binary,
        database_url: database_url.to_owned(),
        redis_url: Some(format!("redis://127.0.0.1:{redis_port}")),
        admin_token: sluice::ids::new_token("sk_admin"),
        log_dir: log_dir.to_owned(),
        extra: Vec::new(),
    };
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .timeout(Duration::from_secs(30))
        .build()
        .context("http client")?;

    // The API process first (it migrates the fresh database), then the dispatchers.
    let (role, dispatcher_count) = match layout {
        Layout::OneProcess => ("all", 0),
        Layout::Fleet => ("api", DISPATCHERS),
    };
    let mut api = Proc::spawn(&fleet, role, role)?;
    api.wait_for(&http, "/readyz").await?;
    let mut dispatchers = Vec::new();
    for i in 0..dispatcher_count {
        dispatchers.push(Proc::spawn(
            &fleet,
            "dispatcher",
            &format!("dispatcher-{i}"),
        )?);
    }
    for d in &mut dispatchers {
        d.wait_for(&http, "/readyz").await?;
    }
    let up = Instant::now();
    let scale_url = format!("{}/v1/scale", api.base);
    let replicas = || async {
        let r = http
            .get(&scale_url)
            .bearer_auth(&fleet.admin_token)
            .send()
            .await
            .ok()?;
        r.json::<Value>().await.ok()?["current_replicas"].as_u64()
    };
    let mut start_lag = None;
    while layout == Layout::Fleet && up.elapsed() < Duration::from_secs(60) {
        if replicas().await == Some(u64::from(DISPATCHERS)) {
            start_lag = Some(up.elapsed().as_secs_f64());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Receivers and customers, through the API process.
    let timeline = Arc::new(Timeline::new(&["healthy", "slow"]));
    let arrivals = Arc::new(Arrivals::new(timeline.clone()));
    let observer = |group| arrivals.recorder(group);
    let mut receivers = Vec::new();
    for _ in 0..healthy {
        receivers.push(receiver::start_observed(Behavior::Fast, observer(HEALTHY)).await?);
    }
    let slow_rx = Arc::new(
        receiver::start_observed(
            Behavior::Slow(Duration::from_millis(slow_ms)),
            observer(SLOW),
        )
        .await?,
    );
    let remote = BenchArgs {
        target: Some(api.base.clone()),
        admin_token: Some(fleet.admin_token.clone()),
        database_url: None,
        ..args.clone()
    };
    let sluice = Sluice::start(&remote, &Tuning::default()).await?;
    let mut customers = Vec::new();
    for (i, rx) in receivers.iter().enumerate() {
        let (token, _) = sluice
            .customer(&format!("healthy-{i}"), &rx.url(), None)
            .await?;
        customers.push((token, i as u64, HEALTHY, healthy_rate));
    }
    let (slow_token, _) = sluice.customer("slow", &slow_rx.url(), Some(lane)).await?;
    customers.push((slow_token, healthy as u64, SLOW, slow_rate));
    // Every dispatcher sees the others' heartbeats (its local share for a Redis outage).
    tokio::time::sleep(heartbeat()).await;
    Ok(Started {
        fleet,
        http,
        redis,
        redis_port,
        api,
        dispatchers,
        scale_url,
        start_lag,
        timeline,
        arrivals,
        _receivers: receivers,
        slow_rx,
        sluice,
        customers,
    })
}

/// The load, and the events beside it: kill -9, SIGTERM, Redis stopped and started again; then
/// the drain, and the fleet stopped.
#[allow(clippy::too_many_lines)]
async fn run_load(
    args: &BenchArgs,
    sizes: Sizes,
    plan: Plan,
    database_url: &str,
    started: Started,
) -> anyhow::Result<Observed> {
    let Started {
        fleet,
        http,
        mut redis,
        redis_port,
        api,
        mut dispatchers,
        scale_url,
        timeline,
        arrivals,
        slow_rx,
        sluice,
        customers,
        ..
    } = started;
    let pg = {
        let (client, conn) = tokio_postgres::connect(database_url, tokio_postgres::NoTls)
            .await
            .context("connect to the fleet's database")?;
        tokio::spawn(conn);
        client
    };
    let live = Arc::new(AtomicU32::new(DISPATCHERS));
    let stop = Arc::new(AtomicBool::new(false));
    let acks = Arc::new(Acks::default());
    let pb = watch::progress(args.json, "fleet", plan.end_s);
    timeline.restart();
    let start = Instant::now();
    let at = |s: f64| start + Duration::from_secs_f64(s);
    let until = at(plan.end_s);
    let url: Arc<str> = sluice.messages_url().into();
    let producers: Vec<_> = customers
        .iter()
        .map(|(token, c, group, rate)| {
            let who = Customer {
                http: http.clone(),
                url: url.clone(),
                token: token.as_str().into(),
                customer: *c,
                group: *group,
            };
            produce(
                who,
                *rate,
                until,
                Posting::Once,
                timeline.clone(),
                acks.clone(),
            )
        })
        .collect();
    let scale = sample_scale(
        http.clone(),
        scale_url.clone(),
        fleet.admin_token.clone(),
        timeline.clone(),
        live.clone(),
        stop.clone(),
    );
    let in_flight = sample_in_flight(slow_rx.clone(), timeline.clone(), stop.clone());
    let ticker = {
        let pb = pb.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::Acquire) {
                tokio::time::sleep(Duration::from_secs(1)).await;
                pb.inc(1);
            }
        })
    };
    let mut peaks = Vec::new();
    let new_phase = |peaks: &mut Vec<usize>| peaks.push(slow_rx.record.reset_peak());

    // kill -9 one dispatcher.
    tokio::time::sleep_until(at(plan.kill_s)).await;
    new_phase(&mut peaks);
    pb.set_message("kill -9 dispatcher-0");
    let mut killed = dispatchers.remove(0);
    let kill_at = timeline.elapsed();
    killed.kill9().await?;
    live.fetch_sub(1, Ordering::AcqRel);

    // SIGTERM another: what it claimed is attempted or released, nothing stays leased. A lease
    // seen both `lease_gap` before the SIGTERM and at it is one nobody holds (the killed
    // dispatcher's, until it expires); one seen at the exit and `lease_gap` after it, and not
    // before, is one the drained dispatcher left.
    tokio::time::sleep_until(at(plan.term_s) - plan.lease_gap).await;
    let before_gap = leased(&pg).await?;
    tokio::time::sleep_until(at(plan.term_s)).await;
    let at_term = leased(&pg).await?;
    let orphaned: HashSet<_> = before_gap.intersection(&at_term).copied().collect();
    new_phase(&mut peaks);
    pb.set_message("SIGTERM dispatcher-1");
    let mut drained = dispatchers.remove(0);
    let term_at = timeline.elapsed();
    drained.sigterm().await?;
    live.fetch_sub(1, Ordering::AcqRel);
    let exit = drained
        .child
        .wait()
        .await
        .context("wait for the SIGTERM'd dispatcher")?;
    let exited_at = timeline.elapsed();
    let at_exit = leased(&pg).await?;
    let said = drained.said();
    let lease_check = {
        let pg_gap = plan.lease_gap;
        let db = database_url.to_owned();
        tokio::spawn(async move {
            tokio::time::sleep(pg_gap).await;
            let (client, conn) = tokio_postgres::connect(&db, tokio_postgres::NoTls).await?;
            tokio::spawn(conn);
            leased(&client).await
        })
    };

    // Stop Redis, then start it again on the same port (empty: every lane slot is gone).
    tokio::time::sleep_until(at(plan.redis_down_s)).await;
    new_phase(&mut peaks);
    pb.set_message("Redis stopped");
    redis.stop();
    tokio::time::sleep_until(at(plan.redis_up_s)).await;
    new_phase(&mut peaks);
    pb.set_message("Redis started again");
    redis = RedisServer::start_on(redis_port).await?;

    // Stop the load; wait until every acknowledged message is delivered and nothing is left
    // ready or leased (the killed dispatcher's leases expire and are redelivered).
    for p in producers {
        let _ = p.await;
    }
    new_phase(&mut peaks);
    pb.set_message("draining");
    let load_end = timeline.elapsed();
    let drain_limit = Duration::from_secs(240);
    let drain_start = Instant::now();
    let mut settled = false;
    while drain_start.elapsed() < drain_limit {
        let (ready, leased_now, _) = queue(&pg).await?;
        if ready == 0 && leased_now == 0 {
            let acked = acks.ids.lock().unwrap_or_else(|p| p.into_inner()).len();
            let delivered: HashSet<_> = arrivals.snapshot().iter().map(|a| a.key).collect();
            let acked_keys: Vec<_> = acks
                .ids
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .keys()
                .copied()
                .collect();
            if acked_keys.iter().all(|k| delivered.contains(k)) && acked > 0 {
                settled = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Late answers of the last requests land in the timeline before it is read.
    tokio::time::sleep(Duration::from_millis(sizes.slow_ms + 200)).await;
    let drained_s = timeline.elapsed();
    new_phase(&mut peaks);
    stop.store(true, Ordering::Release);
    let scale = scale.await.unwrap_or_default();
    let in_flight = in_flight.await.unwrap_or_default();
    let _ = ticker.await;
    pb.finish_and_clear();
    let after_exit = lease_check.await.context("lease check")??;
    let (_, _, dead) = queue(&pg).await?;

    // The rest of the fleet drains too; then Redis goes.
    let mut survivors_ok = true;
    for mut p in dispatchers.into_iter().chain(std::iter::once(api)) {
        let stopped = p.sigterm().await.is_ok() && p.child.wait().await.is_ok_and(|s| s.success());
        survivors_ok &= stopped;
    }
    redis.stop();
    drop(killed);
    sluice.stop().await;
    let acks = acks.ids.lock().unwrap_or_else(|p| p.into_inner()).clone();
    Ok(Observed {
        kill_at,
        term_at,
        exited_at,
        exit,
        orphaned,
        at_exit,
        after_exit,
        said,
        peaks,
        scale,
        in_flight,
        load_end,
        drained_s,
        settled,
        dead,
        survivors_ok,
        acks,
        arrivals: arrivals.snapshot(),
    })
}

/// The figures and the claims.
#[allow(clippy::too_many_lines)]
fn figures(
    sizes: Sizes,
    plan: Plan,
    timeline: &Timeline,
    start_lag: Option<f64>,
    seen: &Observed,
    one: &OneProcess,
) -> Report {
    let Sizes {
        healthy,
        healthy_rate,
        slow_ms,
        slow_rate,
        lane,
    } = sizes;
    let Observed {
        kill_at,
        term_at,
        exited_at,
        exit,
        ref orphaned,
        ref at_exit,
        ref after_exit,
        ref said,
        ref peaks,
        ref scale,
        load_end,
        drained_s,
        settled,
        dead,
        survivors_ok,
        ref acks,
        ref arrivals,
        ..
    } = *seen;
    let heartbeat_s = heartbeat().as_secs_f64();
    let kill_window_s = slow_ms as f64 / 1000.0 + 1.0;
    let t = tally(arrivals, acks, kill_at, kill_window_s);
    let lost = t.acknowledged - t.delivered;
    let left_by_term: Vec<_> = at_exit
        .intersection(after_exit)
        .filter(|l| !orphaned.contains(l))
        .collect();
    let (finished, released) = drain_counts(said);
    let bounds = plan.bounds(drained_s);
    let peak = peaks.iter().copied().max().unwrap_or(0);

    let mut report = Report::new(
        "fleet",
        format!(
            "1 API + {DISPATCHERS} dispatcher processes (sluice serve --role), PostgreSQL, \
             redis-server of their own, all on loopback"
        ),
    );
    report.param("load_s", plan.end_s);
    report.param("healthy_endpoints", healthy);
    report.param("healthy_rate_per_endpoint", healthy_rate);
    report.param("slow_ms", slow_ms);
    report.param("slow_rate", slow_rate);
    report.param("lane", lane);
    report.param("heartbeat_s", heartbeat_s);
    report.param("kill9_at_s", round(kill_at));
    report.param("sigterm_at_s", round(term_at));
    report.param(
        "redis_down_s",
        format!("{}–{}", plan.redis_down_s, plan.redis_up_s),
    );

    let n = f64::from(lane);
    report.figure("lane", "slow endpoint: fleet-wide lane N", Some(n), "slots");
    report.figure(
        "slow_max_in_flight",
        "slow receiver: most requests in flight at once, whole run",
        Some(peak as f64),
        "",
    );
    for (i, (key, label)) in PHASES.iter().enumerate() {
        report.figure(
            &format!("slow_max_in_flight.{key}"),
            &format!("slow receiver: most in flight, {label}"),
            peaks.get(i).map(|&p| p as f64),
            "",
        );
    }
    report.figure(
        "acknowledged",
        "messages acknowledged (202)",
        Some(t.acknowledged as f64),
        "",
    );
    report.figure(
        "delivered",
        "acknowledged messages delivered at least once",
        Some(t.delivered as f64),
        "",
    );
    report.figure(
        "lost",
        "lost (acknowledged − delivered)",
        Some(lost as f64),
        "",
    );
    report.figure(
        "delivered_unacknowledged",
        "delivered although the POST got no 202",
        Some(t.delivered_unacknowledged as f64),
        "",
    );
    report.figure(
        "post_errors",
        "POSTs without a 202",
        Some((timeline.errors(HEALTHY) + timeline.errors(SLOW)) as f64),
        "",
    );
    report.figure(
        "requests",
        "requests the receivers saw",
        Some(t.requests as f64),
        "",
    );
    report.figure(
        "duplicates",
        "duplicate deliveries (requests beyond an event's first)",
        Some(t.duplicates as f64),
        "",
    );
    report.figure(
        "duplicates_same_webhook_id",
        "duplicates with the first delivery's webhook-id",
        Some(t.duplicates_same_id as f64),
        "",
    );
    report.figure(
        "duplicated_events",
        "events delivered more than once",
        Some(t.duplicated_events as f64),
        "",
    );
    report.figure(
        "duplicated_at_kill",
        &format!("… of which first delivered within {kill_window_s} s before the kill -9"),
        Some(t.duplicated_at_kill as f64),
        "",
    );
    report.figure(
        "wrong_webhook_id",
        "deliveries whose webhook-id is not the acknowledged message id",
        Some(t.wrong_id as f64),
        "",
    );
    report.figure("dead", "dead-lettered at the end", Some(dead as f64), "");
    report.figure(
        "sigterm_drain_s",
        "SIGTERM → exit of the scaled-in dispatcher",
        Some(exited_at - term_at),
        "s",
    );
    report.figure(
        "sigterm_finished",
        "scaled-in dispatcher: attempts finished in its drain",
        finished,
        "",
    );
    report.figure(
        "sigterm_released",
        "scaled-in dispatcher: claimed deliveries released unattempted",
        released,
        "",
    );
    report.figure(
        "leased_at_sigterm_exit",
        "leased right after its exit (the others' work included)",
        Some(at_exit.len() as f64),
        "",
    );
    report.figure(
        "leased_left_by_sigterm",
        &format!(
            "… still leased {} s later and not an orphan of the kill -9",
            plan.lease_gap.as_secs()
        ),
        Some(left_by_term.len() as f64),
        "",
    );
    report.figure(
        "kill9_leases_at_sigterm",
        "the killed dispatcher's leases still held at the SIGTERM",
        Some(orphaned.len() as f64),
        "",
    );
    report.figure("heartbeat_s", "heartbeat interval", Some(heartbeat_s), "s");
    let stale_s = heartbeat_s * 3.0;
    let lag_start = start_lag;
    let lag_kill = lag(scale, kill_at, term_at, DISPATCHERS - 1);
    let lag_term = lag(scale, term_at, drained_s + 1.0, DISPATCHERS - 2);
    report.figure(
        "scale_lag_start_s",
        "/v1/scale current_replicas = 3 after the dispatchers are ready",
        lag_start,
        "s",
    );
    report.figure(
        "scale_lag_kill9_s",
        "/v1/scale current_replicas = 2 after the kill -9",
        lag_kill,
        "s",
    );
    report.figure(
        "scale_lag_sigterm_s",
        "/v1/scale current_replicas = 1 after the SIGTERM",
        lag_term,
        "s",
    );
    let readings = scale
        .iter()
        .filter(|s| s.current_replicas.is_some())
        .count();
    let matching = scale
        .iter()
        .filter(|s| s.current_replicas == Some(s.live))
        .count();
    report.figure(
        "scale_readings_matching",
        "/v1/scale readings equal to the live dispatcher count",
        (readings > 0).then(|| matching as f64 / readings as f64),
        "",
    );
    let mut redis_down_delivered = (0, 0);
    for (i, (key, label)) in PHASES.iter().enumerate() {
        let (from, to) = (bounds[i], bounds[i + 1]);
        // The load's first 2 s are warm-up (as in the other scenarios' phases of 10 s or more);
        // every later phase starts with its event, which is what it measures.
        let from = if i == 0 && to >= 10.0 { 2.0 } else { from };
        let (from_i, to_i) = (
            from.ceil() as usize,
            (to.floor() as usize).max(from.ceil() as usize),
        );
        let h = timeline.latency_between(HEALTHY, from_i, to_i);
        report.figure(
            &format!("healthy_p50_ms.{key}"),
            &format!("healthy p50 enqueue→delivery, {label}"),
            h.quantile(0.5).map(ms),
            "ms",
        );
        report.figure(
            &format!("healthy_p99_ms.{key}"),
            &format!("healthy p99 enqueue→delivery, {label}"),
            h.quantile(0.99).map(ms),
            "ms",
        );
        let span = (to_i - from_i) as f64;
        let slow = timeline.delivered_between(SLOW, from_i, to_i);
        let healthy = timeline.delivered_between(HEALTHY, from_i, to_i);
        if *key == "redis_down" {
            redis_down_delivered = (healthy, slow);
        }
        report.figure(
            &format!("healthy_delivered_per_s.{key}"),
            &format!("healthy deliveries, {label}"),
            (span > 0.0).then(|| healthy as f64 / span),
            "/s",
        );
        report.figure(
            &format!("slow_delivered_per_s.{key}"),
            &format!("slow deliveries, {label}"),
            (span > 0.0).then(|| slow as f64 / span),
            "/s",
        );
    }
    // The fleet beside one process, over the same steady seconds of the same load.
    let (from, to) = steady_window(plan);
    let steady = timeline.latency_between(HEALTHY, from, to);
    let fleet_p99 = steady.quantile(0.99).map(ms);
    report.figure(
        "one_process_healthy_p50_ms",
        "one process, same load: healthy p50 enqueue→delivery",
        one.p50_ms,
        "ms",
    );
    report.figure(
        "one_process_healthy_p99_ms",
        "one process, same load: healthy p99 enqueue→delivery",
        one.p99_ms,
        "ms",
    );
    report.figure(
        "one_process_healthy_per_s",
        "one process, same load: healthy deliveries",
        one.per_s,
        "/s",
    );
    let factor = ratio(fleet_p99, one.p99_ms);
    report.figure(
        "fleet_p99_vs_one_process",
        "healthy p99 before the kill -9: fleet ÷ one process",
        factor,
        "×",
    );
    report.verdict(
        factor.is_some_and(|f| f <= 2.0),
        format!(
            "the fleet's healthy p99 is within 2× one process's at the same load: {} ({} against {} ms)",
            factor.map_or("n/a".into(), |f| format!("{f:.2}×")),
            fleet_p99.map_or("n/a".into(), |v| format!("{v:.1}")),
            one.p99_ms.map_or("n/a".into(), |v| format!("{v:.1}")),
        ),
    );
    report.figure(
        "drain_s",
        "load stopped → everything delivered",
        settled.then_some(drained_s - load_end),
        "s",
    );

    // The claims.
    let phase_peaks: Vec<String> = peaks.iter().map(usize::to_string).collect();
    report.invariant(
        peak <= lane as usize,
        format!(
            "at most N = {lane} requests in flight at the slow receiver: most {peak} (per phase: {})",
            phase_peaks.join(", ")
        ),
    );
    report.verdict(
        lost == 0 && settled,
        format!(
            "0 acknowledged messages lost: {} acknowledged, {} delivered, {lost} lost{}",
            t.acknowledged,
            t.delivered,
            if settled {
                ""
            } else {
                " (the drain did not finish)"
            }
        ),
    );
    report.invariant(
        t.duplicates == t.duplicates_same_id
            && t.duplicated_events == t.duplicated_at_kill
            && t.wrong_id == 0,
        format!(
            "duplicates only for attempts in flight at the kill -9, with the same webhook-id: \
             {} duplicates of {} events, {} with the first's webhook-id, {} events first \
             delivered just before the kill, {} deliveries with another webhook-id than the \
             acknowledged one",
            t.duplicates,
            t.duplicated_events,
            t.duplicates_same_id,
            t.duplicated_at_kill,
            t.wrong_id
        ),
    );
    report.verdict(
        exit.success() && left_by_term.is_empty(),
        format!(
            "nothing left leased after the SIGTERM: exit status {}, {} of its leases left \
             (finished {}, released {})",
            exit.code().map_or("none".into(), |c| c.to_string()),
            left_by_term.len(),
            finished.map_or("?".into(), |f| f.to_string()),
            released.map_or("?".into(), |r| r.to_string())
        ),
    );
    let within = |lag: Option<f64>| lag.is_some_and(|l| l <= heartbeat_s);
    let fmt = |lag: Option<f64>| lag.map_or("never".into(), |l| format!("{l:.1} s"));
    report.verdict(
        within(lag_start),
        format!(
            "/v1/scale shows the 3 dispatchers within one heartbeat ({heartbeat_s} s) of their \
             start: {}",
            fmt(lag_start)
        ),
    );
    report.verdict(
        within(lag_kill),
        format!(
            "/v1/scale drops to 2 within one heartbeat ({heartbeat_s} s) of the kill -9: {} \
             (a heartbeat counts until it is {stale_s} s old, or until PostgreSQL drops its \
             process's connection)",
            fmt(lag_kill)
        ),
    );
    report.verdict(
        within(lag_term),
        format!(
            "/v1/scale drops to 1 within one heartbeat ({heartbeat_s} s) of the SIGTERM: {}",
            fmt(lag_term)
        ),
    );
    report.verdict(
        redis_down_delivered.0 > 0 && redis_down_delivered.1 > 0,
        format!(
            "every endpoint keeps being delivered to while Redis is down: {} healthy, {} slow \
             deliveries in the outage",
            redis_down_delivered.0, redis_down_delivered.1
        ),
    );
    report.note(
        "while Redis is down, each dispatcher admits per endpoint at most what it held when the \
         outage began until that endpoint's own earlier attempts must have ended (twice its \
         longest recent attempt, at least 250 ms, at most its deadline), then its local share",
    );
    if !survivors_ok {
        report.note("a surviving process did not exit cleanly on SIGTERM at the end");
    }
    report.note(
        "in flight = requests the slow receiver is serving at once (its exact peak per phase; \
         the chart samples it every 50 ms); a request of the killed dispatcher counts until the \
         receiver answers it",
    );
    report.note(
        "duplicates are counted per event (customer, sequence number in the payload); the \
         killed dispatcher's leases expire after the lease TTL and are delivered again",
    );
    report
}

/// The series and the chart.
fn chart(
    args: &BenchArgs,
    report: &mut Report,
    sizes: Sizes,
    plan: Plan,
    timeline: &Timeline,
    seen: &Observed,
) -> anyhow::Result<()> {
    let n = f64::from(sizes.lane);
    let Observed {
        kill_at,
        term_at,
        drained_s,
        ref scale,
        ref in_flight,
        ..
    } = *seen;
    let lane_line = vec![(0.0, n), (drained_s, n)];
    let replicas_series: Vec<(f64, f64)> = scale
        .iter()
        .filter_map(|s| Some((s.at_s, f64::from(s.current_replicas?))))
        .collect();
    let live_series: Vec<(f64, f64)> = scale.iter().map(|s| (s.at_s, f64::from(s.live))).collect();
    let p99 = timeline.quantile_series(HEALTHY, 0.99);
    let p50 = timeline.quantile_series(HEALTHY, 0.5);
    report.series("slow_in_flight", in_flight.clone());
    report.series("current_replicas", replicas_series.clone());
    report.series("live_dispatchers", live_series.clone());
    report.series("healthy_p50_ms", p50.clone());
    report.series("healthy_p99_ms", p99.clone());
    let panels = [
        Panel::linear(
            "slow receiver: requests in flight vs the fleet-wide lane",
            "requests",
            vec![
                Line::new("in flight (50 ms samples)", in_flight.clone()),
                Line::new(format!("lane N = {}", sizes.lane), lane_line),
            ],
        ),
        Panel::linear(
            "dispatchers: /v1/scale current_replicas vs live processes",
            "dispatchers",
            vec![
                Line::new("current_replicas", replicas_series),
                Line::new("live dispatcher processes", live_series),
            ],
        ),
        Panel::log(
            "healthy endpoints: enqueue → delivery",
            "ms",
            vec![Line::new("p50", p50), Line::new("p99", p99)],
        ),
    ];
    save_chart(
        args,
        report,
        &format!(
            "fleet: kill -9 at {:.0} s, SIGTERM at {:.0} s, Redis down {:.0}–{:.0} s, load until {:.0} s",
            kill_at, term_at, plan.redis_down_s, plan.redis_up_s, plan.end_s
        ),
        &panels,
    )?;
    Ok(())
}

fn round(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrival(c: u64, seq: u64, id: &str, at_s: f64) -> Arrival {
        Arrival {
            key: (c, seq),
            webhook_id: id.into(),
            at_s,
            took_s: None,
        }
    }

    #[test]
    fn tally_counts_loss_and_duplicates_by_event() {
        let acks: HashMap<_, _> = [((0, 0), "msg_a"), ((0, 1), "msg_b"), ((0, 2), "msg_c")]
            .into_iter()
            .map(|(k, v)| (k, v.to_owned()))
            .collect();
        let seen = [
            arrival(0, 0, "msg_a", 1.0),
            // In flight at the kill at 10 s, delivered again after its lease expired.
            arrival(0, 1, "msg_b", 9.8),
            arrival(0, 1, "msg_b", 70.0),
            // Not acknowledged (the 202 was lost), delivered anyway.
            arrival(0, 3, "msg_d", 2.0),
        ];
        let t = tally(&seen, &acks, 10.0, 1.25);
        assert_eq!(
            t,
            Tally {
                acknowledged: 3,
                delivered: 2,
                delivered_unacknowledged: 1,
                requests: 4,
                duplicates: 1,
                duplicated_events: 1,
                duplicates_same_id: 1,
                duplicated_at_kill: 1,
                wrong_id: 0,
            }
        );
        // A duplicate long before the kill, under another id.
        let t = tally(
            &[arrival(0, 0, "msg_a", 1.0), arrival(0, 0, "msg_x", 2.0)],
            &acks,
            10.0,
            1.25,
        );
        assert_eq!(
            (t.duplicated_at_kill, t.duplicates_same_id, t.wrong_id),
            (0, 0, 1)
        );
    }

    #[test]
    fn lag_is_the_first_reading_that_agrees() {
        let s = |at_s, n| ScaleSample {
            at_s,
            current_replicas: Some(n),
            live: 2,
        };
        let samples = [s(9.0, 3), s(10.5, 3), s(21.0, 2), s(22.0, 2)];
        assert_eq!(lag(&samples, 10.0, 30.0, 2), Some(11.0));
        assert_eq!(lag(&samples, 10.0, 20.0, 2), None);
    }

    #[test]
    fn reads_the_drain_counts() {
        let said = "2026-01-01T00:00:00Z  INFO sluice: stopped: in-flight attempts finished, the \
                    rest released for redelivery finished=7 released=0\n";
        assert_eq!(drain_counts(said), (Some(7.0), Some(0.0)));
        assert_eq!(drain_counts("nothing"), (None, None));
    }
}
