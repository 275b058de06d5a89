//! The fleet at a glance: deliveries ok/failed/shed per second, attempts in flight against the
//! concurrency bound, the autoscaling signal (desired vs current replicas and why), the queue
//! by state, the live dispatchers one by one, the oldest ready delivery's age per tenant, and
//! the top destination hosts by occupancy share over the last minutes with the 15 % alert line
//! (one host holding more than that share of the worker-seconds is worth a look).
//!
//! Rates, counts, in-flight and occupancy shares are the whole fleet's, from the live
//! dispatchers' heartbeats in the store, so an API process that runs no dispatcher shows them
//! too: each heartbeat carries its dispatcher's counts and its worker-seconds per destination
//! host since it started (its [`HOST_TOP`] busiest hosts by name, the rest as other hosts).

use std::time::Duration;

use axum::extract::State;
use maud::{Markup, html};

use super::{Operator, dispatchers};
use crate::console::Console;
use crate::console::charts::{self, Series};
use crate::console::page::{self, ConsoleError};
use crate::console::sampler::{Reading, fleet_between, occupancy_shares};
use crate::model::HostSeconds;
use crate::sizing::heartbeats::{HostShares, Rates};

/// Hosts each heartbeat names; the rest are "other hosts".
pub const HOST_TOP: usize = HostSeconds::TOP;

/// A host above this share of the worker-seconds is worth a look (the alert threshold).
pub const OCCUPANCY_THRESHOLD: f64 = 0.15;
/// The window of the headline rates.
const RATE_WINDOW: Duration = Duration::from_secs(60);
/// The window of the occupancy shares.
const SHARE_WINDOW: Duration = Duration::from_secs(300);
/// Hosts and tenants listed.
const TOP: usize = 10;

fn tile(key: &str, value: String, sub: String) -> Markup {
    html! { div.tile { span.k { (key) } span.v { (value) } span.s { (sub) } } }
}

fn rates_chart(readings: &[Reading]) -> Markup {
    let pairs: Vec<Option<Rates>> = readings
        .windows(2)
        .map(|w| fleet_between(&w[0], &w[1]).map(|f| f.total))
        .collect();
    let series = |label, class, of: fn(&Rates) -> f64| Series {
        label,
        class,
        values: pairs.iter().map(|r| r.as_ref().map(of)).collect(),
    };
    let all = [
        series("ok", "s-ok", |r| r.delivered_per_s),
        series("failed", "s-failed", |r| r.failed_per_s),
        series("shed", "s-shed", |r| r.shed_per_s),
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

/// The hosts with the largest shares, then the hosts no heartbeat named, in one row.
fn hosts_table(shares: &HostShares) -> Markup {
    html! {
        table.cards id="hosts" {
            thead { tr { th { "Host" } th.num { "Share" } th.num { "Worker-seconds" } } }
            tbody {
                @for (host, share, seconds) in shares.hosts.iter().take(TOP) { tr {
                    td data-label="Host" { (host) @if *share > OCCUPANCY_THRESHOLD { " " span.badge.bad { "above 15 %" } } }
                    td.num data-label="Share" { (page::pct(*share)) }
                    td.num data-label="Worker-seconds" { (format!("{seconds:.1}")) }
                } }
                @if shares.other_seconds > 0.0 { tr.muted {
                    td data-label="Host" { "other hosts (not among a dispatcher's " (HOST_TOP) " busiest)" }
                    td.num data-label="Share" { (page::pct(shares.other_share())) }
                    td.num data-label="Worker-seconds" { (format!("{:.1}", shares.other_seconds)) }
                } }
            }
        }
    }
}

/// `GET /console/admin/`
pub async fn show(
    State(console): State<Console>,
    operator: Operator,
) -> Result<Markup, ConsoleError> {
    let app = &console.app;
    let now_ms = crate::clock::now_ms();
    let now = console.sampler.now_with_fleet().await;
    let minute = console.sampler.baseline(RATE_WINDOW);
    let five = console.sampler.baseline(SHARE_WINDOW);
    let rates = match (&minute, &now) {
        (Some(a), Some(b)) => fleet_between(a, b),
        _ => None,
    };
    let rate = |of: fn(&Rates) -> f64| {
        rates
            .as_ref()
            .map_or_else(|| "—".to_owned(), |f| page::rate(of(&f.total)))
    };
    let beats = now.as_ref().and_then(|r| r.fleet.clone());
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
    // `measured` is false only when the store did not answer for one of the two readings;
    // without a baseline yet (the process has just started) there is simply nothing yet.
    let (measured, shares) = match (&five, &now) {
        (Some(a), Some(b)) => match occupancy_shares(a, b) {
            Some(shares) => (true, shares),
            None => (false, HostShares::default()),
        },
        _ => (true, HostShares::default()),
    };
    let share_rows: Vec<(String, f64)> = shares
        .hosts
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
                (tile("Delivered", rate(|r| r.delivered_per_s), "2xx, last minute".into()))
                (tile("Failed", rate(|r| r.failed_per_s), "attempts, last minute".into()))
                (tile("Shed", rate(|r| r.shed_per_s), "at full lanes, last minute".into()))
                (tile("In flight", fleet.in_flight.to_string(), format!("of a bound of {} on {} dispatchers", fleet.concurrency, fleet.dispatchers)))
                (tile("Replicas wanted", signal.desired_replicas.to_string(), format!("{} running", signal.current_replicas)))
                (tile("Oldest ready", if signal.oldest_ready_age_s > 0.0 { page::secs(Some(signal.oldest_ready_age_s)) } else { "none".into() }, format!("target {}", page::secs(Some(signal.target_age_s)))))
                (tile("Queue", format!("{} ready", stats.ready), format!("{} leased · {} dead", stats.leased, stats.dead)))
            }
            p.note id="scale-reason" { "Autoscaling: " (signal.reason) "." }
        }
        section {
            h2 { "Dispatchers" }
            (dispatchers::table(beats.as_deref(), rates.as_ref(), now_ms))
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
                @if !measured { p.muted { "The store did not answer: no shares this time." } }
                @else if shares.total_seconds <= 0.0 {
                    p.muted { "No attempts by the live dispatchers in this window yet." }
                }
                @else {
                    (hosts_table(&shares))
                }
            }
        }
        p.note id="fleet-note" { "Delivered, failed, shed and in flight are the whole fleet's, from the live \
            dispatchers' heartbeats in the store: each heartbeat (every " (page::secs(Some(app.settings.heartbeat_interval.as_secs_f64())))
            ") carries its dispatcher's counts since it started, and a rate is their growth over that \
            dispatcher's own interval between beats, added up over the dispatchers live now (one that \
            stopped drops out, one that restarted counts from its start), so the figures trail by up to \
            one heartbeat. Occupancy shares are the whole fleet's too: each heartbeat also carries \
            its dispatcher's worker-seconds per destination host since it started (its " (HOST_TOP) " \
            busiest hosts lately by name, the rest as other hosts), and a host's share is its \
            growth over the last 5 minutes, added up over the live dispatchers, divided by the \
            growth over every host; they trail by up to one heartbeat too. Readings every 10 s, \
            kept 15 min." }
    };
    Ok(operator.page("Fleet", body))
}
