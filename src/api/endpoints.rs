//! Endpoints: create (URL checked by the egress guard), list, get, update, delete.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use utoipa::ToSchema;

use super::auth::TenantAuth;
use super::error::{ApiResult, Problem};
use super::page::{Page, PageQuery, Q};
use super::views::{EndpointOut, check_id, check_text};
use super::{AppState, Body};
use crate::ids;
use crate::signing::Secret;
use crate::store::Endpoint;

/// `POST /v1/endpoints`
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateEndpoint {
    /// Destination (http or https; checked against the egress guard after DNS).
    pub url: String,
    /// Event types to receive; omitted or empty means all.
    #[serde(default)]
    pub event_types: Vec<String>,
    /// Free text, at most 1000 characters.
    #[serde(default)]
    pub description: String,
    /// Lane size override, 1–10000 (clamped by the fairness ceiling).
    pub lane_size: Option<u32>,
    /// Latency breaker ceiling in milliseconds, 100–3600000.
    pub latency_ceiling_ms: Option<u32>,
    /// Connect timeout override, milliseconds (within the operator's cap).
    pub connect_timeout_ms: Option<u32>,
    /// Read timeout override, milliseconds.
    pub read_timeout_ms: Option<u32>,
    /// Total deadline override, milliseconds.
    pub total_timeout_ms: Option<u32>,
}

/// `PATCH /v1/endpoints/{id}`: every field optional; `null` clears an override.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateEndpoint {
    /// New destination.
    pub url: Option<String>,
    /// New filter.
    pub event_types: Option<Vec<String>>,
    /// New description.
    pub description: Option<String>,
    /// Enable or disable.
    pub enabled: Option<bool>,
    /// Lane override (`null` clears).
    #[serde(default, with = "double_option")]
    #[schema(value_type = Option<u32>)]
    pub lane_size: Option<Option<u32>>,
    /// Latency ceiling (`null` clears).
    #[serde(default, with = "double_option")]
    #[schema(value_type = Option<u32>)]
    pub latency_ceiling_ms: Option<Option<u32>>,
    /// Connect timeout (`null` clears).
    #[serde(default, with = "double_option")]
    #[schema(value_type = Option<u32>)]
    pub connect_timeout_ms: Option<Option<u32>>,
    /// Read timeout (`null` clears).
    #[serde(default, with = "double_option")]
    #[schema(value_type = Option<u32>)]
    pub read_timeout_ms: Option<Option<u32>>,
    /// Total deadline (`null` clears).
    #[serde(default, with = "double_option")]
    #[schema(value_type = Option<u32>)]
    pub total_timeout_ms: Option<Option<u32>>,
}

mod double_option {
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
    where
        D: Deserializer<'de>,
        T: Deserialize<'de>,
    {
        Option::<T>::deserialize(d).map(Some)
    }
}

/// Check a destination URL: scheme, host, and every address it resolves to.
pub async fn check_destination(state: &AppState, url: &str) -> Result<(), Problem> {
    if url.len() > 2048 {
        return Err(Problem::unprocessable(
            "url",
            "url must be at most 2048 bytes",
        ));
    }
    let parsed = state
        .egress
        .check_url(url)
        .map_err(|e| Problem::unprocessable("url", e.to_string()))?;
    if let Some(url::Host::Domain(host)) = parsed.host() {
        let port = parsed.port_or_known_default().unwrap_or(443);
        state
            .egress
            .resolve_checked(host, port)
            .await
            .map_err(|e| Problem::unprocessable("url", e.to_string()))?;
    }
    Ok(())
}

fn check_event_types(types: &[String]) -> Result<(), Problem> {
    if types.len() > 100 {
        return Err(Problem::unprocessable(
            "event_types",
            "at most 100 event types",
        ));
    }
    for t in types {
        super::messages::check_event_type(t).map_err(|p| p.field("event_types"))?;
    }
    Ok(())
}

/// Lane, ceiling and timeouts, each within its range (timeouts within the operator's caps).
fn check_limits(
    state: &AppState,
    lane: Option<u32>,
    ceiling: Option<u32>,
    timeouts: [Option<u32>; 3],
) -> Result<(), Problem> {
    if let Some(n) = lane
        && !(1..=10_000).contains(&n)
    {
        return Err(Problem::unprocessable(
            "lane_size",
            "lane_size must be 1–10000",
        ));
    }
    if let Some(ms) = ceiling
        && !(100..=3_600_000).contains(&ms)
    {
        return Err(Problem::unprocessable(
            "latency_ceiling_ms",
            "latency_ceiling_ms must be 100–3600000",
        ));
    }
    let caps = state.settings.timeout_caps;
    let named = [
        ("connect_timeout_ms", caps.connect),
        ("read_timeout_ms", caps.read),
        ("total_timeout_ms", caps.total),
    ];
    for ((field, cap), value) in named.into_iter().zip(timeouts) {
        if let Some(ms) = value
            && (ms == 0 || u128::from(ms) > cap.as_millis())
        {
            return Err(Problem::unprocessable(
                field,
                format!("{field} must be 1–{} (the operator's cap)", cap.as_millis()),
            ));
        }
    }
    Ok(())
}

/// A new endpoint row for `tenant`, enabled, with a fresh secret.
pub fn new_endpoint(id: String, tenant: String, url: String, operational: bool) -> Endpoint {
    let now = crate::clock::now_ms();
    Endpoint {
        id,
        tenant_id: tenant,
        url,
        description: String::new(),
        event_types: Vec::new(),
        secret: Secret::generate().to_string(),
        previous_secret: None,
        previous_secret_until_ms: None,
        enabled: true,
        disabled_reason: None,
        operational,
        lane_size: None,
        latency_ceiling_ms: None,
        connect_timeout_ms: None,
        read_timeout_ms: None,
        total_timeout_ms: None,
        failing_since_ms: None,
        created_at_ms: now,
        updated_at_ms: now,
    }
}

/// Create an endpoint; the answer carries its signing secret, shown once.
#[utoipa::path(post, path = "/v1/endpoints", tag = "endpoints", security(("tenant" = [])),
    request_body = CreateEndpoint,
    responses((status = 201, body = EndpointOut),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub async fn create(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Body(req): Body<CreateEndpoint>,
) -> ApiResult<(StatusCode, Json<EndpointOut>)> {
    check_destination(&state, &req.url).await?;
    check_event_types(&req.event_types)?;
    check_limits(
        &state,
        req.lane_size,
        req.latency_ceiling_ms,
        [
            req.connect_timeout_ms,
            req.read_timeout_ms,
            req.total_timeout_ms,
        ],
    )?;
    check_text("description", &req.description, 1000)?;
    let mut endpoint = new_endpoint(ids::new_id("ep"), tenant.id, req.url, false);
    endpoint.description = req.description;
    endpoint.event_types = req.event_types;
    endpoint.lane_size = req.lane_size;
    endpoint.latency_ceiling_ms = req.latency_ceiling_ms;
    endpoint.connect_timeout_ms = req.connect_timeout_ms;
    endpoint.read_timeout_ms = req.read_timeout_ms;
    endpoint.total_timeout_ms = req.total_timeout_ms;
    state.store.create_endpoint(&endpoint).await?;
    Ok((StatusCode::CREATED, Json(EndpointOut::new(endpoint, true))))
}

/// List the tenant's endpoints (the operational webhook is listed on its own route).
#[utoipa::path(get, path = "/v1/endpoints", tag = "endpoints", security(("tenant" = [])),
    params(PageQuery),
    responses((status = 200, body = Page<EndpointOut>),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub async fn list(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Q(q): Q<PageQuery>,
) -> ApiResult<Json<Page<EndpointOut>>> {
    let limit = q.limit()?;
    let endpoints = state
        .store
        .list_endpoints(&tenant.id, q.after_id("ep_")?, limit)
        .await?;
    // The cursor is the last row read, even when it was the (hidden) operational endpoint.
    let next = (endpoints.len() as u32 >= limit)
        .then(|| endpoints.last().map(|e| e.id.clone()))
        .flatten();
    let data = endpoints
        .into_iter()
        .filter(|e| !e.operational)
        .map(|e| EndpointOut::new(e, false))
        .collect();
    Ok(Json(Page { data, next }))
}

/// One endpoint.
#[utoipa::path(get, path = "/v1/endpoints/{id}", tag = "endpoints", security(("tenant" = [])),
    params(("id" = String, Path, description = "`ep_…`")),
    responses((status = 200, body = EndpointOut),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub async fn get(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> ApiResult<Json<EndpointOut>> {
    check_id("endpoint", &id)?;
    let endpoint = state.store.endpoint(Some(&tenant.id), &id).await?;
    Ok(Json(EndpointOut::new(endpoint, false)))
}

/// Change an endpoint; everything is checked before anything is stored.
#[utoipa::path(patch, path = "/v1/endpoints/{id}", tag = "endpoints", security(("tenant" = [])),
    params(("id" = String, Path, description = "`ep_…`")),
    request_body = UpdateEndpoint,
    responses((status = 200, body = EndpointOut),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub async fn update(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
    Body(req): Body<UpdateEndpoint>,
) -> ApiResult<Json<EndpointOut>> {
    check_id("endpoint", &id)?;
    let mut e = state.store.endpoint(Some(&tenant.id), &id).await?;
    if let Some(url) = &req.url {
        check_destination(&state, url).await?;
    }
    if let Some(types) = &req.event_types {
        check_event_types(types)?;
    }
    if let Some(d) = &req.description {
        check_text("description", d, 1000)?;
    }
    check_limits(
        &state,
        req.lane_size.flatten(),
        req.latency_ceiling_ms.flatten(),
        [
            req.connect_timeout_ms.flatten(),
            req.read_timeout_ms.flatten(),
            req.total_timeout_ms.flatten(),
        ],
    )?;
    macro_rules! set {
        ($($f:ident),*) => { $( if let Some(v) = req.$f { e.$f = v; } )* };
    }
    set!(
        url,
        event_types,
        description,
        lane_size,
        latency_ceiling_ms,
        connect_timeout_ms,
        read_timeout_ms,
        total_timeout_ms
    );
    if let Some(enabled) = req.enabled {
        if enabled && !e.enabled {
            e.disabled_reason = None;
            e.failing_since_ms = None;
        } else if !enabled && e.enabled {
            e.disabled_reason = Some("disabled by the tenant".into());
        }
        e.enabled = enabled;
    }
    e.updated_at_ms = crate::clock::now_ms();
    state.store.update_endpoint(&e).await?;
    if let Some(ctx) = &state.dispatcher {
        ctx.endpoints.invalidate(&e.id);
    }
    Ok(Json(EndpointOut::new(e, false)))
}

/// Delete an endpoint and its deliveries.
#[utoipa::path(delete, path = "/v1/endpoints/{id}", tag = "endpoints", security(("tenant" = [])),
    params(("id" = String, Path, description = "`ep_…`")),
    responses((status = 204),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub async fn delete(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    check_id("endpoint", &id)?;
    state.store.delete_endpoint(&tenant.id, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
