//! A fleet of real processes on PostgreSQL delivering a FIFO endpoint into an SQS FIFO queue
//! (moto): an API process and two dispatchers; one dispatcher is killed outright mid-burst.
//! The queue then holds every message once, in the order they were accepted: what the killed
//! one held comes back to the other after its lease, one at a time as FIFO requires, and a
//! message it sent whose acceptance it never recorded is sent again with the same
//! `MessageDeduplicationId`, which SQS drops.

use std::time::Duration;

use super::aws::Moto;
use super::fleet::Fleet;
use super::support::{self, eventually};
use serde_json::{Value, json};

const MESSAGES: usize = 200;

/// What a failure shows: the deliveries by state, attempts and last error, the attempts by
/// outcome, and the endpoint's events (breaker transitions).
async fn diagnosis(db: &str) -> String {
    let (client, conn) = tokio_postgres::connect(db, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut lines = Vec::new();
    for (what, sql) in [
        (
            "deliveries (state, attempts, expiries, last error, count, latest due in s)",
            "SELECT concat_ws(' | ', state, attempts, expiries, coalesce(last_error, '-'), count(*), \
             (max(visible_at_ms) - (extract(epoch FROM now()) * 1000)::bigint) / 1000) \
             FROM sluice.deliveries GROUP BY state, attempts, expiries, last_error",
        ),
        (
            "attempts (status, kind, count)",
            "SELECT concat_ws(' | ', coalesce(status, 0), coalesce(error_kind, '-'), count(*)) FROM sluice.attempts \
             GROUP BY status, error_kind",
        ),
        (
            "endpoint events",
            "SELECT concat_ws(' | ', at_ms, kind, detail) FROM sluice.endpoint_events ORDER BY id",
        ),
    ] {
        lines.push(format!("{what}:"));
        for row in client.query(sql, &[]).await.unwrap() {
            lines.push(format!("  {}", row.get::<_, String>(0)));
        }
    }
    lines.join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_killed_mid_burst_leaves_a_fifo_queue_in_order_without_duplicates() {
    let Some(db) = support::fresh_postgres().await else {
        return;
    };
    let Some(moto) = Moto::start().await else {
        return;
    };
    let fifo = moto.made("fifo");
    let fleet = Fleet::start(
        &db,
        &[
            "--heartbeat-interval",
            "1s",
            // moto is one Python process: under a loaded CI machine a call can take seconds. A
            // timed-out send that did land is resent with the same deduplication id (dropped
            // by the queue), and a failed head is retried soon, since a FIFO endpoint waits
            // behind it.
            "--total-timeout",
            "10s",
            "--lease-ttl",
            "30s",
            "--retry-schedule",
            "1s,1s,1s,1s,1s,1s,1s,1s,1s,1s",
        ],
    )
    .await;
    // Held to 40/s, so the burst lasts about five seconds: the kill lands in it.
    fleet
        .endpoint(json!({
            "destination": {
                "type": "sqs", "queue_url": fifo, "region": "us-east-1",
                "endpoint_url": moto.base, "credentials": moto.credentials(),
            },
            "ordering": "fifo",
            "rate_limit": { "per_second": 40, "burst": 1 },
        }))
        .await;
    let sent = fleet.send(MESSAGES).await;
    let (survivor, victim) = fleet.dispatchers().await;
    assert!(
        eventually(Duration::from_secs(60), || async {
            moto.count(&fifo) >= 20
        })
        .await,
        "delivery did not start"
    );
    victim.kill();
    assert!(
        moto.count(&fifo) < MESSAGES,
        "the burst was over before the kill"
    );
    let arrived = eventually(Duration::from_secs(120), || async {
        moto.count(&fifo) >= MESSAGES
    })
    .await;
    assert!(
        arrived,
        "{} of {MESSAGES} in the queue after the kill\n{}",
        moto.count(&fifo),
        diagnosis(&db).await
    );
    // Settled: nothing more arrives (a resend inside the window is dropped by SQS).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let got = moto.drain(&fifo);
    let ids: Vec<&str> = got
        .iter()
        .map(|m| m["webhook-id"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(ids.len(), MESSAGES, "once each: {} in the queue", ids.len());
    assert_eq!(ids, sent, "every message, once, in the order accepted");
    let order: Vec<u64> = got
        .iter()
        .map(|m| {
            serde_json::from_str::<Value>(m["body"].as_str().unwrap()).unwrap()["i"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    drop(survivor);
    drop(fleet);
}
