//! What the rate-limit tests share: an API process and dispatcher processes (in this test
//! process) on one fresh PostgreSQL database, a recording loopback receiver, and the bounds the
//! bucket sets. Every bound is an upper bound from the bucket's arithmetic, measured from an
//! instant taken before any dispatcher could admit anything, so a slow machine only makes it
//! looser; nothing asserts how fast deliveries arrive.

use std::time::{Duration, Instant};

use serde_json::json;
use sluice::config::Role;
use sluice::metrics::endpoints::Count;
use sluice::model::{DeliveryFilter, DeliveryState};
use sluice_testkit as support;
use sluice_testkit::receiver::{self, Behavior, Receiver};
use support::Sluice;

/// The API process, its tenant, one rate-limited endpoint and its receiver.
pub(crate) struct Bench {
    pub(crate) api: Sluice,
    pub(crate) db: String,
    pub(crate) tenant: String,
    pub(crate) token: String,
    pub(crate) endpoint: String,
    pub(crate) rx: Receiver,
    pub(crate) per_second: f64,
    pub(crate) burst: u32,
}

/// An API-only process on a fresh database with an endpoint limited to `per_second` and
/// `burst`, and `messages` for it already accepted (no dispatcher runs yet, so none is
/// claimed before the test starts its clock). `None`: no PostgreSQL (skip).
pub(crate) async fn bench(per_second: f64, burst: u32, messages: usize) -> Option<Bench> {
    bench_with(per_second, burst, messages, json!({})).await
}

/// [`bench`] with `extra` endpoint fields.
pub(crate) async fn bench_with(
    per_second: f64,
    burst: u32,
    messages: usize,
    extra: serde_json::Value,
) -> Option<Bench> {
    let db = support::fresh_postgres().await?;
    let api = Sluice::start_with(|raw| {
        raw.database_url = Some(db.clone());
        raw.role = Some(Role::Api);
    })
    .await;
    let (tenant, token) = api.tenant("limited").await;
    let rx = receiver::start(Behavior::Fast, true).await.unwrap();
    let mut fields = json!({ "rate_limit": { "per_second": per_second, "burst": burst } });
    if let (Some(f), Some(e)) = (fields.as_object_mut(), extra.as_object()) {
        f.extend(e.clone());
    }
    let (endpoint, _) = api.endpoint(&token, &rx.url(), fields).await;
    let bench = Bench {
        api,
        db,
        tenant,
        token,
        endpoint,
        rx,
        per_second,
        burst,
    };
    bench.send(messages).await;
    Some(bench)
}

impl Bench {
    /// Accept `n` messages for the endpoint.
    pub(crate) async fn send(&self, n: usize) {
        for i in 0..n {
            self.api
                .send(&self.token, "order.created", json!({ "i": i }))
                .await;
        }
    }
}

impl Bench {
    /// Start a process that dispatches (and serves the API, for its live evidence) on the
    /// bench's database, fleet-wide through `redis` when given.
    pub(crate) async fn dispatcher(&self, redis: Option<&str>) -> Sluice {
        Sluice::start_with(|raw| {
            raw.database_url = Some(self.db.clone());
            raw.redis_url = redis.map(str::to_owned);
        })
        .await
    }

    /// The most turns a bucket of this limit gives in `elapsed`: `burst + elapsed × rate`.
    pub(crate) fn allowed(&self, elapsed: Duration) -> f64 {
        f64::from(self.burst) + elapsed.as_secs_f64() * self.per_second
    }

    /// Wait until the receiver has `n` distinct messages (at most `timeout`), checking at every
    /// look that what arrived since `since` is within `bound(elapsed)`. Returns the distinct
    /// count seen last.
    pub(crate) async fn watch(
        &self,
        n: usize,
        since: Instant,
        timeout: Duration,
        bound: impl Fn(Duration) -> f64,
    ) -> usize {
        loop {
            // Read the clock first: the count is then of arrivals no later than it.
            let elapsed = since.elapsed();
            let got = self.rx.record.requests();
            let allowed = bound(elapsed);
            assert!(
                got as f64 <= allowed + 1e-9,
                "{got} requests within {elapsed:?}, more than the {allowed:.2} the bucket allows"
            );
            let distinct = self.rx.record.distinct_ids().len();
            if distinct >= n || elapsed > timeout {
                return distinct;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every delivery to the endpoint delivered with exactly one attempt: no hold used one.
    /// The receiver has a request before its dispatcher's settle batch is written, so this
    /// first waits (at most 30 s) for every delivery to leave `Leased`.
    pub(crate) async fn each_delivered_once(&self, n: usize) {
        let filter = DeliveryFilter {
            tenant_id: self.tenant.clone(),
            message_id: None,
            endpoint_id: Some(self.endpoint.clone()),
            state: None,
            after: None,
            limit: 1000,
        };
        let store = &self.api.running.store;
        support::eventually(Duration::from_secs(30), || async {
            let all = store.list_deliveries(&filter).await.unwrap();
            all.iter().all(|d| d.state != DeliveryState::Leased)
        })
        .await;
        let deliveries = store.list_deliveries(&filter).await.unwrap();
        assert_eq!(deliveries.len(), n);
        for d in &deliveries {
            assert_eq!(
                (d.state, d.attempts),
                (DeliveryState::Delivered, 1),
                "delivery {} of message {}",
                d.id,
                d.message_id
            );
        }
        // The receiver saw each message once: nothing was attempted twice.
        assert_eq!(self.rx.record.requests(), n as u64);
    }

    /// Deliveries the rate limit held in `dispatcher` (each requeued at its turn).
    pub(crate) fn held(&self, dispatcher: &Sluice) -> u64 {
        dispatcher
            .running
            .metrics
            .endpoints
            .total(&self.endpoint, Count::RateLimited)
    }

    /// Deliveries `dispatcher` delivered to the endpoint.
    pub(crate) fn delivered_by(&self, dispatcher: &Sluice) -> u64 {
        dispatcher
            .running
            .metrics
            .endpoints
            .total(&self.endpoint, Count::Delivered)
    }
}

/// Every stretch of arrivals, first to last, within `burst + span × rate` plus `slack` of span
/// (the receiver stamps arrivals, which trail admissions by a loopback round trip that varies).
pub(crate) fn windows_within(bench: &Bench, slack: Duration) {
    let mut at: Vec<i64> = bench.rx.record.received().iter().map(|r| r.at_ms).collect();
    at.sort_unstable();
    for i in 0..at.len() {
        for j in i..at.len() {
            let span = Duration::from_millis((at[j] - at[i]) as u64) + slack;
            let count = (j - i + 1) as f64;
            let allowed = bench.allowed(span);
            assert!(
                count <= allowed + 1e-9,
                "{count} arrivals within {span:?} (slack included): more than {allowed:.2}"
            );
        }
    }
}
