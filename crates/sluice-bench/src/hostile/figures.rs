//! The figures and verdicts of `hostile` (their arithmetic in [`super::verdicts`]): B's latency beside A against alone, A's attempts and
//! share of the pool, duplicates, and the token answer's memory.

use super::run::Outcome;
use super::token_answer;
use super::verdicts::{latency_holds, watch_max, watch_mean};
use super::{FACTOR, FLOOR_MS, Hostile, MAX_SHARE, RSS_TARGET_BYTES, Sizes};
use crate::report::{Report, format_value, percentile, ratio};

/// The figures and verdicts of the four phases.
pub(super) fn phases(report: &mut Report, sizes: Sizes, phases: &[Outcome]) {
    let Some(alone) = phases.iter().find(|o| !o.spec.with_a()) else {
        return;
    };
    let alone_p99 = alone.b_ms(0.99);
    for o in phases {
        let (key, label, a) = (o.spec.key, o.spec.label, o.spec.a_label);
        for (q, name) in [(0.5, "p50"), (0.99, "p99"), (1.0, "max")] {
            report.figure(
                &format!("b_{key}_{name}_ms"),
                &format!("B {label}: accepted → received {name}"),
                o.b_ms(q),
                "ms",
            );
        }
        if o.spec.with_a() {
            report.figure(
                &format!("b_{key}_p99_factor"),
                &format!("B {label}: p99 ÷ alone"),
                ratio(o.b_ms(0.99), alone_p99),
                "×",
            );
        }
        report.figure(
            &format!("b_{key}_made"),
            &format!("B {label}: deliveries made (of {} accepted)", o.b_accepted),
            Some(o.b_made as f64),
            "",
        );
        report.figure(
            &format!("duplicates_{key}"),
            &format!("B {label}: webhook-ids received twice (any receiver)"),
            Some(o.duplicates as f64),
            "",
        );
        report.figure(
            &format!("in_flight_{key}_max"),
            &format!("pool, B {label}: attempts in flight, most seen"),
            watch_max(&o.in_flight),
            "",
        );
        if !o.spec.with_a() {
            continue;
        }
        report.figure(
            &format!("a_{key}_in_flight_max"),
            &format!("{a}: deliveries in flight or at a lane, most seen"),
            watch_max(&o.a_in_flight),
            "",
        );
        report.figure(
            &format!("a_{key}_in_flight_mean"),
            &format!("{a}: deliveries in flight or at a lane, mean"),
            watch_mean(&o.a_in_flight),
            "",
        );
        report.figure(
            &format!("a_{key}_received"),
            &format!("{a}: requests its endpoints received"),
            Some(o.a_received as f64),
            "",
        );
        report.figure(
            &format!("a_{key}_attempts"),
            &format!("{a}: attempts made"),
            Some(o.a_attempts.values().sum::<u64>() as f64),
            "",
        );
        for (q, name) in [(0.5, "p50"), (1.0, "max")] {
            report.figure(
                &format!("a_{key}_attempt_{name}_ms"),
                &format!("{a}: attempt duration {name}"),
                percentile(&o.a_attempt_ms, q),
                "ms",
            );
        }
        for (kind, n) in &o.a_attempts {
            report.figure(
                &format!("a_{key}_attempts_{kind}"),
                &format!("{a}: attempts ended as {kind}"),
                Some(*n as f64),
                "",
            );
        }
        if let Some(n) = o.token_requests {
            report.figure(
                &format!("a_{key}_token_requests"),
                &format!("{a}: requests its token URL got"),
                Some(n as f64),
                "",
            );
        }
    }
    for o in phases.iter().filter(|o| o.spec.with_a()) {
        let beside = o.b_ms(0.99);
        report.verdict(
            latency_holds(beside, alone_p99),
            format!(
                "B's p99 {} is within {FACTOR}× its p99 alone or under {FLOOR_MS} ms ({} against \
                 {}: {})",
                o.spec.label,
                shown(beside, " ms"),
                shown(alone_p99, " ms"),
                shown(ratio(beside, alone_p99), "×"),
            ),
        );
        report.verdict(
            o.b_made >= o.b_accepted,
            format!(
                "every B delivery is made {} ({} of {})",
                o.spec.label, o.b_made, o.b_accepted
            ),
        );
    }
    if let Some(o) = phases
        .iter()
        .find(|o| matches!(o.spec.hostile, Hostile::Slow { max_share: Some(_) }))
        && let Some(most) = watch_max(&o.a_in_flight)
    {
        let limit = f64::from(sluice::fairness::ceiling_slots(
            MAX_SHARE,
            sizes.concurrency,
        ));
        report.verdict(
            most <= limit,
            format!(
                "A never holds more than its ceiling, {limit} of {} slots (most seen: {most})",
                sizes.concurrency
            ),
        );
    }
    let counts: Vec<String> = phases
        .iter()
        .map(|o| format!("{} {}", o.spec.key, o.duplicates))
        .collect();
    report.invariant(
        phases.iter().all(|o| o.duplicates == 0),
        format!(
            "no webhook-id is received twice at any receiver ({})",
            counts.join(", ")
        ),
    );
    if let Some(o) = phases
        .iter()
        .find(|o| matches!(o.spec.hostile, Hostile::HangingToken))
    {
        report.invariant(
            o.a_received == 0,
            format!(
                "A's endpoints receive nothing while their token URL never answers ({} requests)",
                o.a_received
            ),
        );
    }
}

/// The figures and verdicts of the token answer phase.
pub(super) fn token_answer(
    report: &mut Report,
    sizes: token_answer::Sizes,
    t: &token_answer::Outcome,
) {
    report.figure(
        "token_answer_rss_at_rest_mib",
        "token answer: the sluice process's peak RSS before its messages",
        t.at_rest_mib,
        "MiB",
    );
    report.figure(
        "token_answer_rss_peak_mib",
        &format!(
            "token answer: the sluice process's peak RSS beside a {} MB token answer",
            sizes.answer_bytes / 1_000_000
        ),
        t.peak_mib,
        "MiB",
    );
    report.figure(
        "token_answer_requests",
        "token answer: requests the token URL got",
        Some(t.token_requests as f64),
        "",
    );
    report.figure(
        "token_answer_bytes_sent_mb",
        "token answer: bytes of answers handed to the connections",
        Some(t.answer_bytes_sent as f64 / 1e6),
        "MB",
    );
    for (kind, n) in &t.attempts {
        report.figure(
            &format!("token_answer_attempts_{kind}"),
            &format!("token answer: attempts ended as {kind}"),
            Some(*n as f64),
            "",
        );
    }
    report.figure(
        "token_answer_received",
        "token answer: requests the endpoints received",
        Some(t.received as f64),
        "",
    );
    let target_mib = RSS_TARGET_BYTES / (1024.0 * 1024.0);
    report.verdict(
        t.peak_mib.is_some_and(|p| p < target_mib),
        format!(
            "the sluice process stays under 200 MB ({target_mib:.1} MiB) beside a {} MB token \
             answer (peak {})",
            sizes.answer_bytes / 1_000_000,
            shown(t.peak_mib, " MiB")
        ),
    );
    report.invariant(
        t.token_requests > 0,
        format!(
            "the token URL with the huge answer was asked ({} requests)",
            t.token_requests
        ),
    );
}

/// `v` with its unit, or `n/a`.
fn shown(v: Option<f64>, unit: &str) -> String {
    v.map_or("n/a".to_owned(), |v| format!("{}{unit}", format_value(v)))
}
