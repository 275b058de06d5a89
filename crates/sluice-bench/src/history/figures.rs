//! `history`'s report: each phase's figures against the empty store's, the verdicts, the notes
//! and the chart.

use super::verdicts::{claim_ratio, due_at_start, slowdown, target_of, within};
use super::{KEEP, PURGE, Phase};
use crate::chart::{Line, Panel};
use crate::report::Report;
use crate::{BenchArgs, save_chart};

/// The report: parameters, figures, verdicts, notes, chart.
pub(super) fn report(
    args: &BenchArgs,
    history: u64,
    endpoints: usize,
    messages: u64,
    producers: usize,
    phases: &[Phase],
) -> anyhow::Result<Report> {
    let mut report = Report::new("history", args.describe());
    report.param("history", history);
    report.param("endpoints", endpoints);
    report.param("messages", messages);
    report.param("producers", producers);

    let empty_rate = phases[0].burst.delivery_per_s;
    let empty_p99 = phases[0].burst.claim_p99_ms;
    for p in phases {
        let key = |what: &str| format!("{}_{what}", p.name);
        let label = |what: &str| format!("{}: {what}", p.name);
        if p.name != "empty" {
            report.figure(
                &key("fill_s"),
                &label("history written (straight to the store)"),
                Some(p.fill_s),
                "s",
            );
        }
        let b = &p.burst;
        b.figures(&mut report, args, &key, &label);
        for (sizes, when) in [(&p.before, "before"), (&p.after, "after")] {
            for (table, heap, index) in &sizes.tables {
                report.figure(
                    &key(&format!("{table}_{when}_mib")),
                    &label(&format!("{table} {when} the burst, table + indexes")),
                    Some((heap + index) as f64 / (1024.0 * 1024.0)),
                    "MiB",
                );
                report.figure(
                    &key(&format!("{table}_indexes_{when}_mib")),
                    &label(&format!("{table} indexes {when} the burst")),
                    Some(*index as f64 / (1024.0 * 1024.0)),
                    "MiB",
                );
            }
        }
        report.figure(
            &key("history_left"),
            &label("history deliveries left at the end"),
            Some(p.history_left as f64),
            "",
        );
        if p.name != "empty" {
            let rate = slowdown(empty_rate, b.delivery_per_s);
            let p99 = claim_ratio(b.claim_p99_ms, empty_p99);
            report.figure(
                &key("slowdown"),
                &label("empty store's deliveries/s ÷ this phase's"),
                Some(rate),
                "×",
            );
            report.figure(
                &key("claim_p99_vs_empty"),
                &label("claim p99 ÷ the empty store's"),
                p99,
                "×",
            );
            let target = target_of(p.name);
            report.verdict(
                within(rate, p99, target),
                format!(
                    "{}: throughput and claim p99 within {target}x of the empty store \
                     (deliveries/s: empty ÷ this {rate:.2}x; claim p99: this ÷ empty {})",
                    p.name,
                    p99.map_or("not measured".into(), |f| format!("{f:.2}x"))
                ),
            );
        }
        match p.name {
            "history" => report.invariant(
                p.history_left == history,
                format!(
                    "history: retention {KEEP} kept all {history} history deliveries ({} left)",
                    p.history_left
                ),
            ),
            "purge" => report.invariant(
                p.history_left < history,
                format!(
                    "purge: retention {PURGE} deleted history while the burst ran ({} of {history} left)",
                    p.history_left
                ),
            ),
            _ => {}
        }
        report.invariant(
            b.undelivered == 0,
            format!(
                "{}: every delivery of the burst arrived ({} missing)",
                p.name, b.undelivered
            ),
        );
    }
    if let Some(purge) = phases.iter().find(|p| p.name == "purge") {
        let due = due_at_start(history);
        report.note(format!(
            "purge phase: retention {PURGE}, about {due} of the {history} history deliveries \
             older than it when sluice started; {} deleted by the end of the burst",
            history.saturating_sub(purge.history_left)
        ));
    }
    report.note(
        "history: one message, one delivered delivery and one attempt per row, spread evenly \
         over the last 30 days across the burst's endpoints; PostgreSQL's tables are vacuumed and \
         analyzed after the fill, as autovacuum would have left them; both stores flush the fill \
         to disk before sluice starts (checkpoint, fsync)",
    );

    let x = |i: usize| i as f64;
    let line = |name: &str, f: &dyn Fn(&Phase) -> Option<f64>| {
        Line::new(
            name,
            phases
                .iter()
                .enumerate()
                .filter_map(|(i, p)| f(p).map(|v| (x(i), v)))
                .collect(),
        )
    };
    let axis = "phase: 0 empty, 1 history, 2 history + purge";
    let panels = [
        Panel::linear(
            "deliveries per second",
            "per second",
            vec![line("deliveries/s", &|p| Some(p.burst.delivery_per_s))],
        )
        .over(axis),
        Panel::log(
            "claim time and store CPU",
            "ms (log)",
            vec![
                line("claim p50", &|p| p.burst.claim_p50_ms),
                line("claim p99", &|p| p.burst.claim_p99_ms),
                line("store CPU per delivery", &|p| {
                    p.burst.store_cpu_ms_per_delivery
                }),
            ],
        )
        .over(axis),
        Panel::linear(
            "queue tables with their indexes",
            "MiB",
            vec![
                line("before the burst", &|p| Some(p.before.total_mib())),
                line("after it", &|p| Some(p.after.total_mib())),
            ],
        )
        .over(axis),
    ];
    save_chart(
        args,
        &mut report,
        &format!("history: {history} delivered messages behind a {messages}-message burst"),
        &panels,
    )?;
    Ok(report)
}
