//! The fleet's run: one `sluice serve` process under the load (the baseline), then the fleet
//! (API, dispatchers, its own `redis-server`), the load with its events (kill -9, SIGTERM,
//! Redis stopped and started again), the drain, and what was observed along the way.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;
use sluice_testkit::RedisServer;
use sluice_testkit::receiver::{self, Behavior, Receiver};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::baseline::one_process;
use super::figures::{chart, figures};
use super::verdicts::ScaleSample;
use super::{
    DISPATCHERS, HEALTHY, IN_FLIGHT_EVERY, LOAD, Plan, SATURATION_CONCURRENCY, SCALE_EVERY, SLOW,
    Sizes, heartbeat,
};
use crate::arrivals::{Arrival, Arrivals, queue};
use crate::harness::{FreshDatabase, Sluice, Tuning};
use crate::procs::{Fleet, Proc};
use crate::producer::{Acks, Customer, Posting, produce};
use crate::report::Report;
use crate::saturation;
use crate::timeline::Timeline;
use crate::{BenchArgs, watch};

/// Leased deliveries now: `(delivery id, lease token)`.
pub(super) async fn leased(
    pg: &tokio_postgres::Client,
) -> anyhow::Result<HashSet<(i64, Option<i64>)>> {
    let rows = pg
        .query(
            "SELECT id, lease_token FROM deliveries WHERE state = 1",
            &[],
        )
        .await
        .context("leased deliveries")?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Read `/v1/scale` every [`SCALE_EVERY`] until `stop`, beside the live dispatcher count.
pub(super) fn sample_scale(
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
pub(super) fn sample_in_flight(
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

/// How the sluice under load runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Layout {
    /// One `sluice serve` process (API and dispatcher), the baseline.
    OneProcess,
    /// One API process and [`DISPATCHERS`] dispatcher processes.
    Fleet,
}

/// The fleet up and its customers created, ready for the load.
pub(super) struct Started {
    pub(super) fleet: Fleet,
    pub(super) http: reqwest::Client,
    pub(super) redis: RedisServer,
    pub(super) redis_port: u16,
    pub(super) api: Proc,
    pub(super) dispatchers: Vec<Proc>,
    pub(super) scale_url: String,
    /// Seconds from the dispatchers' readiness until `/v1/scale` counted all of them.
    pub(super) start_lag: Option<f64>,
    pub(super) timeline: Arc<Timeline>,
    pub(super) arrivals: Arc<Arrivals>,
    /// The healthy endpoints' receivers, serving until the run ends.
    pub(super) _receivers: Vec<Receiver>,
    pub(super) slow_rx: Arc<Receiver>,
    /// The API process, driven as a client would.
    pub(super) sluice: Sluice,
    /// `(token, customer, timeline group, events/s)`.
    pub(super) customers: Vec<(String, u64, usize, f64)>,
}

/// What the run saw, for the figures and the chart.
pub(super) struct Observed {
    pub(super) kill_at: f64,
    pub(super) term_at: f64,
    /// When the SIGTERM'd dispatcher exited, and how.
    pub(super) exited_at: f64,
    pub(super) exit: std::process::ExitStatus,
    /// Leases nobody held at the SIGTERM (the killed dispatcher's).
    pub(super) orphaned: HashSet<(i64, Option<i64>)>,
    /// Leases right after the SIGTERM'd dispatcher's exit, and a lease gap later.
    pub(super) at_exit: HashSet<(i64, Option<i64>)>,
    pub(super) after_exit: HashSet<(i64, Option<i64>)>,
    /// The SIGTERM'd dispatcher's log.
    pub(super) said: String,
    /// The slow receiver's most requests in flight, per phase.
    pub(super) peaks: Vec<usize>,
    pub(super) scale: Vec<ScaleSample>,
    pub(super) in_flight: Vec<(f64, f64)>,
    pub(super) load_end: f64,
    pub(super) drained_s: f64,
    /// Everything acknowledged was delivered and nothing was left ready or leased.
    pub(super) settled: bool,
    pub(super) dead: i64,
    /// The surviving processes exited cleanly on SIGTERM at the end.
    pub(super) survivors_ok: bool,
    pub(super) acks: HashMap<(u64, u64), String>,
    pub(super) arrivals: Vec<Arrival>,
}

/// Measure one process, then start the fleet, load it through its events, and report.
pub(super) async fn drive(
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
    let sizes = Sizes::of(args, LOAD);
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

/// The API process (which migrates the fresh database), the dispatchers, Redis, the receivers
/// and the customers.
pub(super) async fn start(
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
pub(super) async fn run_load(
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
