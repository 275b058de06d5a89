//! The fleet at a glance: deliveries ok/failed/shed per second, attempts in flight against the
//! concurrency bound, the autoscaling signal (desired vs current replicas and why), the queue
//! by state, the oldest ready delivery's age per tenant, and the top destination hosts by
//! occupancy share over the last minutes with the 15 % alert line (one host holding more than
//! that share of the worker-seconds is worth a look).
//!
//! Rates and shares are this process's own measurements (its dispatcher, if it runs one); in a
//! fleet, Prometheus sums them across processes with the same queries.

use std::time::Duration;

use axum::extract::State;
use maud::{Markup, html};

use super::Operator;
use crate::console::Console;
use crate::console::charts::{self, Series};
use crate::console::page::{self, ConsoleError};
use crate::console::sampler::{Reading, occupancy_shares, rate_between};

/// A host above this share of the worker-seconds is worth a look (the alert threshold).
pub const OCCUPANCY_THRESHOLD: f64 = 0.15;
/// The window of the headline rates.
const RATE_WINDOW: Duration = Duration::from_secs(60);
/// The window of the occupancy shares.
const SHARE_WINDOW: Duration = Duration::from_secs(300);
/// Hosts and tenants listed.
const TOP: usize = 10;

const OK: &str = "webhook_deliveries_ok_total";
const FAILED: &str = "sluice_attempts_failed_total";
const SHED: &str = "webhook_deliveries_shed_total";

fn tile(key: &str, value: String, sub: String) -> Markup {
    html! { div.tile { span.k { (key) } span.v { (value) } span.s { (sub) } } }
}

fn rates_chart(readings: &[Reading]) -> Markup {
    let pairs: Vec<(&Reading, &Reading)> = readings.windows(2).map(|w| (&w[0], &w[1])).collect();
    let series = |label, class, name| Series {
        label,
        class,
        values: pairs
            .iter()
            .map(|(a, b)| Some(rate_between(a, b, name)))
            .collect(),
    };
    let all = [
        series("ok", "s-ok", OK),
        series("failed", "s-failed", FAILED),
        series("shed", "s-shed", SHED),
    ];
    let span = readings
        .first()
        .map(|r| {
            format!(
                "−{}",
                page::secs(Some(r.at.elapsed().as_secs_f64().round()))
            )
        })
        .unwrap_or_default();
    charts::stacked_bars(
        "Deliveries per second, per 10 s",
        &all,
        &|v| page::rate(v),
        &span,
        "now",
    )
}

/// `GET /console/admin/`
pub async fn show(
    State(console): State<Console>,
    operator: Operator,
) -> Result<Markup, ConsoleError> {
    let app = &console.app;
    let now_ms = crate::clock::now_ms();
    let now = console.sampler.now();
    let minute = console.sampler.baseline(RATE_WINDOW);
    let five = console.sampler.baseline(SHARE_WINDOW);
    let rate = |name: &str| match (&minute, &now) {
        (Some(a), Some(b)) => page::rate(rate_between(a, b, name)),
        _ => "—".to_owned(),
    };
    let gauge = |name: &str| {
        now.as_ref()
            .and_then(|r| r.scrape.sum(name))
            .map_or_else(|| "—".to_owned(), |v| format!("{v:.0}"))
    };
    let stats = app.store.queue_stats(now_ms).await?;
    let fleet = crate::api::scale::fleet(app).await?;
    let signal = crate::api::scale::signal_from(app, &stats, &fleet, None);
    let mut oldest: Vec<(String, i64)> = stats
        .oldest_ready_age_ms
        .iter()
        .filter(|(_, age)| *age > 0)
        .cloned()
        .collect();
    oldest.sort_by_key(|o| std::cmp::Reverse(o.1));
    oldest.truncate(TOP);
    let mut named = Vec::with_capacity(oldest.len());
    for (tenant, age) in oldest {
        let name = app
            .store
            .tenant(&tenant)
            .await
            .map(|t| t.name)
            .unwrap_or_default();
        named.push((tenant, name, age));
    }
    let shares = match (&five, &now) {
        (Some(a), Some(b)) => occupancy_shares(a, b),
        _ => Vec::new(),
    };
    let share_rows: Vec<(String, f64)> = shares
        .iter()
        .take(TOP)
        .map(|(h, s, _)| (h.clone(), *s))
        .collect();
    let share_span = five
        .as_ref()
        .map(|r| format!("{:.0} s", r.at.elapsed().as_secs_f64()))
        .unwrap_or_else(|| "—".into());
    let mut readings = console.sampler.readings();
    readings.extend(now.clone());
    let body = html! {
        div data-refresh="10" {}
        h1 { "Fleet" }
        section.panel data-live="fleet" id="fleet" {
            div.tiles {
                (tile("Delivered", rate(OK), "2xx, last minute".into()))
                (tile("Failed", rate(FAILED), "attempts, last minute".into()))
                (tile("Shed", rate(SHED), "at full lanes, last minute".into()))
                (tile("In flight", gauge("sluice_in_flight"), format!("of a capacity of {}", gauge("sluice_concurrency_limit"))))
                (tile("Replicas wanted", signal.desired_replicas.to_string(), format!("{} running", signal.current_replicas)))
                (tile("Oldest ready", if signal.oldest_ready_age_s > 0.0 { page::secs(Some(signal.oldest_ready_age_s)) } else { "none".into() }, format!("target {}", page::secs(Some(signal.target_age_s)))))
                (tile("Queue", format!("{} ready", stats.ready), format!("{} leased · {} dead", stats.leased, stats.dead)))
            }
            p.note id="scale-reason" { "Autoscaling: " (signal.reason) "." }
        }
        div.grid2 data-live="fleet-charts" {
            (rates_chart(&readings))
            (charts::share_bars(&format!("Occupancy share per host, last {share_span}"), &share_rows, OCCUPANCY_THRESHOLD))
        }
        div.grid2 {
            section {
                h2 { "Oldest ready delivery per tenant" }
                @if named.is_empty() { p.muted { "No tenant has a delivery waiting." } }
                @else {
                    table.cards id="oldest" {
                        thead { tr { th { "Tenant" } th.num { "Waiting" } } }
                        tbody { @for (id, name, age) in &named { tr {
                            td data-label="Tenant" { (name) " " span.muted.mono { (id) } }
                            td.num data-label="Waiting" { (page::secs(Some(*age as f64 / 1000.0))) }
                        } } }
                    }
                }
            }
            section {
                h2 { "Hosts by occupancy share" }
                @if shares.is_empty() { p.muted { "No attempts measured in this window yet." } }
                @else {
                    table.cards id="hosts" {
                        thead { tr { th { "Host" } th.num { "Share" } th.num { "Worker-seconds" } } }
                        tbody { @for (host, share, seconds) in shares.iter().take(TOP) { tr {
                            td data-label="Host" { (host) @if *share > OCCUPANCY_THRESHOLD { " " span.badge.bad { "above 15 %" } } }
                            td.num data-label="Share" { (page::pct(*share)) }
                            td.num data-label="Worker-seconds" { (format!("{seconds:.1}")) }
                        } } }
                    }
                }
            }
        }
        p.note { "Rates and shares are measured by this process (readings every 10 s, kept 15 min); \
            with several dispatchers, Prometheus sums the same series across the fleet." }
    };
    Ok(operator.page("Fleet", body))
}
