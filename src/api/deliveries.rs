//! Deliveries and attempts, per message and per endpoint with a state filter; dead letters and
//! their replay (visible again, attempts reset, the replay recorded on the endpoint).

use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::auth::TenantAuth;
use super::endpoint_actions::record;
use super::error::{ApiResult, Problem};
use super::page::{DeliveryQuery, Page, PageQuery, Q};
use super::views::{AttemptOut, DeliveryOut, check_id, delivery_id};
use crate::store::{DeliveryFilter, DeliveryState, DeliveryView, ReplayTarget};

/// The answer to a replay.
#[derive(Debug, Serialize, ToSchema)]
pub struct Replayed {
    /// Dead letters made deliverable again.
    pub replayed: u64,
}

/// `GET /v1/dead-letters`: a page, optionally one endpoint's.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeadLetterQuery {
    /// Page size, 1–500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    /// The `next` cursor of the previous page.
    pub after: Option<String>,
    /// Only this endpoint's dead letters.
    pub endpoint_id: Option<String>,
}

/// A delivery with its attempts.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryDetail {
    /// The delivery.
    #[serde(flatten)]
    pub delivery: DeliveryOut,
    /// Every attempt, oldest first.
    pub attempt_log: Vec<AttemptOut>,
}

async fn page(
    state: &AppState,
    mut filter: DeliveryFilter,
    q: &PageQuery,
) -> ApiResult<Json<Page<DeliveryOut>>> {
    filter.limit = q.limit()?;
    filter.after = q.after_number()?;
    let rows = state.store.list_deliveries(&filter).await?;
    let data = rows.into_iter().map(DeliveryOut::from).collect();
    Ok(Json(Page::new(data, filter.limit, |d: &DeliveryOut| {
        d.id.to_string()
    })))
}

/// One delivery of the tenant, or 404.
pub async fn find_delivery(state: &AppState, tenant: &str, id: i64) -> ApiResult<DeliveryView> {
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
    security(("tenant" = [])),
    params(("id" = String, Path, description = "`msg_…`"), DeliveryQuery),
    responses((status = 200, body = Page<DeliveryOut>),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub async fn by_message(
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
    security(("tenant" = [])),
    params(("id" = String, Path, description = "`msg_…`")),
    responses((status = 200, body = Page<AttemptOut>),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub async fn message_attempts(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> ApiResult<Json<Page<AttemptOut>>> {
    check_id("message", &id)?;
    let message = state.store.message(&tenant.id, &id).await?;
    let mut data = Vec::new();
    for d in message.deliveries {
        let attempts = state.store.attempts(&tenant.id, d.id).await?;
        data.extend(attempts.into_iter().map(AttemptOut::from));
    }
    Ok(Json(Page { data, next: None }))
}

/// An endpoint's deliveries, optionally in one state.
#[utoipa::path(get, path = "/v1/endpoints/{id}/deliveries", tag = "deliveries",
    security(("tenant" = [])),
    params(("id" = String, Path, description = "`ep_…`"), DeliveryQuery),
    responses((status = 200, body = Page<DeliveryOut>),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub async fn by_endpoint(
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
    security(("tenant" = [])),
    params(("id" = String, Path, description = "`ep_…`"), PageQuery),
    responses((status = 200, body = Page<AttemptOut>),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub async fn endpoint_attempts(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
    Q(q): Q<PageQuery>,
) -> ApiResult<Json<Page<AttemptOut>>> {
    check_id("endpoint", &id)?;
    let limit = q.limit()?;
    let before = q.after_number()?;
    state.store.endpoint(Some(&tenant.id), &id).await?;
    let rows = state
        .store
        .endpoint_attempts(&tenant.id, &id, 0, before, limit)
        .await?;
    let data = rows.into_iter().map(AttemptOut::from).collect();
    Ok(Json(Page::new(data, limit, |a: &AttemptOut| {
        a.id.to_string()
    })))
}

/// One delivery with its attempt log.
#[utoipa::path(get, path = "/v1/deliveries/{id}", tag = "deliveries",
    security(("tenant" = [])),
    params(("id" = i64, Path, description = "delivery id")),
    responses((status = 200, body = DeliveryDetail),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub async fn get(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> ApiResult<Json<DeliveryDetail>> {
    let id = delivery_id(&id)?;
    let delivery = find_delivery(&state, &tenant.id, id).await?;
    let attempts = state.store.attempts(&tenant.id, id).await?;
    Ok(Json(DeliveryDetail {
        delivery: delivery.into(),
        attempt_log: attempts.into_iter().map(AttemptOut::from).collect(),
    }))
}

/// A delivery's attempts, oldest first: status, error kind, duration, truncated response.
#[utoipa::path(get, path = "/v1/deliveries/{id}/attempts", tag = "deliveries",
    security(("tenant" = [])),
    params(("id" = i64, Path, description = "delivery id")),
    responses((status = 200, body = Page<AttemptOut>),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub async fn attempts(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> ApiResult<Json<Page<AttemptOut>>> {
    let id = delivery_id(&id)?;
    let attempts = state.store.attempts(&tenant.id, id).await?;
    let data = attempts.into_iter().map(AttemptOut::from).collect();
    Ok(Json(Page { data, next: None }))
}

/// Replay one dead letter: ready again now, attempts reset. 409 when it is not dead.
#[utoipa::path(post, path = "/v1/deliveries/{id}/replay", tag = "dead letters",
    security(("tenant" = [])),
    params(("id" = i64, Path, description = "delivery id")),
    responses((status = 200, body = Replayed),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub async fn replay_one(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> ApiResult<Json<Replayed>> {
    let id = delivery_id(&id)?;
    let delivery = find_delivery(&state, &tenant.id, id).await?;
    let now = crate::clock::now_ms();
    let n = state
        .store
        .replay(&tenant.id, ReplayTarget::Delivery(id), now)
        .await?;
    if let Ok(e) = state
        .store
        .endpoint(Some(&tenant.id), &delivery.endpoint_id)
        .await
    {
        let detail = format!(
            "dead letter {id} (message {}) replayed",
            delivery.message_id
        );
        record(&state, &e, "replayed", detail).await;
    }
    Ok(Json(Replayed { replayed: n }))
}

/// The tenant's dead letters, optionally one endpoint's.
#[utoipa::path(get, path = "/v1/dead-letters", tag = "dead letters",
    security(("tenant" = [])),
    params(DeadLetterQuery),
    responses((status = 200, body = Page<DeliveryOut>),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub async fn dead_letters(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Q(q): Q<DeadLetterQuery>,
) -> ApiResult<Json<Page<DeliveryOut>>> {
    if let Some(ep) = &q.endpoint_id {
        check_id("endpoint", ep).map_err(|p| p.field("endpoint_id"))?;
        state
            .store
            .endpoint(Some(&tenant.id), ep)
            .await
            .map_err(|e| Problem::from(e).field("endpoint_id"))?;
    }
    let filter = DeliveryFilter {
        tenant_id: tenant.id,
        endpoint_id: q.endpoint_id,
        state: Some(DeliveryState::Dead),
        ..DeliveryFilter::default()
    };
    let page_query = PageQuery {
        limit: q.limit,
        after: q.after,
    };
    page(&state, filter, &page_query).await
}

/// Replay every dead letter of an endpoint; the replay is recorded in its event log.
#[utoipa::path(post, path = "/v1/endpoints/{id}/dead-letters/replay", tag = "dead letters",
    security(("tenant" = [])),
    params(("id" = String, Path, description = "`ep_…`")),
    responses((status = 200, body = Replayed),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub async fn replay_endpoint(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> ApiResult<Json<Replayed>> {
    check_id("endpoint", &id)?;
    let e = state.store.endpoint(Some(&tenant.id), &id).await?;
    let now = crate::clock::now_ms();
    let n = state
        .store
        .replay(&tenant.id, ReplayTarget::Endpoint(id), now)
        .await?;
    record(&state, &e, "replayed", format!("{n} dead letters replayed")).await;
    Ok(Json(Replayed { replayed: n }))
}
