//! HTTPS the way customers run it, against real TLS receivers on loopback whose certificates a
//! test CA made for this run: private CAs (per endpoint and process-wide), truthful TLS
//! failures in the attempt log, the evidence and /metrics, keep-alive, and mTLS with rotation.

use sluice_testkit as support;

#[path = "tls/bundles.rs"]
mod bundles;

use std::time::Duration;

use serde_json::{Value, json};
use sluice_testkit::receiver::{self, Behavior, Options, Receiver};
use sluice_testkit::tls::{TestCa, Validity, server_config};
use support::{ADMIN, Sluice, eventually, test_settings};

const WAIT: Duration = Duration::from_secs(20);

/// An HTTPS receiver answering 200, with a certificate of `ca` for `names`.
async fn https(ca: &TestCa, names: &[&str], validity: Validity, clients_of: &[&str]) -> Receiver {
    let server = ca.server(names, validity);
    let options = Options {
        tls: Some(server_config(&server, clients_of)),
        keep: true,
        ..Options::default()
    };
    receiver::start_with(Behavior::Fast, options).await.unwrap()
}

/// The endpoint's attempts, oldest first.
async fn attempts(s: &Sluice, token: &str, endpoint: &str) -> Vec<Value> {
    let (status, body) = s
        .get(token, &format!("/v1/endpoints/{endpoint}/attempts"))
        .await;
    assert_eq!(status, 200, "{body}");
    let mut data = body["data"].as_array().cloned().unwrap_or_default();
    data.reverse();
    data
}

/// Wait for the endpoint's first failed attempt and return its error kind.
async fn first_error(s: &Sluice, token: &str, endpoint: &str) -> String {
    let until = std::time::Instant::now() + WAIT;
    loop {
        let log = attempts(s, token, endpoint).await;
        if let Some(kind) = log.first().and_then(|a| a["error_kind"].as_str()) {
            return kind.to_owned();
        }
        assert!(
            std::time::Instant::now() < until,
            "no failed attempt recorded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn metrics(s: &Sluice) -> String {
    let r = s
        .http
        .get(format!("{}/metrics", s.base))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    r.text().await.unwrap()
}

/// The value of the first sample line of `name` with `label`.
fn sample(scrape: &str, name: &str, label: &str) -> f64 {
    scrape
        .lines()
        .find(|l| l.starts_with(name) && l.contains(label))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} {label} in the scrape"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_ca_bundle_lets_https_through_on_one_kept_alive_connection() {
    let s = Sluice::start(test_settings()).await;
    let ca = TestCa::new("tenant CA");
    let rx = https(&ca, &["127.0.0.1"], Validity::Current, &[]).await;
    let (_, token) = s.tenant("acme").await;
    let (id, _) = s
        .endpoint(
            &token,
            &rx.url(),
            json!({ "tls_ca_bundle": ca.certificate }),
        )
        .await;
    // One after another: each delivery goes over the connection the first one opened. The next
    // is sent once the previous attempt is recorded, which is after its response was read and
    // the connection went back to the pool (the receiver counts a request when it arrives,
    // before it answers, so waiting on that count would race the pool).
    for n in 1..=3usize {
        s.send(&token, "order.created", json!({ "n": n })).await;
        assert!(
            eventually(WAIT, || async {
                attempts(&s, &token, &id).await.len() >= n
            })
            .await
        );
    }
    assert_eq!(rx.record.requests(), 3);
    assert_eq!(
        rx.record.handshakes(),
        1,
        "keep-alive reuses the TLS connection"
    );
    let (_, endpoint) = s.get(&token, &format!("/v1/endpoints/{id}")).await;
    assert_eq!(endpoint["tls_ca_bundle"], ca.certificate.as_str());
    // The handshake is a phase of its own, observed once: for the attempt that opened it.
    let scrape = metrics(&s).await;
    assert!(
        eventually(WAIT, || async {
            sample(
                &metrics(&s).await,
                "webhook_phase_seconds_count",
                "phase=\"http\"",
            ) >= 3.0
        })
        .await
    );
    assert_eq!(
        sample(&scrape, "webhook_phase_seconds_count", "phase=\"tls\""),
        1.0
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_ca_file_is_trusted_for_every_endpoint() {
    let ca = TestCa::new("corporate CA");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("extra-ca.pem");
    std::fs::write(&file, &ca.certificate).unwrap();
    let mut raw = test_settings();
    raw.egress.ca_file = Some(file);
    let s = Sluice::start(raw).await;
    let rx = https(&ca, &["127.0.0.1"], Validity::Current, &[]).await;
    let (_, token) = s.tenant("acme").await;
    s.endpoint(&token, &rx.url(), json!({})).await;
    s.send(&token, "order.created", json!({})).await;
    assert!(eventually(WAIT, || async { rx.record.requests() >= 1 }).await);
    s.stop().await;
}

/// Each certificate problem is named as what it is, in the attempt log, the evidence and
/// /metrics; none of them is taken for a refused connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_failures_are_told_apart() {
    let s = Sluice::start(test_settings()).await;
    let ca = TestCa::new("tenant CA");
    let (_, token) = s.tenant("acme").await;
    let cases = [
        (
            https(&ca, &["127.0.0.1"], Validity::Current, &[]).await,
            json!({}),
            "tls_certificate_unknown",
            "presented a TLS certificate no trusted CA signed",
        ),
        (
            https(&ca, &["127.0.0.1"], Validity::Expired, &[]).await,
            json!({ "tls_ca_bundle": ca.certificate }),
            "tls_certificate_expired",
            "presented an expired (or not yet valid) TLS certificate",
        ),
        (
            https(&ca, &["hooks.example.com"], Validity::Current, &[]).await,
            json!({ "tls_ca_bundle": ca.certificate }),
            "tls_certificate_name",
            "presented a TLS certificate for another host name",
        ),
    ];
    for (rx, extra, kind, words) in &cases {
        let (id, _) = s.endpoint(&token, &rx.url(), extra.clone()).await;
        s.send(&token, &format!("probe.{kind}"), json!({})).await;
        assert_eq!(first_error(&s, &token, &id).await, *kind);
        assert_eq!(
            rx.record.requests(),
            0,
            "nothing was sent over a failed handshake"
        );
        let (_, status) = s.get(&token, &format!("/v1/endpoints/{id}/status")).await;
        let sentence = status["sentence"].as_str().unwrap_or_default();
        assert!(sentence.contains(words), "{kind}: {sentence}");
        assert!(!sentence.contains("refused the connection"), "{sentence}");
        let scrape = metrics(&s).await;
        let label = format!("kind=\"{kind}\"");
        assert!(sample(&scrape, "sluice_attempt_errors_total", &label) >= 1.0);
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_and_a_stalled_handshake_are_named() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    // A receiver that speaks plain HTTP where TLS was expected.
    let plain = receiver::start(Behavior::Fast, false).await.unwrap();
    let url = plain.url().replace("http://", "https://");
    let (id, _) = s.endpoint(&token, &url, json!({})).await;
    s.send(&token, "order.created", json!({})).await;
    assert_eq!(first_error(&s, &token, &id).await, "tls_handshake");
    // One that accepts the connection and never answers the ClientHello.
    let silent = receiver::start(Behavior::Blackhole, false).await.unwrap();
    let url = silent.url().replace("http://", "https://");
    let (id, _) = s
        .endpoint(&token, &url, json!({ "connect_timeout_ms": 300 }))
        .await;
    s.send(&token, "order.created", json!({})).await;
    assert_eq!(first_error(&s, &token, &id).await, "tls_timeout");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_requires_a_client_certificate_gets_ours() {
    let s = Sluice::start(test_settings()).await;
    let server_ca = TestCa::new("server CA");
    let client_ca = TestCa::new("client CA");
    let rx = https(
        &server_ca,
        &["127.0.0.1"],
        Validity::Current,
        &[&client_ca.certificate],
    )
    .await;
    let (_, token) = s.tenant("acme").await;
    let bundle = json!({ "tls_ca_bundle": server_ca.certificate });

    // Without one the receiver refuses the handshake, and the attempt says so.
    let (bare, _) = s.endpoint(&token, &rx.url(), bundle.clone()).await;
    s.send(&token, "order.created", json!({})).await;
    assert_eq!(
        first_error(&s, &token, &bare).await,
        "tls_client_certificate"
    );

    let identity = client_ca.client("sluice");
    let mut extra = bundle.clone();
    extra["tls_client_certificate"] = json!(identity.certificate);
    extra["tls_client_key"] = json!(identity.key);
    let (id, _) = s.endpoint(&token, &rx.url(), extra).await;
    s.send(&token, "order.created", json!({ "n": 1 })).await;
    assert!(eventually(WAIT, || async { rx.record.requests() >= 1 }).await);

    // The key is write-only: no answer carries it.
    let (_, shown) = s.get(&token, &format!("/v1/endpoints/{id}")).await;
    assert_eq!(
        shown["tls_client_certificate"],
        identity.certificate.as_str()
    );
    assert!(!shown.to_string().contains("PRIVATE KEY"), "{shown}");

    // Rotated to a certificate the receiver does not trust yet: during the overlap the
    // previous one is presented when the new one is refused, so deliveries go on.
    let untrusted = TestCa::new("next client CA").client("sluice");
    let (status, rotated) = s
        .post(
            &token,
            &format!("/v1/endpoints/{id}/rotate-client-certificate"),
            json!({
                "tls_client_certificate": untrusted.certificate,
                "tls_client_key": untrusted.key,
            }),
        )
        .await;
    assert_eq!(status, 200, "{rotated}");
    assert!(rotated["previous_tls_client_certificate_until"].is_string());
    assert!(!rotated.to_string().contains("PRIVATE KEY"));
    s.send(&token, "order.created", json!({ "n": 2 })).await;
    assert!(eventually(WAIT, || async { rx.record.requests() >= 2 }).await);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_pem_is_refused_naming_the_field() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let ca = TestCa::new("CA");
    let one = ca.client("one");
    let other = ca.client("other");
    let cases = [
        (
            json!({ "tls_ca_bundle": "not a certificate" }),
            "tls_ca_bundle",
        ),
        (json!({ "tls_ca_bundle": one.key }), "tls_ca_bundle"),
        (
            json!({ "tls_client_certificate": one.certificate }),
            "tls_client_key",
        ),
        (
            json!({ "tls_client_certificate": one.certificate, "tls_client_key": other.key }),
            "tls_client_key",
        ),
        (
            json!({ "tls_client_certificate": "junk", "tls_client_key": one.key }),
            "tls_client_certificate",
        ),
    ];
    for (extra, field) in cases {
        let mut body = extra.clone();
        body["url"] = json!("https://127.0.0.1:9/hook");
        let (status, problem) = s.post(&token, "/v1/endpoints", body).await;
        assert_eq!(status, 422, "{extra}: {problem}");
        assert_eq!(problem["field"], field, "{problem}");
    }
    s.stop().await;
}
