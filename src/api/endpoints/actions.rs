//! What a tenant does to an endpoint besides editing it: enable, disable, rotate the signing
//! secret (the old one keeps signing for the overlap), and read its event log.

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::api::AppState;
use crate::api::auth::TenantAuth;
use crate::api::page::{MAX_LIMIT, Page, Q};
use crate::api::views::{EndpointOut, EventOut, check_id, check_text};
use crate::model::{Endpoint, EndpointEvent};
use crate::signing::{Scheme, SigningKey, scheme_of};
use crate::web::problem::{ApiResult, Problem};

/// `POST /v1/endpoints/{id}/disable`: an optional reason.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DisableEndpoint {
    /// Why, for the event log (at most 500 characters).
    pub reason: Option<String>,
}

/// `POST /v1/endpoints/{id}/rotate-secret`: optionally a new scheme.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RotateSecret {
    /// The new key's scheme (`v1` or `v1a`); omitted keeps the current one. During the overlap
    /// both keys sign, so a receiver moving from `v1` to `v1a` keeps verifying throughout.
    pub signature_scheme: Option<Scheme>,
}

/// `?limit=` of the event log.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct EventsQuery {
    /// Most events to return, 1–500 (default 100), newest first.
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
}

/// The body of an action whose body is optional: none, or `null` (which its document allows:
/// `oneOf: [null, object]`), is `None`; anything else must be the object (so a body of only
/// white space, which is no JSON, is refused like any other malformed body).
fn optional_body<T: serde::de::DeserializeOwned>(raw: &[u8]) -> Result<Option<T>, Problem> {
    if raw.is_empty() || raw.trim_ascii() == b"null" {
        return Ok(None);
    }
    crate::api::body::parse(raw).map(Some)
}

/// Record an endpoint event; a failure to record never fails the request that caused it.
pub(crate) async fn record(state: &AppState, e: &Endpoint, kind: &str, detail: String) {
    let event = EndpointEvent {
        tenant_id: e.tenant_id.clone(),
        endpoint_id: e.id.clone(),
        kind: kind.to_owned(),
        detail,
        at_ms: crate::clock::now_ms(),
    };
    if let Err(err) = state.store.record_event(&event).await {
        tracing::warn!(error = %err, endpoint = %e.id, kind, "cannot record endpoint event");
    }
}

/// Enable or disable `tenant`'s endpoint `id` and record it (the JSON routes and the console).
pub(crate) async fn set_enabled(
    state: &AppState,
    tenant: &str,
    id: &str,
    enabled: bool,
    reason: Option<String>,
) -> ApiResult<Json<EndpointOut>> {
    check_id("endpoint", id)?;
    state.store.endpoint(Some(tenant), id).await?;
    let now = crate::clock::now_ms();
    state
        .store
        .set_endpoint_enabled(id, enabled, reason.as_deref(), now)
        .await?;
    if let Some(ctx) = &state.dispatcher {
        ctx.reload_endpoint(id);
    }
    let e = state.store.endpoint(Some(tenant), id).await?;
    let (kind, detail) = if enabled {
        ("enabled", "enabled by the tenant".to_owned())
    } else {
        ("disabled", reason.unwrap_or_default())
    };
    record(state, &e, kind, detail).await;
    Ok(Json(EndpointOut::new(e, false)))
}

/// Enable an endpoint: its waiting deliveries are claimed again.
#[utoipa::path(post, path = "/v1/endpoints/{id}/enable", operation_id = "enableEndpoint", tag = "endpoints",
    security(("tenant" = [])),
    params(("id" = String, Path, description = "`ep_…`")),
    responses((status = 200, body = EndpointOut),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn enable(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> ApiResult<Json<EndpointOut>> {
    set_enabled(&state, &tenant.id, &id, true, None).await
}

/// Disable an endpoint: its deliveries are kept and wait until it is enabled again.
#[utoipa::path(post, path = "/v1/endpoints/{id}/disable", operation_id = "disableEndpoint", tag = "endpoints",
    security(("tenant" = [])),
    params(("id" = String, Path, description = "`ep_…`")),
    request_body(content = Option<DisableEndpoint>, description = "optional; an empty body is fine"),
    responses((status = 200, body = EndpointOut),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn disable(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
    raw: axum::body::Bytes,
) -> ApiResult<Json<EndpointOut>> {
    let reason = optional_body::<DisableEndpoint>(&raw)?.and_then(|b| b.reason);
    if let Some(r) = &reason {
        check_text("reason", r, 500)?;
    }
    let reason = reason
        .filter(|r| !r.trim().is_empty())
        .unwrap_or_else(|| "disabled by the tenant".to_owned());
    set_enabled(&state, &tenant.id, &id, false, Some(reason)).await
}

/// Rotate the signing key (optionally to another scheme): the answer carries the new secret;
/// the old key keeps signing (both signatures are sent) until `previous_secret_until`.
#[utoipa::path(post, path = "/v1/endpoints/{id}/rotate-secret", tag = "endpoints",
    operation_id = "rotateEndpointSecret", security(("tenant" = [])),
    params(("id" = String, Path, description = "`ep_…`")),
    request_body(content = Option<RotateSecret>, description = "optional; an empty body keeps the scheme"),
    responses((status = 200, body = EndpointOut),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn rotate_secret(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
    raw: axum::body::Bytes,
) -> ApiResult<Json<EndpointOut>> {
    let scheme = optional_body::<RotateSecret>(&raw)?.and_then(|b| b.signature_scheme);
    let e = rotate(&state, &tenant.id, &id, scheme).await?;
    Ok(Json(EndpointOut::new(e, true)))
}

/// Give `tenant`'s endpoint `id` a new key (of `scheme`, or of its current one), the old one
/// signing for the overlap; the endpoint returned carries the new secret (the JSON route and
/// the console).
pub(crate) async fn rotate(
    state: &AppState,
    tenant: &str,
    id: &str,
    scheme: Option<Scheme>,
) -> ApiResult<Endpoint> {
    check_id("endpoint", id)?;
    let mut e = state.store.endpoint(Some(tenant), id).await?;
    let now = crate::clock::now_ms();
    let until = now + state.settings.rotation_overlap.as_millis() as i64;
    let scheme = scheme.unwrap_or_else(|| scheme_of(&e.secret));
    let old = std::mem::replace(&mut e.secret, SigningKey::generate(scheme).to_string());
    e.previous_secret = Some(old);
    e.previous_secret_until_ms = Some(until);
    e.updated_at_ms = now;
    state.store.update_endpoint(&e).await?;
    if let Some(ctx) = &state.dispatcher {
        ctx.reload_endpoint(&e.id);
    }
    let detail = format!(
        "signing key rotated ({}); the previous one also signs until {}",
        scheme.as_str(),
        crate::clock::rfc3339(until)
    );
    record(state, &e, "secret_rotated", detail).await;
    Ok(e)
}

/// The endpoint's event log, newest first: breaker transitions, disables, replays, rotations.
#[utoipa::path(get, path = "/v1/endpoints/{id}/events", operation_id = "listEndpointEvents", tag = "endpoints",
    security(("tenant" = [])),
    params(("id" = String, Path, description = "`ep_…`"), EventsQuery),
    responses((status = 200, body = Page<EventOut>),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn events(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
    Q(q): Q<EventsQuery>,
) -> ApiResult<Json<Page<EventOut>>> {
    check_id("endpoint", &id)?;
    let limit = match q.limit {
        None => 100,
        Some(n) if (1..=MAX_LIMIT).contains(&n) => n,
        Some(n) => {
            return Err(Problem::bad_request(
                "limit",
                format!("limit {n} must be 1–{MAX_LIMIT}"),
            ));
        }
    };
    let events = state.store.list_events(&tenant.id, &id, limit).await?;
    let data = events.into_iter().map(EventOut::from).collect();
    Ok(Json(Page { data, next: None }))
}
