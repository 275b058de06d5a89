//! `throttled`: an endpoint that serves a few requests at once and answers 429 with Retry-After
//! to the rest, offered more than it can take. The AIMD governor halves on each 429 and honours
//! the pause, then creeps back up: its limit settles around the endpoint's capacity and the 429
//! rate falls from the first burst to a trickle. Healthy endpoints run alongside.

use std::time::Duration;

use super::chart::{Line, Panel};
use super::harness::Tuning;
use super::phase::{self, BAD, Bad, HEALTHY, PhaseSpec};
use super::report::{Report, ratio};
use super::{BenchArgs, save_chart, watch};

/// Mean of `(t, v)` points with `from <= t < to`.
fn mean_between(points: &[(f64, f64)], from: f64, to: f64) -> Option<f64> {
    let v: Vec<f64> = points
        .iter()
        .filter(|(t, _)| *t >= from && *t < to)
        .map(|(_, v)| *v)
        .collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Run and report.
pub async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let healthy = args.endpoints.unwrap_or(args.sized(10, 2));
    let healthy_rate = args.rate.unwrap_or(args.sized(20.0, 10.0));
    let capacity = args.capacity.unwrap_or(4);
    let retry_after_s = args.retry_after.unwrap_or(1);
    let rate = args.bad_rate.unwrap_or(args.sized(200.0, 50.0));
    let service = Duration::from_millis(50);
    let lane = 32;
    let duration = args.duration(40.0);
    let spec = PhaseSpec {
        label: "throttled",
        bad_name: "throttled",
        healthy,
        healthy_rate,
        bad: Bad::Capped {
            capacity,
            service,
            retry_after_s,
            rate,
            lane,
        },
        duration,
        tuning: Tuning::default(),
    };
    let p = phase::run(args, &spec).await?;

    let mut report = Report::new("throttled", args.describe());
    report.param("duration_s", duration.as_secs_f64());
    report.param("capacity", capacity);
    report.param("service_ms", service.as_millis() as u64);
    report.param("retry_after_s", retry_after_s);
    report.param("offered_per_s", rate);
    report.param("lane_override", lane);
    report.param("healthy_endpoints", healthy);

    let d = p.duration_s;
    let governor = p.series.get("bad.governor").cloned().unwrap_or_default();
    let throttled = p.timeline.count_series(BAD, true);
    let ok = p.timeline.count_series(BAD, false);
    let edge = (d / 4.0).clamp(1.0, 10.0);
    let first = mean_between(&throttled, 0.0, edge);
    let last = mean_between(&throttled, d - edge, d);
    report.figure(
        "governor_initial",
        "governor limit, first sample",
        governor.first().map(|(_, v)| *v),
        "",
    );
    report.figure(
        "governor_min",
        "governor limit, lowest",
        watch::min(&p.series, "bad.governor"),
        "",
    );
    report.figure(
        "governor_mean_second_half",
        "governor limit, mean over the second half",
        mean_between(&governor, d / 2.0, d + 1.0),
        "",
    );
    report.figure(
        "capacity",
        "endpoint capacity (requests at once)",
        Some(capacity as f64),
        "",
    );
    report.figure(
        "throttled_per_s_start",
        &format!("429s per second, first {edge:.0} s"),
        first,
        "/s",
    );
    report.figure(
        "throttled_per_s_end",
        &format!("429s per second, last {edge:.0} s"),
        last,
        "/s",
    );
    report.figure(
        "throttled_fall",
        "429 rate, end ÷ start",
        ratio(last, first),
        "",
    );
    let total_429: f64 = throttled.iter().map(|(_, v)| v).sum();
    let total_ok: f64 = ok.iter().map(|(_, v)| v).sum();
    report.figure(
        "throttled_share",
        "share of attempts answered 429",
        ratio(Some(total_429), Some(total_429 + total_ok)),
        "",
    );
    report.figure(
        "delivered_per_s",
        "throttled endpoint: deliveries",
        Some(total_ok / d),
        "/s",
    );
    report.figure(
        "capacity_per_s",
        "throttled endpoint: most it can take (capacity ÷ service time)",
        Some(capacity as f64 / service.as_secs_f64()),
        "/s",
    );
    report.figure(
        "peak_concurrency",
        "throttled endpoint: most requests it saw at once",
        p.bad_peak_concurrency.map(|n| n as f64),
        "",
    );
    report.figure(
        "healthy_p99_ms",
        "healthy p99 enqueue→delivery alongside",
        p.healthy_ms(0.99),
        "ms",
    );
    report.note(
        "the endpoint's deliveries run below its capacity by design: each 429 pauses it for the \
         Retry-After, and the governor climbs back only +0.5 per 2xx",
    );

    report.series("governor_limit", governor.clone());
    report.series("throttled_429_per_s", throttled.clone());
    report.series("throttled_2xx_per_s", ok.clone());
    let cap_line = vec![(0.0, capacity as f64), (d, capacity as f64)];
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
            vec![Line::new("429/s", throttled), Line::new("2xx/s", ok)],
        ),
        Panel::log(
            "healthy endpoints alongside: enqueue→delivery latency",
            "ms (log)",
            vec![
                Line::new("healthy p50", p.timeline.quantile_series(HEALTHY, 0.5)),
                Line::new("healthy p99", p.timeline.quantile_series(HEALTHY, 0.99)),
            ],
        ),
    ];
    save_chart(
        args,
        &mut report,
        &format!("throttled: capacity {capacity}, 429 + Retry-After {retry_after_s} s beyond it"),
        &panels,
    )?;
    Ok(report)
}
