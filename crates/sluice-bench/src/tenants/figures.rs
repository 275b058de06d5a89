//! `tenants`' report: every phase's figures, the verdicts and the chart.

use super::verdicts::{Outcome, fair, keeps_most, shares, within_twice};
use super::{BUSY, Phases, QUIET, Sizes, TRICKLE, WEIGHTED};
use crate::chart::{Line, Panel};
use crate::report::{Report, ratio};
use crate::{BenchArgs, save_chart};

/// The report: parameters, figures, verdicts, chart.
pub(super) fn report(args: &BenchArgs, sizes: Sizes, phases: &Phases) -> anyhow::Result<Report> {
    let Phases {
        alone,
        beside,
        busy_alone,
        weights,
        trickle,
    } = phases;
    let mut report = Report::new("tenants", args.describe());
    report.param("duration_s", sizes.duration.as_secs_f64());
    report.param("quiet_endpoints", sizes.quiet_endpoints);
    report.param("quiet_messages_per_s", sizes.quiet_rate);
    report.param("busy_endpoints", sizes.busy_endpoints);
    report.param("busy_messages", sizes.busy_messages);
    report.param("busy_service_ms", sizes.busy_service.as_millis() as u64);
    report.param("weighted_endpoints_each", sizes.weighted_endpoints);
    report.param("dispatchers", args.dispatchers.unwrap_or(0));
    figures(
        &mut report,
        sizes,
        alone,
        beside,
        busy_alone,
        weights,
        trickle,
    );

    let panels = [
        Panel::log(
            "quiet tenant: enqueue→delivery p99 per second",
            "ms",
            vec![
                Line::new("alone", alone.timeline.quantile_series(QUIET, 0.99)),
                Line::new(
                    "beside the backlog",
                    beside.timeline.quantile_series(QUIET, 0.99),
                ),
            ],
        ),
        Panel::linear(
            "busy tenant: deliveries per second",
            "deliveries/s",
            vec![
                Line::new("alone", busy_alone.timeline.count_series(BUSY, false)),
                Line::new(
                    "beside the quiet tenant",
                    beside.timeline.count_series(BUSY, false),
                ),
            ],
        ),
        Panel::linear(
            "weights 1:2:4, every tenant saturated: deliveries per second",
            "deliveries/s",
            WEIGHTED
                .iter()
                .map(|&(g, w)| {
                    Line::new(
                        format!("weight {w}"),
                        weights.timeline.count_series(g, false),
                    )
                })
                .collect(),
        ),
    ];
    save_chart(
        args,
        &mut report,
        "tenants: one tenant's backlog beside the others",
        &panels,
    )?;
    Ok(report)
}

fn figures(
    report: &mut Report,
    sizes: Sizes,
    alone: &Outcome,
    beside: &Outcome,
    busy_alone: &Outcome,
    weights: &Outcome,
    trickle: &Outcome,
) {
    for (key, label, phase) in [
        ("alone", "alone", alone),
        ("beside", "beside the backlog", beside),
    ] {
        for (q, name) in [(0.5, "p50"), (0.99, "p99"), (1.0, "max")] {
            report.figure(
                &format!("quiet_{key}_{name}_ms"),
                &format!("quiet tenant {label}: enqueue→delivery {name}"),
                phase.quantile_ms(QUIET, q),
                "ms",
            );
        }
    }
    // Where a quiet delivery's time goes: its POST, and the claims it waits behind.
    for (key, label, phase) in [
        ("alone", "alone", alone),
        ("beside", "beside the backlog", beside),
    ] {
        for (q, name) in [(0.5, "p50"), (0.99, "p99")] {
            report.figure(
                &format!("quiet_{key}_ingest_{name}_ms"),
                &format!("quiet tenant {label}: POST → 202 {name}"),
                phase.ingest_ms(QUIET, q),
                "ms",
            );
            report.figure(
                &format!("claim_{key}_{name}_ms"),
                &format!("claims during the quiet tenant {label}: duration {name}"),
                phase.claim_ms(q),
                "ms",
            );
        }
    }
    let factor = ratio(
        beside.quantile_ms(QUIET, 0.99),
        alone.quantile_ms(QUIET, 0.99),
    );
    report.figure(
        "quiet_p99_factor",
        "quiet tenant: p99 beside the backlog ÷ alone",
        factor,
        "×",
    );
    let made = beside.timeline.delivered_total(QUIET);
    report.figure(
        "quiet_delivered",
        "quiet tenant beside the backlog: deliveries made (of those its accepted messages fan out to)",
        Some(made as f64),
        "",
    );
    report.figure(
        "quiet_expected",
        "quiet tenant beside the backlog: deliveries its accepted messages fan out to",
        Some(beside.quiet_expected as f64),
        "",
    );
    let busy_beside = beside.rate(BUSY);
    let busy_solo = busy_alone.rate(BUSY);
    report.figure(
        "busy_beside_per_s",
        "busy tenant beside the quiet one: deliveries",
        Some(busy_beside),
        "/s",
    );
    report.figure(
        "busy_alone_per_s",
        "busy tenant alone: deliveries",
        Some(busy_solo),
        "/s",
    );
    let kept = ratio(Some(busy_beside), Some(busy_solo));
    report.figure(
        "busy_kept",
        "busy tenant: its rate beside the quiet one ÷ alone (work-conserving)",
        kept,
        "",
    );
    let counts: Vec<f64> = WEIGHTED.iter().map(|&(g, _)| weights.rate(g)).collect();
    let total: f64 = counts.iter().sum();
    let shares = shares(&counts);
    let shares_ok = fair(&shares);
    for (&(_, w), share) in WEIGHTED.iter().zip(&shares) {
        let want = f64::from(w) / 7.0;
        report.figure(
            &format!("weight_{w}_share"),
            &format!("weight {w}: share of the deliveries (fair: {w}/7 = {want:.3})"),
            *share,
            "",
        );
    }
    report.figure(
        "weighted_per_s",
        "weights 1:2:4: deliveries in all",
        Some(total),
        "/s",
    );
    for (q, name) in [(0.5, "p50"), (0.99, "p99"), (1.0, "max")] {
        report.figure(
            &format!("trickle_{name}_ms"),
            &format!("trickle tenant (1 message/s) beside the backlog: {name}"),
            trickle.quantile_ms(TRICKLE, q),
            "ms",
        );
    }
    report.figure(
        "trickle_delivered",
        "trickle tenant: deliveries made",
        Some(trickle.timeline.delivered_total(TRICKLE) as f64),
        "",
    );
    report.verdict(
        within_twice(factor),
        format!(
            "the quiet tenant's p99 beside the backlog is within 2× of its p99 alone ({})",
            factor.map_or("n/a".into(), |f| format!("{f:.2}×"))
        ),
    );
    report.verdict(
        made >= beside.quiet_expected,
        format!(
            "every quiet delivery is made ({made} of {})",
            beside.quiet_expected
        ),
    );
    report.verdict(
        keeps_most(kept),
        format!(
            "the busy tenant keeps at least 90 % of the rate it gets alone ({})",
            kept.map_or("n/a".into(), |k| format!("{:.0} %", k * 100.0))
        ),
    );
    report.verdict(
        shares_ok,
        "weights 1:2:4 share the deliveries 1/7, 2/7, 4/7 within 10 %".to_owned(),
    );
    report.verdict(
        trickle.timeline.delivered_total(TRICKLE) >= trickle.trickle_expected,
        "every trickle delivery is made".to_owned(),
    );
    report.note(format!(
        "Shares are of the pool's time: each claim serves the tenants with the lowest virtual \
         pass (worker-seconds given ÷ weight) and charges what it took. The busy tenant's rate \
         alone is what the machine gives {} endpoints answering in {} ms.",
        sizes.busy_endpoints,
        sizes.busy_service.as_millis()
    ));
}
