//! `replay`: a recorded peak shape replayed at 1×, 2× and 4× its rate, the check a sizing has to
//! pass before it is trusted. The shape is built in: a few dozen endpoints (each its own tenant)
//! with mixed service times, three that throttle (429 + `Retry-After: 1` above a concurrency),
//! one slow and one dead, all offered traffic at once. One sluice (`--concurrency auto` unless
//! `--concurrency` fixes the pool) warms up at 1× for 30 s, then runs each level in turn.
//!
//! Per level it reports the age of the oldest ready delivery (max and p99 of per-second samples;
//! for the healthy tenants, whose backlog is the pool's, and for all, where the slow, dead and
//! throttling endpoints' own backlogs count too), the mean pool utilisation, deliveries per
//! second, the healthy endpoints' delivery latency (p99, p99.9) and sheds per delivery offered
//! (a shed waits 5–20 s before it is offered again, so a lane too narrow for an endpoint's
//! bursts shows here), and the share of 429s each throttling endpoint answered; then three
//! verdicts: the healthy tenants' oldest age stays under the objective at 2×, the pool's mean
//! utilisation sits in 85–95 %, and no throttling endpoint's 429 share rises from 1× to 2× (the
//! governor, not the pool, decides what an endpoint gets).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::chart::{Line, Panel};
use super::harness::{Sluice, Tuning};
use super::load::Api;
use super::receiver::{self, Mode};
use super::report::{Report, percentile, ratio};
use super::timeline::Timeline;
use super::watch::{self, Watch};
use super::{BenchArgs, save_chart};

/// What an endpoint of the shape does.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// Answers 200 after this long.
    Answers(Duration),
    /// Serves `capacity` at once in `service`, 429 + Retry-After: 1 beyond.
    Throttles { capacity: usize, service: Duration },
    /// Accepts and never answers.
    Dead,
}

/// One endpoint of the shape at 1×.
#[derive(Debug, Clone, Copy)]
struct Shaped {
    name: &'static str,
    kind: Kind,
    /// Events per second at 1×.
    rate: f64,
    /// Timeline group.
    group: usize,
}

/// Timeline groups: the healthy endpoints together, then each bad one.
const GROUPS: [&str; 6] = [
    "healthy",
    "throttles-2",
    "throttles-3",
    "throttles-4",
    "slow",
    "dead",
];
const HEALTHY: usize = 0;
/// The groups of the throttling endpoints.
const THROTTLING: [usize; 3] = [1, 2, 3];

/// The built-in peak: 24 fast endpoints (5–80 ms) at 8/s, 4 at 300 ms at 4/s, three throttling
/// endpoints offered 1.5× what they can take, a 3 s endpoint at 4/s and a dead one at 2/s.
fn shape() -> Vec<Shaped> {
    let ms = Duration::from_millis;
    let mut out = Vec::new();
    const FAST: [(&str, u64); 24] = [
        ("fast-01", 5),
        ("fast-02", 10),
        ("fast-03", 20),
        ("fast-04", 40),
        ("fast-05", 80),
        ("fast-06", 5),
        ("fast-07", 10),
        ("fast-08", 20),
        ("fast-09", 40),
        ("fast-10", 80),
        ("fast-11", 5),
        ("fast-12", 10),
        ("fast-13", 20),
        ("fast-14", 40),
        ("fast-15", 80),
        ("fast-16", 5),
        ("fast-17", 10),
        ("fast-18", 20),
        ("fast-19", 40),
        ("fast-20", 80),
        ("fast-21", 5),
        ("fast-22", 10),
        ("fast-23", 20),
        ("fast-24", 40),
    ];
    for (name, service) in FAST {
        out.push(Shaped {
            name,
            kind: Kind::Answers(ms(service)),
            rate: 8.0,
            group: HEALTHY,
        });
    }
    for name in ["medium-1", "medium-2", "medium-3", "medium-4"] {
        out.push(Shaped {
            name,
            kind: Kind::Answers(ms(300)),
            rate: 4.0,
            group: HEALTHY,
        });
    }
    for (i, capacity) in [2usize, 3, 4].into_iter().enumerate() {
        let service = ms(100);
        out.push(Shaped {
            name: GROUPS[THROTTLING[i]],
            kind: Kind::Throttles { capacity, service },
            rate: 1.5 * capacity as f64 / service.as_secs_f64(),
            group: THROTTLING[i],
        });
    }
    out.push(Shaped {
        name: "slow",
        kind: Kind::Answers(ms(3_000)),
        rate: 4.0,
        group: 4,
    });
    out.push(Shaped {
        name: "dead",
        kind: Kind::Dead,
        rate: 2.0,
        group: 5,
    });
    out
}

/// What one level measured.
struct Level {
    factor: f64,
    healthy_age_max: Option<f64>,
    healthy_age_p99: Option<f64>,
    all_age_max: Option<f64>,
    utilisation: Option<f64>,
    attempts_share: Option<f64>,
    concurrency_end: Option<f64>,
    delivered_per_s: f64,
    throttled_share: [Option<f64>; 3],
    /// Sheds per delivery offered, the fast endpoints and the 300 ms ones.
    healthy_shed_share: [Option<f64>; 2],
    /// The healthy endpoints' delivery latency (event accepted → receiver), p99 and p99.9, s.
    healthy_latency_p99: Option<f64>,
    healthy_latency_p999: Option<f64>,
}

/// The healthy endpoints' two kinds, for their shed shares: name prefix and label.
const HEALTHY_KINDS: [(&str, &str); 2] = [("fast", "fast"), ("medium", "300 ms")];

/// Run the levels one after another on one sluice, after a warm-up at the first level's rate:
/// the pool the auto-sizer found and what the governors learnt carry over, as they would in a
/// deployment whose traffic grows.
async fn levels(
    args: &BenchArgs,
    factors: &[f64],
    warmup: Duration,
    duration: Duration,
) -> anyhow::Result<Vec<Level>> {
    let timeline = Arc::new(Timeline::new(&GROUPS));
    let tuning = Tuning {
        auto_concurrency: true,
        ..Tuning::default()
    };
    let sluice = Sluice::start(args, &tuning).await?;
    let shape = shape();
    let (mut receivers, mut customers) = (Vec::new(), Vec::new());
    let mut healthy_tenants = Vec::new();
    // The healthy endpoints are watched by name, for their sheds.
    let mut watched = Vec::new();
    for e in &shape {
        let mode = match e.kind {
            Kind::Answers(d) => Mode::Slow(d),
            Kind::Throttles { capacity, service } => Mode::Capped {
                capacity,
                service,
                retry_after_s: 1,
            },
            Kind::Dead => Mode::Blackhole,
        };
        let rx = receiver::start(mode, timeline.clone(), e.group).await?;
        let (tenant, token) = sluice.tenant_with_id(e.name).await?;
        let endpoint = sluice.endpoint(&token, &rx.url(), None).await?;
        if e.group == HEALTHY {
            healthy_tenants.push(tenant);
            watched.push((e.name.to_owned(), endpoint));
        }
        customers.push((token, e.group, e.rate));
        receivers.push(rx);
    }
    let api = Api {
        http: sluice.http.clone(),
        url: sluice.messages_url().into(),
        timeline: timeline.clone(),
        event_types: None,
    };
    let total = warmup + duration * factors.len() as u32;
    let pb = watch::progress(args.json, "replay", total.as_secs_f64());
    let mut watch = Watch::new(sluice.probe(), watched, timeline.clone(), pb);
    timeline.restart();
    let start = Instant::now();
    // The oldest ready age per tenant, once a second (a store read, as the scale signal does).
    let store = sluice.store();
    let end = start + total;
    let ages = tokio::spawn(async move {
        let mut samples: Vec<(f64, HashMap<String, f64>)> = Vec::new();
        let Some(store) = store else { return samples };
        while Instant::now() < end {
            if let Ok(stats) = store.queue_stats(sluice::clock::now_ms()).await {
                let ages = stats
                    .oldest_ready_age_ms
                    .into_iter()
                    .map(|(t, ms)| (t, ms as f64 / 1000.0))
                    .collect();
                samples.push((start.elapsed().as_secs_f64(), ages));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        samples
    });
    let stages =
        std::iter::once((factors[0], warmup)).chain(factors.iter().map(|f| (*f, duration)));
    for (factor, span) in stages {
        let until = Instant::now() + span;
        let producers: Vec<_> = customers
            .iter()
            .map(|(token, group, rate)| api.open_loop(token.clone(), *group, rate * factor, until))
            .collect();
        watch.until(until).await;
        for p in producers {
            let _ = tokio::time::timeout(Duration::from_secs(30), p).await;
        }
    }
    let series = watch.finish();
    let ages = ages.await.unwrap_or_default();
    sluice.stop().await;
    drop(receivers);

    let mut out = Vec::new();
    for (i, factor) in factors.iter().enumerate() {
        let from = (warmup + duration * i as u32).as_secs_f64();
        let to = from + duration.as_secs_f64();
        out.push(measure(
            &timeline,
            &series,
            &ages,
            &healthy_tenants,
            *factor,
            from,
            to,
        ));
    }
    Ok(out)
}

/// Sheds of the watched endpoints whose names start with `prefix` within `[from, to)`: the
/// growth of each one's shed counter from its last sample before `from` to its last before `to`.
fn sheds_between(series: &watch::Series, prefix: &str, from: f64, to: f64) -> Option<f64> {
    let mut total = None;
    for (name, samples) in series {
        let Some(label) = name.strip_suffix(".shed_total") else {
            continue;
        };
        if !label.starts_with(prefix) {
            continue;
        }
        let at = |t: f64| {
            samples
                .iter()
                .rfind(|(s, _)| *s < t)
                .map_or(0.0, |(_, n)| *n)
        };
        *total.get_or_insert(0.0) += at(to) - at(from);
    }
    total
}

/// The figures of one level, from what was sampled within `[from, to)` seconds.
fn measure(
    timeline: &Timeline,
    series: &watch::Series,
    ages: &[(f64, HashMap<String, f64>)],
    healthy_tenants: &[String],
    factor: f64,
    from: f64,
    to: f64,
) -> Level {
    let within = |t: f64| t >= from && t < to;
    let healthy_age: Vec<f64> = ages
        .iter()
        .filter(|(t, _)| within(*t))
        .map(|(_, s)| {
            healthy_tenants
                .iter()
                .filter_map(|t| s.get(t))
                .fold(0.0, |a: f64, b| a.max(*b))
        })
        .collect();
    let all_age = ages
        .iter()
        .filter(|(t, _)| within(*t))
        .map(|(_, s)| s.values().fold(0.0, |a: f64, b| a.max(*b)))
        .reduce(f64::max);
    // The auto-sizer needs a few decisions to follow a step in load: utilisation is judged on
    // the second half of the level. The pool bounds what is claimed and not settled (attempts
    // and deliveries waiting at their lanes): that is its utilisation; attempts alone are
    // shown too.
    let half = (from + to) / 2.0;
    let share = |name: &str| {
        let pairs: Vec<(f64, f64)> = series
            .get(name)
            .into_iter()
            .flatten()
            .zip(series.get("concurrency").into_iter().flatten())
            .filter(|((t, _), _)| *t >= half && *t < to)
            .map(|((_, busy), (_, slots))| (busy.min(*slots), *slots))
            .collect();
        (!pairs.is_empty()).then(|| {
            let busy: f64 = pairs.iter().map(|(b, _)| b).sum();
            let slots: f64 = pairs.iter().map(|(_, s)| s).sum();
            busy / slots.max(1.0)
        })
    };
    let concurrency_end = series
        .get("concurrency")
        .into_iter()
        .flatten()
        .rfind(|(t, _)| within(*t))
        .map(|(_, c)| *c);
    let (first, last) = (from as usize, to as usize);
    let delivered: u64 = (0..GROUPS.len())
        .map(|g| timeline.delivered_between(g, first, last))
        .sum();
    let throttled_share = THROTTLING.map(|g| {
        let seconds = timeline.seconds(g);
        let level = seconds.get(first..last.min(seconds.len())).unwrap_or(&[]);
        let t: u64 = level.iter().map(|s| s.throttled).sum();
        let ok: u64 = level.iter().map(|s| s.ok).sum();
        ratio(Some(t as f64), Some((t + ok) as f64))
    });
    // Offered at the level's rate: the shape's rates × the factor × the level's span.
    let healthy_shed_share = HEALTHY_KINDS.map(|(prefix, _)| {
        let offered: f64 = shape()
            .iter()
            .filter(|e| e.group == HEALTHY && e.name.starts_with(prefix))
            .map(|e| e.rate * factor * (to - from))
            .sum();
        ratio(sheds_between(series, prefix, from, to), Some(offered))
    });
    let latency = timeline.latency_between(HEALTHY, first, last);
    let seconds = |q: f64| latency.quantile(q).map(|d| d.as_secs_f64());
    Level {
        factor,
        healthy_age_max: healthy_age.iter().copied().reduce(f64::max),
        healthy_age_p99: percentile(&healthy_age, 0.99),
        all_age_max: all_age,
        utilisation: share("outstanding"),
        attempts_share: share("in_flight"),
        concurrency_end,
        delivered_per_s: delivered as f64 / (to - from),
        throttled_share,
        healthy_shed_share,
        healthy_latency_p99: seconds(0.99),
        healthy_latency_p999: seconds(0.999),
    }
}

/// Run the three levels and report.
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let duration = args.duration(60.0);
    let warmup = args.sized(Duration::from_secs(30), Duration::from_secs(1));
    let objective = args.objective.unwrap_or(5.0);
    let levels = levels(args, &[1.0, 2.0, 4.0], warmup, duration).await?;
    let mut report = Report::new("replay", args.describe());
    report.param("duration_per_level_s", duration.as_secs_f64());
    report.param("warmup_s", warmup.as_secs_f64());
    report.param("endpoints", shape().len());
    report.param(
        "base_rate_per_s",
        shape().iter().map(|e| e.rate).sum::<f64>(),
    );
    report.param("objective_s", objective);
    report.param(
        "concurrency",
        args.concurrency
            .map_or_else(|| "auto".to_owned(), |c| c.to_string()),
    );
    for l in &levels {
        let x = format!("{}x", l.factor);
        report.figure(
            &format!("healthy_oldest_age_max_s_{x}"),
            &format!("{x}: oldest ready age, healthy tenants, max"),
            l.healthy_age_max,
            "s",
        );
        report.figure(
            &format!("healthy_oldest_age_p99_s_{x}"),
            &format!("{x}: oldest ready age, healthy tenants, p99"),
            l.healthy_age_p99,
            "s",
        );
        report.figure(
            &format!("oldest_age_max_s_{x}"),
            &format!("{x}: oldest ready age, every tenant (slow, dead, throttling included), max"),
            l.all_age_max,
            "s",
        );
        report.figure(
            &format!("utilisation_{x}"),
            &format!("{x}: mean pool utilisation, claimed ÷ concurrency (second half)"),
            l.utilisation,
            "",
        );
        report.figure(
            &format!("attempts_share_{x}"),
            &format!("{x}: attempts in flight ÷ concurrency (second half)"),
            l.attempts_share,
            "",
        );
        report.figure(
            &format!("concurrency_{x}"),
            &format!("{x}: pool size at the end"),
            l.concurrency_end,
            "",
        );
        report.figure(
            &format!("delivered_per_s_{x}"),
            &format!("{x}: deliveries per second"),
            Some(l.delivered_per_s),
            "/s",
        );
        for (i, (prefix, label)) in HEALTHY_KINDS.iter().enumerate() {
            report.figure(
                &format!("healthy_shed_share_{prefix}_{x}"),
                &format!("{x}: sheds per delivery offered, {label} endpoints"),
                l.healthy_shed_share[i],
                "",
            );
        }
        report.figure(
            &format!("healthy_latency_p99_s_{x}"),
            &format!("{x}: delivery latency of the healthy endpoints, p99"),
            l.healthy_latency_p99,
            "s",
        );
        report.figure(
            &format!("healthy_latency_p999_s_{x}"),
            &format!("{x}: delivery latency of the healthy endpoints, p99.9"),
            l.healthy_latency_p999,
            "s",
        );
        for (i, g) in THROTTLING.iter().enumerate() {
            report.figure(
                &format!("throttled_share_{}_{x}", GROUPS[*g]),
                &format!("{x}: share of attempts answered 429, {}", GROUPS[*g]),
                l.throttled_share[i],
                "",
            );
        }
    }
    verdicts(&mut report, &levels, objective);

    let line = |name: &str, f: &dyn Fn(&Level) -> Option<f64>| {
        Line::new(
            name,
            levels
                .iter()
                .filter_map(|l| f(l).map(|v| (l.factor, v)))
                .collect(),
        )
    };
    let level_axis = "level (× the recorded peak's rate)";
    let panels = [
        Panel::linear(
            "oldest ready age",
            "seconds",
            vec![
                line("healthy tenants, max", &|l| l.healthy_age_max),
                line("healthy tenants, p99", &|l| l.healthy_age_p99),
                line("objective", &|_| Some(objective)),
            ],
        )
        .over(level_axis),
        Panel::linear(
            "mean pool utilisation",
            "share of the pool busy",
            vec![
                line("utilisation", &|l| l.utilisation),
                line("85 %", &|_| Some(0.85)),
                line("95 %", &|_| Some(0.95)),
            ],
        )
        .over(level_axis),
        Panel::linear(
            "deliveries",
            "per second",
            vec![line("delivered", &|l| Some(l.delivered_per_s))],
        )
        .over(level_axis),
        Panel::linear(
            "healthy endpoints: sheds",
            "per delivery offered",
            (0..HEALTHY_KINDS.len())
                .map(|i| line(HEALTHY_KINDS[i].1, &|l| l.healthy_shed_share[i]))
                .collect(),
        )
        .over(level_axis),
        Panel::linear(
            "429 share of each throttling endpoint",
            "share of its attempts",
            (0..THROTTLING.len())
                .map(|i| line(GROUPS[THROTTLING[i]], &|l| l.throttled_share[i]))
                .collect(),
        )
        .over(level_axis),
    ];
    save_chart(
        args,
        &mut report,
        "replay: the recorded peak at 1×, 2× and 4×",
        &panels,
    )?;
    Ok(report)
}

/// The three pass criteria, as verdicts with the figures (timing claims: a smoke run does not
/// judge them).
fn verdicts(report: &mut Report, levels: &[Level], objective: f64) {
    let at = |factor: f64| levels.iter().find(|l| l.factor == factor);
    if let Some(two) = at(2.0) {
        let age = two.healthy_age_max;
        report.verdict(
            age.is_some_and(|a| a < objective),
            format!(
                "oldest ready age of the healthy tenants at 2x is {} (objective {objective} s)",
                age.map_or("unknown".into(), |a| format!("{a:.1} s")),
            ),
        );
        let u = two.utilisation;
        report.verdict(
            u.is_some_and(|u| (0.85..=0.95).contains(&u)),
            format!(
                "mean pool utilisation at 2x is {} (85–95 % wanted)",
                u.map_or("unknown".into(), |u| format!("{:.0} %", u * 100.0)),
            ),
        );
    }
    if let (Some(one), Some(two)) = (at(1.0), at(2.0)) {
        let pairs: Vec<String> = THROTTLING
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let fmt = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.2} %", v * 100.0));
                format!(
                    "{} {} → {}",
                    GROUPS[*g],
                    fmt(one.throttled_share[i]),
                    fmt(two.throttled_share[i])
                )
            })
            .collect();
        let ok =
            (0..THROTTLING.len()).all(|i| match (one.throttled_share[i], two.throttled_share[i]) {
                (Some(a), Some(b)) => b <= a,
                _ => false,
            });
        report.verdict(
            ok,
            format!(
                "the 429 share does not rise from 1x to 2x ({})",
                pairs.join(", ")
            ),
        );
    }
}
