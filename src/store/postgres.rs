//! The PostgreSQL driver: many dispatcher processes on one queue.
//!
//! Claims are one statement (`FOR UPDATE SKIP LOCKED` inside a `LATERAL` per endpoint) that
//! commits before it returns; settles and enqueues are one statement over arrays (`unnest`),
//! so a batch costs one round trip however large it is. New work is announced with
//! `NOTIFY sluice_work`, which a listener connection relays to idle dispatchers.

mod queries;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio_postgres::{AsyncMessage, NoTls};

use super::*;

const MIGRATIONS: &[(i64, &str)] = &[(1, include_str!("sql/postgres_001_init.sql"))];
/// Serialises migrations across processes starting at once.
const MIGRATION_LOCK: i64 = 0x5_11ce;
/// The notification channel for new work.
pub(crate) const WORK_CHANNEL: &str = "sluice_work";

/// The PostgreSQL store.
pub struct PostgresStore {
    pool: Pool,
    signal: Arc<Notify>,
    /// Asks the announcer task for a `NOTIFY` after an enqueue commits (see `announce`).
    announce: tokio::sync::mpsc::Sender<()>,
}

impl PostgresStore {
    /// Connect, migrate, and start relaying notifications.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| StoreError::Database(format!("bad database url: {e}")))?;
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(16)
            .wait_timeout(Some(Duration::from_secs(10)))
            .create_timeout(Some(Duration::from_secs(5)))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::Database(e.to_string()))?;
        let (announce_tx, announce_rx) = tokio::sync::mpsc::channel(1);
        tokio::spawn(announce(pool.clone(), announce_rx));
        let store = Self {
            pool,
            signal: Arc::new(Notify::new()),
            announce: announce_tx,
        };
        store.migrate().await?;
        tokio::spawn(listen(config, store.signal.clone()));
        Ok(store)
    }

    async fn client(&self) -> StoreResult<deadpool_postgres::Object> {
        self.pool
            .get()
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))
    }

    async fn migrate(&self) -> StoreResult<()> {
        let mut client = self.client().await?;
        client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations \
                 (version BIGINT PRIMARY KEY, applied_at_ms BIGINT NOT NULL)",
            )
            .await
            .map_err(pg)?;
        let tx = client.transaction().await.map_err(pg)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
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
                .map_err(|e| StoreError::Database(format!("migration {version} failed: {e}")))?;
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

/// Send `NOTIFY` for enqueues that have committed, one at a time, coalescing requests that
/// arrive meanwhile (the channel holds one pending request).
///
/// Not inside the enqueue transaction: PostgreSQL serialises the commits of all transactions
/// that notify (a global lock held through the commit's WAL flush), which turned concurrent
/// enqueues into one fsync each in turn, about 4x slower at 32 producers. Ends when the store
/// is dropped.
async fn announce(pool: Pool, mut requests: tokio::sync::mpsc::Receiver<()>) {
    while requests.recv().await.is_some() {
        let sent = match pool.get().await {
            Ok(client) => queries::notify(&client).await,
            Err(e) => Err(StoreError::Unavailable(e.to_string())),
        };
        if let Err(e) = sent {
            tracing::debug!(error = %e, "postgres: cannot announce new work");
        }
    }
}

/// Keep a LISTEN connection open and wake the local dispatcher on every notification;
/// reconnect after a failure (a missed notification only costs one idle poll).
async fn listen(config: tokio_postgres::Config, signal: Arc<Notify>) {
    loop {
        match config.connect(NoTls).await {
            Ok((client, mut connection)) => {
                let mut messages =
                    futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
                let listening = async {
                    client
                        .batch_execute(&format!("LISTEN {WORK_CHANNEL}"))
                        .await
                };
                // The connection must be polled for the LISTEN to complete.
                let mut listening = std::pin::pin!(listening);
                let mut ready = false;
                loop {
                    tokio::select! {
                        r = &mut listening, if !ready => {
                            if r.is_err() { break; }
                            ready = true;
                        }
                        m = messages.next() => match m {
                            Some(Ok(AsyncMessage::Notification(_))) => signal.notify_one(),
                            Some(Ok(_)) => {}
                            Some(Err(_)) | None => break,
                        }
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "postgres listener cannot connect"),
        }
        // Work may have arrived while we were not listening.
        signal.notify_one();
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

pub(crate) fn pg(e: tokio_postgres::Error) -> StoreError {
    use tokio_postgres::error::SqlState;
    match e.code() {
        Some(code) if *code == SqlState::UNIQUE_VIOLATION => StoreError::Conflict(e.to_string()),
        Some(code) if *code == SqlState::FOREIGN_KEY_VIOLATION => {
            StoreError::Conflict(e.to_string())
        }
        Some(code)
            if code.code().starts_with("08")
                || code.code().starts_with("57P")
                || *code == SqlState::T_R_DEADLOCK_DETECTED
                || *code == SqlState::T_R_SERIALIZATION_FAILURE =>
        {
            StoreError::Unavailable(e.to_string())
        }
        Some(_) => StoreError::Database(e.to_string()),
        None => StoreError::Unavailable(e.to_string()),
    }
}

#[async_trait]
impl Store for PostgresStore {
    fn driver(&self) -> &'static str {
        "postgres"
    }

    fn work_signal(&self) -> Arc<Notify> {
        self.signal.clone()
    }

    async fn ping(&self) -> StoreResult<()> {
        let client = self.client().await?;
        client.simple_query("SELECT 1").await.map_err(pg)?;
        Ok(())
    }

    async fn setting(&self, key: &str) -> StoreResult<Option<String>> {
        queries::setting(&self.client().await?, key).await
    }

    async fn set_setting(&self, key: &str, value: &str) -> StoreResult<()> {
        queries::set_setting(&self.client().await?, key, value).await
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

    async fn delete_tenant(&self, id: &str) -> StoreResult<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        queries::delete_tenant(&tx, id).await?;
        tx.commit().await.map_err(pg)
    }

    async fn create_endpoint(&self, endpoint: &Endpoint) -> StoreResult<()> {
        queries::create_endpoint(&self.client().await?, endpoint).await
    }

    async fn endpoint(&self, tenant: Option<&str>, id: &str) -> StoreResult<Endpoint> {
        queries::endpoint(&self.client().await?, tenant, id).await
    }

    async fn list_endpoints(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<Endpoint>> {
        queries::list_endpoints(&self.client().await?, tenant, after.unwrap_or(""), limit).await
    }

    async fn update_endpoint(&self, endpoint: &Endpoint) -> StoreResult<()> {
        let client = self.client().await?;
        queries::update_endpoint(&client, endpoint).await?;
        queries::notify(&client).await
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
        let client = self.client().await?;
        queries::set_endpoint_enabled(&client, id, enabled, reason, now_ms).await?;
        if enabled {
            queries::notify(&client).await?;
        }
        Ok(())
    }

    async fn enqueue(&self, messages: &[NewMessage], now_ms: i64) -> StoreResult<Vec<Enqueued>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        let result = queries::enqueue(&tx, messages, now_ms).await?;
        tx.commit().await.map_err(pg)?;
        if result.iter().any(|e| e.deliveries > 0) {
            // Wake local dispatchers now and other processes through NOTIFY; a request already
            // pending covers this commit too.
            self.signal.notify_one();
            let _ = self.announce.try_send(());
        }
        Ok(result)
    }

    async fn message(&self, tenant: &str, id: &str) -> StoreResult<MessageView> {
        queries::message(&self.client().await?, tenant, id).await
    }

    async fn list_messages(
        &self,
        tenant: &str,
        before: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<MessageSummary>> {
        queries::list_messages(&self.client().await?, tenant, before, limit).await
    }

    async fn claim(&self, request: &ClaimRequest) -> StoreResult<Vec<Claimed>> {
        let client = self.client().await?;
        let cursor = request.after_endpoint.as_deref().unwrap_or("");
        let mut claimed = queries::claim(&client, request, cursor, false).await?;
        if claimed.len() < request.limit as usize && !cursor.is_empty() {
            let rest = ClaimRequest {
                limit: request.limit - claimed.len() as u32,
                ..request.clone()
            };
            claimed.extend(queries::claim(&client, &rest, cursor, true).await?);
        }
        Ok(claimed)
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

    async fn purge(&self, before_ms: i64, limit: u32) -> StoreResult<u64> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        let n = queries::purge(&tx, before_ms, limit).await?;
        tx.commit().await.map_err(pg)?;
        Ok(n)
    }

    async fn reap(&self, now_ms: i64, max_expiries: u32) -> StoreResult<ReapReport> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        let report = queries::reap(&tx, now_ms, max_expiries).await?;
        if report.returned > 0 {
            queries::notify(&tx).await?;
        }
        tx.commit().await.map_err(pg)?;
        Ok(report)
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
            queries::notify(&tx).await?;
        }
        tx.commit().await.map_err(pg)?;
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
}
