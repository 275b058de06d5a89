//! `sluice plan` on this process's live figures: the same analysis (`plan::from_scrapes`,
//! completed from the store by `plan::read_store` and `merge`, sized by `plan::plan`) on two of
//! the console's metric readings a few minutes apart, rendered as tables.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use maud::{Markup, html};

use super::Operator;
use crate::console::Console;
use crate::console::page::{self, ConsoleError};
use crate::plan::{PlanOptions, PlanReport, from_scrapes, plan, read_store};
use crate::sizing::WaitTarget;

/// How far back the measurement reaches.
const WINDOW: Duration = Duration::from_secs(300);
/// Most delivery rows the store reading scans.
const MAX_DELIVERIES: u32 = 20_000;

fn target(t: &WaitTarget) -> String {
    match t {
        WaitTarget::Mean { wait_s } => format!("mean queue wait ≤ {}", page::secs(Some(*wait_s))),
        WaitTarget::Percentile { quantile, wait_s } => format!(
            "p{:.0} queue wait ≤ {}",
            quantile * 100.0,
            page::secs(Some(*wait_s))
        ),
    }
}

fn row(key: &str, value: String) -> Markup {
    html! { tr { th scope="row" { (key) } td.num { (value) } } }
}

fn report(r: &PlanReport) -> Markup {
    let m = &r.measured;
    html! {
        div.grid2 {
            section.panel {
                h2 { "Recommendation" }
                table id="plan" { tbody {
                    (row("Objective", target(&r.target)))
                    (row("Offered rate", page::rate(r.offered_rate_per_s)))
                    (row("Offered load", format!("{:.1} busy workers", r.offered_load_erlangs)))
                    (row("Recommended concurrency", r.recommended_concurrency.to_string()))
                    (row("Utilisation at that size", page::pct(r.utilisation)))
                    (row("Utilisation now", r.current_utilisation.map_or_else(|| "—".into(), page::pct)))
                    (row("Predicted mean wait", page::secs(Some(r.predicted_mean_wait_s))))
                    (row("Processes × tasks", format!("{} × {}", r.layout.processes, r.layout.tasks_per_process)))
                    (row("Pods", r.layout.pods.to_string()))
                    (row("Lane ceiling", r.lane_ceiling.to_string()))
                } }
            }
            section.panel {
                h2 { "Measured" }
                table { tbody {
                    (row("Source", m.source.clone()))
                    (row("Interval", page::secs(Some(m.interval_s))))
                    (row("Attempts", format!("{:.0}", m.attempts)))
                    (row("Mean service time", page::secs(m.mean_service_s)))
                    (row("p50 / p95", format!("{} / {}", page::secs(m.p50_service_s), page::secs(m.p95_service_s))))
                    (row("Concurrency now", m.current_concurrency.map_or_else(|| "—".into(), |c| c.to_string())))
                    (row("Oldest ready", page::secs(m.oldest_ready_age_s)))
                } }
            }
        }
        @if !r.warnings.is_empty() {
            section.panel id="warnings" {
                h2 { "Warnings" }
                ul { @for w in &r.warnings { li { (w) } } }
            }
        }
        h2 { "Lanes by Little's Law" }
        @if r.lanes.is_empty() { p.muted { "No endpoint was offered work in the window." } }
        @else {
            table.cards id="lanes" {
                thead { tr { th { "Endpoint" } th.num { "Offered" } th.num { "Service time" } th.num { "Lane now" } th.num { "Recommended" } } }
                tbody { @for l in &r.lanes { tr {
                    td.mono data-label="Endpoint" { (l.endpoint) }
                    td.num data-label="Offered" { (page::rate(l.offered_per_s)) }
                    td.num data-label="Service time" { (page::secs(Some(l.latency_s))) " " span.muted { (l.latency_source) } }
                    td.num data-label="Lane now" { (l.current_lane.map_or_else(|| "—".into(), |c| c.to_string())) }
                    td.num data-label="Recommended" {
                        (l.recommended_lane)
                        @if l.clamped_by_ceiling { " " span.badge.warn { "at ceiling" } }
                    }
                } } }
            }
        }
    }
}

/// `GET /console/admin/plan`
pub async fn show(
    State(console): State<Console>,
    operator: Operator,
) -> Result<Markup, ConsoleError> {
    let app = &console.app;
    let now_ms = crate::clock::now_ms();
    let from_metrics = match (console.sampler.baseline(WINDOW), console.sampler.now()) {
        (Some(before), Some(after)) => Some(from_scrapes(
            &before.scrape,
            &after.scrape,
            after.at.duration_since(before.at).as_secs_f64(),
        )),
        _ => None,
    };
    let reading = read_store(app.store.as_ref(), WINDOW, MAX_DELIVERIES, now_ms).await?;
    let measured = match from_metrics {
        Some(mut m) => {
            crate::plan::store::merge(&mut m, &reading);
            m
        }
        None => reading.measurements.clone(),
    };
    let options = PlanOptions {
        lane_share: app.settings.lane_share,
        ..PlanOptions::default()
    };
    let mut r = plan(&measured, &options).map_err(|e| {
        ConsoleError::new(StatusCode::UNPROCESSABLE_ENTITY, "No plan", e.to_string())
    })?;
    r.warnings.extend(reading.warnings);
    let body = html! {
        h1 { "Plan" }
        p.note { "The analysis of " code { "sluice plan" } " on this process's metrics over the last "
            (page::secs(Some(measured.interval_s))) ", completed from the store." }
        (report(&r))
    };
    Ok(operator.page("Plan", body))
}
