//! The written policy holds at every moment, through the dispatcher: a tenant whose endpoints
//! are slow cannot fill the pool, so a tenant that becomes due finds a slot at once (the
//! reserve); and a tenant's ceiling bounds what it holds even when it is alone.

use std::time::Duration;

use serde_json::json;
use sluice_testkit as support;
use support::receiver::{self, Behavior};
use support::{ADMIN, Sluice, eventually};

/// A pool of 8 (a reserve of one), lanes of 2 (a quarter of the pool): a tenant with four
/// endpoints answering in 20 s holds 7 slots and no more, and another tenant's delivery is made
/// while all 7 attempts still run. Before, the slow tenant held all 8 and the other waited 20 s
/// for one of them to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_that_becomes_due_finds_a_slot_while_slow_endpoints_fill_the_pool() {
    let slow = receiver::start(Behavior::Slow(Duration::from_secs(20)), false)
        .await
        .unwrap();
    let fast = receiver::start(Behavior::Fast, true).await.unwrap();
    let s = Sluice::start_with(|raw| {
        raw.concurrency = Some("8".into());
        raw.total_timeout = Some("25s".into());
        raw.lease_ttl = Some("60s".into());
    })
    .await;
    let (_, busy) = s.tenant("slow-endpoints").await;
    for _ in 0..4 {
        s.endpoint(&busy, &slow.url(), json!({})).await;
    }
    for i in 0..10 {
        s.send(&busy, "order.created", json!({ "i": i })).await;
    }
    let filled = eventually(Duration::from_secs(10), || async {
        slow.record.in_flight() >= 7
    })
    .await;
    assert!(filled, "{} in flight", slow.record.in_flight());
    // Give the dispatcher every chance to fill the last slot too.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(slow.record.in_flight(), 7, "the reserve stays free");

    let (_, quiet) = s.tenant("quiet").await;
    s.endpoint(&quiet, &fast.url(), json!({})).await;
    s.send(&quiet, "order.created", json!({})).await;
    let made = eventually(Duration::from_secs(15), || async {
        fast.record.requests() >= 1
    })
    .await;
    assert!(
        made,
        "the quiet tenant waited for the slow tenant's attempts"
    );
    assert_eq!(
        slow.record.requests(),
        7,
        "made while the slow tenant's attempts all still ran"
    );
    s.stop().await;
}

/// A ceiling of a half binds a tenant alone: with a pool of 8 it never holds more than 4
/// attempts, though nothing else waits. Before, a ceiling bound only while another tenant had
/// work due, and the tenant alone held all 8.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ceiling_binds_a_tenant_alone() {
    let slow = receiver::start(Behavior::Slow(Duration::from_millis(400)), false)
        .await
        .unwrap();
    let s = Sluice::start_with(|raw| {
        raw.concurrency = Some("8".into());
    })
    .await;
    let (id, token) = s.tenant("capped").await;
    let r = s
        .http
        .patch(format!("{}/v1/tenants/{id}", s.base))
        .bearer_auth(ADMIN)
        .json(&json!({ "max_share": 0.5 }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    for _ in 0..4 {
        s.endpoint(&token, &slow.url(), json!({})).await;
    }
    const N: u64 = 40;
    for i in 0..N / 4 {
        s.send(&token, "order.created", json!({ "i": i })).await;
    }
    let all = eventually(Duration::from_secs(60), || async {
        slow.record.requests() >= N
    })
    .await;
    assert!(all, "{} of {N}", slow.record.requests());
    assert!(
        slow.record.peak_concurrency() <= 4,
        "{} attempts at once under a ceiling of 4",
        slow.record.peak_concurrency()
    );
    s.stop().await;
}
