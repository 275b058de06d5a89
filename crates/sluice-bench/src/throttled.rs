//! `throttled`: an endpoint that serves a number of requests at once and refuses the rest,
//! offered more than it can take: an HTTP receiver answering 429 with Retry-After, or with
//! `--kind sqs|sns|eventbridge|pubsub` a cloud destination whose service (the cloud sink)
//! answers its own throttling error, with no Retry-After. It starts roomy (16 at once) and a
//! third of the way in its capacity drops (to 2 by default): the governor, settled near 16,
//! meets a burst of refusals, halves once per round trip, honours each Retry-After, learns the
//! new capacity and holds there, probing above it after 10 s, then less often each time a
//! probe is refused (up to every 80 s). Healthy endpoints run alongside, and once more in a
//! baseline phase without the throttling endpoint.

use std::time::Duration;

use super::chart::{Line, Panel};
use super::cloud_sink::Service;
use super::harness::Tuning;
use super::phase::{self, BAD, Bad, PhaseSpec, Throttling};
use super::report::{Report, ratio};
use super::{BenchArgs, ThrottledKind, compare, save_chart, watch};

/// How the endpoint `--kind` names refuses what it cannot take.
fn throttling(kind: ThrottledKind, retry_after_s: u64) -> Throttling {
    match kind {
        ThrottledKind::Http => Throttling::TooManyRequests { retry_after_s },
        ThrottledKind::Sqs => Throttling::Service(Service::Sqs),
        ThrottledKind::Sns => Throttling::Service(Service::Sns),
        ThrottledKind::Eventbridge => Throttling::Service(Service::EventBridge),
        ThrottledKind::Pubsub => Throttling::Service(Service::PubSub),
    }
}

/// Mean of `(t, v)` points with `from <= t < to`.
fn mean_between(points: &[(f64, f64)], from: f64, to: f64) -> Option<f64> {
    let v: Vec<f64> = points
        .iter()
        .filter(|(t, _)| *t >= from && *t < to)
        .map(|(_, v)| *v)
        .collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Sum of `(t, v)` points with `from <= t < to`.
fn sum_between(points: &[(f64, f64)], from: f64, to: f64) -> f64 {
    points
        .iter()
        .filter(|(t, _)| *t >= from && *t < to)
        .map(|(_, v)| v)
        .sum()
}

/// Share of `(t, v)` points with `from <= t < to` whose value lies in `[lo, hi]`.
fn share_within(points: &[(f64, f64)], from: f64, to: f64, lo: f64, hi: f64) -> Option<f64> {
    let v: Vec<f64> = points
        .iter()
        .filter(|(t, _)| *t >= from && *t < to)
        .map(|(_, v)| *v)
        .collect();
    (!v.is_empty())
        .then(|| v.iter().filter(|x| (lo..=hi).contains(*x)).count() as f64 / v.len() as f64)
}

/// Run and report.
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let healthy = args.endpoints.unwrap_or(args.sized(10, 2));
    let healthy_rate = args.rate.unwrap_or(args.sized(20.0, 10.0));
    let capacity = args.capacity.unwrap_or(2);
    let initial_capacity = 16;
    let retry_after_s = args.retry_after.unwrap_or(1);
    // More than it can take even before the drop (16 ÷ 50 ms = 320/s), so capacity binds.
    let rate = args.bad_rate.unwrap_or(args.sized(400.0, 100.0));
    let service = Duration::from_millis(50);
    let lane = 32;
    let duration = args.duration(45.0);
    let drop_at = duration / 3;
    let spec = |label, bad| PhaseSpec {
        label,
        bad_name: "throttled",
        healthy,
        healthy_rate,
        bad,
        duration,
        tuning: Tuning::default(),
    };
    let base = phase::run(args, &spec("baseline", Bad::None)).await?;
    let throttling = throttling(args.kind, retry_after_s);
    // What a refusal is, in the labels: the status, or the service's error code.
    let (endpoint, refusal, refusal_in_full) = match throttling {
        Throttling::TooManyRequests { retry_after_s } => (
            "HTTP endpoint".to_owned(),
            "429",
            format!("429 + Retry-After {retry_after_s} s"),
        ),
        Throttling::Service(s) => (
            format!("{} destination", s.name()),
            s.throttling_code(),
            format!("{} (no Retry-After)", s.throttling_code()),
        ),
    };
    let capped = Bad::Capped {
        capacity: initial_capacity,
        drop_to: Some((drop_at, capacity)),
        service,
        throttling,
        rate,
        lane,
    };
    let p = phase::run(args, &spec("throttled", capped)).await?;

    let mut report = Report::new("throttled", args.describe());
    report.param("duration_s", duration.as_secs_f64());
    report.param("capacity_before", initial_capacity);
    report.param("capacity_after", capacity);
    report.param("capacity_drops_at_s", drop_at.as_secs_f64());
    report.param("service_ms", service.as_millis() as u64);
    report.param("throttling_endpoint", endpoint.clone());
    report.param("refusal", refusal_in_full.clone());
    if let Throttling::TooManyRequests { retry_after_s } = throttling {
        report.param("retry_after_s", retry_after_s);
    }
    report.param("offered_per_s", rate);
    report.param("lane_override", lane);
    report.param("healthy_endpoints", healthy);

    let d = p.duration_s;
    let governor = p.series.get("bad.governor").cloned().unwrap_or_default();
    let throttled = p.timeline.count_series(BAD, true);
    let ok = p.timeline.count_series(BAD, false);
    let at = drop_at.as_secs_f64();
    // Warm-up: the first seconds of each capacity are the governor finding it.
    let settle = (at / 3.0).clamp(1.0, 5.0);
    let before = (settle, at);
    let after = ((at + settle).min(d), d);
    let service_s = service.as_secs_f64();
    let stages = [
        ("before", before, initial_capacity as f64),
        ("after", after, capacity as f64),
    ];
    for (stage, (from, to), c) in stages {
        let span = (to - from).max(1e-9);
        let delivered = sum_between(&ok, from, to) / span;
        let most = (c / service_s).min(rate);
        report.figure(
            &format!("delivered_per_s_{stage}"),
            &format!("throttled endpoint: deliveries {stage} the drop ({from:.0}–{to:.0} s)"),
            Some(delivered),
            "/s",
        );
        report.figure(
            &format!("capacity_per_s_{stage}"),
            &format!("throttled endpoint: most it can take {stage} the drop"),
            Some(most),
            "/s",
        );
        report.figure(
            &format!("capacity_used_{stage}"),
            &format!("throttled endpoint: share of that it received {stage} the drop"),
            ratio(Some(delivered), Some(most)),
            "",
        );
        report.figure(
            &format!("governor_per_capacity_{stage}"),
            &format!("governor limit ÷ capacity {stage} the drop, mean"),
            ratio(mean_between(&governor, from, to), Some(c)),
            "x",
        );
        report.figure(
            &format!("governor_in_band_{stage}"),
            &format!("share of samples with the limit within 1.0–1.3× capacity, {stage} the drop"),
            share_within(&governor, from, to, c, 1.3 * c),
            "",
        );
        let t = sum_between(&throttled, from, to);
        let o = sum_between(&ok, from, to);
        report.figure(
            &format!("throttled_share_{stage}"),
            &format!("share of attempts answered {refusal}, {stage} the drop"),
            ratio(Some(t), Some(t + o)),
            "",
        );
    }
    let total_429: f64 = throttled.iter().map(|(_, v)| v).sum();
    let total_ok: f64 = ok.iter().map(|(_, v)| v).sum();
    report.figure(
        "throttled_share",
        &format!("share of attempts answered {refusal}, whole run"),
        ratio(Some(total_429), Some(total_429 + total_ok)),
        "",
    );
    report.figure(
        "governor_min",
        "governor limit, lowest",
        watch::min(&p.series, "bad.governor"),
        "",
    );
    report.figure(
        "peak_concurrency",
        "throttled endpoint: most requests it saw at once",
        p.bad_peak_concurrency.map(|n| n as f64),
        "",
    );
    compare::healthy_figures(&mut report, &base, &p, "throttled");
    if let Some(used) = report.value("capacity_used_after")
        && used < 0.85
    {
        report.note(format!(
            "after the drop the endpoint received {:.0} % of what it could take",
            used.max(0.0) * 100.0
        ));
    }

    report.series("governor_limit", governor.clone());
    report.series("throttled_429_per_s", throttled.clone());
    report.series("throttled_2xx_per_s", ok.clone());
    let cap_line = vec![
        (0.0, initial_capacity as f64),
        (at, initial_capacity as f64),
        (at, capacity as f64),
        (d, capacity as f64),
    ];
    let panels = [
        Panel::linear(
            "governor limit of the throttling endpoint",
            "concurrent attempts",
            vec![
                Line::new("governor limit", governor),
                Line::new(
                    "lane slots held",
                    p.series.get("bad.lane_in_use").cloned().unwrap_or_default(),
                ),
                Line::new("endpoint capacity", cap_line),
            ],
        ),
        Panel::linear(
            "answers of the throttling endpoint",
            "per second",
            vec![
                Line::new(format!("{refusal}/s"), throttled),
                Line::new("accepted/s", ok),
            ],
        ),
        compare::latency_panel(&base, &p, "throttled"),
    ];
    compare::keep_series(&mut report, &base, &p);
    save_chart(
        args,
        &mut report,
        &format!(
            "throttled: {endpoint}, capacity {initial_capacity} → {capacity} at {at:.0} s, \
             {refusal_in_full} beyond it"
        ),
        &panels,
    )?;
    Ok(report)
}
