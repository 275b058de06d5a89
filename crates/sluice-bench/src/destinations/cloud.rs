//! The cloud kinds' consumers behind emulators (`--cloud emulators`). AWS: a moto server (PyPI
//! `moto[server]`, as the tests use it) of the run's own on a loopback port, set up by
//! `tests/aws_moto.py` (a user's key, the queues, the topic, the bus; signature and IAM checking
//! on), and that script's `consume` reading the queue a delivery lands in (the queue itself for
//! SQS, the one subscribed to the topic for SNS, the one the bus's rule feeds for EventBridge)
//! and printing each message's `sent_at_us`, timed here as it is read. Pub/Sub: Google's
//! emulator, a topic and a subscription pulled over REST ([`pubsub`]). An emulator is slower
//! than the service: each is returned as an [`Emulator`], whose own ceiling is measured beside
//! it ([`super::ceiling`]).

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};

use super::consumers::{Consumer, Made};
use crate::timeline::Timeline;

/// `tests/aws_moto.py`: moto's set-up, consumer and ceiling.
pub(super) const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/aws_moto.py");

/// The Python that has moto and boto3: `SLUICE_PYTHON` (as `.ci/run` sets it), else `python3`.
pub(super) fn python() -> String {
    std::env::var("SLUICE_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".into())
}

/// The project and topic sluice publishes to on the Pub/Sub emulator.
const PROJECT: &str = "sluice-bench";
const TOPIC: &str = "bench";

/// An emulator process of the run's own, and where a client other than sluice sends to it.
pub(super) struct Emulator {
    server: Server,
    /// Where the ceiling's client sends.
    pub(super) to: SendTo,
}

/// An emulator's process, killed when dropped (also when the set-up after its start fails).
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the same calls as sluice's go to, without sluice.
pub(super) enum SendTo {
    /// moto: its URL, the key, the service (`sqs`, `sns`, `eventbridge`) and the queue URL,
    /// topic ARN or bus.
    Moto {
        base: String,
        key: String,
        secret: String,
        kind: String,
        target: String,
    },
    /// The Pub/Sub emulator: the topic's `:publish` URL.
    PubSub { publish_url: String },
}

impl Emulator {
    /// Its process id, to read its CPU from `/proc`.
    pub(super) fn pid(&self) -> String {
        self.server.0.id().to_string()
    }
}

/// A consumer of `kind` (`sqs`, `sns`, `eventbridge`) behind a moto server of its own.
pub(super) async fn consumer(
    kind: &str,
    timeline: Arc<Timeline>,
) -> anyhow::Result<(Consumer, Emulator)> {
    let python = python();
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let base = format!("http://127.0.0.1:{port}");
    let server = Server(
        Command::new(&python)
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start moto (pip install \"moto[server]\")")?,
    );
    let mut up = false;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::ensure!(up, "moto is not listening on {port}");
    let out = Command::new(&python)
        .args([SCRIPT, "setup", &base])
        .output()
        .context("tests/aws_moto.py setup")?;
    anyhow::ensure!(
        out.status.success(),
        "tests/aws_moto.py setup: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let made: Value = serde_json::from_slice(&out.stdout)?;
    let field = |name: &str| made[name].as_str().unwrap_or_default().to_owned();
    let credentials = json!({
        "access_key_id": field("access_key_id"),
        "secret_access_key": field("secret_access_key"),
    });
    let common = json!({ "region": "us-east-1", "endpoint_url": base, "credentials": credentials });
    let (mut destination, target, queue) = match kind {
        "sqs" => (
            json!({ "type": "sqs", "queue_url": field("standard") }),
            field("standard"),
            field("standard"),
        ),
        "sns" => (
            json!({ "type": "sns", "topic_arn": field("topic") }),
            field("topic"),
            field("from_sns"),
        ),
        _ => (
            json!({ "type": "eventbridge", "event_bus_name": field("bus") }),
            field("bus"),
            field("from_events"),
        ),
    };
    let to = SendTo::Moto {
        base: base.clone(),
        key: field("access_key_id"),
        secret: field("secret_access_key"),
        kind: kind.to_owned(),
        target,
    };
    for (k, v) in common.as_object().into_iter().flatten() {
        destination[k] = v.clone();
    }
    let mut reader = Command::new(&python)
        .args([
            SCRIPT,
            "consume",
            &base,
            &field("access_key_id"),
            &field("secret_access_key"),
            &queue,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("tests/aws_moto.py consume")?;
    let stdout = reader.stdout.take().context("the consumer's output")?;
    let task = tokio::task::spawn_blocking(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            timeline.delivered(0, line.trim().parse::<u64>().ok().filter(|n| *n > 0));
        }
    });
    let consumer = Consumer::new(destination, task, Made::Processes(vec![reader]));
    Ok((consumer, Emulator { server, to }))
}

/// Stop `children` (the consumer processes).
pub(super) fn stop(children: Vec<Child>) {
    for mut child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Google's Pub/Sub emulator (Debian's `google-cloud-cli-pubsub-emulator`).
const EMULATOR: &str =
    "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator";

/// A Pub/Sub consumer: the emulator on a loopback port of the run's own, a topic, and a
/// subscription pulled (and acknowledged) in a loop, each message timed by its `sent_at_us`.
pub(super) async fn pubsub(timeline: Arc<Timeline>) -> anyhow::Result<(Consumer, Emulator)> {
    use base64::Engine;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let base = format!("http://127.0.0.1:{port}");
    let server = Server(
        Command::new(EMULATOR)
            .args(["--host=127.0.0.1", &format!("--port={port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start the Pub/Sub emulator (google-cloud-cli-pubsub-emulator)")?,
    );
    let mut up = false;
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::ensure!(up, "the Pub/Sub emulator is not listening on {port}");
    let http = reqwest::Client::new();
    let project = PROJECT;
    let call = |method: reqwest::Method, path: String, body: Value| {
        http.request(method, format!("{base}/v1/projects/{project}/{path}"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    let r = call(reqwest::Method::PUT, format!("topics/{TOPIC}"), json!({})).await?;
    anyhow::ensure!(r.status().is_success(), "make the topic: {}", r.status());
    let sub = json!({ "topic": format!("projects/{project}/topics/{TOPIC}") });
    let r = call(reqwest::Method::PUT, "subscriptions/bench-sub".into(), sub).await?;
    anyhow::ensure!(
        r.status().is_success(),
        "make the subscription: {}",
        r.status()
    );
    let pull_url = format!("{base}/v1/projects/{project}/subscriptions/bench-sub:pull");
    let ack_url = format!("{base}/v1/projects/{project}/subscriptions/bench-sub:acknowledge");
    let task = tokio::spawn(async move {
        let engine = base64::engine::general_purpose::STANDARD;
        loop {
            let pulled = http
                .post(&pull_url)
                .header("content-type", "application/json")
                .body(json!({ "maxMessages": 1000 }).to_string())
                .send()
                .await;
            let Ok(pulled) = pulled else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let v: Value = serde_json::from_slice(&pulled.bytes().await.unwrap_or_default())
                .unwrap_or_default();
            let received = v["receivedMessages"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if received.is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            let acks: Vec<Value> = received.iter().map(|m| m["ackId"].clone()).collect();
            let _ = http
                .post(&ack_url)
                .header("content-type", "application/json")
                .body(json!({ "ackIds": acks }).to_string())
                .send()
                .await;
            for m in &received {
                let data = engine
                    .decode(m["message"]["data"].as_str().unwrap_or_default())
                    .unwrap_or_default();
                timeline.delivered(0, crate::timeline::sent_at_us(&data));
            }
        }
    });
    let destination = json!({
        "type": "pubsub", "project_id": project, "topic": TOPIC, "endpoint_url": base,
    });
    let consumer = Consumer::new(destination, task, Made::Processes(Vec::new()));
    let to = SendTo::PubSub {
        publish_url: format!("{base}/v1/projects/{PROJECT}/topics/{TOPIC}:publish"),
    };
    Ok((consumer, Emulator { server, to }))
}
