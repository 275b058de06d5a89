//! `blocked-broker`: a RabbitMQ destination whose broker blocks every publisher (its memory
//! alarm raised for the whole load: `rabbitmqctl set_vm_memory_high_watermark 0`, cleared
//! afterwards) with steady arrivals, next to healthy HTTP endpoints, on a small pool
//! (`--concurrency 16` by default). Each attempt to it ends at the broker's `connection.blocked`
//! or its deadline; its lane caps how many pool slots it holds, so healthy latency stays at
//! baseline. Needs RabbitMQ at 127.0.0.1:5672 (guest/guest) and `rabbitmqctl`.

use super::phase::{Bad, SmallPool};
use super::report::Report;
use super::{BenchArgs, compare, save_chart, watch};

/// Run both phases and report.
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let pair = SmallPool::run(args, "blocked", "blocked broker", |rate| {
        Bad::BlockedBroker { rate }
    })
    .await?;
    let (base, with) = (&pair.base, &pair.with);
    let mut report = Report::new("blocked-broker", args.describe());
    pair.params(&mut report, "blocked");
    compare::healthy_figures(&mut report, base, with, "blocked");
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
    compare::keep_series(&mut report, base, with);
    let panels = [compare::latency_panel(base, with, "blocked")];
    save_chart(
        args,
        &mut report,
        &format!(
            "blocked-broker: a blocked RabbitMQ at {}/s, pool of {}",
            pair.bad_rate, pair.concurrency
        ),
        &panels,
    )?;
    Ok(report)
}
