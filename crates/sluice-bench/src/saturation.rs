//! Saturation, for `fleet`: how many deliveries per second one `sluice serve` process drains
//! from a backlog, and how many a fleet (an API process and dispatcher processes) drains from
//! the same backlog on the same PostgreSQL server with the same total concurrency (each
//! dispatcher gets its share of it). Each layout runs on a fresh database and a `redis-server`
//! of its own: the backlog (fast loopback endpoints, written straight into the store disabled and
//! enabled at once, see [`backlog::fill`]) is drained by processes that are already up, and the
//! rate is read over the middle of the drain (from the 10th to the 90th percentile arrival), so
//! neither the processes' first claims nor the last stragglers count.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_testkit::receiver::{self, Behavior, Observer};
use tokio::time::Instant;

use super::backlog;
use super::harness::FreshDatabase;
use super::procs::{Fleet, Proc};
use super::report::{Report, ratio};
use super::store_cpu::StoreCpu;
use super::sys;
use super::timeline::Timeline;
use sluice_testkit::RedisServer;

/// The fleet drains at least this share of one process's rate.
pub(crate) const TARGET: f64 = 0.9;
/// The backlog's endpoints (paths of one fast receiver).
const ENDPOINTS: usize = 100;
/// How long the processes idle after a drain before the commits are read: every PostgreSQL
/// backend has flushed its statistics by then.
const STATS_SETTLE: Duration = Duration::from_secs(11);

/// The sizes of a measurement.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sizes {
    /// Deliveries in the backlog.
    pub(crate) backlog: u64,
    /// In-flight attempts across the layout (`--concurrency` of one process; split evenly over
    /// the dispatchers).
    pub(crate) concurrency: u32,
    /// Dispatcher processes of the fleet.
    pub(crate) dispatchers: u32,
}

/// One layout's drain.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Drained {
    /// Deliveries per second over the middle of the drain.
    pub(crate) per_s: Option<f64>,
    /// Every backlog delivery arrived.
    pub(crate) complete: bool,
    /// What each delivery cost, from the end of the fill to the last arrival.
    pub(crate) cost: Cost,
}

/// What a drain cost per delivery: transactions the database committed, WAL written, and CPU
/// of the sluice processes and of the PostgreSQL server (every process it runs).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Cost {
    pub(crate) commits: Option<f64>,
    pub(crate) wal_bytes: Option<f64>,
    pub(crate) sluice_cpu_ms: Option<f64>,
    pub(crate) store_cpu_ms: Option<f64>,
}

/// The counters a [`Cost`] is the growth of.
#[derive(Debug, Clone, Copy)]
struct Counters {
    commits: Option<f64>,
    wal_lsn: Option<f64>,
    sluice_cpu_s: Option<f64>,
    store_cpu_s: Option<f64>,
}

impl Counters {
    /// Read now. PostgreSQL's commit counts reach `pg_stat_database` when each backend flushes
    /// its statistics (at most a second after a transaction, ten when it goes idle), so the
    /// last reading is taken once the processes have idled that long; the WAL position is
    /// exact.
    async fn read(pg: &tokio_postgres::Client, pids: &[u32], store: &StoreCpu) -> Self {
        let row = pg
            .query_one(
                "SELECT (SELECT xact_commit FROM pg_stat_database \
                 WHERE datname = current_database())::float8, \
                 (pg_current_wal_lsn() - '0/0'::pg_lsn)::float8",
                &[],
            )
            .await
            .ok();
        let sluice_cpu_s = pids
            .iter()
            .map(|p| sys::cpu_s_of(&p.to_string()))
            .sum::<Option<f64>>();
        Self {
            commits: row.as_ref().map(|r| r.get(0)),
            wal_lsn: row.as_ref().map(|r| r.get(1)),
            sluice_cpu_s,
            store_cpu_s: store.seconds(),
        }
    }

    /// Per delivery from `self` to `cpu` (CPU) and `db` (commits and WAL), over `deliveries`.
    fn cost(&self, cpu: &Counters, db: &Counters, deliveries: usize) -> Cost {
        let n = deliveries.max(1) as f64;
        let per =
            |a: Option<f64>, b: Option<f64>, scale: f64| a.zip(b).map(|(a, b)| (b - a) * scale / n);
        Cost {
            commits: per(self.commits, db.commits, 1.0),
            wal_bytes: per(self.wal_lsn, db.wal_lsn, 1.0),
            sluice_cpu_ms: per(self.sluice_cpu_s, cpu.sluice_cpu_s, 1e3),
            store_cpu_ms: per(self.store_cpu_s, cpu.store_cpu_s, 1e3),
        }
    }
}

/// Both layouts' drains.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Saturation {
    pub(crate) sizes: Sizes,
    pub(crate) one_process: Drained,
    pub(crate) fleet: Drained,
}

/// When each delivery arrived, seconds since the receiver started.
struct Arrivals {
    started: Instant,
    at: Mutex<Vec<f64>>,
}

impl Observer for Arrivals {
    fn arrived(&self, _body: &[u8]) {
        let t = self.started.elapsed().as_secs_f64();
        self.at.lock().expect("arrivals").push(t);
    }
}

/// Drain the backlog with one process, then with the fleet.
pub(crate) async fn measure(
    sizes: Sizes,
    binary: &Path,
    server: &str,
    log_dir: &Path,
) -> anyhow::Result<Saturation> {
    let one_process = drain(sizes, 0, binary, server, log_dir).await?;
    let fleet = drain(sizes, sizes.dispatchers, binary, server, log_dir).await?;
    Ok(Saturation {
        sizes,
        one_process,
        fleet,
    })
}

/// Drain one backlog: with one `sluice serve` process when `dispatchers` is 0, else with an API
/// process and that many dispatcher processes.
async fn drain(
    sizes: Sizes,
    dispatchers: u32,
    binary: &Path,
    server: &str,
    log_dir: &Path,
) -> anyhow::Result<Drained> {
    let db = FreshDatabase::create(server).await?;
    let redis_port = sluice_testkit::free_port();
    let mut redis = RedisServer::start_on(redis_port).await?;
    let drained = async {
        let per_process = if dispatchers == 0 {
            sizes.concurrency
        } else {
            sizes.concurrency.div_ceil(dispatchers)
        };
        let fleet = Fleet {
            binary: binary.to_owned(),
            database_url: db.url.clone(),
            redis_url: Some(format!("redis://127.0.0.1:{redis_port}")),
            admin_token: sluice::ids::new_token("sk_admin"),
            log_dir: log_dir.to_owned(),
            extra: vec!["--concurrency".into(), per_process.to_string()],
        };
        let http = reqwest::Client::new();
        let prefix = if dispatchers == 0 {
            "saturation-one"
        } else {
            "saturation-fleet"
        };
        let (role, name) = if dispatchers == 0 {
            ("all", format!("{prefix}-all"))
        } else {
            ("api", format!("{prefix}-api"))
        };
        // The first process migrates the fresh database.
        let mut procs = vec![Proc::spawn(&fleet, role, &name)?];
        procs[0].wait_for(&http, "/readyz").await?;
        for i in 0..dispatchers {
            let name = format!("{prefix}-dispatcher-{i}");
            procs.push(Proc::spawn(&fleet, "dispatcher", &name)?);
        }
        for p in &mut procs {
            p.wait_for(&http, "/readyz").await?;
        }
        let arrivals = Arc::new(Arrivals {
            started: Instant::now(),
            at: Mutex::new(Vec::with_capacity(sizes.backlog as usize)),
        });
        let rx = receiver::start_observed(Behavior::Fast, arrivals.clone()).await?;
        let store = sluice::store::open(
            Some(&db.url),
            Path::new("."),
            sluice::store::OpenOptions::default(),
        )
        .await?;
        let pg = sluice_testkit::postgres_client(&db.url).await;
        let store_cpu = StoreCpu::locate(Some(&db.url), true).await;
        let pids: Vec<u32> = procs.iter().filter_map(|p| p.child.id()).collect();
        let timeline = Timeline::new(&["backlog"]);
        backlog::fill(&store, &rx.url(), sizes.backlog, ENDPOINTS, &timeline, 0).await?;
        let arrived = || arrivals.at.lock().expect("arrivals").len();
        let (before, at_fill) = (Counters::read(&pg, &pids, &store_cpu).await, arrived());
        // Generous: a drain slower than 200/s is a broken run, not a measurement.
        let limit = Duration::from_secs(30 + sizes.backlog / 200);
        let waited = Instant::now();
        while arrived() < sizes.backlog as usize && waited.elapsed() < limit {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (cpu, drained) = (Counters::read(&pg, &pids, &store_cpu).await, arrived());
        tokio::time::sleep(STATS_SETTLE).await;
        let db_after = Counters::read(&pg, &pids, &store_cpu).await;
        let cost = before.cost(&cpu, &db_after, drained.saturating_sub(at_fill));
        for p in &procs {
            let _ = p.sigterm().await;
        }
        for p in &mut procs {
            let _ = tokio::time::timeout(Duration::from_secs(30), p.child.wait()).await;
        }
        let mut at = arrivals.at.lock().expect("arrivals").clone();
        at.sort_by(f64::total_cmp);
        anyhow::Ok(Drained {
            per_s: middle_rate(&at),
            complete: at.len() as u64 >= sizes.backlog,
            cost,
        })
    }
    .await;
    redis.stop();
    db.drop_it().await;
    drained
}

/// Deliveries per second between the 10th and the 90th percentile arrival of sorted `at`.
fn middle_rate(at: &[f64]) -> Option<f64> {
    if at.len() < 10 {
        return None;
    }
    let (lo, hi) = (at.len() / 10, at.len() * 9 / 10);
    let span = at[hi] - at[lo];
    (span > 0.0).then(|| (hi - lo) as f64 / span)
}

/// The figures and the verdict.
pub(crate) fn figures(report: &mut Report, s: &Saturation) {
    let Sizes {
        backlog,
        concurrency,
        dispatchers,
    } = s.sizes;
    report.param("saturation_backlog", backlog);
    report.param("saturation_concurrency", concurrency);
    report.figure(
        "saturation_one_process_per_s",
        &format!("saturation, one process at concurrency {concurrency}: deliveries"),
        s.one_process.per_s,
        "/s",
    );
    report.figure(
        "saturation_fleet_per_s",
        &format!(
            "saturation, {dispatchers} dispatchers at {} each: deliveries",
            concurrency.div_ceil(dispatchers.max(1))
        ),
        s.fleet.per_s,
        "/s",
    );
    let factor = ratio(s.fleet.per_s, s.one_process.per_s);
    report.figure(
        "fleet_saturation_vs_one_process",
        "saturation: fleet ÷ one process",
        factor,
        "×",
    );
    for (layout, d) in [("one_process", &s.one_process), ("fleet", &s.fleet)] {
        let c = &d.cost;
        let name = layout.replace('_', " ");
        for (key, what, value, unit) in [
            ("commits", "transactions committed", c.commits, ""),
            ("wal_bytes", "WAL", c.wal_bytes, " B"),
            (
                "sluice_cpu_ms",
                "sluice processes' CPU",
                c.sluice_cpu_ms,
                " ms",
            ),
            ("store_cpu_ms", "PostgreSQL's CPU", c.store_cpu_ms, " ms"),
        ] {
            report.figure(
                &format!("saturation_{layout}_{key}_per_delivery"),
                &format!("saturation, {name}: {what} per delivery"),
                value,
                unit.trim(),
            );
        }
    }
    report.invariant(
        s.one_process.complete && s.fleet.complete,
        format!("both layouts delivered the whole backlog of {backlog}"),
    );
    report.verdict(
        factor.is_some_and(|f| f >= TARGET),
        format!(
            "the fleet drains at least {TARGET}× what one process drains with the same total \
             concurrency: {} ({} against {}/s)",
            factor.map_or("n/a".into(), |f| format!("{f:.2}×")),
            s.fleet.per_s.map_or("n/a".into(), |v| format!("{v:.0}")),
            s.one_process
                .per_s
                .map_or("n/a".into(), |v| format!("{v:.0}")),
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_read_over_the_middle_of_the_drain() {
        // 100 arrivals: ten at once at the start, eighty one per 10 ms, ten stragglers late.
        let mut at: Vec<f64> = vec![0.0; 10];
        at.extend((0..80).map(|i| 1.0 + f64::from(i) * 0.01));
        at.extend((0..10).map(|i| 30.0 + f64::from(i)));
        // From at[10] = 1.0 to at[90] = 30.0: 80 deliveries over 29 s.
        assert_eq!(middle_rate(&at), Some(80.0 / 29.0));
        assert_eq!(middle_rate(&at[..5]), None);
        assert_eq!(middle_rate(&[1.0; 20]), None);
    }
}
