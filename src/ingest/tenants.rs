//! The tenants a source's messages named and the store knew, remembered as long as the API
//! trusts a verified token ([`TOKEN_CACHE_TTL`]), so a stream of one tenant's events costs no
//! look-up each, and a deleted tenant's events are refused within the same bound as its token.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::time::Instant;

use crate::api::auth::TOKEN_CACHE_TTL;

/// Most tenants remembered; past it, the memory starts over (a look-up each, once).
const MOST: usize = 10_000;

/// Tenants known to exist, and when the store said so.
#[derive(Default)]
pub(super) struct KnownTenants(Mutex<HashMap<String, Instant>>);

impl KnownTenants {
    /// Was `id` found less than [`TOKEN_CACHE_TTL`] ago?
    pub(super) fn knows(&self, id: &str) -> bool {
        let known = self.0.lock().unwrap_or_else(|p| p.into_inner());
        known
            .get(id)
            .is_some_and(|at| at.elapsed() < TOKEN_CACHE_TTL)
    }

    /// The store has just found `id`.
    pub(super) fn found(&self, id: &str) {
        let mut known = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if known.len() >= MOST && !known.contains_key(id) {
            known.clear();
        }
        known.insert(id.to_owned(), Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_tenant_is_remembered_as_long_as_a_token() {
        let known = KnownTenants::default();
        assert!(!known.knows("ten_1"));
        known.found("ten_1");
        assert!(known.knows("ten_1") && !known.knows("ten_2"));
        tokio::time::advance(TOKEN_CACHE_TTL).await;
        assert!(!known.knows("ten_1"), "looked up again");
    }
}
