//! Deliveries and attempts, per message and per endpoint with a state filter, one delivery
//! with its attempt log. Making deliveries ready again lives in [`super::redelivery`].

use axum::Json;
use axum::extract::{Path, State};
use serde::Serialize;
use utoipa::ToSchema;

use crate::api::AppState;
use crate::api::auth::TenantAuth;
use crate::api::page::{DeliveryQuery, Page, PageQuery, Q};
use crate::api::views::{AttemptOut, DeliveryOut, check_id, delivery_id};
use crate::ids;
use crate::model::{DeliveryFilter, DeliveryState, DeliveryView};
use crate::web::problem::{ApiResult, Problem};

/// A delivery with its attempts.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DeliveryDetail {
    /// The delivery.
    #[serde(flatten)]
    pub delivery: DeliveryOut,
    /// Every attempt, oldest first.
    pub attempt_log: Vec<AttemptOut>,
}

/// One page of deliveries for `filter`, the cursor a delivery id.
pub(crate) async fn page(
    state: &AppState,
    mut filter: DeliveryFilter,
    q: &PageQuery,
) -> ApiResult<Json<Page<DeliveryOut>>> {
    filter.limit = q.limit()?;
    let row_ids = state.store.row_ids();
    filter.after = q.after_number(row_ids, ids::DELIVERY)?;
    let rows = state.store.list_deliveries(&filter).await?;
    let data = rows
        .into_iter()
        .map(|d| DeliveryOut::new(d, row_ids))
        .collect();
    Ok(Json(Page::new(data, filter.limit, |d: &DeliveryOut| {
        d.id.clone()
    })))
}

/// One delivery of the tenant, or 404.
pub(crate) async fn find_delivery(
    state: &AppState,
    tenant: &str,
    id: i64,
) -> ApiResult<DeliveryView> {
    let filter = DeliveryFilter {
        tenant_id: tenant.to_owned(),
        after: Some(id - 1),
        limit: 1,
        ..DeliveryFilter::default()
    };
    let rows = state.store.list_deliveries(&filter).await?;
    rows.into_iter()
        .find(|d| d.id == id)
        .ok_or_else(|| Problem::not_found("delivery"))
}

/// A message's deliveries (one per subscribed endpoint), optionally in one state.
#[utoipa::path(get, path = "/v1/messages/{id}/deliveries", tag = "deliveries",
    operation_id = "listMessageDeliveries",
    security(("tenant" = [])),
    params(("id" = String, Path, description = "`msg_…`"), DeliveryQuery),
    responses((status = 200, body = Page<DeliveryOut>),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn by_message(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
    Q(q): Q<DeliveryQuery>,
) -> ApiResult<Json<Page<DeliveryOut>>> {
    check_id("message", &id)?;
    state.store.message(&tenant.id, &id).await?;
    let filter = DeliveryFilter {
        tenant_id: tenant.id,
        message_id: Some(id),
        state: q.state.map(DeliveryState::from),
        ..DeliveryFilter::default()
    };
    page(&state, filter, &q.page()).await
}

/// Every attempt made for a message, across its deliveries.
#[utoipa::path(get, path = "/v1/messages/{id}/attempts", tag = "deliveries",
    operation_id = "listMessageAttempts",
    security(("tenant" = [])),
    params(("id" = String, Path, description = "`msg_…`")),
    responses((status = 200, body = Page<AttemptOut>),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn message_attempts(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> ApiResult<Json<Page<AttemptOut>>> {
    check_id("message", &id)?;
    let message = state.store.message(&tenant.id, &id).await?;
    let mut data = Vec::new();
    for d in message.deliveries {
        let attempts = state.store.attempts(&tenant.id, d.id).await?;
        let row_ids = state.store.row_ids();
        data.extend(attempts.into_iter().map(|a| AttemptOut::new(a, row_ids)));
    }
    Ok(Json(Page { data, next: None }))
}

/// An endpoint's deliveries, optionally in one state.
#[utoipa::path(get, path = "/v1/endpoints/{id}/deliveries", tag = "deliveries",
    operation_id = "listEndpointDeliveries",
    security(("tenant" = [])),
    params(("id" = String, Path, description = "`ep_…`"), DeliveryQuery),
    responses((status = 200, body = Page<DeliveryOut>),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn by_endpoint(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
    Q(q): Q<DeliveryQuery>,
) -> ApiResult<Json<Page<DeliveryOut>>> {
    check_id("endpoint", &id)?;
    state.store.endpoint(Some(&tenant.id), &id).await?;
    let filter = DeliveryFilter {
        tenant_id: tenant.id,
        endpoint_id: Some(id),
        state: q.state.map(DeliveryState::from),
        ..DeliveryFilter::default()
    };
    page(&state, filter, &q.page()).await
}

/// An endpoint's attempts, newest first (`after` is the id of the last attempt seen).
#[utoipa::path(get, path = "/v1/endpoints/{id}/attempts", tag = "deliveries",
    operation_id = "listEndpointAttempts",
    security(("tenant" = [])),
    params(("id" = String, Path, description = "`ep_…`"), PageQuery),
    responses((status = 200, body = Page<AttemptOut>),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn endpoint_attempts(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
    Q(q): Q<PageQuery>,
) -> ApiResult<Json<Page<AttemptOut>>> {
    check_id("endpoint", &id)?;
    let limit = q.limit()?;
    let row_ids = state.store.row_ids();
    let before = q.after_number(row_ids, ids::ATTEMPT)?;
    state.store.endpoint(Some(&tenant.id), &id).await?;
    let rows = state
        .store
        .endpoint_attempts(&tenant.id, &id, 0, before, limit)
        .await?;
    let data = rows
        .into_iter()
        .map(|a| AttemptOut::new(a, row_ids))
        .collect();
    Ok(Json(Page::new(data, limit, |a: &AttemptOut| a.id.clone())))
}

/// One delivery with its attempt log.
#[utoipa::path(get, path = "/v1/deliveries/{id}", tag = "deliveries",
    operation_id = "getDelivery",
    security(("tenant" = [])),
    params(("id" = String, Path, description = "`dlv_…`")),
    responses((status = 200, body = DeliveryDetail),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn get(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> ApiResult<Json<DeliveryDetail>> {
    let row_ids = state.store.row_ids();
    let id = delivery_id(row_ids, &id)?;
    let delivery = find_delivery(&state, &tenant.id, id).await?;
    let attempts = state.store.attempts(&tenant.id, id).await?;
    Ok(Json(DeliveryDetail {
        delivery: DeliveryOut::new(delivery, row_ids),
        attempt_log: attempts
            .into_iter()
            .map(|a| AttemptOut::new(a, row_ids))
            .collect(),
    }))
}

/// A delivery's attempts, oldest first: status, error kind, duration, truncated response.
#[utoipa::path(get, path = "/v1/deliveries/{id}/attempts", tag = "deliveries",
    operation_id = "listDeliveryAttempts",
    security(("tenant" = [])),
    params(("id" = String, Path, description = "`dlv_…`")),
    responses((status = 200, body = Page<AttemptOut>),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn attempts(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> ApiResult<Json<Page<AttemptOut>>> {
    let row_ids = state.store.row_ids();
    let id = delivery_id(row_ids, &id)?;
    let attempts = state.store.attempts(&tenant.id, id).await?;
    let data = attempts
        .into_iter()
        .map(|a| AttemptOut::new(a, row_ids))
        .collect();
    Ok(Json(Page { data, next: None }))
}
