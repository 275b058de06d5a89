//! `throttled`: an endpoint that serves a number of requests at once and answers 429 with
//! Retry-After to the rest. It starts roomy (16 at once) and a third of the way in its capacity
//! drops (to 2 by default) under the same offered load: the AIMD governor, high after a clean
//! start, meets a burst of 429s, halves once per round trip and honours each pause, so its limit
//! falls to the new capacity and the 429 rate falls from the burst to a trickle. Healthy
//! endpoints run alongside.

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
    let capacity = args.capacity.unwrap_or(2);
    let initial_capacity = 16;
    let retry_after_s = args.retry_after.unwrap_or(1);
    let rate = args.bad_rate.unwrap_or(args.sized(200.0, 50.0));
    let service = Duration::from_millis(50);
    let lane = 32;
    let duration = args.duration(45.0);
    let drop_at = duration / 3;
    let spec = PhaseSpec {
        label: "throttled",
        bad_name: "throttled",
        healthy,
        healthy_rate,
        bad: Bad::Capped {
            capacity: initial_capacity,
            drop_to: Some((drop_at, capacity)),
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
    report.param("capacity_before", initial_capacity);
    report.param("capacity_after", capacity);
    report.param("capacity_drops_at_s", drop_at.as_secs_f64());
    report.param("service_ms", service.as_millis() as u64);
    report.param("retry_after_s", retry_after_s);
    report.param("offered_per_s", rate);
    report.param("lane_override", lane);
    report.param("healthy_endpoints", healthy);

    let d = p.duration_s;
    let governor = p.series.get("bad.governor").cloned().unwrap_or_default();
    let throttled = p.timeline.count_series(BAD, true);
    let ok = p.timeline.count_series(BAD, false);
    let at = drop_at.as_secs_f64();
    let edge = ((d - at) / 4.0).clamp(1.0, 10.0);
    let burst = mean_between(&throttled, at, at + edge);
    let last = mean_between(&throttled, d - edge, d);
    report.figure(
        "governor_before_drop",
        "governor limit before the drop, mean of its last 5 s",
        mean_between(&governor, at - 5.0, at),
        "",
    );
    report.figure(
        "governor_after_drop",
        &format!("governor limit, mean of the last {edge:.0} s"),
        mean_between(&governor, d - edge, d + 1.0),
        "",
    );
    report.figure(
        "governor_min",
        "governor limit, lowest",
        watch::min(&p.series, "bad.governor"),
        "",
    );
    report.figure(
        "capacity",
        "endpoint capacity after the drop (requests at once)",
        Some(capacity as f64),
        "",
    );
    report.figure(
        "throttled_per_s_burst",
        &format!("429s per second, first {edge:.0} s after the drop"),
        burst,
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
        "429 rate, end ÷ burst",
        ratio(last, burst),
        "",
    );
    report.figure(
        "seconds_with_429_after_drop",
        "seconds after the drop with at least one 429",
        Some(
            throttled
                .iter()
                .filter(|(t, v)| *t >= at && *t < d && *v > 0.0)
                .count() as f64,
        ),
        "s",
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
        "throttled endpoint: deliveries after the drop",
        Some(
            ok.iter()
                .filter(|(t, _)| *t >= at && *t < d)
                .map(|(_, v)| v)
                .sum::<f64>()
                / (d - at),
        ),
        "/s",
    );
    report.figure(
        "capacity_per_s",
        "throttled endpoint: most it can take after the drop (capacity ÷ service time)",
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
        "after the drop the endpoint's deliveries run below its capacity: every round of attempts \
         that overshoots by one earns a 429 whose Retry-After pauses the whole endpoint, and \
         the governor climbs back +0.5 per 2xx (the AIMD probe)",
    );

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
        &format!(
            "throttled: capacity {initial_capacity} → {capacity} at {at:.0} s, \
             429 + Retry-After {retry_after_s} s beyond it"
        ),
        &panels,
    )?;
    Ok(report)
}
