//! The PostgreSQL driver: many dispatcher processes on one queue.
//!
//! Claims are one statement (`FOR UPDATE SKIP LOCKED` inside a `LATERAL` per endpoint) that
//! commits before it returns; settles and enqueues are one statement over arrays (`unnest`),
//! each committed on its own, so a batch costs one round trip however large it is. New work is
//! announced with `NOTIFY sluice_work`, which a listener connection relays to idle dispatchers
//! (see [`background`]). Its tables live in a schema of their own, every connection's search
//! path (see [`schema`]), beside them `send_message`, which applications call inside their own
//! transactions (migration 19).

mod background;
mod claim;
mod errors;
mod heartbeats;
mod options;
mod queries;
pub mod schema;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio::sync::Notify;
use tokio_postgres::NoTls;

pub(crate) use errors::pg;
use options::configure;
pub use options::{DEFAULT_SCHEMA, PostgresOptions, schema_problem};

use background::{DueVacuum, FirstAnalyze, announce, listen, maintain};

use super::deadline::MAINTENANCE_DEADLINE;
use super::*;

const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("sql/postgres_001_init.sql")),
    (2, include_str!("sql/postgres_002_subscriptions.sql")),
    (3, include_str!("sql/postgres_003_due_endpoints.sql")),
    (4, include_str!("sql/postgres_004_endpoint_headers.sql")),
    (5, include_str!("sql/postgres_005_dispatchers.sql")),
    (6, include_str!("sql/postgres_006_write_path.sql")),
    (7, include_str!("sql/postgres_007_dispatcher_liveness.sql")),
    (8, include_str!("sql/postgres_008_tenant_shares.sql")),
    (9, include_str!("sql/postgres_009_endpoint_tls_oauth2.sql")),
    (10, include_str!("sql/postgres_010_endpoint_rate_limit.sql")),
    (11, include_str!("sql/postgres_011_heartbeat_tally.sql")),
    (12, include_str!("sql/postgres_012_endpoint_ordering.sql")),
    (
        13,
        include_str!("sql/postgres_013_heartbeat_host_seconds.sql"),
    ),
    (
        14,
        include_str!("sql/postgres_014_dispatcher_lease_tag.sql"),
    ),
    (15, include_str!("sql/postgres_015_dead_letters.sql")),
    (16, include_str!("sql/postgres_016_due_correction.sql")),
    (17, include_str!("sql/postgres_017_id_collation.sql")),
    (
        18,
        include_str!("sql/postgres_018_endpoint_destination.sql"),
    ),
    (19, include_str!("sql/postgres_019_send_message.sql")),
    (20, include_str!("sql/postgres_020_trace_context.sql")),
];
/// Serialises migrations across processes starting at once.
const MIGRATION_LOCK: i64 = 0x5_11ce;
/// The notification channel for new work.
pub(crate) const WORK_CHANNEL: &str = "sluice_work";
/// Connections in the pool.
const POOL_SIZE: usize = 16;
/// How long a heartbeat waits at most for the listener to connect before it is written without
/// its backend (and written again a second later, see `dispatcher::heartbeat`); never more than
/// half the store deadline, so the beat itself still answers within it.
const LISTENER_WAIT: Duration = Duration::from_secs(2);

/// What the pool waits for, kept to explain a pool error.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PoolTimeouts {
    wait: Duration,
    create: Duration,
    max_size: usize,
}

/// A transaction for maintenance (a purge, a count over the history): its own statement
/// timeout, [`MAINTENANCE_DEADLINE`], longer than a request's.
async fn maintenance(
    client: &mut deadpool_postgres::Object,
) -> StoreResult<deadpool_postgres::Transaction<'_>> {
    let tx = client.transaction().await.map_err(pg)?;
    tx.batch_execute(&format!(
        "SET LOCAL statement_timeout = {}",
        MAINTENANCE_DEADLINE.as_millis()
    ))
    .await
    .map_err(pg)?;
    Ok(tx)
}

/// The PostgreSQL store.
pub struct PostgresStore {
    pool: Pool,
    signal: Arc<Notify>,
    /// Asks the announcer task for a `NOTIFY` after an enqueue commits (see `announce`).
    announce: tokio::sync::mpsc::Sender<()>,
    /// `host:port`, for errors (never the URL: it may hold a password).
    target: Arc<str>,
    timeouts: PoolTimeouts,
    /// Keeps the due table's dead rows few (see [`DueVacuum`]).
    due_vacuum: Arc<DueVacuum>,
    /// Analyzes a young queue once (see [`FirstAnalyze`]).
    first_analyze: FirstAnalyze,
    /// What the local dispatcher's latest claim left out.
    held: HeldEndpoints,
    /// This process's name in `NOTIFY` payloads, so its own listener ignores its announcements.
    instance: Arc<str>,
    /// The backend pid of the listener's connection (0 while it is not connected): heartbeats
    /// carry it so readers can tell a live process from one that died since its last beat.
    listener_pid: tokio::sync::watch::Receiver<i32>,
    /// The high half of every lease token this process's claims write, named by its heartbeat,
    /// so its leases can be expired as soon as it is known dead (see
    /// [`Store::expire_leases_of_dead`]).
    lease_tag: i32,
    /// Claims sent whose outcome was lost, to give back (see [`claim::InDoubt`]).
    in_doubt: claim::InDoubt,
    /// Public ids of deliveries and attempts.
    row_ids: crate::ids::RowIds,
    /// The schema of sluice's tables (every connection's search path).
    schema: Arc<str>,
}

impl PostgresStore {
    /// Connect with the default options, migrate, and start relaying notifications.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        Self::connect_with(url, PostgresOptions::default()).await
    }

    /// Connect, migrate, and start relaying notifications.
    pub async fn connect_with(url: &str, options: PostgresOptions) -> StoreResult<Self> {
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| StoreError::Database(format!("bad database url: {e}")))?;
        if let Some(valid) = options::schema_problem(&options.schema) {
            return Err(StoreError::Database(format!(
                "database schema {:?} must be {valid}",
                options.schema
            )));
        }
        configure(&mut config, &options);
        let target: Arc<str> = errors::target(&config).into();
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let timeouts = PoolTimeouts {
            wait: options.deadline,
            create: config
                .get_connect_timeout()
                .copied()
                .unwrap_or(options.deadline),
            max_size: POOL_SIZE,
        };
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .wait_timeout(Some(timeouts.wait))
            .create_timeout(Some(timeouts.create))
            .recycle_timeout(Some(timeouts.create))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::Database(e.to_string()))?;
        let (announce_tx, announce_rx) = tokio::sync::mpsc::channel(1);
        let instance: Arc<str> = crate::ids::new_token("proc").into();
        tokio::spawn(announce(
            pool.clone(),
            announce_rx,
            options.deadline,
            target.clone(),
            timeouts,
            instance.clone(),
        ));
        let (listener_sender, listener_pid) = tokio::sync::watch::channel(0);
        let mut store = Self {
            pool,
            signal: Arc::new(Notify::new()),
            announce: announce_tx,
            target,
            timeouts,
            due_vacuum: Arc::default(),
            first_analyze: FirstAnalyze::default(),
            held: HeldEndpoints::default(),
            instance: instance.clone(),
            listener_pid,
            lease_tag: crate::ids::lease_tag(),
            in_doubt: claim::InDoubt::default(),
            // The installation's key is read once the settings table surely exists, below.
            row_ids: crate::ids::RowIds::from_secret(""),
            schema: options.schema.as_str().into(),
        };
        store.migrate().await?;
        let key = queries::init_setting(
            &store.client().await?,
            ROW_ID_KEY_SETTING,
            &crate::ids::random_hex(32),
        )
        .await?;
        store.row_ids = crate::ids::RowIds::from_secret(&key);
        background::warn_without_autovacuum(&store.pool).await;
        if background::grown(&store.pool).await {
            store.first_analyze.skip();
        }
        tokio::spawn(listen(
            config,
            store.signal.clone(),
            instance,
            listener_sender,
        ));
        Ok(store)
    }

    /// Count due-table writes and start a vacuum of both due tables when due (see [`DueVacuum`]).
    fn due_written(&self, rows: u64) {
        if rows == 0 || !self.due_vacuum.wrote(rows) {
            return;
        }
        let (pool, state) = (self.pool.clone(), self.due_vacuum.clone());
        tokio::spawn(async move {
            maintain(
                pool,
                "VACUUM (SKIP_LOCKED, TRUNCATE false) due_endpoints, due_tenants",
            )
            .await;
            state
                .running
                .store(false, std::sync::atomic::Ordering::Release);
        });
    }

    /// Count deliveries written and analyze the queue tables once enough are (see
    /// [`FirstAnalyze`]).
    fn deliveries_written(&self, deliveries: u64) {
        if !self.first_analyze.wrote(deliveries) {
            return;
        }
        tokio::spawn(maintain(
            self.pool.clone(),
            "ANALYZE deliveries, messages, attempts",
        ));
    }

    async fn client(&self) -> StoreResult<deadpool_postgres::Object> {
        self.pool
            .get()
            .await
            .map_err(|e| errors::pool(e, &self.target, &self.timeouts))
    }

    /// Apply pending migrations in sluice's schema (made ready first, see [`schema::prepare`]).
    /// The advisory lock comes first, before the schema or `schema_migrations` is even created,
    /// so processes started at once on an empty database take turns instead of racing on
    /// `CREATE SCHEMA` or `CREATE TABLE` (all in one transaction: DDL is transactional in
    /// PostgreSQL, and the lock is held until the commit).
    async fn migrate(&self) -> StoreResult<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        // Waiting for another process's migration, or a long migration, is expected here:
        // neither may be cut short by the pool's statement timeout.
        tx.batch_execute("SET LOCAL statement_timeout = 0")
            .await
            .map_err(pg)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(pg)?;
        schema::prepare(&tx, &self.schema).await?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations \
             (version BIGINT PRIMARY KEY, applied_at_ms BIGINT NOT NULL)",
        )
        .await
        .map_err(pg)?;
        for (version, sql) in MIGRATIONS {
            let applied = tx
                .query_opt(
                    "SELECT 1 FROM schema_migrations WHERE version = $1",
                    &[version],
                )
                .await
                .map_err(pg)?
                .is_some();
            if applied {
                continue;
            }
            tx.batch_execute(sql)
                .await
                .map_err(|e| pg(e).context(format!("migration {version} failed")))?;
            tx.execute(
                "INSERT INTO schema_migrations VALUES ($1, $2)",
                &[version, &crate::clock::now_ms()],
            )
            .await
            .map_err(pg)?;
        }
        tx.commit().await.map_err(pg)
    }
}

#[async_trait]
impl Store for PostgresStore {
    fn driver(&self) -> &'static str {
        "postgres"
    }

    fn row_ids(&self) -> &crate::ids::RowIds {
        &self.row_ids
    }

    fn work_signal(&self) -> Arc<Notify> {
        self.signal.clone()
    }

    async fn ping(&self) -> StoreResult<()> {
        let client = self.client().await?;
        client.simple_query("SELECT 1").await.map_err(pg)?;
        Ok(())
    }

    async fn probe_write(&self) -> StoreResult<()> {
        let mut client = self.client().await?;
        // Room: a rolled-back insert still has to extend the table (or find free space in it),
        // which is where a full disk shows (53100).
        let tx = client.transaction().await.map_err(pg)?;
        queries::probe_room(&tx).await?;
        tx.rollback().await.map_err(pg)?;
        queries::set_setting(&client, PROBE_SETTING, &crate::clock::now_ms().to_string()).await
    }

    async fn setting(&self, key: &str) -> StoreResult<Option<String>> {
        queries::setting(&self.client().await?, key).await
    }

    async fn set_setting(&self, key: &str, value: &str) -> StoreResult<()> {
        queries::set_setting(&self.client().await?, key, value).await
    }

    async fn delete_setting(&self, key: &str) -> StoreResult<bool> {
        queries::delete_setting(&self.client().await?, key).await
    }

    async fn delete_settings_between(&self, from: &str, to: &str) -> StoreResult<u64> {
        queries::delete_settings_between(&self.client().await?, from, to).await
    }

    async fn init_setting(&self, key: &str, value: &str) -> StoreResult<String> {
        queries::init_setting(&self.client().await?, key, value).await
    }

    async fn create_tenant(&self, tenant: &Tenant) -> StoreResult<()> {
        queries::create_tenant(&self.client().await?, tenant).await
    }

    async fn tenant(&self, id: &str) -> StoreResult<Tenant> {
        queries::tenant(&self.client().await?, id).await
    }

    async fn tenant_by_token(&self, token_hash: &str) -> StoreResult<Option<Tenant>> {
        queries::tenant_by_token(&self.client().await?, token_hash).await
    }

    async fn list_tenants(&self, after: Option<&str>, limit: u32) -> StoreResult<Vec<Tenant>> {
        queries::list_tenants(&self.client().await?, after.unwrap_or(""), limit).await
    }

    async fn set_tenant_token(&self, id: &str, token_hash: &str) -> StoreResult<()> {
        queries::set_tenant_token(&self.client().await?, id, token_hash).await
    }

    async fn set_tenant_share(&self, id: &str, share: &SharePolicy) -> StoreResult<()> {
        queries::set_tenant_share(&self.client().await?, id, share).await
    }

    async fn tenant_backlog(&self, id: &str, now_ms: i64) -> StoreResult<TenantBacklog> {
        queries::tenant_backlog(&self.client().await?, id, now_ms).await
    }

    async fn endpoint_waiting(&self, id: &str) -> StoreResult<u64> {
        queries::endpoint_waiting(&self.client().await?, id).await
    }

    async fn fifo_head(&self, id: &str) -> StoreResult<Option<DeliveryView>> {
        queries::fifo_head(&self.client().await?, id).await
    }

    async fn delete_tenant(&self, id: &str) -> StoreResult<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        queries::delete_tenant(&tx, id).await?;
        tx.commit().await.map_err(pg)
    }

    async fn create_endpoint(&self, endpoint: &Endpoint) -> StoreResult<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        queries::create_endpoint(&tx, endpoint).await?;
        tx.commit().await.map_err(pg)
    }

    async fn create_endpoints(&self, endpoints: &[Endpoint]) -> StoreResult<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        // Concurrent futures on one connection: the statements are pipelined.
        futures_util::future::try_join_all(
            endpoints.iter().map(|e| queries::create_endpoint(&tx, e)),
        )
        .await?;
        tx.commit().await.map_err(pg)
    }

    async fn endpoint(&self, tenant: Option<&str>, id: &str) -> StoreResult<Endpoint> {
        queries::endpoint(&self.client().await?, tenant, id).await
    }

    async fn endpoints_by_id(&self, ids: &[String]) -> StoreResult<Vec<Endpoint>> {
        queries::endpoints_by_id(&self.client().await?, ids).await
    }

    async fn list_endpoints(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<Endpoint>> {
        queries::list_endpoints(&self.client().await?, tenant, after.unwrap_or(""), limit).await
    }

    async fn tenant_certificate_bytes(&self, tenant: &str, except: &str) -> StoreResult<u64> {
        queries::tenant_certificate_bytes(&self.client().await?, tenant, except).await
    }

    async fn update_endpoint(&self, endpoint: &Endpoint) -> StoreResult<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        queries::update_endpoint(&tx, endpoint).await?;
        tx.commit().await.map_err(pg)?;
        self.signal.notify_one();
        queries::notify(&client, &self.instance).await
    }

    async fn delete_endpoint(&self, tenant: &str, id: &str) -> StoreResult<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        queries::delete_endpoint(&tx, tenant, id).await?;
        tx.commit().await.map_err(pg)
    }

    async fn set_endpoint_enabled(
        &self,
        id: &str,
        enabled: bool,
        reason: Option<&str>,
        now_ms: i64,
    ) -> StoreResult<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        queries::set_endpoint_enabled(&tx, id, enabled, reason, now_ms).await?;
        tx.commit().await.map_err(pg)?;
        if enabled {
            self.signal.notify_one();
            queries::notify(&client, &self.instance).await?;
        }
        Ok(())
    }

    async fn enqueue(&self, messages: &[NewMessage], now_ms: i64) -> StoreResult<Vec<Enqueued>> {
        // One statement, committed on its own (no BEGIN … COMMIT round trips).
        let client = self.client().await?;
        let (result, given_work) = queries::enqueue(&client, messages, now_ms).await?;
        self.due_written(given_work.len() as u64);
        self.deliveries_written(result.iter().map(|m| u64::from(m.deliveries)).sum());
        if !given_work.is_empty() {
            // Wake the local dispatcher now, unless all of it is for endpoints it cannot take
            // (see `HeldEndpoints`), and other processes through NOTIFY; a request already
            // pending covers this commit too.
            if self.held.any_free(given_work.iter().map(String::as_str)) {
                self.signal.notify_one();
            }
            let _ = self.announce.try_send(());
        }
        Ok(result)
    }

    async fn message(&self, tenant: &str, id: &str) -> StoreResult<MessageView> {
        queries::message(&self.client().await?, tenant, id).await
    }

    async fn list_messages(&self, filter: &MessageFilter) -> StoreResult<Vec<MessageSummary>> {
        queries::list_messages(&self.client().await?, filter).await
    }

    async fn claim(&self, request: &ClaimRequest) -> StoreResult<ClaimBatch> {
        self.held.set(&request.exclude);
        let mut client = self.client().await?;
        claim::give_back(&client, &self.in_doubt, request.now_ms).await;
        let token = crate::ids::tagged_lease_token(self.lease_tag);
        let sent = self
            .in_doubt
            .sending(token, request.now_ms + request.lease_ms);
        let (batch, due_rows) = claim::claim(&mut client, request, token).await?;
        sent.known();
        self.due_written(due_rows);
        Ok(batch)
    }

    async fn settle(&self, settlements: &[Settlement], now_ms: i64) -> StoreResult<Vec<i64>> {
        if settlements.is_empty() {
            return Ok(Vec::new());
        }
        queries::settle(&self.client().await?, settlements, now_ms).await
    }

    async fn extend_lease(
        &self,
        delivery_id: i64,
        lease_token: i64,
        lease_until_ms: i64,
    ) -> StoreResult<bool> {
        queries::extend_lease(
            &self.client().await?,
            delivery_id,
            lease_token,
            lease_until_ms,
        )
        .await
    }

    async fn purge(&self, request: &PurgeRequest) -> StoreResult<PurgeReport> {
        let mut client = self.client().await?;
        let tx = maintenance(&mut client).await?;
        let n = queries::purge(&tx, request).await?;
        tx.commit().await.map_err(pg)?;
        Ok(n)
    }

    async fn reap(&self, now_ms: i64, max_expiries: u32) -> StoreResult<ReapReport> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        let report = queries::reap(&tx, now_ms, max_expiries).await?;
        if report.returned > 0 {
            queries::notify(&tx, &self.instance).await?;
        }
        tx.commit().await.map_err(pg)?;
        if report.returned > 0 {
            self.signal.notify_one();
        }
        Ok(report)
    }

    async fn expire_leases_of_dead(&self, now_ms: i64, dead_after_ms: i64) -> StoreResult<u64> {
        let own = *self.listener_pid.borrow();
        if own == 0 {
            // Not connected for long enough to judge anyone.
            return Ok(0);
        }
        let c = self.client().await?;
        let tags = heartbeats::dead_tags(&c, now_ms, dead_after_ms, own).await?;
        if tags.is_empty() {
            return Ok(0);
        }
        let expired = queries::expire_leases_tagged(&c, &tags, now_ms).await?;
        if expired > 0 {
            tracing::info!(
                expired,
                processes = tags.len(),
                "postgres: the leases of dead dispatchers expired early"
            );
        }
        Ok(expired)
    }

    async fn list_deliveries(&self, filter: &DeliveryFilter) -> StoreResult<Vec<DeliveryView>> {
        queries::list_deliveries(&self.client().await?, filter).await
    }

    async fn attempts(&self, tenant: &str, delivery_id: i64) -> StoreResult<Vec<AttemptView>> {
        queries::attempts(&self.client().await?, tenant, delivery_id).await
    }

    async fn endpoint_attempts(
        &self,
        tenant: &str,
        endpoint_id: &str,
        since_ms: i64,
        before: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<AttemptView>> {
        let client = self.client().await?;
        queries::endpoint_attempts(&client, tenant, endpoint_id, since_ms, before, limit).await
    }

    async fn replay(&self, tenant: &str, target: ReplayTarget, now_ms: i64) -> StoreResult<u64> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        let n = queries::replay(&tx, tenant, &target, now_ms).await?;
        if n > 0 {
            queries::notify(&tx, &self.instance).await?;
        }
        tx.commit().await.map_err(pg)?;
        if n > 0 {
            self.signal.notify_one();
        }
        Ok(n)
    }

    async fn record_event(&self, event: &EndpointEvent) -> StoreResult<()> {
        queries::record_event(&self.client().await?, event).await
    }

    async fn list_events(
        &self,
        tenant: &str,
        endpoint_id: &str,
        limit: u32,
    ) -> StoreResult<Vec<EndpointEvent>> {
        queries::list_events(&self.client().await?, tenant, endpoint_id, limit).await
    }

    async fn set_endpoint_failing(&self, id: &str, since_ms: Option<i64>) -> StoreResult<()> {
        queries::set_endpoint_failing(&self.client().await?, id, since_ms).await
    }

    async fn queue_stats(&self, now_ms: i64) -> StoreResult<QueueStats> {
        queries::queue_stats(&self.client().await?, now_ms).await
    }

    async fn delivered_count(&self) -> StoreResult<u64> {
        let mut client = self.client().await?;
        let tx = maintenance(&mut client).await?;
        let n = queries::delivered_count(&tx).await?;
        tx.commit().await.map_err(pg)?;
        Ok(n)
    }

    async fn beat(&self, heartbeat: &Heartbeat) -> StoreResult<bool> {
        // A live row names the listener's backend, so wait a moment for a listener still
        // connecting (at start, or after PostgreSQL came back): a row without it counts until it
        // goes stale however its process ends. A draining row no longer counts: no wait.
        let mut pid = self.listener_pid.clone();
        let wait = if heartbeat.draining {
            Duration::ZERO
        } else {
            LISTENER_WAIT.min(self.timeouts.wait / 2)
        };
        let backend = tokio::time::timeout(wait, pid.wait_for(|p| *p != 0))
            .await
            .ok()
            .and_then(Result::ok)
            .map(|p| *p);
        heartbeats::beat(&self.client().await?, heartbeat, backend, self.lease_tag).await?;
        Ok(backend.is_some())
    }

    async fn heartbeats(&self, since_ms: i64) -> StoreResult<Vec<Heartbeat>> {
        heartbeats::since(&self.client().await?, since_ms).await
    }

    async fn forget_heartbeats(&self, id: Option<&str>, before_ms: i64) -> StoreResult<u64> {
        heartbeats::forget(&self.client().await?, id, before_ms).await
    }
}
