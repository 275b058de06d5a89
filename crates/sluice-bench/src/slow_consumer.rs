//! `slow-consumer`: one endpoint answering in seconds at a high offered rate, among
//! many healthy ones. Its lane bounds what it can hold, the rest is shed and requeued; the
//! healthy endpoints' enqueue→delivery latency is compared with a baseline run without it.

use std::time::Duration;

use super::chart::{Line, Panel};
use super::harness::Tuning;
use super::phase::{self, BAD, Bad, PhaseSpec};
use super::report::{Report, ratio};
use super::{BenchArgs, compare, save_chart, watch};

/// Run both phases and report.
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let healthy = args.endpoints.unwrap_or(args.sized(20, 4));
    let healthy_rate = args.rate.unwrap_or(args.sized(20.0, 10.0));
    let slow_ms = args.slow_ms.unwrap_or(args.sized(2000, 500));
    let slow_rate = args.bad_rate.unwrap_or(args.sized(100.0, 40.0));
    let duration = args.duration(30.0);
    let spec = |label, bad| PhaseSpec {
        label,
        bad_name: "slow",
        healthy,
        healthy_rate,
        bad,
        duration,
        tuning: Tuning::default(),
    };
    let base = phase::run(args, &spec("baseline", Bad::None)).await?;
    let slow = Bad::Slow {
        delay: Duration::from_millis(slow_ms),
        rate: slow_rate,
    };
    let with = phase::run(args, &spec("slow endpoint", slow)).await?;

    let mut report = Report::new("slow-consumer", args.describe());
    report.param("duration_s", duration.as_secs_f64());
    report.param("healthy_endpoints", healthy);
    report.param("healthy_rate_per_endpoint", healthy_rate);
    report.param("slow_ms", slow_ms);
    report.param("slow_offered_per_s", slow_rate);
    compare::healthy_figures(&mut report, &base, &with, "slow");

    let d = with.duration_s;
    let offered = with.timeline.accepted(BAD) as f64 / d;
    let delivered = with.timeline.delivered_total(BAD) as f64 / d;
    let shed_rate = with.bad_shed_rate();
    let lane_size = watch::max(&with.series, "bad.lane_size");
    let lane_mean = watch::mean(&with.series, "bad.lane_in_use");
    report.figure(
        "slow_offered_per_s",
        "slow endpoint: accepted events",
        Some(offered),
        "/s",
    );
    report.figure(
        "slow_delivered_per_s",
        "slow endpoint: deliveries (bounded by lane ÷ response time)",
        Some(delivered),
        "/s",
    );
    report.figure(
        "slow_shed_per_s",
        "slow endpoint: sheds (requeued, no attempt used)",
        shed_rate,
        "/s",
    );
    report.figure(
        "slow_shed_per_offered",
        "slow endpoint: sheds per accepted event",
        ratio(shed_rate, Some(offered)),
        "",
    );
    report.figure(
        "slow_lane_size",
        "slow endpoint: lane size",
        lane_size,
        "slots",
    );
    report.figure(
        "slow_lane_in_use_mean",
        "slow endpoint: lane slots held, mean",
        lane_mean,
        "slots",
    );
    report.figure(
        "slow_lane_occupancy",
        "slow endpoint: lane occupancy (mean held ÷ size)",
        ratio(lane_mean, lane_size),
        "",
    );
    report.figure(
        "slow_peak_concurrency",
        "slow endpoint: most requests it saw at once",
        with.bad_peak_concurrency.map(|n| n as f64),
        "",
    );
    report.figure(
        "slow_littles_law_slots",
        "slots the slow endpoint would need (rate × response time)",
        Some(slow_rate * slow_ms as f64 / 1000.0),
        "slots",
    );
    report.figure(
        "peak_rss_mib",
        "peak RSS of the bench process",
        with.peak_rss_mib,
        "MiB",
    );
    report.note(
        "latency = receiver arrival − the time the producer stamped into the payload just \
         before its POST; in phases of 10 s or more the first 2 s are skipped as warm-up",
    );
    report.note(
        "each phase runs on a fresh sluice; the slow endpoint's backlog grows by design: \
         its lane caps what it can hold, and its customer's backlog is its own",
    );

    compare::keep_series(&mut report, &base, &with);
    let occupancy = vec![
        Line::new(
            "slow lane slots held",
            with.series
                .get("bad.lane_in_use")
                .cloned()
                .unwrap_or_default(),
        ),
        Line::new(
            "slow lane size",
            with.series
                .get("bad.lane_size")
                .cloned()
                .unwrap_or_default(),
        ),
        Line::new(
            "healthy lane slots held (one endpoint)",
            with.series
                .get("healthy.lane_in_use")
                .cloned()
                .unwrap_or_default(),
        ),
    ];
    let shed = vec![
        Line::new(
            "slow sheds/s",
            watch::per_second(&with.series, "bad.shed_total"),
        ),
        Line::new("slow deliveries/s", with.timeline.count_series(BAD, false)),
    ];
    report.series("with.slow_shed_per_s", shed[0].points.clone());
    report.series("with.slow_lane_in_use", occupancy[0].points.clone());
    let panels = [
        compare::latency_panel(&base, &with, "slow"),
        Panel::linear("slow endpoint: lane occupancy", "slots", occupancy),
        Panel::linear("slow endpoint: shed and delivered", "per second", shed),
    ];
    save_chart(
        args,
        &mut report,
        &format!("slow-consumer: one endpoint answering in {slow_ms} ms at {slow_rate}/s"),
        &panels,
    )?;
    Ok(report)
}
