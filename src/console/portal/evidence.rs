//! One endpoint's page: the evidence panel (the sentence, p50/p95/p99, lane and occupancy,
//! shedding, governor, breaker, offered vs sustainable rate) from the API's `endpoint_status`,
//! charts over the last hour from the attempts recorded in the store (latency p50/p95 and
//! delivered/failed per minute), recent events, and the dead letters waiting for a replay.

use axum::extract::{Path, State};
use maud::{Markup, html};

use super::Portal;
use super::endpoints::{actions, endpoint_of, state_badge};
use crate::api::endpoints::status::{EndpointStatus, endpoint_status};
use crate::console::Console;
use crate::console::charts::{self, Series};
use crate::console::page::{self, ConsoleError, post_button};
use crate::model::{AttemptView, DeliveryFilter, DeliveryState};

/// The charts' span.
const HOUR_MS: i64 = 3_600_000;
/// Most attempts read for the charts (newest first, so a busier hour loses its oldest minutes).
const CHART_SAMPLE: u32 = 20_000;
/// Events listed.
const EVENTS: u32 = 20;

/// One minute of attempts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Minute {
    /// Median attempt duration, seconds.
    pub p50_s: Option<f64>,
    /// 95th percentile attempt duration, seconds.
    pub p95_s: Option<f64>,
    /// Attempts answered 2xx.
    pub delivered: u32,
    /// Other attempts.
    pub failed: u32,
}

/// The hour before `now_ms` in 60 one-minute buckets, oldest first (nearest-rank quantiles).
pub fn minute_buckets(attempts: &[AttemptView], now_ms: i64) -> Vec<Minute> {
    let start = now_ms - HOUR_MS;
    let mut durations: Vec<Vec<u32>> = vec![Vec::new(); 60];
    let mut out = vec![Minute::default(); 60];
    for a in attempts {
        if a.started_at_ms < start || a.started_at_ms >= now_ms {
            continue;
        }
        let i = ((a.started_at_ms - start) / 60_000).clamp(0, 59) as usize;
        durations[i].push(a.duration_ms);
        if a.status.is_some_and(|s| (200..300).contains(&s)) {
            out[i].delivered += 1;
        } else {
            out[i].failed += 1;
        }
    }
    for (minute, mut d) in out.iter_mut().zip(durations) {
        d.sort_unstable();
        let rank = |q: f64| {
            let n = d.len();
            (n > 0).then(|| f64::from(d[((q * n as f64).ceil() as usize).clamp(1, n) - 1]) / 1000.0)
        };
        minute.p50_s = rank(0.50);
        minute.p95_s = rank(0.95);
    }
    out
}

fn tile(key: &str, value: String, sub: Option<String>) -> Markup {
    html! {
        div.tile { span.k { (key) } span.v { (value) } @if let Some(s) = sub { span.s { (s) } } }
    }
}

/// The evidence panel (swapped in place by the page's refresh).
pub fn panel(st: &EndpointStatus) -> Markup {
    let occupancy = st.in_flight.map(|n| {
        let share = f64::from(n) / f64::from(st.effective_lane.max(1));
        format!("{n} in flight · {} occupied", page::pct(share))
    });
    let lane_sub = match occupancy {
        Some(o) => format!("of {} configured; {o}", st.lane_size),
        None => format!("of {} configured", st.lane_size),
    };
    let sustainable = st
        .sustainable_per_s
        .map_or_else(|| "—".to_owned(), page::rate);
    html! {
        section.panel data-live="evidence" id="evidence" {
            p.sentence.paused[!st.enabled] id="sentence" { (st.sentence) }
            div.tiles {
                (tile("p50", page::secs(st.p50_s), None))
                (tile("p95", page::secs(st.p95_s), None))
                (tile("p99", page::secs(st.p99_s), None))
                (tile("Lane in force", st.effective_lane.to_string(), Some(lane_sub)))
                (tile("Offered", page::rate(st.offered_per_s), Some(format!("sustainable {sustainable}"))))
                (tile("Delivered", page::rate(st.delivered_per_s), Some(format!("failed {}", page::rate(st.failed_per_s)))))
                (tile("Shed", page::rate(st.shed_per_s), Some(format!("{} of offered", page::pct(st.shed_share)))))
                (tile("Governor limit", st.governor_limit.map_or_else(|| "—".to_owned(), |l| format!("{l:.1}")), Some("AIMD concurrency".into())))
                (tile("Breaker", st.breaker_state.as_deref().map_or_else(|| "—".to_owned(), |b| b.replace('_', " ")), None))
            }
            p.note {
                (format!("{} {} over {:.0} s, from the {}.", st.samples, if st.samples == 1 { "sample" } else { "samples" }, st.window_s, st.source))
                @if let Some(n) = &st.note { " " (n) "." }
            }
        }
    }
}

fn charts(minutes: &[Minute]) -> Markup {
    let latency = [
        Series {
            label: "p50",
            class: "s-p50",
            values: minutes.iter().map(|m| m.p50_s).collect(),
        },
        Series {
            label: "p95",
            class: "s-p95",
            values: minutes.iter().map(|m| m.p95_s).collect(),
        },
    ];
    let counts = [
        Series {
            label: "delivered",
            class: "s-ok",
            values: minutes
                .iter()
                .map(|m| Some(f64::from(m.delivered)))
                .collect(),
        },
        Series {
            label: "failed",
            class: "s-failed",
            values: minutes.iter().map(|m| Some(f64::from(m.failed))).collect(),
        },
    ];
    let duration = |v: f64| {
        if v > 0.0 {
            page::secs(Some(v))
        } else {
            "0".to_owned()
        }
    };
    let count = |v: f64| format!("{v:.0}");
    html! {
        div.grid2 data-live="charts" {
            (charts::lines("Response time per minute", &latency, &duration, "−60 min", "now"))
            (charts::stacked_bars("Attempts per minute", &counts, &count, "−60 min", "now"))
        }
    }
}

/// `GET /console/portal/endpoints/{id}`
pub async fn show(
    State(console): State<Console>,
    portal: Portal,
    Path(id): Path<String>,
) -> Result<Markup, ConsoleError> {
    let e = endpoint_of(&console, &portal, &id).await?;
    let tenant = &portal.tenant.id;
    let store = &console.app.store;
    let st = endpoint_status(&console.app, tenant, &e.id).await?;
    let now = crate::clock::now_ms();
    let attempts = store
        .endpoint_attempts(tenant, &e.id, now - HOUR_MS, None, CHART_SAMPLE)
        .await?;
    let minutes = minute_buckets(&attempts, now);
    let events = store.list_events(tenant, &e.id, EVENTS).await?;
    let dead = store
        .list_deliveries(&DeliveryFilter {
            tenant_id: tenant.clone(),
            endpoint_id: Some(e.id.clone()),
            state: Some(DeliveryState::Dead),
            limit: 101,
            ..DeliveryFilter::default()
        })
        .await?
        .len();
    let public_keys = crate::api::views::public_keys(&e, now);
    let body = html! {
        div data-refresh="15" {}
        h1.url { (e.url) }
        p.row { (state_badge(&e)) span.muted.mono { (e.id) }
            @if !e.event_types.is_empty() { span.muted { "· " (e.event_types.join(", ")) } } }
        @if !public_keys.is_empty() {
            p.row id="jwks" {
                span.muted { "Signed with Ed25519 (v1a): receivers fetch the public keys from " }
                a.mono href={"/v1/endpoints/" (e.id) "/jwks.json"} { "/v1/endpoints/" (e.id) "/jwks.json" }
                span.muted { " (" (public_keys.len()) " signing now)" }
            }
        }
        (actions(&e, &portal.csrf))
        h2 { "Evidence" }
        (panel(&st))
        (charts(&minutes))
        @if attempts.len() as u32 >= CHART_SAMPLE {
            p.note { "The charts show the most recent " (CHART_SAMPLE) " attempts of the hour." }
        }
        div.grid2 {
            section {
                h2 { "Breaker and events" }
                @if events.is_empty() { p.muted { "Nothing has happened to this endpoint yet." } }
                @else {
                    table.cards id="events" {
                        thead { tr { th { "When" } th { "What" } th { "Detail" } } }
                        tbody { @for ev in &events { tr {
                            td data-label="When" title=(page::time(ev.at_ms)) { (page::ago(ev.at_ms, now)) }
                            td data-label="What" { span class={"badge " (ev.kind)} { (ev.kind.replace('_', " ")) } }
                            td.wide data-label="Detail" { (ev.detail) }
                        } } }
                    }
                }
            }
            section id="dead-letters" {
                h2 { "Dead letters" }
                @if dead == 0 { p.muted { "None: every delivery was made or is still being tried." } }
                @else {
                    p { strong { @if dead > 100 { "over 100" } @else { (dead) } } " deliveries gave up after their retries." }
                    div.actions {
                        (post_button(&format!("/console/portal/endpoints/{}/replay", e.id), &portal.csrf, "Replay all dead letters", "primary"))
                        a.button href={"/console/portal/dead-letters?endpoint=" (e.id)} { "See them" }
                    }
                }
            }
        }
    };
    Ok(portal.page("Endpoint", body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(at: i64, ms: u32, status: Option<u16>) -> AttemptView {
        AttemptView {
            id: 1,
            delivery_id: 1,
            started_at_ms: at,
            duration_ms: ms,
            status,
            error_kind: None,
            response: None,
            trace_id: String::new(),
        }
    }

    #[test]
    fn attempts_fall_into_their_minute() {
        let now = 10_000_000;
        let last = now - 30_000;
        let attempts: Vec<AttemptView> = (1..=20)
            .map(|i| attempt(last, i * 10, Some(if i == 20 { 500 } else { 200 })))
            .chain([
                attempt(now - HOUR_MS, 5, None),
                attempt(now - HOUR_MS - 1, 5, Some(200)),
                attempt(now, 5, Some(200)),
            ])
            .collect();
        let m = minute_buckets(&attempts, now);
        assert_eq!(m.len(), 60);
        assert_eq!((m[59].delivered, m[59].failed), (19, 1));
        assert_eq!(m[59].p50_s, Some(0.1));
        assert_eq!(m[59].p95_s, Some(0.19));
        assert_eq!((m[0].delivered, m[0].failed), (0, 1));
        assert_eq!(m[30], Minute::default());
    }
}
