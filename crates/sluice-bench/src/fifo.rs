//! `fifo`: FIFO endpoints beside healthy ones. Each FIFO endpoint takes one delivery at a time,
//! in acceptance order, so its throughput is one round trip (attempt, settle, claim) per
//! delivery; the scenario measures what each delivers per second, reads the attempts back from
//! the store to check the order, and compares the healthy endpoints' latency with a baseline
//! without the FIFO tenant and with a control: the same tenant, endpoints and traffic, unordered.

use super::chart::{Line, Panel};
use super::harness::Tuning;
use super::phase::{self, BAD, Bad, PhaseSpec};
use super::report::{Report, ratio};
use super::{BenchArgs, compare, save_chart};

/// How much slower the healthy p99 may be beside the FIFO endpoints than in the baseline.
const HEALTHY_P99_FACTOR: f64 = 1.2;

/// Run both phases and report.
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let healthy = args.endpoints.unwrap_or(args.sized(10, 4));
    let healthy_rate = args.rate.unwrap_or(args.sized(20.0, 10.0));
    let endpoints = args.backlog_endpoints.unwrap_or(args.sized(10, 2));
    let offered = args.bad_rate.unwrap_or(args.sized(100.0, 50.0));
    let duration = args.duration(30.0);
    let spec = |label, bad| PhaseSpec {
        label,
        bad_name: "fifo",
        healthy,
        healthy_rate,
        bad,
        duration,
        tuning: Tuning::default(),
    };
    let base = phase::run(args, &spec("baseline", Bad::None)).await?;
    let tenant = |ordered| Bad::Fifo {
        endpoints,
        ordered,
        rate: offered,
    };
    let control = phase::run(args, &spec("the same endpoints unordered", tenant(false))).await?;
    let with = phase::run(args, &spec("FIFO endpoints", tenant(true))).await?;

    let mut report = Report::new("fifo", args.describe());
    report.param("duration_s", duration.as_secs_f64());
    report.param("dispatchers", args.dispatchers.unwrap_or(0));
    report.param("healthy_endpoints", healthy);
    report.param("healthy_rate_per_endpoint", healthy_rate);
    report.param("fifo_endpoints", endpoints);
    report.param("fifo_offered_messages_per_s", offered);
    compare::healthy_figures(&mut report, &base, &with, "FIFO");

    let secs = with.duration_s.floor() as usize;
    let from = with.warmup_s.max(2).min(secs.saturating_sub(1));
    let steady_s = secs.saturating_sub(from).max(1);
    let per_endpoint = with.timeline.delivered_between(BAD, from, secs) as f64
        / steady_s as f64
        / endpoints.max(1) as f64;
    let accepted = with.timeline.accepted(BAD);
    let delivered = with.timeline.delivered_total(BAD);
    report.figure(
        "fifo_per_endpoint_per_s",
        &format!("FIFO endpoint: deliveries/s each, from second {from} to the end of the load"),
        Some(per_endpoint),
        "/s",
    );
    report.figure(
        "fifo_round_trip_ms",
        "FIFO endpoint: one delivery's turn (1000 ÷ deliveries/s)",
        (per_endpoint > 0.0).then(|| 1000.0 / per_endpoint),
        "ms",
    );
    report.figure(
        "fifo_all_per_s",
        "FIFO endpoints together: deliveries/s",
        Some(per_endpoint * endpoints as f64),
        "/s",
    );
    report.figure(
        "fifo_waiting_at_end",
        "FIFO endpoints: deliveries accepted but not yet made when the load ended",
        Some((accepted * endpoints as u64).saturating_sub(delivered) as f64),
        "",
    );
    report.figure(
        "fifo_peak_concurrency",
        "FIFO endpoints: most requests one receiver saw at once",
        with.bad_peak_concurrency.map(|n| n as f64),
        "",
    );
    // The claim's own time over the load: a FIFO head is one claim per delivery.
    if let (Some((_, first)), Some((_, last))) =
        (with.claim_samples.first(), with.claim_samples.last())
    {
        let claims = last.delta(first);
        for (q, key) in [(0.5, "p50"), (0.99, "p99")] {
            report.figure(
                &format!("fifo_claim_{key}_ms"),
                &format!("claim time {key}, with the FIFO endpoints"),
                claims.quantile(q).map(|s| s * 1e3),
                "ms",
            );
        }
    }
    if let Some(order) = with.fifo_order {
        report.figure(
            "fifo_attempts_checked",
            "FIFO endpoints: attempts read back from the store",
            Some(order.attempts as f64),
            "",
        );
        report.invariant(
            order.violations == 0 && order.attempts > 0,
            format!(
                "{} attempts on {endpoints} FIFO endpoints, {} out of order or overlapping \
                 (target 0)",
                order.attempts, order.violations
            ),
        );
    }
    if let Some(peak) = with.bad_peak_concurrency {
        report.invariant(
            peak <= 1,
            format!("at most {peak} request at once on each FIFO endpoint (target 1)"),
        );
    }
    // What FIFO itself costs the others: the same traffic to the same endpoints unordered
    // is the control (the extra load alone moves the healthy p99 on a small machine).
    report.figure(
        "control_healthy_p99_ms",
        "healthy p99 enqueue→delivery beside the same endpoints unordered",
        control.healthy_ms(0.99),
        "ms",
    );
    report.figure(
        "control_per_endpoint_per_s",
        "the same endpoints unordered: deliveries/s each",
        Some(
            control.timeline.delivered_between(BAD, from, secs) as f64
                / steady_s as f64
                / endpoints.max(1) as f64,
        ),
        "/s",
    );
    let p99 = ratio(with.healthy_ms(0.99), control.healthy_ms(0.99));
    report.figure(
        "healthy_p99_factor_vs_control",
        "healthy p99 beside FIFO ÷ beside the same endpoints unordered",
        p99,
        "x",
    );
    if let Some(factor) = p99 {
        report.verdict(
            factor <= HEALTHY_P99_FACTOR,
            format!(
                "healthy p99 beside {endpoints} busy FIFO endpoints is {factor:.2}× its p99 \
                 beside the same endpoints unordered (target ≤ {HEALTHY_P99_FACTOR}×)"
            ),
        );
    }
    report.note(
        "latency = receiver arrival − the time the producer stamped into the payload just \
         before its POST; in phases of 10 s or more the first 2 s are skipped as warm-up",
    );
    report.note(
        "a FIFO endpoint delivers one round trip at a time: offered more, its backlog grows \
         and the figure is that throughput; offered less, it keeps up and the figure is what it \
         was offered; the order is checked on every attempt the store recorded",
    );

    compare::keep_series(&mut report, &base, &with);
    let delivered_line = Line::new(
        "FIFO deliveries/s (all endpoints)",
        with.timeline.count_series(BAD, false),
    );
    report.series("with.fifo_delivered_per_s", delivered_line.points.clone());
    let panels = [
        compare::latency_panel(&base, &with, "FIFO"),
        Panel::linear(
            "FIFO endpoints: what they received",
            "per second",
            vec![delivered_line],
        ),
    ];
    save_chart(
        args,
        &mut report,
        &format!("fifo: {endpoints} FIFO endpoints offered {offered} messages/s each"),
        &panels,
    )?;
    Ok(report)
}
