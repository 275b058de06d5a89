//! An emulator's own ceiling (`--cloud emulators`): the same calls as sluice's, as many messages
//! as the burst, sent to it by a client that is not sluice once the burst is over and its
//! consumer stopped (moto: boto3 from [`MOTO_THREADS`] threads, `tests/aws_moto.py ceiling`;
//! Pub/Sub: REST publishes from [`PUBSUB_PUBLISHERS`] tasks here), and the emulator process's
//! CPU over the burst and over that run, from `/proc/<pid>/stat`: a reader sees whether it was
//! saturated.

use std::time::{Duration, Instant};

use anyhow::Context;
use base64::Engine;
use serde_json::{Value, json};

use super::cloud::{Emulator, SCRIPT, SendTo, python};
use crate::sys;

/// boto3 threads sending to moto, one client each.
pub(super) const MOTO_THREADS: usize = 8;
/// Tasks publishing to the Pub/Sub emulator at once.
pub(super) const PUBSUB_PUBLISHERS: usize = 16;

/// What the emulator took from a client that is not sluice.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ceiling {
    /// Calls it accepted per second.
    pub per_s: f64,
    /// Calls it refused (or that failed).
    pub refused: u64,
    /// The emulator's CPU over the run, cores.
    pub cpu_cores: Option<f64>,
}

/// The emulator's CPU seconds so far.
pub(super) fn cpu_s(emulator: &Emulator) -> Option<f64> {
    sys::cpu_s_of(&emulator.pid())
}

/// Send `messages` to `emulator` without sluice and measure what it takes.
pub(super) async fn measure(emulator: &Emulator, messages: u64) -> anyhow::Result<Ceiling> {
    let cpu0 = cpu_s(emulator);
    let (accepted, refused, seconds) = match &emulator.to {
        SendTo::Moto {
            base,
            key,
            secret,
            kind,
            target,
        } => {
            let out = tokio::process::Command::new(python())
                .arg(SCRIPT)
                .args(["ceiling", base, key, secret, kind, target])
                .arg(messages.to_string())
                .arg(MOTO_THREADS.to_string())
                .output()
                .await
                .context("tests/aws_moto.py ceiling")?;
            anyhow::ensure!(
                out.status.success(),
                "tests/aws_moto.py ceiling: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let v: Value = serde_json::from_slice(&out.stdout)
                .context("tests/aws_moto.py ceiling: not JSON")?;
            (
                v["accepted"].as_u64().unwrap_or(0),
                v["refused"].as_u64().unwrap_or(0),
                v["seconds"].as_f64().unwrap_or(0.0),
            )
        }
        SendTo::PubSub { publish_url } => publish(publish_url, messages).await,
    };
    // moto's client spends its start-up importing boto3 while moto idles: the CPU over the
    // whole command is the CPU over its sending, divided by the sending's own time.
    let cpu_cores = cpu_s(emulator)
        .zip(cpu0)
        .filter(|_| seconds > 0.0)
        .map(|(b, a)| (b - a) / seconds);
    Ok(Ceiling {
        per_s: if seconds > 0.0 {
            accepted as f64 / seconds
        } else {
            0.0
        },
        refused,
        cpu_cores,
    })
}

/// `messages` REST publishes of one message each (shaped like sluice's: base64 data, the
/// Standard Webhooks attributes) from [`PUBSUB_PUBLISHERS`] tasks: (accepted, refused, seconds).
async fn publish(url: &str, messages: u64) -> (u64, u64, f64) {
    let http = reqwest::Client::new();
    let next = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..PUBSUB_PUBLISHERS)
        .map(|_| {
            let (http, url, next) = (http.clone(), url.to_owned(), next.clone());
            tokio::spawn(async move {
                let (mut accepted, mut refused) = (0u64, 0u64);
                loop {
                    let seq = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if seq >= messages {
                        return (accepted, refused);
                    }
                    let ok = http
                        .post(&url)
                        .header("content-type", "application/json")
                        .timeout(Duration::from_secs(30))
                        .body(body(seq).to_string())
                        .send()
                        .await
                        .is_ok_and(|r| r.status().is_success());
                    if ok {
                        accepted += 1;
                    } else {
                        refused += 1;
                    }
                }
            })
        })
        .collect();
    let (mut accepted, mut refused) = (0, 0);
    for task in tasks {
        let (a, r) = task.await.unwrap_or((0, 0));
        accepted += a;
        refused += r;
    }
    (accepted, refused, started.elapsed().as_secs_f64())
}

/// One publish request's body, as sluice sends it.
fn body(seq: u64) -> Value {
    let data = base64::engine::general_purpose::STANDARD
        .encode(format!(r#"{{"sent_at_us":0,"seq":{seq}}}"#));
    json!({
        "messages": [{
            "data": data,
            "attributes": {
                "webhook-id": format!("msg_ceiling_{seq}"),
                "webhook-timestamp": "1700000000",
                "webhook-signature": "v1,c2lnbmF0dXJlLW9mLXRoZS1jZWlsaW5nLXJ1bg==",
                "webhook-event-type": "e.0",
            },
        }]
    })
}
