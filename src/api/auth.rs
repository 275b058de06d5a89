//! Bearer-token authentication: the operator's admin token and per-tenant API tokens, both
//! stored only as SHA-256 hashes. A tenant token sees only its own tenant's resources.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::AppState;
use crate::ids::hash_token;
use crate::model::Tenant;
use crate::web::problem::Problem;

/// How long a verified tenant token is trusted before it is checked again (so a rotated or
/// deleted tenant's old token stops working within this bound).
pub(crate) const TOKEN_CACHE_TTL: Duration = Duration::from_secs(2);

/// The settings key holding the admin token's hash.
pub const ADMIN_TOKEN_SETTING: &str = "admin_token_sha256";

/// Proof that the caller presented the admin token.
pub struct Admin;

/// The tenant whose token the caller presented.
pub struct TenantAuth(pub Tenant);

/// Recently verified tenant tokens.
#[derive(Default)]
pub struct TokenCache {
    entries: Mutex<HashMap<String, (Tenant, Instant)>>,
}

impl TokenCache {
    fn get(&self, hash: &str) -> Option<Tenant> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .get(hash)
            .filter(|(_, at)| at.elapsed() < TOKEN_CACHE_TTL)
            .map(|(t, _)| t.clone())
    }

    fn put(&self, hash: String, tenant: Tenant) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() > 10_000 {
            entries.retain(|_, (_, at)| at.elapsed() < TOKEN_CACHE_TTL);
        }
        entries.insert(hash, (tenant, Instant::now()));
    }

    /// Forget everything (after a rotation or delete).
    pub fn clear(&self) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

fn bearer(parts: &Parts) -> Result<&str, Problem> {
    let value = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .ok_or_else(|| Problem::unauthorized("missing Authorization: Bearer <token>"))?
        .to_str()
        .map_err(|_| Problem::unauthorized("malformed Authorization header"))?;
    value
        .strip_prefix("Bearer ")
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Problem::unauthorized("expected Authorization: Bearer <token>"))
}

impl FromRequestParts<AppState> for Admin {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Problem> {
        let token = bearer(parts)?;
        if hash_token(token) == *state.admin_hash {
            Ok(Admin)
        } else {
            Err(Problem::unauthorized("not the admin token"))
        }
    }
}

impl FromRequestParts<AppState> for TenantAuth {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Problem> {
        let hash = hash_token(bearer(parts)?);
        if let Some(t) = state.tokens.get(&hash) {
            return Ok(TenantAuth(t));
        }
        match state.store.tenant_by_token(&hash).await? {
            Some(t) => {
                state.tokens.put(hash, t.clone());
                Ok(TenantAuth(t))
            }
            None => Err(Problem::unauthorized("unknown or revoked tenant token")),
        }
    }
}
