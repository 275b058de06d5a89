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
//! - **tails**: each fault's tail is back to baseline within twice its length (see [`tail`]).
//!
//! A smoke run fails on the first three only (the others are timing claims).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;
use sluice_testkit::RedisServer;
use sluice_testkit::freeze_proxy::{FreezeProxy, upstream_of};
use sluice_testkit::receiver::{self, Behavior, Receiver};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::chart::{Line, Panel};
use super::fleet::{Arrival, Arrivals, queue};
use super::harness::{FreshDatabase, Sluice, Tuning};
use super::load;
use super::procs::{Fleet, Proc, sluice_binary};
use super::report::{Report, percentile};
use super::timeline::{Timeline, ms, now_us};
use super::{BenchArgs, save_chart, watch};

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

/// What a fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    DispatcherKill,
    DispatcherTerm,
    ApiKill,
    DbFreeze,
    DbRestart,
    RedisKill,
}

impl Kind {
    const ALL: [Kind; 6] = [
        Kind::DispatcherKill,
        Kind::DispatcherTerm,
        Kind::ApiKill,
        Kind::DbFreeze,
        Kind::DbRestart,
        Kind::RedisKill,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::DispatcherKill => "dispatcher-kill",
            Kind::DispatcherTerm => "dispatcher-sigterm",
            Kind::ApiKill => "api-kill",
            Kind::DbFreeze => "db-freeze",
            Kind::DbRestart => "db-restart",
            Kind::RedisKill => "redis-kill",
        }
    }

    /// How long it holds (freeze, refusal) or keeps its process down, seconds: `(low, high)`.
    fn hold_range(self, smoke: bool) -> (f64, f64) {
        match (self, smoke) {
            (Kind::DispatcherKill, false) => (2.0, 6.0),
            (Kind::DispatcherTerm, false) => (1.0, 3.0),
            (Kind::ApiKill, false) => (1.0, 4.0),
            (Kind::DbFreeze, false) => (5.0, 15.0),
            (Kind::DbRestart, false) => (2.0, 8.0),
            (Kind::RedisKill, false) => (2.0, 8.0),
            (Kind::DispatcherKill, true) => (1.0, 2.0),
            (Kind::DispatcherTerm, true) => (0.5, 1.0),
            (Kind::ApiKill, true) => (1.0, 2.0),
            (Kind::DbFreeze, true) => (2.0, 4.0),
            (Kind::DbRestart, true) => (1.0, 3.0),
            (Kind::RedisKill, true) => (1.0, 2.0),
        }
    }

    /// The length a tail is judged against, for a fault that lasted `length_s`: its own,
    /// except a dispatcher `kill -9`, whose work comes back only once it is known dead and its
    /// leases are reaped (two heartbeats + reap interval) however soon it is started again.
    fn judged_length(self, length_s: f64) -> f64 {
        match self {
            Kind::DispatcherKill => length_s.max(KNOWN_DEAD_S + REAP_S),
            _ => length_s,
        }
    }

    /// The window around a fault in which a duplicated message's first arrival is explained by
    /// it (see the module's notes), or `None` when this kind explains no duplicate.
    fn explains(self, start_s: f64, end_s: f64) -> Option<(f64, f64)> {
        match self {
            Kind::DispatcherKill => Some((start_s - ATTEMPT_S, start_s + EXPLAIN_AFTER_S)),
            Kind::DbFreeze | Kind::DbRestart => {
                Some((start_s - ATTEMPT_S, end_s + EXPLAIN_AFTER_S))
            }
            Kind::DispatcherTerm | Kind::ApiKill | Kind::RedisKill => None,
        }
    }
}

/// A small seeded generator (SplitMix64): the schedule must not change with a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn between(&mut self, (low, high): (f64, f64)) -> f64 {
        low + (high - low) * self.unit()
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// One fault of the schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Planned {
    kind: Kind,
    /// Seconds after the load starts.
    at_s: f64,
    /// How long it holds, or keeps its process down before starting it again.
    hold_s: f64,
    /// The dispatcher it hits (dispatcher kinds).
    target: usize,
    /// Quiet seconds after it, for its tail.
    gap_s: f64,
}

impl Planned {
    /// When the next fault may start, as planned (a SIGTERM's drain adds to it when run).
    fn over_s(&self) -> f64 {
        self.at_s + self.hold_s + self.gap_s
    }
}

/// The faults and when the load ends.
#[derive(Debug, Clone, PartialEq)]
struct Schedule {
    faults: Vec<Planned>,
    /// Fault-free seconds at the start: the baseline.
    warmup_s: f64,
    load_s: f64,
}

impl Schedule {
    /// The schedule for `seed`: with `smoke`, each kind once in a seeded order with short
    /// holds and gaps; else kinds drawn uniformly over `duration_s`, each followed by a gap of
    /// twice the length its tail is judged against plus 5 s.
    fn new(seed: u64, duration_s: f64, smoke: bool) -> Self {
        let mut rng = Rng(seed);
        let warmup_s = if smoke { 6.0 } else { 20.0 };
        let mut faults = Vec::new();
        let mut t = warmup_s;
        let plan = |kind: Kind, t: f64, rng: &mut Rng| {
            let hold_s = round(rng.between(kind.hold_range(smoke)));
            let target = rng.below(DISPATCHERS);
            let gap_s = if smoke {
                5.0
            } else {
                // A SIGTERM's drain is not known ahead: allow 5 s for it.
                let expected = match kind {
                    Kind::DispatcherTerm => hold_s + 5.0,
                    _ => hold_s,
                };
                TAIL_FACTOR * kind.judged_length(expected) + 5.0
            };
            Planned {
                kind,
                at_s: round(t),
                hold_s,
                target,
                gap_s,
            }
        };
        if smoke {
            let mut kinds = Kind::ALL;
            for i in (1..kinds.len()).rev() {
                kinds.swap(i, rng.below(i + 1));
            }
            for kind in kinds {
                let p = plan(kind, t, &mut rng);
                t = p.over_s();
                faults.push(p);
            }
            return Self {
                faults,
                warmup_s,
                load_s: t,
            };
        }
        loop {
            let kind = Kind::ALL[rng.below(Kind::ALL.len())];
            let p = plan(kind, t, &mut rng);
            if p.over_s() > duration_s {
                break;
            }
            t = p.over_s();
            faults.push(p);
        }
        Self {
            faults,
            warmup_s,
            load_s: duration_s.max(t),
        }
    }
}

/// A fault as it ran.
#[derive(Debug, Clone)]
struct Done {
    kind: Kind,
    target: usize,
    start_s: f64,
    /// When the fault was over: the proxy thawed or up again, the process or Redis back.
    end_s: f64,
    /// When the next fault started (or the load ended): the tail is read until then.
    until_s: f64,
    /// SIGTERM → exit, and whether it exited cleanly.
    drain: Option<(f64, bool)>,
}

impl Done {
    fn length_s(&self) -> f64 {
        self.end_s - self.start_s
    }
}

/// A tail, seconds from the fault's end (`f.end_s`) until the later of:
///
/// - the first whole second from which every second before the next fault (`f.until_s`)
///   delivered something with a p99 at most `threshold_ms` (`p99[i]` is second `i`'s p99;
///   `None`, nothing delivered, is not back while the load runs); when the last second before
///   the next fault is not back, that fault's start;
/// - the arrival of the last of this fault's stragglers: requests in `late` (`(POSTed at,
///   arrived at)` of requests later than the threshold) that were already late before the next
///   fault began and not before this one did (POSTed at + threshold within
///   `[f.start_s, f.until_s)`), so a request late because of one fault counts for it alone,
///   however far into the next one's window it arrives.
///
/// `None` when there was no second to read and no straggler.
fn tail(p99: &[Option<f64>], late: &[(f64, f64)], f: &Done, threshold_ms: f64) -> Option<f64> {
    let (end_s, until_s) = (f.end_s, f.until_s);
    let from = end_s.max(0.0).floor() as usize;
    let to = (until_s.max(0.0).floor() as usize).min(p99.len());
    let by_seconds = (from < to).then(|| {
        let good = |i: usize| p99[i].is_some_and(|v| v <= threshold_ms);
        let mut back = until_s;
        for i in (from..to).rev() {
            if !good(i) {
                break;
            }
            back = i as f64;
        }
        back
    });
    let threshold_s = threshold_ms / 1000.0;
    let last_straggler = late
        .iter()
        .filter(|(posted, _)| {
            let due = posted + threshold_s;
            due >= f.start_s && due < until_s
        })
        .map(|(_, arrived)| *arrived)
        .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.max(t))));
    let over = match (by_seconds, last_straggler) {
        (Some(a), Some(b)) => a.max(b),
        (Some(a), None) => a,
        (None, Some(b)) => b,
        (None, None) => return None,
    };
    Some((over - end_s).max(0.0))
}

/// `(POSTed at, arrived at)` of the requests of `customers` later than `threshold_ms`, seconds.
fn late_requests(
    arrivals: &[Arrival],
    customers: impl Fn(u64) -> bool,
    threshold_ms: f64,
) -> Vec<(f64, f64)> {
    arrivals
        .iter()
        .filter(|a| customers(a.key.0))
        .filter_map(|a| {
            let took = a.took_s?;
            (took * 1000.0 > threshold_ms).then_some((a.at_s - took, a.at_s))
        })
        .collect()
}

/// `webhook_deliveries_shed_total` in a `/metrics` text: `(the endpoint's, every endpoint's)`.
fn shed_in(text: &str, endpoint: &str) -> (f64, f64) {
    let label = format!("endpoint=\"{endpoint}\"");
    let mut out = (0.0, 0.0);
    for line in text
        .lines()
        .filter(|l| l.starts_with("webhook_deliveries_shed_total"))
    {
        let Some(v) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        if line.contains(&label) {
            out.0 += v;
        }
        out.1 += v;
    }
    out
}

/// What the deliveries say about duplicates.
#[derive(Debug, Default, PartialEq)]
struct Duplicates {
    /// Requests beyond a message's first.
    requests: u64,
    /// Messages delivered more than once.
    messages: u64,
    /// Duplicated messages whose first arrival a fault explains, by kind.
    explained: BTreeMap<&'static str, u64>,
    /// Duplicated messages no fault explains.
    unexplained: u64,
    /// Duplicates with another `webhook-id` than the message's first delivery.
    other_id: u64,
}

impl Duplicates {
    fn explained_total(&self) -> u64 {
        self.explained.values().sum()
    }
}

/// Count duplicates, and which fault explains each duplicated message (the first whose window
/// holds its first arrival).
fn duplicates(arrivals: &[Arrival], faults: &[Done]) -> Duplicates {
    let mut by_key: HashMap<(u64, u64), Vec<&Arrival>> = HashMap::new();
    for a in arrivals {
        by_key.entry(a.key).or_default().push(a);
    }
    let mut d = Duplicates::default();
    for seen in by_key.values().filter(|s| s.len() > 1) {
        d.messages += 1;
        d.requests += seen.len() as u64 - 1;
        let first = seen
            .iter()
            .min_by(|a, b| a.at_s.total_cmp(&b.at_s))
            .expect("non-empty");
        d.other_id += seen
            .iter()
            .filter(|a| a.webhook_id != first.webhook_id)
            .count() as u64;
        let by = faults.iter().find(|f| {
            f.kind
                .explains(f.start_s, f.end_s)
                .is_some_and(|(from, to)| first.at_s >= from && first.at_s <= to)
        });
        match by {
            Some(f) => *d.explained.entry(f.kind.name()).or_default() += 1,
            None => d.unexplained += 1,
        }
    }
    d
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
            healthy: args.endpoints.unwrap_or(args.sized(5, 3)),
            healthy_rate: args.rate.unwrap_or(args.sized(28.0, 20.0)),
            slow_ms: args.slow_ms.unwrap_or(300),
            slow_rate: args.bad_rate.unwrap_or(args.sized(8.0, 6.0)),
            lane: args.lane.unwrap_or(4),
        }
    }
}

/// A process of the fleet and where it listens; `proc` is `None` while a fault keeps it down.
struct Slot {
    role: &'static str,
    name: String,
    port: u16,
    proc: Option<Proc>,
    starts: u32,
}

/// A process that exited without the schedule stopping it.
#[derive(Debug, Clone)]
struct Exit {
    name: String,
    at_s: f64,
    status: String,
}

/// The fleet under faults: its processes (slot 0 the API, then the dispatchers), Redis and the
/// proxy, and every exit nobody caused.
struct Rig {
    fleet: Fleet,
    http: reqwest::Client,
    slots: Vec<Slot>,
    redis: RedisServer,
    redis_port: u16,
    proxy: FreezeProxy,
    timeline: Arc<Timeline>,
    exits: Vec<Exit>,
    /// Deliveries shed at a full lane (and requeued), summed over the dispatchers' `/metrics`
    /// read just before each is stopped or killed and at the end: `(slow endpoint, all)`.
    shed: (f64, f64),
    /// The slow endpoint's id.
    slow_endpoint: String,
}

impl Rig {
    /// Record (and start again) every process that exited by itself.
    fn poll_exits(&mut self) -> anyhow::Result<()> {
        let at_s = self.timeline.elapsed();
        for i in 0..self.slots.len() {
            let exited = match self.slots[i].proc.as_mut() {
                Some(p) => p.child.try_wait().ok().flatten(),
                None => None,
            };
            if let Some(status) = exited {
                let slot = &self.slots[i];
                self.exits.push(Exit {
                    name: slot.name.clone(),
                    at_s,
                    status: status.to_string(),
                });
                eprintln!(
                    "soak: {} exited by itself at {at_s:.1} s: {status}",
                    slot.name
                );
                self.slots[i].proc = None;
                self.start(i)?;
            }
        }
        Ok(())
    }

    /// Start slot `i`'s process (again), on its port; a new log file each time.
    fn start(&mut self, i: usize) -> anyhow::Result<()> {
        let slot = &mut self.slots[i];
        let name = format!("{}.{}", slot.name, slot.starts);
        slot.starts += 1;
        slot.proc = Some(Proc::spawn_on(&self.fleet, slot.role, &name, slot.port)?);
        Ok(())
    }

    /// Start slot `i` and wait until it is ready, watching the others meanwhile.
    async fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.start(i)?;
        let until = Instant::now() + Duration::from_secs(60);
        while Instant::now() < until {
            self.poll_exits()?;
            let url = format!("http://127.0.0.1:{}/readyz", self.slots[i].port);
            let ready = tokio::time::timeout(Duration::from_secs(1), self.http.get(&url).send())
                .await
                .is_ok_and(|r| r.is_ok_and(|r| r.status().is_success()));
            if ready {
                return Ok(());
            }
            tokio::time::sleep(POLL).await;
        }
        let said = self.slots[i].proc.as_ref().map(Proc::said);
        bail!(
            "{} never came back: {}",
            self.slots[i].name,
            said.unwrap_or_default()
        )
    }

    /// Wait until `t`, watching the processes.
    async fn idle_until(&mut self, t: Instant) -> anyhow::Result<()> {
        loop {
            self.poll_exits()?;
            let now = Instant::now();
            if now >= t {
                return Ok(());
            }
            tokio::time::sleep((t - now).min(POLL)).await;
        }
    }

    async fn idle(&mut self, d: Duration) -> anyhow::Result<()> {
        self.idle_until(Instant::now() + d).await
    }

    /// Add what slot `i`'s dispatcher shed since its start (its `/metrics`) to the total.
    async fn count_shed(&mut self, i: usize) {
        let url = format!("http://127.0.0.1:{}/metrics", self.slots[i].port);
        let read = async {
            let text = self
                .http
                .get(&url)
                .bearer_auth(&self.fleet.admin_token)
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            Some(shed_in(&text, &self.slow_endpoint))
        };
        let (slow, all) = read.await.unwrap_or_default();
        self.shed.0 += slow;
        self.shed.1 += all;
    }

    /// Run one fault; returns it without `until_s` (set by the caller).
    async fn inflict(&mut self, p: &Planned) -> anyhow::Result<Done> {
        let hold = Duration::from_secs_f64(p.hold_s);
        let start_s = self.timeline.elapsed();
        let mut drain = None;
        match p.kind {
            Kind::DispatcherKill | Kind::ApiKill => {
                let i = if p.kind == Kind::ApiKill {
                    0
                } else {
                    1 + p.target
                };
                if i > 0 {
                    self.count_shed(i).await;
                }
                if let Some(mut proc) = self.slots[i].proc.take() {
                    proc.kill9().await?;
                }
                self.idle(hold).await?;
                self.restart(i).await?;
            }
            Kind::DispatcherTerm => {
                let i = 1 + p.target;
                self.count_shed(i).await;
                if let Some(mut proc) = self.slots[i].proc.take() {
                    proc.sigterm().await?;
                    let deadline = Instant::now() + Duration::from_secs(120);
                    let status = loop {
                        self.poll_exits()?;
                        if let Some(status) = proc.child.try_wait().context("wait")? {
                            break Some(status);
                        }
                        if Instant::now() >= deadline {
                            let _ = proc.kill9().await;
                            break None;
                        }
                        tokio::time::sleep(POLL).await;
                    };
                    let ok = status.is_some_and(|s| s.success());
                    drain = Some((self.timeline.elapsed() - start_s, ok));
                }
                self.idle(hold).await?;
                self.restart(i).await?;
            }
            Kind::DbFreeze => {
                self.proxy.set_frozen(true);
                self.idle(hold).await?;
                self.proxy.set_frozen(false);
            }
            Kind::DbRestart => {
                self.proxy.set_down(true);
                self.idle(hold).await?;
                self.proxy.set_down(false);
            }
            Kind::RedisKill => {
                self.redis.stop();
                self.idle(hold).await?;
                self.redis = RedisServer::start_on(self.redis_port).await?;
            }
        }
        Ok(Done {
            kind: p.kind,
            target: p.target,
            start_s,
            end_s: self.timeline.elapsed(),
            until_s: f64::NAN,
            drain,
        })
    }

    /// SIGTERM every process still running; true when all exited cleanly within 60 s.
    async fn stop(mut self) -> bool {
        let mut clean = true;
        for slot in &mut self.slots {
            if let Some(mut p) = slot.proc.take() {
                let stopped = p.sigterm().await.is_ok()
                    && tokio::time::timeout(Duration::from_secs(60), p.child.wait())
                        .await
                        .is_ok_and(|s| s.is_ok_and(|s| s.success()));
                clean &= stopped;
            }
        }
        self.redis.stop();
        clean
    }
}

/// What the API acknowledged: `(customer, seq)` → message id, and POST counters.
#[derive(Default)]
struct Acks {
    ids: Mutex<HashMap<(u64, u64), String>>,
    /// POSTs retried (any answer but 202/200, or none).
    retries: std::sync::atomic::AtomicU64,
    /// Messages given up on (a 4xx that a retry cannot change, or the retry deadline).
    abandoned: std::sync::atomic::AtomicU64,
    /// Per acknowledged message: how many POSTs it took and when (timeline seconds) the one
    /// acknowledged began, so latency can be read from that POST as well as from the first.
    posts: Mutex<HashMap<(u64, u64), (u32, f64)>>,
    /// Every POST that was not acknowledged: when it began and why (`status 503`, `timeout`,
    /// `connect`, `request`, `body`).
    failures: Mutex<Vec<(f64, String)>>,
}

impl Acks {
    fn ids(&self) -> HashMap<(u64, u64), String> {
        self.ids.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Open-loop producer for `customer`: `rate` messages/s until `until`, each POSTed with the
/// `Idempotency-Key` `soak-{customer}-{seq}` and retried with it (same body) until answered
/// 202 or 200, or until `give_up`.
#[allow(clippy::too_many_arguments)]
fn produce(
    http: reqwest::Client,
    url: Arc<str>,
    token: String,
    customer: u64,
    group: usize,
    rate: f64,
    until: Instant,
    give_up: Instant,
    timeline: Arc<Timeline>,
    acks: Arc<Acks>,
) -> JoinHandle<()> {
    use std::sync::atomic::Ordering;
    let token: Arc<str> = token.into();
    tokio::spawn(load::paced(rate, until, move |seq| {
        let (http, url, token) = (http.clone(), url.clone(), token.clone());
        let (timeline, acks) = (timeline.clone(), acks.clone());
        async move {
            let body = format!(
                r#"{{"event_type":"bench.event","payload":{{"sent_at_us":{},"c":{customer},"seq":{seq}}}}}"#,
                now_us()
            );
            let key = format!("soak-{customer}-{seq}");
            let mut backoff = Duration::from_millis(100);
            let mut tries = 0u32;
            loop {
                tries += 1;
                let started = std::time::Instant::now();
                let started_s = timeline.elapsed();
                let answer = http
                    .post(&*url)
                    .bearer_auth(&*token)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .header("idempotency-key", &key)
                    .timeout(Duration::from_secs(10))
                    .body(body.clone())
                    .send()
                    .await;
                let status = answer.as_ref().ok().map(reqwest::Response::status);
                let failed = match &answer {
                    Ok(_) => "",
                    Err(e) if e.is_timeout() => "timeout",
                    Err(e) if e.is_connect() => "connect",
                    Err(e) if e.is_request() => "request",
                    Err(_) => "other",
                };
                let id = match answer {
                    Ok(r) if r.status().is_success() => r
                        .json::<Value>()
                        .await
                        .ok()
                        .and_then(|v| v["id"].as_str().map(str::to_owned)),
                    _ => None,
                };
                timeline.sent(group, id.is_some(), started.elapsed());
                if let Some(id) = id {
                    acks.ids
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert((customer, seq), id);
                    acks.posts
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert((customer, seq), (tries, started_s));
                    return;
                }
                let why = match status {
                    // A success whose body did not name the message.
                    Some(s) if s.is_success() => "body".to_owned(),
                    Some(s) => format!("status {}", s.as_u16()),
                    None => failed.to_owned(),
                };
                acks.failures
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((started_s, why));
                // A refusal a retry cannot change (a 4xx other than 408/429) is given up on.
                let hopeless = status
                    .is_some_and(|s| s.is_client_error() && s.as_u16() != 408 && s.as_u16() != 429);
                if hopeless || Instant::now() >= give_up {
                    acks.abandoned.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                acks.retries.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }))
}

/// What the run saw.
struct Observed {
    /// Deliveries shed at a full lane and requeued (all dispatchers, every life): `(the slow
    /// endpoint's, every endpoint's)`.
    shed: (f64, f64),
    schedule: Schedule,
    /// Faults of the schedule left out because the run fell behind it.
    skipped: usize,
    done: Vec<Done>,
    exits: Vec<Exit>,
    lane_peak: usize,
    load_end_s: f64,
    drained_s: f64,
    settled: bool,
    acks: HashMap<(u64, u64), String>,
    retries: u64,
    abandoned: u64,
    /// See [`Acks::posts`] and [`Acks::failures`].
    posts: HashMap<(u64, u64), (u32, f64)>,
    failures: Vec<(f64, String)>,
    arrivals: Vec<Arrival>,
    dead: i64,
    /// Deliveries with more than one recorded attempt (an attempt cut off by a kill is not
    /// recorded; a settle also resets the lease-expiry count, so the store cannot tell those).
    redelivered: i64,
    survivors_clean: bool,
    /// The slow endpoint's queue as each fault began (the same order as `done`), and when the
    /// drain ended.
    slow_queue: Vec<EndpointQueue>,
    slow_queue_left: EndpointQueue,
}

/// One endpoint's unfinished deliveries at a moment: due now, ready but due later (a retry's
/// back-off or a shed's requeue), leased, and how far off the latest due one is.
#[derive(Debug, Clone, Copy, Default)]
struct EndpointQueue {
    due: i64,
    later: i64,
    leased: i64,
    last_due_in_s: f64,
}

impl EndpointQueue {
    async fn read(pg: &tokio_postgres::Client, endpoint: &str) -> anyhow::Result<Self> {
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

    fn total(&self) -> f64 {
        (self.due + self.later + self.leased) as f64
    }

    fn describe(&self) -> String {
        format!(
            "{} due, {} later (the last in {:.1} s), {} leased",
            self.due, self.later, self.last_due_in_s, self.leased
        )
    }
}

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
        let sizes = Sizes::of(args);
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

/// Start the fleet behind the proxy, load it through the schedule, drain, and stop it.
#[allow(clippy::too_many_lines)]
async fn drive(
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
            produce(
                http.clone(),
                url.clone(),
                token.clone(),
                *c,
                *group,
                *rate,
                until,
                give_up,
                timeline.clone(),
                acks.clone(),
            )
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

/// One fault's reading.
struct Reading {
    judged_s: f64,
    tail_s: Option<f64>,
}

/// The figures and the claims.
#[allow(clippy::too_many_lines)]
fn figures(
    args: &BenchArgs,
    sizes: Sizes,
    seed: u64,
    timeline: &Timeline,
    seen: &Observed,
) -> Report {
    let mut report = Report::new(
        "soak",
        format!(
            "1 API + {DISPATCHERS} dispatcher processes (sluice serve --role, --lease-ttl \
             {LEASE_TTL_S}s) on PostgreSQL through a proxy that freezes and drops connections, \
             a redis-server of their own, all on loopback"
        ),
    );
    report.param("seed", seed);
    report.param("load_s", round(seen.schedule.load_s));
    report.param("warmup_s", seen.schedule.warmup_s);
    report.param("healthy_endpoints", sizes.healthy);
    report.param("healthy_rate_per_endpoint", sizes.healthy_rate);
    report.param("slow_ms", sizes.slow_ms);
    report.param("slow_rate", sizes.slow_rate);
    report.param("lane", sizes.lane);
    report.param("lease_ttl_s", LEASE_TTL_S);

    // The baseline: healthy p99 over the fault-free warm-up (its first second skipped).
    let warm = seen.schedule.warmup_s.floor() as usize;
    let baseline = timeline
        .latency_between(HEALTHY, 1.min(warm), warm)
        .quantile(0.99)
        .map(ms);
    let threshold_ms = baseline.map_or(TAIL_FLOOR_MS, |b| (TAIL_FACTOR * b).max(TAIL_FLOOR_MS));
    let p99_of = |group: usize| -> Vec<Option<f64>> {
        timeline
            .seconds(group)
            .iter()
            .map(|s| s.latency.quantile(0.99).map(ms))
            .collect()
    };
    let p99 = p99_of(HEALTHY);
    // The slow endpoint's tail too, for reading (not judged: its lane makes it queue).
    let slow_p99 = p99_of(SLOW);
    let slow_baseline = timeline
        .latency_between(SLOW, 1.min(warm), warm)
        .quantile(0.99)
        .map(ms);
    let slow_threshold_ms =
        slow_baseline.map_or(TAIL_FLOOR_MS, |b| (TAIL_FACTOR * b).max(TAIL_FLOOR_MS));
    report.figure(
        "baseline_p99_ms",
        "healthy p99 enqueue→delivery before the first fault (baseline)",
        baseline,
        "ms",
    );
    report.figure(
        "tail_threshold_ms",
        &format!("a tail ends when the per-second p99 is ≤ this ({TAIL_FACTOR}× baseline, ≥ {TAIL_FLOOR_MS} ms)"),
        Some(threshold_ms),
        "ms",
    );

    let slow_customer = sizes.healthy as u64;
    let late_healthy = late_requests(&seen.arrivals, |c| c != slow_customer, threshold_ms);
    let late_slow = late_requests(&seen.arrivals, |c| c == slow_customer, slow_threshold_ms);

    // Each fault.
    let mut readings = Vec::new();
    for (i, f) in seen.done.iter().enumerate() {
        let judged_s = f.kind.judged_length(f.length_s());
        let tail_s = tail(&p99, &late_healthy, f, threshold_ms);
        let target = match f.kind {
            Kind::DispatcherKill | Kind::DispatcherTerm => format!(" dispatcher-{}", f.target),
            _ => String::new(),
        };
        let drain = f.drain.map_or(String::new(), |(s, ok)| {
            format!(
                ", drained in {s:.1} s{}",
                if ok { "" } else { " (not clean)" }
            )
        });
        report.figure(
            &format!("tail_s.{i}.{}", f.kind.name()),
            &format!(
                "fault {:>3}: {}{target} at {:.1} s, {:.1} s long{drain}, judged on {:.1} s: tail \
                 ({})",
                i + 1,
                f.kind.name(),
                f.start_s,
                f.length_s(),
                judged_s,
                match tail_s {
                    Some(t) if t <= TAIL_FACTOR * judged_s => "ok",
                    Some(_) => "too long",
                    None => "nothing to read",
                }
            ),
            tail_s.map(round),
            "s",
        );
        report.figure(
            &format!("slow_tail_s.{i}.{}", f.kind.name()),
            &format!(
                "fault {:>3}: the slow endpoint's tail (p99 ≤ {slow_threshold_ms:.0} ms; not judged)",
                i + 1
            ),
            tail(&slow_p99, &late_slow, f, slow_threshold_ms).map(round),
            "s",
        );
        if let Some(q) = seen.slow_queue.get(i) {
            report.figure(
                &format!("slow_queue.{i}.{}", f.kind.name()),
                &format!(
                    "fault {:>3}: the slow endpoint's queue as it began: {}",
                    i + 1,
                    q.describe()
                ),
                Some(q.total()),
                "",
            );
        }
        readings.push(Reading { judged_s, tail_s });
    }
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for f in &seen.done {
        *by_kind.entry(f.kind.name()).or_default() += 1;
    }
    for kind in Kind::ALL {
        report.figure(
            &format!("faults.{}", kind.name()),
            &format!("faults: {}", kind.name()),
            Some(by_kind.get(kind.name()).copied().unwrap_or(0) as f64),
            "",
        );
    }
    let mut tails: Vec<f64> = readings.iter().filter_map(|r| r.tail_s).collect();
    tails.sort_by(f64::total_cmp);
    let worst = readings
        .iter()
        .map(|r| r.tail_s.unwrap_or(f64::INFINITY))
        .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.max(t))));
    report.figure(
        "worst_tail_s",
        "worst tail (n/a: a fault had nothing to read its tail by)",
        worst,
        "s",
    );
    report.figure(
        "median_tail_s",
        "median tail",
        tails.get(tails.len() / 2).copied(),
        "s",
    );
    let not_back = readings.iter().filter(|r| r.tail_s.is_none()).count();
    let too_long: Vec<usize> = readings
        .iter()
        .enumerate()
        .filter(|(_, r)| r.tail_s.is_none_or(|t| t > TAIL_FACTOR * r.judged_s))
        .map(|(i, _)| i + 1)
        .collect();

    // Loss and duplicates.
    let delivered: HashSet<(u64, u64)> = seen.arrivals.iter().map(|a| a.key).collect();
    let lost = seen.acks.keys().filter(|k| !delivered.contains(k)).count();
    let dup = duplicates(&seen.arrivals, &seen.done);
    let wrong_id = seen
        .arrivals
        .iter()
        .filter(|a| seen.acks.get(&a.key).is_some_and(|id| *id != a.webhook_id))
        .count();
    let span = (seen.load_end_s).max(1.0);
    report.figure(
        "acknowledged",
        "messages acknowledged (202, or 200 for a retried key)",
        Some(seen.acks.len() as f64),
        "",
    );
    report.figure(
        "post_retries",
        "POSTs retried with the same Idempotency-Key",
        Some(seen.retries as f64),
        "",
    );
    report.figure(
        "abandoned",
        "messages the producers gave up on",
        Some(seen.abandoned as f64),
        "",
    );
    report.figure(
        "delivered_per_s",
        "requests the receivers saw, per second of load",
        Some(seen.arrivals.len() as f64 / span),
        "/s",
    );
    report.figure(
        "lost",
        "lost (acknowledged, never delivered)",
        Some(lost as f64),
        "",
    );
    report.figure(
        "duplicates",
        "duplicate requests (beyond a message's first)",
        Some(dup.requests as f64),
        "",
    );
    report.figure(
        "duplicated_messages",
        "messages delivered more than once",
        Some(dup.messages as f64),
        "",
    );
    for kind in Kind::ALL {
        if kind.explains(0.0, 0.0).is_some() {
            report.figure(
                &format!("duplicated_explained.{}", kind.name()),
                &format!("… first delivered at a {}", kind.name()),
                Some(dup.explained.get(kind.name()).copied().unwrap_or(0) as f64),
                "",
            );
        }
    }
    report.figure(
        "duplicated_explained",
        "… explained by a fault",
        Some(dup.explained_total() as f64),
        "",
    );
    report.figure(
        "duplicated_unexplained",
        "… explained by no fault",
        Some(dup.unexplained as f64),
        "",
    );
    report.figure(
        "wrong_webhook_id",
        "deliveries whose webhook-id is not the acknowledged message id",
        Some(wrong_id as f64),
        "",
    );
    // Where the time went for the slowest deliveries.
    let slow_requests = |group_of: &dyn Fn(u64) -> bool, over_s: f64| {
        seen.arrivals
            .iter()
            .filter(|a| group_of(a.key.0) && a.took_s.is_some_and(|t| t > over_s))
            .count() as f64
    };
    report.figure(
        "healthy_over_5s",
        "healthy requests more than 5 s after their POST",
        Some(slow_requests(&|c| c != slow_customer, 5.0)),
        "",
    );
    report.figure(
        "slow_over_5s",
        "slow endpoint's requests more than 5 s after their POST",
        Some(slow_requests(&|c| c == slow_customer, 5.0)),
        "",
    );
    let last = |slow: bool| {
        seen.arrivals
            .iter()
            .filter(|a| (a.key.0 == slow_customer) == slow)
            .map(|a| a.at_s)
            .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.max(t))))
            .map(|t| round(t - seen.load_end_s))
    };
    report.figure(
        "healthy_last_after_load_s",
        "last healthy request, after the load stopped",
        last(false),
        "s",
    );
    report.figure(
        "slow_last_after_load_s",
        "last request to the slow endpoint, after the load stopped",
        last(true),
        "s",
    );
    // When the late requests were sent: a fault's victims, or something else.
    let mut late_by_second: BTreeMap<i64, usize> = BTreeMap::new();
    for a in &seen.arrivals {
        if let Some(took) = a.took_s.filter(|t| *t > 5.0) {
            *late_by_second
                .entry((a.at_s - took).floor() as i64)
                .or_default() += 1;
        }
    }
    if !late_by_second.is_empty() {
        let seconds: Vec<String> = late_by_second
            .iter()
            .map(|(s, n)| format!("{s} s: {n}"))
            .collect();
        report.note(format!(
            "requests more than 5 s after their POST, by the second the POST began: {}",
            seconds.join(", ")
        ));
    }
    posts_read(&mut report, seen, slow_customer);
    report.figure(
        "shed_slow",
        "slow endpoint: deliveries shed at a full lane, requeued after the shed delay (/metrics)",
        Some(seen.shed.0),
        "",
    );
    report.figure(
        "shed_healthy",
        "healthy endpoints: deliveries shed at a full lane, requeued after the shed delay (/metrics)",
        Some(seen.shed.1 - seen.shed.0),
        "",
    );
    report.figure(
        "attempted_more_than_once",
        "deliveries with more than one recorded attempt (store; a killed one is not recorded)",
        Some(seen.redelivered as f64),
        "",
    );
    report.figure(
        "dead",
        "dead-lettered at the end",
        Some(seen.dead as f64),
        "",
    );
    report.figure(
        "exits",
        "processes that exited by themselves",
        Some(seen.exits.len() as f64),
        "",
    );
    report.figure(
        "lane_peak",
        "slow receiver: most requests in flight at once",
        Some(seen.lane_peak as f64),
        "",
    );
    report.figure(
        "drain_s",
        "load stopped → everything delivered",
        seen.settled
            .then_some(round(seen.drained_s - seen.load_end_s)),
        "s",
    );
    report.figure(
        "slow_queue_left",
        &format!(
            "the slow endpoint's queue when the drain ended: {}",
            seen.slow_queue_left.describe()
        ),
        Some(seen.slow_queue_left.total()),
        "",
    );

    // The claims.
    report.invariant(
        lost == 0 && seen.settled,
        format!(
            "0 acknowledged messages lost: {} acknowledged, {lost} lost{}",
            seen.acks.len(),
            if seen.settled {
                ""
            } else {
                " (the drain did not finish)"
            }
        ),
    );
    let exits: Vec<String> = seen
        .exits
        .iter()
        .map(|e| format!("{} at {:.1} s ({})", e.name, e.at_s, e.status))
        .collect();
    report.invariant(
        exits.is_empty(),
        format!(
            "no process exited by itself: {}",
            if exits.is_empty() {
                "none".to_owned()
            } else {
                exits.join(", ")
            }
        ),
    );
    report.invariant(
        seen.lane_peak <= sizes.lane as usize,
        format!(
            "at most N = {} requests in flight at the slow receiver: most {}",
            sizes.lane, seen.lane_peak
        ),
    );
    let explained: Vec<String> = dup
        .explained
        .iter()
        .map(|(k, n)| format!("{n} at a {k}"))
        .collect();
    report.verdict(
        dup.unexplained == 0 && dup.other_id == 0 && wrong_id == 0,
        format!(
            "duplicates only for deliveries in flight at a dispatcher kill -9 or a database \
             freeze or restart, with the same webhook-id: {} duplicates of {} messages ({}), \
             {} unexplained, {} with another webhook-id",
            dup.requests,
            dup.messages,
            if explained.is_empty() {
                "none explained".to_owned()
            } else {
                explained.join(", ")
            },
            dup.unexplained,
            dup.other_id + wrong_id as u64
        ),
    );
    report.verdict(
        too_long.is_empty() && !readings.is_empty(),
        format!(
            "every fault's tail back to baseline within {TAIL_FACTOR}× its length: {} of {} \
             faults{}{}",
            readings.len() - too_long.len(),
            readings.len(),
            if too_long.is_empty() {
                String::new()
            } else {
                format!(
                    "; not: fault {}",
                    too_long
                        .iter()
                        .map(usize::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
            if not_back > 0 {
                format!(" ({not_back} with nothing to read)")
            } else {
                String::new()
            }
        ),
    );
    if seen.skipped > 0 {
        report.note(format!(
            "{} fault(s) of the schedule left out: the run fell behind it (restarts, drains) \
             and they would not have ended before the load",
            seen.skipped
        ));
    }
    if !seen.survivors_clean {
        report.note("a process did not exit cleanly on SIGTERM at the end of the run");
    }
    report.note(format!(
        "a fault's tail: from its end (proxy thawed or up, process or Redis back and ready) \
         until the first second from which every second until the next fault has a healthy \
         p99 enqueue→delivery (by delivery second) ≤ the threshold (a second without deliveries \
         is not back), or until the last of its stragglers arrived (healthy requests already late \
         before the next fault began and not before this one did), whichever is later. A \
         dispatcher kill -9 is judged on two heartbeats + the reap interval \
         ({} s) when longer than its down time: its claimed work comes back only once it is \
         known dead",
        KNOWN_DEAD_S + REAP_S
    ));
    report.note(format!(
        "a duplicated message is explained when its first arrival lies within {ATTEMPT_S} s \
         (the total attempt deadline) before a dispatcher kill -9 (to {EXPLAIN_AFTER_S} s after \
         it), or from {ATTEMPT_S} s before a database freeze or restart to {EXPLAIN_AFTER_S} s \
         after its end"
    ));
    if args.smoke {
        report.note("smoke: faults of a few seconds with 5 s gaps; tails are printed, not judged");
    }
    report
}

/// How often [`scrape`] reads the dispatchers' `/metrics`.
const SCRAPE_EVERY: Duration = Duration::from_secs(5);

/// Read every dispatcher's `/metrics` every [`SCRAPE_EVERY`] into `path`, one sample per line
/// (`seconds  dispatcher  series  value`; histogram buckets left out, their sums and counts
/// kept), so what a dispatcher did between faults can be read afterwards. A dispatcher that is
/// down is skipped. Runs until aborted.
async fn scrape(
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

/// How the POSTs went, to tell an ingest that failed (the latency of a message acknowledged on
/// its third POST includes the producer's back-off) from a delivery that was late: messages
/// acknowledged on their first POST, the unacknowledged POSTs by minute and cause, and the
/// healthy p50 by two-minute window read from the first POST and from the acknowledged one.
fn posts_read(report: &mut Report, seen: &Observed, slow_customer: u64) {
    let first = seen.posts.values().filter(|(tries, _)| *tries == 1).count();
    report.figure(
        "acknowledged_first_post",
        "messages acknowledged on their first POST",
        Some(first as f64),
        "",
    );
    let mut by_minute: BTreeMap<i64, BTreeMap<&str, usize>> = BTreeMap::new();
    for (at_s, why) in &seen.failures {
        *by_minute
            .entry((at_s / 60.0).floor() as i64)
            .or_default()
            .entry(why.as_str())
            .or_default() += 1;
    }
    if !by_minute.is_empty() {
        let minutes: Vec<String> = by_minute
            .iter()
            .map(|(m, kinds)| {
                let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} ×{n}")).collect();
                format!("min {m}: {}", kinds.join(" "))
            })
            .collect();
        report.note(format!(
            "POSTs not acknowledged, by the minute they began: {}",
            minutes.join("; ")
        ));
    }
    let mut windows: BTreeMap<i64, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for a in seen.arrivals.iter().filter(|a| a.key.0 != slow_customer) {
        let (Some(took), Some((_, post_s))) = (a.took_s, seen.posts.get(&a.key)) else {
            continue;
        };
        let w = windows.entry((a.at_s / 120.0).floor() as i64).or_default();
        w.0.push(took * 1e3);
        w.1.push((a.at_s - post_s) * 1e3);
    }
    let median = |v: &[f64]| percentile(v, 0.5).unwrap_or(f64::NAN);
    let read: Vec<String> = windows
        .iter()
        .map(|(w, (from_first, from_ack))| {
            format!(
                "{}–{} min {:.0}/{:.0}",
                w * 2,
                w * 2 + 2,
                median(from_first),
                median(from_ack)
            )
        })
        .collect();
    report.note(format!(
        "healthy p50 POST→delivery by two-minute window, from the first POST / from the \
         acknowledged POST (ms): {}",
        read.join(", ")
    ));
}

/// The series and the chart.
fn chart(
    args: &BenchArgs,
    report: &mut Report,
    timeline: &Timeline,
    seen: &Observed,
) -> anyhow::Result<()> {
    let p99 = timeline.quantile_series(HEALTHY, 0.99);
    let p50 = timeline.quantile_series(HEALTHY, 0.5);
    let slow_p99 = timeline.quantile_series(SLOW, 0.99);
    let faults: Vec<(f64, f64)> = seen
        .done
        .iter()
        .flat_map(|f| {
            [
                (f.start_s, 0.0),
                (f.start_s, 1.0),
                (f.end_s, 1.0),
                (f.end_s, 0.0),
            ]
        })
        .collect();
    report.series("healthy_p50_ms", p50.clone());
    report.series("healthy_p99_ms", p99.clone());
    report.series("slow_p99_ms", slow_p99.clone());
    report.series("fault_active", faults.clone());
    let panels = [
        Panel::log(
            "enqueue → delivery, by delivery second",
            "ms",
            vec![
                Line::new("healthy p50", p50),
                Line::new("healthy p99", p99),
                Line::new("slow p99", slow_p99),
            ],
        ),
        Panel::linear(
            "faults (1 while one is active)",
            "",
            vec![Line::new("fault", faults)],
        ),
    ];
    save_chart(
        args,
        report,
        &format!(
            "soak: {} faults over {:.0} s of load",
            seen.done.len(),
            seen.schedule.load_s
        ),
        &panels,
    )
}

fn round(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        assert_eq!(
            Schedule::new(7, 1800.0, false),
            Schedule::new(7, 1800.0, false)
        );
        assert_eq!(Schedule::new(7, 0.0, true), Schedule::new(7, 0.0, true));
        assert_ne!(
            Schedule::new(7, 1800.0, false),
            Schedule::new(8, 1800.0, false)
        );
    }

    #[test]
    fn faults_do_not_overlap_and_fit_the_load() {
        for seed in 0..20 {
            for (duration, smoke) in [(1800.0, false), (300.0, false), (0.0, true)] {
                let s = Schedule::new(seed, duration, smoke);
                assert!(!s.faults.is_empty());
                assert!(s.faults[0].at_s >= s.warmup_s);
                for w in s.faults.windows(2) {
                    assert!(w[0].over_s() <= w[1].at_s + 1e-9, "{w:?}");
                }
                let last = s.faults.last().unwrap();
                assert!(last.over_s() <= s.load_s + 1e-9);
                for f in &s.faults {
                    let (low, high) = f.kind.hold_range(smoke);
                    assert!(f.hold_s >= low - 0.05 && f.hold_s <= high + 0.05, "{f:?}");
                    assert!(f.target < DISPATCHERS);
                    // The gap leaves room for a tail of twice the fault's judged length.
                    if !smoke {
                        assert!(f.gap_s >= TAIL_FACTOR * f.kind.judged_length(f.hold_s));
                    }
                }
            }
        }
    }

    #[test]
    fn smoke_has_every_kind_once_and_is_short() {
        for seed in 0..20 {
            let s = Schedule::new(seed, 1800.0, true);
            let kinds: HashSet<Kind> = s.faults.iter().map(|f| f.kind).collect();
            assert_eq!(kinds.len(), Kind::ALL.len());
            assert_eq!(s.faults.len(), Kind::ALL.len());
            assert!(s.load_s >= 40.0 && s.load_s <= 60.0, "{}", s.load_s);
        }
    }

    #[test]
    fn a_full_run_has_every_kind() {
        let s = Schedule::new(DEFAULT_SEED, DEFAULT_DURATION_S, false);
        let kinds: HashSet<Kind> = s.faults.iter().map(|f| f.kind).collect();
        assert_eq!(kinds.len(), Kind::ALL.len());
    }

    #[test]
    fn tail_is_from_the_end_to_the_last_bad_second() {
        let p = |v: &[f64]| -> Vec<Option<f64>> {
            v.iter().map(|&x| (x >= 0.0).then_some(x)).collect()
        };
        let window = |start_s, end_s, until_s| Done {
            until_s,
            ..done(Kind::DbFreeze, start_s, end_s)
        };
        // Seconds 10–12 bad, back from 13 on: ended at 10.5, tail 2.5 s.
        let series = p(&[50.0; 10]
            .iter()
            .chain(&[900.0, 800.0, 400.0, 60.0, 40.0, 50.0, 45.0])
            .copied()
            .collect::<Vec<_>>());
        assert_eq!(
            tail(&series, &[], &window(8.0, 10.5, 17.0), 250.0),
            Some(2.5)
        );
        // Already back in the second it ended: 0.
        assert_eq!(
            tail(&series, &[], &window(8.0, 13.2, 17.0), 250.0),
            Some(0.0)
        );
        // A bad second later (a kill's leases coming back) moves the end past it.
        let series = p(&[50.0, 50.0, 50.0, 3000.0, 50.0, 50.0]);
        assert_eq!(tail(&series, &[], &window(0.0, 1.0, 6.0), 250.0), Some(3.0));
        // A second without deliveries is not back; still bad at the next fault: up to it.
        let series = p(&[50.0, -1.0, 50.0, 900.0]);
        assert_eq!(tail(&series, &[], &window(0.0, 0.5, 4.0), 250.0), Some(3.5));
        assert_eq!(tail(&series, &[], &window(0.0, 0.5, 3.0), 250.0), Some(1.5));
        // No second to read and no straggler.
        assert_eq!(tail(&series, &[], &window(3.0, 3.5, 3.9), 250.0), None);
    }

    #[test]
    fn a_fault_owns_the_stragglers_it_made_late() {
        let series: Vec<Option<f64>> = vec![Some(50.0); 40];
        let f = Done {
            until_s: 20.0,
            ..done(Kind::DbRestart, 4.0, 6.0)
        };
        // POSTed during the fault, shed and requeued: arrives at 30 s, past the next fault's
        // start; the tail runs to it.
        assert_eq!(tail(&series, &[(5.0, 30.0)], &f, 250.0), Some(24.0));
        // POSTed just before the next fault (on time had it not begun): that fault's.
        assert_eq!(tail(&series, &[(19.9, 35.0)], &f, 250.0), Some(0.0));
        // Already late before this fault began: the previous one's.
        assert_eq!(tail(&series, &[(3.0, 12.0)], &f, 250.0), Some(0.0));
        // Late requests of the right window only.
        let arrivals = [
            Arrival {
                took_s: Some(9.0),
                ..arrival(0, 0, "a", 14.0)
            },
            Arrival {
                took_s: Some(0.01),
                ..arrival(0, 1, "b", 14.0)
            },
            Arrival {
                took_s: Some(9.0),
                ..arrival(7, 2, "c", 14.0)
            },
        ];
        assert_eq!(
            late_requests(&arrivals, |c| c != 7, 250.0),
            vec![(5.0, 14.0)]
        );
    }

    fn arrival(c: u64, seq: u64, id: &str, at_s: f64) -> Arrival {
        Arrival {
            key: (c, seq),
            webhook_id: id.into(),
            at_s,
            took_s: None,
        }
    }

    fn done(kind: Kind, start_s: f64, end_s: f64) -> Done {
        Done {
            kind,
            target: 0,
            start_s,
            end_s,
            until_s: end_s + 30.0,
            drain: None,
        }
    }

    #[test]
    fn duplicates_are_explained_by_kills_and_database_faults_only() {
        let faults = [
            done(Kind::DispatcherKill, 100.0, 103.0),
            done(Kind::DbRestart, 200.0, 205.0),
            done(Kind::ApiKill, 300.0, 302.0),
            done(Kind::DbFreeze, 400.0, 410.0),
        ];
        let seen = [
            // Once: not a duplicate.
            arrival(0, 0, "a", 1.0),
            // In flight 2 s before the kill, again when its lease expired.
            arrival(0, 1, "b", 98.0),
            arrival(0, 1, "b", 125.0),
            // Its first arrival after the kill (+1 s): not the kill's.
            arrival(0, 2, "c", 102.5),
            arrival(0, 2, "c", 126.0),
            // During the database restart, twice more.
            arrival(0, 3, "d", 203.0),
            arrival(0, 3, "d", 226.0),
            arrival(0, 3, "d", 250.0),
            // At the API kill: nothing explains it.
            arrival(0, 4, "e", 299.0),
            arrival(0, 4, "e", 301.0),
            // Within the attempt deadline before a freeze, under another webhook-id.
            arrival(0, 5, "f", 390.0),
            arrival(0, 5, "g", 420.0),
        ];
        let d = duplicates(&seen, &faults);
        assert_eq!(d.requests, 6);
        assert_eq!(d.messages, 5);
        assert_eq!(d.unexplained, 2);
        assert_eq!(d.other_id, 1);
        assert_eq!(
            d.explained,
            BTreeMap::from([("db-freeze", 1), ("db-restart", 1), ("dispatcher-kill", 1)])
        );
        assert_eq!(d.explained_total(), 3);
    }

    #[test]
    fn sums_the_shed_counter() {
        let text = "# HELP webhook_deliveries_shed_total Deliveries shed\n\
                    # TYPE webhook_deliveries_shed_total counter\n\
                    webhook_deliveries_shed_total{endpoint=\"ep_a\"} 3\n\
                    webhook_deliveries_shed_total{endpoint=\"ep_b\"} 4\n\
                    webhook_deliveries_total 99\n";
        assert_eq!(shed_in(text, "ep_a"), (3.0, 7.0));
        assert_eq!(shed_in(text, "ep_c"), (0.0, 7.0));
        assert_eq!(shed_in("", "ep_a"), (0.0, 0.0));
    }

    #[test]
    fn a_kill_is_judged_on_the_lease() {
        assert_eq!(
            Kind::DispatcherKill.judged_length(3.0),
            KNOWN_DEAD_S + REAP_S
        );
        assert_eq!(Kind::DbFreeze.judged_length(8.0), 8.0);
        assert_eq!(Kind::RedisKill.explains(1.0, 2.0), None);
    }
}
