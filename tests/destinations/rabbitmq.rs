//! RabbitMQ at 127.0.0.1:5672 (guest/guest), as `.ci/run` starts it: published persistent,
//! confirmed, signed; unroutable, missing exchanges and wrong credentials are failed attempts
//! of their kinds.

use std::time::Duration;

use lapin::options::{BasicGetOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties};
use serde_json::{Value, json};

use super::support::{self, Sluice, eventually, test_settings};

const WAIT: Duration = Duration::from_secs(20);
pub(super) const BROKER: &str = "amqp://127.0.0.1:5672/%2f";

/// One RabbitMQ test at a time: the blocked-broker test raises a memory alarm that blocks
/// every publisher of the broker.
pub(super) fn serial() -> &'static tokio::sync::Mutex<()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    &SERIAL
}

/// A channel to the test broker, or None (a loud skip) when it is not running and services
/// are not required.
pub(super) async fn broker() -> Option<(Connection, Channel)> {
    match Connection::connect(
        "amqp://guest:guest@127.0.0.1:5672/%2f",
        ConnectionProperties::default(),
    )
    .await
    {
        Ok(conn) => {
            let channel = conn.create_channel().await.unwrap();
            Some((conn, channel))
        }
        Err(e) => {
            assert!(
                !support::services::services_required(),
                "RabbitMQ is not running at 127.0.0.1:5672: {e}"
            );
            eprintln!("SKIPPED: RabbitMQ is not running at 127.0.0.1:5672: {e}");
            None
        }
    }
}

pub(super) async fn queue(channel: &Channel) -> String {
    let name = format!("sluice-test-{}", sluice::ids::new_id("q"));
    channel
        .queue_declare(
            name.as_str().into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    name
}

/// An endpoint delivering to `destination`; its id.
pub(super) async fn endpoint(s: &Sluice, token: &str, destination: Value) -> String {
    let (status, body) = s
        .post(
            token,
            "/v1/endpoints",
            json!({ "destination": destination }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

/// The test settings with a retry every second, so a destination that comes back is retried
/// within the test.
pub(super) fn retrying() -> sluice::config::RawSettings {
    sluice::config::RawSettings {
        retry_schedule: Some("1s,1s,1s,1s,1s,1s,1s,1s,1s,1s".into()),
        ..test_settings()
    }
}

fn rabbitmq(exchange: &str, routing_key: &str, password: &str) -> Value {
    json!({
        "type": "rabbitmq", "url": BROKER, "exchange": exchange, "routing_key": routing_key,
        "credentials": { "username": "guest", "password": password },
    })
}

/// The first attempt of the endpoint once there is one.
pub(super) async fn first_attempt(s: &Sluice, token: &str, id: &str) -> Value {
    let path = format!("/v1/endpoints/{id}/attempts");
    assert!(
        eventually(WAIT, || async {
            !s.get(token, &path).await.1["data"][0].is_null()
        })
        .await,
        "no attempt in {WAIT:?}"
    );
    s.get(token, &path).await.1["data"][0].clone()
}

fn text(v: Option<&AMQPValue>) -> String {
    match v {
        Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        other => panic!("not a long string: {other:?}"),
    }
}

/// Verify a `v1` signature with the reference `standardwebhooks` package.
pub(super) fn verify(secret: &str, headers: &Value, body: &str) {
    verify_with(
        "verify_standardwebhooks.py",
        json!({ "secret": secret, "headers": headers, "body": body }),
    );
}

/// Verify a `v1a` (Ed25519) signature with Python's `cryptography` and with sluice's own check.
pub(super) fn verify_v1a(public_key: &str, headers: &Value, body: &str) {
    let field = |name: &str| headers[name].as_str().unwrap().to_owned();
    assert!(
        sluice::signing::verify_v1a(
            public_key,
            &field("webhook-id"),
            field("webhook-timestamp").parse().unwrap(),
            body.as_bytes(),
            &field("webhook-signature"),
        ),
        "sluice's own check refused the v1a signature: {headers}"
    );
    verify_with(
        "verify_v1a.py",
        json!({ "public_key": public_key, "headers": headers, "body": body }),
    );
}

/// Run `tests/<script>` on `input`: it exits 0 only when the signature verifies.
fn verify_with(script: &str, input: Value) {
    let Some(python) = support::python_verifier() else {
        return;
    };
    let script = format!("{}/tests/{script}", env!("CARGO_MANIFEST_DIR"));
    let mut child = std::process::Command::new(python)
        .arg(&script)
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
        "{script} refused the queue message's signature: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivered_message_is_in_the_queue_persistent_and_verifiable() {
    a_delivered_message_is_in_the_queue_persistent_and_verifiable_on(test_settings()).await;
}

/// The same on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivered_message_is_in_the_queue_persistent_and_verifiable_on_postgres() {
    let Some(url) = super::support::fresh_postgres().await else {
        return;
    };
    a_delivered_message_is_in_the_queue_persistent_and_verifiable_on(sluice::config::RawSettings {
        database_url: Some(url),
        ..test_settings()
    })
    .await;
}

async fn a_delivered_message_is_in_the_queue_persistent_and_verifiable_on(
    settings: sluice::config::RawSettings,
) {
    let _serial = serial().lock().await;
    let Some((_conn, channel)) = broker().await else {
        return;
    };
    let q = queue(&channel).await;
    let s = Sluice::start(settings).await;
    let (_, token) = s.tenant("acme").await;
    let (status, created) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({ "destination": rabbitmq("", &q, "guest") }),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();
    let message_id = s
        .send(&token, "order.created", json!({ "order": 42 }))
        .await;

    let attempt = first_attempt(&s, &token, &id).await;
    assert_eq!(attempt["error_kind"], Value::Null, "{attempt}");
    let got = channel
        .basic_get(q.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("the message is in the queue once the attempt is recorded");
    let props = &got.delivery.properties;
    assert_eq!(*props.delivery_mode(), Some(2), "persistent");
    assert_eq!(
        props.kind().as_ref().map(|k| k.as_str().to_owned()),
        Some("order.created".into())
    );
    let headers = props.headers().clone().unwrap_or_default();
    let headers = headers.inner();
    assert_eq!(text(headers.get("webhook-id")), message_id);
    assert_eq!(text(headers.get("webhook-event-type")), "order.created");
    let body = String::from_utf8(got.delivery.data.clone()).unwrap();
    let signed = json!({
        "webhook-id": text(headers.get("webhook-id")),
        "webhook-timestamp": text(headers.get("webhook-timestamp")),
        "webhook-signature": text(headers.get("webhook-signature")),
    });
    verify(&secret, &signed, &body);
    let none = channel
        .basic_get(q.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap();
    assert!(none.is_none(), "delivered once");
    channel
        .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_brokers_refusals_are_failed_attempts_of_their_kinds() {
    let _serial = serial().lock().await;
    let Some((_conn, _channel)) = broker().await else {
        return;
    };
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let unroutable = endpoint(&s, &token, rabbitmq("", "sluice-no-such-queue", "guest")).await;
    let no_exchange = endpoint(
        &s,
        &token,
        rabbitmq("sluice-no-such-exchange", "q", "guest"),
    )
    .await;
    let wrong = "not-the-password";
    let bad_login = endpoint(&s, &token, rabbitmq("", "q", wrong)).await;
    let mut no_vhost_dest = rabbitmq("", "q", "guest");
    no_vhost_dest["url"] = json!("amqp://127.0.0.1:5672/sluice-no-such-vhost");
    let no_vhost = endpoint(&s, &token, no_vhost_dest).await;
    s.send(&token, "order.created", json!({})).await;
    for (id, kind) in [
        (&unroutable, "unroutable"),
        (&no_exchange, "broker_not_found"),
        (&bad_login, "broker_auth"),
        (&no_vhost, "broker_not_found"),
    ] {
        let attempt = first_attempt(&s, &token, id).await;
        assert_eq!(attempt["error_kind"], kind, "{attempt}");
        assert!(!attempt.to_string().contains(wrong), "{attempt}");
        let (_, status) = s.get(&token, &format!("/v1/endpoints/{id}/status")).await;
        let sentence = status["sentence"].as_str().unwrap_or_default();
        assert!(sentence.contains("refused by the broker"), "{sentence}");
        assert!(!status.to_string().contains(wrong), "{status}");
    }
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
    for kind in ["unroutable", "broker_not_found", "broker_auth"] {
        let counted = metrics
            .lines()
            .filter(|l| {
                l.starts_with("sluice_attempt_errors_total")
                    && l.contains(&format!("kind=\"{kind}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
        assert!(
            counted >= 1.0,
            "sluice_attempt_errors_total counts {kind}: {counted}"
        );
    }
    assert!(!metrics.contains(wrong));
    s.stop().await;
}

/// A "broker" that accepts connections and never answers the AMQP handshake holds only the
/// attempts bound for it, each to its connect timeout: a healthy broker's endpoint beside it
/// keeps delivering at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_never_answers_holds_only_its_own_attempts() {
    let _serial = serial().lock().await;
    let Some((_conn, channel)) = broker().await else {
        return;
    };
    let q = queue(&channel).await;
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut kept = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            kept.push(socket);
        }
    });
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let (status, body) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({
                "destination": { "type": "rabbitmq", "url": format!("amqp://127.0.0.1:{port}/%2f"), "routing_key": "q" },
                "connect_timeout_ms": 1000,
                "total_timeout_ms": 2000,
            }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let stuck = body["id"].as_str().unwrap().to_owned();
    endpoint(&s, &token, rabbitmq("", &q, "guest")).await;
    let started = std::time::Instant::now();
    for n in 0..5 {
        s.send(&token, "order.created", json!({ "n": n })).await;
    }
    let count = || async {
        channel
            .queue_declare(
                q.as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .map(|q| q.message_count())
            .unwrap_or(0)
    };
    assert!(eventually(Duration::from_secs(10), || async { count().await >= 5 }).await);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the healthy broker's deliveries did not wait for the silent one: {:?}",
        started.elapsed()
    );
    let attempt = first_attempt(&s, &token, &stuck).await;
    assert_eq!(attempt["error_kind"], "timeout_connect", "{attempt}");
    assert!(
        attempt["duration_ms"].as_u64().unwrap() < 1_500,
        "{attempt}"
    );
    held.abort();
    channel
        .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    s.stop().await;
}

/// RabbitMQ's `max_message_size`, lowered for one test and restored when dropped.
struct MaxMessageSize;

impl MaxMessageSize {
    fn set(bytes: u64) -> MaxMessageSize {
        rabbitmq_env(&bytes.to_string());
        MaxMessageSize
    }
}

impl Drop for MaxMessageSize {
    fn drop(&mut self) {
        rabbitmq_env("134217728");
    }
}

fn rabbitmq_env(bytes: &str) {
    let out = std::process::Command::new("rabbitmqctl")
        .args([
            "eval",
            &format!("application:set_env(rabbit, max_message_size, {bytes})."),
        ])
        .output()
        .expect("rabbitmqctl");
    assert!(
        out.status.success(),
        "rabbitmqctl eval: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A message over the broker's `max_message_size` is refused (406 on the channel): a failed
/// attempt of kind `too_large`, and the endpoint's next (smaller) message still goes through
/// on a channel made again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_brokers_max_size_is_too_large() {
    let _serial = serial().lock().await;
    let Some((_conn, channel)) = broker().await else {
        return;
    };
    let q = queue(&channel).await;
    let limit = MaxMessageSize::set(4096);
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let id = endpoint(&s, &token, rabbitmq("", &q, "guest")).await;
    s.send(
        &token,
        "order.created",
        json!({ "blob": "x".repeat(10_000) }),
    )
    .await;
    let attempt = first_attempt(&s, &token, &id).await;
    assert_eq!(attempt["error_kind"], "too_large", "{attempt}");
    drop(limit);
    s.send(&token, "order.created", json!({ "small": true }))
        .await;
    let attempts = format!("/v1/endpoints/{id}/attempts");
    assert!(
        eventually(WAIT, || async {
            s.get(&token, &attempts).await.1["data"]
                .as_array()
                .is_some_and(|a| a.iter().any(|a| a["error_kind"].is_null()))
        })
        .await,
        "the next message goes through: {}",
        s.get(&token, &attempts).await.1
    );
    channel
        .queue_delete(q.as_str().into(), Default::default())
        .await
        .unwrap();
    s.stop().await;
}
