//! Making deliveries deliverable again: replay dead letters (one, or an endpoint's), resend any
//! delivery (delivered ones included), and recover an endpoint's failed deliveries since a
//! time. Each makes the delivery ready now with its attempts counted afresh; the next attempts
//! are new rows of the same delivery and carry the same `webhook-id` (the message id), so a
//! receiver de-duplicates them like any retry. Each is recorded in the endpoint's event log.

use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::deliveries::{find_delivery, page};
use crate::api::auth::TenantAuth;
use crate::api::endpoints::actions::record;
use crate::api::page::{Page, PageQuery, Q};
use crate::api::time::parse_instant;
use crate::api::views::{DeliveryOut, check_id, delivery_id};
use crate::api::{AppState, Body};
use crate::ids;
use crate::model::{DeliveryFilter, DeliveryState, DeliveryView, ReplayTarget};
use crate::web::problem::{ApiResult, Problem};

/// The answer to a replay.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Replayed {
    /// Dead letters made deliverable again.
    pub replayed: u64,
}

/// The answer to a resend or a recovery.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Resent {
    /// Deliveries made ready now.
    pub resent: u64,
}

/// `GET /v1/dead-letters`: a page, optionally one endpoint's.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct DeadLetterQuery {
    /// Page size, 1–500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    /// The `next` cursor of the previous page (`dlv_…`).
    pub after: Option<String>,
    /// Only this endpoint's dead letters.
    pub endpoint_id: Option<String>,
}

/// `POST /v1/endpoints/{id}/recover`
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Recover {
    /// Recover deliveries of messages accepted at or after this instant (RFC 3339).
    #[schema(format = DateTime)]
    pub since: String,
    /// …and before this one (RFC 3339; default: now).
    #[schema(format = DateTime)]
    pub until: Option<String>,
}

/// Replay one dead letter: ready again now, attempts reset. 409 when it is not dead.
#[utoipa::path(post, path = "/v1/deliveries/{id}/replay", tag = "dead letters",
    operation_id = "replayDeadLetter",
    security(("tenant" = [])),
    params(("id" = String, Path, description = "`dlv_…`")),
    responses((status = 200, body = Replayed),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn replay_one(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> ApiResult<Json<Replayed>> {
    let id = delivery_id(state.store.row_ids(), &id)?;
    let (_, replayed) = redeliver(&state, &tenant.id, id, ReplayTarget::Delivery).await?;
    Ok(Json(Replayed { replayed }))
}

/// Make `tenant`'s delivery `id` deliverable again and record it on its endpoint: a dead
/// letter's replay (`how` = `ReplayTarget::Delivery`, 0 when it was not dead) or a resend of
/// any delivery (`ReplayTarget::Resend`). Returns the delivery as it was and how many were made
/// ready; the JSON routes and the console share this.
pub(crate) async fn redeliver(
    state: &AppState,
    tenant: &str,
    id: i64,
    how: fn(i64) -> ReplayTarget,
) -> ApiResult<(DeliveryView, u64)> {
    let target = how(id);
    let delivery = find_delivery(state, tenant, id).await?;
    let n = state
        .store
        .replay(tenant, target.clone(), crate::clock::now_ms())
        .await?;
    if let Ok(e) = state
        .store
        .endpoint(Some(tenant), &delivery.endpoint_id)
        .await
    {
        let public = state.store.row_ids().format(ids::DELIVERY, id);
        let detail = match target {
            ReplayTarget::Resend(_) => format!(
                "delivery {public} (message {}, was {}) resent",
                delivery.message_id,
                delivery.state.name()
            ),
            _ => format!(
                "dead letter {public} (message {}) replayed",
                delivery.message_id
            ),
        };
        record(state, &e, target.reason(), detail).await;
    }
    Ok((delivery, n))
}

/// The tenant's dead letters, optionally one endpoint's.
#[utoipa::path(get, path = "/v1/dead-letters", tag = "dead letters",
    operation_id = "listDeadLetters",
    security(("tenant" = [])),
    params(DeadLetterQuery),
    responses((status = 200, body = Page<DeliveryOut>),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn dead_letters(
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
    operation_id = "replayEndpointDeadLetters",
    security(("tenant" = [])),
    params(("id" = String, Path, description = "`ep_…`")),
    responses((status = 200, body = Replayed),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn replay_endpoint(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> ApiResult<Json<Replayed>> {
    let replayed = replay_endpoint_dead(&state, &tenant.id, &id).await?;
    Ok(Json(Replayed { replayed }))
}

/// Replay every dead letter of `tenant`'s endpoint `id` and record it (the JSON route and the
/// console).
pub(crate) async fn replay_endpoint_dead(
    state: &AppState,
    tenant: &str,
    id: &str,
) -> ApiResult<u64> {
    check_id("endpoint", id)?;
    let e = state.store.endpoint(Some(tenant), id).await?;
    let now = crate::clock::now_ms();
    let n = state
        .store
        .replay(tenant, ReplayTarget::Endpoint(id.to_owned()), now)
        .await?;
    record(state, &e, "replayed", format!("{n} dead letters replayed")).await;
    Ok(n)
}

/// Resend one delivery in any state but `leased` (409 while an attempt is in flight), delivered
/// ones included: ready now, its attempts counted afresh, the same `webhook-id`.
#[utoipa::path(post, path = "/v1/deliveries/{id}/resend", tag = "deliveries",
    operation_id = "resendDelivery", security(("tenant" = [])),
    params(("id" = String, Path, description = "`dlv_…`")),
    responses((status = 200, body = Resent),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn resend(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> ApiResult<Json<Resent>> {
    let id = delivery_id(state.store.row_ids(), &id)?;
    let (_, resent) = redeliver(&state, &tenant.id, id, ReplayTarget::Resend).await?;
    Ok(Json(Resent { resent }))
}

/// Recover an endpoint's failed deliveries (dead-lettered, or waiting for a retry after a
/// failed attempt) of messages accepted since a time: ready now, attempts counted afresh.
#[utoipa::path(post, path = "/v1/endpoints/{id}/recover", tag = "deliveries",
    operation_id = "recoverEndpoint", security(("tenant" = [])),
    params(("id" = String, Path, description = "`ep_…`")),
    request_body = Recover,
    responses((status = 200, body = Resent),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn recover(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
    Body(req): Body<Recover>,
) -> ApiResult<Json<Resent>> {
    check_id("endpoint", &id)?;
    let now = crate::clock::now_ms();
    let since_ms = parse_instant("since", &req.since).map_err(unprocessable)?;
    let until_ms = match req.until.as_deref() {
        Some(t) => parse_instant("until", t).map_err(unprocessable)?,
        None => now + 1,
    };
    if since_ms >= until_ms {
        return Err(Problem::unprocessable(
            "until",
            "until must be later than since",
        ));
    }
    let e = state.store.endpoint(Some(&tenant.id), &id).await?;
    let target = ReplayTarget::Recover {
        endpoint: id,
        since_ms,
        until_ms,
    };
    let resent = state.store.replay(&tenant.id, target, now).await?;
    let detail = format!(
        "{resent} failed deliveries of messages accepted from {} to {} recovered",
        crate::clock::rfc3339(since_ms),
        crate::clock::rfc3339(until_ms)
    );
    record(&state, &e, "recovered", detail).await;
    Ok(Json(Resent { resent }))
}

/// A bad instant in a request body is a 422, like any other bad field of a body.
fn unprocessable(p: Problem) -> Problem {
    Problem::unprocessable(p.field.as_deref().unwrap_or("body"), p.detail)
}
