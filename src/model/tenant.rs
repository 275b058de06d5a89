//! Tenants: the customers of the platform, each with its own token and its share of the pool.

use serde::Serialize;

/// A tenant's written policy; `None` takes the process default (`--tenant-weight`,
/// `--tenant-max-share`).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct SharePolicy {
    /// Relative share of the pool while tenants compete, 1–1000.
    pub weight: Option<u32>,
    /// The largest fraction of the pool the tenant may hold, in (0, 1]; 1 is no ceiling.
    pub max_share: Option<f64>,
}

/// A customer of the platform: owns endpoints and messages, authenticates with its own token.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tenant {
    /// `ten_…`
    pub id: String,
    /// Display name.
    pub name: String,
    /// SHA-256 hex of the tenant's API token (the token itself is never stored).
    #[serde(skip)]
    pub token_hash: String,
    /// When it was created.
    pub created_at_ms: i64,
    /// Its share of the pool while tenants compete (weight, ceiling).
    pub share: SharePolicy,
}
