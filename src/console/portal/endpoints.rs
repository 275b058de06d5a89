//! The tenant's endpoints: the list with each one's state and latest figures, and the actions
//! on one endpoint (create, edit, pause and enable, rotate the secret, delete), each done by the
//! same function as the JSON route that does it.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::Portal;
use super::form::{self, EndpointForm, FieldError, FormContext};
use crate::api::endpoints::actions::{rotate as rotate_secret, set_enabled};
use crate::api::endpoints::status::endpoint_status;
use crate::api::endpoints::{create_endpoint, delete_endpoint, update_endpoint};
use crate::api::views::check_id;
use crate::console::Console;
use crate::console::guard::CsrfForm;
use crate::console::links::Empty;
use crate::console::page::{self, ConsoleError, csrf_field, post_button};
use crate::model::Endpoint;
use crate::pem::shown_pem;

/// Rows per page of the list.
const PAGE: u32 = 50;

/// `?after=` of the list.
#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    after: Option<String>,
}

/// The session tenant's endpoint `id`, or a 404 page.
pub async fn endpoint_of(
    console: &Console,
    portal: &Portal,
    id: &str,
) -> Result<Endpoint, ConsoleError> {
    check_id("endpoint", id)?;
    Ok(console
        .app
        .store
        .endpoint(Some(&portal.tenant.id), id)
        .await?)
}

/// A state badge: enabled, or paused with its reason.
pub fn state_badge(e: &Endpoint) -> Markup {
    html! {
        @if e.enabled { span.badge.ok { "enabled" } }
        @else { span.badge.paused title=[e.disabled_reason.as_deref()] { "paused" } }
    }
}

/// `GET /console/portal/`: every endpoint with its state and latest figures.
pub async fn list(
    State(console): State<Console>,
    portal: Portal,
    Query(q): Query<ListQuery>,
) -> Result<Markup, ConsoleError> {
    let after = q.after.filter(|a| crate::api::views::looks_like_id(a));
    let rows = console
        .app
        .store
        .list_endpoints(&portal.tenant.id, after.as_deref(), PAGE)
        .await?;
    let next = (rows.len() as u32 >= PAGE).then(|| rows.last().map(|e| e.id.clone()));
    // Live figures are cheap; without a dispatcher here they are computed from stored attempts,
    // which each endpoint's own page does (one at a time), not a list of fifty.
    let live = console.app.dispatcher.is_some();
    let mut items = Vec::new();
    for e in rows.into_iter().filter(|e| !e.operational) {
        let status = if live {
            endpoint_status(&console.app, &portal.tenant.id, &e.id)
                .await
                .ok()
        } else {
            None
        };
        items.push((e, status));
    }
    let body = html! {
        div.row { h1 { "Endpoints" } }
        div.actions { a.button.primary href="/console/portal/endpoints/new" id="add-endpoint" { "Add an endpoint" } }
        @if items.is_empty() {
            section.panel { p { "No endpoints yet. Add one to start receiving webhooks." } }
        } @else {
            table.cards id="endpoints" {
                thead { tr { th { "Endpoint" } th { "State" } th { "Events" } th.num { "p95" } th.num { "Delivered" } th { "Breaker" } } }
                tbody {
                    @for (e, st) in &items {
                        tr {
                            td.wide data-label="Endpoint" {
                                a.url href={"/console/portal/endpoints/" (e.id)} { (e.url) }
                                @if !e.description.is_empty() { br; span.muted { (e.description) } }
                            }
                            td data-label="State" { (state_badge(e)) }
                            td data-label="Events" {
                                @if e.event_types.is_empty() { span.muted { "all" } } @else { (e.event_types.join(", ")) }
                            }
                            td.num data-label="p95" { (page::secs(st.as_ref().and_then(|s| s.p95_s))) }
                            td.num data-label="Delivered" { (st.as_ref().map_or_else(|| "—".to_owned(), |s| page::rate(s.delivered_per_s))) }
                            td data-label="Breaker" {
                                @match st.as_ref().and_then(|s| s.breaker_state.as_deref()) {
                                    Some(b) => span class={"badge " (b)} { (b.replace('_', " ")) },
                                    None => span.muted { "—" },
                                }
                            }
                        }
                    }
                }
            }
        }
        @if let Some(Some(after)) = next {
            div.pager { span {} a href={"/console/portal/?after=" (after)} { "Next page →" } }
        }
    };
    Ok(portal.page("Endpoints", body))
}

fn context<'a>(
    console: &Console,
    portal: &'a Portal,
    action: &'a str,
    submit: &'a str,
) -> FormContext<'a> {
    FormContext {
        action,
        csrf: &portal.csrf,
        submit,
        default_lane: console.app.settings.lane_size,
    }
}

/// `GET /console/portal/endpoints/new`
pub async fn new_form(State(console): State<Console>, portal: Portal) -> Markup {
    let ctx = context(
        &console,
        &portal,
        "/console/portal/endpoints",
        "Add the endpoint",
    );
    let body = html! {
        h1 { "Add an endpoint" }
        section.panel { (form::render(&ctx, &EndpointForm::default(), None)) }
    };
    portal.page("Add an endpoint", body)
}

fn secret_panel(e: &Endpoint, heading: &str, note: &str) -> Markup {
    html! {
        h1 { (heading) }
        section.panel {
            p.url { strong { (e.url) } }
            p { (note) }
            code.secret id="secret" { (e.secret) }
            p.actions {
                button type="button" data-copy="secret" hidden { "Copy" }
                a.button.primary href={"/console/portal/endpoints/" (e.id)} id="open-endpoint" { "Open the endpoint" }
            }
        }
    }
}

/// `POST /console/portal/endpoints`: create, then show the secret once.
pub async fn create(
    State(console): State<Console>,
    portal: Portal,
    CsrfForm(values): CsrfForm<EndpointForm>,
) -> Result<Response, ConsoleError> {
    let outcome = match values.to_create() {
        Ok(req) => create_endpoint(&console.app, &portal.tenant.id, req)
            .await
            .map_err(FieldError::from),
        Err(e) => Err(e),
    };
    match outcome {
        Ok(e) => {
            let note = "Its signing secret is shown only now: keep it where your receiver \
                        verifies signatures (it can be rotated later).";
            Ok(portal
                .page("Endpoint added", secret_panel(&e, "Endpoint added", note))
                .into_response())
        }
        Err(error) => {
            let ctx = context(
                &console,
                &portal,
                "/console/portal/endpoints",
                "Add the endpoint",
            );
            let body = html! {
                h1 { "Add an endpoint" }
                section.panel { (form::render(&ctx, &values, Some(&error))) }
            };
            Ok((
                StatusCode::UNPROCESSABLE_ENTITY,
                portal.page("Add an endpoint", body),
            )
                .into_response())
        }
    }
}

/// `GET /console/portal/endpoints/{id}/edit`
pub async fn edit_form(
    State(console): State<Console>,
    portal: Portal,
    Path(id): Path<String>,
) -> Result<Markup, ConsoleError> {
    let e = endpoint_of(&console, &portal, &id).await?;
    let action = format!("/console/portal/endpoints/{}/edit", e.id);
    let ctx = context(&console, &portal, &action, "Save");
    let body = html! {
        h1 { "Edit endpoint" }
        p.url.muted { (e.id) }
        section.panel { (form::render(&ctx, &EndpointForm::from(&e), None)) }
    };
    Ok(portal.page("Edit endpoint", body))
}

/// `POST /console/portal/endpoints/{id}/edit`
pub async fn update(
    State(console): State<Console>,
    portal: Portal,
    Path(id): Path<String>,
    CsrfForm(values): CsrfForm<EndpointForm>,
) -> Result<Response, ConsoleError> {
    let e = endpoint_of(&console, &portal, &id).await?;
    // As the form showed it.
    let current = e.tls.client.as_ref().map(|c| shown_pem(&c.certificate));
    let outcome = match values.to_update(current.as_deref()) {
        Ok(req) => update_endpoint(&console.app, &portal.tenant.id, &e.id, req)
            .await
            .map_err(FieldError::from),
        Err(err) => Err(err),
    };
    match outcome {
        Ok(e) => Ok(Redirect::to(&format!("/console/portal/endpoints/{}", e.id)).into_response()),
        Err(error) => {
            let action = format!("/console/portal/endpoints/{}/edit", e.id);
            let ctx = context(&console, &portal, &action, "Save");
            let body = html! {
                h1 { "Edit endpoint" }
                section.panel { (form::render(&ctx, &values, Some(&error))) }
            };
            Ok((
                StatusCode::UNPROCESSABLE_ENTITY,
                portal.page("Edit endpoint", body),
            )
                .into_response())
        }
    }
}

async fn toggle(
    console: &Console,
    portal: &Portal,
    id: &str,
    enabled: bool,
) -> Result<Redirect, ConsoleError> {
    let e = endpoint_of(console, portal, id).await?;
    let reason = (!enabled).then(|| "paused in the portal".to_owned());
    let _ = set_enabled(&console.app, &portal.tenant.id, &e.id, enabled, reason).await?;
    Ok(Redirect::to(&format!("/console/portal/endpoints/{}", e.id)))
}

/// `POST /console/portal/endpoints/{id}/enable`
pub async fn enable(
    State(console): State<Console>,
    portal: Portal,
    Path(id): Path<String>,
    CsrfForm(_): CsrfForm<Empty>,
) -> Result<Redirect, ConsoleError> {
    toggle(&console, &portal, &id, true).await
}

/// `POST /console/portal/endpoints/{id}/disable`: pause; deliveries wait until it is enabled.
pub async fn disable(
    State(console): State<Console>,
    portal: Portal,
    Path(id): Path<String>,
    CsrfForm(_): CsrfForm<Empty>,
) -> Result<Redirect, ConsoleError> {
    toggle(&console, &portal, &id, false).await
}

/// `POST /console/portal/endpoints/{id}/rotate-secret`: the new secret, shown once.
pub async fn rotate(
    State(console): State<Console>,
    portal: Portal,
    Path(id): Path<String>,
    CsrfForm(_): CsrfForm<Empty>,
) -> Result<Markup, ConsoleError> {
    let e = endpoint_of(&console, &portal, &id).await?;
    let e = rotate_secret(&console.app, &portal.tenant.id, &e.id, None).await?;
    let until = e
        .previous_secret_until_ms
        .map(page::time)
        .unwrap_or_default();
    let note = format!(
        "The new signing secret is shown only now. Until {until} every webhook carries \
         signatures with both the old and the new secret, so receivers can switch over."
    );
    Ok(portal.page("Secret rotated", secret_panel(&e, "Secret rotated", &note)))
}

/// `GET /console/portal/endpoints/{id}/delete`: confirm (a page, so it works without scripts).
pub async fn delete_form(
    State(console): State<Console>,
    portal: Portal,
    Path(id): Path<String>,
) -> Result<Markup, ConsoleError> {
    let e = endpoint_of(&console, &portal, &id).await?;
    let body = html! {
        section.narrow {
            h1 { "Delete this endpoint?" }
            p.url { strong { (e.url) } }
            p { "Its deliveries, attempts and dead letters are deleted with it. This cannot be undone." }
            form method="post" action={"/console/portal/endpoints/" (e.id) "/delete"} {
                (csrf_field(&portal.csrf))
                div.actions {
                    button.danger type="submit" { "Delete the endpoint" }
                    a.button href={"/console/portal/endpoints/" (e.id)} { "Keep it" }
                }
            }
        }
    };
    Ok(portal.page("Delete endpoint", body))
}

/// `POST /console/portal/endpoints/{id}/delete`
pub async fn delete(
    State(console): State<Console>,
    portal: Portal,
    Path(id): Path<String>,
    CsrfForm(_): CsrfForm<Empty>,
) -> Result<Redirect, ConsoleError> {
    let e = endpoint_of(&console, &portal, &id).await?;
    delete_endpoint(&console.app, &portal.tenant.id, &e.id).await?;
    Ok(Redirect::to("/console/portal/"))
}

/// The action buttons of an endpoint's page.
pub fn actions(e: &Endpoint, csrf: &str) -> Markup {
    let base = format!("/console/portal/endpoints/{}", e.id);
    html! {
        div.actions {
            a.button href={(base) "/edit"} { "Edit" }
            @if e.enabled {
                (post_button(&format!("{base}/disable"), csrf, "Pause", "pause"))
            } @else {
                (post_button(&format!("{base}/enable"), csrf, "Enable", "primary"))
            }
            (post_button(&format!("{base}/rotate-secret"), csrf, "Rotate secret", ""))
            @if e.tls.client.is_some() {
                a.button href={(base) "/client-certificate"} { "Rotate client certificate" }
            }
            a.button href={"/console/portal/messages?endpoint=" (e.id)} { "Deliveries" }
            a.button.danger href={(base) "/delete"} { "Delete" }
        }
    }
}
