//! The durable queue: one `Store` trait, an embedded SQLite driver and a PostgreSQL driver.
//!
//! Every operation is one short transaction that commits before it returns; nothing here ever
//! holds a transaction while the caller talks to the network. Times are wall-clock milliseconds
//! since the Unix epoch (`*_ms`), passed in by the caller so tests can move time.

pub mod deadline;
pub mod message_log;
pub mod postgres;
pub mod sqlite;
pub mod subscriptions;

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::model::*;

pub use message_log::MessageFilter;

/// What a store operation can fail with; callers branch on `NotFound`, `Conflict`,
/// `Unavailable` and `Full`.
///
/// Every message keeps the database's own cause (the SQLSTATE and server message on PostgreSQL,
/// the extended result code and message on SQLite, the address a pool could not reach), never
/// a connection string or password, so it can go into logs and 5xx problem details as it is.
/// The SQLSTATE stays inside the text rather than in a field of its own: callers branch on the
/// variant, and the drivers choose the variant from the code.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The named row does not exist (or belongs to another tenant).
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The operation conflicts with existing data (e.g. a duplicate name).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The database could not be reached, the connection broke, or it did not answer within
    /// the store deadline. The operation did not commit, or (after a deadline) may still: a
    /// retry must be idempotent (producers retry with their `Idempotency-Key`).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// No room to write: the disk or the database is full (SQLite `SQLITE_FULL`, PostgreSQL
    /// 53100 `disk_full`). The operation did not commit; reads still work, and writes work
    /// again once an operator makes room.
    #[error("no room to write, the database is full: {0}")]
    Full(String),
    /// The database refused the operation for another reason.
    #[error("store error: {0}")]
    Database(String),
}

impl StoreError {
    /// The same error with `what` in front of its message (the variant is kept).
    pub fn context(self, what: impl std::fmt::Display) -> Self {
        match self {
            StoreError::NotFound(n) => StoreError::NotFound(n),
            StoreError::Conflict(m) => StoreError::Conflict(format!("{what}: {m}")),
            StoreError::Unavailable(m) => StoreError::Unavailable(format!("{what}: {m}")),
            StoreError::Full(m) => StoreError::Full(format!("{what}: {m}")),
            StoreError::Database(m) => StoreError::Database(format!("{what}: {m}")),
        }
    }
}

/// Result alias for store operations.
pub type StoreResult<T> = Result<T, StoreError>;

/// The durable queue and the resources around it.
///
/// Both drivers pass the same conformance suite (`tests/store/`, one file per concern).
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Which driver this is ("sqlite" or "postgres"), for logs and reports.
    fn driver(&self) -> &'static str;

    /// Signalled when new work may be ready (after an enqueue, a replay or a re-enable), so idle
    /// dispatchers wake without polling. PostgreSQL relays `NOTIFY` from other processes.
    fn work_signal(&self) -> Arc<Notify>;

    /// The public ids of this database's deliveries and attempts, keyed by the installation's
    /// secret ([`ROW_ID_KEY_SETTING`]), read (or made) when the store was opened.
    fn row_ids(&self) -> &crate::ids::RowIds;

    /// Is the database reachable right now?
    async fn ping(&self) -> StoreResult<()>;

    /// Can the database take a write right now? Commits a heartbeat setting through the same
    /// path as producers' writes (SQLite's writer thread and group commit, a pooled
    /// PostgreSQL connection), after checking there is room for [`PROBE_ROOM_BYTES`] more
    /// (written and rolled back). `/readyz` fails when this fails.
    async fn probe_write(&self) -> StoreResult<()>;

    // ---- settings -------------------------------------------------------------------------

    /// Read an operator setting (e.g. the admin token hash).
    async fn setting(&self, key: &str) -> StoreResult<Option<String>>;
    /// Write an operator setting.
    async fn set_setting(&self, key: &str, value: &str) -> StoreResult<()>;
    /// Delete a setting; true when it existed. Of concurrent callers exactly one sees true, so
    /// a value can be used once (the console's portal links and sessions).
    async fn delete_setting(&self, key: &str) -> StoreResult<bool>;
    /// Delete every setting whose key sorts (bytewise) in `[from, to)`; how many went. Keys that
    /// embed a zero-padded expiry purge their expired entries in one range.
    async fn delete_settings_between(&self, from: &str, to: &str) -> StoreResult<u64>;
    /// Store `value` under `key` unless a value is there already, and return the stored value:
    /// when several processes race to initialise a setting, all of them get the winner's.
    async fn init_setting(&self, key: &str, value: &str) -> StoreResult<String>;

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
    /// Replace a tenant's written share policy (weight, ceiling; `None`: the default).
    async fn set_tenant_share(&self, id: &str, share: &SharePolicy) -> StoreResult<()>;
    /// What a tenant has waiting: its due endpoints, its oldest due ready delivery, and how
    /// many tenants have due work now (it included).
    async fn tenant_backlog(&self, id: &str, now_ms: i64) -> StoreResult<TenantBacklog>;
    /// Deliveries to an endpoint waiting to be attempted (ready, due now or later): one count
    /// on the ready index, for the evidence of a rate-limited endpoint.
    async fn endpoint_waiting(&self, id: &str) -> StoreResult<u64>;
    /// A FIFO endpoint's head: its lowest pending (ready or leased) delivery, the one everything
    /// else of it waits behind; `None` when nothing is pending.
    async fn fifo_head(&self, id: &str) -> StoreResult<Option<DeliveryView>>;

    // ---- endpoints ------------------------------------------------------------------------

    /// Create an endpoint.
    async fn create_endpoint(&self, endpoint: &Endpoint) -> StoreResult<()>;
    /// Create many endpoints in one transaction: all or none (imports, tests, benchmarks).
    async fn create_endpoints(&self, endpoints: &[Endpoint]) -> StoreResult<()>;
    /// An endpoint by id; `tenant` restricts it to one tenant (another tenant's id is NotFound).
    async fn endpoint(&self, tenant: Option<&str>, id: &str) -> StoreResult<Endpoint>;
    /// The endpoints among `ids` that exist, in no particular order: a dispatcher reads a
    /// claim's endpoints it has not seen in one call.
    async fn endpoints_by_id(&self, ids: &[String]) -> StoreResult<Vec<Endpoint>>;
    /// A tenant's endpoints in id order after `after`.
    async fn list_endpoints(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<Endpoint>>;
    /// The bytes of certificates `tenant`'s endpoints other than `except` hold: their CA
    /// bundles and client certificates (the one before a rotation too), as stored; never keys.
    async fn tenant_certificate_bytes(&self, tenant: &str, except: &str) -> StoreResult<u64>;
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
    /// transaction. A message whose idempotency key was already used returns the original, and
    /// says whether its event type and payload are the original's ([`Enqueued::mismatch`]).
    async fn enqueue(&self, messages: &[NewMessage], now_ms: i64) -> StoreResult<Vec<Enqueued>>;
    /// A message and its deliveries.
    async fn message(&self, tenant: &str, id: &str) -> StoreResult<MessageView>;
    /// A tenant's messages, newest first, filtered (see [`MessageFilter`]).
    async fn list_messages(&self, filter: &MessageFilter) -> StoreResult<Vec<MessageSummary>>;

    // ---- the queue ------------------------------------------------------------------------

    /// Apply the request's charges, then lease up to `limit` ready, visible deliveries, fairly
    /// across tenants (see [`crate::fairness`]) and within each tenant across its endpoints,
    /// and commit.
    async fn claim(&self, request: &ClaimRequest) -> StoreResult<ClaimBatch>;
    /// Apply outcomes; each names its lease token and a stale token changes nothing.
    /// Returns the ids whose outcome was applied. All or nothing: a batch the database refuses
    /// changes nothing, so the caller may split it and write the parts again. Text fields must
    /// already be storable (see [`crate::delivery::storable`]); a NUL is refused by PostgreSQL.
    /// An applied settle resets the delivery's count of consecutive lease expiries.
    async fn settle(&self, settlements: &[Settlement], now_ms: i64) -> StoreResult<Vec<i64>>;
    /// Push a lease's expiry to `lease_until_ms` if the token still holds it.
    async fn extend_lease(
        &self,
        delivery_id: i64,
        lease_token: i64,
        lease_until_ms: i64,
    ) -> StoreResult<bool>;
    /// Return expired leases to ready; dead-letter as poison those whose lease has now expired
    /// `max_expiries` times in a row (no settle in between: a settle resets the count, so
    /// crashes spread over a delivery's life never add up to a dead letter).
    async fn reap(&self, now_ms: i64, max_expiries: u32) -> StoreResult<ReapReport>;
    /// Expire now the leases of dispatchers known dead, so the next [`Store::reap`] returns them
    /// instead of waiting out their TTL: a dispatcher whose process is gone (on PostgreSQL, its
    /// listener's backend) and whose heartbeat is older than `dead_after_ms`, judged only while
    /// this process has itself been connected that long (after an outage every live dispatcher
    /// gets that long to beat again). Returns the leases expired. The embedded store has one
    /// process, whose leases outlive it only when it is killed: none (they expire as before).
    async fn expire_leases_of_dead(&self, now_ms: i64, dead_after_ms: i64) -> StoreResult<u64> {
        let _ = (now_ms, dead_after_ms);
        Ok(0)
    }
    /// Retention, one batch: delete up to `limit` (SQLite: at most 64, its one writer waits for
    /// nothing else meanwhile) delivered deliveries last changed before
    /// `before_ms` (with their attempts), taken in message id order from `after`, then the
    /// messages created before `before_ms` in the id range the batch covered that have no
    /// delivery left (whose last delivery just went, or that never had one). Ready, leased and
    /// dead-lettered deliveries are never purged. Message ids sort by creation time, so a pass
    /// reaches only history through the message index, never the recent rows, and each batch
    /// starts where the last ended (a table scan per batch cost seconds with months of history).
    async fn purge(&self, request: &PurgeRequest) -> StoreResult<PurgeReport>;

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
    /// Make deliveries ready again now with attempts reset (see [`ReplayTarget`] for which);
    /// their next attempts keep the message's `webhook-id`. Returns how many.
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

    /// Ready, leased and dead-lettered deliveries, and the oldest due ready delivery per tenant.
    /// Cheap whatever the history: each figure reads a partial index (the queue, the dead
    /// letters), never the delivered rows kept for `--retention`.
    async fn queue_stats(&self, now_ms: i64) -> StoreResult<QueueStats>;
    /// Delivered deliveries kept: a count over the whole retained history (tens of millions of
    /// rows at a high rate), so its callers ask rarely (see `api::ops::refresh_gauges`).
    async fn delivered_count(&self) -> StoreResult<u64>;

    // ---- the fleet --------------------------------------------------------------------------

    /// Write (insert or replace) a dispatcher's heartbeat. `Ok(false)`: the row could not yet
    /// name what tells its process dead before it goes stale (on PostgreSQL, the listener's
    /// backend, still connecting), so the dispatcher beats again soon instead of an interval on.
    async fn beat(&self, heartbeat: &Heartbeat) -> StoreResult<bool>;
    /// Heartbeats written at or after `since_ms`, by dispatcher id.
    async fn heartbeats(&self, since_ms: i64) -> StoreResult<Vec<Heartbeat>>;
    /// Delete dispatcher `id`'s heartbeat (it has drained) and every heartbeat written before
    /// `before_ms` (dispatchers that stopped without draining); how many went.
    async fn forget_heartbeats(&self, id: Option<&str>, before_ms: i64) -> StoreResult<u64>;
}

/// The queue's counts for [`QueueStats`] (ready, leased, dead); both drivers run it. Each
/// count reads its state's partial index: the queue and the dead letters, never the delivered
/// history beside them.
pub(crate) const QUEUE_COUNTS: &str = "SELECT (SELECT count(*) FROM deliveries WHERE state = 0), \
    (SELECT count(*) FROM deliveries WHERE state = 1), \
    (SELECT count(*) FROM deliveries WHERE state = 3)";

/// How long something visible since `visible_at_ms` has waited at `now_ms`: 0 when nothing
/// is waiting or it became visible after `now_ms` (another process's clock).
pub(crate) fn waited_ms(now_ms: i64, visible_at_ms: Option<i64>) -> i64 {
    visible_at_ms.map_or(0, |t| (now_ms - t).max(0))
}

/// Per tenant, when its oldest due ready delivery became visible (`$1` is now; NULL when it
/// has none due), for [`QueueStats::oldest_ready_age_ms`]; both drivers run it. It walks the
/// ready index once per endpoint that has ready work (a loose index scan: each step the next
/// endpoint id after the last), so it costs what is waiting, not what is registered: probing
/// every enabled endpoint read a million idle ones on every `/metrics` scrape. Tenants with
/// nothing ready come from the tenants table, so each keeps its gauge, at 0.
pub(crate) const OLDEST_READY_BY_TENANT: &str = "WITH RECURSIVE r(id) AS ( \
        SELECT (SELECT d.endpoint_id FROM deliveries d WHERE d.state = 0 \
            ORDER BY d.endpoint_id LIMIT 1) \
        UNION ALL \
        SELECT (SELECT d.endpoint_id FROM deliveries d WHERE d.state = 0 AND d.endpoint_id > r.id \
            ORDER BY d.endpoint_id LIMIT 1) FROM r WHERE r.id IS NOT NULL \
    ), o AS MATERIALIZED ( \
        SELECT t.tenant_id, MIN(t.oldest) AS oldest FROM ( \
            SELECT (SELECT e.tenant_id FROM endpoints e WHERE e.id = r.id AND e.enabled) \
                AS tenant_id, \
                (SELECT min(d.visible_at_ms) FROM deliveries d WHERE d.state = 0 \
                    AND d.endpoint_id = r.id AND d.visible_at_ms <= $1) AS oldest \
            FROM r WHERE r.id IS NOT NULL) t \
        WHERE t.tenant_id IS NOT NULL GROUP BY t.tenant_id \
    ) \
    SELECT tenant_id, oldest FROM o \
    UNION ALL \
    SELECT n.id, NULL FROM tenants n WHERE n.id NOT IN (SELECT tenant_id FROM o)";

/// The column values one settlement writes to its delivery row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SettleRow {
    /// The new state's code ([`DeliveryState::code`]).
    pub state: i64,
    /// The new `visible_at_ms`, or `None` to keep it.
    pub visible_at_ms: Option<i64>,
    /// Added to `attempts`: 1 when an attempt was made, 0 for a shed or a release.
    pub attempts_added: i64,
    /// Whether `last_status` and `last_error` are rewritten (only when an attempt was made).
    pub touches_last: bool,
    /// The attempt's HTTP status.
    pub last_status: Option<i64>,
    /// The attempt's error kind, or the dead-letter reason.
    pub last_error: Option<String>,
}

impl SettleRow {
    /// What `s` writes, settled at `now_ms`.
    pub(crate) fn of(s: &Settlement, now_ms: i64) -> Self {
        let attempts_added = i64::from(s.attempt.is_some());
        let status = s.attempt.as_ref().and_then(|a| a.status.map(i64::from));
        let kind = s.attempt.as_ref().and_then(|a| a.error_kind.clone());
        let row = |state: DeliveryState, visible_at_ms, last_error| SettleRow {
            state: state.code(),
            visible_at_ms,
            attempts_added,
            touches_last: true,
            last_status: status,
            last_error,
        };
        // A shed or a release is not an attempt: nothing about the last attempt changes.
        let untouched = |visible_at_ms| SettleRow {
            state: DeliveryState::Ready.code(),
            visible_at_ms: Some(visible_at_ms),
            attempts_added: 0,
            touches_last: false,
            last_status: None,
            last_error: None,
        };
        match &s.outcome {
            SettleOutcome::Delivered => row(DeliveryState::Delivered, None, None),
            SettleOutcome::Retry { at_ms } => row(DeliveryState::Ready, Some(*at_ms), kind),
            SettleOutcome::Shed { at_ms } => untouched(*at_ms),
            SettleOutcome::Dead { reason } => row(DeliveryState::Dead, None, Some(reason.clone())),
            SettleOutcome::Release => untouched(now_ms),
        }
    }
}

/// For a replay or resend of a delivery now in `state`: the states (as an SQL list) the update
/// may change, or why it may not happen. The reason names no id: the store knows only the row
/// number, which is never shown (the caller named the delivery by its public id).
pub(crate) fn replayable(
    target: &ReplayTarget,
    state: DeliveryState,
) -> Result<&'static str, StoreError> {
    match (target, state) {
        (ReplayTarget::Delivery(_), DeliveryState::Dead) => Ok("3"),
        (ReplayTarget::Delivery(_), other) => Err(StoreError::Conflict(format!(
            "the delivery is {}, not dead-lettered (resend it instead)",
            other.name()
        ))),
        (ReplayTarget::Resend(_), DeliveryState::Leased) => Err(StoreError::Conflict(
            "the delivery is being attempted now; resend it once that attempt settles".to_owned(),
        )),
        (_, _) => Ok("0, 2, 3"),
    }
}

/// The endpoints the local dispatcher left out of its latest claim (no free lane slot, paused,
/// breaker open), as the drivers remember them: an enqueue that gives work only to these does
/// not wake the local dispatcher, whose claim would find nothing it may take (the churn of a
/// slow or dead endpoint's arrivals: one empty claim, a store write, per message). It wakes
/// anyway when a lane frees (its capacity signal) and at its idle poll, when a pause may have
/// ended; other processes are told as ever.
#[derive(Debug, Default)]
pub(crate) struct HeldEndpoints(std::sync::Mutex<std::collections::HashSet<String>>);

impl HeldEndpoints {
    /// Remember the exclude list of a claim.
    pub(crate) fn set(&self, exclude: &[String]) {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if held.len() == exclude.len() && exclude.iter().all(|e| held.contains(e)) {
            return;
        }
        held.clear();
        held.extend(exclude.iter().cloned());
    }

    /// Does any of `endpoints` (given new work) take work now, as far as the latest claim knew?
    pub(crate) fn any_free<'a>(&self, endpoints: impl IntoIterator<Item = &'a str>) -> bool {
        let held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        endpoints.into_iter().any(|e| !held.contains(e))
    }
}

/// A shared handle to whichever driver is configured.
pub type SharedStore = Arc<dyn Store>;

/// How much room `probe_write` checks for: enough for an ordinary batch of messages, small
/// enough to write (and roll back) at every readiness probe.
pub const PROBE_ROOM_BYTES: usize = 64 * 1024;

/// The settings key of the installation's secret behind the public ids of deliveries and
/// attempts ([`crate::ids::RowIds`]): 32 random bytes as hex, made by the first process to open
/// the database (of processes starting together, one wins and all read it).
pub const ROW_ID_KEY_SETTING: &str = "row_id_key";

/// The settings key of the API's largest payload (`--max-payload-bytes`), which `serve`
/// writes at start-up so that PostgreSQL's `send_message` refuses what the API would.
pub const MAX_PAYLOAD_SETTING: &str = "max_payload_bytes";

/// The settings key of the write probe's heartbeat (milliseconds since the epoch).
pub const PROBE_SETTING: &str = "write_probe_at_ms";

/// Delete the expired settings rows under `prefix` (console sessions and portal links, whose
/// keys embed a 13-digit expiry); failures only log.
pub async fn purge_expired(store: &dyn Store, prefix: &str, now_ms: i64) {
    let below = format!("{prefix}{now_ms:013}");
    if let Err(e) = store.delete_settings_between(prefix, &below).await {
        tracing::warn!(error = %e, prefix, "console: cannot purge expired rows");
    }
}

/// Driver options for [`open`].
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// The embedded driver's options.
    pub sqlite: sqlite::SqliteOptions,
    /// The PostgreSQL driver's options.
    pub postgres: postgres::PostgresOptions,
}

/// Open the store named by `database_url`, or the embedded SQLite file under `data_dir`, and
/// run its migrations.
pub async fn open(
    database_url: Option<&str>,
    data_dir: &std::path::Path,
    options: OpenOptions,
) -> StoreResult<SharedStore> {
    let sqlite = options.sqlite;
    match database_url {
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => Ok(
            Arc::new(postgres::PostgresStore::connect_with(url, options.postgres).await?),
        ),
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
