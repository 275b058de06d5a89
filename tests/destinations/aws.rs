//! The AWS destinations against moto (PyPI `moto[server]`), a server speaking the AWS wire
//! protocols, started per test on a loopback port of its own with its signature checking on
//! (`/moto-api/reset-auth`): an SQS, SNS or EventBridge delivery arrives once and a consumer
//! reading it with boto3 verifies it with the reference `standardwebhooks` package; a FIFO
//! queue gets the endpoint's group and the message's deduplication id, so a resend is not
//! delivered twice; no such queue, topic or bus and refused credentials are failed attempts of
//! their kinds; credentials appear in no answer; bad fields are 422s naming them. A service that
//! throttles (a stub: moto cannot be made to) is a `throttled` attempt counted with the 429s;
//! with `--egress-proxy` the call goes through the proxy (tinyproxy) and still verifies.

use std::io::BufRead;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::rabbitmq::{first_attempt, verify};
use super::servers::Running;
use super::support::{self, Sluice, eventually, test_settings};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/aws_moto.py");

/// A moto server of the test's own, and what `tests/aws_moto.py setup` made in it.
struct Moto {
    _server: Running,
    python: String,
    base: String,
    made: Value,
}

impl Moto {
    /// Start it and set it up, or `None` (a loud skip, a failure when services are required)
    /// without Python.
    async fn start() -> Option<Moto> {
        let python = support::python_verifier()?;
        let port = support::free_port();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("moto.log");
        let args: Vec<String> = [
            "-m",
            "moto.server",
            "-H",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        let server = super::servers::start(python.as_ref(), &args, &log, port).await;
        let base = format!("http://127.0.0.1:{port}");
        let out = std::process::Command::new(&python)
            .args([SCRIPT, "setup", &base])
            .output()
            .expect("run tests/aws_moto.py (boto3 and moto installed by .ci/run)");
        assert!(
            out.status.success(),
            "setup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = out.stdout.lines().next().unwrap().unwrap();
        Some(Moto {
            _server: server,
            python,
            base,
            made: serde_json::from_str(&line).unwrap(),
        })
    }

    fn made(&self, what: &str) -> String {
        self.made[what].as_str().unwrap().to_owned()
    }

    fn credentials(&self) -> Value {
        json!({
            "access_key_id": self.made("access_key_id"),
            "secret_access_key": self.made("secret_access_key"),
        })
    }

    /// Every message `queue_url` holds, as a consumer receives it.
    fn receive(&self, queue_url: &str) -> Vec<Value> {
        let out = std::process::Command::new(&self.python)
            .args([
                SCRIPT,
                "receive",
                &self.base,
                &self.made("access_key_id"),
                &self.made("secret_access_key"),
                queue_url,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "receive: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
    }

    /// An endpoint of `kind` with `fields`, the key of this server's user, at this server.
    async fn endpoint(
        &self,
        s: &Sluice,
        token: &str,
        kind: &str,
        fields: Value,
    ) -> (String, String) {
        let mut destination = json!({
            "type": kind, "region": "us-east-1", "endpoint_url": self.base,
            "credentials": self.credentials(),
        });
        for (k, v) in fields.as_object().unwrap() {
            destination[k] = v.clone();
        }
        let (status, created) = s
            .post(
                token,
                "/v1/endpoints",
                json!({ "destination": destination }),
            )
            .await;
        assert_eq!(status, 201, "{created}");
        let shown = created.to_string();
        assert!(
            !shown.contains(&self.made("secret_access_key"))
                && !shown.contains(&self.made("access_key_id")),
            "credentials shown: {shown}"
        );
        (
            created["id"].as_str().unwrap().to_owned(),
            created["secret"].as_str().unwrap().to_owned(),
        )
    }
}

/// Check a received SQS/SNS message's signature from its attributes.
fn verify_attributes(secret: &str, m: &Value) {
    let a = &m["attributes"];
    let signed = json!({
        "webhook-id": a["webhook-id"],
        "webhook-timestamp": a["webhook-timestamp"],
        "webhook-signature": a["webhook-signature"],
    });
    verify(secret, &signed, m["body"].as_str().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sqs_delivery_arrives_once_signed_and_a_fifo_queue_gets_its_group_and_dedup_ids() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;

    // A standard queue: the body is the signed payload, the headers are attributes, and no
    // FIFO ids.
    let standard = moto.made("standard");
    let (id, secret) = moto
        .endpoint(&s, &token, "sqs", json!({ "queue_url": standard }))
        .await;
    let message_id = s.send(&token, "order.created", json!({ "order": 1 })).await;
    let attempt = first_attempt(&s, &token, &id).await;
    assert_eq!(attempt["error_kind"], Value::Null, "{attempt}");
    let got = moto.receive(&standard);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["attributes"]["webhook-id"], message_id.as_str());
    assert_eq!(got[0]["attributes"]["webhook-event-type"], "order.created");
    assert_eq!(got[0]["system"]["MessageGroupId"], Value::Null, "{got:?}");
    verify_attributes(&secret, &got[0]);

    // A FIFO queue: the endpoint's group, the message's deduplication id; a resend inside the
    // window is accepted by SQS and not delivered twice.
    let fifo = moto.made("fifo");
    let (id, secret) = moto
        .endpoint(&s, &token, "sqs", json!({ "queue_url": fifo }))
        .await;
    let message_id = s.send(&token, "order.created", json!({ "order": 2 })).await;
    let attempt = first_attempt(&s, &token, &id).await;
    assert_eq!(attempt["error_kind"], Value::Null, "{attempt}");
    let delivery = attempt["delivery_id"].as_str().unwrap().to_owned();
    let (status, body) = s
        .post(
            &token,
            &format!("/v1/deliveries/{delivery}/resend"),
            json!({}),
        )
        .await;
    assert!(status < 300, "{status} {body}");
    let attempts = format!("/v1/endpoints/{id}/attempts");
    assert!(
        eventually(Duration::from_secs(20), || async {
            s.get(&token, &attempts).await.1["data"]
                .as_array()
                .is_some_and(|a| a.len() >= 2)
        })
        .await
    );
    let (_, log) = s.get(&token, &attempts).await;
    for a in log["data"].as_array().unwrap() {
        assert_eq!(a["error_kind"], Value::Null, "{a}");
    }
    let got = moto.receive(&fifo);
    assert_eq!(
        got.len(),
        1,
        "de-duplicated by MessageDeduplicationId: {got:?}"
    );
    assert_eq!(got[0]["system"]["MessageGroupId"], id.as_str(), "{got:?}");
    assert_eq!(
        got[0]["system"]["MessageDeduplicationId"],
        message_id.as_str()
    );
    verify_attributes(&secret, &got[0]);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sns_and_eventbridge_deliveries_reach_what_is_subscribed_to_them() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;

    // SNS: a queue subscribed with raw message delivery gets the body and the attributes.
    let (id, secret) = moto
        .endpoint(
            &s,
            &token,
            "sns",
            json!({ "topic_arn": moto.made("topic") }),
        )
        .await;
    let message_id = s.send(&token, "order.created", json!({ "order": 3 })).await;
    let attempt = first_attempt(&s, &token, &id).await;
    assert_eq!(attempt["error_kind"], Value::Null, "{attempt}");
    let got = moto.receive(&moto.made("from_sns"));
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["attributes"]["webhook-id"], message_id.as_str());
    verify_attributes(&secret, &got[0]);

    // A FIFO topic: the endpoint's group and the message's deduplication id reach the FIFO
    // queue subscribed to it.
    let (_, token) = s.tenant("initech").await;
    let (id, secret) = moto
        .endpoint(
            &s,
            &token,
            "sns",
            json!({ "topic_arn": moto.made("fifo_topic") }),
        )
        .await;
    let message_id = s.send(&token, "order.created", json!({ "order": 8 })).await;
    let attempt = first_attempt(&s, &token, &id).await;
    assert_eq!(attempt["error_kind"], Value::Null, "{attempt}");
    let got = moto.receive(&moto.made("from_fifo_topic"));
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["system"]["MessageGroupId"], id.as_str(), "{got:?}");
    assert_eq!(
        got[0]["system"]["MessageDeduplicationId"],
        message_id.as_str()
    );
    verify_attributes(&secret, &got[0]);

    // EventBridge (another tenant, so the SNS endpoint gets nothing more): DetailType the event
    // type, Detail the payload, Source the endpoint's.
    let (_, token) = s.tenant("globex").await;
    let (id, _) = moto
        .endpoint(
            &s,
            &token,
            "eventbridge",
            json!({ "event_bus_name": moto.made("bus"), "source": "shop.orders" }),
        )
        .await;
    s.send(
        &token,
        "order.shipped",
        json!({ "order": 4, "items": [1, 2] }),
    )
    .await;
    let attempt = first_attempt(&s, &token, &id).await;
    assert_eq!(attempt["error_kind"], Value::Null, "{attempt}");
    let got = moto.receive(&moto.made("from_events"));
    assert_eq!(got.len(), 1, "{got:?}");
    let event: Value = serde_json::from_str(got[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(event["detail-type"], "order.shipped", "{event}");
    assert_eq!(event["source"], "shop.orders", "{event}");
    assert_eq!(
        event["detail"],
        json!({ "order": 4, "items": [1, 2] }),
        "{event}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_such_queue_topic_or_bus_and_refused_credentials_are_failed_attempts_of_their_kinds() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let s = Sluice::start(test_settings()).await;
    let missing_queue = format!("{}/123456789012/no-such-queue", moto.base);
    let cases = [
        (
            "sqs",
            json!({ "queue_url": missing_queue }),
            None,
            "broker_not_found",
        ),
        (
            "sns",
            json!({ "topic_arn": "arn:aws:sns:us-east-1:123456789012:no-such-topic" }),
            None,
            "broker_not_found",
        ),
        (
            "eventbridge",
            json!({ "event_bus_name": "no-such-bus" }),
            None,
            "broker_not_found",
        ),
        (
            "sqs",
            json!({ "queue_url": moto.made("standard") }),
            Some(
                json!({ "access_key_id": moto.made("access_key_id"), "secret_access_key": "not-the-secret" }),
            ),
            "broker_auth",
        ),
        (
            "sns",
            json!({ "topic_arn": moto.made("topic") }),
            Some(
                json!({ "access_key_id": "AKIANOSUCHKEY0000000", "secret_access_key": "whatever-secret" }),
            ),
            "broker_auth",
        ),
    ];
    // Each case is a tenant of its own, so each message goes to its one endpoint.
    for (n, (kind, fields, credentials, expected)) in cases.into_iter().enumerate() {
        let (_, token) = s.tenant(&format!("case-{n}")).await;
        let mut destination = json!({
            "type": kind, "region": "us-east-1", "endpoint_url": moto.base,
            "credentials": credentials.unwrap_or_else(|| moto.credentials()),
        });
        for (k, v) in fields.as_object().unwrap() {
            destination[k] = v.clone();
        }
        let (status, created) = s
            .post(
                &token,
                "/v1/endpoints",
                json!({ "destination": destination }),
            )
            .await;
        assert_eq!(status, 201, "{created}");
        let id = created["id"].as_str().unwrap().to_owned();
        s.send(&token, "order.created", json!({ "order": 5 })).await;
        let attempt = first_attempt(&s, &token, &id).await;
        assert_eq!(
            attempt["error_kind"], expected,
            "{kind} {fields}: {attempt}"
        );
        let shown = attempt.to_string();
        assert!(
            !shown.contains("not-the-secret") && !shown.contains(&moto.made("secret_access_key")),
            "{shown}"
        );
    }

    // EventBridge takes only a JSON object as Detail: anything else is dead at once.
    let (_, token) = s.tenant("arrays").await;
    let (id, _) = moto
        .endpoint(
            &s,
            &token,
            "eventbridge",
            json!({ "event_bus_name": moto.made("bus") }),
        )
        .await;
    s.send(&token, "order.created", json!([1, 2, 3])).await;
    let attempt = first_attempt(&s, &token, &id).await;
    assert_eq!(attempt["error_kind"], "invalid", "{attempt}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_destinations_are_checked_field_by_field() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let key =
        json!({ "access_key_id": "AKIAEXAMPLE", "secret_access_key": "s3cr3t-key-never-shown" });
    let queue = "http://127.0.0.1:9/123456789012/orders";
    let bad = [
        (
            json!({ "type": "sqs", "queue_url": queue }),
            "destination.region",
        ),
        (
            json!({ "type": "sqs", "region": "us-east-1" }),
            "destination.queue_url",
        ),
        (
            json!({ "type": "sqs", "region": "us-east-1", "queue_url": "not a url" }),
            "destination.queue_url",
        ),
        (
            json!({ "type": "sqs", "region": "US East", "queue_url": queue }),
            "destination.region",
        ),
        (
            json!({ "type": "sqs", "region": "us-east-1", "queue_url": queue, "url": "http://127.0.0.1:9/" }),
            "destination.url",
        ),
        (
            json!({ "type": "sns", "region": "us-east-1", "topic_arn": "orders" }),
            "destination.topic_arn",
        ),
        (
            json!({ "type": "sns", "region": "us-east-1", "topic_arn": "arn:aws:sns:us-east-1:1:t", "queue_url": queue }),
            "destination.queue_url",
        ),
        (
            json!({ "type": "eventbridge", "region": "us-east-1" }),
            "destination.event_bus_name",
        ),
        (
            json!({ "type": "eventbridge", "region": "us-east-1", "event_bus_name": "b", "source": "aws.events" }),
            "destination.source",
        ),
        (
            json!({ "type": "sqs", "region": "us-east-1", "queue_url": queue, "endpoint_url": "ftp://127.0.0.1/" }),
            "destination.endpoint_url",
        ),
        (
            json!({ "type": "sqs", "region": "us-east-1", "queue_url": queue, "credentials": { "access_key_id": "AKIA" } }),
            "destination.credentials.secret_access_key",
        ),
        (
            json!({ "type": "sqs", "region": "us-east-1", "queue_url": queue, "credentials": { "username": "u", "password": "p" } }),
            "destination.credentials.username",
        ),
        (
            json!({ "type": "redis", "url": "redis://127.0.0.1:6379/0", "stream": "s", "region": "us-east-1" }),
            "destination.region",
        ),
        (
            json!({ "type": "sqs", "region": "us-east-1", "queue_url": queue }),
            "destination.credentials",
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

    // Shown with the region's endpoint, without the key, everywhere.
    let (status, shown) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({ "destination": { "type": "sqs", "region": "eu-west-1", "queue_url": "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo", "credentials": key } }),
        )
        .await;
    assert_eq!(status, 201, "{shown}");
    let d = &shown["destination"];
    assert_eq!(
        d["endpoint_url"], "https://sqs.eu-west-1.amazonaws.com",
        "{shown}"
    );
    assert_eq!(d["has_credentials"], true);
    let id = shown["id"].as_str().unwrap();
    let (_, list) = s.get(&token, "/v1/endpoints").await;
    let (_, one) = s.get(&token, &format!("/v1/endpoints/{id}")).await;
    for answer in [shown.to_string(), list.to_string(), one.to_string()] {
        assert!(
            !answer.contains("s3cr3t-key-never-shown") && !answer.contains("AKIAEXAMPLE"),
            "{answer}"
        );
    }
    let (status, shown) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({ "destination": { "type": "eventbridge", "region": "us-east-1", "event_bus_name": "default", "credentials": key } }),
        )
        .await;
    assert_eq!(status, 201, "{shown}");
    assert_eq!(shown["destination"]["source"], "sluice", "{shown}");

    // A private service endpoint is refused without --allow-network.
    let strict = Sluice::start(sluice::config::RawSettings {
        allow_network: Vec::new(),
        ..test_settings()
    })
    .await;
    let (_, strict_token) = strict.tenant("acme").await;
    let (status, problem) = strict
        .post(
            &strict_token,
            "/v1/endpoints",
            json!({ "destination": { "type": "sqs", "region": "us-east-1", "queue_url": queue, "endpoint_url": "http://127.0.0.1:4566", "credentials": key } }),
        )
        .await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["field"], "destination.endpoint_url", "{problem}");
    strict.stop().await;
    s.stop().await;
}

/// A service endpoint that answers every call with `status` and `body` (what moto cannot be
/// made to do: throttle), counting the calls.
async fn answering(status: u16, body: &'static str) -> (String, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                // Read the whole request (headers, then Content-Length bytes) before answering.
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let Ok(n) = socket.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got).to_lowercase();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text[..end]
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if got.len() >= end + 4 + length {
                            break;
                        }
                    }
                }
                counted.fetch_add(1, Ordering::SeqCst);
                let answer = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/x-amz-json-1.0\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    (base, calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttling_service_is_a_throttled_attempt_read_like_a_429() {
    let (base, calls) = answering(
        400,
        r#"{"__type":"com.amazonaws.sqs#ThrottlingException","message":"Rate exceeded"}"#,
    )
    .await;
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let (status, created) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({ "destination": {
                "type": "sqs", "region": "us-east-1", "endpoint_url": base,
                "queue_url": format!("{base}/123456789012/orders"),
                "credentials": { "access_key_id": "AKIAEXAMPLE", "secret_access_key": "secret" },
            } }),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    s.send(&token, "order.created", json!({ "order": 6 })).await;
    let attempt = first_attempt(&s, &token, &id).await;
    assert_eq!(attempt["error_kind"], "throttled", "{attempt}");
    assert!(calls.load(Ordering::SeqCst) >= 1);
    // The evidence counts it with the 429s, and the delivery waits for a retry.
    let path = format!("/v1/endpoints/{id}/status");
    assert!(
        eventually(Duration::from_secs(10), || async {
            s.get(&token, &path).await.1["failures"]["throttled"]
                .as_u64()
                .is_some_and(|n| n >= 1)
        })
        .await,
        "{}",
        s.get(&token, &path).await.1
    );
    s.stop().await;
}

/// An SQS delivery on PostgreSQL, as on the embedded store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sqs_delivery_arrives_once_signed_on_postgres() {
    let Some(url) = super::support::fresh_postgres().await else {
        return;
    };
    let Some(moto) = Moto::start().await else {
        return;
    };
    let s = Sluice::start(sluice::config::RawSettings {
        database_url: Some(url),
        ..test_settings()
    })
    .await;
    let (_, token) = s.tenant("acme").await;
    let fifo = moto.made("fifo");
    let (id, secret) = moto
        .endpoint(&s, &token, "sqs", json!({ "queue_url": fifo }))
        .await;
    let message_id = s.send(&token, "order.created", json!({ "order": 7 })).await;
    let attempt = first_attempt(&s, &token, &id).await;
    assert_eq!(attempt["error_kind"], Value::Null, "{attempt}");
    let got = moto.receive(&fifo);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        got[0]["system"]["MessageDeduplicationId"],
        message_id.as_str()
    );
    verify_attributes(&secret, &got[0]);
    s.stop().await;
}

/// With `--egress-proxy`, an AWS call goes through the proxy like an HTTP delivery (it is one),
/// and its signature still verifies at the service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sqs_call_goes_through_the_egress_proxy() {
    let Some(proxy) = support::egress_proxy::tinyproxy().await else {
        return;
    };
    let Some(moto) = Moto::start().await else {
        return;
    };
    let mut raw = test_settings();
    raw.egress.proxy = Some(format!("http://localhost:{}", proxy.port));
    // `localhost` resolves to ::1 too: with a proxy every address of a name must pass.
    raw.allow_network.push("::1/128".into());
    let s = Sluice::start(raw).await;
    let (_, token) = s.tenant("acme").await;
    let port = moto.base.rsplit(':').next().unwrap().to_owned();
    let endpoint_url = format!("http://localhost:{port}");
    let standard = moto.made("standard");
    let (status, created) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({ "destination": {
                "type": "sqs", "region": "us-east-1", "endpoint_url": endpoint_url,
                "queue_url": standard, "credentials": moto.credentials(),
            } }),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();
    s.send(&token, "order.created", json!({ "order": 9 })).await;
    let attempt = first_attempt(&s, &token, &id).await;
    assert_eq!(attempt["error_kind"], Value::Null, "{attempt}");
    let got = moto.receive(&standard);
    assert_eq!(got.len(), 1, "{got:?}");
    verify_attributes(&secret, &got[0]);
    let log = proxy.log();
    let forwarded = format!("POST {endpoint_url}/");
    assert!(log.contains(&forwarded), "no {forwarded:?} in:\n{log}");
    s.stop().await;
}
