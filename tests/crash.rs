//! Process-level safety: the real `sluice` binary killed with SIGKILL mid-delivery loses nothing,
//! and SIGTERM drains (nothing left leased, nothing lost).

use sluice_testkit as support;

use std::time::Duration;

use serde_json::json;
use sluice::model::{DeliveryFilter, DeliveryState};
use sluice::store::Store;
use sluice_testkit::receiver::{self, Behavior};
use support::{ADMIN, eventually, free_port};

use sluice_testkit::process::Process;

/// `sluice serve` on `port` with its store in `data`, up once `/readyz` answers 200.
async fn serve(data: &std::path::Path, port: u16) -> Process {
    let p = Process::command("serve")
        .listen_on(port)
        .args(&[
            "--allow-network",
            "127.0.0.0/8",
            "--read-timeout",
            "3s",
            "--total-timeout",
            "3s",
            "--lease-ttl",
            "9s",
            "--sqlite-synchronous",
            "normal",
        ])
        .arg("--data-dir")
        .arg(data)
        .env("SLUICE_ADMIN_TOKEN", ADMIN)
        .env("SLUICE_LOG", "warn")
        .spawn();
    assert!(p.answers("/readyz").await, "sluice did not start");
    p
}

async fn post(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    path: &str,
    body: serde_json::Value,
) -> serde_json::Value {
    let r = http
        .post(format!("{base}{path}"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{path}: {}", r.status());
    r.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_delivery_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let http = support::http();
    let rx = receiver::start(Behavior::Slow(Duration::from_millis(700)), true)
        .await
        .unwrap();

    let child = serve(dir.path(), port).await;
    let tenant = post(&http, &base, ADMIN, "/v1/tenants", json!({"name": "t"})).await;
    let token = tenant["token"].as_str().unwrap().to_owned();
    post(
        &http,
        &base,
        &token,
        "/v1/endpoints",
        json!({"url": rx.url(), "lane_size": 4}),
    )
    .await;
    let mut ids = Vec::new();
    for i in 0..24 {
        let m = post(
            &http,
            &base,
            &token,
            "/v1/messages",
            json!({"event_type": "e", "payload": {"i": i}}),
        )
        .await;
        ids.push(m["id"].as_str().unwrap().to_owned());
    }
    // Kill it while deliveries are in flight.
    assert!(
        eventually(Duration::from_secs(20), || async {
            rx.record.requests() >= 4
        })
        .await
    );
    child.kill();
    let before = rx.record.requests();
    assert!(
        before < 24,
        "everything finished before the kill; the test proves nothing"
    );

    let child = serve(dir.path(), port).await;
    let all = eventually(Duration::from_secs(60), || async {
        let got = rx.record.distinct_ids();
        ids.iter().all(|id| got.contains(id))
    })
    .await;
    child.kill();
    assert!(
        all,
        "lost deliveries: {} of {} arrived",
        rx.record.distinct_ids().len(),
        ids.len()
    );
    // Every copy of a message carries the same webhook-id, so receivers can de-duplicate.
    for r in rx.record.received() {
        assert!(ids.contains(&r.id));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_leaving_nothing_leased_and_nothing_lost() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let http = support::http();
    let rx = receiver::start(Behavior::Slow(Duration::from_millis(1500)), true)
        .await
        .unwrap();
    let child = serve(dir.path(), port).await;
    let tenant = post(&http, &base, ADMIN, "/v1/tenants", json!({"name": "t"})).await;
    let token = tenant["token"].as_str().unwrap().to_owned();
    post(
        &http,
        &base,
        &token,
        "/v1/endpoints",
        json!({"url": rx.url(), "lane_size": 2}),
    )
    .await;
    for i in 0..10 {
        post(
            &http,
            &base,
            &token,
            "/v1/messages",
            json!({"event_type": "e", "payload": {"i": i}}),
        )
        .await;
    }
    assert!(
        eventually(Duration::from_secs(20), || async {
            rx.record.in_flight() >= 1
        })
        .await
    );
    // SIGTERM, then wait off the runtime: the receiver keeps answering while sluice drains.
    tokio::task::spawn_blocking(move || child.terminate())
        .await
        .unwrap();

    let store =
        sluice::store::sqlite::SqliteStore::open(&dir.path().join("sluice.db"), Default::default())
            .unwrap();
    let tenant_id = tenant["id"].as_str().unwrap().to_owned();
    let all = store
        .list_deliveries(&DeliveryFilter {
            tenant_id,
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(all.len(), 10);
    let delivered = all
        .iter()
        .filter(|d| d.state == DeliveryState::Delivered)
        .count();
    assert!(delivered >= 1, "in-flight attempts were allowed to finish");
    for d in &all {
        assert_ne!(d.state, DeliveryState::Leased, "left leased: {d:?}");
        assert_ne!(d.state, DeliveryState::Dead, "{d:?}");
        if d.state == DeliveryState::Ready {
            assert_eq!(d.attempts, 0, "released work keeps its attempts: {d:?}");
        }
    }
}
