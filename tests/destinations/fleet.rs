//! A fleet of real processes on PostgreSQL delivering into one NATS JetStream stream: an API
//! process and two dispatchers; one dispatcher is killed outright mid-burst. Every message is
//! in the stream exactly once: what the killed one held comes back to the other, and a publish
//! it made whose acknowledgement it never recorded is de-duplicated by `Nats-Msg-Id`.

use std::collections::HashSet;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use serde_json::json;
use sluice_testkit::process::{Client, Process};

use super::support::{self, ADMIN, eventually};

const MESSAGES: usize = 300;

async fn in_stream(js: &jetstream::Context, name: &str) -> u64 {
    match js.get_stream(name).await {
        Ok(s) => s.get_info().await.map_or(0, |i| i.state.messages),
        Err(_) => 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_killed_mid_burst_leaves_every_message_in_the_stream_once() {
    let Some(db) = support::fresh_postgres().await else {
        return;
    };
    let Ok(client) = async_nats::connect("nats://127.0.0.1:4222").await else {
        assert!(
            !support::services::services_required(),
            "NATS is not running"
        );
        return;
    };
    let js = jetstream::new(client);
    let id = sluice::ids::new_id("s").replace('_', "");
    let name = format!("SLUICE_FLEET_{id}");
    let subject = format!("sluice.fleet.{id}");
    js.create_stream(stream::Config {
        name: name.clone(),
        subjects: vec![subject.clone()],
        ..Default::default()
    })
    .await
    .unwrap();

    let fleet = [
        "--database-url",
        &db,
        "--heartbeat-interval",
        "1s",
        "--total-timeout",
        "2s",
        "--lease-ttl",
        "8s",
    ];
    let api = Process::start(&[&fleet[..], &["--role", "api"]].concat()).await;
    let c = Client::new(&api.base);
    let (status, tenant) = c
        .post(ADMIN, "/v1/tenants", json!({ "name": "fleet" }))
        .await;
    assert_eq!(status, 201, "{tenant}");
    let token = tenant["token"].as_str().unwrap().to_owned();
    let (status, created) = c
        .post(
            &token,
            "/v1/endpoints",
            // Held to 100/s, so the burst lasts about three seconds: the kill lands in it.
            json!({ "destination": { "type": "nats", "url": "nats://127.0.0.1:4222",
                "subject": subject }, "rate_limit": { "per_second": 100, "burst": 10 } }),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let mut sent = HashSet::new();
    for i in 0..MESSAGES {
        let (status, m) = c
            .post(
                &token,
                "/v1/messages",
                json!({ "event_type": "order.created", "payload": { "i": i } }),
            )
            .await;
        assert_eq!(status, 202, "{m}");
        sent.insert(m["id"].as_str().unwrap().to_owned());
    }

    let dispatcher = [&fleet[..], &["--role", "dispatcher"]].concat();
    let survivor = Process::start(&dispatcher).await;
    let victim = Process::start(&dispatcher).await;
    assert!(
        eventually(Duration::from_secs(60), || async {
            in_stream(&js, &name).await >= 30
        })
        .await,
        "delivery did not start"
    );
    victim.kill();
    assert!(
        in_stream(&js, &name).await < MESSAGES as u64,
        "the burst was over before the kill"
    );
    assert!(
        eventually(Duration::from_secs(90), || async {
            in_stream(&js, &name).await >= MESSAGES as u64
        })
        .await,
        "{} of {MESSAGES} in the stream after the kill",
        in_stream(&js, &name).await
    );
    // Settled: nothing more arrives (no duplicate slips past the stream's de-duplication).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let st = js.get_stream(&name).await.unwrap();
    assert_eq!(st.get_info().await.unwrap().state.messages, MESSAGES as u64);
    let mut seen = HashSet::new();
    for seq in 1..=MESSAGES as u64 {
        let m = st.get_raw_message(seq).await.unwrap();
        let id = m.headers.get("Nats-Msg-Id").unwrap().as_str().to_owned();
        assert!(seen.insert(id.clone()), "{id} twice in the stream");
    }
    assert_eq!(seen, sent, "every message, once");
    drop(survivor);
    drop(api);
    js.delete_stream(&name).await.unwrap();
}
