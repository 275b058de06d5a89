//! Tenants (operator only): create, list, get, delete with all their data, rotate the token.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::auth::Admin;
use super::error::{ApiResult, Problem};
use super::page::{Page, PageQuery};
use super::{AppState, Body};
use crate::ids;
use crate::store::Tenant;

/// `POST /v1/tenants`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTenant {
    /// Display name, 1–200 characters.
    pub name: String,
}

/// A tenant, with its token only when just created or rotated.
#[derive(Debug, Serialize)]
pub struct TenantOut {
    /// `ten_…`
    pub id: String,
    /// Display name.
    pub name: String,
    /// When it was created.
    pub created_at_ms: i64,
    /// The API token: shown once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl From<Tenant> for TenantOut {
    fn from(t: Tenant) -> Self {
        Self {
            id: t.id,
            name: t.name,
            created_at_ms: t.created_at_ms,
            token: None,
        }
    }
}

pub async fn create(
    State(state): State<AppState>,
    _: Admin,
    Body(req): Body<CreateTenant>,
) -> ApiResult<(StatusCode, Json<TenantOut>)> {
    let name = req.name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        return Err(Problem::unprocessable("name", "name must be 1–200 characters"));
    }
    let token = ids::new_token("sk");
    let tenant = Tenant {
        id: ids::new_id("ten"),
        name: name.to_owned(),
        token_hash: ids::hash_token(&token),
        created_at_ms: crate::clock::now_ms(),
    };
    state.store.create_tenant(&tenant).await?;
    let mut out = TenantOut::from(tenant);
    out.token = Some(token);
    Ok((StatusCode::CREATED, Json(out)))
}

pub async fn list(
    State(state): State<AppState>,
    _: Admin,
    Query(q): Query<PageQuery>,
) -> ApiResult<Json<Page<TenantOut>>> {
    let limit = q.limit()?;
    let tenants = state.store.list_tenants(q.after_id("ten_")?, limit).await?;
    let data = tenants.into_iter().map(TenantOut::from).collect();
    Ok(Json(Page::new(data, limit, |t: &TenantOut| t.id.clone())))
}

pub async fn get(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> ApiResult<Json<TenantOut>> {
    Ok(Json(state.store.tenant(&id).await?.into()))
}

pub async fn delete(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    state.store.delete_tenant(&id).await?;
    state.tokens.clear();
    Ok(StatusCode::NO_CONTENT)
}

pub async fn rotate_token(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> ApiResult<Json<TenantOut>> {
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
