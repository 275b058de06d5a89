//! Redis Streams at 127.0.0.1:6379, as `.ci/run` starts it: each test uses its own stream
//! key. A delivery is one entry, signed and verifiable; a stream that does not exist is
//! `broker_not_found` (sluice adds with `NOMKSTREAM`); a refused login is `broker_auth`.

use serde_json::{Value, json};

use super::rabbitmq::{endpoint, first_attempt, retrying, verify, verify_v1a};
use super::support::{self, Sluice, test_settings};

const REDIS: &str = "redis://127.0.0.1:6379/0";

async fn redis() -> Option<redis::aio::MultiplexedConnection> {
    let url = support::redis_url()?;
    let client = redis::Client::open(url).unwrap();
    Some(client.get_multiplexed_async_connection().await.unwrap())
}

/// A fresh, existing, empty stream.
async fn stream(conn: &mut redis::aio::MultiplexedConnection) -> String {
    let key = format!("sluice-test-{}", sluice::ids::new_id("st"));
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&key)
        .arg("readers")
        .arg("$")
        .arg("MKSTREAM")
        .query_async(conn)
        .await
        .unwrap();
    key
}

type Entry = (String, Vec<(String, String)>);

fn field(entry: &Entry, name: &str) -> String {
    entry
        .1
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no {name} field"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_is_one_signed_entry_of_the_stream() {
    a_delivery_is_one_signed_entry_of_the_stream_on(test_settings()).await;
}

/// The same on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_is_one_signed_entry_of_the_stream_on_postgres() {
    let Some(url) = super::support::fresh_postgres().await else {
        return;
    };
    a_delivery_is_one_signed_entry_of_the_stream_on(sluice::config::RawSettings {
        database_url: Some(url),
        ..test_settings()
    })
    .await;
}

async fn a_delivery_is_one_signed_entry_of_the_stream_on(settings: sluice::config::RawSettings) {
    let Some(mut conn) = redis().await else {
        return;
    };
    let key = stream(&mut conn).await;
    let s = Sluice::start(settings).await;
    let (_, token) = s.tenant("acme").await;
    let (status, created) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({ "destination": { "type": "redis", "url": REDIS, "stream": key, "max_len": 1000 } }),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["destination"]["stream"], key.as_str());
    assert_eq!(created["destination"]["max_len"], 1000);
    let id = created["id"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();
    let message_id = s.send(&token, "order.created", json!({ "order": 9 })).await;
    let attempt = first_attempt(&s, &token, &id).await;
    assert_eq!(attempt["error_kind"], Value::Null, "{attempt}");

    let entries: Vec<Entry> = redis::cmd("XRANGE")
        .arg(&key)
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let e = &entries[0];
    assert_eq!(field(e, "webhook-id"), message_id);
    assert_eq!(field(e, "webhook-event-type"), "order.created");
    let signed = json!({
        "webhook-id": field(e, "webhook-id"),
        "webhook-timestamp": field(e, "webhook-timestamp"),
        "webhook-signature": field(e, "webhook-signature"),
    });
    verify(&secret, &signed, &field(e, "body"));
    // Where the time went: a broker attempt is a `publish` phase, never an `http` one.
    let metrics = s
        .http
        .get(format!("{}/metrics", s.base))
        .bearer_auth(support::ADMIN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let count = |phase: &str| {
        let name = format!("webhook_phase_seconds_count{{phase=\"{phase}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name.as_str()))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {name} in the metrics"))
    };
    assert!(count("publish") >= 1.0, "{metrics}");
    assert_eq!(count("http"), 0.0);
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_stream_and_a_refused_login_are_failed_attempts_of_their_kinds() {
    let Some(_conn) = redis().await else {
        return;
    };
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let wrong = "not-the-redis-password";
    let missing = format!("sluice-test-missing-{}", sluice::ids::new_id("st"));
    let mut ids = Vec::new();
    for (destination, kind) in [
        (
            json!({ "type": "redis", "url": REDIS, "stream": missing }),
            "broker_not_found",
        ),
        (
            json!({ "type": "redis", "url": REDIS, "stream": "any",
                "credentials": { "username": "nobody", "password": wrong } }),
            "broker_auth",
        ),
    ] {
        let (status, created) = s
            .post(
                &token,
                "/v1/endpoints",
                json!({ "destination": destination }),
            )
            .await;
        assert_eq!(status, 201, "{created}");
        ids.push((created["id"].as_str().unwrap().to_owned(), kind));
    }
    s.send(&token, "order.created", json!({})).await;
    for (id, kind) in ids {
        let attempt = first_attempt(&s, &token, &id).await;
        assert_eq!(attempt["error_kind"], kind, "{attempt}");
        assert!(!attempt.to_string().contains(wrong), "{attempt}");
    }
    s.stop().await;
}

/// An endpoint that asked for `v1a` gets an Ed25519 signature in the entry, which a consumer
/// verifies with the endpoint's public key alone (and which is not a `v1` HMAC).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1a_endpoint_entry_verifies_with_its_public_key() {
    let Some(mut conn) = redis().await else {
        return;
    };
    let key = stream(&mut conn).await;
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let (status, created) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({ "destination": { "type": "redis", "url": REDIS, "stream": key },
                "signature_scheme": "v1a" }),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let public = created["public_key"].as_str().unwrap().to_owned();
    s.send(&token, "order.created", json!({ "order": 10 }))
        .await;
    let attempt = first_attempt(&s, &token, &id).await;
    assert_eq!(attempt["error_kind"], Value::Null, "{attempt}");
    let entries: Vec<Entry> = redis::cmd("XRANGE")
        .arg(&key)
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap();
    let e = &entries[0];
    let signature = field(e, "webhook-signature");
    assert!(signature.starts_with("v1a,"), "{signature}");
    let signed = json!({
        "webhook-id": field(e, "webhook-id"),
        "webhook-timestamp": field(e, "webhook-timestamp"),
        "webhook-signature": signature,
    });
    verify_v1a(&public, &signed, &field(e, "body"));
    // The check can fail: another body does not verify.
    assert!(!sluice::signing::verify_v1a(
        &public,
        &field(e, "webhook-id"),
        field(e, "webhook-timestamp").parse().unwrap(),
        br#"{"order":666}"#,
        &field(e, "webhook-signature"),
    ));
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    s.stop().await;
}

/// Redis at its `maxmemory` under `noeviction` answers `OOM`: the broker's backpressure
/// (`broker_blocked`), and once it has room the retry delivers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_out_of_memory_is_backpressure_and_the_retry_delivers() {
    let Some(server) = support::RedisServer::start().await else {
        return;
    };
    let url = format!("redis://127.0.0.1:{}/0", server.port());
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let key = stream(&mut conn).await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .query_async(&mut conn)
        .await
        .unwrap();
    let used: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await
        .unwrap();
    let used: u64 = used
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory in INFO memory");
    // Full: any write is refused until the limit is raised.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(used / 2)
        .query_async(&mut conn)
        .await
        .unwrap();
    let s = Sluice::start(retrying()).await;
    let (_, token) = s.tenant("acme").await;
    let id = endpoint(
        &s,
        &token,
        json!({ "type": "redis", "url": url, "stream": key }),
    )
    .await;
    s.send(&token, "order.created", json!({ "order": 1 })).await;
    let attempt = first_attempt(&s, &token, &id).await;
    assert_eq!(attempt["error_kind"], "broker_blocked", "{attempt}");

    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        support::eventually(std::time::Duration::from_secs(30), || async {
            let n: usize = redis::cmd("XLEN")
                .arg(&key)
                .query_async(&mut conn.clone())
                .await
                .unwrap_or(0);
            n == 1
        })
        .await,
        "the retry delivers once Redis has room"
    );
    s.stop().await;
}
