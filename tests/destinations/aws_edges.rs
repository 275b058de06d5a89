//! The AWS destinations' edges: the API's checks field by field (credentials write-only, a
//! private `endpoint_url` refused without `--allow-network`); a service that throttles (a stub
//! answering `ThrottlingException`: moto cannot be made to) is a `throttled` attempt counted
//! with the 429s; with `--egress-proxy` the call goes through the proxy (tinyproxy) and its
//! signature still verifies at moto. A message over SQS's or SNS's size limit is `too_large`
//! (retried on the schedule, as an HTTP 413 is), though moto names it by a generic code.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::aws::{Moto, verify_attributes};
use super::rabbitmq::first_attempt;
use super::support::{self, Sluice, eventually, test_settings};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_destinations_are_checked_field_by_field() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let key =
        json!({ "access_key_id": "AKIAEXAMPLE", "secret_access_key": "s3cr3t-key-never-shown" });
    let queue = "http://127.0.0.1:9/123456789012/orders";
    let bad = [
        (
            json!({ "type": "sqs", "queue_url": queue }),
            "destination.region",
        ),
        (
            json!({ "type": "sqs", "region": "us-east-1" }),
            "destination.queue_url",
        ),
        (
            json!({ "type": "sqs", "region": "us-east-1", "queue_url": "not a url" }),
            "destination.queue_url",
        ),
        (
            json!({ "type": "sqs", "region": "US East", "queue_url": queue }),
            "destination.region",
        ),
        (
            json!({ "type": "sqs", "region": "us-east-1", "queue_url": queue, "url": "http://127.0.0.1:9/" }),
            "destination.url",
        ),
        (
            json!({ "type": "sns", "region": "us-east-1", "topic_arn": "orders" }),
            "destination.topic_arn",
        ),
        (
            json!({ "type": "sns", "region": "us-east-1", "topic_arn": "arn:aws:sns:us-east-1:1:t", "queue_url": queue }),
            "destination.queue_url",
        ),
        (
            json!({ "type": "eventbridge", "region": "us-east-1" }),
            "destination.event_bus_name",
        ),
        (
            json!({ "type": "eventbridge", "region": "us-east-1", "event_bus_name": "b", "source": "aws.events" }),
            "destination.source",
        ),
        (
            json!({ "type": "sqs", "region": "us-east-1", "queue_url": queue, "endpoint_url": "ftp://127.0.0.1/" }),
            "destination.endpoint_url",
        ),
        (
            json!({ "type": "sqs", "region": "us-east-1", "queue_url": queue, "credentials": { "access_key_id": "AKIA" } }),
            "destination.credentials.secret_access_key",
        ),
        (
            json!({ "type": "sqs", "region": "us-east-1", "queue_url": queue, "credentials": { "username": "u", "password": "p" } }),
            "destination.credentials.username",
        ),
        (
            json!({ "type": "redis", "url": "redis://127.0.0.1:6379/0", "stream": "s", "region": "us-east-1" }),
            "destination.region",
        ),
        (
            json!({ "type": "sqs", "region": "us-east-1", "queue_url": queue }),
            "destination.credentials",
        ),
    ];
    for (destination, field) in bad {
        let (status, problem) = s
            .post(
                &token,
                "/v1/endpoints",
                json!({ "destination": destination }),
            )
            .await;
        assert_eq!(status, 422, "{destination}: {problem}");
        assert_eq!(problem["field"], field, "{destination}: {problem}");
    }

    // Shown with the region's endpoint, without the key, everywhere.
    let (status, shown) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({ "destination": { "type": "sqs", "region": "eu-west-1", "queue_url": "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo", "credentials": key } }),
        )
        .await;
    assert_eq!(status, 201, "{shown}");
    let d = &shown["destination"];
    assert_eq!(
        d["endpoint_url"], "https://sqs.eu-west-1.amazonaws.com",
        "{shown}"
    );
    assert_eq!(d["has_credentials"], true);
    let id = shown["id"].as_str().unwrap();
    let (_, list) = s.get(&token, "/v1/endpoints").await;
    let (_, one) = s.get(&token, &format!("/v1/endpoints/{id}")).await;
    for answer in [shown.to_string(), list.to_string(), one.to_string()] {
        assert!(
            !answer.contains("s3cr3t-key-never-shown") && !answer.contains("AKIAEXAMPLE"),
            "{answer}"
        );
    }
    let (status, shown) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({ "destination": { "type": "eventbridge", "region": "us-east-1", "event_bus_name": "default", "credentials": key } }),
        )
        .await;
    assert_eq!(status, 201, "{shown}");
    assert_eq!(shown["destination"]["source"], "sluice", "{shown}");

    // A private service endpoint is refused without --allow-network.
    let strict = Sluice::start(sluice::config::RawSettings {
        allow_network: Vec::new(),
        ..test_settings()
    })
    .await;
    let (_, strict_token) = strict.tenant("acme").await;
    let (status, problem) = strict
        .post(
            &strict_token,
            "/v1/endpoints",
            json!({ "destination": { "type": "sqs", "region": "us-east-1", "queue_url": queue, "endpoint_url": "http://127.0.0.1:4566", "credentials": key } }),
        )
        .await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["field"], "destination.endpoint_url", "{problem}");
    strict.stop().await;
    s.stop().await;
}

/// A service endpoint that answers every call with `status` and `body` (what moto cannot be
/// made to do: throttle), counting the calls.
async fn answering(status: u16, body: &'static str) -> (String, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                // Read the whole request (headers, then Content-Length bytes) before answering.
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let Ok(n) = socket.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got).to_lowercase();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text[..end]
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if got.len() >= end + 4 + length {
                            break;
                        }
                    }
                }
                counted.fetch_add(1, Ordering::SeqCst);
                let answer = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/x-amz-json-1.0\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    (base, calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttling_service_is_a_throttled_attempt_read_like_a_429() {
    let (base, calls) = answering(
        400,
        r#"{"__type":"com.amazonaws.sqs#ThrottlingException","message":"Rate exceeded"}"#,
    )
    .await;
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let (status, created) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({ "destination": {
                "type": "sqs", "region": "us-east-1", "endpoint_url": base,
                "queue_url": format!("{base}/123456789012/orders"),
                "credentials": { "access_key_id": "AKIAEXAMPLE", "secret_access_key": "secret" },
            } }),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    s.send(&token, "order.created", json!({ "order": 6 })).await;
    let attempt = first_attempt(&s, &token, &id).await;
    assert_eq!(attempt["error_kind"], "throttled", "{attempt}");
    assert!(calls.load(Ordering::SeqCst) >= 1);
    // The evidence counts it with the 429s, and the delivery waits for a retry.
    let path = format!("/v1/endpoints/{id}/status");
    assert!(
        eventually(Duration::from_secs(10), || async {
            s.get(&token, &path).await.1["failures"]["throttled"]
                .as_u64()
                .is_some_and(|n| n >= 1)
        })
        .await,
        "{}",
        s.get(&token, &path).await.1
    );
    s.stop().await;
}

/// With `--egress-proxy`, an AWS call goes through the proxy like an HTTP delivery (it is one),
/// and its signature still verifies at the service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sqs_call_goes_through_the_egress_proxy() {
    let Some(proxy) = support::egress_proxy::tinyproxy().await else {
        return;
    };
    let Some(moto) = Moto::start().await else {
        return;
    };
    let mut raw = test_settings();
    raw.egress.proxy = Some(format!("http://localhost:{}", proxy.port));
    // `localhost` resolves to ::1 too: with a proxy every address of a name must pass.
    raw.allow_network.push("::1/128".into());
    let s = Sluice::start(raw).await;
    let (_, token) = s.tenant("acme").await;
    let port = moto.base.rsplit(':').next().unwrap().to_owned();
    let endpoint_url = format!("http://localhost:{port}");
    let standard = moto.made("standard");
    let (status, created) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({ "destination": {
                "type": "sqs", "region": "us-east-1", "endpoint_url": endpoint_url,
                "queue_url": standard, "credentials": moto.credentials(),
            } }),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();
    s.send(&token, "order.created", json!({ "order": 9 })).await;
    let attempt = first_attempt(&s, &token, &id).await;
    assert_eq!(attempt["error_kind"], Value::Null, "{attempt}");
    let got = moto.receive(&standard);
    assert_eq!(got.len(), 1, "{got:?}");
    verify_attributes(&secret, &got[0]);
    let log = proxy.log();
    let forwarded = format!("POST {endpoint_url}/");
    assert!(log.contains(&forwarded), "no {forwarded:?} in:\n{log}");
    s.stop().await;
}

/// A message over the service's size limit, which sluice accepts (2 MiB here): SQS (moto's
/// 1 MiB, `InvalidParameterValue` "Message must be shorter than 1048576 bytes") and SNS
/// (256 KiB, `InvalidParameter` "Message too long") refuse it with a generic code, and the
/// attempt is `too_large`, not `invalid`: retried on the schedule like an HTTP 413, not dead.
/// (moto's EventBridge takes an event of any size.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_services_size_limit_is_too_large() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let s = Sluice::start(sluice::config::RawSettings {
        max_payload_bytes: Some(2 * 1024 * 1024),
        ..test_settings()
    })
    .await;
    let cases = [
        (
            "sqs",
            json!({ "queue_url": moto.made("standard") }),
            1_100_000,
        ),
        ("sns", json!({ "topic_arn": moto.made("topic") }), 300_000),
    ];
    for (kind, fields, size) in cases {
        let (_, token) = s.tenant(&format!("big-{kind}")).await;
        let (id, _) = moto.endpoint(&s, &token, kind, fields).await;
        let message = s
            .send(&token, "order.created", json!({ "blob": "x".repeat(size) }))
            .await;
        let attempt = first_attempt(&s, &token, &id).await;
        assert_eq!(attempt["error_kind"], "too_large", "{kind}: {attempt}");
        let delivery = &s.message(&token, &message).await["deliveries"][0];
        assert_ne!(delivery["state"], "dead", "{kind}: {delivery}");
    }
    s.stop().await;
}
