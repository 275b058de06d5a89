//! Bad input everywhere: a 4xx problem naming the field, and nothing stored partially.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use sluice::config::RawSettings;
use sluice_testkit::receiver::{self, Behavior};

use super::{ADMIN, Sluice, assert_problem};

#[tokio::test]
async fn bad_input_is_a_problem_naming_the_field_and_stores_nothing() {
    let s = Sluice::start_with(|_| {}).await;
    let (_, token) = s.tenant("acme").await;
    let t = Some(token.as_str());
    let rx = receiver::start(Behavior::Fast, false).await.unwrap();
    let url = rx.url();

    let raw = |body: &'static [u8], ct: &'static str| {
        let s = &s;
        async move {
            s.raw(
                Method::POST,
                "/v1/endpoints",
                t,
                Some(body.to_vec()),
                ct,
                &[],
            )
            .await
        }
    };
    assert_problem(
        &raw(b"{\"url\": ", "application/json").await,
        400,
        Some("body"),
    );
    assert_problem(&raw(b"{}", "text/plain").await, 415, None);
    let cases = [
        (json!({ "url": url, "lane_size": "four" }), 422, "lane_size"),
        (json!({ "url": url, "colour": "blue" }), 422, "colour"),
        (json!({ "url": 42 }), 422, "url"),
        (json!({ "url": "not a url" }), 422, "url"),
        (json!({ "url": "ftp://example.com/" }), 422, "url"),
        (json!({ "url": url, "lane_size": 0 }), 422, "lane_size"),
        (
            json!({ "url": url, "total_timeout_ms": 3_600_000 }),
            422,
            "total_timeout_ms",
        ),
        (
            json!({ "url": url, "event_types": ["bad type!"] }),
            422,
            "event_types",
        ),
        (
            json!({ "url": url, "description": "a\u{0}b" }),
            422,
            "description",
        ),
        (
            json!({ "url": url, "event_types": ["order*"] }),
            422,
            "event_types",
        ),
        (
            json!({ "url": url, "event_types": ["*.paid"] }),
            422,
            "event_types",
        ),
        (
            json!({ "url": url, "event_types": ["order.*.paid"] }),
            422,
            "event_types",
        ),
        (
            json!({ "url": url, "headers": { "Connection": "close" } }),
            422,
            "headers.Connection",
        ),
        (
            json!({ "url": url, "headers": { "Transfer-Encoding": "chunked" } }),
            422,
            "headers.Transfer-Encoding",
        ),
        (
            json!({ "url": url, "headers": { "webhook-id": "forged" } }),
            422,
            "headers.webhook-id",
        ),
        (
            json!({ "url": url, "headers": { "Webhook-Signature": "v1,forged" } }),
            422,
            "headers.Webhook-Signature",
        ),
        (
            json!({ "url": url, "headers": { "content-type": "text/plain" } }),
            422,
            "headers.content-type",
        ),
        (
            json!({ "url": url, "headers": { "bad name": "x" } }),
            422,
            "headers.bad name",
        ),
        (
            json!({ "url": url, "headers": { "x-ok": "line\r\nx-injected: 1" } }),
            422,
            "headers.x-ok",
        ),
        (
            json!({ "url": url, "headers": { "x-a": "1", "X-A": "2" } }),
            422,
            "headers.x-a",
        ),
        (
            json!({ "url": url, "headers": { "x-n": 1 } }),
            422,
            "headers.x-n",
        ),
        (
            json!({ "url": url, "signature_scheme": "v2" }),
            422,
            "signature_scheme",
        ),
        (json!({ "description": "no url" }), 422, "url"),
    ];
    for (body, status, field) in cases {
        let r = s
            .call(Method::POST, "/v1/endpoints", t, Some(body.clone()))
            .await;
        assert_problem(&r, status, Some(field));
        if field == "colour" {
            assert!(
                r.body["detail"].as_str().unwrap().contains("colour"),
                "{}",
                r.text
            );
        }
    }
    assert_eq!(
        s.get_ok("/v1/endpoints", &token).await["data"],
        json!([]),
        "nothing stored"
    );

    // A PATCH with one bad field changes nothing, not even the good fields.
    let id = s.create_endpoint(&token, &url, json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/v1/endpoints/{id}");
    let bad = json!({ "description": "changed", "url": "http://10.0.0.1/" });
    assert_problem(
        &s.call(Method::PATCH, &path, t, Some(bad)).await,
        422,
        Some("url"),
    );
    assert_eq!(s.get_ok(&path, &token).await["description"], "");
    let bad = json!({ "description": "changed", "enabled": "yes" });
    assert_problem(
        &s.call(Method::PATCH, &path, t, Some(bad)).await,
        422,
        Some("enabled"),
    );
    assert_eq!(s.get_ok(&path, &token).await["description"], "");

    // Messages: wrong types, bad event type, unknown fields, oversize, bad Idempotency-Key.
    let cases = [
        (json!({ "event_type": 1, "payload": {} }), 422, "event_type"),
        (
            json!({ "event_type": "a b", "payload": {} }),
            422,
            "event_type",
        ),
        (json!({ "event_type": "a" }), 422, "payload"),
        (json!({ "payload": {} }), 422, "event_type"),
        (
            json!({ "event_type": "order.*", "payload": {} }),
            422,
            "event_type",
        ),
        (
            json!({ "event_type": "a", "payload": {}, "x": 1 }),
            422,
            "x",
        ),
    ];
    for (body, status, field) in cases {
        let r = s.call(Method::POST, "/v1/messages", t, Some(body)).await;
        assert_problem(&r, status, Some(field));
    }
    let big = json!({ "event_type": "a", "payload": { "blob": "x".repeat(300 * 1024) } });
    assert_problem(
        &s.call(Method::POST, "/v1/messages", t, Some(big)).await,
        413,
        Some("payload"),
    );
    let huge = json!({ "event_type": "a", "payload": { "blob": "x".repeat(400 * 1024) } });
    assert_problem(
        &s.call(Method::POST, "/v1/messages", t, Some(huge)).await,
        413,
        None,
    );
    let body = serde_json::to_vec(&json!({ "event_type": "a", "payload": {} })).unwrap();
    let r = s
        .raw(
            Method::POST,
            "/v1/messages",
            t,
            Some(body),
            "application/json",
            &[("idempotency-key", " ")],
        )
        .await;
    assert_problem(&r, 400, Some("Idempotency-Key"));
    assert_eq!(
        s.get_ok("/v1/messages", &token).await["data"],
        json!([]),
        "nothing stored"
    );

    // Query strings: bad cursors, limits, states and unknown parameters.
    for (path, field) in [
        ("/v1/endpoints?after=zzz", "after"),
        ("/v1/messages?after=ep_1", "after"),
        ("/v1/dead-letters?after=-4", "after"),
        ("/v1/endpoints?limit=0", "limit"),
        ("/v1/endpoints?limit=many", "limit"),
        ("/v1/messages?limit=501", "limit"),
        (
            &format!("/v1/endpoints/{id}/deliveries?state=lost") as &str,
            "state",
        ),
        ("/v1/endpoints?colour=blue", "colour"),
        ("/v1/messages?since=yesterday", "since"),
        ("/v1/messages?until=1700000000000", "until"),
        (
            "/v1/messages?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z",
            "until",
        ),
        ("/v1/messages?event_type=a%20b", "event_type"),
        ("/v1/messages?event_type=*.paid", "event_type"),
        ("/v1/messages?state=lost", "state"),
        ("/v1/dead-letters?after=42", "after"),
    ] {
        assert_problem(&s.call(Method::GET, path, t, None).await, 400, Some(field));
    }
    let r = s
        .call(Method::GET, "/v1/tenants?after=nope", Some(ADMIN), None)
        .await;
    assert_problem(&r, 400, Some("after"));
    let r = s
        .call(Method::GET, "/v1/messages?endpoint_id=ep_unknown", t, None)
        .await;
    assert_problem(&r, 404, Some("endpoint_id"));

    // Unknown ids are 404 problems; unknown routes too.
    for path in [
        "/v1/messages/msg_unknown",
        "/v1/deliveries/999999",
        "/v1/deliveries/dlv_999999",
        "/v1/deliveries/att_1",
        "/v1/deliveries/not-a-number/attempts",
        "/v1/no-such-thing",
    ] {
        assert_problem(&s.call(Method::GET, path, t, None).await, 404, None);
    }
    for path in [
        "/v1/deliveries/dlv_999999/replay",
        "/v1/deliveries/dlv_999999/resend",
        "/v1/deliveries/999999/resend",
    ] {
        assert_problem(&s.call(Method::POST, path, t, None).await, 404, None);
    }
    // Recover: an instant is RFC 3339, and the range runs forwards.
    let recover = format!("/v1/endpoints/{id}/recover");
    for (body, field) in [
        (json!({}), "since"),
        (json!({ "since": 1_700_000_000_000_i64 }), "since"),
        (json!({ "since": "last week" }), "since"),
        (
            json!({ "since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z" }),
            "until",
        ),
    ] {
        let r = s.call(Method::POST, &recover, t, Some(body)).await;
        assert_problem(&r, 422, Some(field));
    }
    s.stop().await;
}

#[tokio::test]
async fn destinations_the_egress_guard_refuses_are_422_on_url() {
    // No allow-list: loopback and private networks are refused.
    let s = Sluice::start_with(|raw| raw.allow_network.clear()).await;
    let (_, token) = s.tenant("acme").await;
    for url in [
        "http://10.0.0.1/",
        "http://localhost/",
        "http://127.0.0.1:9/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/",
        // 6to4 and Teredo addresses carrying 127.0.0.1.
        "http://[2002:7f00:1::1]/",
        "http://[2001:0:808:808::80ff:fffe]/",
    ] {
        let r = s
            .call(
                Method::POST,
                "/v1/endpoints",
                Some(&token),
                Some(json!({ "url": url })),
            )
            .await;
        assert_problem(&r, 422, Some("url"));
        let r = s
            .call(
                Method::PUT,
                "/v1/operational-webhook",
                Some(&token),
                Some(json!({ "url": url })),
            )
            .await;
        assert_problem(&r, 422, Some("url"));
    }
    assert_eq!(s.get_ok("/v1/endpoints", &token).await["data"], json!([]));
    s.stop().await;
}

/// Control characters in a URL (which `url` would strip or encode silently) are refused, on
/// both drivers; PostgreSQL refuses NUL in text, so without the check it was a 500 there.
async fn control_characters_are_refused_naming_the_field(raw: RawSettings) {
    let s = Sluice::start(raw).await;
    let (_, token) = s.tenant("acme").await;
    let t = Some(token.as_str());
    let rx = receiver::start(Behavior::Fast, false).await.unwrap();
    let url = rx.url();
    let bad_urls = [
        format!("{url}\u{0}"),
        format!("{url}a\nb"),
        format!("{url}a\tb"),
        format!("{url}\r\n"),
        format!(" {url}"),
        format!("{url}\u{7f}"),
    ];
    for bad in &bad_urls {
        let r = s
            .call(
                Method::POST,
                "/v1/endpoints",
                t,
                Some(json!({ "url": bad })),
            )
            .await;
        assert_problem(&r, 422, Some("url"));
        let r = s
            .call(
                Method::PUT,
                "/v1/operational-webhook",
                t,
                Some(json!({ "url": bad })),
            )
            .await;
        assert_problem(&r, 422, Some("url"));
    }
    for (body, field) in [
        (
            json!({ "url": url, "description": "a\u{0}b" }),
            "description",
        ),
        (
            json!({ "url": url, "event_types": ["a\u{0}b"] }),
            "event_types",
        ),
    ] {
        let r = s.call(Method::POST, "/v1/endpoints", t, Some(body)).await;
        assert_problem(&r, 422, Some(field));
    }
    for name in ["a\u{0}b", "a\nb", "a\tb", "a\u{1b}[31mb"] {
        let r = s
            .call(
                Method::POST,
                "/v1/tenants",
                Some(ADMIN),
                Some(json!({ "name": name })),
            )
            .await;
        assert_problem(&r, 422, Some("name"));
    }
    let r = s
        .call(
            Method::POST,
            "/v1/messages",
            t,
            Some(json!({ "event_type": "a\u{0}b", "payload": {} })),
        )
        .await;
    assert_problem(&r, 422, Some("event_type"));
    assert_eq!(s.get_ok("/v1/endpoints", &token).await["data"], json!([]));

    // What is stored (and shown) is the parsed, checked URL, not the raw text.
    let port = url
        .trim_start_matches("http://127.0.0.1:")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let raw = format!("HTTP://127.0.0.1:{port}");
    let normal = format!("http://127.0.0.1:{port}/");
    let created = s.create_endpoint(&token, &raw, json!({})).await;
    assert_eq!(created["url"], normal);
    let id = created["id"].as_str().unwrap();
    let path = format!("/v1/endpoints/{id}");
    assert_eq!(s.get_ok(&path, &token).await["url"], normal);
    let dotted = format!("HTTP://127.0.0.1:{port}/x/../hook");
    let r = s
        .call(Method::PATCH, &path, t, Some(json!({ "url": dotted })))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["url"], url);
    let r = s
        .call(
            Method::PATCH,
            &path,
            t,
            Some(json!({ "url": format!("{url}\n") })),
        )
        .await;
    assert_problem(&r, 422, Some("url"));
    assert_eq!(s.get_ok(&path, &token).await["url"], url);
    let r = s
        .call(
            Method::PUT,
            "/v1/operational-webhook",
            t,
            Some(json!({ "url": raw })),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["url"], normal);
    s.stop().await;
}

crate::support::drivers!(control_characters_are_refused_naming_the_field);

/// Sends raw bytes on a fresh connection and reads until the server closes it (or 10 s pass):
/// (status, lower-cased head, body).
async fn raw_exchange(base: &str, request: Vec<u8>) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://");
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut read, mut write) = stream.into_split();
    // Written from its own task: the server may answer (and close) before it has read it all.
    let writer = tokio::spawn(async move {
        let _ = write.write_all(&request).await;
        write
    });
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), read.read_to_end(&mut buf)).await;
    drop(writer.await);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_owned())
}

#[tokio::test]
async fn every_error_the_http_stack_produces_is_problem_json() {
    let s = Sluice::start_with(|_| {}).await;
    let (_, token) = s.tenant("acme").await;
    let t = Some(token.as_str());

    // From the router and its extractors.
    let r = s.call(Method::DELETE, "/v1/messages", t, None).await;
    assert_problem(&r, 405, None);
    let r = s.call(Method::PUT, "/healthz", None, None).await;
    assert_problem(&r, 405, None);
    for path in [
        "/v1/endpoints/%FF%FE",
        "/v1/messages/%C0",
        "/v1/tenants/%FF",
    ] {
        let r = s.call(Method::GET, path, Some(ADMIN), None).await;
        assert!((400..500).contains(&r.status), "{path}: {}", r.status);
        assert_problem(&r, r.status, None);
    }
    let huge = vec![b'x'; 2 * 1024 * 1024];
    let r = s
        .raw(
            Method::POST,
            "/v1/messages",
            t,
            Some(huge),
            "application/json",
            &[],
        )
        .await;
    assert_problem(&r, 413, None);

    // From hyper, before any router sees a request: a malformed request line, a bad header,
    // a bad Content-Length, oversized headers.
    let big_header = format!(
        "GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
        "a".repeat(100 * 1024)
    );
    let many_headers = format!(
        "GET /healthz HTTP/1.1\r\nhost: x\r\n{}\r\n",
        (0..200)
            .map(|i| format!("x-h{i}: 1\r\n"))
            .collect::<String>()
    );
    for (request, status) in [
        (b"NOT AN HTTP REQUEST\r\n\r\n".to_vec(), 400),
        (b"GET /healthz HTTP/1.1\r\nbad header\r\n\r\n".to_vec(), 400),
        (
            b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: nope\r\n\r\n".to_vec(),
            400,
        ),
        (big_header.into_bytes(), 431),
        (many_headers.into_bytes(), 431),
    ] {
        let shown = String::from_utf8_lossy(&request[..request.len().min(60)]).into_owned();
        let (got, head, body) = raw_exchange(&s.base, request).await;
        assert_eq!(got, status, "{shown:?}: {head}\n{body}");
        assert!(
            head.contains("content-type: application/problem+json"),
            "{shown:?}: {head}"
        );
        let json: serde_json::Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("{shown:?}: body is not JSON ({e}): {body:?}"));
        assert_eq!(json["status"], status, "{body}");
    }
    // The server is still fine afterwards.
    assert_eq!(
        s.call(Method::GET, "/healthz", None, None).await.status,
        200
    );
    s.stop().await;
}
