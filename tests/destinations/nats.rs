//! NATS JetStream at 127.0.0.1:4222, as `.ci/run` starts it: each test makes its own stream.
//! A delivery is in the stream once, signed and verifiable, with `Nats-Msg-Id` = the message
//! id; a resend is de-duplicated by the stream and still counts as delivered; a subject no
//! stream captures is `broker_not_found`; nothing listening is `connection_refused`.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use serde_json::{Value, json};

use super::rabbitmq::{endpoint, first_attempt, retrying, verify};
use super::servers;
use super::support::{self, Sluice, eventually, test_settings};

const NATS: &str = "nats://127.0.0.1:4222";

/// JetStream with a fresh stream capturing `sluice.test.<id>.>`, or None (a loud skip).
async fn stream() -> Option<(jetstream::Context, String, String)> {
    let client = match async_nats::connect(NATS).await {
        Ok(c) => c,
        Err(e) => {
            assert!(
                !support::services::services_required(),
                "NATS is not running at 127.0.0.1:4222: {e}"
            );
            eprintln!("SKIPPED: NATS is not running at 127.0.0.1:4222: {e}");
            return None;
        }
    };
    let js = jetstream::new(client);
    let id = sluice::ids::new_id("s").replace('_', "");
    let name = format!("SLUICE_TEST_{id}");
    let prefix = format!("sluice.test.{id}");
    js.create_stream(stream::Config {
        name: name.clone(),
        subjects: vec![format!("{prefix}.>")],
        ..Default::default()
    })
    .await
    .expect("create the test stream (JetStream enabled: nats-server -js)");
    Some((js, name, prefix))
}

fn header(h: &async_nats::HeaderMap, name: &str) -> String {
    h.get(name)
        .map(|v| v.as_str().to_owned())
        .unwrap_or_else(|| panic!("no {name} header"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_is_in_the_stream_once_signed_and_a_resend_is_deduplicated() {
    a_delivery_is_in_the_stream_once_signed_and_a_resend_is_deduplicated_on(test_settings()).await;
}

/// The same on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_is_in_the_stream_once_signed_and_a_resend_is_deduplicated_on_postgres() {
    let Some(url) = super::support::fresh_postgres().await else {
        return;
    };
    a_delivery_is_in_the_stream_once_signed_and_a_resend_is_deduplicated_on(
        sluice::config::RawSettings {
            database_url: Some(url),
            ..test_settings()
        },
    )
    .await;
}

async fn a_delivery_is_in_the_stream_once_signed_and_a_resend_is_deduplicated_on(
    settings: sluice::config::RawSettings,
) {
    let Some((js, name, prefix)) = stream().await else {
        return;
    };
    let s = Sluice::start(settings).await;
    let (_, token) = s.tenant("acme").await;
    let subject = format!("{prefix}.orders");
    let (status, created) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({ "destination": { "type": "nats", "url": NATS, "subject": subject } }),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["destination"]["subject"], subject.as_str());
    let id = created["id"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();
    let message_id = s.send(&token, "order.created", json!({ "order": 7 })).await;
    let attempt = first_attempt(&s, &token, &id).await;
    assert_eq!(attempt["error_kind"], Value::Null, "{attempt}");

    let stream = js.get_stream(&name).await.unwrap();
    let got = stream.get_raw_message(1).await.unwrap();
    assert_eq!(got.subject.as_str(), subject);
    assert_eq!(header(&got.headers, "Nats-Msg-Id"), message_id);
    assert_eq!(header(&got.headers, "webhook-event-type"), "order.created");
    let body = String::from_utf8(got.payload.to_vec()).unwrap();
    let signed = json!({
        "webhook-id": header(&got.headers, "webhook-id"),
        "webhook-timestamp": header(&got.headers, "webhook-timestamp"),
        "webhook-signature": header(&got.headers, "webhook-signature"),
    });
    verify(&secret, &signed, &body);

    // A resend publishes again with the same Nats-Msg-Id: the stream keeps one, and the
    // duplicate ack is a delivered attempt.
    let delivery = attempt["delivery_id"].as_str().unwrap().to_owned();
    let (status, body) = s
        .post(
            &token,
            &format!("/v1/deliveries/{delivery}/resend"),
            json!({}),
        )
        .await;
    assert!(status < 300, "{status} {body}");
    let attempts = format!("/v1/endpoints/{id}/attempts");
    assert!(
        eventually(Duration::from_secs(20), || async {
            s.get(&token, &attempts).await.1["data"]
                .as_array()
                .is_some_and(|a| a.len() >= 2)
        })
        .await
    );
    let (_, log) = s.get(&token, &attempts).await;
    for a in log["data"].as_array().unwrap() {
        assert_eq!(a["error_kind"], Value::Null, "{a}");
    }
    assert!(log.to_string().contains("duplicate"), "{log}");
    let info = js
        .get_stream(&name)
        .await
        .unwrap()
        .get_info()
        .await
        .unwrap();
    assert_eq!(info.state.messages, 1, "de-duplicated by Nats-Msg-Id");
    js.delete_stream(&name).await.unwrap();
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_stream_and_nothing_listening_are_failed_attempts_of_their_kinds() {
    let Some((js, name, _prefix)) = stream().await else {
        return;
    };
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let mut ids = Vec::new();
    for (url, subject, kind) in [
        (NATS, "sluice.nostream.orders", "broker_not_found"),
        ("nats://127.0.0.1:1", "sluice.any", "connection_refused"),
    ] {
        let (status, created) = s
            .post(
                &token,
                "/v1/endpoints",
                json!({ "destination": { "type": "nats", "url": url, "subject": subject,
                    "credentials": { "token": "s3cret-token" } } }),
            )
            .await;
        assert_eq!(status, 201, "{created}");
        assert!(!created.to_string().contains("s3cret-token"));
        ids.push((created["id"].as_str().unwrap().to_owned(), kind));
    }
    s.send(&token, "order.created", json!({})).await;
    for (id, kind) in ids {
        let attempt = first_attempt(&s, &token, &id).await;
        assert_eq!(attempt["error_kind"], kind, "{attempt}");
        assert!(!attempt.to_string().contains("s3cret-token"));
    }
    js.delete_stream(&name).await.unwrap();
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_servers_max_payload_is_too_large() {
    let Some((js, name, prefix)) = stream().await else {
        return;
    };
    // NATS refuses more than its max_payload (1 MiB by default); sluice accepts 2 MiB here.
    let s = Sluice::start(sluice::config::RawSettings {
        max_payload_bytes: Some(2 * 1024 * 1024),
        ..test_settings()
    })
    .await;
    let (_, token) = s.tenant("acme").await;
    let (status, created) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({ "destination": { "type": "nats", "url": NATS, "subject": format!("{prefix}.big") } }),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    s.send(
        &token,
        "order.created",
        json!({ "blob": "x".repeat(1_200_000) }),
    )
    .await;
    let attempt = first_attempt(&s, &token, &id).await;
    assert_eq!(
        attempt["error_kind"], "too_large",
        "{}",
        attempt["error_kind"]
    );
    js.delete_stream(&name).await.unwrap();
    s.stop().await;
}

/// A stream at its limits (`discard: new`, one message) refuses the next publish: that is the
/// broker's backpressure (`broker_blocked`, which the governor backs off from), not a lost or
/// a misaddressed message, and once the stream has room again the retry delivers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_at_its_limits_is_backpressure_and_the_retry_delivers() {
    let Some((js, _, _)) = stream().await else {
        return;
    };
    let id = sluice::ids::new_id("s").replace('_', "");
    let name = format!("SLUICE_FULL_{id}");
    let subject = format!("sluice.full.{id}");
    js.create_stream(stream::Config {
        name: name.clone(),
        subjects: vec![subject.clone()],
        max_messages: 1,
        discard: stream::DiscardPolicy::New,
        ..Default::default()
    })
    .await
    .unwrap();
    let s = Sluice::start(retrying()).await;
    let (_, token) = s.tenant("acme").await;
    let id = endpoint(
        &s,
        &token,
        json!({ "type": "nats", "url": NATS, "subject": subject }),
    )
    .await;
    s.send(&token, "order.created", json!({ "n": 1 })).await;
    let first = first_attempt(&s, &token, &id).await;
    assert_eq!(first["error_kind"], Value::Null, "{first}");
    let second = s.send(&token, "order.created", json!({ "n": 2 })).await;

    let attempts = format!("/v1/endpoints/{id}/attempts");
    assert!(
        eventually(Duration::from_secs(20), || async {
            s.get(&token, &attempts).await.1["data"]
                .as_array()
                .is_some_and(|a| a.iter().any(|a| a["error_kind"] == "broker_blocked"))
        })
        .await,
        "the full stream's refusal is broker_blocked: {}",
        s.get(&token, &attempts).await.1
    );

    // Room again: the retry delivers the second message, once.
    js.get_stream(&name).await.unwrap().purge().await.unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async {
            let Ok(st) = js.get_stream(&name).await else {
                return false;
            };
            st.get_info().await.is_ok_and(|i| i.state.messages == 1)
        })
        .await,
        "the retry delivers once the stream has room"
    );
    let last = js
        .get_stream(&name)
        .await
        .unwrap()
        .get_last_raw_message_by_subject(&subject)
        .await
        .unwrap();
    assert_eq!(header(&last.headers, "Nats-Msg-Id"), second);
    js.delete_stream(&name).await.unwrap();
    s.stop().await;
}

/// A NATS server without JetStream answers no publish: that is the broker unavailable (its
/// 503, `broker_blocked`), not a subject no stream captures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_jetstream_is_backpressure_not_a_missing_stream() {
    let Some((_server, port, _log)) = servers::nats(&[]).await else {
        return;
    };
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let url = format!("nats://127.0.0.1:{port}");
    let id = endpoint(
        &s,
        &token,
        json!({ "type": "nats", "url": url, "subject": "sluice.nojs" }),
    )
    .await;
    s.send(&token, "order.created", json!({})).await;
    let attempt = first_attempt(&s, &token, &id).await;
    assert_eq!(attempt["error_kind"], "broker_blocked", "{attempt}");
    s.stop().await;
}

/// A server that wants a user and password: wrong ones are `broker_auth`, and neither the
/// password nor the token shows in the attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_broker_auth() {
    let Some((_server, port, _log)) =
        servers::nats(&["--user", "sluice", "--pass", "right-pass"]).await
    else {
        return;
    };
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let url = format!("nats://127.0.0.1:{port}");
    let id = endpoint(
        &s,
        &token,
        json!({ "type": "nats", "url": url, "subject": "sluice.auth",
            "credentials": { "username": "sluice", "password": "wrong-pass" } }),
    )
    .await;
    s.send(&token, "order.created", json!({})).await;
    let attempt = first_attempt(&s, &token, &id).await;
    assert_eq!(attempt["error_kind"], "broker_auth", "{attempt}");
    assert!(!attempt.to_string().contains("wrong-pass"), "{attempt}");
    s.stop().await;
}
