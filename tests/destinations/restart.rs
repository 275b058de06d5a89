//! RabbitMQ stopped and started mid-stream (`rabbitmqctl stop_app`, `start_app`) under a FIFO
//! endpoint: attempts while it is down fail (`connection_refused`, `connection_reset`) and are
//! retried, the connection is made again, and every message arrives in acceptance order:
//! nothing lost, duplicates only of attempts that were never acknowledged.

use std::time::Duration;

use lapin::options::{BasicGetOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use serde_json::json;

use super::rabbitmq::{BROKER, broker, queue, serial};
use super::support::{Sluice, eventually, test_settings};

fn rabbitmqctl(what: &str) {
    let out = std::process::Command::new("rabbitmqctl")
        .arg(what)
        .output()
        .expect("rabbitmqctl");
    assert!(
        out.status.success(),
        "rabbitmqctl {what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts the broker's application again when dropped (also when the test fails).
struct Stopped;

impl Drop for Stopped {
    fn drop(&mut self) {
        rabbitmqctl("start_app");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restart_loses_nothing_and_keeps_fifo_order() {
    a_broker_restart_loses_nothing_and_keeps_fifo_order_on(test_settings()).await;
}

/// The same on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restart_loses_nothing_and_keeps_fifo_order_on_postgres() {
    let Some(url) = super::support::fresh_postgres().await else {
        return;
    };
    a_broker_restart_loses_nothing_and_keeps_fifo_order_on(sluice::config::RawSettings {
        database_url: Some(url),
        ..test_settings()
    })
    .await;
}

async fn a_broker_restart_loses_nothing_and_keeps_fifo_order_on(
    settings: sluice::config::RawSettings,
) {
    let _serial = serial().lock().await;
    let Some((_conn, channel)) = broker().await else {
        return;
    };
    let q = queue(&channel).await;
    drop(channel);
    let s = Sluice::start(sluice::config::RawSettings {
        retry_schedule: Some("1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s".into()),
        ..settings
    })
    .await;
    let (_, token) = s.tenant("acme").await;
    let (status, body) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({
                "destination": { "type": "rabbitmq", "url": BROKER, "routing_key": q },
                "ordering": "fifo",
            }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    for n in 0..5 {
        s.send(&token, "order.created", json!({ "n": n })).await;
    }
    let stopped = Stopped;
    rabbitmqctl("stop_app");
    for n in 5..10 {
        s.send(&token, "order.created", json!({ "n": n })).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(stopped);

    let (_conn, channel) = broker().await.expect("RabbitMQ is back");
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
    assert!(
        eventually(Duration::from_secs(60), || async { count().await >= 10 }).await,
        "all ten arrive after the restart: {}",
        count().await
    );
    // Attempts failed while it was down, and only those can have been published twice.
    let (_, log) = s
        .get(&token, &format!("/v1/endpoints/{id}/attempts?limit=100"))
        .await;
    let failed = log["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| !a["error_kind"].is_null())
        .count() as u32;
    assert!(failed >= 1, "{log}");
    assert!(
        count().await <= 10 + failed,
        "{} for {failed} failures",
        count().await
    );

    // In acceptance order (a repeat of an unacknowledged attempt is skipped).
    let mut seen = Vec::new();
    while let Some(m) = channel
        .basic_get(q.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
    {
        let body: serde_json::Value = serde_json::from_slice(&m.delivery.data).unwrap();
        let n = body["n"].as_u64().unwrap();
        if !seen.contains(&n) {
            seen.push(n);
        }
    }
    assert_eq!(seen, (0..10).collect::<Vec<_>>(), "FIFO across the restart");
    s.stop().await;
}
