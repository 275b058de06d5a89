//! `replay`'s report: each level's figures, the three verdicts and the chart.

use std::time::Duration;

use super::verdicts::{Level, in_band, not_rising, within_objective};
use super::{GROUPS, HEALTHY_KINDS, THROTTLING, shape};
use crate::chart::{Line, Panel};
use crate::report::Report;
use crate::{BenchArgs, save_chart};

/// The figures of every level, the verdicts and the chart.
pub(super) fn report(
    args: &BenchArgs,
    levels: &[Level],
    duration: Duration,
    warmup: Duration,
    objective: f64,
) -> anyhow::Result<Report> {
    let mut report = Report::new("replay", args.describe());
    report.param("duration_per_level_s", duration.as_secs_f64());
    report.param("warmup_s", warmup.as_secs_f64());
    report.param("endpoints", shape().len());
    report.param(
        "base_rate_per_s",
        shape().iter().map(|e| e.rate).sum::<f64>(),
    );
    report.param("objective_s", objective);
    report.param(
        "concurrency",
        args.concurrency
            .map_or_else(|| "auto".to_owned(), |c| c.to_string()),
    );
    for l in levels {
        let x = format!("{}x", l.factor);
        report.figure(
            &format!("healthy_oldest_age_max_s_{x}"),
            &format!("{x}: oldest ready age, healthy tenants, max"),
            l.healthy_age_max,
            "s",
        );
        report.figure(
            &format!("healthy_oldest_age_p99_s_{x}"),
            &format!("{x}: oldest ready age, healthy tenants, p99"),
            l.healthy_age_p99,
            "s",
        );
        report.figure(
            &format!("oldest_age_max_s_{x}"),
            &format!("{x}: oldest ready age, every tenant (slow, dead, throttling included), max"),
            l.all_age_max,
            "s",
        );
        report.figure(
            &format!("utilisation_{x}"),
            &format!("{x}: mean pool utilisation, claimed ÷ concurrency (second half)"),
            l.utilisation,
            "",
        );
        report.figure(
            &format!("attempts_share_{x}"),
            &format!("{x}: attempts in flight ÷ concurrency (second half)"),
            l.attempts_share,
            "",
        );
        report.figure(
            &format!("concurrency_{x}"),
            &format!("{x}: pool size at the end"),
            l.concurrency_end,
            "",
        );
        report.figure(
            &format!("delivered_per_s_{x}"),
            &format!("{x}: deliveries per second"),
            Some(l.delivered_per_s),
            "/s",
        );
        for (i, (prefix, label)) in HEALTHY_KINDS.iter().enumerate() {
            report.figure(
                &format!("healthy_shed_share_{prefix}_{x}"),
                &format!("{x}: sheds per delivery offered, {label} endpoints"),
                l.healthy_shed_share[i],
                "",
            );
        }
        report.figure(
            &format!("healthy_latency_p99_s_{x}"),
            &format!("{x}: delivery latency of the healthy endpoints, p99"),
            l.healthy_latency_p99,
            "s",
        );
        report.figure(
            &format!("healthy_latency_p999_s_{x}"),
            &format!("{x}: delivery latency of the healthy endpoints, p99.9"),
            l.healthy_latency_p999,
            "s",
        );
        for (i, g) in THROTTLING.iter().enumerate() {
            report.figure(
                &format!("throttled_share_{}_{x}", GROUPS[*g]),
                &format!("{x}: share of attempts answered 429, {}", GROUPS[*g]),
                l.throttled_share[i],
                "",
            );
        }
    }
    claims(&mut report, levels, objective);

    let line = |name: &str, f: &dyn Fn(&Level) -> Option<f64>| {
        Line::new(
            name,
            levels
                .iter()
                .filter_map(|l| f(l).map(|v| (l.factor, v)))
                .collect(),
        )
    };
    let level_axis = "level (× the recorded peak's rate)";
    let panels = [
        Panel::linear(
            "oldest ready age",
            "seconds",
            vec![
                line("healthy tenants, max", &|l| l.healthy_age_max),
                line("healthy tenants, p99", &|l| l.healthy_age_p99),
                line("objective", &|_| Some(objective)),
            ],
        )
        .over(level_axis),
        Panel::linear(
            "mean pool utilisation",
            "share of the pool busy",
            vec![
                line("utilisation", &|l| l.utilisation),
                line("85 %", &|_| Some(0.85)),
                line("95 %", &|_| Some(0.95)),
            ],
        )
        .over(level_axis),
        Panel::linear(
            "deliveries",
            "per second",
            vec![line("delivered", &|l| Some(l.delivered_per_s))],
        )
        .over(level_axis),
        Panel::linear(
            "healthy endpoints: sheds",
            "per delivery offered",
            (0..HEALTHY_KINDS.len())
                .map(|i| line(HEALTHY_KINDS[i].1, &|l| l.healthy_shed_share[i]))
                .collect(),
        )
        .over(level_axis),
        Panel::linear(
            "429 share of each throttling endpoint",
            "share of its attempts",
            (0..THROTTLING.len())
                .map(|i| line(GROUPS[THROTTLING[i]], &|l| l.throttled_share[i]))
                .collect(),
        )
        .over(level_axis),
    ];
    save_chart(
        args,
        &mut report,
        "replay: the recorded peak at 1×, 2× and 4×",
        &panels,
    )?;
    Ok(report)
}

/// The three pass criteria, as verdicts with the figures (timing claims: a smoke run does not
/// judge them).
fn claims(report: &mut Report, levels: &[Level], objective: f64) {
    let at = |factor: f64| levels.iter().find(|l| l.factor == factor);
    if let Some(two) = at(2.0) {
        let age = two.healthy_age_max;
        report.verdict(
            within_objective(age, objective),
            format!(
                "oldest ready age of the healthy tenants at 2x is {} (objective {objective} s)",
                age.map_or("unknown".into(), |a| format!("{a:.1} s")),
            ),
        );
        let u = two.utilisation;
        report.verdict(
            in_band(u),
            format!(
                "mean pool utilisation at 2x is {} (85–95 % wanted)",
                u.map_or("unknown".into(), |u| format!("{:.0} %", u * 100.0)),
            ),
        );
    }
    if let (Some(one), Some(two)) = (at(1.0), at(2.0)) {
        let pairs: Vec<String> = THROTTLING
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let fmt = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.2} %", v * 100.0));
                format!(
                    "{} {} → {}",
                    GROUPS[*g],
                    fmt(one.throttled_share[i]),
                    fmt(two.throttled_share[i])
                )
            })
            .collect();
        let ok = not_rising(&one.throttled_share, &two.throttled_share);
        report.verdict(
            ok,
            format!(
                "the 429 share does not rise from 1x to 2x ({})",
                pairs.join(", ")
            ),
        );
    }
}
