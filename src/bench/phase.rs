//! One phase of a mixed scenario: healthy customers (one tenant and one fast endpoint each,
//! open-loop traffic) next to at most one bad customer (slow, dead, throttling or flooding),
//! on a fresh sluice. Slow-consumer, dead-endpoint, throttled and flood run it with and without
//! the bad customer and compare.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::BenchArgs;
use super::harness::{Sluice, Tuning};
use super::load::Api;
use super::receiver::{self, BenchReceiver, Mode};
use super::sys;
use super::timeline::Timeline;
use super::watch::{self, Series, Watch};
use crate::receivers::{Behavior, Receiver};

/// Timeline group of the healthy customers.
pub const HEALTHY: usize = 0;
/// Timeline group of the bad customer.
pub const BAD: usize = 1;

/// The bad customer of a phase.
#[derive(Debug, Clone, Copy)]
pub enum Bad {
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
}

/// What to run.
#[derive(Debug, Clone)]
pub struct PhaseSpec {
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
pub struct Phase {
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
}

enum BadReceiver {
    Bench(BenchReceiver),
    Blackhole(Receiver),
}

impl BadReceiver {
    fn url(&self) -> String {
        match self {
            BadReceiver::Bench(r) => r.url(),
            BadReceiver::Blackhole(r) => r.url(),
        }
    }
    fn peak(&self) -> usize {
        match self {
            BadReceiver::Bench(r) => r.peak_concurrency(),
            BadReceiver::Blackhole(r) => r.record.peak_concurrency(),
        }
    }
}

/// Run one phase on a fresh sluice.
pub async fn run(args: &BenchArgs, spec: &PhaseSpec) -> anyhow::Result<Phase> {
    let timeline = Arc::new(Timeline::new(&["healthy", spec.bad_name]));
    let sluice = Sluice::start(args, &spec.tuning).await?;
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
        Bad::Slow { delay, .. } => Some(BadReceiver::Bench(
            receiver::start(Mode::Slow(delay), timeline.clone(), BAD).await?,
        )),
        Bad::Blackhole { .. } => Some(BadReceiver::Blackhole(
            crate::receivers::start(Behavior::Blackhole, false).await?,
        )),
        Bad::Capped {
            capacity,
            service,
            retry_after_s,
            ..
        } => Some(BadReceiver::Bench(
            receiver::start(
                Mode::Capped {
                    capacity,
                    service,
                    retry_after_s,
                },
                timeline.clone(),
                BAD,
            )
            .await?,
        )),
        Bad::Flood { service, .. } => Some(BadReceiver::Bench(
            receiver::start(Mode::Slow(service), timeline.clone(), BAD).await?,
        )),
    };
    let lane = match spec.bad {
        Bad::Capped { lane, .. } => Some(lane),
        _ => None,
    };
    let bad = match &bad_receiver {
        Some(r) => Some(sluice.customer(spec.bad_name, &r.url(), lane).await?),
        None => None,
    };

    let mut watched = vec![("healthy".to_owned(), healthy[0].1.clone())];
    if let Some((_, id)) = &bad {
        watched.push(("bad".to_owned(), id.clone()));
    }
    let seconds = spec.duration.as_secs_f64();
    let pb = watch::progress(args.json, spec.label, seconds);
    let mut watch = Watch::new(sluice.probe(), watched, timeline.clone(), pb);
    let api = Api {
        http: sluice.http.clone(),
        url: sluice.messages_url().into(),
        timeline: timeline.clone(),
    };

    timeline.restart();
    let until = Instant::now() + spec.duration;
    let mut producers: Vec<_> = healthy
        .iter()
        .map(|(token, _)| api.open_loop(token.clone(), HEALTHY, spec.healthy_rate, until))
        .collect();
    if let Some((token, _)) = &bad {
        producers.push(match spec.bad {
            Bad::Slow { rate, .. } | Bad::Blackhole { rate } | Bad::Capped { rate, .. } => {
                api.open_loop(token.clone(), BAD, rate, until)
            }
            Bad::Flood {
                backlog, producers, ..
            } => api.closed_loop(vec![token.clone()], BAD, producers, until, Some(backlog)),
            Bad::None => unreachable!("no bad customer has no token"),
        });
    }
    if let (
        Bad::Capped {
            drop_to: Some((after, capacity)),
            ..
        },
        Some(BadReceiver::Bench(r)),
    ) = (spec.bad, &bad_receiver)
    {
        watch
            .until((until - spec.duration + after).min(until))
            .await;
        r.set_capacity(capacity);
    }
    watch.until(until).await;
    for p in producers {
        let _ = tokio::time::timeout(Duration::from_secs(30), p).await;
    }
    // Let the healthy messages already accepted arrive, so late ones are not left out.
    let drain = Instant::now() + spec.duration.min(Duration::from_secs(10));
    watch
        .until_done(drain, |t| t.delivered_total(HEALTHY) >= t.accepted(HEALTHY))
        .await;
    let series = watch.finish();
    let healthy_undelivered = timeline
        .accepted(HEALTHY)
        .saturating_sub(timeline.delivered_total(HEALTHY));
    let bad_peak_concurrency = bad_receiver.as_ref().map(BadReceiver::peak);
    sluice.stop().await;
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
    })
}

impl Phase {
    /// Healthy latency quantile `q` after warm-up, ms.
    pub fn healthy_ms(&self, q: f64) -> Option<f64> {
        self.timeline
            .latency_from(HEALTHY, self.warmup_s)
            .quantile(q)
            .map(super::timeline::ms)
    }

    /// Healthy deliveries per second over the load.
    pub fn healthy_rate(&self) -> f64 {
        let secs = self.duration_s.ceil() as usize;
        self.timeline.delivered_between(HEALTHY, 0, secs) as f64 / self.duration_s
    }

    /// The rate at which the bad endpoint was shed, per second of load.
    pub fn bad_shed_rate(&self) -> Option<f64> {
        watch::last(&self.series, "bad.shed_total").map(|n| n / self.duration_s)
    }
}
