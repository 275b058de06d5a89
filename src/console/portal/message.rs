//! One message's page: its payload as stored, and each delivery with its attempts (status,
//! duration, trace id, response body as escaped text, cut), with replay for a dead one and resend for a
//! delivered one. Payloads and response bodies are hostile input: only ever text here.

use std::collections::HashMap;

use axum::extract::{Path, State};
use maud::{Markup, html};

use super::Portal;
use super::messages::{badge, endpoint_urls};
use crate::api::views::check_id;
use crate::console::Console;
use crate::console::page::{self, ConsoleError, post_button};
use crate::ids;
use crate::model::{AttemptView, DeliveryState};

/// Characters of a response body shown.
const BODY_CHARS: usize = 2_000;
/// Characters of a payload shown.
const PAYLOAD_CHARS: usize = 20_000;

fn attempts_table(attempts: &[AttemptView]) -> Markup {
    html! {
        @if attempts.is_empty() { p.muted { "No attempt yet." } }
        @else {
            table.cards.attempts {
                thead { tr { th { "#" } th { "Started" } th.num { "Took" } th { "Answer" } th { "Trace" } th { "Response body" } } }
                tbody { @for (i, a) in attempts.iter().enumerate() { tr {
                    td data-label="#" { (i + 1) }
                    td data-label="Started" { (page::time(a.started_at_ms)) }
                    td.num data-label="Took" { (page::secs(Some(f64::from(a.duration_ms) / 1000.0))) }
                    td data-label="Answer" {
                        @match (a.status, a.error_kind.as_deref()) {
                            (Some(s), _) => span class={"badge " @if (200..300).contains(&s) { "ok" } @else { "bad" }} { (s) },
                            (None, Some(e)) => span.badge.bad { (e) },
                            (None, None) => "—",
                        }
                    }
                    td.mono data-label="Trace" title="OpenTelemetry trace id" { (a.trace_id) }
                    td.wide data-label="Response body" {
                        @match a.response.as_deref() {
                            Some(body) if !body.is_empty() => {
                                @let (shown, cut) = page::truncate(body, BODY_CHARS);
                                pre.body { (shown) }
                                @if cut { p.note { "First " (BODY_CHARS) " of " (body.chars().count()) " characters." } }
                            }
                            _ => span.muted { "empty" },
                        }
                    }
                } } }
            }
        }
    }
}

/// `GET /console/portal/messages/{id}`: payload, deliveries, attempts.
pub async fn show(
    State(console): State<Console>,
    portal: Portal,
    Path(id): Path<String>,
) -> Result<Markup, ConsoleError> {
    check_id("message", &id)?;
    let tenant = &portal.tenant.id;
    let store = &console.app.store;
    let m = store.message(tenant, &id).await?;
    let endpoints = endpoint_urls(&console, &portal).await?;
    let names: HashMap<&str, &str> = endpoints
        .iter()
        .map(|(i, u)| (i.as_str(), u.as_str()))
        .collect();
    let mut deliveries = Vec::with_capacity(m.deliveries.len());
    for d in &m.deliveries {
        deliveries.push((d, store.attempts(tenant, d.id).await?));
    }
    // The stored bytes, re-indented: never a re-parsed value (see `payload`).
    let payload = super::payload::indented(&m.payload);
    let (shown, cut) = page::truncate(&payload, PAYLOAD_CHARS);
    let now = crate::clock::now_ms();
    let body = html! {
        h1.mono { (m.id) }
        p { strong { (m.event_type) } " · received " (page::time(m.created_at_ms)) }
        h2 { "Payload" }
        pre.body id="payload" { (shown) }
        @if cut { p.note { "First " (PAYLOAD_CHARS) " characters." } }
        h2 { "Deliveries" }
        @if deliveries.is_empty() { p.muted { "No endpoint was subscribed to this event type when it arrived." } }
        @for (d, attempts) in &deliveries {
            section.panel.delivery id={(store.row_ids().format(ids::DELIVERY, d.id))} {
                p.row {
                    (badge(d.state))
                    a.url href={"/console/portal/endpoints/" (d.endpoint_id)} { (names.get(d.endpoint_id.as_str()).copied().unwrap_or(&d.endpoint_id)) }
                    span.muted { (d.attempts) @if d.attempts == 1 { " attempt" } @else { " attempts" } }
                    @if d.state == DeliveryState::Ready { span.muted { "· next attempt " (page::ago(d.visible_at_ms, now)) } }
                }
                @if let Some(e) = &d.last_error { p.note { "Last error: " (e) } }
                @if d.state == DeliveryState::Dead {
                    (post_button(&format!("/console/portal/deliveries/{}/replay", store.row_ids().format(ids::DELIVERY, d.id)), &portal.csrf, "Replay", "primary"))
                }
                @if d.state == DeliveryState::Delivered {
                    (post_button(&format!("/console/portal/deliveries/{}/resend", store.row_ids().format(ids::DELIVERY, d.id)), &portal.csrf, "Resend", ""))
                }
                (attempts_table(attempts))
            }
        }
    };
    Ok(portal.page("Message", body))
}
