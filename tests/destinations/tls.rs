//! Broker destinations over TLS, against real TLS listeners started here with a certificate for
//! `localhost` that a test CA made for this run: a `nats-server` whose `tls` block requires TLS,
//! a `redis-server` with a TLS port, and the shared RabbitMQ behind a TLS terminator in this
//! test. An endpoint trusting the CA (`tls_ca_bundle`) delivers each message once, signed and
//! verifiable; the same URL without the CA is `tls_certificate_unknown`, and the broker's
//! address instead of its name is `tls_certificate_name` (the certificate names only
//! `localhost`); neither publishes anything, although the trusted endpoint's connection to the
//! same broker is open by then.

#[path = "tls/servers.rs"]
mod servers;

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use lapin::options::{BasicGetOptions, QueueDeleteOptions};
use lapin::types::AMQPValue;
use serde_json::{Value, json};

use super::rabbitmq::{broker, queue, serial, verify};
use super::support::{self, Sluice, eventually, test_settings};
use servers::{Certificates, binary, redis_tls, start, terminator};

const WAIT: Duration = Duration::from_secs(20);

/// The endpoint's attempts, oldest first, once there are at least `n`.
async fn attempts(s: &Sluice, token: &str, id: &str, n: usize) -> Vec<Value> {
    let path = format!("/v1/endpoints/{id}/attempts");
    let count = || async {
        s.get(token, &path).await.1["data"]
            .as_array()
            .map_or(0, Vec::len)
    };
    assert!(
        eventually(WAIT, || async { count().await >= n }).await,
        "fewer than {n} attempts of {id} in {WAIT:?}"
    );
    let mut data = s.get(token, &path).await.1["data"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    data.reverse();
    data
}

/// A new endpoint delivering to `destination`, trusting `ca` when given: its id and secret.
async fn endpoint(
    s: &Sluice,
    token: &str,
    destination: Value,
    ca: Option<&str>,
) -> (String, String) {
    let mut body = json!({ "destination": destination });
    if let Some(ca) = ca {
        body["tls_ca_bundle"] = json!(ca);
    }
    let (status, created) = s.post(token, "/v1/endpoints", body).await;
    assert_eq!(status, 201, "{created}");
    let field = |f: &str| created[f].as_str().unwrap().to_owned();
    (field("id"), field("secret"))
}

/// What a scenario leaves for the broker's check: the trusted endpoint's secret and the ids of
/// the two messages it delivered, in order.
struct Delivered {
    s: Sluice,
    secret: String,
    messages: [String; 2],
}

/// The scenario every broker runs: an endpoint trusting the CA delivers a message; then the
/// same URL without the CA, and the broker's address with it, fail on the next message by their
/// kinds, while the trusted endpoint delivers it too.
async fn scenario(
    destination: impl Fn(&str) -> Value,
    by_name: &str,
    by_address: &str,
    ca: &str,
) -> Delivered {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let (trusted, secret) = endpoint(&s, &token, destination(by_name), Some(ca)).await;
    let first = s.send(&token, "order.created", json!({ "order": 1 })).await;
    let log = attempts(&s, &token, &trusted, 1).await;
    assert_eq!(log[0]["error_kind"], Value::Null, "{log:?}");

    // Made while the trusted endpoint's connection is open: none may borrow it.
    let (untrusted, _) = endpoint(&s, &token, destination(by_name), None).await;
    let (misnamed, _) = endpoint(&s, &token, destination(by_address), Some(ca)).await;
    let second = s.send(&token, "order.created", json!({ "order": 2 })).await;
    for (id, kind) in [
        (&untrusted, "tls_certificate_unknown"),
        (&misnamed, "tls_certificate_name"),
    ] {
        let log = attempts(&s, &token, id, 1).await;
        assert_eq!(log[0]["error_kind"], kind, "{log:?}");
    }
    let log = attempts(&s, &token, &trusted, 2).await;
    assert!(log.iter().all(|a| a["error_kind"].is_null()), "{log:?}");
    Delivered {
        s,
        secret,
        messages: [first, second],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_over_tls_delivers_with_the_endpoints_ca_and_verifies_the_hosts_name() {
    let Some(nats) = binary("nats-server") else {
        return;
    };
    let certs = Certificates::new();
    let port = support::free_port();
    let config = certs.dir.path().join("nats.conf");
    std::fs::write(
        &config,
        format!(
            "tls {{\n  cert_file: {:?}\n  key_file: {:?}\n}}\n",
            certs.path("server.pem"),
            certs.path("server.key")
        ),
    )
    .unwrap();
    let args = [
        "-a",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-js",
        "-sd",
        &certs.path("jetstream"),
        "-c",
        &config.display().to_string(),
    ]
    .map(String::from);
    let _server = start(&nats, &args, &certs.dir.path().join("nats.log"), port).await;

    // The test's own client goes over TLS too: the server accepts nothing else.
    let client = async_nats::ConnectOptions::new()
        .require_tls(true)
        .add_root_certificates(certs.dir.path().join("ca.pem"))
        .connect(format!("tls://localhost:{port}"))
        .await
        .expect("a TLS client of the test nats-server");
    let js = jetstream::new(client);
    js.create_stream(stream::Config {
        name: "SLUICE_TLS".into(),
        subjects: vec!["sluice.tls.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();

    let destination =
        |url: &str| json!({ "type": "nats", "url": url, "subject": "sluice.tls.orders" });
    let done = scenario(
        destination,
        &format!("tls://localhost:{port}"),
        &format!("tls://127.0.0.1:{port}"),
        &certs.ca.certificate,
    )
    .await;

    let stream = js.get_stream("SLUICE_TLS").await.unwrap();
    let info = stream.clone().get_info().await.unwrap();
    assert_eq!(
        info.state.messages, 2,
        "only the trusted endpoint's messages"
    );
    for (seq, id) in [1, 2].into_iter().zip(&done.messages) {
        let got = stream.get_raw_message(seq).await.unwrap();
        let header = |name: &str| got.headers.get(name).unwrap().as_str().to_owned();
        assert_eq!(&header("webhook-id"), id);
        let signed = json!({
            "webhook-id": header("webhook-id"),
            "webhook-timestamp": header("webhook-timestamp"),
            "webhook-signature": header("webhook-signature"),
        });
        verify(
            &done.secret,
            &signed,
            std::str::from_utf8(&got.payload).unwrap(),
        );
    }
    done.s.stop().await;
}

async fn orders(plain: u16) -> redis::aio::MultiplexedConnection {
    let mut conn = redis::Client::open(format!("redis://127.0.0.1:{plain}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg("orders")
        .arg("readers")
        .arg("$")
        .arg("MKSTREAM")
        .query_async(&mut conn)
        .await
        .unwrap();
    conn
}

type Entry = (String, Vec<(String, String)>);

async fn entries(conn: &mut redis::aio::MultiplexedConnection) -> Vec<Entry> {
    redis::cmd("XRANGE")
        .arg("orders")
        .arg("-")
        .arg("+")
        .query_async(conn)
        .await
        .unwrap()
}

fn field(entry: &Entry, name: &str) -> String {
    entry
        .1
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no {name} field"))
}

/// The entry's signature, checked by the reference verifier.
fn verify_entry(secret: &str, entry: &Entry) {
    let signed = json!({
        "webhook-id": field(entry, "webhook-id"),
        "webhook-timestamp": field(entry, "webhook-timestamp"),
        "webhook-signature": field(entry, "webhook-signature"),
    });
    verify(secret, &signed, &field(entry, "body"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_over_tls_delivers_with_the_endpoints_ca_and_verifies_the_hosts_name() {
    let certs = Certificates::new();
    let Some((_server, plain, port)) = redis_tls(&certs, false).await else {
        return;
    };
    let mut conn = orders(plain).await;

    let destination = |url: &str| json!({ "type": "redis", "url": url, "stream": "orders" });
    let done = scenario(
        destination,
        &format!("rediss://localhost:{port}/0"),
        &format!("rediss://127.0.0.1:{port}/0"),
        &certs.ca.certificate,
    )
    .await;

    let entries = entries(&mut conn).await;
    assert_eq!(
        entries.len(),
        2,
        "only the trusted endpoint's messages: {entries:?}"
    );
    for (entry, id) in entries.iter().zip(&done.messages) {
        assert_eq!(&field(entry, "webhook-id"), id);
        verify_entry(&done.secret, entry);
    }
    done.s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_asking_for_a_client_certificate_gets_the_endpoints() {
    let certs = Certificates::new();
    let Some((_server, plain, port)) = redis_tls(&certs, true).await else {
        return;
    };
    let mut conn = orders(plain).await;
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let client = certs.ca.client("sluice");
    let url = format!("rediss://localhost:{port}/0");
    let mut made = Vec::new();
    for identity in [Some(&client), None] {
        let mut body = json!({
            "destination": { "type": "redis", "url": url, "stream": "orders" },
            "tls_ca_bundle": certs.ca.certificate,
        });
        if let Some(identity) = identity {
            body["tls_client_certificate"] = json!(identity.certificate);
            body["tls_client_key"] = json!(identity.key);
        }
        let (status, created) = s.post(&token, "/v1/endpoints", body).await;
        assert_eq!(status, 201, "{created}");
        assert!(!created.to_string().contains(&client.key), "{created}");
        let field = |f: &str| created[f].as_str().unwrap().to_owned();
        made.push((field("id"), field("secret")));
    }
    let message = s.send(&token, "order.created", json!({ "order": 3 })).await;
    let with = attempts(&s, &token, &made[0].0, 1).await;
    assert_eq!(with[0]["error_kind"], Value::Null, "{with:?}");
    let without = attempts(&s, &token, &made[1].0, 1).await;
    assert_eq!(
        without[0]["error_kind"], "tls_client_certificate",
        "{without:?}"
    );

    let entries = entries(&mut conn).await;
    assert_eq!(
        entries.len(),
        1,
        "only the identified endpoint's: {entries:?}"
    );
    assert_eq!(field(&entries[0], "webhook-id"), message);
    verify_entry(&made[0].1, &entries[0]);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_over_tls_delivers_with_the_endpoints_ca_and_verifies_the_hosts_name() {
    let _one = serial().lock().await;
    let Some((_conn, channel)) = broker().await else {
        return;
    };
    let name = queue(&channel).await;
    let certs = Certificates::new();
    let tls = terminator(&certs.server).await;

    let destination = |url: &str| {
        json!({ "type": "rabbitmq", "url": url, "exchange": "", "routing_key": name,
            "credentials": { "username": "guest", "password": "guest" } })
    };
    let done = scenario(
        destination,
        &format!("amqps://localhost:{}/%2f", tls.port),
        &format!("amqps://127.0.0.1:{}/%2f", tls.port),
        &certs.ca.certificate,
    )
    .await;

    for id in &done.messages {
        let got = channel
            .basic_get(name.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
            .expect("a message in the queue");
        let props = &got.delivery.properties;
        let headers = props.headers().as_ref().unwrap();
        let header = |k: &str| match headers.inner().get(k) {
            Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
            other => panic!("{k}: not a long string: {other:?}"),
        };
        assert_eq!(&header("webhook-id"), id);
        let signed = json!({
            "webhook-id": header("webhook-id"),
            "webhook-timestamp": header("webhook-timestamp"),
            "webhook-signature": header("webhook-signature"),
        });
        verify(
            &done.secret,
            &signed,
            std::str::from_utf8(&got.delivery.data).unwrap(),
        );
    }
    let rest = channel
        .basic_get(name.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap();
    assert!(rest.is_none(), "only the trusted endpoint's messages");
    channel
        .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    done.s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tls_schemes_are_taken_and_each_only_for_its_broker() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    for destination in [
        json!({ "type": "rabbitmq", "url": "amqps://localhost/%2f", "routing_key": "q" }),
        json!({ "type": "nats", "url": "tls://localhost:4222", "subject": "orders" }),
        json!({ "type": "redis", "url": "rediss://localhost:6380/0", "stream": "orders" }),
    ] {
        let (status, body) = s
            .post(
                &token,
                "/v1/endpoints",
                json!({ "destination": destination }),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        assert_eq!(body["destination"]["url"], destination["url"], "{body}");
    }
    for destination in [
        json!({ "type": "rabbitmq", "url": "rediss://localhost/0", "routing_key": "q" }),
        json!({ "type": "nats", "url": "amqps://localhost/%2f", "subject": "orders" }),
        json!({ "type": "redis", "url": "tls://localhost:6380", "stream": "orders" }),
    ] {
        let (status, body) = s
            .post(
                &token,
                "/v1/endpoints",
                json!({ "destination": destination }),
            )
            .await;
        assert_eq!(status, 422, "{body}");
        assert_eq!(body["field"], "destination.url", "{body}");
    }
    s.stop().await;
}
