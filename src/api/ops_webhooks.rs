//! Operational webhooks: a tenant registers one URL that sluice itself notifies, signed and
//! through the same delivery machinery, when one of its endpoints is disabled, is being
//! throttled (sustained shedding above 20 % of offered), or a message is dead-lettered.
//!
//! The URL is stored as an endpoint with `operational = true` and a fixed id per tenant, so a
//! tenant has at most one; [`send`](crate::operational_webhooks::send) enqueues a message addressed to it alone.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use utoipa::ToSchema;

use super::auth::TenantAuth;
use super::endpoints::checks::check_destination;
use super::endpoints::new_endpoint;
use super::views::{EndpointOut, check_text};
use super::{AppState, Body};
use crate::operational_webhooks::*;
use crate::store::StoreError;
use crate::web::problem::{ApiResult, Problem};

/// `PUT /v1/operational-webhook`
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OperationalWebhook {
    /// Where sluice sends its notifications (checked by the egress guard).
    pub url: String,
    /// Free text, at most 1000 characters.
    #[serde(default)]
    pub description: String,
}

/// Register (201, with the signing secret) or change (200) the tenant's operational webhook.
#[utoipa::path(put, path = "/v1/operational-webhook", operation_id = "setOperationalWebhook", tag = "operational webhook",
    security(("tenant" = [])),
    request_body = OperationalWebhook,
    responses((status = 201, body = EndpointOut), (status = 200, body = EndpointOut),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub async fn put(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Body(req): Body<OperationalWebhook>,
) -> ApiResult<(StatusCode, Json<EndpointOut>)> {
    let url = check_destination(&state, &req.url).await?;
    check_text("description", &req.description, 1000)?;
    let id = operational_id(&tenant.id);
    match state.store.endpoint(Some(&tenant.id), &id).await {
        Ok(mut e) => {
            e.url = url;
            e.description = req.description;
            e.updated_at_ms = crate::clock::now_ms();
            state.store.update_endpoint(&e).await?;
            if let Some(ctx) = &state.dispatcher {
                ctx.reload_endpoint(&e.id);
            }
            Ok((StatusCode::OK, Json(EndpointOut::new(e, false))))
        }
        Err(StoreError::NotFound(_)) => {
            let mut e = new_endpoint(id, tenant.id, url, true, crate::signing::Scheme::V1);
            e.description = req.description;
            state.store.create_endpoint(&e).await?;
            Ok((StatusCode::CREATED, Json(EndpointOut::new(e, true))))
        }
        Err(other) => Err(other.into()),
    }
}

/// The tenant's operational webhook (its deliveries and status are under `/v1/endpoints/{id}`).
#[utoipa::path(get, path = "/v1/operational-webhook", operation_id = "getOperationalWebhook", tag = "operational webhook",
    security(("tenant" = [])),
    responses((status = 200, body = EndpointOut),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub async fn get(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
) -> ApiResult<Json<EndpointOut>> {
    let id = operational_id(&tenant.id);
    let e = state.store.endpoint(Some(&tenant.id), &id).await?;
    Ok(Json(EndpointOut::new(e, false)))
}

/// Stop operational notifications.
#[utoipa::path(delete, path = "/v1/operational-webhook", operation_id = "deleteOperationalWebhook", tag = "operational webhook",
    security(("tenant" = [])),
    responses((status = 204),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub async fn delete(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
) -> ApiResult<StatusCode> {
    let id = operational_id(&tenant.id);
    state.store.delete_endpoint(&tenant.id, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
