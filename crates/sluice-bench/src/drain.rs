//! How a backlog drained (`flood --full`): the rate, the store's CPU per delivery and the
//! claim time over its first and its last 10 seconds, and resident memory while it drained.
//! A drain whose claims cost more as rows settle shows as a last window slower than the first.

use super::backlog::drain_windows;
use super::phase::{BAD, HEALTHY, Phase};
use super::report::{Report, ratio};
use super::watch;

/// Seconds in each window compared.
const WINDOW: usize = 10;

/// Add the drain figures of `with` (a backlog phase) to `report`.
pub(crate) fn figures(report: &mut Report, with: &Phase) {
    report.figure(
        "backlog_setup_s",
        "backlog: seconds to write it into the store and enable its endpoints",
        with.backlog_setup_s,
        "s",
    );
    let per_second = with.timeline.count_series(BAD, false);
    let Some((first, last)) = drain_windows(&per_second, 1, WINDOW) else {
        report.note("the backlog was not drained at all: no drain figures");
        return;
    };
    let drained = with.timeline.delivered_total(BAD);
    let left = with.timeline.accepted(BAD).saturating_sub(drained);
    report.figure(
        "backlog_left",
        "backlog: left undelivered at the end",
        Some(left as f64),
        "",
    );
    let rate =
        |(a, b): (usize, usize)| with.timeline.delivered_between(BAD, a, b) as f64 / (b - a) as f64;
    let store_ms = |(a, b): (usize, usize)| {
        let n = with.timeline.delivered_between(BAD, a, b)
            + with.timeline.delivered_between(HEALTHY, a, b);
        let cpu = watch::increase(&with.series, "store_cpu_s", a as f64, b as f64)?;
        (n > 0).then(|| cpu * 1000.0 / n as f64)
    };
    let claim_p99 = |(a, b): (usize, usize)| {
        let at = |t: f64| {
            with.claim_samples
                .iter()
                .min_by(|x, y| (x.0 - t).abs().total_cmp(&(y.0 - t).abs()))
                .map(|(_, h)| h)
        };
        let (from, to) = (at(a as f64)?, at(b as f64)?);
        to.delta(from).quantile(0.99).map(|s| s * 1e3)
    };
    let store = if with.postgres {
        "PostgreSQL server CPU"
    } else {
        "store CPU (SQLite driver threads)"
    };
    let mut pair =
        |key: &str, label: &str, unit: &'static str, f: &dyn Fn((usize, usize)) -> Option<f64>| {
            let (x, y) = (f(first), f(last));
            report.figure(
                &format!("drain_{key}_first"),
                &format!("drain: {label}, first {WINDOW} s"),
                x,
                unit,
            );
            report.figure(
                &format!("drain_{key}_last"),
                &format!("drain: {label}, last {WINDOW} s"),
                y,
                unit,
            );
            report.figure(
                &format!("drain_{key}_ratio"),
                &format!("drain: {label}, last ÷ first"),
                ratio(y, x),
                "x",
            );
        };
    pair("rate", "backlog deliveries/s", "/s", &|w| Some(rate(w)));
    pair(
        "store_ms",
        &format!("{store} per delivery"),
        "ms",
        &store_ms,
    );
    pair("claim_p99", "claim p99", "ms", &claim_p99);
    let rss = |(a, b): (usize, usize)| {
        with.series.get("rss_mib").and_then(|points| {
            points
                .iter()
                .filter(|(t, _)| *t >= a as f64 && *t <= b as f64)
                .map(|(_, v)| *v)
                .reduce(f64::max)
        })
    };
    pair("rss", "RSS, largest", "MiB", &rss);
    report.figure(
        "drain_s",
        "drain: seconds from the first to the last backlog delivery",
        Some((last.1 - first.0) as f64),
        "s",
    );
}
