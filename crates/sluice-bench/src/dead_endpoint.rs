//! `dead-endpoint`: a blackhole endpoint (accepts the connection, never answers) with
//! steady arrivals, next to healthy endpoints, on a small pool (`--concurrency 16` by default).
//! Each attempt to it hangs until the read timeout; its lane caps how many pool slots it can hold,
//! so the pool is never exhausted and healthy throughput and latency stay at baseline.

use super::chart::{Line, Panel};
use super::phase::{BAD, Bad, HEALTHY, SmallPool};
use super::report::Report;
use super::{BenchArgs, compare, save_chart, watch};

/// Run both phases and report.
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let pair = SmallPool::run(args, "dead", "dead endpoint", |rate| Bad::Blackhole {
        rate,
    })
    .await?;
    let (base, with, concurrency) = (&pair.base, &pair.with, pair.concurrency);
    let dead_rate = pair.bad_rate;
    let mut report = Report::new("dead-endpoint", args.describe());
    pair.params(&mut report, "dead");
    compare::healthy_figures(&mut report, base, with, "dead");

    let d = with.duration_s;
    let free = with.series.get("free_slots").cloned().unwrap_or_default();
    let exhausted = free.iter().filter(|(_, v)| *v <= 0.0).count();
    report.figure(
        "pool_size",
        "pool (global concurrency)",
        Some(f64::from(concurrency)),
        "slots",
    );
    report.figure(
        "pool_free_min",
        "pool: fewest free slots seen",
        watch::min(&with.series, "free_slots"),
        "slots",
    );
    report.figure(
        "pool_free_mean",
        "pool: free slots, mean",
        watch::mean(&with.series, "free_slots"),
        "slots",
    );
    report.figure(
        "pool_exhausted_samples",
        &format!("pool: samples with no free slot (of {})", free.len()),
        Some(exhausted as f64),
        "",
    );
    report.figure(
        "dead_lane_held_max",
        "dead endpoint: most lane slots held",
        watch::max(&with.series, "bad.lane_in_use"),
        "slots",
    );
    report.figure(
        "dead_lane_size",
        "dead endpoint: lane size (fairness ceiling of the pool)",
        watch::max(&with.series, "bad.lane_size"),
        "slots",
    );
    report.figure(
        "dead_governor_min",
        "dead endpoint: lowest governor limit",
        watch::min(&with.series, "bad.governor"),
        "",
    );
    report.figure(
        "dead_accepted_per_s",
        "dead endpoint: accepted events",
        Some(with.timeline.accepted(BAD) as f64 / d),
        "/s",
    );
    report.figure(
        "dead_failed_per_s",
        "dead endpoint: failed attempts (timeouts)",
        watch::last(&with.series, "bad.failed_total").map(|n| n / d),
        "/s",
    );
    report.figure(
        "dead_shed_per_s",
        "dead endpoint: sheds",
        with.bad_shed_rate(),
        "/s",
    );
    report.figure(
        "dead_connections_peak",
        "dead endpoint: most connections held open at once",
        with.bad_peak_concurrency.map(|n| n as f64),
        "",
    );
    report.note(
        "the blackhole accepts and reads, never answers: each attempt ends at the read timeout \
         (10 s default), so within a 30 s phase only the first few attempts have even failed",
    );
    report.note(
        "latency: receiver arrival − producer's stamp; in phases of 10 s or more the first \
         2 s are skipped as warm-up",
    );

    compare::keep_series(&mut report, base, with);
    report.series("with.pool_free_slots", free.clone());
    let throughput = vec![
        Line::new(
            "healthy deliveries/s, baseline",
            base.timeline.count_series(HEALTHY, false),
        ),
        Line::new(
            "healthy deliveries/s, with dead",
            with.timeline.count_series(HEALTHY, false),
        ),
    ];
    let pool = vec![
        Line::new("pool free slots, with dead", free),
        Line::new(
            "dead lane slots held",
            with.series
                .get("bad.lane_in_use")
                .cloned()
                .unwrap_or_default(),
        ),
        Line::new(
            "dead governor limit",
            with.series.get("bad.governor").cloned().unwrap_or_default(),
        ),
    ];
    let panels = [
        compare::latency_panel(base, with, "dead"),
        Panel::linear("healthy throughput", "deliveries per second", throughput),
        Panel::linear(
            "the pool and the dead endpoint's share of it",
            "slots",
            pool,
        ),
    ];
    save_chart(
        args,
        &mut report,
        &format!("dead-endpoint: a blackhole at {dead_rate}/s, pool of {concurrency}"),
        &panels,
    )?;
    Ok(report)
}
