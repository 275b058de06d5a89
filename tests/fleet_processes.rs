//! Three dispatcher processes sharing PostgreSQL and Redis respect one lane: a slow receiver
//! never sees more concurrent requests than the endpoint's lane. Redis stopped mid-run: still
//! bounded by the local shares, nothing lost; started again: back to fleet lanes. A dispatcher
//! killed outright: its leases come back once it is known dead, not at their TTL.

use sluice_testkit as support;

use std::time::Duration;

use serde_json::json;
use sluice_testkit::receiver::{self, Behavior};
use support::{ADMIN, RedisServer, eventually};

use sluice_testkit::process::Process;

/// A `sluice serve` of `role` on the shared database, without Redis.
fn sluice_on(db: &str, role: &str) -> sluice_testkit::process::Builder {
    Process::command("serve")
        .listen()
        .args(&[
            "--role",
            role,
            "--database-url",
            db,
            "--allow-network",
            "127.0.0.0/8",
            "--concurrency",
            "64",
        ])
        .env("SLUICE_ADMIN_TOKEN", ADMIN)
        .env("SLUICE_LOG", "warn")
}

/// A `sluice serve` of `role` on the shared database and Redis.
fn sluice(db: &str, redis: &str, role: &str) -> sluice_testkit::process::Builder {
    sluice_on(db, role).args(&["--redis-url", redis])
}

/// POST `body` to `path` of the API at `base` as `token`; the answer, which must be a success.
async fn post(base: &str, token: &str, path: &str, body: serde_json::Value) -> serde_json::Value {
    let r = support::http()
        .post(format!("{base}{path}"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{path}: {}", r.status());
    r.json().await.unwrap()
}

/// A tenant with one endpoint at `url` of lane `lane`, through the API at `base`; its token.
async fn customer(base: &str, url: &str, lane: u32) -> String {
    let tenant = post(base, ADMIN, "/v1/tenants", json!({"name": "fleet"})).await;
    let token = tenant["token"].as_str().unwrap().to_owned();
    post(
        base,
        &token,
        "/v1/endpoints",
        json!({"url": url, "lane_size": lane}),
    )
    .await;
    token
}

/// `n` messages from `token`'s tenant through the API at `base`; their ids.
async fn send(base: &str, token: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let m = post(
            base,
            token,
            "/v1/messages",
            json!({"event_type": "e", "payload": {"i": i}}),
        )
        .await;
        ids.push(m["id"].as_str().unwrap().to_owned());
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_dispatchers_share_one_lane_through_redis_outages() {
    let Some(db) = support::fresh_postgres().await else {
        return;
    };
    let Some(mut redis) = RedisServer::start().await else {
        return;
    };
    let redis_url = redis.url();

    let rx = receiver::start(Behavior::Slow(Duration::from_millis(300)), true)
        .await
        .unwrap();
    let all = sluice(&db, &redis_url, "all").spawn();
    let base = all.base.clone();
    assert!(all.answers("/readyz").await);
    let _dispatchers = [
        sluice(&db, &redis_url, "dispatcher").spawn(),
        sluice(&db, &redis_url, "dispatcher").spawn(),
    ];

    let token = customer(&base, &rx.url(), 3).await;
    // Let every dispatcher see the others' heartbeats (every 5 s) so the local share is known.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let ids = send(&base, &token, 90).await;
    assert!(
        eventually(Duration::from_secs(60), || async {
            rx.record.requests() >= 20
        })
        .await
    );
    // Stop Redis mid-run.
    let peak_before = rx.record.reset_peak();
    redis.stop();
    let at_outage = rx.record.requests();
    assert!(
        eventually(Duration::from_secs(60), || async {
            rx.record.requests() >= at_outage + 15
        })
        .await,
        "delivery stopped while Redis was down"
    );
    let peak_outage = rx.record.reset_peak();
    // Start it again on the same port.
    redis.restart().await.expect("redis-server");
    let all = eventually(Duration::from_secs(120), || async {
        let got = rx.record.distinct_ids();
        ids.iter().all(|id| got.contains(id))
    })
    .await;
    assert!(
        all,
        "lost deliveries: {} of {}",
        rx.record.distinct_ids().len(),
        ids.len()
    );
    let peak_after = rx.record.peak_concurrency();
    assert!(
        peak_before <= 3 && peak_outage <= 3 && peak_after <= 3,
        "three processes together exceeded the lane of 3: peaks before {peak_before}, \
         during the outage {peak_outage}, after {peak_after}"
    );
}

/// A dispatcher-only process serves the operator routes on its `--listen` address (so every
/// role can be probed and scraped) and none of the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_process_serves_health_and_metrics_on_its_listen_address() {
    let Some(db) = support::fresh_postgres().await else {
        return;
    };
    let dispatcher = Process::command("serve")
        .listen()
        .args(&["--role", "dispatcher", "--database-url", &db])
        .env("SLUICE_ADMIN_TOKEN", ADMIN)
        .env("SLUICE_LOG", "warn")
        .spawn();
    let base = dispatcher.base.clone();
    let http = support::http();
    let get = |path: &'static str| {
        let http = http.clone();
        let url = format!("{base}{path}");
        async move { http.get(url).send().await }
    };
    assert!(
        eventually(Duration::from_secs(30), || async {
            get("/healthz").await.is_ok_and(|r| r.status() == 200)
        })
        .await,
        "the dispatcher never answered /healthz on its --listen address"
    );
    assert_eq!(get("/readyz").await.expect("readyz").status(), 200);
    let metrics = get("/metrics").await.expect("metrics");
    assert_eq!(metrics.status(), 200);
    let text = metrics.text().await.expect("metrics text");
    assert!(text.contains("sluice_in_flight"), "{text}");
    for path in ["/v1/messages", "/v1/tenants", "/openapi.json"] {
        let r = get(path).await.expect("answer");
        assert_eq!(r.status(), 404, "{path}");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
    }
}

/// A dispatcher killed outright (PostgreSQL): what it had leased is delivered by another
/// dispatcher once the killed one is known dead (its connection gone, two one-second heartbeats
/// missed), not when the ten-minute lease TTL would have returned it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_dispatchers_leases_return_before_their_ttl() {
    let Some(db) = support::fresh_postgres().await else {
        return;
    };
    let rx = receiver::start(Behavior::Slow(Duration::from_millis(1_500)), true)
        .await
        .unwrap();
    let process = |role: &str| {
        sluice_on(&db, role)
            .args(&["--lease-ttl", "600s", "--heartbeat-interval", "1s"])
            .spawn()
    };
    let api = process("api");
    assert!(api.answers("/readyz").await);
    let doomed = process("dispatcher");
    assert!(doomed.answers("/readyz").await);
    let token = customer(&api.base, &rx.url(), 4).await;
    let ids = send(&api.base, &token, 12).await;
    assert!(
        eventually(Duration::from_secs(30), || async {
            rx.record.requests() >= 1
        })
        .await,
        "the doomed dispatcher never started an attempt"
    );
    doomed.kill();
    let sql = support::postgres_client(&db).await;
    let leased: Vec<String> = sql
        .query("SELECT message_id FROM deliveries WHERE state = 1", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        !leased.is_empty(),
        "the kill left nothing leased; the test proves nothing"
    );
    let times = |id: &str| rx.record.received().iter().filter(|r| r.id == id).count();
    let before: Vec<usize> = leased.iter().map(|id| times(id)).collect();

    let _heir = process("dispatcher");
    let back = eventually(Duration::from_secs(90), || async {
        leased.iter().zip(&before).all(|(id, n)| times(id) > *n)
    })
    .await;
    assert!(
        back,
        "the killed dispatcher's {} leases did not come back before their TTL",
        leased.len()
    );
    let all = eventually(Duration::from_secs(60), || async {
        let got = rx.record.distinct_ids();
        ids.iter().all(|id| got.contains(id))
    })
    .await;
    assert!(all, "every message arrives");
}
