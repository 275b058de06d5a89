//! The AWS destinations against moto (PyPI `moto[server]`), a server speaking the AWS wire
//! protocols, started per test on a loopback port of its own with its signature checking on
//! (`/moto-api/reset-auth`): an SQS, SNS or EventBridge delivery arrives once and a consumer
//! reading it with boto3 verifies it with the reference `standardwebhooks` package; a FIFO
//! queue gets the endpoint's group and the message's deduplication id, so a resend is not
//! delivered twice; no such queue, topic or bus and refused credentials are failed attempts of
//! their kinds; credentials appear in no answer. (The API's checks, throttling and the egress
//! proxy: `aws_edges.rs`.)

use std::io::BufRead;
use std::time::Duration;

use serde_json::{Value, json};

use super::rabbitmq::{first_attempt, verify};
use super::servers::Running;
use super::support::{self, Sluice, eventually, test_settings};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/aws_moto.py");

/// A moto server of the test's own, and what `tests/aws_moto.py setup` made in it.
pub(super) struct Moto {
    _server: Running,
    python: String,
    pub(super) base: String,
    made: Value,
}

impl Moto {
    /// Start it and set it up, or `None` (a loud skip, a failure when services are required)
    /// without Python.
    pub(super) async fn start() -> Option<Moto> {
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

    pub(super) fn made(&self, what: &str) -> String {
        self.made[what].as_str().unwrap().to_owned()
    }

    pub(super) fn credentials(&self) -> Value {
        json!({
            "access_key_id": self.made("access_key_id"),
            "secret_access_key": self.made("secret_access_key"),
        })
    }

    /// Run a command of `tests/aws_moto.py` on `queue_url` as this server's user: its output.
    fn queue_command(&self, command: &str, queue_url: &str) -> Vec<u8> {
        let out = std::process::Command::new(&self.python)
            .args([
                SCRIPT,
                command,
                &self.base,
                &self.made("access_key_id"),
                &self.made("secret_access_key"),
                queue_url,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// Every message `queue_url` holds, as a consumer receives it (none deleted).
    pub(super) fn receive(&self, queue_url: &str) -> Vec<Value> {
        serde_json::from_slice(&self.queue_command("receive", queue_url)).unwrap()
    }

    /// How many messages `queue_url` holds, received or not.
    pub(super) fn count(&self, queue_url: &str) -> usize {
        String::from_utf8_lossy(&self.queue_command("count", queue_url))
            .trim()
            .parse()
            .unwrap()
    }

    /// Receive and delete every message of `queue_url`, in the order the queue gives them.
    pub(super) fn drain(&self, queue_url: &str) -> Vec<Value> {
        serde_json::from_slice(&self.queue_command("drain", queue_url)).unwrap()
    }

    /// An endpoint of `kind` with `fields`, the key of this server's user, at this server.
    pub(super) async fn endpoint(
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
pub(super) fn verify_attributes(secret: &str, m: &Value) {
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
    sns_and_eventbridge(test_settings()).await;
}

/// SNS and EventBridge on PostgreSQL, as on the embedded store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sns_and_eventbridge_deliveries_reach_what_is_subscribed_to_them_on_postgres() {
    let Some(url) = super::support::fresh_postgres().await else {
        return;
    };
    sns_and_eventbridge(sluice::config::RawSettings {
        database_url: Some(url),
        ..test_settings()
    })
    .await;
}

async fn sns_and_eventbridge(settings: sluice::config::RawSettings) {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let s = Sluice::start(settings).await;
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
