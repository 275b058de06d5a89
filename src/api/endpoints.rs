//! Endpoints: create (URL checked by the egress guard), list, get, update, delete.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::auth::TenantAuth;
use super::error::{ApiResult, Problem};
use super::page::{Page, PageQuery};
use super::{AppState, Body};
use crate::ids;
use crate::signing::Secret;
use crate::store::Endpoint;

/// `POST /v1/endpoints`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateEndpoint {
    /// Destination (http or https; checked against the egress guard after DNS).
    pub url: String,
    /// Event types to receive; omitted or empty means all.
    #[serde(default)]
    pub event_types: Vec<String>,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// Lane size override, 1–10000 (clamped by the fairness ceiling).
    pub lane_size: Option<u32>,
    /// Latency breaker ceiling in milliseconds.
    pub latency_ceiling_ms: Option<u32>,
    /// Connect timeout override, milliseconds (within the operator's cap).
    pub connect_timeout_ms: Option<u32>,
    /// Read timeout override, milliseconds.
    pub read_timeout_ms: Option<u32>,
    /// Total deadline override, milliseconds.
    pub total_timeout_ms: Option<u32>,
}

/// `PATCH /v1/endpoints/{id}`: every field optional; `null` clears an override.
#[derive(Debug, Default, Deserialize)]
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
    pub lane_size: Option<Option<u32>>,
    /// Latency ceiling (`null` clears).
    #[serde(default, with = "double_option")]
    pub latency_ceiling_ms: Option<Option<u32>>,
    /// Connect timeout (`null` clears).
    #[serde(default, with = "double_option")]
    pub connect_timeout_ms: Option<Option<u32>>,
    /// Read timeout (`null` clears).
    #[serde(default, with = "double_option")]
    pub read_timeout_ms: Option<Option<u32>>,
    /// Total deadline (`null` clears).
    #[serde(default, with = "double_option")]
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

/// An endpoint as the API shows it; `secret` only on create and rotation.
#[derive(Debug, Serialize)]
pub struct EndpointOut {
    #[serde(flatten)]
    endpoint: Endpoint,
    #[serde(skip_serializing_if = "Option::is_none")]
    secret: Option<String>,
}

impl EndpointOut {
    pub fn new(endpoint: Endpoint, with_secret: bool) -> Self {
        let secret = with_secret.then(|| endpoint.secret.clone());
        Self { endpoint, secret }
    }
}

/// Check a destination URL: scheme, host, and every address it resolves to.
pub async fn check_destination(state: &AppState, url: &str) -> Result<(), Problem> {
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

fn check_limits(
    state: &AppState,
    lane: Option<u32>,
    ceiling: Option<u32>,
    timeouts: [(&str, Option<u32>, std::time::Duration); 3],
) -> Result<(), Problem> {
    if let Some(n) = lane
        && !(1..=10_000).contains(&n)
    {
        return Err(Problem::unprocessable("lane_size", "lane_size must be 1–10000"));
    }
    if let Some(ms) = ceiling
        && !(100..=3_600_000).contains(&ms)
    {
        return Err(Problem::unprocessable(
            "latency_ceiling_ms",
            "latency_ceiling_ms must be 100–3600000",
        ));
    }
    let _ = state;
    for (field, value, cap) in timeouts {
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

pub async fn create(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Body(req): Body<CreateEndpoint>,
) -> ApiResult<(StatusCode, Json<EndpointOut>)> {
    check_destination(&state, &req.url).await?;
    check_event_types(&req.event_types)?;
    let caps = state.settings.timeout_caps;
    check_limits(
        &state,
        req.lane_size,
        req.latency_ceiling_ms,
        [
            ("connect_timeout_ms", req.connect_timeout_ms, caps.connect),
            ("read_timeout_ms", req.read_timeout_ms, caps.read),
            ("total_timeout_ms", req.total_timeout_ms, caps.total),
        ],
    )?;
    if req.description.chars().count() > 1000 {
        return Err(Problem::unprocessable(
            "description",
            "description must be at most 1000 characters",
        ));
    }
    let now = crate::clock::now_ms();
    let endpoint = Endpoint {
        id: ids::new_id("ep"),
        tenant_id: tenant.id,
        url: req.url,
        description: req.description,
        event_types: req.event_types,
        secret: Secret::generate().to_string(),
        previous_secret: None,
        previous_secret_until_ms: None,
        enabled: true,
        disabled_reason: None,
        operational: false,
        lane_size: req.lane_size,
        latency_ceiling_ms: req.latency_ceiling_ms,
        connect_timeout_ms: req.connect_timeout_ms,
        read_timeout_ms: req.read_timeout_ms,
        total_timeout_ms: req.total_timeout_ms,
        failing_since_ms: None,
        created_at_ms: now,
        updated_at_ms: now,
    };
    state.store.create_endpoint(&endpoint).await?;
    Ok((StatusCode::CREATED, Json(EndpointOut::new(endpoint, true))))
}

pub async fn list(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Query(q): Query<PageQuery>,
) -> ApiResult<Json<Page<EndpointOut>>> {
    let limit = q.limit()?;
    let endpoints = state
        .store
        .list_endpoints(&tenant.id, q.after_id("ep_")?, limit)
        .await?;
    let data = endpoints
        .into_iter()
        .filter(|e| !e.operational)
        .map(|e| EndpointOut::new(e, false))
        .collect();
    Ok(Json(Page::new(data, limit, |e: &EndpointOut| {
        e.endpoint.id.clone()
    })))
}

pub async fn get(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> ApiResult<Json<EndpointOut>> {
    let endpoint = state.store.endpoint(Some(&tenant.id), &id).await?;
    Ok(Json(EndpointOut::new(endpoint, false)))
}

pub async fn update(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
    Body(req): Body<UpdateEndpoint>,
) -> ApiResult<Json<EndpointOut>> {
    let mut e = state.store.endpoint(Some(&tenant.id), &id).await?;
    if let Some(url) = req.url {
        check_destination(&state, &url).await?;
        e.url = url;
    }
    if let Some(types) = req.event_types {
        check_event_types(&types)?;
        e.event_types = types;
    }
    if let Some(d) = req.description {
        e.description = d;
    }
    let caps = state.settings.timeout_caps;
    check_limits(
        &state,
        req.lane_size.flatten(),
        req.latency_ceiling_ms.flatten(),
        [
            ("connect_timeout_ms", req.connect_timeout_ms.flatten(), caps.connect),
            ("read_timeout_ms", req.read_timeout_ms.flatten(), caps.read),
            ("total_timeout_ms", req.total_timeout_ms.flatten(), caps.total),
        ],
    )?;
    macro_rules! set {
        ($($f:ident),*) => { $( if let Some(v) = req.$f { e.$f = v; } )* };
    }
    set!(
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

pub async fn delete(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    state.store.delete_endpoint(&tenant.id, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
