//! Tenants and their endpoints as the operator sees them: each tenant's share of the pool (its
//! weight and ceiling, which the operator sets here, its fair share, occupancy, in flight and
//! what waits, from the API's `share_status`), and its endpoints: enabled or paused, breaker
//! state, governor limit, lane in force and in flight, p95 and rates (each from the API's
//! `endpoint_status`); and a portal link made for a tenant, to open its portal.

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::Operator;
use crate::api::endpoints::status::{EndpointStatus, endpoint_status};
use crate::api::portal_links::{base_url, issue};
use crate::api::tenants::status::{ShareCondition, ShareStatus, share_status};
use crate::api::tenants::{UpdateTenant, update_share};
use crate::api::views::{check_id, looks_like_id};
use crate::console::Console;
use crate::console::guard::CsrfForm;
use crate::console::links::Empty;
use crate::console::page::{self, ConsoleError, csrf_field, post_button};
use crate::model::{Endpoint, Tenant};

/// Tenants per page.
const TENANTS: u32 = 20;
/// Endpoints shown per tenant.
const ENDPOINTS: u32 = 50;

/// `?after=` of the list.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TenantsQuery {
    after: String,
}

fn endpoint_row(e: &Endpoint, st: Option<&EndpointStatus>) -> Markup {
    let dash = || "—".to_owned();
    html! {
        tr {
            td.wide data-label="Endpoint" { span.url { (e.url) } br; span.muted.mono { (e.id) } }
            td data-label="State" {
                @if e.enabled { span.badge.ok { "enabled" } } @else { span.badge.paused title=[e.disabled_reason.as_deref()] { "paused" } }
            }
            td data-label="Breaker" {
                @match st.and_then(|s| s.breaker_state.as_deref()) {
                    Some(b) => span class={"badge " (b)} { (b.replace('_', " ")) },
                    None => span.muted { "—" },
                }
            }
            td.num data-label="Governor" { (st.and_then(|s| s.governor_limit).map_or_else(dash, |l| format!("{l:.1}"))) }
            td.num data-label="Lane" { (st.map_or_else(dash, |s| format!("{} / {}", s.effective_lane, s.lane_size))) }
            td.num data-label="In flight" { (st.and_then(|s| s.in_flight).map_or_else(dash, |n| n.to_string())) }
            td.num data-label="p95" { (page::secs(st.and_then(|s| s.p95_s))) }
            td.num data-label="Delivered" { (st.map_or_else(dash, |s| page::rate(s.delivered_per_s))) }
            td.num data-label="Shed" { (st.map_or_else(dash, |s| page::pct(s.shed_share))) }
        }
    }
}

/// A tenant's share of the pool, and the form that sets its weight and ceiling.
fn share_panel(t: &Tenant, share: Option<&ShareStatus>, csrf: &str) -> Markup {
    let value = |v: Option<String>| v.unwrap_or_default();
    html! {
        @if let Some(s) = share {
            p.share {
                @let (class, name) = match s.condition {
                    ShareCondition::Held => ("paused", "held to its share"),
                    ShareCondition::Waiting => ("half_open", "waiting"),
                    ShareCondition::Within => ("ok", "within its share"),
                    ShareCondition::Idle => ("closed", "idle"),
                };
                span class={"badge " (class)} { (name) } " " (s.sentence)
            }
            dl.figures {
                dt { "Fair share" } dd { (s.fair_share.map_or_else(|| "—".into(), page::pct)) }
                dt { "Occupancy" } dd { (s.occupancy.map_or_else(|| "—".into(), page::pct)) }
                dt { "In flight" } dd { (s.in_flight.map_or_else(|| "—".into(), |n| n.to_string())) }
                dt { "Due endpoints" } dd { (s.due_endpoints) }
                dt { "Oldest wait" } dd { (page::secs(Some(s.oldest_ready_age_ms as f64 / 1000.0))) }
            }
        }
        form.inline method="post" action={"/console/admin/tenants/" (t.id) "/share"} {
            (csrf_field(csrf))
            label { "Weight " input type="number" name="weight" min="1" max="1000" step="1"
                placeholder="default" value=(value(t.share.weight.map(|w| w.to_string()))); }
            label { "Ceiling " input type="number" name="max_share" min="0.01" max="1" step="0.01"
                placeholder="none" value=(value(t.share.max_share.map(|m| m.to_string()))); }
            button type="submit" { "Set share" }
        }
    }
}

/// The weight and ceiling fields of the share form; empty means the process default.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ShareForm {
    weight: String,
    max_share: String,
}

impl ShareForm {
    fn to_update(&self) -> Result<UpdateTenant, ConsoleError> {
        let unprocessable = |field: &str, what: &str| {
            ConsoleError::new(
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                "Not saved",
                format!("{field}: {what}"),
            )
        };
        let weight = match self.weight.trim() {
            "" => None,
            w => Some(w.parse::<u32>().map_err(|_| {
                unprocessable("weight", "weight must be an integer from 1 to 1000")
            })?),
        };
        let max_share = match self.max_share.trim() {
            "" => None,
            m => Some(m.parse::<f64>().map_err(|_| {
                unprocessable(
                    "max_share",
                    "max_share must be a number above 0 and at most 1",
                )
            })?),
        };
        Ok(UpdateTenant {
            weight: Some(weight),
            max_share: Some(max_share),
        })
    }
}

/// `POST /console/admin/tenants/{id}/share`: set a tenant's weight and ceiling.
pub async fn set_share(
    State(console): State<Console>,
    _operator: Operator,
    Path(id): Path<String>,
    CsrfForm(form): CsrfForm<ShareForm>,
) -> Result<Response, ConsoleError> {
    check_id("tenant", &id)?;
    let req = form.to_update()?;
    update_share(&console.app, &id, req).await?;
    Ok(Redirect::to(&format!("/console/admin/tenants#tenant-{id}")).into_response())
}

/// `GET /console/admin/tenants`
pub async fn list(
    State(console): State<Console>,
    operator: Operator,
    Query(q): Query<TenantsQuery>,
) -> Result<Markup, ConsoleError> {
    let store = &console.app.store;
    let after = (!q.after.is_empty() && looks_like_id(&q.after)).then_some(q.after.as_str());
    let tenants = store.list_tenants(after, TENANTS).await?;
    let mut sections = Vec::with_capacity(tenants.len());
    for t in &tenants {
        let share = share_status(&console.app, &t.id, t.share).await.ok();
        let endpoints = store.list_endpoints(&t.id, None, ENDPOINTS).await?;
        let mut rows = Vec::new();
        for e in endpoints.into_iter().filter(|e| !e.operational) {
            // Only live figures here: the store-backed ones read each endpoint's attempts.
            let st = if console.app.dispatcher.is_some() {
                endpoint_status(&console.app, &t.id, &e.id).await.ok()
            } else {
                None
            };
            rows.push((e, st));
        }
        sections.push((t, share, rows));
    }
    let body = html! {
        div data-refresh="15" {}
        h1 { "Tenants" }
        @if console.app.dispatcher.is_none() {
            p.note { "This process runs no dispatcher: breaker, governor and lane figures live in the dispatcher processes (see /metrics)." }
        }
        @if sections.is_empty() { section.panel { p { "No tenants yet: create one with POST /v1/tenants." } } }
        div data-live="tenants" {
            @for (t, share, rows) in &sections {
                section.panel.tenant id={"tenant-" (t.id)} {
                    div.row {
                        h2 { (t.name) }
                        span.muted.mono { (t.id) }
                        (post_button(&format!("/console/admin/tenants/{}/portal-link", t.id), &operator.csrf, "Portal link", ""))
                    }
                    (share_panel(t, share.as_ref(), &operator.csrf))
                    @if rows.is_empty() { p.muted { "No endpoints." } }
                    @else {
                        div.scroll {
                            table.cards {
                                thead { tr { th { "Endpoint" } th { "State" } th { "Breaker" } th.num { "Governor" } th.num { "Lane" } th.num { "In flight" } th.num { "p95" } th.num { "Delivered" } th.num { "Shed" } } }
                                tbody { @for (e, st) in rows { (endpoint_row(e, st.as_ref())) } }
                            }
                        }
                        @if rows.len() as u32 >= ENDPOINTS { p.note { "The first " (ENDPOINTS) " endpoints." } }
                    }
                }
            }
        }
        @if tenants.len() as u32 >= TENANTS {
            @if let Some(last) = tenants.last() {
                div.pager { span {} a href={"/console/admin/tenants?after=" (last.id)} { "Next →" } }
            }
        }
    };
    Ok(operator.page("Tenants", body))
}

/// `POST /console/admin/tenants/{id}/portal-link`: a one-time link into this tenant's portal.
pub async fn portal_link(
    State(console): State<Console>,
    operator: Operator,
    Path(id): Path<String>,
    headers: HeaderMap,
    CsrfForm(_): CsrfForm<Empty>,
) -> Result<Markup, ConsoleError> {
    check_id("tenant", &id)?;
    let tenant = console.app.store.tenant(&id).await?;
    let ttl = console.app.portal_links.ttl_s();
    let link = issue(&console.app, &tenant, ttl, base_url(&console.app, &headers)).await?;
    let body = html! {
        section.narrow {
            h1 { "Portal link for " (tenant.name) }
            p { "It opens this tenant's portal once, until " (page::time(link.expires_at.0)) "." }
            code.secret id="link" { (link.url) }
            @if link.url.starts_with('/') {
                p.note { "A path on this console's host: set --console-public-url to get a full URL." }
            }
            p.actions { button type="button" data-copy="link" hidden { "Copy" } a.button href="/console/admin/tenants" { "Back to tenants" } }
            p.note { "Opening it here replaces your operator session with the tenant's: use a private window to keep both." }
        }
    };
    Ok(operator.page("Portal link", body))
}
