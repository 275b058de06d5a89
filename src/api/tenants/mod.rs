//! Tenants (operator only): create, list, get, delete with all their data, rotate the token.

pub(crate) mod status;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Admin;
use super::page::{Page, PageQuery, Q};
use super::time::Timestamp;
use super::views::{check_id, check_text};
use super::{AppState, Body};
use crate::ids;
use crate::model::{SharePolicy, Tenant};
use crate::web::problem::{ApiResult, Problem};

/// `POST /v1/tenants`
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateTenant {
    /// Display name, 1–200 characters.
    pub name: String,
    /// Its share of the pool while tenants compete, relative to the others' weights, 1–1000
    /// (default: the process's `--tenant-weight`, 1).
    #[serde(default, deserialize_with = "crate::api::whole::option")]
    pub weight: Option<u32>,
    /// The largest share of the pool it may hold at any moment, above 0 and at most 1
    /// (default: the process's `--tenant-max-share`, 1: no ceiling).
    pub max_share: Option<f64>,
}

/// `PATCH /v1/tenants/{id}`: the tenant's written share policy. A field left out is kept;
/// `null` returns it to the process default.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateTenant {
    /// 1–1000, or `null` for the default.
    #[serde(default, deserialize_with = "crate::api::whole::double_option")]
    #[schema(value_type = Option<u32>)]
    pub weight: Option<Option<u32>>,
    /// Above 0 and at most 1, or `null` for the default.
    #[serde(default, with = "super::body::double_option")]
    #[schema(value_type = Option<f64>)]
    pub max_share: Option<Option<f64>>,
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
    /// Its own weight (`null`: the process default).
    pub weight: Option<u32>,
    /// Its own ceiling (`null`: the process default).
    pub max_share: Option<f64>,
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
            weight: t.share.weight,
            max_share: t.share.max_share,
            token: None,
        }
    }
}

/// Refuse a weight or a ceiling out of range, naming the field.
pub(crate) fn check_share(share: &SharePolicy) -> ApiResult<()> {
    if let Some(problem) = share.weight.and_then(crate::fairness::weight_problem) {
        return Err(Problem::unprocessable("weight", problem));
    }
    if let Some(problem) = share.max_share.and_then(crate::fairness::max_share_problem) {
        return Err(Problem::unprocessable("max_share", problem));
    }
    Ok(())
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
    // The length counts as given, white space around it included, as the document says.
    check_text("name", &req.name, 200)?;
    let name = req.name.trim();
    if name.is_empty() {
        return Err(Problem::unprocessable(
            "name",
            "name must be 1–200 characters, not only white space",
        ));
    }
    // A name is one line: it is shown in lists and logs.
    if req.name.contains(['\n', '\t']) {
        return Err(Problem::unprocessable(
            "name",
            "name must be one line without tabs",
        ));
    }
    let share = SharePolicy {
        weight: req.weight,
        max_share: req.max_share,
    };
    check_share(&share)?;
    let token = ids::new_token("sk");
    let tenant = Tenant {
        id: ids::new_id("ten"),
        name: name.to_owned(),
        token_hash: ids::hash_token(&token),
        created_at_ms: crate::clock::now_ms(),
        share,
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

/// Change a tenant's weight or ceiling (its share of the pool while tenants compete). Every
/// dispatcher applies it from its next claim of the tenant's work.
#[utoipa::path(patch, path = "/v1/tenants/{id}", operation_id = "updateTenant", tag = "tenants", security(("admin" = [])),
    params(("id" = String, Path, description = "`ten_…`")),
    request_body = UpdateTenant,
    responses((status = 200, body = TenantOut),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(super) async fn update(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
    Body(req): Body<UpdateTenant>,
) -> ApiResult<Json<TenantOut>> {
    check_id("tenant", &id)?;
    let tenant = update_share(&state, &id, req).await?;
    Ok(Json(tenant.into()))
}

/// Check and apply a change to a tenant's share policy (the JSON route and the console share
/// this); nothing is stored unless every field passes.
pub(crate) async fn update_share(
    state: &AppState,
    id: &str,
    req: UpdateTenant,
) -> ApiResult<Tenant> {
    let mut tenant = state.store.tenant(id).await?;
    if let Some(weight) = req.weight {
        tenant.share.weight = weight;
    }
    if let Some(max_share) = req.max_share {
        tenant.share.max_share = max_share;
    }
    check_share(&tenant.share)?;
    state.store.set_tenant_share(id, &tenant.share).await?;
    Ok(tenant)
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
