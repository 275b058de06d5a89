//! `flood`: one tenant enqueues a large backlog (100,000 events by default, 1,000,000 with
//! `--full`) as fast as its producers can POST, to an endpoint that drains it slowly, while the
//! other tenants send at their usual rate.
//! The others' latency is compared with a baseline run without the flood, and the process's
//! resident memory is followed: the backlog lives in the store, not in memory.

use super::chart::{Line, Panel};
use super::harness::Tuning;
use super::phase::{self, BAD, Bad, PhaseSpec};
use super::report::Report;
use super::{BenchArgs, compare, drain, save_chart, watch};

/// RSS `(first sample after `from` s, largest, last)` of a phase, MiB.
fn rss_profile(series: &watch::Series, from: f64) -> (Option<f64>, Option<f64>, Option<f64>) {
    let Some(points) = series.get("rss_mib") else {
        return (None, None, None);
    };
    let start = points.iter().find(|(t, _)| *t >= from).map(|(_, v)| *v);
    (
        start,
        watch::max(series, "rss_mib"),
        points.last().map(|(_, v)| *v),
    )
}

/// Run both phases and report.
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let healthy = args.endpoints.unwrap_or(args.sized(10, 2));
    let healthy_rate = args.rate.unwrap_or(args.sized(20.0, 10.0));
    let backlog = args.backlog.unwrap_or(match (args.smoke, args.full) {
        (true, _) => 300,
        (false, true) => 1_000_000,
        (false, false) => 100_000,
    });
    let producers = args.producers.unwrap_or(16);
    let service_ms = args.slow_ms.unwrap_or(50);
    let duration = args.duration(if args.full { 600.0 } else { 60.0 });
    let spec = |label, bad| PhaseSpec {
        label,
        bad_name: "noisy",
        healthy,
        healthy_rate,
        bad,
        duration,
        tuning: Tuning::default(),
    };
    let base = phase::run(args, &spec("baseline", Bad::None)).await?;
    let backlog_endpoints = args.backlog_endpoints.unwrap_or(10_000).max(1);
    let flood = if args.full {
        Bad::Backlog {
            deliveries: backlog,
            endpoints: backlog_endpoints,
        }
    } else {
        Bad::Flood {
            backlog,
            producers,
            service: std::time::Duration::from_millis(service_ms),
        }
    };
    let with = phase::run(args, &spec("flood", flood)).await?;

    let mut report = Report::new("flood", args.describe());
    report.param("duration_s", duration.as_secs_f64());
    report.param("healthy_tenants", healthy);
    report.param("healthy_rate_per_tenant", healthy_rate);
    report.param("backlog", backlog);
    report.param("flood_producers", producers);
    if args.full {
        report.param("backlog_endpoints", backlog_endpoints);
    } else {
        report.param("noisy_service_ms", service_ms);
    }
    compare::healthy_figures(&mut report, &base, &with, "flooding");
    if args.full {
        drain::figures(&mut report, &with);
    }

    let d = with.duration_s;
    let enqueued = with.timeline.accepted(BAD);
    let delivered = with.timeline.delivered_total(BAD);
    report.figure(
        "noisy_enqueued",
        "noisy tenant: events enqueued",
        Some(enqueued as f64),
        "",
    );
    // When the backlog was in: the first sample at which every accepted event was counted.
    let enqueue_s = with
        .series
        .get("noisy.accepted")
        .and_then(|points| points.iter().find(|(_, v)| *v as u64 >= enqueued))
        .map(|(t, _)| *t);
    report.figure(
        "noisy_enqueue_s",
        "noisy tenant: seconds to enqueue it",
        enqueue_s,
        "s",
    );
    report.figure(
        "noisy_enqueue_per_s",
        "noisy tenant: enqueue rate",
        enqueue_s.map(|t| enqueued as f64 / t.max(0.25)),
        "/s",
    );
    report.figure(
        "noisy_delivered",
        "noisy tenant: delivered by the end",
        Some(delivered as f64),
        "",
    );
    report.figure(
        "noisy_backlog_end",
        "noisy tenant: backlog left in the store at the end",
        Some(enqueued.saturating_sub(delivered) as f64),
        "",
    );
    let warm = 5.0_f64.min(d / 2.0);
    let (_, b_max, _) = rss_profile(&base.series, warm);
    let (f_start, f_max, f_end) = rss_profile(&with.series, warm);
    report.figure(
        "baseline_rss_max_mib",
        "RSS, baseline, largest",
        b_max,
        "MiB",
    );
    report.figure(
        "rss_start_mib",
        &format!("RSS with the flood, at {warm:.0} s"),
        f_start,
        "MiB",
    );
    report.figure("rss_max_mib", "RSS with the flood, largest", f_max, "MiB");
    report.figure(
        "rss_end_mib",
        "RSS with the flood, at the end",
        f_end,
        "MiB",
    );
    report.figure(
        "rss_growth_mib",
        "RSS growth during the flood (largest − early)",
        f_max.zip(f_start).map(|(m, s)| m - s),
        "MiB",
    );
    report.note(
        "RSS is this whole process: sluice, the receivers and the producers; the flood's \
         backlog lives in the store, so RSS should not grow with it",
    );
    report.note(if args.full {
        "the backlog (written straight into the store, its endpoints enabled at once when it \
         was in) drains as fast as sluice can deliver it, beside the healthy tenants"
    } else {
        "the noisy tenant's endpoint answers in --slow-ms (50 ms): its lane drains far slower \
         than the flood arrives, so the backlog waits in the store and every claim must find \
         the healthy tenants' deliveries past it"
    });

    compare::keep_series(&mut report, &base, &with);
    let rss = |p: &phase::Phase| p.series.get("rss_mib").cloned().unwrap_or_default();
    report.series("baseline.rss_mib", rss(&base));
    report.series("with.rss_mib", rss(&with));
    report.series(
        "with.noisy_delivered_per_s",
        with.timeline.count_series(BAD, false),
    );
    let panels = [
        compare::latency_panel(&base, &with, "flood"),
        Panel::linear(
            "resident memory of the process",
            "MiB",
            vec![
                Line::new("RSS, baseline", rss(&base)),
                Line::new("RSS, flood", rss(&with)),
            ],
        ),
        Panel::linear(
            "the noisy tenant",
            "per second",
            vec![
                Line::new(
                    "noisy events enqueued/s",
                    watch::per_second(&with.series, "noisy.accepted"),
                ),
                Line::new("noisy deliveries/s", with.timeline.count_series(BAD, false)),
            ],
        ),
    ];
    save_chart(
        args,
        &mut report,
        &format!("flood: one tenant enqueues {backlog} events"),
        &panels,
    )?;
    Ok(report)
}
