//! `sluice receive --from <broker>`: the README's round trip through each broker. A broker
//! destination publishes, `sluice receive` consumes as the customer's consumer would, verifies
//! the signature (`v1` with the secret, `v1a` with the public key) and acknowledges; a forged
//! message is printed as refused.

use std::time::Duration;

use serde_json::json;
use sluice_testkit::process::Process;

use super::rabbitmq::{broker, serial};
use super::support::{self, Sluice, eventually, test_settings};

/// `sluice receive` with `args`, once it says it is reading.
async fn receiving(args: &[&str]) -> Process {
    let rx = Process::command("receive").args(args).spawn();
    assert!(
        eventually(Duration::from_secs(20), || async {
            rx.stdout_so_far().contains("receiving from")
        })
        .await,
        "sluice receive did not start: {}",
        rx.stderr_so_far()
    );
    rx
}

/// Send one message and wait for the receiver's line about it.
async fn round_trip(s: &Sluice, token: &str, rx: &Process) -> String {
    let message = s.send(token, "order.created", json!({ "order": 42 })).await;
    let line = format!("{message} signature verified");
    assert!(
        eventually(Duration::from_secs(30), || async {
            rx.stdout_so_far().contains(&line)
        })
        .await,
        "no {line:?} in {:?} ({:?})",
        rx.stdout_so_far(),
        rx.stderr_so_far()
    );
    message
}

/// Create an endpoint from `body`: what the API answered (its id, secret or public key).
async fn endpoint(s: &Sluice, token: &str, body: serde_json::Value) -> serde_json::Value {
    let (status, created) = s.post(token, "/v1/endpoints", body).await;
    assert_eq!(status, 201, "{created}");
    created
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_round_trip_verifies_and_acknowledges() {
    let _serial = serial().lock().await;
    let Some((_conn, channel)) = broker().await else {
        return;
    };
    let queue = format!("sluice-receive-{}", sluice::ids::new_id("q"));
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let created = endpoint(
        &s,
        &token,
        json!({ "destination": { "type": "rabbitmq", "url": "amqp://127.0.0.1:5672/%2f",
            "routing_key": queue,
            "credentials": { "username": "guest", "password": "guest" } } }),
    )
    .await;
    let secret = created["secret"].as_str().unwrap();
    let rx = receiving(&[
        "--from",
        "amqp://guest:guest@127.0.0.1:5672/%2f",
        "--queue",
        &queue,
        "--secret",
        secret,
    ])
    .await;
    round_trip(&s, &token, &rx).await;
    rx.kill();
    // Acknowledged: nothing is left in the queue.
    let left = channel
        .queue_declare(
            queue.as_str().into(),
            lapin::options::QueueDeclareOptions {
                passive: true,
                durable: true,
                ..Default::default()
            },
            lapin::types::FieldTable::default(),
        )
        .await
        .unwrap()
        .message_count();
    assert_eq!(left, 0, "the receiver acknowledged what verified");
    channel
        .queue_delete(queue.as_str().into(), Default::default())
        .await
        .unwrap();
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_round_trip_verifies_v1a_with_the_public_key() {
    let Ok(client) = async_nats::connect("nats://127.0.0.1:4222").await else {
        assert!(
            !support::services::services_required(),
            "NATS is not running"
        );
        return;
    };
    let js = async_nats::jetstream::new(client);
    let subject = format!(
        "sluice.receive.{}",
        sluice::ids::new_id("s").replace('_', "")
    );
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let created = endpoint(
        &s,
        &token,
        json!({ "destination": { "type": "nats", "url": "nats://127.0.0.1:4222",
            "subject": subject }, "signature_scheme": "v1a" }),
    )
    .await;
    let public = created["public_key"].as_str().unwrap();
    let rx = receiving(&[
        "--from",
        "nats://127.0.0.1:4222",
        "--subject",
        &subject,
        "--public-key",
        public,
    ])
    .await;
    round_trip(&s, &token, &rx).await;
    rx.kill();
    let stream = js.stream_by_subject(subject.as_str()).await.unwrap();
    js.delete_stream(&stream).await.unwrap();
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_round_trip_verifies_and_a_forged_entry_is_refused() {
    let Some(url) = support::redis_url() else {
        return;
    };
    let stream = format!("sluice-receive-{}", sluice::ids::new_id("st"));
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let created = endpoint(
        &s,
        &token,
        json!({ "destination": { "type": "redis", "url": "redis://127.0.0.1:6379/0",
            "stream": stream } }),
    )
    .await;
    let secret = created["secret"].as_str().unwrap();
    let rx = receiving(&["--from", &url, "--stream", &stream, "--secret", secret]).await;
    round_trip(&s, &token, &rx).await;

    // Someone else writes to the stream: the receiver says it does not verify.
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let now = (sluice::clock::now_ms() / 1000).to_string();
    let _: String = redis::cmd("XADD")
        .arg(&stream)
        .arg("*")
        .arg("webhook-id")
        .arg("msg_forged")
        .arg("webhook-timestamp")
        .arg(&now)
        .arg("webhook-signature")
        .arg("v1,Zm9yZ2Vk")
        .arg("body")
        .arg(r#"{"order":666}"#)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || async {
            rx.stdout_so_far()
                .contains("msg_forged REFUSED: SIGNATURE INVALID")
        })
        .await,
        "{}",
        rx.stdout_so_far()
    );
    rx.kill();
    let _: () = redis::cmd("DEL")
        .arg(&stream)
        .query_async(&mut conn)
        .await
        .unwrap();
    s.stop().await;
}
