//! The durable queue: one `Store` trait, an embedded SQLite driver and a PostgreSQL driver.
//!
//! Every operation is one short transaction that commits before it returns; nothing here ever
//! holds a transaction while the caller talks to the network. Times are wall-clock milliseconds
//! since the Unix epoch (`*_ms`), passed in by the caller so tests can move time.

mod model;
pub mod postgres;
pub mod sqlite;

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::Notify;

pub use model::*;

/// What a store operation can fail with; callers branch on `NotFound`, `Conflict` and `Unavailable`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The named row does not exist (or belongs to another tenant).
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The operation conflicts with existing data (e.g. a duplicate name).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The database could not be reached or the connection broke; the operation did not commit.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The database refused the operation for another reason.
    #[error("store error: {0}")]
    Database(String),
}

/// Result alias for store operations.
pub type StoreResult<T> = Result<T, StoreError>;

/// The durable queue and the resources around it.
///
/// Both drivers pass the same conformance suite (`tests/store_conformance.rs`).
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Which driver this is ("sqlite" or "postgres"), for logs and reports.
    fn driver(&self) -> &'static str;

    /// Signalled when new work may be ready (after an enqueue, a replay or a re-enable), so idle
    /// dispatchers wake without polling. PostgreSQL relays `NOTIFY` from other processes.
    fn work_signal(&self) -> Arc<Notify>;

    /// Is the database reachable right now?
    async fn ping(&self) -> StoreResult<()>;

    // ---- settings -------------------------------------------------------------------------

    /// Read an operator setting (e.g. the admin token hash).
    async fn setting(&self, key: &str) -> StoreResult<Option<String>>;
    /// Write an operator setting.
    async fn set_setting(&self, key: &str, value: &str) -> StoreResult<()>;

    // ---- tenants --------------------------------------------------------------------------

    /// Create a tenant with an already hashed API token.
    async fn create_tenant(&self, tenant: &Tenant) -> StoreResult<()>;
    /// A tenant by id.
    async fn tenant(&self, id: &str) -> StoreResult<Tenant>;
    /// The tenant whose API token hashes to `token_hash`.
    async fn tenant_by_token(&self, token_hash: &str) -> StoreResult<Option<Tenant>>;
    /// Tenants in id order after `after`.
    async fn list_tenants(&self, after: Option<&str>, limit: u32) -> StoreResult<Vec<Tenant>>;
    /// Replace a tenant's token hash (rotation; the old token stops working at once).
    async fn set_tenant_token(&self, id: &str, token_hash: &str) -> StoreResult<()>;
    /// Delete a tenant and all of its data.
    async fn delete_tenant(&self, id: &str) -> StoreResult<()>;

    // ---- endpoints ------------------------------------------------------------------------

    /// Create an endpoint.
    async fn create_endpoint(&self, endpoint: &Endpoint) -> StoreResult<()>;
    /// An endpoint by id; `tenant` restricts it to one tenant (another tenant's id is NotFound).
    async fn endpoint(&self, tenant: Option<&str>, id: &str) -> StoreResult<Endpoint>;
    /// A tenant's endpoints in id order after `after`.
    async fn list_endpoints(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<Endpoint>>;
    /// Replace an endpoint's mutable fields (url, filter, limits, secrets, enabled state).
    async fn update_endpoint(&self, endpoint: &Endpoint) -> StoreResult<()>;
    /// Delete an endpoint and its deliveries.
    async fn delete_endpoint(&self, tenant: &str, id: &str) -> StoreResult<()>;
    /// Enable or disable an endpoint, with the reason for a disable. Deliveries are kept.
    async fn set_endpoint_enabled(
        &self,
        id: &str,
        enabled: bool,
        reason: Option<&str>,
        now_ms: i64,
    ) -> StoreResult<()>;

    // ---- messages -------------------------------------------------------------------------

    /// Store messages and fan each out to the tenant's enabled, matching endpoints, all in one
    /// transaction. A message whose idempotency key was already used returns the original.
    async fn enqueue(&self, messages: &[NewMessage], now_ms: i64) -> StoreResult<Vec<Enqueued>>;
    /// A message and its deliveries.
    async fn message(&self, tenant: &str, id: &str) -> StoreResult<MessageView>;
    /// A tenant's messages, newest first, before `before` (an id cursor).
    async fn list_messages(
        &self,
        tenant: &str,
        before: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<MessageSummary>>;

    // ---- the queue ------------------------------------------------------------------------

    /// Lease up to `limit` ready, visible deliveries, fairly across endpoints, and commit.
    async fn claim(&self, request: &ClaimRequest) -> StoreResult<Vec<Claimed>>;
    /// Apply outcomes; each names its lease token and a stale token changes nothing.
    /// Returns the ids whose outcome was applied.
    async fn settle(&self, settlements: &[Settlement], now_ms: i64) -> StoreResult<Vec<i64>>;
    /// Push a lease's expiry to `lease_until_ms` if the token still holds it.
    async fn extend_lease(
        &self,
        delivery_id: i64,
        lease_token: i64,
        lease_until_ms: i64,
    ) -> StoreResult<bool>;
    /// Return expired leases to ready; dead-letter those that expired `max_expiries` times.
    async fn reap(&self, now_ms: i64, max_expiries: u32) -> StoreResult<ReapReport>;
    /// Retention: delete up to `limit` delivered deliveries last changed before `before_ms`
    /// (with their attempts), then messages older than that with no deliveries left. Ready,
    /// leased and dead-lettered deliveries are never purged. Returns deliveries deleted.
    async fn purge(&self, before_ms: i64, limit: u32) -> StoreResult<u64>;

    // ---- deliveries, attempts, dead letters -----------------------------------------------

    /// Deliveries filtered by message, endpoint and state, in id order after `after`.
    async fn list_deliveries(&self, filter: &DeliveryFilter) -> StoreResult<Vec<DeliveryView>>;
    /// The attempts made for one delivery, oldest first.
    async fn attempts(&self, tenant: &str, delivery_id: i64) -> StoreResult<Vec<AttemptView>>;
    /// An endpoint's attempts that started at or after `since_ms`, newest first, with ids below
    /// `before` (a cursor); another tenant's endpoint yields none.
    async fn endpoint_attempts(
        &self,
        tenant: &str,
        endpoint_id: &str,
        since_ms: i64,
        before: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<AttemptView>>;
    /// Make dead-lettered deliveries ready again with attempts reset; by delivery or by endpoint.
    /// Returns how many were replayed.
    async fn replay(&self, tenant: &str, target: ReplayTarget, now_ms: i64) -> StoreResult<u64>;

    /// Record something that happened to an endpoint (breaker transition, disable, replay).
    async fn record_event(&self, event: &EndpointEvent) -> StoreResult<()>;
    /// An endpoint's recorded events, newest first.
    async fn list_events(
        &self,
        tenant: &str,
        endpoint_id: &str,
        limit: u32,
    ) -> StoreResult<Vec<EndpointEvent>>;
    /// Remember when an endpoint's unbroken run of failures began (None: it is healthy).
    async fn set_endpoint_failing(&self, id: &str, since_ms: Option<i64>) -> StoreResult<()>;

    // ---- operators ------------------------------------------------------------------------

    /// Depth by state, oldest due ready delivery per tenant, and arrival counters.
    async fn queue_stats(&self, now_ms: i64) -> StoreResult<QueueStats>;
}

/// The column values a settlement writes: (state, visible_at, attempts increment, touches
/// last_status/last_error, last_status, last_error).
pub(crate) fn settle_values(
    s: &Settlement,
    now_ms: i64,
) -> (i64, Option<i64>, i64, bool, Option<i64>, Option<String>) {
    let inc = i64::from(s.attempt.is_some());
    let status = s.attempt.as_ref().and_then(|a| a.status.map(i64::from));
    let kind = s.attempt.as_ref().and_then(|a| a.error_kind.clone());
    match &s.outcome {
        SettleOutcome::Delivered => (2, None, inc, true, status, None),
        SettleOutcome::Retry { at_ms } => (0, Some(*at_ms), inc, true, status, kind),
        SettleOutcome::Shed { at_ms } => (0, Some(*at_ms), 0, false, None, None),
        SettleOutcome::Dead { reason } => (3, None, inc, true, status, Some(reason.clone())),
        SettleOutcome::Release => (0, Some(now_ms), 0, false, None, None),
    }
}

/// A shared handle to whichever driver is configured.
pub type SharedStore = Arc<dyn Store>;

/// Open the store named by `database_url`, or the embedded SQLite file under `data_dir`, and
/// run its migrations.
pub async fn open(
    database_url: Option<&str>,
    data_dir: &std::path::Path,
    sqlite: sqlite::SqliteOptions,
) -> StoreResult<SharedStore> {
    match database_url {
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            Ok(Arc::new(postgres::PostgresStore::connect(url).await?))
        }
        Some(url) if url.starts_with("sqlite:") => {
            let path = url
                .trim_start_matches("sqlite://")
                .trim_start_matches("sqlite:");
            Ok(Arc::new(sqlite::SqliteStore::open(path.as_ref(), sqlite)?))
        }
        Some(other) => Err(StoreError::Database(format!(
            "unsupported database url {other:?}: use postgres://… or sqlite:PATH"
        ))),
        None => {
            std::fs::create_dir_all(data_dir).map_err(|e| {
                StoreError::Unavailable(format!("cannot create {}: {e}", data_dir.display()))
            })?;
            Ok(Arc::new(sqlite::SqliteStore::open(
                &data_dir.join("sluice.db"),
                sqlite,
            )?))
        }
    }
}
