//! RabbitMQ blocking publishers (a memory alarm: `rabbitmqctl set_vm_memory_high_watermark 0`,
//! restored afterwards) beside a healthy HTTP endpoint: the HTTP endpoint keeps delivering at
//! once, the blocked destination's attempts fail within their deadline (`broker_blocked`, or
//! `timeout_total` for a publish the broker stopped reading), and once the alarm clears its
//! messages arrive, none lost.

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
                "total_timeout_ms": 2000,
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

    // The blocked destination's attempts fail, each within its deadline, none delivered.
    let attempts = format!("/v1/endpoints/{rabbit}/attempts");
    assert!(
        eventually(Duration::from_secs(20), || async {
            s.get(&token, &attempts).await.1["data"]
                .as_array()
                .is_some_and(|a| a.iter().any(|a| !a["error_kind"].is_null()))
        })
        .await,
        "a failed attempt is recorded"
    );
    let (_, log) = s.get(&token, &attempts).await;
    for a in log["data"].as_array().unwrap() {
        let kind = &a["error_kind"];
        if kind.is_null() {
            continue;
        }
        assert!(kind == "broker_blocked" || kind == "timeout_total", "{a}");
        assert!(a["duration_ms"].as_u64().unwrap_or(0) <= 2_500, "{a}");
    }
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
