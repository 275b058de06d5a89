//! The delivery engine end to end: real servers, real receivers on loopback, never mocks.

use sluice_testkit as support;

use std::time::Duration;

use serde_json::json;
use sluice::signing::{self, Secret};
use sluice_testkit::receiver::{self, Behavior};
use support::{Sluice, eventually, test_settings};

const WAIT: Duration = Duration::from_secs(20);

async fn delivery_of(s: &Sluice, token: &str, msg: &str) -> serde_json::Value {
    s.message(token, msg).await["deliveries"][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_arrives_signed_and_is_recorded_as_delivered() {
    let s = Sluice::start(test_settings()).await;
    let rx = receiver::start(Behavior::Fast, true).await.unwrap();
    let (_, token) = s.tenant("acme").await;
    let (_, secret) = s.endpoint(&token, &rx.url(), json!({})).await;
    let msg = s.send(&token, "order.created", json!({"order": 42})).await;

    assert!(eventually(WAIT, || async { rx.record.requests() >= 1 }).await);
    let got = rx.record.received().remove(0);
    assert_eq!(got.id, msg, "webhook-id is the message id");
    assert_eq!(
        &got.body[..],
        br#"{"order":42}"#,
        "payload delivered verbatim"
    );
    let secret = Secret::parse(&secret).unwrap();
    let ts: i64 = got.timestamp.parse().unwrap();
    assert!(signing::verify(
        &secret,
        &got.id,
        ts,
        &got.body,
        &got.signature
    ));
    assert!(!signing::verify(
        &secret,
        &got.id,
        ts + 1,
        &got.body,
        &got.signature
    ));

    assert!(
        eventually(WAIT, || async {
            delivery_of(&s, &token, &msg).await["state"] == "delivered"
        })
        .await
    );
    let d = delivery_of(&s, &token, &msg).await;
    assert_eq!(d["attempts"], 1);
    assert_eq!(d["last_status"], 200);
    let tenant = support_tenant(&s, &token).await;
    let log = s
        .running
        .store
        .attempts(&tenant, row(&s, &d["id"]))
        .await
        .unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].status, Some(200));
    assert_eq!(log[0].error_kind, None);

    // Someone else's code verifies the same bytes: the Standard Webhooks reference library.
    if let Some(python) = support::python_verifier() {
        let input = json!({
            "secret": secret.to_string(),
            "headers": {
                "webhook-id": got.id,
                "webhook-timestamp": got.timestamp,
                "webhook-signature": got.signature,
            },
            "body": String::from_utf8(got.body.to_vec()).unwrap(),
        });
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/verify_standardwebhooks.py"
        );
        let mut child = std::process::Command::new(python)
            .arg(script)
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "standardwebhooks refused our signature: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    s.running.stop().await;
}

/// An instant field of a JSON answer, as epoch ms.
fn instant(v: &serde_json::Value) -> i64 {
    sluice::clock::parse_rfc3339(v.as_str().expect("an RFC 3339 string")).expect("RFC 3339")
}

/// The store's row number of a delivery's `dlv_…` id.
fn row(s: &Sluice, v: &serde_json::Value) -> i64 {
    let id = v.as_str().expect("id");
    s.running
        .store
        .row_ids()
        .parse(sluice::ids::DELIVERY, id)
        .expect("dlv_ id")
}

async fn support_tenant(s: &Sluice, token: &str) -> String {
    s.running
        .store
        .tenant_by_token(&sluice::ids::hash_token(token))
        .await
        .unwrap()
        .unwrap()
        .id
}

/// Seed 003 as a test: a receiver that accepts and never answers, new deliveries to it arriving
/// steadily, and a pool of 4. The healthy endpoint keeps receiving throughout, and each hung
/// attempt ends at the read timeout with a retry scheduled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_endpoint_cannot_eat_the_pool() {
    let s = Sluice::start(sluice::config::RawSettings {
        concurrency: Some("4".into()),
        read_timeout: Some("1s".into()),
        total_timeout: Some("2s".into()),
        ..test_settings()
    })
    .await;
    let dead = receiver::start(Behavior::Blackhole, false).await.unwrap();
    let healthy = receiver::start(Behavior::Fast, true).await.unwrap();
    let (_, dead_token) = s.tenant("dead").await;
    let (_, ok_token) = s.tenant("healthy").await;
    s.endpoint(&dead_token, &dead.url(), json!({})).await;
    s.endpoint(&ok_token, &healthy.url(), json!({})).await;

    let mut dead_msgs = Vec::new();
    let mut healthy_msgs = Vec::new();
    for i in 0..30 {
        dead_msgs.push(s.send(&dead_token, "tick", json!({ "i": i })).await);
        healthy_msgs.push(s.send(&ok_token, "tick", json!({ "i": i })).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Throughout, healthy deliveries keep arriving: never more than a few behind.
        if i >= 10 {
            let behind = (i + 1) as u64 - healthy.record.requests();
            assert!(
                behind <= 5,
                "healthy endpoint starved: {behind} behind at {i}"
            );
        }
    }
    assert!(eventually(WAIT, || async { healthy.record.requests() >= 30 }).await);
    for m in &healthy_msgs {
        assert_eq!(delivery_of(&s, &ok_token, m).await["state"], "delivered");
    }
    // The dead endpoint never held more than its lane: the fairness ceiling of a pool of 4.
    assert!(
        dead.record.peak_concurrency() <= 2,
        "{}",
        dead.record.peak_concurrency()
    );
    // Its attempts ended at the read timeout and were rescheduled, not lost.
    assert!(
        eventually(WAIT, || async {
            delivery_of(&s, &dead_token, &dead_msgs[0]).await["attempts"]
                .as_u64()
                .unwrap_or(0)
                >= 1
        })
        .await
    );
    let d = delivery_of(&s, &dead_token, &dead_msgs[0]).await;
    assert_eq!(d["state"], "ready", "{d}");
    assert_eq!(d["last_error"], "timeout_read", "{d}");
    assert!(instant(&d["next_attempt_at"]) > instant(&d["updated_at"]));
    s.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_pauses_the_endpoint_and_schedules_the_retry() {
    let s = Sluice::start(test_settings()).await;
    let rx = receiver::start(Behavior::Throttle { retry_after_s: 30 }, false)
        .await
        .unwrap();
    let (_, token) = s.tenant("t").await;
    s.endpoint(&token, &rx.url(), json!({})).await;
    let first = s.send(&token, "e", json!({})).await;
    assert!(eventually(WAIT, || async { rx.record.requests() >= 1 }).await);
    assert!(
        eventually(WAIT, || async {
            delivery_of(&s, &token, &first).await["attempts"] == 1
        })
        .await
    );
    let d = delivery_of(&s, &token, &first).await;
    assert_eq!(d["state"], "ready");
    assert_eq!(d["last_status"], 429);
    let wait_ms = instant(&d["next_attempt_at"]) - instant(&d["updated_at"]);
    assert!(
        wait_ms >= 29_000,
        "retry scheduled after Retry-After, got {wait_ms} ms"
    );

    // While paused, a new message to the endpoint is held, not attempted.
    let second = s.send(&token, "e", json!({})).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(rx.record.requests(), 1, "paused endpoint was attempted");
    let d = delivery_of(&s, &token, &second).await;
    assert_eq!(d["attempts"], 0, "a pause is not an attempt: {d}");
    s.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_disables_the_endpoint_and_holds_its_deliveries() {
    let s = Sluice::start(test_settings()).await;
    let rx = receiver::start(
        Behavior::FailFirst {
            fail_first: 1,
            status: 410,
        },
        false,
    )
    .await
    .unwrap();
    let (_, token) = s.tenant("t").await;
    let (ep, _) = s.endpoint(&token, &rx.url(), json!({})).await;
    let msg = s.send(&token, "e", json!({})).await;
    assert!(
        eventually(WAIT, || async {
            s.get(&token, &format!("/v1/endpoints/{ep}")).await.1["enabled"] == false
        })
        .await
    );
    let (_, e) = s.get(&token, &format!("/v1/endpoints/{ep}")).await;
    assert!(
        e["disabled_reason"].as_str().unwrap().contains("410"),
        "{e}"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let d = delivery_of(&s, &token, &msg).await;
    assert_eq!(d["state"], "ready", "held, not dropped: {d}");
    assert_eq!(rx.record.requests(), 1);

    // Re-enabled, the held delivery goes out.
    let r = s
        .http
        .patch(format!("{}/v1/endpoints/{ep}", s.base))
        .bearer_auth(&token)
        .json(&json!({ "enabled": true }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        eventually(WAIT, || async {
            delivery_of(&s, &token, &msg).await["state"] == "delivered"
        })
        .await
    );
    s.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_not_followed_and_large_bodies_are_truncated() {
    let s = Sluice::start(test_settings()).await;
    let redirect = receiver::start(Behavior::Redirect, false).await.unwrap();
    let large = receiver::start(Behavior::Oversized(200_000), false)
        .await
        .unwrap();
    let (tenant, token) = s.tenant("t").await;
    s.endpoint(&token, &redirect.url(), json!({ "event_types": ["r"] }))
        .await;
    s.endpoint(&token, &large.url(), json!({ "event_types": ["l"] }))
        .await;
    let r = s.send(&token, "r", json!({})).await;
    let l = s.send(&token, "l", json!({})).await;
    assert!(
        eventually(WAIT, || async {
            delivery_of(&s, &token, &r).await["attempts"] == 1
                && delivery_of(&s, &token, &l).await["state"] == "delivered"
        })
        .await
    );
    let d = delivery_of(&s, &token, &r).await;
    assert_eq!(d["last_status"], 302);
    assert_eq!(d["last_error"], "http_302");
    assert_eq!(d["state"], "ready", "a redirect is a failure, retried: {d}");

    let d = delivery_of(&s, &token, &l).await;
    let log = s
        .running
        .store
        .attempts(&tenant, row(&s, &d["id"]))
        .await
        .unwrap();
    assert_eq!(log[0].response.as_ref().unwrap().len(), 64 * 1024);
    s.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_destinations_are_clear_errors_and_never_attempted() {
    let s = Sluice::start(sluice::config::RawSettings {
        allow_network: vec![],
        ..test_settings()
    })
    .await;
    let (tenant, token) = s.tenant("t").await;
    for url in [
        "http://127.0.0.1:9/hook",
        "http://localhost/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://[::1]/hook",
        "http://10.0.0.1/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://100.64.0.1/",
        "ftp://example.com/",
    ] {
        let (status, body) = s.post(&token, "/v1/endpoints", json!({ "url": url })).await;
        assert_eq!(status, 422, "{url}: {body}");
        assert_eq!(body["field"], "url", "{url}: {body}");
    }
    // A row that slipped past creation (e.g. DNS changed) is refused at delivery time and
    // dead-lettered without retrying.
    let rx = receiver::start(Behavior::Fast, false).await.unwrap();
    let now = sluice::clock::now_ms();
    let endpoint = sluice::model::Endpoint::new(
        sluice::ids::new_id("ep"),
        tenant.clone(),
        format!("http://localhost:{}/hook", rx.addr.port()),
        Secret::generate().to_string(),
        now,
    );
    s.running.store.create_endpoint(&endpoint).await.unwrap();
    let msg = s.send(&token, "e", json!({})).await;
    assert!(
        eventually(WAIT, || async {
            delivery_of(&s, &token, &msg).await["state"] == "dead"
        })
        .await
    );
    let d = delivery_of(&s, &token, &msg).await;
    assert!(d["last_error"].as_str().unwrap().contains("refused"), "{d}");
    assert_eq!(rx.record.requests(), 0);
    s.running.stop().await;
}
