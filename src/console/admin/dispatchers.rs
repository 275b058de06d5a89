//! The fleet page's dispatcher table: every live dispatcher from its heartbeat (host and id),
//! with its heartbeat's age, its rates over the last minute, what it holds in flight, and its
//! counts since it started, above the fleet's totals.

use maud::{Markup, html};

use crate::console::page;
use crate::model::Heartbeat;
use crate::sizing::heartbeats::{FleetRates, FleetTotals};

/// The table and the totals; `rates` is `None` without a reading old enough to take them from.
pub fn table(beats: Option<&[Heartbeat]>, rates: Option<&FleetRates>, now_ms: i64) -> Markup {
    let Some(beats) = beats else {
        return html! { p.muted id="dispatchers" { "The heartbeats could not be read from the store." } };
    };
    if beats.is_empty() {
        return html! { p.muted id="dispatchers" { "No dispatcher has a live heartbeat." } };
    }
    let totals = FleetTotals::of(beats);
    let rate_of = |id: &str| {
        rates
            .and_then(|r| r.dispatchers.iter().find(|d| d.heartbeat.id == id))
            .and_then(|d| d.rates)
    };
    let shown = |v: Option<f64>| v.map_or_else(|| "—".to_owned(), page::rate);
    html! {
        table.cards id="dispatchers" {
            thead { tr {
                th { "Dispatcher" } th.num { "Heartbeat" } th.num { "Delivered" }
                th.num { "Failed" } th.num { "Shed" } th.num { "In flight" } th.num { "Delivered since start" }
            } }
            tbody { @for h in beats {
                @let r = rate_of(&h.id);
                tr {
                    td data-label="Dispatcher" {
                        @if !h.host.is_empty() { (h.host) " " }
                        span.mono { (h.id) }
                        " " span.muted { "started " (page::ago(h.started_at_ms, now_ms)) }
                        @if h.draining { " " span.badge.warn { "draining" } }
                    }
                    td.num data-label="Heartbeat" { (page::ago(h.beat_at_ms, now_ms)) }
                    td.num data-label="Delivered" { (shown(r.map(|r| r.delivered_per_s))) }
                    td.num data-label="Failed" { (shown(r.map(|r| r.failed_per_s))) }
                    td.num data-label="Shed" { (shown(r.map(|r| r.shed_per_s))) }
                    td.num data-label="In flight" { (h.in_flight) " of " (h.concurrency) }
                    td.num data-label="Delivered since start" { (h.tally.delivered) }
                }
            } }
        }
        p.note id="fleet-totals" {
            "Since they started, the " (totals.dispatchers) " live dispatchers have delivered "
            span id="fleet-delivered" { (totals.tally.delivered) } ", failed "
            span id="fleet-failed" { (totals.tally.failed) } " attempts and shed "
            span id="fleet-shed" { (totals.tally.shed) } "."
        }
    }
}
