//! A sluice killed with SIGKILL while a producer keeps publishing loses nothing, on each
//! broker: what it had taken but not acknowledged is redelivered to the next process (RabbitMQ
//! at once, JetStream after the consumer's `ack_wait`, Redis as the restarted consumer's own
//! pending entries), and the idempotency key derived from the broker identity stores each
//! event once.

use std::collections::BTreeSet;
use std::time::Duration;

use lapin::Channel;
use redis::aio::MultiplexedConnection;
use serde_json::{Value, json};
use sluice_testkit::process::{Client, Process};

use super::{WAIT, event, eventually, nats, rabbitmq, receiver, redis_streams, unique};

/// Events published in all.
const EVENTS: usize = 240;

/// Where a producer publishes.
enum Producer {
    Rabbitmq(Channel, String),
    Nats(async_nats::jetstream::Context, String),
    Redis(MultiplexedConnection, String),
}

impl Producer {
    async fn publish(&mut self, body: Vec<u8>, i: usize) {
        match self {
            Producer::Rabbitmq(channel, queue) => {
                rabbitmq::publish(channel, queue, &body, &format!("m{i}")).await
            }
            Producer::Nats(js, subject) => nats::publish(js, subject, body).await,
            Producer::Redis(conn, stream) => redis_streams::publish(conn, stream, &body).await,
        }
    }
}

/// `sluice serve` on `data_dir`, ingesting from `url` when given, up once `/readyz` answers;
/// with a short lease, so what the killed process held leased is delivered by the next within
/// the test.
async fn serve(port: u16, data_dir: &str, url: Option<&str>) -> Process {
    let mut p = Process::serve_on(port)
        .args(&["--data-dir", data_dir])
        .args(&[
            "--read-timeout",
            "3s",
            "--total-timeout",
            "3s",
            "--lease-ttl",
            "9s",
        ]);
    if let Some(url) = url {
        p = p.args(&["--ingest-from", url]);
    }
    let p = p.spawn();
    assert!(p.answers("/readyz").await, "sluice did not start");
    p
}

/// A backlog of half the [`EVENTS`] waits in the broker; a sluice starts taking it while the
/// producer publishes the other half. Once it has delivered some, the test holds the database's
/// write lock, so what it takes next cannot commit (the store is down for it: kept, tried
/// again), and kills it with SIGKILL meanwhile: messages taken and not stored. Another starts on
/// the same store: every event is delivered, and stored once.
async fn killed_mid_stream_loses_nothing(url: String, mut producer: Producer) {
    let rx = receiver::start(receiver::Behavior::Fast, true)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap().to_owned();
    let port = sluice_testkit::free_port();
    // The tenant and its endpoint first, by a sluice that does not ingest.
    let setup = serve(port, &data_dir, None).await;
    let api = Client::new(&setup.base);
    let (tenant, token) = api.tenant("shop").await;
    api.endpoint(&token, &rx.url(), json!({})).await;
    setup.sigterm_and_wait();
    for i in 0..EVENTS / 2 {
        producer.publish(event(&tenant, i), i).await;
    }

    let first = serve(port, &data_dir, Some(&url)).await;
    let publishing = tokio::spawn(async move {
        for i in EVENTS / 2..EVENTS {
            producer.publish(event(&tenant, i), i).await;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    assert!(
        eventually(WAIT, || async { !rx.record.distinct_ids().is_empty() }).await,
        "nothing delivered before the kill"
    );
    let db = rusqlite::Connection::open(dir.path().join("sluice.db")).unwrap();
    db.busy_timeout(Duration::from_secs(30)).unwrap();
    db.execute_batch("BEGIN IMMEDIATE").unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    first.kill();
    db.execute_batch("ROLLBACK").unwrap();
    drop(db);
    let at_kill = rx.record.distinct_ids().len();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = serve(port, &data_dir, Some(&url)).await;
    publishing.await.unwrap();
    assert!(
        at_kill < EVENTS,
        "everything was delivered before the kill: the test proves nothing"
    );
    let payloads = || {
        rx.record
            .received()
            .iter()
            .map(|r| {
                serde_json::from_slice::<Value>(&r.body).unwrap()["i"]
                    .as_u64()
                    .unwrap()
            })
            .collect::<BTreeSet<u64>>()
    };
    let all = eventually(WAIT, || async { payloads().len() == EVENTS }).await;
    let (status, page, _) = api.get("/v1/messages?limit=500", Some(&token)).await;
    second.kill();
    assert!(all, "lost: {} of {EVENTS} arrived", payloads().len());
    assert_eq!(status, 200, "{page}");
    assert_eq!(
        page["data"].as_array().unwrap().len(),
        EVENTS,
        "each event stored once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_a_sluice_killed_mid_stream_loses_nothing() {
    let Some((_conn, channel)) = rabbitmq::broker().await else {
        return;
    };
    let (queue, _) = rabbitmq::queue_with_dead_letters(&channel).await;
    let url = format!("{}?queue={queue}", rabbitmq::BROKER);
    killed_mid_stream_loses_nothing(url, Producer::Rabbitmq(channel, queue)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_a_sluice_killed_mid_stream_loses_nothing() {
    let Some((js, stream, subject)) = nats::stream().await else {
        return;
    };
    // Made beforehand with a short ack_wait, as an operator may: sluice uses it as it is.
    nats::durable(&js, &stream, "sluice", Duration::from_secs(2)).await;
    let url = format!("{}?stream={stream}", nats::NATS);
    killed_mid_stream_loses_nothing(url, Producer::Nats(js, subject)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_sluice_killed_mid_stream_loses_nothing() {
    let Some(conn) = redis_streams::redis().await else {
        return;
    };
    let stream = unique("sluice-ingest-");
    let url = format!("{}?stream={stream}", redis_streams::REDIS);
    killed_mid_stream_loses_nothing(url, Producer::Redis(conn, stream)).await;
}
