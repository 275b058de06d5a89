//! A source that is not there yet, or goes away, is waited for: sluice tries again with
//! backoff and takes what is published once it is back, the other sources unaffected.

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use sluice_testkit::redis_server::RedisServer;

use super::{Ingesting, event, rabbitmq, redis_streams, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_declared_after_the_start_is_consumed_once_it_exists() {
    let Some((_conn, channel)) = rabbitmq::broker().await else {
        return;
    };
    let queue = unique("sluice-ingest-late-");
    let s = Ingesting::start(&[format!("{}?queue={queue}", rabbitmq::BROKER)]).await;
    // Consuming a queue that does not exist fails, a few times, before it is declared.
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    for i in 0..5 {
        rabbitmq::publish(&channel, &queue, &event(&s.tenant, i), &format!("m{i}")).await;
    }
    assert!(s.delivered(5).await, "nothing taken from the late queue");
    assert_eq!(s.verified(), (0..5).collect());
    s.sluice.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_down_at_the_start_and_killed_later_is_read_again_when_back() {
    let Some(mut server) = RedisServer::not_started() else {
        return;
    };
    let stream = unique("sluice-ingest-");
    let s = Ingesting::start(&[format!("{}/0?stream={stream}", server.url())]).await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    server.restart().await.unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    for i in 0..5 {
        redis_streams::publish(&mut conn, &stream, &event(&s.tenant, i)).await;
    }
    assert!(s.delivered(5).await, "nothing taken once Redis was up");

    // Killed and started again empty: the stream and its group are made again.
    server.restart().await.unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    for i in 5..10 {
        redis_streams::publish(&mut conn, &stream, &event(&s.tenant, i)).await;
    }
    assert!(s.delivered(10).await, "nothing taken after Redis came back");
    assert_eq!(s.verified(), (0..10).collect());
    s.sluice.stop().await;
}
