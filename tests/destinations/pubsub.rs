//! Google Cloud Pub/Sub against Google's own emulator (Debian's
//! `google-cloud-cli-pubsub-emulator`), one per test on a loopback port of its own: a delivery
//! arrives once, its `data` verifying with the reference `standardwebhooks` package from its
//! attributes; a FIFO endpoint's messages carry its id as their ordering key and arrive in
//! order; no such topic is `broker_not_found`; a service account's key gets a token from its
//! `token_uri` (tests/google_token_server.py, which verifies the signed assertion with `joserfc`),
//! kept for the next attempt; a `token_uri` that never answers is one fetch, failing every
//! attempt waiting for it as `token_endpoint` while an HTTP endpoint beside it in a small pool
//! keeps receiving; the key is never shown; bad fields are 422s naming them. (A message over
//! Pub/Sub's 10 MiB is `too_large` by unit test only: the emulator takes one of any size up to
//! its 11 MB gRPC bound, and past that never answers.)

use std::io::BufRead;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use super::rabbitmq::{first_attempt, verify};
use super::servers::Running;
use super::support::{self, Sluice, eventually, test_settings};

const EMULATOR: &str =
    "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator";
const PROJECT: &str = "sluice-test";

/// The emulator, or `None` (a loud skip; a failure when services are required) without it.
async fn emulator() -> Option<(Running, String, tempfile::TempDir)> {
    let binary = PathBuf::from(EMULATOR);
    let binary = if binary.is_file() {
        binary
    } else {
        super::servers::binary("cloud-pubsub-emulator")?
    };
    let port = support::free_port();
    let dir = tempfile::tempdir().unwrap();
    let args = vec!["--host=127.0.0.1".to_owned(), format!("--port={port}")];
    let running =
        super::servers::start(&binary, &args, &dir.path().join("emulator.log"), port).await;
    Some((running, format!("http://127.0.0.1:{port}"), dir))
}

/// A topic and a subscription to it (with message ordering), fresh.
async fn topic(base: &str) -> (String, String) {
    let name = format!("orders-{}", sluice::ids::new_id("t"));
    let http = support::http();
    let r = http
        .put(format!("{base}/v1/projects/{PROJECT}/topics/{name}"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{:?}", r.text().await);
    let sub = format!("{name}-sub");
    let r = http
        .put(format!("{base}/v1/projects/{PROJECT}/subscriptions/{sub}"))
        .json(&json!({
            "topic": format!("projects/{PROJECT}/topics/{name}"),
            "enableMessageOrdering": true,
        }))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{:?}", r.text().await);
    (name, sub)
}

/// What the subscription holds, as a subscriber pulls it: (body, attributes, ordering key).
async fn pull(base: &str, sub: &str, want: usize) -> Vec<(String, Value, Value)> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while got.len() < want && tokio::time::Instant::now() < deadline {
        let r: Value = support::http()
            .post(format!(
                "{base}/v1/projects/{PROJECT}/subscriptions/{sub}:pull"
            ))
            .json(&json!({ "maxMessages": 10 }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let received = r["receivedMessages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let acks: Vec<Value> = received.iter().map(|m| m["ackId"].clone()).collect();
        if !acks.is_empty() {
            support::http()
                .post(format!(
                    "{base}/v1/projects/{PROJECT}/subscriptions/{sub}:acknowledge"
                ))
                .json(&json!({ "ackIds": acks }))
                .send()
                .await
                .unwrap();
        }
        for m in &received {
            let m = &m["message"];
            let data = base64::engine::general_purpose::STANDARD
                .decode(m["data"].as_str().unwrap_or_default())
                .unwrap();
            got.push((
                String::from_utf8(data).unwrap(),
                m["attributes"].clone(),
                m["orderingKey"].clone(),
            ));
        }
    }
    got
}

fn verify_message(secret: &str, (body, attributes, _): &(String, Value, Value)) {
    let signed = json!({
        "webhook-id": attributes["webhook-id"],
        "webhook-timestamp": attributes["webhook-timestamp"],
        "webhook-signature": attributes["webhook-signature"],
    });
    verify(secret, &signed, body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pubsub_delivery_arrives_signed_and_a_fifo_endpoint_orders_by_its_key() {
    pubsub_delivery(test_settings()).await;
}

/// The same on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pubsub_delivery_arrives_signed_and_a_fifo_endpoint_orders_by_its_key_on_postgres() {
    let Some(url) = super::support::fresh_postgres().await else {
        return;
    };
    pubsub_delivery(sluice::config::RawSettings {
        database_url: Some(url),
        ..test_settings()
    })
    .await;
}

async fn pubsub_delivery(settings: sluice::config::RawSettings) {
    let Some((_emulator, base, _dir)) = emulator().await else {
        return;
    };
    let (name, sub) = topic(&base).await;
    let s = Sluice::start(settings).await;
    let (_, token) = s.tenant("acme").await;
    let (status, created) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({
                "ordering": "fifo",
                "destination": { "type": "pubsub", "project_id": PROJECT, "topic": name, "endpoint_url": base },
            }),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["destination"]["topic"], name.as_str());
    let id = created["id"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();
    let first = s.send(&token, "order.created", json!({ "order": 1 })).await;
    let second = s.send(&token, "order.paid", json!({ "order": 1 })).await;
    let got = pull(&base, &sub, 2).await;
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].1["webhook-id"], first.as_str(), "in order: {got:?}");
    assert_eq!(got[1].1["webhook-id"], second.as_str(), "in order: {got:?}");
    assert_eq!(got[1].1["webhook-event-type"], "order.paid");
    for m in &got {
        assert_eq!(m.2, id.as_str(), "the endpoint's ordering key: {got:?}");
        verify_message(&secret, m);
    }
    let attempt = first_attempt(&s, &token, &id).await;
    assert_eq!(attempt["error_kind"], Value::Null, "{attempt}");

    // No such topic: a failed attempt of its kind.
    let (_, token) = s.tenant("globex").await;
    let (status, created) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({ "destination": { "type": "pubsub", "project_id": PROJECT, "topic": "no-such-topic", "endpoint_url": base } }),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    s.send(&token, "order.created", json!({ "order": 2 })).await;
    let attempt = first_attempt(&s, &token, &id).await;
    assert_eq!(attempt["error_kind"], "broker_not_found", "{attempt}");
    s.stop().await;
}

/// The token server, stopped when dropped: its base URL and the service account's key.
struct TokenServer {
    child: std::process::Child,
    base: String,
    key: String,
}

impl Drop for TokenServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn token_server() -> Option<TokenServer> {
    let python = support::python_verifier()?;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/google_token_server.py");
    let mut child = std::process::Command::new(python)
        .arg(script)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the token server (joserfc, cryptography and Flask installed by .ci/run)");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    Some(TokenServer {
        child,
        base: format!("http://127.0.0.1:{}", v["port"]),
        key: v["key"].as_str().unwrap().to_owned(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_key_gets_one_token_from_its_token_uri_and_is_never_shown() {
    let Some(tokens) = token_server() else {
        return;
    };
    let Some((_emulator, base, _dir)) = emulator().await else {
        return;
    };
    let (name, sub) = topic(&base).await;
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let (status, created) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({ "destination": {
                "type": "pubsub", "project_id": PROJECT, "topic": name, "endpoint_url": base,
                "credentials": { "service_account_key": tokens.key },
            } }),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["destination"]["has_credentials"], true);
    let id = created["id"].as_str().unwrap().to_owned();
    let (_, shown) = s.get(&token, &format!("/v1/endpoints/{id}")).await;
    for answer in [created.to_string(), shown.to_string()] {
        assert!(!answer.contains("PRIVATE KEY"), "{answer}");
    }
    s.send(&token, "order.created", json!({ "order": 1 })).await;
    s.send(&token, "order.created", json!({ "order": 2 })).await;
    assert_eq!(pull(&base, &sub, 2).await.len(), 2);
    let stats = || async {
        support::http()
            .get(format!("{}/admin/stats", tokens.base))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            stats().await["issued"] == 1
        })
        .await
    );
    let stats = stats().await;
    assert_eq!(stats["issued"], 1, "one token serves both: {stats}");
    assert_eq!(stats["refused"], 0, "{stats}");
    s.stop().await;
}

/// The attempts logged for endpoint `id`, newest first.
async fn attempts(s: &Sluice, token: &str, id: &str) -> Vec<Value> {
    let path = format!("/v1/endpoints/{id}/attempts?limit=100");
    s.get(token, &path).await.1["data"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// A service account whose `token_uri` accepts and never answers, in a sluice with a pool of 2
/// beside a healthy HTTP endpoint: the one fetch under way runs on its own (bounded by the
/// token timeout, 30 s here), each Pub/Sub attempt waits for it only until its own deadline
/// (1 s) and fails as `token_endpoint`, there is one request to the `token_uri` for all of them,
/// and the HTTP endpoint's messages are all delivered meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_uri_that_never_answers_is_one_fetch_and_holds_no_pool_slot() {
    use support::receiver::{self, Behavior};
    let Some(tokens) = token_server() else {
        return;
    };
    let hanging = receiver::start(Behavior::Blackhole, false).await.unwrap();
    let healthy = receiver::start(Behavior::Fast, false).await.unwrap();
    let mut key: Value = serde_json::from_str(&tokens.key).unwrap();
    key["token_uri"] = Value::from(hanging.url());
    let mut settings = test_settings();
    settings.concurrency = Some("2".into());
    settings.total_timeout = Some("1s".into());
    settings.egress.token_timeout = Some("30s".into());
    let s = Sluice::start(settings).await;
    let (_, cloud) = s.tenant("cloud").await;
    let (status, created) = s
        .post(
            &cloud,
            "/v1/endpoints",
            json!({ "destination": {
                // Never reached: there is no token to publish with.
                "type": "pubsub", "project_id": PROJECT, "topic": "orders",
                "endpoint_url": "http://127.0.0.1:9",
                "credentials": { "service_account_key": key.to_string() },
            } }),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let pubsub = created["id"].as_str().unwrap().to_owned();
    let (_, shop) = s.tenant("shop").await;
    let (hook, _) = s.endpoint(&shop, &healthy.url(), json!({})).await;
    for n in 0..10 {
        if n < 6 {
            s.send(&cloud, "order.created", json!({ "n": n })).await;
        }
        s.send(&shop, "order.created", json!({ "n": n })).await;
    }
    let wait = Duration::from_secs(30);
    assert!(
        eventually(wait, || async {
            attempts(&s, &cloud, &pubsub).await.len() >= 6
        })
        .await,
        "{:?}",
        attempts(&s, &cloud, &pubsub).await
    );
    assert!(
        eventually(wait, || async {
            let log = attempts(&s, &shop, &hook).await;
            log.iter().filter(|a| a["status"] == 200).count() >= 10
        })
        .await,
        "{:?}",
        attempts(&s, &shop, &hook).await
    );
    for a in attempts(&s, &cloud, &pubsub).await {
        assert_eq!(a["error_kind"], "token_endpoint", "{a}");
    }
    assert_eq!(
        hanging.record.requests(),
        1,
        "one fetch for every attempt waiting"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pubsub_destinations_are_checked_field_by_field() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let bad = [
        (
            json!({ "type": "pubsub", "topic": "orders" }),
            "destination.project_id",
        ),
        (
            json!({ "type": "pubsub", "project_id": "Bad_Project", "topic": "orders" }),
            "destination.project_id",
        ),
        (
            json!({ "type": "pubsub", "project_id": PROJECT }),
            "destination.topic",
        ),
        (
            json!({ "type": "pubsub", "project_id": PROJECT, "topic": "goog-orders" }),
            "destination.topic",
        ),
        (
            json!({ "type": "pubsub", "project_id": PROJECT, "topic": "orders", "region": "us-east-1" }),
            "destination.region",
        ),
        (
            json!({ "type": "pubsub", "project_id": PROJECT, "topic": "orders", "credentials": { "service_account_key": "{\"type\": \"service_account\"}" } }),
            "destination.credentials.service_account_key",
        ),
        (
            json!({ "type": "pubsub", "project_id": PROJECT, "topic": "orders", "credentials": { "access_key_id": "AKIA", "secret_access_key": "s" } }),
            "destination.credentials.access_key_id",
        ),
    ];
    for (destination, field) in bad {
        let (status, problem) = s
            .post(
                &token,
                "/v1/endpoints",
                json!({ "destination": destination }),
            )
            .await;
        assert_eq!(status, 422, "{destination}: {problem}");
        assert_eq!(problem["field"], field, "{destination}: {problem}");
    }
    let (status, shown) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({ "destination": { "type": "pubsub", "project_id": PROJECT, "topic": "orders" } }),
        )
        .await;
    assert_eq!(status, 201, "{shown}");
    assert_eq!(
        shown["destination"]["endpoint_url"],
        "https://pubsub.googleapis.com"
    );
    s.stop().await;
}
