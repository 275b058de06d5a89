//! RabbitMQ blocking publishers (a memory alarm: `rabbitmqctl set_vm_memory_high_watermark 0`,
//! restored afterwards) beside a healthy HTTP endpoint: the HTTP endpoint keeps delivering at
//! once, the blocked destination's attempts fail as `broker_blocked` (a publish already sent when
//! the broker began blocking included: `connection.blocked` ends it, not its deadline), and once
//! the alarm clears its messages arrive, none lost.

use std::time::{Duration, Instant};

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use serde_json::json;

use super::rabbitmq::{BROKER, broker, queue, retrying, serial};
use super::support::{Sluice, eventually, receiver};

/// The memory alarm, cleared when dropped (also when the test fails).
struct Alarm;

impl Alarm {
    fn raise() -> Alarm {
        rabbitmqctl("0");
        Alarm
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        rabbitmqctl("0.4");
    }
}

fn rabbitmqctl(watermark: &str) {
    let out = std::process::Command::new("rabbitmqctl")
        .args(["set_vm_memory_high_watermark", watermark])
        .output()
        .expect("rabbitmqctl");
    assert!(
        out.status.success(),
        "rabbitmqctl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn in_queue(channel: &lapin::Channel, q: &str) -> u32 {
    channel
        .queue_declare(
            q.into(),
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_broker_holds_only_its_own_deliveries() {
    let _serial = serial().lock().await;
    let Some((_conn, channel)) = broker().await else {
        return;
    };
    let q = queue(&channel).await;
    let http = receiver::start(receiver::Behavior::Fast, true)
        .await
        .unwrap();
    let s = Sluice::start(retrying()).await;
    let (_, token) = s.tenant("acme").await;
    s.endpoint(&token, &http.url(), json!({})).await;
    let (status, body) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({
                "destination": { "type": "rabbitmq", "url": BROKER, "routing_key": q },
                // Far past the test's waits: a publish the broker stopped reading must end at
                // its `connection.blocked`, not at this deadline.
                "total_timeout_ms": 40_000,
            }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let rabbit = body["id"].as_str().unwrap().to_owned();

    // Warm: one message through both, so the broker's connection is open when it blocks.
    s.send(&token, "order.created", json!({ "n": 0 })).await;
    assert!(
        eventually(Duration::from_secs(20), || async {
            http.record.requests() >= 1
        })
        .await
    );
    assert!(
        eventually(Duration::from_secs(20), || async {
            in_queue(&channel, &q).await >= 1
        })
        .await
    );

    let alarm = Alarm::raise();
    let started = Instant::now();
    for n in 1..=5 {
        s.send(&token, "order.created", json!({ "n": n })).await;
    }
    assert!(
        eventually(Duration::from_secs(5), || async {
            http.record.requests() >= 6
        })
        .await,
        "the HTTP endpoint keeps delivering beside the blocked broker"
    );
    let http_took = started.elapsed();

    // Each of the five is attempted and fails as `broker_blocked`, the first (sent before the
    // broker said it blocks) included, long before its deadline; none is delivered.
    let attempts = format!("/v1/endpoints/{rabbit}/attempts");
    let failed = || async {
        let (_, log) = s.get(&token, &attempts).await;
        let mut deliveries = std::collections::HashSet::new();
        for a in log["data"].as_array().cloned().unwrap_or_default() {
            if a["error_kind"].is_null() {
                continue;
            }
            assert_eq!(a["error_kind"], "broker_blocked", "{a}");
            deliveries.insert(a["delivery_id"].as_str().unwrap_or_default().to_owned());
        }
        deliveries.len()
    };
    assert!(
        eventually(Duration::from_secs(20), || async { failed().await >= 5 }).await,
        "every delivery's attempt ends when the broker blocks: {} of 5",
        failed().await
    );
    assert_eq!(
        in_queue(&channel, &q).await,
        1,
        "nothing got in while blocked"
    );
    assert!(http_took < Duration::from_secs(5), "{http_took:?}");

    // The alarm clears: every message arrives, none lost.
    drop(alarm);
    assert!(
        eventually(Duration::from_secs(60), || async {
            in_queue(&channel, &q).await >= 6
        })
        .await,
        "all six arrive once the broker unblocks: {}",
        in_queue(&channel, &q).await
    );
    s.stop().await;
}
