//! One phase of a mixed scenario: healthy customers (one tenant and one fast endpoint each,
//! open-loop traffic) next to at most one bad customer (slow, dead, throttling or flooding),
//! on a fresh sluice. Slow-consumer, dead-endpoint, throttled and flood run it with and without
//! the bad customer and compare.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use anyhow::Context;

use super::BenchArgs;
use super::backlog;
use super::harness::Tuning;
use super::load::Api;
use super::receiver::{self, Mode};
use super::stage::Stage;
use super::store_cpu::StoreCpu;
use super::sys;
use super::timeline::Timeline;
use super::watch::{self, Series, Watch};
use sluice_testkit::receiver::Receiver;

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
    /// Answers 429 + Retry-After above `capacity` concurrent requests.
    Capped {
        /// Concurrent requests it serves at first.
        capacity: usize,
        /// After this long, it serves only this many at once (its capacity drops).
        drop_to: Option<(Duration, usize)>,
        /// Time to serve one.
        service: Duration,
        /// Seconds in Retry-After.
        retry_after_s: u64,
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
    let phase = run_on(args, spec, &stage).await;
    stage.stop().await;
    phase
}

async fn run_on(args: &BenchArgs, spec: &PhaseSpec, stage: &Stage) -> anyhow::Result<Phase> {
    let timeline = Arc::new(Timeline::new(&["healthy", spec.bad_name]));
    let sluice = &stage.sluice;
    let mut receivers = Vec::with_capacity(spec.healthy);
    let mut healthy = Vec::with_capacity(spec.healthy);
    for i in 0..spec.healthy {
        let r = receiver::start(Mode::Fast, timeline.clone(), HEALTHY).await?;
        healthy.push(
            sluice
                .customer(&format!("healthy-{i}"), &r.url(), None)
                .await?,
        );
        receivers.push(r);
    }
    let bad_receiver = match spec.bad {
        Bad::None => None,
        Bad::Slow { delay, .. } => Some(Mode::Slow(delay)),
        Bad::Blackhole { .. } => Some(Mode::Blackhole),
        Bad::Capped {
            capacity,
            service,
            retry_after_s,
            ..
        } => Some(Mode::Capped {
            capacity,
            service,
            retry_after_s,
        }),
        Bad::Flood { service, .. } => Some(Mode::Slow(service)),
        Bad::Backlog { .. } | Bad::RateLimited { .. } | Bad::Fifo { .. } => Some(Mode::Fast),
    };
    let bad_receiver: Option<Receiver> = match bad_receiver {
        Some(mode) => Some(receiver::start(mode, timeline.clone(), BAD).await?),
        None => None,
    };
    let lane = match spec.bad {
        Bad::Capped { lane, .. } => Some(lane),
        _ => None,
    };
    let mut backlog_setup_s = None;
    // FIFO phases: the tenant's id, and each further endpoint with its own receiver.
    let mut fifo: Option<(String, Vec<String>)> = None;
    let mut fifo_receivers: Vec<Receiver> = Vec::new();
    let bad = match (&bad_receiver, spec.bad) {
        (
            Some(r),
            Bad::Fifo {
                endpoints, ordered, ..
            },
        ) => {
            let (tenant, token) = sluice.tenant_with_id(spec.bad_name).await?;
            let mut ids = Vec::with_capacity(endpoints);
            for i in 0..endpoints.max(1) {
                let url = if i == 0 {
                    r.url()
                } else {
                    let extra = receiver::start(Mode::Fast, timeline.clone(), BAD).await?;
                    let url = extra.url();
                    fifo_receivers.push(extra);
                    url
                };
                let ordering = if ordered { "fifo" } else { "unordered" };
                let body = serde_json::json!({ "url": url, "ordering": ordering });
                ids.push(sluice.endpoint_with(&token, body).await?);
            }
            let first = ids[0].clone();
            fifo = Some((tenant, ids));
            Some((token, first))
        }
        (
            Some(r),
            Bad::Backlog {
                deliveries,
                endpoints,
            },
        ) => {
            let store = sluice
                .store()
                .context("a backlog needs the sluice in this process (not --target)")?;
            let b = backlog::fill(&store, &r.url(), deliveries, endpoints, &timeline, BAD).await?;
            backlog_setup_s = Some(b.setup_s);
            Some((String::new(), b.first_endpoint))
        }
        (
            Some(r),
            Bad::RateLimited {
                per_second, burst, ..
            },
        ) => {
            let token = sluice.tenant(spec.bad_name).await?;
            let body = serde_json::json!({
                "url": r.url(),
                "rate_limit": { "per_second": per_second, "burst": burst },
            });
            let id = sluice.endpoint_with(&token, body).await?;
            Some((token, id))
        }
        (Some(r), _) => Some(sluice.customer(spec.bad_name, &r.url(), lane).await?),
        (None, _) => None,
    };

    let mut watched = vec![("healthy".to_owned(), healthy[0].1.clone())];
    if let Some((_, id)) = &bad {
        watched.push(("bad".to_owned(), id.clone()));
    }
    let seconds = spec.duration.as_secs_f64();
    let pb = watch::progress(args.json, spec.label, seconds);
    let store_cpu = StoreCpu::locate(stage.database_url(), sluice.embedded()).await;
    let postgres = store_cpu.is_postgres();
    let mut watch =
        Watch::new(sluice.probe(), watched, timeline.clone(), pb).with_store_cpu(store_cpu.clone());
    if matches!(spec.bad, Bad::Backlog { .. } | Bad::Fifo { .. }) {
        watch = watch.with_claims();
    }
    let api = Api {
        http: sluice.http.clone(),
        url: sluice.messages_url().into(),
        timeline: timeline.clone(),
        event_types: None,
    };

    timeline.restart();
    let store_cpu0 = store_cpu.seconds();
    let until = Instant::now() + spec.duration;
    let mut producers: Vec<_> = healthy
        .iter()
        .map(|(token, _)| api.open_loop(token.clone(), HEALTHY, spec.healthy_rate, until))
        .collect();
    if let Some((token, _)) = &bad {
        producers.push(match spec.bad {
            Bad::Slow { rate, .. }
            | Bad::Blackhole { rate }
            | Bad::Capped { rate, .. }
            | Bad::RateLimited { rate, .. }
            | Bad::Fifo { rate, .. } => api.open_loop(token.clone(), BAD, rate, until),
            Bad::Flood {
                backlog, producers, ..
            } => api.closed_loop(vec![token.clone()], BAD, producers, until, Some(backlog)),
            // Already in the store.
            Bad::Backlog { .. } => tokio::spawn(async {}),
            Bad::None => unreachable!("no bad customer has no token"),
        });
    }
    if let (
        Bad::Capped {
            drop_to: Some((after, capacity)),
            ..
        },
        Some(r),
    ) = (spec.bad, &bad_receiver)
    {
        watch
            .until((until - spec.duration + after).min(until))
            .await;
        r.set_capacity(capacity);
    }
    watch.until(until).await;
    let store_cpu_s = store_cpu.seconds().zip(store_cpu0).map(|(b, a)| b - a);
    for p in producers {
        let _ = tokio::time::timeout(Duration::from_secs(30), p).await;
    }
    // Let the healthy messages already accepted arrive, so late ones are not left out.
    let drain = Instant::now() + spec.duration.min(Duration::from_secs(10));
    watch
        .until_done(drain, |t| t.delivered_total(HEALTHY) >= t.accepted(HEALTHY))
        .await;
    let claim_samples = std::mem::take(&mut watch.claim_samples);
    let series = watch.finish();
    let healthy_undelivered = timeline
        .accepted(HEALTHY)
        .saturating_sub(timeline.delivered_total(HEALTHY));
    let bad_peak_concurrency = bad_receiver
        .iter()
        .chain(&fifo_receivers)
        .map(|r| r.record.peak_concurrency())
        .max();
    let fifo_order = match (&fifo, spec.bad) {
        (Some((tenant, ids)), Bad::Fifo { ordered: true, .. }) => {
            Some(fifo_order(stage, tenant, ids).await?)
        }
        _ => None,
    };
    drop(fifo_receivers);
    drop(receivers);
    drop(bad_receiver);
    Ok(Phase {
        timeline,
        series,
        duration_s: seconds,
        warmup_s: if seconds >= 10.0 { 2 } else { 0 },
        healthy_undelivered,
        peak_rss_mib: sys::peak_rss_mib(),
        bad_peak_concurrency,
        store_cpu_s,
        postgres,
        claim_samples,
        backlog_setup_s,
        fifo_order,
    })
}

/// Read the FIFO endpoints' attempts back from the store (this process's, or the fleet's
/// PostgreSQL) and count those out of order: started before the attempt ahead had ended, or for
/// a delivery accepted after one attempted later.
async fn fifo_order(
    stage: &Stage,
    tenant: &str,
    endpoints: &[String],
) -> anyhow::Result<FifoOrder> {
    let store: sluice::store::SharedStore = match (stage.sluice.store(), stage.database_url()) {
        (Some(store), _) => store,
        (None, Some(url)) => std::sync::Arc::new(
            sluice::store::postgres::PostgresStore::connect(url)
                .await
                .context("the fleet's database")?,
        ),
        (None, None) => anyhow::bail!("no store to read the FIFO endpoints' attempts from"),
    };
    let mut out = FifoOrder::default();
    for id in endpoints {
        let mut attempts = Vec::new();
        let mut before = None;
        loop {
            let page = store
                .endpoint_attempts(tenant, id, 0, before, 10_000)
                .await
                .context("reading attempts")?;
            let Some(last) = page.last() else { break };
            before = Some(last.id);
            attempts.extend(page);
        }
        attempts.sort_by_key(|a| (a.started_at_ms, a.id));
        out.attempts += attempts.len() as u64;
        for pair in attempts.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            let overlapped = b.started_at_ms < a.started_at_ms + i64::from(a.duration_ms);
            if b.delivery_id < a.delivery_id || (overlapped && b.delivery_id != a.delivery_id) {
                out.violations += 1;
            }
        }
    }
    Ok(out)
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
