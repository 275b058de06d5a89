//! `tenants`: one tenant's backlog beside the others. A **busy** tenant fans 100 messages out
//! to its 2,000 endpoints, which answer correctly in 200 ms (200,000 ready deliveries), while a
//! **quiet** tenant sends 20 messages a second to its 10 fast endpoints (200 deliveries a second).
//! Each phase runs on a fresh sluice (and a fresh database on PostgreSQL; with
//! `--dispatchers N`, on a fleet of one API process and N dispatcher processes):
//!
//! 1. `quiet alone`: the quiet tenant's enqueue→delivery latency with nothing else going on;
//! 2. `beside backlog`: the same load beside the busy tenant's backlog: its latency must stay
//!    within twice its latency alone, and every one of its deliveries must be made;
//! 3. `busy alone`: the backlog drained alone, the rate the pool gives it: beside the quiet
//!    tenant it must keep at least 90 % of it (fair shares are work-conserving);
//! 4. `weights`: three tenants of weights 1, 2 and 4, each with a backlog over 100 endpoints
//!    answering in 50 ms (lanes of 16, so the pool, not the lanes, is what they share; backlogs
//!    of 40,000, 80,000 and 160,000, so none runs dry): their deliveries must split 1/7, 2/7,
//!    4/7 (within 10 %);
//! 5. `trickle`: one message a second from a third tenant beside the backlog: its latency.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures_util::{StreamExt, TryStreamExt};
use sluice::plan::prom::HistogramSnapshot;
use tokio::time::Instant;

use super::chart::{Line, Panel};
use super::harness::{Sluice, Tuning};
use super::load::Api;
use super::receiver::{self, Mode};
use super::report::{Report, ratio};
use super::stage::Stage;
use super::timeline::{Timeline, ms};
use super::{BenchArgs, save_chart, watch};

/// Timeline groups.
const QUIET: usize = 0;
const BUSY: usize = 1;
const TRICKLE: usize = 2;
/// The weighted tenants' groups, weights 1, 2 and 4.
const WEIGHTED: [(usize, u32); 3] = [(3, 1), (4, 2), (5, 4)];
const GROUPS: [&str; 6] = [
    "quiet", "busy", "trickle", "weight-1", "weight-2", "weight-4",
];

/// Most API calls of the set-up in flight at once.
const SETUP_CONCURRENCY: usize = 16;
/// How long the phase waits after the load for the quiet deliveries already accepted.
const DRAIN: Duration = Duration::from_secs(60);

/// The sizes of a run.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    quiet_endpoints: usize,
    quiet_rate: f64,
    busy_endpoints: usize,
    busy_messages: u64,
    busy_service: Duration,
    weighted_endpoints: usize,
    /// Messages of the weight-1 tenant's backlog; the others have theirs × their weight.
    weighted_messages: u64,
    weighted_service: Duration,
    duration: Duration,
}

impl Sizes {
    fn of(args: &BenchArgs) -> Self {
        Self {
            quiet_endpoints: args.endpoints.unwrap_or(10),
            quiet_rate: args.rate.unwrap_or(args.sized(20.0, 5.0)),
            busy_endpoints: args.backlog_endpoints.unwrap_or(args.sized(2_000, 20)),
            busy_messages: args.backlog.unwrap_or(args.sized(100, 5)),
            busy_service: Duration::from_millis(args.slow_ms.unwrap_or(200)),
            weighted_endpoints: args.sized(100, 4),
            weighted_messages: args.sized(400, 10),
            weighted_service: Duration::from_millis(50),
            duration: args.duration(20.0),
        }
    }
}

/// Who is in a phase.
#[derive(Debug, Clone, Copy, Default)]
struct Cast {
    quiet: bool,
    busy: bool,
    trickle: bool,
    weighted: bool,
}

/// What a phase recorded.
struct Outcome {
    timeline: Arc<Timeline>,
    duration_s: f64,
    warmup_s: usize,
    /// Deliveries the quiet and trickle tenants' accepted messages fan out to.
    quiet_expected: u64,
    trickle_expected: u64,
    /// The claims made during the load, from the sluice's `/metrics` (`None` in a fleet,
    /// whose claims are the dispatcher processes').
    claims: Option<HistogramSnapshot>,
}

impl Outcome {
    fn quantile_ms(&self, group: usize, q: f64) -> Option<f64> {
        self.timeline
            .latency_from(group, self.warmup_s)
            .quantile(q)
            .map(ms)
    }

    /// The `q`-quantile of the claims made during the load, in ms.
    fn claim_ms(&self, q: f64) -> Option<f64> {
        self.claims.as_ref()?.quantile(q).map(|s| s * 1e3)
    }

    /// The `q`-quantile of `group`'s POST → 202 times, in ms.
    fn ingest_ms(&self, group: usize, q: f64) -> Option<f64> {
        self.timeline.ingest_latency(group).quantile(q).map(ms)
    }

    /// Deliveries per second of `group` over the load, after warm-up.
    fn rate(&self, group: usize) -> f64 {
        let to = self.duration_s.floor() as usize;
        let n = self.timeline.delivered_between(group, self.warmup_s, to);
        n as f64 / (to.saturating_sub(self.warmup_s)).max(1) as f64
    }
}

/// Run every phase and report.
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let sizes = Sizes::of(args);
    let quiet = Cast {
        quiet: true,
        ..Cast::default()
    };
    let alone = phase(args, sizes, "quiet alone", quiet).await?;
    let beside_cast = Cast {
        busy: true,
        ..quiet
    };
    let beside = phase(args, sizes, "beside backlog", beside_cast).await?;
    let busy = Cast {
        busy: true,
        ..Cast::default()
    };
    let busy_alone = phase(args, sizes, "busy alone", busy).await?;
    let weighted = Cast {
        weighted: true,
        ..Cast::default()
    };
    let weights = phase(args, sizes, "weights", weighted).await?;
    let trickle_cast = Cast {
        busy: true,
        trickle: true,
        ..Cast::default()
    };
    let trickle = phase(args, sizes, "trickle", trickle_cast).await?;

    let mut report = Report::new("tenants", args.describe());
    report.param("duration_s", sizes.duration.as_secs_f64());
    report.param("quiet_endpoints", sizes.quiet_endpoints);
    report.param("quiet_messages_per_s", sizes.quiet_rate);
    report.param("busy_endpoints", sizes.busy_endpoints);
    report.param("busy_messages", sizes.busy_messages);
    report.param("busy_service_ms", sizes.busy_service.as_millis() as u64);
    report.param("weighted_endpoints_each", sizes.weighted_endpoints);
    report.param("dispatchers", args.dispatchers.unwrap_or(0));
    figures(
        &mut report,
        sizes,
        &alone,
        &beside,
        &busy_alone,
        &weights,
        &trickle,
    );

    let panels = [
        Panel::log(
            "quiet tenant: enqueue→delivery p99 per second",
            "ms",
            vec![
                Line::new("alone", alone.timeline.quantile_series(QUIET, 0.99)),
                Line::new(
                    "beside the backlog",
                    beside.timeline.quantile_series(QUIET, 0.99),
                ),
            ],
        ),
        Panel::linear(
            "busy tenant: deliveries per second",
            "deliveries/s",
            vec![
                Line::new("alone", busy_alone.timeline.count_series(BUSY, false)),
                Line::new(
                    "beside the quiet tenant",
                    beside.timeline.count_series(BUSY, false),
                ),
            ],
        ),
        Panel::linear(
            "weights 1:2:4, every tenant saturated: deliveries per second",
            "deliveries/s",
            WEIGHTED
                .iter()
                .map(|&(g, w)| {
                    Line::new(
                        format!("weight {w}"),
                        weights.timeline.count_series(g, false),
                    )
                })
                .collect(),
        ),
    ];
    save_chart(
        args,
        &mut report,
        "tenants: one tenant's backlog beside the others",
        &panels,
    )?;
    Ok(report)
}

fn figures(
    report: &mut Report,
    sizes: Sizes,
    alone: &Outcome,
    beside: &Outcome,
    busy_alone: &Outcome,
    weights: &Outcome,
    trickle: &Outcome,
) {
    for (key, label, phase) in [
        ("alone", "alone", alone),
        ("beside", "beside the backlog", beside),
    ] {
        for (q, name) in [(0.5, "p50"), (0.99, "p99"), (1.0, "max")] {
            report.figure(
                &format!("quiet_{key}_{name}_ms"),
                &format!("quiet tenant {label}: enqueue→delivery {name}"),
                phase.quantile_ms(QUIET, q),
                "ms",
            );
        }
    }
    // Where a quiet delivery's time goes: its POST, and the claims it waits behind.
    for (key, label, phase) in [
        ("alone", "alone", alone),
        ("beside", "beside the backlog", beside),
    ] {
        for (q, name) in [(0.5, "p50"), (0.99, "p99")] {
            report.figure(
                &format!("quiet_{key}_ingest_{name}_ms"),
                &format!("quiet tenant {label}: POST → 202 {name}"),
                phase.ingest_ms(QUIET, q),
                "ms",
            );
            report.figure(
                &format!("claim_{key}_{name}_ms"),
                &format!("claims during the quiet tenant {label}: duration {name}"),
                phase.claim_ms(q),
                "ms",
            );
        }
    }
    let factor = ratio(
        beside.quantile_ms(QUIET, 0.99),
        alone.quantile_ms(QUIET, 0.99),
    );
    report.figure(
        "quiet_p99_factor",
        "quiet tenant: p99 beside the backlog ÷ alone",
        factor,
        "×",
    );
    let made = beside.timeline.delivered_total(QUIET);
    report.figure(
        "quiet_delivered",
        "quiet tenant beside the backlog: deliveries made (of those its accepted messages fan out to)",
        Some(made as f64),
        "",
    );
    report.figure(
        "quiet_expected",
        "quiet tenant beside the backlog: deliveries its accepted messages fan out to",
        Some(beside.quiet_expected as f64),
        "",
    );
    let busy_beside = beside.rate(BUSY);
    let busy_solo = busy_alone.rate(BUSY);
    report.figure(
        "busy_beside_per_s",
        "busy tenant beside the quiet one: deliveries",
        Some(busy_beside),
        "/s",
    );
    report.figure(
        "busy_alone_per_s",
        "busy tenant alone: deliveries",
        Some(busy_solo),
        "/s",
    );
    let kept = ratio(Some(busy_beside), Some(busy_solo));
    report.figure(
        "busy_kept",
        "busy tenant: its rate beside the quiet one ÷ alone (work-conserving)",
        kept,
        "",
    );
    let counts: Vec<f64> = WEIGHTED.iter().map(|&(g, _)| weights.rate(g)).collect();
    let total: f64 = counts.iter().sum();
    let mut shares_ok = total > 0.0;
    for (&(_, w), n) in WEIGHTED.iter().zip(&counts) {
        let share = (total > 0.0).then(|| n / total);
        let want = f64::from(w) / 7.0;
        shares_ok &= share.is_some_and(|s| (s - want).abs() <= want * 0.1);
        report.figure(
            &format!("weight_{w}_share"),
            &format!("weight {w}: share of the deliveries (fair: {w}/7 = {want:.3})"),
            share,
            "",
        );
    }
    report.figure(
        "weighted_per_s",
        "weights 1:2:4: deliveries in all",
        Some(total),
        "/s",
    );
    for (q, name) in [(0.5, "p50"), (0.99, "p99"), (1.0, "max")] {
        report.figure(
            &format!("trickle_{name}_ms"),
            &format!("trickle tenant (1 message/s) beside the backlog: {name}"),
            trickle.quantile_ms(TRICKLE, q),
            "ms",
        );
    }
    report.figure(
        "trickle_delivered",
        "trickle tenant: deliveries made",
        Some(trickle.timeline.delivered_total(TRICKLE) as f64),
        "",
    );
    report.verdict(
        factor.is_some_and(|f| f <= 2.0),
        format!(
            "the quiet tenant's p99 beside the backlog is within 2× of its p99 alone ({})",
            factor.map_or("n/a".into(), |f| format!("{f:.2}×"))
        ),
    );
    report.verdict(
        made >= beside.quiet_expected,
        format!(
            "every quiet delivery is made ({made} of {})",
            beside.quiet_expected
        ),
    );
    report.verdict(
        kept.is_some_and(|k| k >= 0.9),
        format!(
            "the busy tenant keeps at least 90 % of the rate it gets alone ({})",
            kept.map_or("n/a".into(), |k| format!("{:.0} %", k * 100.0))
        ),
    );
    report.verdict(
        shares_ok,
        "weights 1:2:4 share the deliveries 1/7, 2/7, 4/7 within 10 %".to_owned(),
    );
    report.verdict(
        trickle.timeline.delivered_total(TRICKLE) >= trickle.trickle_expected,
        "every trickle delivery is made".to_owned(),
    );
    report.note(format!(
        "Shares are of the pool's time: each claim serves the tenants with the lowest virtual \
         pass (worker-seconds given ÷ weight) and charges what it took. The busy tenant's rate \
         alone is what the machine gives {} endpoints answering in {} ms.",
        sizes.busy_endpoints,
        sizes.busy_service.as_millis()
    ));
}

/// Run one phase on a fresh sluice.
async fn phase(
    args: &BenchArgs,
    sizes: Sizes,
    label: &'static str,
    cast: Cast,
) -> anyhow::Result<Outcome> {
    let timeline = Arc::new(Timeline::new(&GROUPS));
    let stage = Stage::start(args, &Tuning::default()).await?;
    let sluice = &stage.sluice;
    let api = Api {
        http: sluice.http.clone(),
        url: sluice.messages_url().into(),
        timeline: timeline.clone(),
        event_types: None,
    };
    let mut receivers = Vec::new();
    let mut producers: Vec<(String, usize, f64)> = Vec::new();
    let mut quiet_fan_out = 0;
    if cast.busy {
        let r = receiver::start(Mode::Slow(sizes.busy_service), timeline.clone(), BUSY).await?;
        let tenant = Tenant::create(sluice, "busy", &r.url(), sizes.busy_endpoints, None).await?;
        tenant.fill(&api, BUSY, sizes.busy_messages).await?;
        receivers.push(r);
    }
    if cast.weighted {
        // All three tenants first, then their backlogs written at once: none starts ahead.
        let mut fills = Vec::new();
        for &(group, weight) in &WEIGHTED {
            let mode = Mode::Slow(sizes.weighted_service);
            let r = receiver::start(mode, timeline.clone(), group).await?;
            let name = format!("weight-{weight}");
            let endpoints = sizes.weighted_endpoints;
            let tenant = Tenant::create(sluice, &name, &r.url(), endpoints, Some(16)).await?;
            sluice.tenant_weight(&tenant.id, weight).await?;
            // Backlogs in proportion to the weights, so none runs dry while the others wait.
            fills.push((tenant, group, sizes.weighted_messages * u64::from(weight)));
            receivers.push(r);
        }
        futures_util::future::try_join_all(
            fills
                .iter()
                .map(|(tenant, group, messages)| tenant.fill(&api, *group, *messages)),
        )
        .await?;
    }
    if cast.quiet {
        let r = receiver::start(Mode::Fast, timeline.clone(), QUIET).await?;
        let tenant = Tenant::create(sluice, "quiet", &r.url(), sizes.quiet_endpoints, None).await?;
        quiet_fan_out = sizes.quiet_endpoints as u64;
        producers.push((tenant.token, QUIET, sizes.quiet_rate));
        receivers.push(r);
    }
    if cast.trickle {
        let r = receiver::start(Mode::Fast, timeline.clone(), TRICKLE).await?;
        let tenant = Tenant::create(sluice, "trickle", &r.url(), 1, None).await?;
        producers.push((tenant.token, TRICKLE, 1.0));
        receivers.push(r);
    }

    let seconds = sizes.duration.as_secs_f64();
    let pb = watch::progress(args.json, label, seconds);
    timeline.restart();
    let claims_before = claims(sluice).await;
    let until = Instant::now() + sizes.duration;
    let load: Vec<_> = producers
        .into_iter()
        .map(|(token, group, rate)| api.open_loop(token, group, rate, until))
        .collect();
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(1).min(until - Instant::now())).await;
        pb.set_position(timeline.elapsed().floor() as u64);
    }
    for p in load {
        let _ = tokio::time::timeout(Duration::from_secs(30), p).await;
    }
    pb.finish_and_clear();
    let claims = match (claims_before, self::claims(sluice).await) {
        (Some(before), Some(after)) => Some(after.delta(&before)),
        _ => None,
    };
    // The quiet and trickle deliveries already accepted may still arrive.
    let quiet_expected = timeline.accepted(QUIET) * quiet_fan_out;
    let trickle_expected = timeline.accepted(TRICKLE);
    let drain = Instant::now() + DRAIN.min(sizes.duration * 3);
    while Instant::now() < drain
        && (timeline.delivered_total(QUIET) < quiet_expected
            || timeline.delivered_total(TRICKLE) < trickle_expected)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stage.stop().await;
    drop(receivers);
    Ok(Outcome {
        timeline,
        duration_s: seconds,
        warmup_s: if seconds >= 10.0 { 2 } else { 0 },
        quiet_expected,
        trickle_expected,
        claims,
    })
}

/// The sluice's claim durations so far, when it claims (not a fleet's API process).
async fn claims(sluice: &Sluice) -> Option<HistogramSnapshot> {
    let scrape = sluice.scrape().await.ok()?;
    scrape.histogram("sluice_claim_duration_seconds")
}

/// A tenant of the scenario, its endpoints created.
struct Tenant {
    id: String,
    token: String,
}

impl Tenant {
    /// A tenant with `endpoints` endpoints at `url` (each on a path of its own, with `lane` as
    /// its lane size when given).
    async fn create(
        sluice: &Sluice,
        name: &str,
        url: &str,
        endpoints: usize,
        lane: Option<u32>,
    ) -> anyhow::Result<Self> {
        let (id, token) = sluice.tenant_with_id(name).await?;
        futures_util::stream::iter(0..endpoints)
            .map(|i| {
                let (token, url) = (&token, format!("{}/{name}/{i}", url.trim_end_matches('/')));
                async move { sluice.endpoint(token, &url, lane).await }
            })
            .buffer_unordered(SETUP_CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await
            .with_context(|| format!("{name}: endpoints"))?;
        Ok(Self { id, token })
    }

    /// Post `messages` messages (each to all its endpoints) before the load starts.
    async fn fill(&self, api: &Api, group: usize, messages: u64) -> anyhow::Result<()> {
        let accepted = futures_util::stream::iter(0..messages)
            .map(|seq| api.send(&self.token, group, seq))
            .buffer_unordered(SETUP_CONCURRENCY)
            .filter(|ok| std::future::ready(*ok))
            .count()
            .await;
        anyhow::ensure!(
            accepted as u64 == messages,
            "only {accepted} of {messages} backlog messages accepted"
        );
        Ok(())
    }
}
