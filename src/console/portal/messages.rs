//! The message log (every message with its deliveries' states, filtered by event type, time
//! range, endpoint and delivery state, each checked as the API checks it; or, for endpoint and
//! state alone, the matching deliveries), resend, the dead letters, and replay.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::response::Redirect;
use maud::{Markup, html};
use serde::Deserialize;

use super::Portal;
use super::endpoints::endpoint_of;
use crate::api::messages::redelivery::{redeliver, replay_endpoint_dead};
use crate::api::messages::{check_event_filter, check_range};
use crate::api::views::{delivery_id, looks_like_id};
use crate::console::Console;
use crate::console::guard::CsrfForm;
use crate::console::links::Empty;
use crate::console::page::{self, ConsoleError, csrf_field, post_button};
use crate::ids;
use crate::model::{DeliveryFilter, DeliveryState, DeliveryView, ReplayTarget};
use crate::store::MessageFilter;

/// Rows per page.
const PAGE: u32 = 50;

/// The log's filters. Blank fields mean "any".
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct LogQuery {
    /// Only this endpoint's deliveries.
    pub endpoint: String,
    /// Only deliveries in this state.
    pub state: String,
    /// Filtered view: the last delivery id of the previous page.
    pub after: String,
    /// Message view: the last message id of the previous page.
    pub before: String,
    /// Only messages of this event type, or of a prefix pattern (`order.*`).
    pub event_type: String,
    /// Only messages that arrived at or after this instant (RFC 3339).
    pub since: String,
    /// Only messages that arrived before this instant (RFC 3339).
    pub until: String,
}

impl LogQuery {
    /// Is a message-level filter (event type or time range) given?
    fn filters_messages(&self) -> bool {
        !(self.event_type.is_empty() && self.since.is_empty() && self.until.is_empty())
    }

    /// The filters as a query string for the pager, with `cursor` = `value` appended.
    fn next_page(&self, cursor: &str, value: &str) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("endpoint", &self.endpoint),
            ("state", &self.state),
            ("event_type", &self.event_type),
            ("since", &self.since),
            ("until", &self.until),
        ] {
            if !v.is_empty() {
                q.append_pair(k, v);
            }
        }
        q.append_pair(cursor, value);
        format!("/console/portal/messages?{}", q.finish())
    }
}

/// A delivery state as a badge.
pub(super) fn badge(state: DeliveryState) -> Markup {
    html! { span class={"badge " (state.name())} { (state.name()) } }
}

/// The tenant's endpoint URLs by id (for names in the log and the filter's choices).
pub(super) async fn endpoint_urls(
    console: &Console,
    portal: &Portal,
) -> Result<Vec<(String, String)>, ConsoleError> {
    let rows = console
        .app
        .store
        .list_endpoints(&portal.tenant.id, None, 500)
        .await?;
    Ok(rows
        .into_iter()
        .filter(|e| !e.operational)
        .map(|e| (e.id, e.url))
        .collect())
}

fn filters(q: &LogQuery, endpoints: &[(String, String)]) -> Markup {
    html! {
        form.filters method="get" action="/console/portal/messages" {
            div {
                label for="f-endpoint" { "Endpoint" }
                select id="f-endpoint" name="endpoint" {
                    option value="" { "any" }
                    @for (id, url) in endpoints {
                        option value=(id) selected[*id == q.endpoint] { (page::truncate(url, 60).0) }
                    }
                }
            }
            div {
                label for="f-type" { "Event type" }
                input id="f-type" name="event_type" value=(q.event_type) placeholder="order.paid or order.*";
            }
            div {
                label for="f-since" { "Since" }
                input id="f-since" name="since" value=(q.since) placeholder="2026-12-01T09:00:00Z";
            }
            div {
                label for="f-until" { "Until" }
                input id="f-until" name="until" value=(q.until) placeholder="2026-12-01T10:00:00Z";
            }
            div {
                label for="f-state" { "State" }
                select id="f-state" name="state" {
                    option value="" { "any" }
                    @for s in DeliveryState::ALL {
                        option value=(s.name()) selected[s.name() == q.state] { (s.name()) }
                    }
                }
            }
            button type="submit" { "Filter" }
        }
    }
}

/// `GET /console/portal/messages`: the log.
pub async fn log(
    State(console): State<Console>,
    portal: Portal,
    Query(q): Query<LogQuery>,
) -> Result<Markup, ConsoleError> {
    let endpoints = endpoint_urls(&console, &portal).await?;
    let state = match q.state.as_str() {
        "" => None,
        s => Some(
            DeliveryState::parse(s).ok_or_else(|| ConsoleError::bad_request("unknown state"))?,
        ),
    };
    if !q.endpoint.is_empty() {
        endpoint_of(&console, &portal, &q.endpoint).await?;
    }
    // The API's own checks: a filter it would refuse is refused here too (and never reaches
    // the database, which may refuse a NUL with an error of its own).
    let event_type = q.event_type.trim();
    if !event_type.is_empty() {
        check_event_filter(event_type)?;
    }
    let given = |text: &str| (!text.is_empty()).then_some(text.to_owned());
    let (since_ms, until_ms) = check_range(given(&q.since).as_deref(), given(&q.until).as_deref())?;
    let body = if q.filters_messages() || (q.endpoint.is_empty() && state.is_none()) {
        let filter = MessageFilter {
            tenant_id: portal.tenant.id.clone(),
            event_type: (!event_type.is_empty()).then(|| event_type.to_owned()),
            since_ms,
            until_ms,
            endpoint_id: (!q.endpoint.is_empty()).then(|| q.endpoint.clone()),
            state,
            before: (!q.before.is_empty() && looks_like_id(&q.before)).then(|| q.before.clone()),
            limit: PAGE,
        };
        messages_view(&console, &portal, &q, filter, &endpoints).await?
    } else {
        deliveries_view(&console, &portal, &q, state, &endpoints).await?
    };
    Ok(portal.page(
        "Messages",
        html! {
            h1 { "Messages" }
            (filters(&q, &endpoints))
            (body)
        },
    ))
}

async fn messages_view(
    console: &Console,
    portal: &Portal,
    q: &LogQuery,
    filter: MessageFilter,
    endpoints: &[(String, String)],
) -> Result<Markup, ConsoleError> {
    let store = &console.app.store;
    let messages = store.list_messages(&filter).await?;
    let mut rows = Vec::with_capacity(messages.len());
    for m in &messages {
        let deliveries = match store.message(&portal.tenant.id, &m.id).await {
            Ok(view) => view.deliveries,
            Err(_) => Vec::new(),
        };
        rows.push((m, deliveries));
    }
    let now = crate::clock::now_ms();
    let names: HashMap<&str, &str> = endpoints
        .iter()
        .map(|(i, u)| (i.as_str(), u.as_str()))
        .collect();
    Ok(html! {
        p.note { "Newest first." }
        @if rows.is_empty() {
            section.panel { p { @if q.filters_messages() { "No message matches." } @else { "No messages yet." } } }
        }
        @else {
            table.cards id="messages" {
                thead { tr { th { "Message" } th { "Event type" } th { "Received" } th { "Deliveries" } } }
                tbody { @for (m, deliveries) in &rows { tr {
                    td data-label="Message" { a.mono href={"/console/portal/messages/" (m.id)} { (m.id) } }
                    td data-label="Event type" { (m.event_type) }
                    td data-label="Received" title=(page::time(m.created_at_ms)) { (page::ago(m.created_at_ms, now)) }
                    td.wide data-label="Deliveries" {
                        @if deliveries.is_empty() { span.muted { "no subscribed endpoint" } }
                        @for d in deliveries {
                            div.dl { (badge(d.state)) " " span.url.muted { (names.get(d.endpoint_id.as_str()).copied().unwrap_or(&d.endpoint_id)) } }
                        }
                    }
                } } }
            }
        }
        @if messages.len() as u32 >= PAGE {
            @if let Some(last) = messages.last() {
                div.pager { span {} a href=(q.next_page("before", &last.id)) { "Older →" } }
            }
        }
    })
}

async fn deliveries_view(
    console: &Console,
    portal: &Portal,
    q: &LogQuery,
    state: Option<DeliveryState>,
    endpoints: &[(String, String)],
) -> Result<Markup, ConsoleError> {
    let row_ids = console.app.store.row_ids();
    let filter = DeliveryFilter {
        tenant_id: portal.tenant.id.clone(),
        endpoint_id: (!q.endpoint.is_empty()).then(|| q.endpoint.clone()),
        state,
        after: row_ids.parse(ids::DELIVERY, &q.after),
        limit: PAGE,
        ..DeliveryFilter::default()
    };
    let rows = console.app.store.list_deliveries(&filter).await?;
    let next = (rows.len() as u32 >= PAGE)
        .then(|| rows.last().map(|d| row_ids.format(ids::DELIVERY, d.id)))
        .flatten();
    Ok(html! {
        p.note { "Deliveries, oldest first." }
        (deliveries_table(&rows, endpoints, row_ids, None))
        @if let Some(after) = next {
            div.pager { span {} a href=(q.next_page("after", &after)) { "Next →" } }
        }
    })
}

/// Deliveries as a table; with `csrf`, dead ones get a replay button.
fn deliveries_table(
    rows: &[DeliveryView],
    endpoints: &[(String, String)],
    row_ids: &ids::RowIds,
    csrf: Option<&str>,
) -> Markup {
    let now = crate::clock::now_ms();
    let names: HashMap<&str, &str> = endpoints
        .iter()
        .map(|(i, u)| (i.as_str(), u.as_str()))
        .collect();
    html! {
        @if rows.is_empty() { section.panel { p { "Nothing matches." } } }
        @else {
            table.cards id="deliveries" {
                thead { tr { th { "Message" } th { "Endpoint" } th { "State" } th.num { "Attempts" } th { "Last answer" } th { "Updated" } @if csrf.is_some() { th {} } } }
                tbody { @for d in rows { tr {
                    td data-label="Message" { a.mono href={"/console/portal/messages/" (d.message_id)} { (d.message_id) } }
                    td data-label="Endpoint" { a.url href={"/console/portal/endpoints/" (d.endpoint_id)} { (names.get(d.endpoint_id.as_str()).copied().unwrap_or(&d.endpoint_id)) } }
                    td data-label="State" { (badge(d.state)) }
                    td.num data-label="Attempts" { (d.attempts) }
                    td data-label="Last answer" { (last_answer(d)) }
                    td data-label="Updated" title=(page::time(d.updated_at_ms)) { (page::ago(d.updated_at_ms, now)) }
                    @if let Some(csrf) = csrf {
                        td data-label="" {
                            form.inline method="post" action={"/console/portal/deliveries/" (row_ids.format(ids::DELIVERY, d.id)) "/replay"} {
                                (csrf_field(csrf))
                                input type="hidden" name="next" value="dead-letters";
                                button type="submit" { "Replay" }
                            }
                        }
                    }
                } } }
            }
        }
    }
}

fn last_answer(d: &DeliveryView) -> String {
    match (d.last_status, d.last_error.as_deref()) {
        (Some(s), Some(e)) => format!("{s} · {e}"),
        (Some(s), None) => s.to_string(),
        (None, Some(e)) => e.to_owned(),
        (None, None) => "—".to_owned(),
    }
}

/// Where a replay returns to.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ReplayForm {
    /// `dead-letters` to return to the list; anything else returns to the message.
    next: String,
}

/// `POST /console/portal/deliveries/{id}/replay`
pub async fn replay_delivery(
    State(console): State<Console>,
    portal: Portal,
    Path(id): Path<String>,
    CsrfForm(form): CsrfForm<ReplayForm>,
) -> Result<Redirect, ConsoleError> {
    let id = delivery_id(console.app.store.row_ids(), &id)?;
    let (d, _) = redeliver(&console.app, &portal.tenant.id, id, ReplayTarget::Delivery).await?;
    Ok(if form.next == "dead-letters" {
        Redirect::to("/console/portal/dead-letters")
    } else {
        Redirect::to(&format!("/console/portal/messages/{}", d.message_id))
    })
}

/// `POST /console/portal/deliveries/{id}/resend`: deliver it again (a new attempt, the same
/// `webhook-id`), whatever its state unless an attempt is in flight.
pub async fn resend_delivery(
    State(console): State<Console>,
    portal: Portal,
    Path(id): Path<String>,
    CsrfForm(_): CsrfForm<Empty>,
) -> Result<Redirect, ConsoleError> {
    let id = delivery_id(console.app.store.row_ids(), &id)?;
    let (d, _) = redeliver(&console.app, &portal.tenant.id, id, ReplayTarget::Resend).await?;
    Ok(Redirect::to(&format!(
        "/console/portal/messages/{}",
        d.message_id
    )))
}

/// `POST /console/portal/endpoints/{id}/replay`: every dead letter of the endpoint.
pub async fn replay_endpoint(
    State(console): State<Console>,
    portal: Portal,
    Path(id): Path<String>,
    CsrfForm(_): CsrfForm<Empty>,
) -> Result<Redirect, ConsoleError> {
    let e = endpoint_of(&console, &portal, &id).await?;
    replay_endpoint_dead(&console.app, &portal.tenant.id, &e.id).await?;
    Ok(Redirect::to(&format!("/console/portal/endpoints/{}", e.id)))
}

/// `?endpoint=` and `?after=` of the dead letters.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct DeadQuery {
    endpoint: String,
    after: String,
}

/// `GET /console/portal/dead-letters`
pub async fn dead_letters(
    State(console): State<Console>,
    portal: Portal,
    Query(q): Query<DeadQuery>,
) -> Result<Markup, ConsoleError> {
    if !q.endpoint.is_empty() {
        endpoint_of(&console, &portal, &q.endpoint).await?;
    }
    let endpoints = endpoint_urls(&console, &portal).await?;
    let row_ids = console.app.store.row_ids();
    let filter = DeliveryFilter {
        tenant_id: portal.tenant.id.clone(),
        endpoint_id: (!q.endpoint.is_empty()).then(|| q.endpoint.clone()),
        state: Some(DeliveryState::Dead),
        after: row_ids.parse(ids::DELIVERY, &q.after),
        limit: PAGE,
        ..DeliveryFilter::default()
    };
    let rows = console.app.store.list_deliveries(&filter).await?;
    let next = (rows.len() as u32 >= PAGE)
        .then(|| rows.last().map(|d| row_ids.format(ids::DELIVERY, d.id)))
        .flatten();
    let body = html! {
        h1 { "Dead letters" }
        p.note { "Deliveries that gave up after their retries. A replay makes one deliverable again with its attempts reset." }
        @if !q.endpoint.is_empty() && !rows.is_empty() {
            div.actions { (post_button(&format!("/console/portal/endpoints/{}/replay", q.endpoint), &portal.csrf, "Replay all of this endpoint", "primary")) }
        }
        (deliveries_table(&rows, &endpoints, row_ids, Some(&portal.csrf)))
        @if let Some(after) = next {
            div.pager { span {} a href={"/console/portal/dead-letters?endpoint=" (q.endpoint) "&after=" (after)} { "Next →" } }
        }
    };
    Ok(portal.page("Dead letters", body))
}
