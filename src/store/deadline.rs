//! The store deadline: every store operation answers within `--store-deadline`, so a hung
//! database turns into a fast `Unavailable` ("the database did not answer within 5s") instead of
//! requests, `/readyz` and dispatcher loops that hang as long as the database does.
//!
//! `Bounded` wraps a driver and bounds each call; it is the store every part of a running
//! sluice uses. An operation cut off by the deadline may still commit later (its statement is
//! already on the wire, or on SQLite's writer thread): that is the same unknown outcome as a
//! connection that breaks during COMMIT, which producers resolve by retrying with their
//! `Idempotency-Key`, and the dispatcher by leases and fencing tokens. The server-side
//! statement timeout (PostgreSQL) stops the work the client stopped waiting for.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;

use super::*;

/// Bound on maintenance work (retention purges), which legitimately takes longer than a request.
pub const MAINTENANCE_DEADLINE: Duration = Duration::from_secs(60);

/// Run `work`, or fail with `Unavailable` naming the deadline once it has passed.
pub async fn within<T>(
    deadline: Duration,
    work: impl Future<Output = StoreResult<T>>,
) -> StoreResult<T> {
    match tokio::time::timeout(deadline, work).await {
        Ok(result) => result,
        Err(_) => Err(StoreError::Unavailable(format!(
            "the database did not answer within {}",
            human(deadline)
        ))),
    }
}

/// `5s`, `500ms`, `2.5s`: a duration as the settings spell it.
pub fn human(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.as_secs() > 0 {
        format!("{}s", d.as_secs())
    } else if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// A store whose every operation is bounded by a deadline.
pub struct Bounded {
    inner: SharedStore,
    deadline: Duration,
}

impl Bounded {
    /// Bound every operation of `inner` by `deadline` (maintenance by at least
    /// [`MAINTENANCE_DEADLINE`]).
    pub fn wrap(inner: SharedStore, deadline: Duration) -> SharedStore {
        Arc::new(Self { inner, deadline })
    }

    async fn run<T>(&self, work: impl Future<Output = StoreResult<T>>) -> StoreResult<T> {
        within(self.deadline, work).await
    }

    /// Maintenance (a purge, a count over the history): bounded by at least
    /// [`MAINTENANCE_DEADLINE`].
    async fn maintain<T>(&self, work: impl Future<Output = StoreResult<T>>) -> StoreResult<T> {
        within(self.deadline.max(MAINTENANCE_DEADLINE), work).await
    }
}

#[async_trait]
impl Store for Bounded {
    fn driver(&self) -> &'static str {
        self.inner.driver()
    }

    fn work_signal(&self) -> Arc<Notify> {
        self.inner.work_signal()
    }

    fn row_ids(&self) -> &crate::ids::RowIds {
        self.inner.row_ids()
    }

    async fn ping(&self) -> StoreResult<()> {
        self.run(self.inner.ping()).await
    }

    async fn probe_write(&self) -> StoreResult<()> {
        self.run(self.inner.probe_write()).await
    }

    async fn setting(&self, key: &str) -> StoreResult<Option<String>> {
        self.run(self.inner.setting(key)).await
    }

    async fn set_setting(&self, key: &str, value: &str) -> StoreResult<()> {
        self.run(self.inner.set_setting(key, value)).await
    }

    async fn init_setting(&self, key: &str, value: &str) -> StoreResult<String> {
        self.run(self.inner.init_setting(key, value)).await
    }

    async fn delete_setting(&self, key: &str) -> StoreResult<bool> {
        self.run(self.inner.delete_setting(key)).await
    }

    async fn delete_settings_between(&self, from: &str, to: &str) -> StoreResult<u64> {
        self.run(self.inner.delete_settings_between(from, to)).await
    }

    async fn create_tenant(&self, tenant: &Tenant) -> StoreResult<()> {
        self.run(self.inner.create_tenant(tenant)).await
    }

    async fn tenant(&self, id: &str) -> StoreResult<Tenant> {
        self.run(self.inner.tenant(id)).await
    }

    async fn tenant_by_token(&self, token_hash: &str) -> StoreResult<Option<Tenant>> {
        self.run(self.inner.tenant_by_token(token_hash)).await
    }

    async fn list_tenants(&self, after: Option<&str>, limit: u32) -> StoreResult<Vec<Tenant>> {
        self.run(self.inner.list_tenants(after, limit)).await
    }

    async fn set_tenant_token(&self, id: &str, token_hash: &str) -> StoreResult<()> {
        self.run(self.inner.set_tenant_token(id, token_hash)).await
    }

    async fn delete_tenant(&self, id: &str) -> StoreResult<()> {
        self.run(self.inner.delete_tenant(id)).await
    }

    async fn set_tenant_share(&self, id: &str, share: &SharePolicy) -> StoreResult<()> {
        self.run(self.inner.set_tenant_share(id, share)).await
    }

    async fn tenant_backlog(&self, id: &str, now_ms: i64) -> StoreResult<TenantBacklog> {
        self.run(self.inner.tenant_backlog(id, now_ms)).await
    }

    async fn endpoint_waiting(&self, id: &str) -> StoreResult<u64> {
        self.run(self.inner.endpoint_waiting(id)).await
    }

    async fn fifo_head(&self, id: &str) -> StoreResult<Option<DeliveryView>> {
        self.run(self.inner.fifo_head(id)).await
    }

    async fn create_endpoint(&self, endpoint: &Endpoint) -> StoreResult<()> {
        self.run(self.inner.create_endpoint(endpoint)).await
    }

    async fn create_endpoints(&self, endpoints: &[Endpoint]) -> StoreResult<()> {
        self.run(self.inner.create_endpoints(endpoints)).await
    }

    async fn endpoint(&self, tenant: Option<&str>, id: &str) -> StoreResult<Endpoint> {
        self.run(self.inner.endpoint(tenant, id)).await
    }

    async fn endpoints_by_id(&self, ids: &[String]) -> StoreResult<Vec<Endpoint>> {
        self.run(self.inner.endpoints_by_id(ids)).await
    }

    async fn list_endpoints(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<Endpoint>> {
        self.run(self.inner.list_endpoints(tenant, after, limit))
            .await
    }

    async fn tenant_certificate_bytes(&self, tenant: &str, except: &str) -> StoreResult<u64> {
        self.run(self.inner.tenant_certificate_bytes(tenant, except))
            .await
    }

    async fn update_endpoint(&self, endpoint: &Endpoint) -> StoreResult<()> {
        self.run(self.inner.update_endpoint(endpoint)).await
    }

    async fn delete_endpoint(&self, tenant: &str, id: &str) -> StoreResult<()> {
        self.run(self.inner.delete_endpoint(tenant, id)).await
    }

    async fn set_endpoint_enabled(
        &self,
        id: &str,
        enabled: bool,
        reason: Option<&str>,
        now_ms: i64,
    ) -> StoreResult<()> {
        self.run(self.inner.set_endpoint_enabled(id, enabled, reason, now_ms))
            .await
    }

    async fn enqueue(&self, messages: &[NewMessage], now_ms: i64) -> StoreResult<Vec<Enqueued>> {
        self.run(self.inner.enqueue(messages, now_ms)).await
    }

    async fn message(&self, tenant: &str, id: &str) -> StoreResult<MessageView> {
        self.run(self.inner.message(tenant, id)).await
    }

    async fn list_messages(&self, filter: &MessageFilter) -> StoreResult<Vec<MessageSummary>> {
        self.run(self.inner.list_messages(filter)).await
    }

    async fn claim(&self, request: &ClaimRequest) -> StoreResult<ClaimBatch> {
        self.run(self.inner.claim(request)).await
    }

    async fn settle(&self, settlements: &[Settlement], now_ms: i64) -> StoreResult<Vec<i64>> {
        self.run(self.inner.settle(settlements, now_ms)).await
    }

    async fn extend_lease(
        &self,
        delivery_id: i64,
        lease_token: i64,
        lease_until_ms: i64,
    ) -> StoreResult<bool> {
        self.run(
            self.inner
                .extend_lease(delivery_id, lease_token, lease_until_ms),
        )
        .await
    }

    async fn reap(&self, now_ms: i64, max_expiries: u32) -> StoreResult<ReapReport> {
        self.run(self.inner.reap(now_ms, max_expiries)).await
    }

    async fn expire_leases_of_dead(&self, now_ms: i64, dead_after_ms: i64) -> StoreResult<u64> {
        self.run(self.inner.expire_leases_of_dead(now_ms, dead_after_ms))
            .await
    }

    async fn purge(&self, request: &PurgeRequest) -> StoreResult<PurgeReport> {
        self.maintain(self.inner.purge(request)).await
    }

    async fn list_deliveries(&self, filter: &DeliveryFilter) -> StoreResult<Vec<DeliveryView>> {
        self.run(self.inner.list_deliveries(filter)).await
    }

    async fn attempts(&self, tenant: &str, delivery_id: i64) -> StoreResult<Vec<AttemptView>> {
        self.run(self.inner.attempts(tenant, delivery_id)).await
    }

    async fn endpoint_attempts(
        &self,
        tenant: &str,
        endpoint_id: &str,
        since_ms: i64,
        before: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<AttemptView>> {
        self.run(
            self.inner
                .endpoint_attempts(tenant, endpoint_id, since_ms, before, limit),
        )
        .await
    }

    async fn replay(&self, tenant: &str, target: ReplayTarget, now_ms: i64) -> StoreResult<u64> {
        self.run(self.inner.replay(tenant, target, now_ms)).await
    }

    async fn record_event(&self, event: &EndpointEvent) -> StoreResult<()> {
        self.run(self.inner.record_event(event)).await
    }

    async fn list_events(
        &self,
        tenant: &str,
        endpoint_id: &str,
        limit: u32,
    ) -> StoreResult<Vec<EndpointEvent>> {
        self.run(self.inner.list_events(tenant, endpoint_id, limit))
            .await
    }

    async fn set_endpoint_failing(&self, id: &str, since_ms: Option<i64>) -> StoreResult<()> {
        self.run(self.inner.set_endpoint_failing(id, since_ms))
            .await
    }

    async fn queue_stats(&self, now_ms: i64) -> StoreResult<QueueStats> {
        self.run(self.inner.queue_stats(now_ms)).await
    }

    async fn delivered_count(&self) -> StoreResult<u64> {
        // A count over the history: maintenance, not a request.
        self.maintain(self.inner.delivered_count()).await
    }

    async fn beat(&self, heartbeat: &Heartbeat) -> StoreResult<bool> {
        self.run(self.inner.beat(heartbeat)).await
    }

    async fn heartbeats(&self, since_ms: i64) -> StoreResult<Vec<Heartbeat>> {
        self.run(self.inner.heartbeats(since_ms)).await
    }

    async fn forget_heartbeats(&self, id: Option<&str>, before_ms: i64) -> StoreResult<u64> {
        self.run(self.inner.forget_heartbeats(id, before_ms)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_settings() {
        assert_eq!(human(Duration::from_secs(5)), "5s");
        assert_eq!(human(Duration::from_millis(250)), "250ms");
        assert_eq!(human(Duration::from_millis(2500)), "2.5s");
    }

    #[tokio::test(start_paused = true)]
    async fn work_past_the_deadline_is_unavailable_and_names_it() {
        let hung = std::future::pending::<StoreResult<()>>();
        let e = within(Duration::from_secs(3), hung).await.unwrap_err();
        assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "store unavailable: the database did not answer within 3s"
        );
        let quick = async { Ok(7) };
        assert_eq!(within(Duration::from_secs(3), quick).await.unwrap(), 7);
    }
}
