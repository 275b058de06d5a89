//! Bad input everywhere: a 4xx problem naming the field, and nothing stored partially.

use reqwest::Method;
use serde_json::json;
use sluice::receivers::{self, Behavior};

use super::{ADMIN, Sluice, assert_problem};

#[tokio::test]
async fn bad_input_is_a_problem_naming_the_field_and_stores_nothing() {
    let s = Sluice::start(|_| {}).await;
    let (_, token) = s.tenant("acme").await;
    let t = Some(token.as_str());
    let rx = receivers::start(Behavior::Fast, false).await.unwrap();
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
    let id = s.endpoint(&token, &url, json!({})).await["id"]
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
        (json!({ "event_type": "a" }), 422, "body"),
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
    ] {
        assert_problem(&s.call(Method::GET, path, t, None).await, 400, Some(field));
    }
    let r = s
        .call(Method::GET, "/v1/tenants?after=nope", Some(ADMIN), None)
        .await;
    assert_problem(&r, 400, Some("after"));

    // Unknown ids are 404 problems; unknown routes too.
    for path in [
        "/v1/messages/msg_unknown",
        "/v1/deliveries/999999",
        "/v1/deliveries/not-a-number/attempts",
        "/v1/no-such-thing",
    ] {
        assert_problem(&s.call(Method::GET, path, t, None).await, 404, None);
    }
    let r = s
        .call(Method::POST, "/v1/deliveries/999999/replay", t, None)
        .await;
    assert_problem(&r, 404, None);
    s.stop().await;
}

#[tokio::test]
async fn destinations_the_egress_guard_refuses_are_422_on_url() {
    // No allow-list: loopback and private networks are refused.
    let s = Sluice::start(|raw| raw.allow_network.clear()).await;
    let (_, token) = s.tenant("acme").await;
    for url in [
        "http://10.0.0.1/",
        "http://localhost/",
        "http://127.0.0.1:9/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/",
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
