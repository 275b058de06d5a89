//! `blocked-broker`: a RabbitMQ destination whose broker blocks every publisher (its memory
//! alarm raised for the whole load: `rabbitmqctl set_vm_memory_high_watermark 0`, cleared
//! afterwards) with steady arrivals, next to healthy HTTP endpoints, on a small pool
//! (`--concurrency 16` by default). Each attempt to it ends at the broker's `connection.blocked`
//! or its deadline; its lane caps how many pool slots it holds, so healthy latency stays at
//! baseline. Needs RabbitMQ at 127.0.0.1:5672 (guest/guest) and `rabbitmqctl`.

use super::harness::Tuning;
use super::phase::{self, Bad, PhaseSpec};
use super::report::Report;
use super::{BenchArgs, compare, save_chart, watch};

/// A small pool, so that a blocked broker could exhaust it if its lane did not hold it.
const DEFAULT_CONCURRENCY: u32 = 16;

/// Run both phases and report.
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let healthy = args.endpoints.unwrap_or(args.sized(20, 4));
    let healthy_rate = args.rate.unwrap_or(args.sized(20.0, 10.0));
    let blocked_rate = args.bad_rate.unwrap_or(args.sized(50.0, 20.0));
    let concurrency = args.concurrency.unwrap_or(DEFAULT_CONCURRENCY);
    let duration = args.duration(30.0);
    let spec = |label, bad| PhaseSpec {
        label,
        bad_name: "blocked",
        healthy,
        healthy_rate,
        bad,
        duration,
        tuning: Tuning {
            concurrency: Some(concurrency),
            ..Tuning::default()
        },
    };
    let base = phase::run(args, &spec("baseline", Bad::None)).await?;
    let blocked = Bad::BlockedBroker { rate: blocked_rate };
    let with = phase::run(args, &spec("blocked broker", blocked)).await?;

    let mut report = Report::new("blocked-broker", args.describe());
    report.param("duration_s", duration.as_secs_f64());
    report.param("healthy_endpoints", healthy);
    report.param("healthy_rate_per_endpoint", healthy_rate);
    report.param("blocked_offered_per_s", blocked_rate);
    report.param("concurrency", concurrency);
    compare::healthy_figures(&mut report, &base, &with, "blocked");
    let d = with.duration_s;
    report.figure(
        "pool_free_min",
        "pool: fewest free slots seen",
        watch::min(&with.series, "free_slots"),
        "slots",
    );
    report.figure(
        "blocked_lane_held_max",
        "blocked broker: most lane slots held",
        watch::max(&with.series, "bad.lane_in_use"),
        "slots",
    );
    report.figure(
        "blocked_lane_size",
        "blocked broker: lane size",
        watch::max(&with.series, "bad.lane_size"),
        "slots",
    );
    report.figure(
        "blocked_governor_min",
        "blocked broker: lowest governor limit",
        watch::min(&with.series, "bad.governor"),
        "",
    );
    report.figure(
        "blocked_failed_per_s",
        "blocked broker: failed attempts (broker_blocked, timeout_total)",
        watch::last(&with.series, "bad.failed_total").map(|n| n / d),
        "/s",
    );
    report.figure(
        "blocked_delivered_during",
        "blocked broker: messages that reached the queue while blocked",
        Some(with.bad_delivered_during_load as f64),
        "",
    );
    report.note(
        "the alarm is cleared when the load ends; the blocked destination's messages are \
         delivered by their retries after the phase, which this scenario does not wait for",
    );
    compare::keep_series(&mut report, &base, &with);
    let panels = [compare::latency_panel(&base, &with, "blocked")];
    save_chart(
        args,
        &mut report,
        &format!("blocked-broker: a blocked RabbitMQ at {blocked_rate}/s, pool of {concurrency}"),
        &panels,
    )?;
    Ok(report)
}
