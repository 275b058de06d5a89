//! A fleet of real processes on PostgreSQL delivering into one NATS JetStream stream: an API
//! process and two dispatchers; one dispatcher is killed outright mid-burst. Every message is
//! in the stream exactly once: what the killed one held comes back to the other, and a publish
//! it made whose acknowledgement it never recorded is de-duplicated by `Nats-Msg-Id`.

use std::collections::HashSet;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use serde_json::{Value, json};
use sluice_testkit::process::{Client, Process};

use super::support::{self, ADMIN, eventually};

/// A fleet of real processes on PostgreSQL for a kill test: an API process and a tenant of its
/// own; the dispatchers start once the burst is stored, so the kill lands in its delivery.
pub(super) struct Fleet {
    /// What every process of the fleet runs with: the store and the test's settings.
    args: Vec<String>,
    _api: Process,
    client: Client,
    token: String,
}

impl Fleet {
    /// An API process on `db` with `settings`, and a tenant.
    pub(super) async fn start(db: &str, settings: &[&str]) -> Fleet {
        let mut args = vec!["--database-url".to_owned(), db.to_owned()];
        args.extend(settings.iter().map(|s| (*s).to_owned()));
        let api = Process::start(&Self::role(&args, "api")).await;
        let client = Client::new(&api.base);
        let (status, tenant) = client
            .post(ADMIN, "/v1/tenants", json!({ "name": "fleet" }))
            .await;
        assert_eq!(status, 201, "{tenant}");
        Fleet {
            token: tenant["token"].as_str().unwrap().to_owned(),
            args,
            _api: api,
            client,
        }
    }

    fn role<'a>(args: &'a [String], role: &'a str) -> Vec<&'a str> {
        let mut out: Vec<&str> = args.iter().map(String::as_str).collect();
        out.extend(["--role", role]);
        out
    }

    /// The tenant's endpoint of `body`.
    pub(super) async fn endpoint(&self, body: Value) {
        let (status, created) = self.client.post(&self.token, "/v1/endpoints", body).await;
        assert_eq!(status, 201, "{created}");
    }

    /// Send `count` messages (`{"i": i}`): their ids, in the order they were accepted.
    pub(super) async fn send(&self, count: usize) -> Vec<String> {
        let mut sent = Vec::with_capacity(count);
        for i in 0..count {
            let (status, m) = self
                .client
                .post(
                    &self.token,
                    "/v1/messages",
                    json!({ "event_type": "order.created", "payload": { "i": i } }),
                )
                .await;
            assert_eq!(status, 202, "{m}");
            sent.push(m["id"].as_str().unwrap().to_owned());
        }
        sent
    }

    /// Two dispatcher processes: the one to survive and the one to kill.
    pub(super) async fn dispatchers(&self) -> (Process, Process) {
        let dispatcher = Self::role(&self.args, "dispatcher");
        let survivor = Process::start(&dispatcher).await;
        let victim = Process::start(&dispatcher).await;
        (survivor, victim)
    }
}

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

    let fleet = Fleet::start(
        &db,
        &[
            "--heartbeat-interval",
            "1s",
            "--total-timeout",
            "2s",
            "--lease-ttl",
            "8s",
        ],
    )
    .await;
    // Held to 100/s, so the burst lasts about three seconds: the kill lands in it.
    fleet
        .endpoint(
            json!({ "destination": { "type": "nats", "url": "nats://127.0.0.1:4222",
            "subject": subject }, "rate_limit": { "per_second": 100, "burst": 10 } }),
        )
        .await;
    let sent: HashSet<String> = fleet.send(MESSAGES).await.into_iter().collect();
    let (survivor, victim) = fleet.dispatchers().await;
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
    drop(fleet);
    js.delete_stream(&name).await.unwrap();
}
