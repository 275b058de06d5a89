//! `scale`'s report: each endpoint count's figures against the first count's, and the chart.

use super::Row;
use crate::chart::{Line, Panel};
use crate::report::Report;
use crate::{BenchArgs, save_chart};

/// The report: parameters, each count's figures, the note, the chart.
pub(super) fn report(
    args: &BenchArgs,
    counts: &[usize],
    fan_out: usize,
    messages: u64,
    producers: usize,
    rows: &[Row],
) -> anyhow::Result<Report> {
    let mut report = Report::new("scale", args.describe());
    report.param("endpoints", serde_json::json!(counts));
    report.param("fan_out", fan_out);
    report.param("messages", messages);
    report.param("producers", producers);
    report.param("registered", args.registered.unwrap_or(0));

    let base = &rows[0];
    for row in rows {
        let n = row.endpoints;
        let key = |what: &str| format!("n{n}_{what}");
        let label = |what: &str| format!("{n} endpoints: {what}");
        report.figure(
            &key("setup_s"),
            &label("endpoints created (API)"),
            Some(row.setup_s),
            "s",
        );
        if let Some(s) = row.register_s {
            report.figure(
                &key("register_s"),
                &label("idle endpoints registered (store)"),
                Some(s),
                "s",
            );
        }
        row.burst.figures(&mut report, args, &key, &label);
        report.figure(
            &key("delivery_vs_first"),
            &label(&format!("deliveries/s ÷ {}'s", base.endpoints)),
            Some(row.burst.delivery_per_s / base.burst.delivery_per_s),
            "×",
        );
        report.figure(
            &key("ingest_vs_first"),
            &label(&format!("ingest/s ÷ {}'s", base.endpoints)),
            Some(row.burst.ingest_per_s / base.burst.ingest_per_s),
            "×",
        );
    }
    report.note(
        "producers, the receiver and sluice share this process: CPU and memory include the \
         producers' POSTs and the receiver's handling; RSS is the whole process",
    );

    let x = |r: &Row| (r.endpoints as f64).log10();
    let line = |name: &str, f: &dyn Fn(&Row) -> Option<f64>| {
        Line::new(
            name,
            rows.iter()
                .filter_map(|r| f(r).map(|v| (x(r), v)))
                .collect(),
        )
    };
    let axis = "log10(endpoints)";
    let panels = [
        Panel::linear(
            "rates",
            "per second",
            vec![
                line("deliveries/s", &|r| Some(r.burst.delivery_per_s)),
                line("messages ingested/s", &|r| Some(r.burst.ingest_per_s)),
            ],
        )
        .over(axis),
        Panel::log(
            "cost per delivery and per claim",
            "ms (log)",
            vec![
                line("CPU per delivery", &|r| r.burst.cpu_ms_per_delivery),
                line("claim p50", &|r| r.burst.claim_p50_ms),
                line("claim p99", &|r| r.burst.claim_p99_ms),
            ],
        )
        .over(axis),
        Panel::linear(
            "resident memory",
            "MiB",
            vec![
                line("before the burst", &|r| r.burst.rss_start_mib),
                line("peak during it", &|r| r.burst.rss_peak_mib),
            ],
        )
        .over(axis),
    ];
    save_chart(
        args,
        &mut report,
        &format!("scale: {messages} messages, fan-out {fan_out}, {producers} producers"),
        &panels,
    )?;
    Ok(report)
}
