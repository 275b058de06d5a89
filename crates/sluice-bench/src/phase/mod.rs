//! One phase of a mixed scenario: healthy customers (one tenant and one fast endpoint each,
//! open-loop traffic) next to at most one bad customer (slow, dead, throttling or flooding),
//! on a fresh sluice. Slow-consumer, dead-endpoint, throttled and flood run it with and without
//! the bad customer and compare.
//!
//! # Layout
//! - this file: what a phase is asked to run and what it measured, and its readings;
//! - [`run`](mod@run): the phase driven on its stage, and the FIFO order read back.

mod run;

use std::sync::Arc;
use std::time::Duration;

use super::BenchArgs;
use super::cloud_sink::Service;
use super::harness::Tuning;
use super::stage::Stage;
use super::timeline::Timeline;
use super::watch::{self, Series};

/// Timeline group of the healthy customers.
pub(crate) const HEALTHY: usize = 0;
/// Timeline group of the bad customer.
pub(crate) const BAD: usize = 1;

/// The bad customer of a phase.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Bad {
    /// None: the baseline.
    None,
    /// Answers 200 after `delay`, sent `rate` events/s.
    Slow {
        /// Response time.
        delay: Duration,
        /// Offered events/s.
        rate: f64,
    },
    /// Accepts connections and never answers, sent `rate` events/s.
    Blackhole {
        /// Offered events/s.
        rate: f64,
    },
    /// A RabbitMQ destination (a durable queue of its own) whose broker blocks publishers for
    /// the whole load (its memory alarm raised), sent `rate` events/s.
    BlockedBroker {
        /// Offered events/s.
        rate: f64,
    },
    /// Serves `capacity` concurrent requests and refuses the rest as `throttling` says.
    Capped {
        /// Concurrent requests it serves at first.
        capacity: usize,
        /// After this long, it serves only this many at once (its capacity drops).
        drop_to: Option<(Duration, usize)>,
        /// Time to serve one.
        service: Duration,
        /// How it refuses a request beyond its capacity.
        throttling: Throttling,
        /// Offered events/s.
        rate: f64,
        /// Lane override, so the governor (not the lane) is what binds.
        lane: u32,
    },
    /// Enqueues `backlog` events as fast as `producers` POSTs allow; its endpoint answers after
    /// `service`, so the backlog outgrows what its lane drains and waits in the store.
    Flood {
        /// Events to enqueue.
        backlog: u64,
        /// Concurrent producers.
        producers: usize,
        /// Response time of the noisy tenant's endpoint.
        service: Duration,
    },
    /// A fast endpoint with a rate limit of `per_second` (bursts of `burst`), sent `rate`
    /// events/s: what it receives is the limit, and the rest wait their turn in the store.
    RateLimited {
        /// The endpoint's `rate_limit.per_second`.
        per_second: f64,
        /// Its `rate_limit.burst`.
        burst: u32,
        /// Offered events/s.
        rate: f64,
    },
    /// `endpoints` FIFO endpoints of one tenant, each on a fast receiver of its own, every
    /// message sent (at `rate` messages/s) to all of them: each goes one delivery at a time, in
    /// acceptance order.
    Fifo {
        /// FIFO endpoints.
        endpoints: usize,
        /// `false`: the same endpoints left unordered (the control).
        ordered: bool,
        /// Offered messages/s (each reaches every FIFO endpoint).
        rate: f64,
    },
    /// `deliveries` ready deliveries already in the store when the load starts, spread over
    /// `endpoints` endpoints of one tenant, all answering at once: drained beside the others.
    Backlog {
        /// Ready deliveries.
        deliveries: u64,
        /// Endpoints they are spread over.
        endpoints: usize,
    },
}

/// How a capped endpoint refuses what it cannot take.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Throttling {
    /// An HTTP receiver's 429 with `Retry-After: retry_after_s`.
    TooManyRequests {
        /// Seconds in Retry-After.
        retry_after_s: u64,
    },
    /// A cloud destination whose service (the cloud sink) answers its throttling error, with
    /// no Retry-After.
    Service(Service),
}

/// What to run.
#[derive(Debug, Clone)]
pub(crate) struct PhaseSpec {
    /// Progress bar label.
    pub label: &'static str,
    /// Name of the bad customer's timeline group.
    pub bad_name: &'static str,
    /// Healthy customers.
    pub healthy: usize,
    /// Events/s each healthy customer sends.
    pub healthy_rate: f64,
    /// The bad customer.
    pub bad: Bad,
    /// How long the load runs.
    pub duration: Duration,
    /// Settings of the embedded sluice.
    pub tuning: Tuning,
}

/// What a phase measured.
pub(crate) struct Phase {
    /// Receiver-side record, groups [`HEALTHY`] and [`BAD`].
    pub timeline: Arc<Timeline>,
    /// Dispatcher and memory samples (`bad.*` for the bad endpoint, `healthy.*` for one healthy).
    pub series: Series,
    /// Length of the load, seconds.
    pub duration_s: f64,
    /// Seconds skipped at the start of latency summaries.
    pub warmup_s: usize,
    /// Healthy messages accepted but not delivered when the phase ended.
    pub healthy_undelivered: u64,
    /// Peak RSS of this process at the end of the phase, MiB.
    pub peak_rss_mib: Option<f64>,
    /// Most requests the bad receiver had in flight at once.
    pub bad_peak_concurrency: Option<usize>,
    /// The store's CPU seconds during the load (PostgreSQL: the server's processes; SQLite:
    /// the driver's threads).
    pub store_cpu_s: Option<f64>,
    /// Is the store PostgreSQL?
    pub postgres: bool,
    /// The claim-time histogram once a second (backlog phases).
    pub claim_samples: Vec<(f64, sluice::plan::prom::HistogramSnapshot)>,
    /// Seconds the backlog took to write (backlog phases).
    pub backlog_setup_s: Option<f64>,
    /// FIFO phases: the order the store recorded the FIFO endpoints' attempts in.
    pub fifo_order: Option<FifoOrder>,
    /// Deliveries to the bad customer when the load ended (before any drain): for a blocked
    /// broker, what got through while it blocked publishers.
    pub bad_delivered_during_load: u64,
}

/// The FIFO endpoints' attempts, read back from the store after the load.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FifoOrder {
    /// Attempts read.
    pub attempts: u64,
    /// Attempts that started before the one ahead of them had ended, or whose delivery came
    /// after a later-accepted one's (a repeat of the same delivery is neither).
    pub violations: u64,
}

/// Run one phase on a fresh sluice ([`Stage`]): in this process, on PostgreSQL in a fresh
/// database beside the one `--database-url` names (dropped afterwards) so no phase starts with
/// another's rows, or with `--dispatchers N` on a fleet of processes.
pub(crate) async fn run(args: &BenchArgs, spec: &PhaseSpec) -> anyhow::Result<Phase> {
    let stage = Stage::start(args, &spec.tuning).await?;
    let phase = run::run_on(args, spec, &stage).await;
    stage.stop().await;
    phase
}

impl Phase {
    /// Healthy latency quantile `q` after warm-up, ms.
    pub(crate) fn healthy_ms(&self, q: f64) -> Option<f64> {
        self.timeline
            .latency_from(HEALTHY, self.warmup_s)
            .quantile(q)
            .map(super::timeline::ms)
    }

    /// Healthy deliveries per second over the load.
    pub(crate) fn healthy_rate(&self) -> f64 {
        let secs = self.duration_s.ceil() as usize;
        self.timeline.delivered_between(HEALTHY, 0, secs) as f64 / self.duration_s
    }

    /// The store's CPU per healthy delivery over the load, ms.
    pub(crate) fn store_ms_per_healthy(&self) -> Option<f64> {
        let secs = self.duration_s.ceil() as usize;
        let n = self.timeline.delivered_between(HEALTHY, 0, secs);
        self.store_cpu_s
            .filter(|_| n > 0)
            .map(|c| c * 1000.0 / n as f64)
    }

    /// The store's CPU per healthy delivery between `from` and `to` seconds of the load, ms
    /// (drift over a long run).
    pub(crate) fn store_ms_per_healthy_between(&self, from: usize, to: usize) -> Option<f64> {
        let n = self.timeline.delivered_between(HEALTHY, from, to);
        let cpu = watch::increase(&self.series, "store_cpu_s", from as f64, to as f64)?;
        (n > 0).then(|| cpu * 1000.0 / n as f64)
    }

    /// The rate at which the bad endpoint was shed, per second of load.
    pub(crate) fn bad_shed_rate(&self) -> Option<f64> {
        watch::last(&self.series, "bad.shed_total").map(|n| n / self.duration_s)
    }
}

/// A baseline and a phase with one bad customer beside the healthy ones, on a small pool
/// (`--concurrency 16` by default) so the bad one could exhaust it if its lane did not hold
/// it: 20 healthy endpoints at 20 events/s each, the bad one at 50 events/s, 30 s each.
pub(crate) struct SmallPool {
    pub healthy: usize,
    pub healthy_rate: f64,
    pub bad_rate: f64,
    pub concurrency: u32,
    pub duration: Duration,
    pub base: Phase,
    pub with: Phase,
}

impl SmallPool {
    /// Run the baseline, then the phase with `bad(rate)` named `bad_name`.
    pub(crate) async fn run(
        args: &BenchArgs,
        bad_name: &'static str,
        label: &'static str,
        bad: impl FnOnce(f64) -> Bad,
    ) -> anyhow::Result<SmallPool> {
        let healthy = args.endpoints.unwrap_or(args.sized(20, 4));
        let healthy_rate = args.rate.unwrap_or(args.sized(20.0, 10.0));
        let bad_rate = args.bad_rate.unwrap_or(args.sized(50.0, 20.0));
        let concurrency = args.concurrency.unwrap_or(16);
        let duration = args.duration(30.0);
        let spec = |label, bad| PhaseSpec {
            label,
            bad_name,
            healthy,
            healthy_rate,
            bad,
            duration,
            tuning: Tuning {
                concurrency: Some(concurrency),
                ..Default::default()
            },
        };
        let base = run(args, &spec("baseline", Bad::None)).await?;
        let with = run(args, &spec(label, bad(bad_rate))).await?;
        Ok(SmallPool {
            healthy,
            healthy_rate,
            bad_rate,
            concurrency,
            duration,
            base,
            with,
        })
    }

    /// The report's parameters: the phases' length, the healthy load, the bad one's, the pool.
    pub(crate) fn params(&self, report: &mut crate::report::Report, bad: &str) {
        report.param("duration_s", self.duration.as_secs_f64());
        report.param("healthy_endpoints", self.healthy);
        report.param("healthy_rate_per_endpoint", self.healthy_rate);
        report.param(&format!("{bad}_offered_per_s"), self.bad_rate);
        report.param("concurrency", self.concurrency);
    }
}
