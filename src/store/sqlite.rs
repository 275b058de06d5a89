//! The embedded SQLite driver: one file, WAL, one writer thread with group commit.
//!
//! Every write is a job sent to a dedicated writer thread that owns the only write connection.
//! The thread drains whatever jobs are waiting, runs each inside its own savepoint of a single
//! transaction, commits once (one fsync for many operations) and only then answers each caller.
//! Reads run on a small pool of reader threads with their own connections (WAL lets them read
//! while the writer writes). No transaction ever spans an await: the async side only waits for
//! the answer.

mod claim;
mod errors;
mod heartbeats;
mod queries;
mod writer;

use std::path::Path;
use std::sync::Arc;
use std::thread;

use async_trait::async_trait;
use crossbeam_channel::{Sender, TrySendError};
use rusqlite::{Connection, OpenFlags};
use tokio::sync::{Notify, oneshot};

pub(crate) use errors::db;
use writer::{Completion, Queues, WriteJob, savepoint, writer_loop};

use super::*;

const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("sql/sqlite_001_init.sql")),
    (2, include_str!("sql/sqlite_002_subscriptions.sql")),
    (3, include_str!("sql/sqlite_003_due_endpoints.sql")),
    (4, include_str!("sql/sqlite_004_endpoint_headers.sql")),
    (5, include_str!("sql/sqlite_005_dispatchers.sql")),
    (6, include_str!("sql/sqlite_006_tenant_shares.sql")),
    (7, include_str!("sql/sqlite_007_endpoint_tls_oauth2.sql")),
    (8, include_str!("sql/sqlite_008_endpoint_rate_limit.sql")),
    (9, include_str!("sql/sqlite_009_heartbeat_tally.sql")),
    (10, include_str!("sql/sqlite_010_endpoint_ordering.sql")),
    (
        11,
        include_str!("sql/sqlite_011_heartbeat_host_seconds.sql"),
    ),
    (12, include_str!("sql/sqlite_012_dead_letters.sql")),
    (13, include_str!("sql/sqlite_013_endpoint_destination.sql")),
    (14, include_str!("sql/sqlite_014_trace_context.sql")),
];

/// SQLite's own page cache, per connection, in KiB. The file's pages are in the operating
/// system's cache as well, so a page missing here costs a copy, not a disk read. The writer's
/// holds the queue's hot indexes, which every claim, settle and enqueue reads. A reader's
/// holds what one API query touches, so it is small: what a reader has read stays resident
/// up to its cache's size, for the life of the process.
const WRITER_CACHE_KIB: u32 = 64 * 1024;
const READER_CACHE_KIB: u32 = 4 * 1024;

/// Writes and reads that may wait for their thread before new ones are refused.
const WRITE_QUEUE: usize = 4096;
const READ_QUEUE: usize = 4096;

/// Options for the embedded driver.
#[derive(Debug, Clone, Copy)]
pub struct SqliteOptions {
    /// `synchronous = FULL` (fsync every commit, survives power loss) rather than `NORMAL`
    /// (survives a process crash; the last commits may be lost on power loss).
    pub synchronous_full: bool,
    /// Reader threads for API queries.
    pub readers: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            synchronous_full: true,
            readers: 2,
        }
    }
}

type ReadJob = Box<dyn FnOnce(&Connection) + Send>;

/// The embedded store.
pub struct SqliteStore {
    /// Writes a waiting tenant's latency is made of: enqueues, claims, lease extensions.
    urgent: Sender<WriteJob>,
    /// Every other write (settlements, reaping, configuration): run after the urgent ones.
    writer: Sender<WriteJob>,
    readers: Sender<ReadJob>,
    signal: Arc<Notify>,
    /// What the local dispatcher's latest claim left out.
    held: HeldEndpoints,
    /// Public ids of deliveries and attempts.
    row_ids: crate::ids::RowIds,
}

impl SqliteStore {
    /// Open (creating if needed) the database file at `path` and migrate it.
    pub fn open(path: &Path, options: SqliteOptions) -> StoreResult<Self> {
        let conn = open_connection(path, options, false)?;
        migrate(&conn)?;
        let key = queries::init_setting(&conn, ROW_ID_KEY_SETTING, &crate::ids::random_hex(32))?;
        let row_ids = crate::ids::RowIds::from_secret(&key);
        let (writer, bulk) = crossbeam_channel::bounded::<WriteJob>(WRITE_QUEUE);
        let (urgent, urgent_jobs) = crossbeam_channel::bounded::<WriteJob>(WRITE_QUEUE);
        let queues = Queues {
            urgent: urgent_jobs,
            bulk,
        };
        thread::Builder::new()
            .name("sluice-sqlite-writer".into())
            .spawn(move || writer_loop(conn, queues))
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let (readers, read_jobs) = crossbeam_channel::bounded::<ReadJob>(READ_QUEUE);
        for i in 0..options.readers.max(1) {
            let conn = open_connection(path, options, true)?;
            let jobs = read_jobs.clone();
            thread::Builder::new()
                .name(format!("sluice-sqlite-reader-{i}"))
                .spawn(move || {
                    while let Ok(job) = jobs.recv() {
                        job(&conn);
                    }
                })
                .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        }
        Ok(Self {
            urgent,
            writer,
            readers,
            signal: Arc::new(Notify::new()),
            held: HeldEndpoints::default(),
            row_ids,
        })
    }

    /// Run `f` on the writer thread inside the current group commit; answered after COMMIT.
    async fn write<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        self.write_to(&self.writer, f).await
    }

    /// [`Self::write`], ahead of the other writes: an enqueue or a claim, what a waiting
    /// tenant's latency is made of.
    async fn write_urgent<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        self.write_to(&self.urgent, f).await
    }

    async fn write_to<T, F>(&self, queue: &Sender<WriteJob>, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: WriteJob = Box::new(move |conn| {
            let result = match conn {
                Ok(conn) => savepoint(conn, f),
                Err(e) => Err(e.clone()),
            };
            let failed = result.as_ref().err().cloned();
            let completion: Completion = Box::new(move |committed| {
                let answer = match committed {
                    Ok(()) => result,
                    Err(e) => result.and(Err(e)),
                };
                let _ = tx.send(answer);
            });
            (completion, failed)
        });
        // Never block a runtime thread on a full queue (the writer is stuck on a hung disk):
        // refuse at once, and the deadline bounds the wait for queued work.
        queue.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) => StoreError::Unavailable(format!(
                "the sqlite writer is behind: {WRITE_QUEUE} writes are waiting"
            )),
            TrySendError::Disconnected(_) => {
                StoreError::Unavailable("sqlite writer stopped".into())
            }
        })?;
        rx.await
            .map_err(|_| StoreError::Unavailable("sqlite writer stopped".into()))?
    }

    /// Cap the database at `max_bytes` (whole pages, never below its current size), or lift the
    /// cap with `None`. Writes past the cap fail as they would on a full disk (`SQLITE_FULL`
    /// from the engine itself), which is how the disk-full tests fill a database without a
    /// small filesystem; an operator sharing a volume could use it to keep room. Returns the
    /// current size and the cap, in bytes.
    pub async fn limit_size(&self, max_bytes: Option<u64>) -> StoreResult<(u64, u64)> {
        self.write(move |c| {
            let page: i64 = c
                .query_row("PRAGMA page_size", [], |r| r.get(0))
                .map_err(db)?;
            let pages: i64 = c
                .query_row("PRAGMA page_count", [], |r| r.get(0))
                .map_err(db)?;
            // SQLite's own ceiling (SQLITE_MAX_PAGE_COUNT) when lifting the cap.
            let wanted = max_bytes.map_or(4_294_967_294, |b| (b as i64 / page).max(pages));
            let cap: i64 = c
                .query_row(&format!("PRAGMA max_page_count = {wanted}"), [], |r| {
                    r.get(0)
                })
                .map_err(db)?;
            Ok(((pages * page) as u64, (cap * page) as u64))
        })
        .await
    }

    /// Run `f` on a reader thread.
    async fn read<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: ReadJob = Box::new(move |conn| {
            let _ = tx.send(f(conn));
        });
        self.readers.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) => StoreError::Unavailable(format!(
                "the sqlite readers are behind: {READ_QUEUE} reads are waiting"
            )),
            TrySendError::Disconnected(_) => {
                StoreError::Unavailable("sqlite readers stopped".into())
            }
        })?;
        rx.await
            .map_err(|_| StoreError::Unavailable("sqlite readers stopped".into()))?
    }
}

fn open_connection(
    path: &Path,
    options: SqliteOptions,
    read_only: bool,
) -> StoreResult<Connection> {
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
    };
    let conn = Connection::open_with_flags(path, flags)
        .map_err(|e| StoreError::Unavailable(format!("cannot open {}: {e}", path.display())))?;
    let sync = if options.synchronous_full {
        "FULL"
    } else {
        "NORMAL"
    };
    let cache_kib = if read_only {
        READER_CACHE_KIB
    } else {
        WRITER_CACHE_KIB
    };
    let pragmas = format!(
        "PRAGMA busy_timeout = 5000; PRAGMA synchronous = {sync}; PRAGMA foreign_keys = ON; \
         PRAGMA cache_size = -{cache_kib}; PRAGMA temp_store = MEMORY;"
    );
    if !read_only {
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(db)?;
    }
    conn.execute_batch(&pragmas).map_err(db)?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

fn migrate(conn: &Connection) -> StoreResult<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at_ms INTEGER NOT NULL)",
    )
    .map_err(db)?;
    for (version, sql) in MIGRATIONS {
        let applied: bool = conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = ?1)",
                [version],
                |r| r.get(0),
            )
            .map_err(db)?;
        if applied {
            continue;
        }
        let batch = format!(
            "BEGIN IMMEDIATE; {sql}; INSERT INTO schema_migrations VALUES ({version}, {}); COMMIT;",
            crate::clock::now_ms()
        );
        if let Err(e) = conn.execute_batch(&batch) {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(StoreError::Database(format!(
                "migration {version} failed: {e}"
            )));
        }
    }
    Ok(())
}

#[async_trait]
impl Store for SqliteStore {
    fn driver(&self) -> &'static str {
        "sqlite"
    }

    fn row_ids(&self) -> &crate::ids::RowIds {
        &self.row_ids
    }

    fn work_signal(&self) -> Arc<Notify> {
        self.signal.clone()
    }

    async fn ping(&self) -> StoreResult<()> {
        self.read(|c| c.query_row("SELECT 1", [], |_| Ok(())).map_err(db))
            .await
    }

    async fn probe_write(&self) -> StoreResult<()> {
        let now = crate::clock::now_ms().to_string();
        self.write(move |c| {
            queries::probe_room(c)?;
            queries::set_setting(c, PROBE_SETTING, &now)
        })
        .await
    }

    async fn setting(&self, key: &str) -> StoreResult<Option<String>> {
        let key = key.to_owned();
        self.read(move |c| queries::setting(c, &key)).await
    }

    async fn set_setting(&self, key: &str, value: &str) -> StoreResult<()> {
        let (key, value) = (key.to_owned(), value.to_owned());
        self.write(move |c| queries::set_setting(c, &key, &value))
            .await
    }

    async fn delete_setting(&self, key: &str) -> StoreResult<bool> {
        let key = key.to_owned();
        self.write(move |c| queries::delete_setting(c, &key)).await
    }

    async fn delete_settings_between(&self, from: &str, to: &str) -> StoreResult<u64> {
        let (from, to) = (from.to_owned(), to.to_owned());
        self.write(move |c| queries::delete_settings_between(c, &from, &to))
            .await
    }

    async fn init_setting(&self, key: &str, value: &str) -> StoreResult<String> {
        let (key, value) = (key.to_owned(), value.to_owned());
        self.write(move |c| queries::init_setting(c, &key, &value))
            .await
    }

    async fn create_tenant(&self, tenant: &Tenant) -> StoreResult<()> {
        let tenant = tenant.clone();
        self.write(move |c| queries::create_tenant(c, &tenant))
            .await
    }

    async fn tenant(&self, id: &str) -> StoreResult<Tenant> {
        let id = id.to_owned();
        self.read(move |c| queries::tenant(c, &id)).await
    }

    async fn tenant_by_token(&self, token_hash: &str) -> StoreResult<Option<Tenant>> {
        let hash = token_hash.to_owned();
        self.read(move |c| queries::tenant_by_token(c, &hash)).await
    }

    async fn list_tenants(&self, after: Option<&str>, limit: u32) -> StoreResult<Vec<Tenant>> {
        let after = after.unwrap_or("").to_owned();
        self.read(move |c| queries::list_tenants(c, &after, limit))
            .await
    }

    async fn set_tenant_token(&self, id: &str, token_hash: &str) -> StoreResult<()> {
        let (id, hash) = (id.to_owned(), token_hash.to_owned());
        self.write(move |c| queries::set_tenant_token(c, &id, &hash))
            .await
    }

    async fn delete_tenant(&self, id: &str) -> StoreResult<()> {
        let id = id.to_owned();
        self.write(move |c| queries::delete_tenant(c, &id)).await
    }

    async fn set_tenant_share(&self, id: &str, share: &SharePolicy) -> StoreResult<()> {
        let (id, share) = (id.to_owned(), *share);
        self.write(move |c| queries::set_tenant_share(c, &id, &share))
            .await
    }

    async fn tenant_backlog(&self, id: &str, now_ms: i64) -> StoreResult<TenantBacklog> {
        let id = id.to_owned();
        self.read(move |c| queries::tenant_backlog(c, &id, now_ms))
            .await
    }

    async fn endpoint_waiting(&self, id: &str) -> StoreResult<u64> {
        let id = id.to_owned();
        self.read(move |c| queries::endpoint_waiting(c, &id)).await
    }

    async fn fifo_head(&self, id: &str) -> StoreResult<Option<DeliveryView>> {
        let id = id.to_owned();
        self.read(move |c| queries::fifo_head(c, &id)).await
    }

    async fn create_endpoint(&self, endpoint: &Endpoint) -> StoreResult<()> {
        let endpoint = endpoint.clone();
        self.write(move |c| queries::create_endpoint(c, &endpoint))
            .await
    }

    async fn create_endpoints(&self, endpoints: &[Endpoint]) -> StoreResult<()> {
        let endpoints = endpoints.to_vec();
        self.write(move |c| {
            endpoints
                .iter()
                .try_for_each(|e| queries::create_endpoint(c, e))
        })
        .await
    }

    async fn endpoint(&self, tenant: Option<&str>, id: &str) -> StoreResult<Endpoint> {
        let (tenant, id) = (tenant.map(str::to_owned), id.to_owned());
        self.read(move |c| queries::endpoint(c, tenant.as_deref(), &id))
            .await
    }

    async fn endpoints_by_id(&self, ids: &[String]) -> StoreResult<Vec<Endpoint>> {
        let ids = ids.to_vec();
        self.read(move |c| queries::endpoints_by_id(c, &ids)).await
    }

    async fn list_endpoints(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<Endpoint>> {
        let (tenant, after) = (tenant.to_owned(), after.unwrap_or("").to_owned());
        self.read(move |c| queries::list_endpoints(c, &tenant, &after, limit))
            .await
    }

    async fn tenant_certificate_bytes(&self, tenant: &str, except: &str) -> StoreResult<u64> {
        let (tenant, except) = (tenant.to_owned(), except.to_owned());
        self.read(move |c| queries::tenant_certificate_bytes(c, &tenant, &except))
            .await
    }

    async fn update_endpoint(&self, endpoint: &Endpoint) -> StoreResult<()> {
        let endpoint = endpoint.clone();
        let signal = self.signal.clone();
        let result = self
            .write(move |c| queries::update_endpoint(c, &endpoint))
            .await;
        signal.notify_one();
        result
    }

    async fn delete_endpoint(&self, tenant: &str, id: &str) -> StoreResult<()> {
        let (tenant, id) = (tenant.to_owned(), id.to_owned());
        self.write(move |c| queries::delete_endpoint(c, &tenant, &id))
            .await
    }

    async fn set_endpoint_enabled(
        &self,
        id: &str,
        enabled: bool,
        reason: Option<&str>,
        now_ms: i64,
    ) -> StoreResult<()> {
        let (id, reason) = (id.to_owned(), reason.map(str::to_owned));
        self.write(move |c| {
            queries::set_endpoint_enabled(c, &id, enabled, reason.as_deref(), now_ms)
        })
        .await?;
        if enabled {
            self.signal.notify_one();
        }
        Ok(())
    }

    async fn enqueue(&self, messages: &[NewMessage], now_ms: i64) -> StoreResult<Vec<Enqueued>> {
        let messages = messages.to_vec();
        let (result, given_work) = self
            .write_urgent(move |c| queries::enqueue(c, &messages, now_ms))
            .await?;
        // Not for work only endpoints the dispatcher cannot take now have (see HeldEndpoints).
        if self.held.any_free(given_work.iter().map(String::as_str)) {
            self.signal.notify_one();
        }
        Ok(result)
    }

    async fn message(&self, tenant: &str, id: &str) -> StoreResult<MessageView> {
        let (tenant, id) = (tenant.to_owned(), id.to_owned());
        self.read(move |c| queries::message(c, &tenant, &id)).await
    }

    async fn list_messages(&self, filter: &MessageFilter) -> StoreResult<Vec<MessageSummary>> {
        let filter = filter.clone();
        self.read(move |c| queries::list_messages(c, &filter)).await
    }

    async fn claim(&self, request: &ClaimRequest) -> StoreResult<ClaimBatch> {
        self.held.set(&request.exclude);
        let request = request.clone();
        self.write_urgent(move |c| claim::claim(c, &request)).await
    }

    async fn settle(&self, settlements: &[Settlement], now_ms: i64) -> StoreResult<Vec<i64>> {
        let settlements = settlements.to_vec();
        self.write(move |c| queries::settle(c, &settlements, now_ms))
            .await
    }

    async fn extend_lease(
        &self,
        delivery_id: i64,
        lease_token: i64,
        lease_until_ms: i64,
    ) -> StoreResult<bool> {
        self.write_urgent(move |c| {
            queries::extend_lease(c, delivery_id, lease_token, lease_until_ms)
        })
        .await
    }

    async fn purge(&self, request: &PurgeRequest) -> StoreResult<PurgeReport> {
        let request = request.clone();
        self.write(move |c| queries::purge(c, &request)).await
    }

    async fn reap(&self, now_ms: i64, max_expiries: u32) -> StoreResult<ReapReport> {
        let report = self
            .write(move |c| queries::reap(c, now_ms, max_expiries))
            .await?;
        if report.returned > 0 {
            self.signal.notify_one();
        }
        Ok(report)
    }

    async fn list_deliveries(&self, filter: &DeliveryFilter) -> StoreResult<Vec<DeliveryView>> {
        let filter = filter.clone();
        self.read(move |c| queries::list_deliveries(c, &filter))
            .await
    }

    async fn attempts(&self, tenant: &str, delivery_id: i64) -> StoreResult<Vec<AttemptView>> {
        let tenant = tenant.to_owned();
        self.read(move |c| queries::attempts(c, &tenant, delivery_id))
            .await
    }

    async fn endpoint_attempts(
        &self,
        tenant: &str,
        endpoint_id: &str,
        since_ms: i64,
        before: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<AttemptView>> {
        let (tenant, endpoint) = (tenant.to_owned(), endpoint_id.to_owned());
        self.read(move |c| {
            queries::endpoint_attempts(c, &tenant, &endpoint, since_ms, before, limit)
        })
        .await
    }

    async fn replay(&self, tenant: &str, target: ReplayTarget, now_ms: i64) -> StoreResult<u64> {
        let tenant = tenant.to_owned();
        let n = self
            .write(move |c| queries::replay(c, &tenant, &target, now_ms))
            .await?;
        if n > 0 {
            self.signal.notify_one();
        }
        Ok(n)
    }

    async fn record_event(&self, event: &EndpointEvent) -> StoreResult<()> {
        let event = event.clone();
        self.write(move |c| queries::record_event(c, &event)).await
    }

    async fn list_events(
        &self,
        tenant: &str,
        endpoint_id: &str,
        limit: u32,
    ) -> StoreResult<Vec<EndpointEvent>> {
        let (tenant, endpoint) = (tenant.to_owned(), endpoint_id.to_owned());
        self.read(move |c| queries::list_events(c, &tenant, &endpoint, limit))
            .await
    }

    async fn set_endpoint_failing(&self, id: &str, since_ms: Option<i64>) -> StoreResult<()> {
        let id = id.to_owned();
        self.write(move |c| queries::set_endpoint_failing(c, &id, since_ms))
            .await
    }

    async fn queue_stats(&self, now_ms: i64) -> StoreResult<QueueStats> {
        self.read(move |c| queries::queue_stats(c, now_ms)).await
    }

    async fn delivered_count(&self) -> StoreResult<u64> {
        self.read(queries::delivered_count).await
    }

    async fn beat(&self, heartbeat: &Heartbeat) -> StoreResult<bool> {
        let heartbeat = heartbeat.clone();
        // One file, one host: staleness is the only death there is to tell.
        self.write(move |c| heartbeats::beat(c, &heartbeat)).await?;
        Ok(true)
    }

    async fn heartbeats(&self, since_ms: i64) -> StoreResult<Vec<Heartbeat>> {
        self.read(move |c| heartbeats::since(c, since_ms)).await
    }

    async fn forget_heartbeats(&self, id: Option<&str>, before_ms: i64) -> StoreResult<u64> {
        let id = id.map(str::to_owned);
        self.write(move |c| heartbeats::forget(c, id.as_deref(), before_ms))
            .await
    }
}
