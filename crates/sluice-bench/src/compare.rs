//! Healthy customers with and without a bad one: the latency figures, the factor between them,
//! and the chart panels every baseline-vs-bad scenario shares.

use super::chart::{Line, Panel};
use super::phase::{HEALTHY, Phase};
use super::report::{Report, ratio};
use super::timeline::ms;

/// The quantiles compared, with their names.
pub(crate) const QUANTILES: [(f64, &str); 3] = [(0.5, "p50"), (0.95, "p95"), (0.99, "p99")];

/// Healthy enqueue→delivery quantiles in both phases and their factor, healthy delivery rates,
/// and what was left undelivered.
pub(crate) fn healthy_figures(report: &mut Report, base: &Phase, with: &Phase, bad: &str) {
    for (q, name) in QUANTILES {
        let b = base.healthy_ms(q);
        let w = with.healthy_ms(q);
        report.figure(
            &format!("baseline_healthy_{name}_ms"),
            &format!("healthy {name} enqueue→delivery, baseline"),
            b,
            "ms",
        );
        report.figure(
            &format!("healthy_{name}_ms"),
            &format!("healthy {name} enqueue→delivery, with the {bad} endpoint"),
            w,
            "ms",
        );
        report.figure(
            &format!("healthy_{name}_factor"),
            &format!("healthy {name} factor (with {bad} ÷ baseline)"),
            ratio(w, b),
            "x",
        );
    }
    // Where the time goes: the POST (ingest, group commit) share of the latency.
    for (q, name) in [(0.5, "p50"), (0.99, "p99")] {
        for (phase, key, label) in [(base, "baseline_", "baseline"), (with, "", bad)] {
            report.figure(
                &format!("{key}healthy_ingest_{name}_ms"),
                &format!("healthy {name} POST→202 (ingest share), {label}"),
                phase.timeline.ingest_latency(HEALTHY).quantile(q).map(ms),
                "ms",
            );
        }
    }
    report.figure(
        "baseline_healthy_delivered_per_s",
        "healthy deliveries, baseline",
        Some(base.healthy_rate()),
        "/s",
    );
    report.figure(
        "healthy_delivered_per_s",
        &format!("healthy deliveries, with the {bad} endpoint"),
        Some(with.healthy_rate()),
        "/s",
    );
    report.figure(
        "healthy_undelivered",
        &format!("healthy accepted but undelivered at the end, with the {bad} endpoint"),
        Some(with.healthy_undelivered as f64),
        "",
    );
    store_figures(report, base, with, bad);
    if with.timeline.errors(HEALTHY) + base.timeline.errors(HEALTHY) > 0 {
        report.note(format!(
            "{} healthy POSTs failed (baseline {})",
            with.timeline.errors(HEALTHY),
            base.timeline.errors(HEALTHY)
        ));
    }
}

/// The store's CPU per healthy delivery with and without the bad endpoint, their factor, and
/// with it over the first and the last sixth of the load (at least 10 s each), so drift over a
/// long run shows.
fn store_figures(report: &mut Report, base: &Phase, with: &Phase, bad: &str) {
    let store = if with.postgres {
        "PostgreSQL server CPU"
    } else {
        "store CPU (SQLite driver threads)"
    };
    let (b, w) = (base.store_ms_per_healthy(), with.store_ms_per_healthy());
    report.figure(
        "baseline_store_ms_per_healthy",
        &format!("{store} per healthy delivery, baseline"),
        b,
        "ms",
    );
    report.figure(
        "store_ms_per_healthy",
        &format!("{store} per healthy delivery, with the {bad} endpoint"),
        w,
        "ms",
    );
    report.figure(
        "store_per_healthy_factor",
        &format!("{store} per healthy delivery factor (with {bad} ÷ baseline)"),
        ratio(w, b),
        "x",
    );
    let secs = with.duration_s.floor() as usize;
    let window = (secs / 6).max(10);
    if secs >= 2 * window {
        let first = with.store_ms_per_healthy_between(with.warmup_s, with.warmup_s + window);
        let last = with.store_ms_per_healthy_between(secs - window, secs);
        report.figure(
            "store_ms_per_healthy_first",
            &format!("{store} per healthy delivery with the {bad} endpoint, first {window} s"),
            first,
            "ms",
        );
        report.figure(
            "store_ms_per_healthy_last",
            &format!("{store} per healthy delivery with the {bad} endpoint, last {window} s"),
            last,
            "ms",
        );
        report.figure(
            "store_per_healthy_drift",
            "its drift (last ÷ first)",
            ratio(last, first),
            "x",
        );
    }
}

/// The chart panel of healthy latency over time, baseline vs with the bad endpoint.
pub(crate) fn latency_panel(base: &Phase, with: &Phase, bad: &str) -> Panel {
    let mut lines = Vec::new();
    for (phase, label) in [(base, "baseline"), (with, bad)] {
        for (q, name) in [(0.5, "p50"), (0.99, "p99")] {
            lines.push(Line::new(
                format!("healthy {name}, {label}"),
                phase.timeline.quantile_series(HEALTHY, q),
            ));
        }
    }
    Panel::log(
        "healthy endpoints: enqueue→delivery latency per second",
        "ms (log)",
        lines,
    )
}

/// Keep the healthy latency series of both phases in the JSON output.
pub(crate) fn keep_series(report: &mut Report, base: &Phase, with: &Phase) {
    for (phase, prefix) in [(base, "baseline"), (with, "with")] {
        for (q, name) in QUANTILES {
            report.series(
                &format!("{prefix}.healthy_{name}_ms"),
                phase.timeline.quantile_series(HEALTHY, q),
            );
        }
        report.series(
            &format!("{prefix}.healthy_delivered_per_s"),
            phase.timeline.count_series(HEALTHY, false),
        );
    }
}
