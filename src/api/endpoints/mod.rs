//! Endpoints: create (checked by [`checks`]), list, get, update, delete.

pub(crate) mod actions;
pub(crate) mod checks;
pub(crate) mod destination;
mod destination_aws;
mod destination_fields;
mod destination_gcp;
pub(crate) mod jwks;
pub(crate) mod status;
pub(crate) mod tls;

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use utoipa::ToSchema;

use super::auth::TenantAuth;
use super::event_types::check_event_types;
use super::page::{Page, PageQuery, Q};
use super::views::{EndpointOut, check_id, check_text};
use super::{AppState, Body};
use crate::ids;
use crate::model::{DeliveryOrder, Endpoint};
use crate::signing::{Scheme, SigningKey};
use crate::web::problem::{ApiResult, Problem};

use checks::{RateLimitIn, check_headers, check_limits, check_one_authorization, check_rate_limit};
use destination::DestinationIn;
use tls::{
    OAuth2In, certificate_bytes, check_ca_bundle, check_certificate_room, check_oauth2, identity_of,
};

/// `POST /v1/endpoints`
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateEndpoint {
    /// An HTTP destination (http or https; checked against the egress guard after DNS): the
    /// shorthand for `"destination": {"type": "http", "url": …}`. Give this or `destination`.
    #[serde(default)]
    pub url: Option<String>,
    /// What the endpoint delivers to: `http` or a broker (`rabbitmq`), with the broker's
    /// write-only credentials. Give this or `url`.
    #[serde(default)]
    pub destination: Option<DestinationIn>,
    /// Event types to receive: exact (`order.created`), a prefix pattern (`order.*`: every type
    /// below `order.`) or `*`; omitted or empty means all.
    #[serde(default)]
    pub event_types: Vec<String>,
    /// Free text, at most 1000 characters.
    #[serde(default)]
    pub description: String,
    /// Headers to send with every attempt (at most 32; hop-by-hop, `webhook-*`, `host` and the
    /// body's `content-*` headers are refused).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// `v1` (HMAC-SHA256, the default) or `v1a` (Ed25519: the answer shows the public key).
    #[serde(default)]
    pub signature_scheme: Scheme,
    /// Lane size override, 1–10000 (clamped by the fairness ceiling).
    #[serde(default, deserialize_with = "crate::api::whole::option")]
    pub lane_size: Option<u32>,
    /// Latency breaker ceiling in milliseconds, 100–3600000.
    #[serde(default, deserialize_with = "crate::api::whole::option")]
    pub latency_ceiling_ms: Option<u32>,
    /// Connect timeout override, milliseconds (within the operator's cap).
    #[serde(default, deserialize_with = "crate::api::whole::option")]
    pub connect_timeout_ms: Option<u32>,
    /// Read timeout override, milliseconds.
    #[serde(default, deserialize_with = "crate::api::whole::option")]
    pub read_timeout_ms: Option<u32>,
    /// Total deadline override, milliseconds.
    #[serde(default, deserialize_with = "crate::api::whole::option")]
    pub total_timeout_ms: Option<u32>,
    /// CA certificates (PEM) trusted for this endpoint beside the operator's and the
    /// system's: for a receiver or a broker (`amqps://`, `tls://`, `rediss://`) whose
    /// certificate a private CA signed.
    pub tls_ca_bundle: Option<String>,
    /// A client certificate (PEM, then any intermediates) presented when the receiver or the
    /// broker asks for one (mTLS); given with `tls_client_key`.
    pub tls_client_certificate: Option<String>,
    /// The client certificate's private key (PEM): write-only, never shown.
    pub tls_client_key: Option<String>,
    /// OAuth2 client credentials: a bearer token goes with every attempt.
    pub oauth2: Option<OAuth2In>,
    /// At most this many events per second (with a burst), across every dispatcher; deliveries
    /// beyond it wait for their turn without using an attempt. Omitted or `null`: no limit.
    pub rate_limit: Option<RateLimitIn>,
    /// `unordered` (the default: several deliveries at once, as the lane allows) or `fifo`:
    /// one delivery in flight at a time across every dispatcher, strictly in the order the
    /// messages were accepted, the next only once the one before it is delivered or
    /// dead-lettered (a failing delivery holds up everything behind it until it succeeds or
    /// its retries run out).
    #[serde(default)]
    pub ordering: DeliveryOrder,
    /// Send W3C `traceparent` (and `tracestate`) with each attempt (HTTP headers, or a broker message's headers), as the attempt
    /// span's context, so the receiver's own tracing joins the producer's trace (default
    /// false: no trace header leaves sluice). Sent whenever the message came with a
    /// `traceparent`, and for every message while sluice exports traces.
    #[serde(default)]
    pub trace_context: bool,
}

/// `PATCH /v1/endpoints/{id}`: every field optional; `null` clears an override.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateEndpoint {
    /// New HTTP destination (the shorthand for `destination` of type `http`).
    pub url: Option<String>,
    /// New destination, of any type (changing the type is allowed). Credentials left out are
    /// kept while the type stays the same, and dropped when it changes.
    pub destination: Option<DestinationIn>,
    /// New filter.
    pub event_types: Option<Vec<String>>,
    /// New description.
    pub description: Option<String>,
    /// New headers, replacing all of them (`{}` removes them).
    pub headers: Option<BTreeMap<String, String>>,
    /// Enable or disable.
    pub enabled: Option<bool>,
    /// Lane override (`null` clears).
    #[serde(default, deserialize_with = "crate::api::whole::double_option")]
    #[schema(value_type = Option<u32>)]
    pub lane_size: Option<Option<u32>>,
    /// Latency ceiling (`null` clears).
    #[serde(default, deserialize_with = "crate::api::whole::double_option")]
    #[schema(value_type = Option<u32>)]
    pub latency_ceiling_ms: Option<Option<u32>>,
    /// Connect timeout (`null` clears).
    #[serde(default, deserialize_with = "crate::api::whole::double_option")]
    #[schema(value_type = Option<u32>)]
    pub connect_timeout_ms: Option<Option<u32>>,
    /// Read timeout (`null` clears).
    #[serde(default, deserialize_with = "crate::api::whole::double_option")]
    #[schema(value_type = Option<u32>)]
    pub read_timeout_ms: Option<Option<u32>>,
    /// Total deadline (`null` clears).
    #[serde(default, deserialize_with = "crate::api::whole::double_option")]
    #[schema(value_type = Option<u32>)]
    pub total_timeout_ms: Option<Option<u32>>,
    /// The client certificate presented (PEM, with `tls_client_key`; `null` with it removes
    /// both).
    #[serde(default, with = "super::body::double_option")]
    #[schema(value_type = Option<String>)]
    pub tls_client_certificate: Option<Option<String>>,
    /// Its private key (PEM), write-only. To keep presenting the current certificate while a
    /// receiver moves to the new one, rotate instead.
    #[serde(default, with = "super::body::double_option")]
    #[schema(value_type = Option<String>)]
    pub tls_client_key: Option<Option<String>>,
    /// CA certificates (PEM) trusted for this endpoint (`null` removes them).
    #[serde(default, with = "super::body::double_option")]
    #[schema(value_type = Option<String>)]
    pub tls_ca_bundle: Option<Option<String>>,
    /// OAuth2 client credentials (`null` removes them; `client_secret` may be left out to keep
    /// the stored one).
    #[serde(default, with = "super::body::double_option")]
    #[schema(value_type = Option<OAuth2In>)]
    pub oauth2: Option<Option<OAuth2In>>,
    /// Rate limit (`null` removes it).
    #[serde(default, with = "super::body::double_option")]
    #[schema(value_type = Option<RateLimitIn>)]
    pub rate_limit: Option<Option<RateLimitIn>>,
    /// `unordered` or `fifo`. Turned on with deliveries in flight, the next starts once all of
    /// them are settled.
    pub ordering: Option<DeliveryOrder>,
    /// Send W3C `traceparent` (and `tracestate`) with each attempt (HTTP headers, or a broker message's headers).
    pub trace_context: Option<bool>,
}

/// A new endpoint row for `tenant`, enabled, with a fresh key of `scheme`.
pub(crate) fn new_endpoint(
    id: String,
    tenant: String,
    url: String,
    operational: bool,
    scheme: Scheme,
) -> Endpoint {
    let now = crate::clock::now_ms();
    let key = SigningKey::generate(scheme).to_string();
    Endpoint {
        operational,
        ..Endpoint::new(id, tenant, url, key, now)
    }
}

/// Create an endpoint; the answer carries its signing secret, shown once.
#[utoipa::path(post, path = "/v1/endpoints", operation_id = "createEndpoint", tag = "endpoints", security(("tenant" = [])),
    request_body = CreateEndpoint,
    responses((status = 201, body = EndpointOut),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn create(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Body(req): Body<CreateEndpoint>,
) -> ApiResult<(StatusCode, Json<EndpointOut>)> {
    let endpoint = create_endpoint(&state, &tenant.id, req).await?;
    Ok((StatusCode::CREATED, Json(EndpointOut::new(endpoint, true))))
}

/// Check and store a new endpoint of `tenant` (the JSON route and the console share this).
pub(crate) async fn create_endpoint(
    state: &AppState,
    tenant: &str,
    req: CreateEndpoint,
) -> ApiResult<Endpoint> {
    let Some(target) = destination::check(state, req.url.as_deref(), req.destination).await? else {
        return Err(Problem::unprocessable(
            "url",
            "url (an HTTP destination) or destination is required",
        ));
    };
    if target.destination.is_aws() && target.credentials.as_ref().is_none_or(Option::is_none) {
        return Err(destination::aws_key_required());
    }
    check_event_types(&req.event_types)?;
    check_limits(
        state,
        req.lane_size,
        req.latency_ceiling_ms,
        [
            req.connect_timeout_ms,
            req.read_timeout_ms,
            req.total_timeout_ms,
        ],
    )?;
    check_text("description", &req.description, 1000)?;
    let rate_limit = req.rate_limit.map(check_rate_limit).transpose()?;
    let headers = check_headers(&req.headers)?;
    let ca_bundle = req
        .tls_ca_bundle
        .as_deref()
        .map(check_ca_bundle)
        .transpose()?;
    let identity = identity_of(
        req.tls_client_certificate.map(Some),
        req.tls_client_key.map(Some),
    )?;
    let oauth2 = match req.oauth2 {
        Some(o) => Some(check_oauth2(state, o, None).await?),
        None => None,
    };
    let mut endpoint = new_endpoint(
        ids::new_id("ep"),
        tenant.to_owned(),
        String::new(),
        false,
        req.signature_scheme,
    );
    endpoint.set_destination(target.destination);
    endpoint.destination_credentials = target.credentials.flatten();
    endpoint.headers = headers;
    endpoint.description = req.description;
    endpoint.event_types = req.event_types;
    endpoint.lane_size = req.lane_size;
    endpoint.latency_ceiling_ms = req.latency_ceiling_ms;
    endpoint.connect_timeout_ms = req.connect_timeout_ms;
    endpoint.read_timeout_ms = req.read_timeout_ms;
    endpoint.total_timeout_ms = req.total_timeout_ms;
    endpoint.rate_limit = rate_limit;
    endpoint.ordering = req.ordering;
    endpoint.trace_context = req.trace_context;
    let field = match &ca_bundle {
        Some(_) => "tls_ca_bundle",
        None => "tls_client_certificate",
    };
    endpoint.tls.ca_bundle = ca_bundle;
    endpoint.tls.client = identity.flatten();
    endpoint.oauth2 = oauth2;
    check_one_authorization(&endpoint)?;
    check_certificate_room(state, &endpoint, 0, field).await?;
    state.store.create_endpoint(&endpoint).await?;
    Ok(endpoint)
}

/// List the tenant's endpoints (the operational webhook is listed on its own route). Each shows
/// its certificates' fingerprints rather than their PEM, which `GET /v1/endpoints/{id}` shows.
#[utoipa::path(get, path = "/v1/endpoints", operation_id = "listEndpoints", tag = "endpoints", security(("tenant" = [])),
    params(PageQuery),
    responses((status = 200, body = Page<EndpointOut>),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn list(
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
        .map(EndpointOut::listed)
        .collect();
    Ok(Json(Page { data, next }))
}

/// One endpoint.
#[utoipa::path(get, path = "/v1/endpoints/{id}", operation_id = "getEndpoint", tag = "endpoints", security(("tenant" = [])),
    params(("id" = String, Path, description = "`ep_…`")),
    responses((status = 200, body = EndpointOut),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn get(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> ApiResult<Json<EndpointOut>> {
    check_id("endpoint", &id)?;
    let endpoint = state.store.endpoint(Some(&tenant.id), &id).await?;
    Ok(Json(EndpointOut::new(endpoint, false)))
}

/// Change an endpoint; everything is checked before anything is stored.
#[utoipa::path(patch, path = "/v1/endpoints/{id}", operation_id = "updateEndpoint", tag = "endpoints", security(("tenant" = [])),
    params(("id" = String, Path, description = "`ep_…`")),
    request_body = UpdateEndpoint,
    responses((status = 200, body = EndpointOut),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn update(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
    Body(req): Body<UpdateEndpoint>,
) -> ApiResult<Json<EndpointOut>> {
    let e = update_endpoint(&state, &tenant.id, &id, req).await?;
    Ok(Json(EndpointOut::new(e, false)))
}

/// Check and apply a change to `tenant`'s endpoint `id` (the JSON route and the console share
/// this); nothing is stored unless every field passes.
pub(crate) async fn update_endpoint(
    state: &AppState,
    tenant: &str,
    id: &str,
    req: UpdateEndpoint,
) -> ApiResult<Endpoint> {
    check_id("endpoint", id)?;
    let mut e = state.store.endpoint(Some(tenant), id).await?;
    let target = destination::check(state, req.url.as_deref(), req.destination).await?;
    if let Some(types) = &req.event_types {
        check_event_types(types)?;
    }
    if let Some(d) = &req.description {
        check_text("description", d, 1000)?;
    }
    let headers = req.headers.as_ref().map(check_headers).transpose()?;
    let rate_limit = match req.rate_limit {
        Some(Some(r)) => Some(Some(check_rate_limit(r)?)),
        Some(None) => Some(None),
        None => None,
    };
    let ca_bundle = match &req.tls_ca_bundle {
        Some(Some(pem)) => Some(Some(check_ca_bundle(pem)?)),
        Some(None) => Some(None),
        None => None,
    };
    let identity = identity_of(req.tls_client_certificate, req.tls_client_key)?;
    let oauth2 = match req.oauth2 {
        Some(Some(o)) => Some(Some(check_oauth2(state, o, e.oauth2.as_ref()).await?)),
        Some(None) => Some(None),
        None => None,
    };
    check_limits(
        state,
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
    if let Some(target) = target {
        let same_kind = target.destination.kind() == e.destination.kind();
        match target.credentials {
            Some(c) => e.destination_credentials = c,
            // An AWS destination signs every call: it cannot start without a key.
            None if !same_kind && target.destination.is_aws() => {
                return Err(destination::aws_key_required());
            }
            None if !same_kind => e.destination_credentials = None,
            None => {}
        }
        e.set_destination(target.destination);
    }
    if let Some(headers) = headers {
        e.headers = headers;
    }
    let held = certificate_bytes(&e.tls);
    let field = match &ca_bundle {
        Some(Some(_)) => "tls_ca_bundle",
        _ => "tls_client_certificate",
    };
    if let Some(bundle) = ca_bundle {
        e.tls.ca_bundle = bundle;
    }
    if let Some(identity) = identity {
        // A replacement, not a rotation: nothing of the old identity is kept.
        e.tls.client = identity;
        e.tls.previous_client = None;
        e.tls.previous_client_until_ms = None;
    }
    if let Some(oauth2) = oauth2 {
        e.oauth2 = oauth2;
    }
    if let Some(rate_limit) = rate_limit {
        e.rate_limit = rate_limit;
    }
    set!(
        event_types,
        description,
        lane_size,
        latency_ceiling_ms,
        connect_timeout_ms,
        read_timeout_ms,
        total_timeout_ms,
        ordering,
        trace_context
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
    check_one_authorization(&e)?;
    check_certificate_room(state, &e, held, field).await?;
    e.updated_at_ms = crate::clock::now_ms();
    state.store.update_endpoint(&e).await?;
    if let Some(ctx) = &state.dispatcher {
        ctx.reload_endpoint(&e.id);
    }
    Ok(e)
}

/// Delete an endpoint and its deliveries.
#[utoipa::path(delete, path = "/v1/endpoints/{id}", operation_id = "deleteEndpoint", tag = "endpoints", security(("tenant" = [])),
    params(("id" = String, Path, description = "`ep_…`")),
    responses((status = 204),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn delete(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    delete_endpoint(&state, &tenant.id, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Delete `tenant`'s endpoint `id` with its deliveries (the JSON route and the console).
pub(crate) async fn delete_endpoint(state: &AppState, tenant: &str, id: &str) -> ApiResult<()> {
    check_id("endpoint", id)?;
    state.store.delete_endpoint(tenant, id).await?;
    Ok(())
}
