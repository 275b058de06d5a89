//! Tenants (operator only): create, list, get, delete with all their data, rotate the token.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Admin;
use super::error::{ApiResult, Problem};
use super::page::{Page, PageQuery, Q};
use super::time::Timestamp;
use super::views::{check_id, check_text};
use super::{AppState, Body};
use crate::ids;
use crate::store::Tenant;

/// `POST /v1/tenants`
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateTenant {
    /// Display name, 1–200 characters.
    pub name: String,
}

/// A tenant, with its token only when just created or rotated.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct TenantOut {
    /// `ten_…`
    pub id: String,
    /// Display name.
    pub name: String,
    /// When it was created.
    pub created_at: Timestamp,
    /// The API token: shown once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl From<Tenant> for TenantOut {
    fn from(t: Tenant) -> Self {
        Self {
            id: t.id,
            name: t.name,
            created_at: Timestamp(t.created_at_ms),
            token: None,
        }
    }
}

/// Create a tenant; the answer carries its API token, shown once.
#[utoipa::path(post, path = "/v1/tenants", operation_id = "createTenant", tag = "tenants", security(("admin" = [])),
    request_body = CreateTenant,
    responses((status = 201, body = TenantOut),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(super) async fn create(
    State(state): State<AppState>,
    _: Admin,
    Body(req): Body<CreateTenant>,
) -> ApiResult<(StatusCode, Json<TenantOut>)> {
    let name = req.name.trim();
    if name.is_empty() {
        return Err(Problem::unprocessable(
            "name",
            "name must be 1–200 characters",
        ));
    }
    check_text("name", name, 200)?;
    // A name is one line: it is shown in lists and logs.
    if name.contains(['\n', '\t']) {
        return Err(Problem::unprocessable(
            "name",
            "name must be one line without tabs",
        ));
    }
    let token = ids::new_token("sk");
    let tenant = Tenant {
        id: ids::new_id("ten"),
        name: name.to_owned(),
        token_hash: ids::hash_token(&token),
        created_at_ms: crate::clock::now_ms(),
        share: Default::default(),
    };
    state.store.create_tenant(&tenant).await?;
    let mut out = TenantOut::from(tenant);
    out.token = Some(token);
    Ok((StatusCode::CREATED, Json(out)))
}

/// List tenants in id order.
#[utoipa::path(get, path = "/v1/tenants", operation_id = "listTenants", tag = "tenants", security(("admin" = [])),
    params(PageQuery),
    responses((status = 200, body = Page<TenantOut>),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(super) async fn list(
    State(state): State<AppState>,
    _: Admin,
    Q(q): Q<PageQuery>,
) -> ApiResult<Json<Page<TenantOut>>> {
    let limit = q.limit()?;
    let tenants = state.store.list_tenants(q.after_id("ten_")?, limit).await?;
    let data = tenants.into_iter().map(TenantOut::from).collect();
    Ok(Json(Page::new(data, limit, |t: &TenantOut| t.id.clone())))
}

/// One tenant.
#[utoipa::path(get, path = "/v1/tenants/{id}", operation_id = "getTenant", tag = "tenants", security(("admin" = [])),
    params(("id" = String, Path, description = "`ten_…`")),
    responses((status = 200, body = TenantOut),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(super) async fn get(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> ApiResult<Json<TenantOut>> {
    check_id("tenant", &id)?;
    Ok(Json(state.store.tenant(&id).await?.into()))
}

/// Delete a tenant and all of its data (endpoints, messages, deliveries, attempts).
#[utoipa::path(delete, path = "/v1/tenants/{id}", operation_id = "deleteTenant", tag = "tenants", security(("admin" = [])),
    params(("id" = String, Path, description = "`ten_…`")),
    responses((status = 204),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(super) async fn delete(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    check_id("tenant", &id)?;
    state.store.delete_tenant(&id).await?;
    state.tokens.clear();
    Ok(StatusCode::NO_CONTENT)
}

/// Replace a tenant's API token; the old one stops working at once.
#[utoipa::path(post, path = "/v1/tenants/{id}/rotate-token", operation_id = "rotateTenantToken", tag = "tenants",
    security(("admin" = [])),
    params(("id" = String, Path, description = "`ten_…`")),
    responses((status = 200, body = TenantOut),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(super) async fn rotate_token(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> ApiResult<Json<TenantOut>> {
    check_id("tenant", &id)?;
    let token = ids::new_token("sk");
    state
        .store
        .set_tenant_token(&id, &ids::hash_token(&token))
        .await?;
    state.tokens.clear();
    let mut out = TenantOut::from(state.store.tenant(&id).await?);
    out.token = Some(token);
    Ok(Json(out))
}
