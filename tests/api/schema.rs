//! The API and its OpenAPI document agree: what the document calls valid is accepted (an
//! integer written `3.0`, a `null` where the body may be null), and what the API refuses the
//! document declares (ranges, cursor patterns, lengths), each refusal a problem naming the field.

use reqwest::Method;
use serde_json::{Value, json};

use super::{ADMIN, Sluice, assert_problem};

/// The schema of query parameter `name` of `GET path` in the served document.
fn query_schema(doc: &Value, path: &str, name: &str) -> Value {
    doc["paths"][path]["get"]["parameters"]
        .as_array()
        .unwrap_or_else(|| panic!("{path} has no parameters"))
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{path} has no {name}"))["schema"]
        .clone()
}

#[tokio::test]
async fn integer_fields_take_integral_floats_and_refuse_fractions() {
    let s = Sluice::start_with(|_| {}).await;
    let (tenant, token) = s.tenant("acme").await;
    let ep = s
        .create_endpoint(
            &token,
            "http://127.0.0.1:9/hook",
            json!({
                "lane_size": 4.0,
                "latency_ceiling_ms": 1e3,
                "read_timeout_ms": 1000.0,
                "rate_limit": { "per_second": 2, "burst": 5.0 },
            }),
        )
        .await;
    assert_eq!(
        (
            &ep["lane_size"],
            &ep["latency_ceiling_ms"],
            &ep["read_timeout_ms"],
            &ep["rate_limit"]["burst"]
        ),
        (&json!(4), &json!(1000), &json!(1000), &json!(5))
    );
    let id = ep["id"].as_str().unwrap();
    let path = format!("/v1/endpoints/{id}");
    let r = s
        .call(
            Method::PATCH,
            &path,
            Some(&token),
            Some(json!({ "lane_size": 8.0, "total_timeout_ms": null })),
        )
        .await;
    assert_eq!(
        (r.status, &r.body["lane_size"]),
        (200, &json!(8)),
        "{}",
        r.text
    );
    for (body, field) in [
        (json!({ "lane_size": 4.5 }), "lane_size"),
        (json!({ "lane_size": -1.0 }), "lane_size"),
        (
            json!({ "read_timeout_ms": 4294967296.0 }),
            "read_timeout_ms",
        ),
        (
            json!({ "rate_limit": { "per_second": 1, "burst": 0.5 } }),
            "rate_limit.burst",
        ),
    ] {
        let r = s.call(Method::PATCH, &path, Some(&token), Some(body)).await;
        assert_problem(&r, 422, Some(field));
    }

    let r = s
        .call(
            Method::PATCH,
            &format!("/v1/tenants/{tenant}"),
            Some(ADMIN),
            Some(json!({ "weight": 3.0 })),
        )
        .await;
    assert_eq!(
        (r.status, &r.body["weight"]),
        (200, &json!(3)),
        "{}",
        r.text
    );
    let r = s
        .call(
            Method::POST,
            "/v1/portal-links",
            Some(&token),
            Some(json!({ "expires_in_s": 60.0 })),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    s.stop().await;
}

/// Disable and rotate-secret document their body as `oneOf: [null, object]`: `null` is no
/// options, like an empty body.
#[tokio::test]
async fn a_null_body_is_no_options() {
    let s = Sluice::start_with(|_| {}).await;
    let (_, token) = s.tenant("acme").await;
    let ep = s
        .create_endpoint(&token, "http://127.0.0.1:9/hook", json!({}))
        .await;
    let id = ep["id"].as_str().unwrap();
    for action in ["disable", "rotate-secret"] {
        let r = s
            .raw(
                Method::POST,
                &format!("/v1/endpoints/{id}/{action}"),
                Some(&token),
                Some(b" null ".to_vec()),
                "application/json",
                &[],
            )
            .await;
        assert_eq!(r.status, 200, "{action}: {}", r.text);
    }
    let shown = s.get_ok(&format!("/v1/endpoints/{id}"), &token).await;
    assert_eq!(
        (&shown["enabled"], &shown["disabled_reason"]),
        (&json!(false), &json!("disabled by the tenant"))
    );
    assert_eq!(shown["signature_scheme"], ep["signature_scheme"]);
    let r = s
        .call(
            Method::POST,
            &format!("/v1/endpoints/{id}/rotate-secret"),
            Some(&token),
            Some(json!({ "signature_scheme": "v2" })),
        )
        .await;
    assert_problem(&r, 422, Some("signature_scheme"));
    s.stop().await;
}

#[tokio::test]
async fn current_replicas_has_a_documented_maximum() {
    let s = Sluice::start_with(|_| {}).await;
    let doc = s.get_ok("/openapi.json", ADMIN).await;
    let schema = query_schema(&doc, "/v1/scale", "current_replicas");
    assert_eq!(
        (&schema["minimum"], &schema["maximum"]),
        (&json!(0), &json!(100000))
    );
    let ok = s.get_ok("/v1/scale?current_replicas=100000", ADMIN).await;
    assert_eq!(ok["current_replicas"], 100000);
    for above in ["100001", "4294967295"] {
        let r = s
            .call(
                Method::GET,
                &format!("/v1/scale?current_replicas={above}"),
                Some(ADMIN),
                None,
            )
            .await;
        assert_problem(&r, 400, Some("current_replicas"));
    }
    s.stop().await;
}

/// Every list documents what its cursor looks like, so an empty `after=` (or another list's
/// cursor) is outside the document as it is refused by the API: a 400 naming `after`.
#[tokio::test]
async fn cursors_are_documented_and_an_empty_one_is_refused() {
    let s = Sluice::start_with(|_| {}).await;
    let (_, token) = s.tenant("acme").await;
    let ep = s
        .create_endpoint(&token, "http://127.0.0.1:9/hook", json!({}))
        .await;
    let id = ep["id"].as_str().unwrap();
    let doc = s.get_ok("/openapi.json", &token).await;
    for (path, template, token, wrong) in [
        (
            "/v1/endpoints".to_owned(),
            "/v1/endpoints",
            token.as_str(),
            "msg_1",
        ),
        ("/v1/messages".to_owned(), "/v1/messages", &token, "ep_1"),
        (
            "/v1/dead-letters".to_owned(),
            "/v1/dead-letters",
            &token,
            "dlv_1",
        ),
        (
            format!("/v1/endpoints/{id}/deliveries"),
            "/v1/endpoints/{id}/deliveries",
            &token,
            "att_0000000000000",
        ),
        (
            format!("/v1/endpoints/{id}/attempts"),
            "/v1/endpoints/{id}/attempts",
            &token,
            "dlv_0000000000000",
        ),
        ("/v1/tenants".to_owned(), "/v1/tenants", ADMIN, "ep_1"),
    ] {
        let pattern = query_schema(&doc, template, "after")["pattern"].clone();
        let pattern = pattern
            .as_str()
            .unwrap_or_else(|| panic!("{template}: no pattern"));
        assert!(
            pattern.starts_with('^') && !pattern.ends_with("*$"),
            "{template}: {pattern}"
        );
        for after in ["", wrong] {
            let r = s
                .call(
                    Method::GET,
                    &format!("{path}?after={after}"),
                    Some(token),
                    None,
                )
                .await;
            assert_problem(&r, 400, Some("after"));
        }
    }
    s.stop().await;
}

/// The document states ranges the handlers enforce, with this installation's caps.
#[tokio::test]
async fn the_document_states_the_ranges_the_api_enforces() {
    let s = Sluice::start_with(|_| {}).await;
    let (_, token) = s.tenant("acme").await;
    let doc = s.get_ok("/openapi.json", &token).await;
    let create = &doc["components"]["schemas"]["CreateEndpoint"]["properties"];
    assert_eq!(create["lane_size"]["maximum"], 10000);
    let cap = create["total_timeout_ms"]["maximum"].as_u64().unwrap();
    let (over, at) = (cap + 1, cap);
    for (ms, status) in [(over, 422), (at, 201)] {
        let r = s
            .call(
                Method::POST,
                "/v1/endpoints",
                Some(&token),
                Some(json!({ "url": "http://127.0.0.1:9/hook", "total_timeout_ms": ms })),
            )
            .await;
        assert_eq!(r.status, status, "{ms}: {}", r.text);
    }
    // A tenant's name is at most 200 characters as written, white space included.
    let name = format!(" {} ", "n".repeat(199));
    let r = s
        .call(
            Method::POST,
            "/v1/tenants",
            Some(ADMIN),
            Some(json!({ "name": name })),
        )
        .await;
    assert_problem(&r, 422, Some("name"));
    let tenant = &doc["components"]["schemas"]["CreateTenant"]["properties"]["name"];
    assert_eq!(tenant["maxLength"], 200);
    s.stop().await;
}
