//! Admission control through the whole engine: lanes shed instead of queueing, a slow lane does
//! not delay a fast one, shedding is never an attempt, the latency breaker trips on a slow 200-OK
//! endpoint, and shed never changes `attempts` whatever the sequence of outcomes.

use sluice_testkit as support;

use std::time::Duration;

use proptest::prelude::*;
use serde_json::json;
use sluice::model::{ClaimRequest, NewMessage, SettleOutcome, Settlement};
use sluice_testkit::receiver::{self, Behavior};
use support::{ADMIN, Sluice, eventually, test_settings};

const WAIT: Duration = Duration::from_secs(30);

/// The seed's regression guard: with the slow endpoint's lane saturated, the fast endpoint's
/// deliveries all complete while the slow ones are still in flight. If the per-endpoint lanes
/// were replaced by one global limit, the fast deliveries would queue behind the slow ones and
/// this would fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_lane_sheds_and_does_not_delay_a_fast_lane() {
    let s = Sluice::start(sluice::config::RawSettings {
        concurrency: Some("16".into()),
        shed_min_delay: Some("1s".into()),
        shed_max_delay: Some("2s".into()),
        ..test_settings()
    })
    .await;
    let slow = receiver::start(Behavior::Slow(Duration::from_secs(3)), false)
        .await
        .unwrap();
    let fast = receiver::start(Behavior::Fast, false).await.unwrap();
    let (tenant, token) = s.tenant("t").await;
    let (slow_ep, _) = s
        .endpoint(
            &token,
            &slow.url(),
            json!({ "event_types": ["slow"], "lane_size": 2 }),
        )
        .await;
    s.endpoint(&token, &fast.url(), json!({ "event_types": ["fast"] }))
        .await;

    // A burst that arrives in one transaction is claimed together, more than the lane holds:
    // the lane admits two and sheds the rest within its deadline.
    let burst: Vec<NewMessage> = (0..12)
        .map(|i| NewMessage {
            id: sluice::ids::new_id("msg"),
            tenant_id: tenant.clone(),
            event_type: "slow".into(),
            payload: format!("{{\"i\":{i}}}"),
            idempotency_key: None,
            only_endpoint: None,
            traceparent: None,
            tracestate: None,
        })
        .collect();
    let slow_msgs: Vec<String> = s
        .running
        .store
        .enqueue(&burst, sluice::clock::now_ms())
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    s.running.store.work_signal().notify_one();
    assert!(eventually(WAIT, || async { slow.record.in_flight() >= 2 }).await);
    for i in 0..20 {
        s.send(&token, "fast", json!({ "i": i })).await;
    }
    assert!(eventually(WAIT, || async { fast.record.requests() >= 20 }).await);
    assert!(
        slow.record.in_flight() > 0 && slow.record.requests() <= 2,
        "fast deliveries had to wait for the slow lane"
    );
    assert!(slow.record.peak_concurrency() <= 2, "lane exceeded");

    // Shedding happened, was counted, and never used an attempt.
    let shed_count = || async {
        let metrics = s
            .http
            .get(format!("{}/metrics", s.base))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        metrics
            .lines()
            .find(|l| l.starts_with("webhook_deliveries_shed_total") && l.contains(&slow_ep))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    assert!(
        eventually(WAIT, || async { shed_count().await >= 1.0 }).await,
        "no shed counted"
    );
    for m in &slow_msgs {
        let d = s.message(&token, m).await["deliveries"][0].clone();
        assert!(d["attempts"].as_u64().unwrap() <= 1, "{d}");
        assert_ne!(d["state"], "dead", "{d}");
    }
    // In-flight returns to zero once the slow answers are in.
    assert!(eventually(WAIT, || async { slow.record.in_flight() == 0 }).await);
    s.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_latency_breaker_trips_on_a_slow_200_ok_endpoint() {
    let s = Sluice::start(test_settings()).await;
    let slow = receiver::start(Behavior::Slow(Duration::from_millis(300)), false)
        .await
        .unwrap();
    let (tenant, token) = s.tenant("t").await;
    // Ceiling 100 ms: the endpoint answers 200 at three times that.
    let (ep, _) = s
        .endpoint(
            &token,
            &slow.url(),
            json!({ "latency_ceiling_ms": 100, "lane_size": 8 }),
        )
        .await;
    for i in 0..40 {
        s.send(&token, "e", json!({ "i": i })).await;
    }
    let tripped = eventually(WAIT, || async {
        s.running
            .store
            .list_events(&tenant, &ep, 10)
            .await
            .unwrap()
            .iter()
            .any(|e| e.kind == "breaker_open")
    })
    .await;
    assert!(tripped, "latency breaker never opened");
    let events = s.running.store.list_events(&tenant, &ep, 10).await.unwrap();
    let open = events.iter().find(|e| e.kind == "breaker_open").unwrap();
    assert!(open.detail.contains("p95"), "{open:?}");
    // While open, deliveries are held: not attempted, not failed.
    let before = slow.record.requests();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        slow.record.requests() <= before + 8,
        "breaker open but still sending"
    );
    s.running.stop().await;
}

fn outcomes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(0u8..4, 1..20)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    /// Whatever the sequence of shed, release, retry and stale settles, `attempts` counts exactly
    /// the settles that carried an attempt, and shedding never dead-letters.
    #[test]
    fn shed_and_release_never_change_attempts(seq in outcomes()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let (store, _dir) = support::fresh_sqlite();
            let now = sluice::clock::now_ms();
            let tenant = sluice::model::Tenant {
                id: "ten_p".into(), name: "p".into(), token_hash: "h".into(), created_at_ms: now,
                share: Default::default(),
            };
            store.create_tenant(&tenant).await.unwrap();
            let ep = sluice::model::Endpoint {
                id: "ep_p".into(), tenant_id: "ten_p".into(), url: "http://127.0.0.1:9/".into(),
                description: String::new(), event_types: vec![], secret: "whsec_AAAA".into(),
                previous_secret: None, previous_secret_until_ms: None, enabled: true,
                disabled_reason: None, operational: false, lane_size: None,
                latency_ceiling_ms: None, connect_timeout_ms: None, read_timeout_ms: None,
                total_timeout_ms: None, rate_limit: None, ordering: Default::default(),
                trace_context: false, failing_since_ms: None,
                headers: Default::default(),
                tls: Default::default(), oauth2: None, created_at_ms: now, updated_at_ms: now,
                destination: sluice::model::Destination::Http { url: "http://127.0.0.1:9/".into() },
                destination_credentials: None,
            };
            store.create_endpoint(&ep).await.unwrap();
            store.enqueue(&[NewMessage {
                id: "msg_p".into(), tenant_id: "ten_p".into(), event_type: "e".into(),
                payload: "{}".into(), idempotency_key: None, only_endpoint: None,
                traceparent: None, tracestate: None,
            }], now).await.unwrap();
            let mut expected = 0u32;
            let mut clock = now;
            for step in seq {
                clock += 1_000;
                let claimed = store.claim(&ClaimRequest {
                    now_ms: clock, limit: 1, per_endpoint: 1, lease_ms: 60_000,
                    exclude: vec![], room: vec![], ..Default::default()
                }).await.unwrap().claimed;
                prop_assert_eq!(claimed.len(), 1);
                let c = &claimed[0];
                prop_assert_eq!(c.attempts, expected);
                let (outcome, attempt) = match step {
                    0 => (SettleOutcome::Shed { at_ms: clock }, None),
                    1 => (SettleOutcome::Release, None),
                    2 => (SettleOutcome::Retry { at_ms: clock }, Some(sluice::model::AttemptRecord {
                        started_at_ms: clock, duration_ms: 5, status: Some(500),
                        error_kind: Some("http_500".into()), response: None,
                    })),
                    _ => {
                        // A stale token: changes nothing, the lease stays; release it properly.
                        let stale = Settlement { delivery_id: c.delivery_id, lease_token: c.lease_token ^ 1,
                            outcome: SettleOutcome::Dead { reason: "stale".into() }, attempt: None };
                        prop_assert!(store.settle(&[stale], clock).await.unwrap().is_empty());
                        (SettleOutcome::Shed { at_ms: clock }, None)
                    }
                };
                if attempt.is_some() { expected += 1; }
                let applied = store.settle(&[Settlement {
                    delivery_id: c.delivery_id, lease_token: c.lease_token, outcome, attempt,
                }], clock).await.unwrap();
                prop_assert_eq!(applied.len(), 1);
            }
            let view = store.message("ten_p", "msg_p").await.unwrap();
            prop_assert_eq!(view.deliveries[0].attempts, expected);
            prop_assert_eq!(view.deliveries[0].state, sluice::model::DeliveryState::Ready);
            Ok(())
        })?;
    }
}
