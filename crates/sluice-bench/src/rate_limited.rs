//! `rate-limited`: an endpoint whose customer set a rate limit, offered three times it, among
//! healthy endpoints. After its burst, what it receives per second is its limit (the rest wait
//! their turn in the store, neither attempted nor shed); the healthy endpoints' latency is
//! compared with a baseline run without it.

use super::chart::{Line, Panel};
use super::harness::Tuning;
use super::phase::{self, BAD, Bad, PhaseSpec};
use super::report::{Report, ratio};
use super::{BenchArgs, compare, save_chart};

/// How far from its limit the endpoint's steady rate may be.
const TOLERANCE: f64 = 0.05;
/// How much slower the healthy p99 may be beside it than in the baseline.
const HEALTHY_P99_FACTOR: f64 = 1.2;

/// Run both phases and report.
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let healthy = args.endpoints.unwrap_or(args.sized(10, 4));
    let healthy_rate = args.rate.unwrap_or(args.sized(20.0, 10.0));
    let limit = args.limit.unwrap_or(args.sized(50.0, 20.0));
    let burst = (2.0 * limit).ceil().max(1.0) as u32;
    let offered = args.bad_rate.unwrap_or(3.0 * limit);
    let duration = args.duration(60.0);
    let spec = |label, bad| PhaseSpec {
        label,
        bad_name: "limited",
        healthy,
        healthy_rate,
        bad,
        duration,
        tuning: Tuning::default(),
    };
    let base = phase::run(args, &spec("baseline", Bad::None)).await?;
    let limited = Bad::RateLimited {
        per_second: limit,
        burst,
        rate: offered,
    };
    let with = phase::run(args, &spec("rate-limited endpoint", limited)).await?;

    let mut report = Report::new("rate-limited", args.describe());
    report.param("duration_s", duration.as_secs_f64());
    report.param("dispatchers", args.dispatchers.unwrap_or(0));
    report.param("healthy_endpoints", healthy);
    report.param("healthy_rate_per_endpoint", healthy_rate);
    report.param("limit_per_s", limit);
    report.param("burst", burst);
    report.param("limited_offered_per_s", offered);
    compare::healthy_figures(&mut report, &base, &with, "rate-limited");

    // The burst is spent in the first second; the steady rate is read after the warm-up, up to
    // the end of the load (the backlog is still waiting then, so the limit binds throughout).
    let secs = with.duration_s.floor() as usize;
    let from = with.warmup_s.max(2).min(secs.saturating_sub(1));
    let steady_s = secs.saturating_sub(from).max(1);
    let steady = with.timeline.delivered_between(BAD, from, secs) as f64 / steady_s as f64;
    let accepted = with.timeline.accepted(BAD) as f64 / with.duration_s;
    let delivered = with.timeline.delivered_total(BAD);
    report.figure(
        "limited_offered_per_s",
        "rate-limited endpoint: accepted events",
        Some(accepted),
        "/s",
    );
    report.figure(
        "limited_steady_per_s",
        &format!("rate-limited endpoint: deliveries/s from second {from} to the end of the load"),
        Some(steady),
        "/s",
    );
    let share = ratio(Some(steady), Some(limit));
    report.figure(
        "limited_steady_per_limit",
        "rate-limited endpoint: steady deliveries ÷ its limit",
        share,
        "",
    );
    report.figure(
        "limited_waiting_at_end",
        "rate-limited endpoint: accepted but not yet delivered when the load ended",
        Some(with.timeline.accepted(BAD).saturating_sub(delivered) as f64),
        "",
    );
    report.figure(
        "limited_peak_concurrency",
        "rate-limited endpoint: most requests it saw at once",
        with.bad_peak_concurrency.map(|n| n as f64),
        "",
    );
    if let Some(share) = share {
        report.verdict(
            (share - 1.0).abs() <= TOLERANCE,
            format!(
                "the rate-limited endpoint received {steady:.1}/s against its limit of {limit}/s \
                 ({:+.1} %, target within ±{:.0} %)",
                (share - 1.0) * 100.0,
                TOLERANCE * 100.0
            ),
        );
    }
    let p99 = ratio(with.healthy_ms(0.99), base.healthy_ms(0.99));
    if let Some(factor) = p99 {
        report.verdict(
            factor <= HEALTHY_P99_FACTOR,
            format!(
                "healthy p99 beside the rate-limited endpoint is {factor:.2}× the baseline's \
                 (target ≤ {HEALTHY_P99_FACTOR}×)"
            ),
        );
    }
    report.note(
        "latency = receiver arrival − the time the producer stamped into the payload just \
         before its POST; in phases of 10 s or more the first 2 s are skipped as warm-up",
    );
    report.note(
        "each phase runs on a fresh sluice; the rate-limited endpoint's backlog grows by design \
         (it is offered three times its limit): what it must not do is receive more than its \
         limit, or slow anyone else down",
    );

    compare::keep_series(&mut report, &base, &with);
    let arrivals = vec![
        Line::new(
            "rate-limited deliveries/s",
            with.timeline.count_series(BAD, false),
        ),
        Line::new("its limit", (0..=secs).map(|s| (s as f64, limit)).collect()),
    ];
    report.series("with.limited_delivered_per_s", arrivals[0].points.clone());
    let panels = [
        compare::latency_panel(&base, &with, "rate-limited"),
        Panel::linear(
            "rate-limited endpoint: what it received",
            "per second",
            arrivals,
        ),
    ];
    save_chart(
        args,
        &mut report,
        &format!("rate-limited: an endpoint limited to {limit}/s, offered {offered}/s"),
        &panels,
    )?;
    Ok(report)
}
