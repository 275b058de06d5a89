//! The soak's run: the fleet behind the database proxy and its own `redis-server`, the load
//! through the fault schedule, the drain, and what was observed along the way.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sluice_testkit::RedisServer;
use sluice_testkit::freeze_proxy::{FreezeProxy, upstream_of};
use sluice_testkit::receiver::{self, Behavior, Receiver};
use tokio::time::Instant;

use super::rig::{Exit, Rig, Slot};
use super::schedule::Schedule;
use super::verdicts::Done;
use super::{DISPATCHERS, HEALTHY, LEASE_TTL_S, SLOW, Sizes};
use crate::arrivals::{Arrival, Arrivals, queue};
use crate::harness::{Sluice, Tuning};
use crate::procs::Fleet;
use crate::producer::{Acks, Customer, Posting, produce};
use crate::timeline::Timeline;
use crate::{BenchArgs, watch};

/// What the run saw.
pub(super) struct Observed {
    /// Deliveries shed at a full lane and requeued (all dispatchers, every life): `(the slow
    /// endpoint's, every endpoint's)`.
    pub(super) shed: (f64, f64),
    pub(super) schedule: Schedule,
    /// Faults of the schedule left out because the run fell behind it.
    pub(super) skipped: usize,
    pub(super) done: Vec<Done>,
    pub(super) exits: Vec<Exit>,
    pub(super) lane_peak: usize,
    pub(super) load_end_s: f64,
    pub(super) drained_s: f64,
    pub(super) settled: bool,
    pub(super) acks: HashMap<(u64, u64), String>,
    pub(super) retries: u64,
    pub(super) abandoned: u64,
    /// See [`Acks::posts`] and [`Acks::failures`].
    pub(super) posts: HashMap<(u64, u64), (u32, f64)>,
    pub(super) failures: Vec<(f64, String)>,
    pub(super) arrivals: Vec<Arrival>,
    pub(super) dead: i64,
    /// Deliveries with more than one recorded attempt (an attempt cut off by a kill is not
    /// recorded; a settle also resets the lease-expiry count, so the store cannot tell those).
    pub(super) redelivered: i64,
    pub(super) survivors_clean: bool,
    /// The slow endpoint's queue as each fault began (the same order as `done`), and when the
    /// drain ended.
    pub(super) slow_queue: Vec<EndpointQueue>,
    pub(super) slow_queue_left: EndpointQueue,
}

/// One endpoint's unfinished deliveries at a moment: due now, ready but due later (a retry's
/// back-off or a shed's requeue), leased, and how far off the latest due one is.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct EndpointQueue {
    pub(super) due: i64,
    pub(super) later: i64,
    pub(super) leased: i64,
    pub(super) last_due_in_s: f64,
}

impl EndpointQueue {
    pub(super) async fn read(pg: &tokio_postgres::Client, endpoint: &str) -> anyhow::Result<Self> {
        let now = sluice::clock::now_ms();
        let row = pg
            .query_one(
                "SELECT count(*) FILTER (WHERE state = 0 AND visible_at_ms <= $2), \
                 count(*) FILTER (WHERE state = 0 AND visible_at_ms > $2), \
                 count(*) FILTER (WHERE state = 1), \
                 COALESCE(max(visible_at_ms) FILTER (WHERE state = 0), $2) \
                 FROM deliveries WHERE endpoint_id = $1 AND state IN (0, 1)",
                &[&endpoint, &now],
            )
            .await
            .context("an endpoint's queue")?;
        Ok(Self {
            due: row.get(0),
            later: row.get(1),
            leased: row.get(2),
            last_due_in_s: (row.get::<_, i64>(3) - now) as f64 / 1000.0,
        })
    }

    pub(super) fn total(&self) -> f64 {
        (self.due + self.later + self.leased) as f64
    }

    pub(super) fn describe(&self) -> String {
        format!(
            "{} due, {} later (the last in {:.1} s), {} leased",
            self.due, self.later, self.last_due_in_s, self.leased
        )
    }
}

/// Start the fleet behind the proxy, load it through the schedule, drain, and stop it.
#[allow(clippy::too_many_lines)]
pub(super) async fn drive(
    args: &BenchArgs,
    sizes: Sizes,
    schedule: Schedule,
    binary: PathBuf,
    database_url: &str,
    log_dir: &Path,
) -> anyhow::Result<(Observed, Arc<Timeline>)> {
    let proxy = FreezeProxy::start(upstream_of(database_url).await?).await?;
    let redis_port = sluice_testkit::free_port();
    let redis = RedisServer::start_on(redis_port).await?;
    let fleet = Fleet {
        binary,
        database_url: proxy.url_for(database_url)?,
        redis_url: Some(format!("redis://127.0.0.1:{redis_port}")),
        admin_token: sluice::ids::new_token("sk_admin"),
        log_dir: log_dir.to_owned(),
        extra: vec!["--lease-ttl".into(), format!("{LEASE_TTL_S}s")],
    };
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .timeout(Duration::from_secs(30))
        .build()
        .context("http client")?;
    let timeline = Arc::new(Timeline::new(&["healthy", "slow"]));
    let mut slots = vec![Slot {
        role: "api",
        name: "api".into(),
        port: sluice_testkit::free_port(),
        proc: None,
        starts: 0,
    }];
    for i in 0..DISPATCHERS {
        slots.push(Slot {
            role: "dispatcher",
            name: format!("dispatcher-{i}"),
            port: sluice_testkit::free_port(),
            proc: None,
            starts: 0,
        });
    }
    let mut rig = Rig {
        fleet,
        http: http.clone(),
        slots,
        redis,
        redis_port,
        proxy,
        timeline: timeline.clone(),
        exits: Vec::new(),
        shed: (0.0, 0.0),
        slow_endpoint: String::new(),
    };
    // The API first (it migrates the fresh database), then the dispatchers.
    for i in 0..=DISPATCHERS {
        rig.restart(i).await?;
    }
    let api_base = format!("http://127.0.0.1:{}", rig.slots[0].port);

    // Receivers and customers, through the API process.
    let arrivals = Arc::new(Arrivals::new(timeline.clone()));
    let mut receivers: Vec<Receiver> = Vec::new();
    for _ in 0..sizes.healthy {
        receivers.push(receiver::start_observed(Behavior::Fast, arrivals.recorder(HEALTHY)).await?);
    }
    let slow_rx = receiver::start_observed(
        Behavior::Slow(Duration::from_millis(sizes.slow_ms)),
        arrivals.recorder(SLOW),
    )
    .await?;
    let remote = BenchArgs {
        target: Some(api_base.clone()),
        admin_token: Some(rig.fleet.admin_token.clone()),
        database_url: None,
        ..args.clone()
    };
    let sluice = Sluice::start(&remote, &Tuning::default()).await?;
    let mut customers = Vec::new();
    for (i, rx) in receivers.iter().enumerate() {
        let (token, _) = sluice
            .customer(&format!("healthy-{i}"), &rx.url(), None)
            .await?;
        customers.push((token, i as u64, HEALTHY, sizes.healthy_rate));
    }
    let (slow_token, slow_endpoint) = sluice
        .customer("slow", &slow_rx.url(), Some(sizes.lane))
        .await?;
    rig.slow_endpoint = slow_endpoint;
    customers.push((slow_token, sizes.healthy as u64, SLOW, sizes.slow_rate));
    // Every dispatcher sees the others' heartbeats before the load.
    rig.idle(sluice::dispatcher::DispatchSettings::default().heartbeat_interval)
        .await?;

    // The bench's own connection goes straight to PostgreSQL, not through the proxy.
    let pg = {
        let (client, conn) = tokio_postgres::connect(database_url, tokio_postgres::NoTls)
            .await
            .context("connect to the soak's database")?;
        tokio::spawn(conn);
        client
    };

    let pb = watch::progress(args.json, "soak", schedule.load_s);
    let acks = Arc::new(Acks::default());
    timeline.restart();
    let scraper = tokio::spawn(scrape(
        http.clone(),
        rig.fleet.admin_token.clone(),
        rig.slots[1..]
            .iter()
            .map(|s| (s.name.clone(), s.port))
            .collect(),
        log_dir.join("metrics.tsv"),
        timeline.clone(),
    ));
    slow_rx.record.reset_peak();
    let start = Instant::now();
    let at = |s: f64| start + Duration::from_secs_f64(s);
    let until = at(schedule.load_s);
    let give_up = until + Duration::from_secs(120);
    let url: Arc<str> = format!("{api_base}/v1/messages").into();
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
            let posting = Posting::Retried {
                key_prefix: "soak",
                give_up,
            };
            produce(who, *rate, until, posting, timeline.clone(), acks.clone())
        })
        .collect();

    let mut done: Vec<Done> = Vec::new();
    let mut slow_queue = Vec::new();
    let mut skipped = 0;
    for (n, p) in schedule.faults.iter().enumerate() {
        rig.idle_until(at(p.at_s)).await?;
        // Restarts and drains make a run fall behind its plan; a fault that would no longer
        // end before the load does is left out rather than run into the drain.
        if timeline.elapsed() + p.hold_s >= schedule.load_s {
            skipped += 1;
            continue;
        }
        pb.set_position(timeline.elapsed() as u64);
        pb.set_message(format!(
            "fault {}/{}: {}",
            n + 1,
            schedule.faults.len(),
            p.kind.name()
        ));
        if let Some(last) = done.last_mut() {
            last.until_s = timeline.elapsed();
        }
        slow_queue.push(EndpointQueue::read(&pg, &rig.slow_endpoint).await?);
        done.push(rig.inflict(p).await?);
    }
    rig.idle_until(until).await?;
    if let Some(last) = done.last_mut() {
        last.until_s = timeline.elapsed();
    }
    let load_end_s = timeline.elapsed();
    pb.set_message("load stopped: waiting for the producers' last retries");
    for p in producers {
        let _ = p.await;
    }

    // Wait until every acknowledged message arrived and nothing is ready or leased.
    pb.set_message("draining");
    let drain_limit = Duration::from_secs(if args.smoke { 150 } else { 300 });
    let drain_start = Instant::now();
    let mut settled = false;
    while drain_start.elapsed() < drain_limit {
        rig.idle(Duration::from_millis(500)).await?;
        pb.set_position(timeline.elapsed() as u64);
        let (ready, leased, _) = queue(&pg).await?;
        if ready > 0 || leased > 0 {
            continue;
        }
        let delivered: HashSet<(u64, u64)> = arrivals.snapshot().iter().map(|a| a.key).collect();
        if acks.ids().keys().all(|k| delivered.contains(k)) {
            settled = true;
            break;
        }
    }
    // Late answers land before anything is read.
    rig.idle(Duration::from_millis(sizes.slow_ms + 200)).await?;
    scraper.abort();
    let drained_s = timeline.elapsed();
    let slow_queue_left = EndpointQueue::read(&pg, &rig.slow_endpoint).await?;
    pb.finish_and_clear();
    let (_, _, dead) = queue(&pg).await?;
    let row = pg
        .query_one(
            "SELECT count(*) FILTER (WHERE attempts > 1) FROM deliveries",
            &[],
        )
        .await
        .context("redelivery counts")?;
    let redelivered = row.get(0);
    for i in 1..=DISPATCHERS {
        rig.count_shed(i).await;
    }
    let shed = rig.shed;
    let exits = rig.exits.clone();
    let survivors_clean = rig.stop().await;
    sluice.stop().await;
    let lane_peak = slow_rx.record.peak_concurrency();
    use std::sync::atomic::Ordering;
    let seen = Observed {
        shed,
        schedule,
        skipped,
        done,
        exits,
        lane_peak,
        load_end_s,
        drained_s,
        settled,
        acks: acks.ids(),
        retries: acks.retries.load(Ordering::Relaxed),
        abandoned: acks.abandoned.load(Ordering::Relaxed),
        posts: std::mem::take(&mut *acks.posts.lock().unwrap_or_else(|p| p.into_inner())),
        failures: std::mem::take(&mut *acks.failures.lock().unwrap_or_else(|p| p.into_inner())),
        arrivals: arrivals.snapshot(),
        dead,
        redelivered,
        survivors_clean,
        slow_queue,
        slow_queue_left,
    };
    Ok((seen, timeline))
}

/// How often [`scrape`] reads the dispatchers' `/metrics`.
pub(super) const SCRAPE_EVERY: Duration = Duration::from_secs(5);

/// Read every dispatcher's `/metrics` every [`SCRAPE_EVERY`] into `path`, one sample per line
/// (`seconds  dispatcher  series  value`; histogram buckets left out, their sums and counts
/// kept), so what a dispatcher did between faults can be read afterwards. A dispatcher that is
/// down is skipped. Runs until aborted.
pub(super) async fn scrape(
    http: reqwest::Client,
    token: String,
    dispatchers: Vec<(String, u16)>,
    path: PathBuf,
    timeline: Arc<Timeline>,
) {
    use std::io::Write;
    let Ok(file) = std::fs::File::create(&path) else {
        return;
    };
    let mut out = std::io::BufWriter::new(file);
    let mut tick = tokio::time::interval(SCRAPE_EVERY);
    loop {
        tick.tick().await;
        let t = timeline.elapsed();
        for (name, port) in &dispatchers {
            let read = http
                .get(format!("http://127.0.0.1:{port}/metrics"))
                .bearer_auth(&token)
                .timeout(Duration::from_secs(1))
                .send()
                .await;
            let Ok(text) = (match read {
                Ok(r) => r.text().await,
                Err(e) => Err(e),
            }) else {
                continue;
            };
            for line in text.lines() {
                if line.starts_with('#') || line.contains("_bucket{") {
                    continue;
                }
                if let Some((series, value)) = line.rsplit_once(' ') {
                    let _ = writeln!(out, "{t:.1}\t{name}\t{series}\t{value}");
                }
            }
        }
        let _ = out.flush();
    }
}
