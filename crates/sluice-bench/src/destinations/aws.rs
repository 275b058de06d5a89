//! The AWS kinds' consumers: a moto server (PyPI `moto[server]`, as the tests use it) of the
//! run's own on a loopback port, set up by `tests/aws_moto.py` (a user's key, the queues, the
//! topic, the bus), and that script's `consume` reading the queue a delivery lands in (the
//! queue itself for SQS, the one subscribed to the topic for SNS, the one the bus's rule feeds
//! for EventBridge) and printing each message's `sent_at_us`, timed here as it is read. An
//! emulator is slower than the service: the figures are moto's ceiling as much as sluice's.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};

use super::consumers::{Consumer, Made};
use crate::timeline::Timeline;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/aws_moto.py");

/// The Python that has moto and boto3: `SLUICE_PYTHON` (as `.ci/run` sets it), else `python3`.
fn python() -> String {
    std::env::var("SLUICE_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".into())
}

/// A consumer of `kind` (`sqs`, `sns`, `eventbridge`) behind a moto server of its own.
pub(super) async fn consumer(kind: &str, timeline: Arc<Timeline>) -> anyhow::Result<Consumer> {
    let python = python();
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let base = format!("http://127.0.0.1:{port}");
    let server = Command::new(&python)
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
        .context("start moto (pip install \"moto[server]\")")?;
    let mut children = vec![server];
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
    let (mut destination, queue) = match kind {
        "sqs" => (
            json!({ "type": "sqs", "queue_url": field("standard") }),
            field("standard"),
        ),
        "sns" => (
            json!({ "type": "sns", "topic_arn": field("topic") }),
            field("from_sns"),
        ),
        _ => (
            json!({ "type": "eventbridge", "event_bus_name": field("bus") }),
            field("from_events"),
        ),
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
    children.push(reader);
    let task = tokio::task::spawn_blocking(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            timeline.delivered(0, line.trim().parse::<u64>().ok().filter(|n| *n > 0));
        }
    });
    Ok(Consumer::new(destination, task, Made::Processes(children)))
}

/// Stop `children` (the consumer, then the server).
pub(super) fn stop(children: Vec<Child>) {
    for mut child in children.into_iter().rev() {
        let _ = child.kill();
        let _ = child.wait();
    }
}
