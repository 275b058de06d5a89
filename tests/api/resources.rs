//! Tenants, endpoints and their actions, the operational webhook, tenant isolation, OpenAPI.

use reqwest::Method;
use serde_json::{Value, json};
use sluice_testkit::receiver::{self, Behavior};

use super::{ADMIN, Sluice, assert_problem};

/// Every route the router serves; the document must list exactly these.
const ROUTES: &[(&str, &str)] = &[
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
    ("post", "/v1/tenants"),
    ("get", "/v1/tenants"),
    ("get", "/v1/tenants/{id}"),
    ("patch", "/v1/tenants/{id}"),
    ("delete", "/v1/tenants/{id}"),
    ("get", "/v1/tenants/{id}/status"),
    ("post", "/v1/tenants/{id}/rotate-token"),
    ("post", "/v1/endpoints"),
    ("get", "/v1/endpoints"),
    ("get", "/v1/endpoints/{id}"),
    ("patch", "/v1/endpoints/{id}"),
    ("delete", "/v1/endpoints/{id}"),
    ("post", "/v1/endpoints/{id}/enable"),
    ("post", "/v1/endpoints/{id}/disable"),
    ("post", "/v1/endpoints/{id}/rotate-secret"),
    ("post", "/v1/endpoints/{id}/rotate-client-certificate"),
    ("get", "/v1/endpoints/{id}/events"),
    ("get", "/v1/endpoints/{id}/jwks.json"),
    ("get", "/v1/endpoints/{id}/status"),
    ("get", "/v1/endpoints/{id}/deliveries"),
    ("get", "/v1/endpoints/{id}/attempts"),
    ("post", "/v1/endpoints/{id}/dead-letters/replay"),
    ("post", "/v1/messages"),
    ("get", "/v1/messages"),
    ("get", "/v1/messages/{id}"),
    ("get", "/v1/messages/{id}/deliveries"),
    ("get", "/v1/messages/{id}/attempts"),
    ("get", "/v1/deliveries/{id}"),
    ("get", "/v1/deliveries/{id}/attempts"),
    ("post", "/v1/deliveries/{id}/replay"),
    ("post", "/v1/deliveries/{id}/resend"),
    ("post", "/v1/endpoints/{id}/recover"),
    ("get", "/v1/dead-letters"),
    ("get", "/v1/scale"),
    ("put", "/v1/operational-webhook"),
    ("get", "/v1/operational-webhook"),
    ("delete", "/v1/operational-webhook"),
    ("post", "/v1/portal-links"),
];

#[tokio::test]
async fn openapi_documents_every_route_and_every_documented_route_is_served() {
    let s = Sluice::start_with(|_| {}).await;
    let r = s.call(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(r.status, 200);
    assert!(r.body["openapi"].as_str().unwrap().starts_with("3.1"));
    let paths = r.body["paths"].as_object().expect("paths");
    let mut documented = Vec::new();
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            if ["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                documented.push((method.clone(), path.clone()));
            }
        }
    }
    let mut expected: Vec<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    documented.sort();
    expected.sort();
    assert_eq!(documented, expected, "router and document differ");
    // Every documented operation is routed: without a token it is 401 or 200, never "no route";
    // the one public by design (an endpoint's key set) answers for the endpoint it names.
    for (method, path) in &documented {
        let concrete = path.replace("{id}", "1");
        let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let r = s.call(m, &concrete, None, None).await;
        let public = path.ends_with("/jwks.json");
        assert!(
            [200, 401].contains(&r.status)
                || (public && [400, 404].contains(&r.status) && r.text.contains("endpoint")),
            "{method} {path}: {} {}",
            r.status,
            r.text
        );
    }
    s.stop().await;
}

#[tokio::test]
async fn tenants_are_managed_by_the_operator_only() {
    let s = Sluice::start_with(|_| {}).await;
    let (id, token) = s.tenant("acme").await;
    let list = s.get_ok("/v1/tenants", ADMIN).await;
    assert!(
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == id.as_str())
    );
    assert!(
        list["data"][0].get("token").is_none(),
        "tokens are shown once"
    );
    let one = s.get_ok(&format!("/v1/tenants/{id}"), ADMIN).await;
    assert_eq!(one["name"], "acme");
    // Without a token, with a bad one, with a tenant's: 401.
    for t in [None, Some("nope"), Some(token.as_str())] {
        let r = s.call(Method::GET, "/v1/tenants", t, None).await;
        assert_problem(&r, 401, None);
    }
    assert_eq!(s.get_ok("/v1/endpoints", &token).await["data"], json!([]));
    // Rotation: the old token stops working, the new one works.
    let r = s
        .call(
            Method::POST,
            &format!("/v1/tenants/{id}/rotate-token"),
            Some(ADMIN),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let fresh = r.body["token"].as_str().unwrap().to_owned();
    assert_problem(
        &s.call(Method::GET, "/v1/endpoints", Some(&token), None)
            .await,
        401,
        None,
    );
    s.get_ok("/v1/endpoints", &fresh).await;
    // Delete: gone, and its token with it.
    let r = s
        .call(
            Method::DELETE,
            &format!("/v1/tenants/{id}"),
            Some(ADMIN),
            None,
        )
        .await;
    assert_eq!(r.status, 204);
    for path in [format!("/v1/tenants/{id}"), "/v1/tenants/ten_nope".into()] {
        assert_problem(
            &s.call(Method::GET, &path, Some(ADMIN), None).await,
            404,
            None,
        );
    }
    assert_problem(
        &s.call(Method::GET, "/v1/endpoints", Some(&fresh), None)
            .await,
        401,
        None,
    );
    let r = s
        .call(
            Method::POST,
            "/v1/tenants/ten_nope/rotate-token",
            Some(ADMIN),
            None,
        )
        .await;
    assert_problem(&r, 404, None);
    s.stop().await;
}

#[tokio::test]
async fn endpoints_lifecycle_enable_disable_rotate_and_events() {
    let s = Sluice::start_with(|raw| raw.rotation_overlap = Some("1h".into())).await;
    let (_, token) = s.tenant("acme").await;
    let rx = receiver::start(Behavior::Fast, false).await.unwrap();
    let e = s
        .create_endpoint(&token, &rx.url(), json!({ "event_types": ["order.paid"] }))
        .await;
    let id = e["id"].as_str().unwrap().to_owned();
    let first_secret = e["secret"].as_str().unwrap().to_owned();
    assert!(first_secret.starts_with("whsec_"));
    let got = s.get_ok(&format!("/v1/endpoints/{id}"), &token).await;
    assert!(got.get("secret").is_none(), "the secret is shown once");
    assert_eq!(got["event_types"], json!(["order.paid"]));
    let list = s.get_ok("/v1/endpoints", &token).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 1);

    let patch = json!({ "description": "orders", "lane_size": 3, "read_timeout_ms": null });
    let r = s
        .call(
            Method::PATCH,
            &format!("/v1/endpoints/{id}"),
            Some(&token),
            Some(patch),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        (r.body["description"].clone(), r.body["lane_size"].clone()),
        (json!("orders"), json!(3))
    );

    let r = s
        .call(
            Method::POST,
            &format!("/v1/endpoints/{id}/disable"),
            Some(&token),
            Some(json!({ "reason": "maintenance" })),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        (r.body["enabled"].clone(), r.body["disabled_reason"].clone()),
        (json!(false), json!("maintenance"))
    );
    let r = s
        .call(
            Method::POST,
            &format!("/v1/endpoints/{id}/enable"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!((r.status, r.body["enabled"].clone()), (200, json!(true)));

    let before = sluice::clock::now_ms();
    let r = s
        .call(
            Method::POST,
            &format!("/v1/endpoints/{id}/rotate-secret"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let second = r.body["secret"].as_str().unwrap();
    assert!(second.starts_with("whsec_") && second != first_secret);
    let until = r.body["previous_secret_until"].as_str().unwrap();
    let until = sluice::clock::parse_rfc3339(until).unwrap();
    assert!(
        (until - before - 3_600_000).abs() < 60_000,
        "overlap of 1 h: {until}"
    );

    let events = s
        .get_ok(&format!("/v1/endpoints/{id}/events"), &token)
        .await;
    let kinds: Vec<&str> = events["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["secret_rotated", "enabled", "disabled"],
        "newest first"
    );

    let r = s
        .call(
            Method::DELETE,
            &format!("/v1/endpoints/{id}"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(r.status, 204);
    for (m, p) in [
        (Method::GET, format!("/v1/endpoints/{id}")),
        (Method::DELETE, format!("/v1/endpoints/{id}")),
        (Method::POST, format!("/v1/endpoints/{id}/enable")),
        (Method::POST, format!("/v1/endpoints/{id}/rotate-secret")),
        (Method::GET, format!("/v1/endpoints/{id}/events")),
        (Method::GET, "/v1/endpoints/ep_unknown/status".into()),
        (Method::GET, "/v1/endpoints/..%2F..%2Fetc/status".into()),
    ] {
        assert_problem(&s.call(m, &p, Some(&token), None).await, 404, None);
    }
    s.stop().await;
}

#[tokio::test]
async fn tenant_b_cannot_read_change_replay_or_see_the_status_of_tenant_a() {
    let s = Sluice::start_with(|_| {}).await;
    let (_, a) = s.tenant("a").await;
    let (_, b) = s.tenant("b").await;
    let rx = receiver::start(Behavior::Fast, false).await.unwrap();
    let ep = s.create_endpoint(&a, &rx.url(), json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let msg = s.send(&a, "order.paid", json!({ "n": 1 })).await;
    let page = s
        .wait_for(&format!("/v1/messages/{msg}/deliveries"), &a, |v| {
            super::states(v) == ["delivered"]
        })
        .await;
    let delivery = page["data"][0]["id"].as_str().unwrap().to_owned();
    let patch = Some(json!({ "description": "mine now" }));
    let attempts = [
        (Method::GET, format!("/v1/endpoints/{ep}"), None),
        (Method::PATCH, format!("/v1/endpoints/{ep}"), patch),
        (Method::POST, format!("/v1/endpoints/{ep}/disable"), None),
        (Method::POST, format!("/v1/endpoints/{ep}/enable"), None),
        (
            Method::POST,
            format!("/v1/endpoints/{ep}/rotate-secret"),
            None,
        ),
        (Method::GET, format!("/v1/endpoints/{ep}/status"), None),
        (Method::GET, format!("/v1/endpoints/{ep}/events"), None),
        (Method::GET, format!("/v1/endpoints/{ep}/deliveries"), None),
        (Method::GET, format!("/v1/endpoints/{ep}/attempts"), None),
        (
            Method::POST,
            format!("/v1/endpoints/{ep}/dead-letters/replay"),
            None,
        ),
        (
            Method::GET,
            format!("/v1/dead-letters?endpoint_id={ep}"),
            None,
        ),
        (Method::GET, format!("/v1/messages/{msg}"), None),
        (Method::GET, format!("/v1/messages/{msg}/deliveries"), None),
        (Method::GET, format!("/v1/messages/{msg}/attempts"), None),
        (Method::GET, format!("/v1/deliveries/{delivery}"), None),
        (
            Method::GET,
            format!("/v1/deliveries/{delivery}/attempts"),
            None,
        ),
        (
            Method::POST,
            format!("/v1/deliveries/{delivery}/replay"),
            None,
        ),
        (
            Method::POST,
            format!("/v1/deliveries/{delivery}/resend"),
            None,
        ),
        (
            Method::POST,
            format!("/v1/endpoints/{ep}/recover"),
            Some(json!({ "since": "2020-01-01T00:00:00Z" })),
        ),
        (Method::GET, format!("/v1/messages?endpoint_id={ep}"), None),
        (Method::DELETE, format!("/v1/endpoints/{ep}"), None),
    ];
    for (m, path, body) in attempts {
        let r = s.call(m.clone(), &path, Some(&b), body).await;
        assert_problem(&r, 404, None);
        assert!(
            !r.text.contains(&ep) && !r.text.contains(&msg),
            "{m} {path} leaks: {}",
            r.text
        );
    }
    for path in ["/v1/endpoints", "/v1/messages", "/v1/dead-letters"] {
        assert_eq!(s.get_ok(path, &b).await["data"], json!([]), "{path}");
    }
    // Nothing changed for A.
    let e = s.get_ok(&format!("/v1/endpoints/{ep}"), &a).await;
    assert_eq!(
        (e["enabled"].clone(), e["description"].clone()),
        (json!(true), json!(""))
    );
    s.stop().await;
}

#[tokio::test]
async fn the_operational_webhook_is_notified_signed_through_the_delivery_machinery() {
    let s = Sluice::start_with(|_| {}).await;
    let (tenant, token) = s.tenant("acme").await;
    let ops = receiver::start(Behavior::Fast, true).await.unwrap();
    assert_problem(
        &s.call(Method::GET, "/v1/operational-webhook", Some(&token), None)
            .await,
        404,
        None,
    );
    let body = Some(json!({ "url": ops.url() }));
    let r = s
        .call(
            Method::PUT,
            "/v1/operational-webhook",
            Some(&token),
            body.clone(),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert!(r.body["operational"].as_bool().unwrap() && r.body["secret"].is_string());
    let id = r.body["id"].as_str().unwrap().to_owned();
    let again = s
        .call(Method::PUT, "/v1/operational-webhook", Some(&token), body)
        .await;
    assert_eq!(
        (again.status, again.body["id"].clone()),
        (200, json!(id)),
        "one per tenant"
    );
    assert_eq!(
        s.get_ok("/v1/endpoints", &token).await["data"],
        json!([]),
        "not a regular endpoint"
    );
    // A message never fans out to it.
    s.send(&token, "order.paid", json!({})).await;

    let store = s.running.store.clone();
    let payload =
        sluice::operational_webhooks::dead_letter_payload("ep_x", "msg_x", "dlv_x", "http_500");
    sluice::operational_webhooks::send(&store, &tenant, "sluice.message.dead_lettered", payload)
        .await;
    // A notice about the operational endpoint itself is dropped.
    let own = sluice::operational_webhooks::disabled_payload(&id, "gone");
    sluice::operational_webhooks::send(&store, &tenant, "sluice.endpoint.disabled", own).await;
    for _ in 0..100 {
        if ops.record.requests() >= 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let got = ops.record.received();
    assert_eq!(got.len(), 1, "exactly the dead-letter notice");
    assert!(got[0].signature.starts_with("v1,"));
    let v: Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(v["type"], "sluice.message.dead_lettered");
    assert_eq!(v["data"]["delivery_id"], "dlv_x");
    assert!(
        sluice::clock::parse_rfc3339(v["timestamp"].as_str().unwrap()).is_ok(),
        "{v}"
    );
    let r = s
        .call(
            Method::DELETE,
            "/v1/operational-webhook",
            Some(&token),
            None,
        )
        .await;
    assert_eq!(r.status, 204);
    s.stop().await;
}

/// A tenant's share policy through the admin API: set on create or PATCH, validated (a 422
/// naming the field, nothing stored), `null` back to the default, operator only; its status
/// says where it stands, with a delivery made through the dispatcher.
#[tokio::test]
async fn a_tenants_share_is_set_and_explained_by_the_operator() {
    let s = Sluice::start_with(|raw| raw.tenant_max_share = Some(0.5)).await;
    let r = s
        .call(
            Method::POST,
            "/v1/tenants",
            Some(ADMIN),
            Some(json!({"name": "weighted", "weight": 3})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["weight"], 3);
    assert_eq!(r.body["max_share"], Value::Null);
    let id = r.body["id"].as_str().unwrap().to_owned();
    let token = r.body["token"].as_str().unwrap().to_owned();
    let path = format!("/v1/tenants/{id}");
    for (body, field) in [
        (json!({"weight": 0}), "weight"),
        (json!({"weight": 1001}), "weight"),
        (json!({"max_share": 0}), "max_share"),
        (json!({"max_share": 1.5}), "max_share"),
        (json!({"weight": "heavy"}), "weight"),
    ] {
        let r = s.call(Method::PATCH, &path, Some(ADMIN), Some(body)).await;
        assert_problem(&r, 422, Some(field));
    }
    let bad_create = json!({"name": "x", "max_share": -1});
    let r = s
        .call(Method::POST, "/v1/tenants", Some(ADMIN), Some(bad_create))
        .await;
    assert_problem(&r, 422, Some("max_share"));
    assert_eq!(s.get_ok(&path, ADMIN).await["weight"], 3, "nothing stored");
    let r = s
        .call(
            Method::PATCH,
            &path,
            Some(ADMIN),
            Some(json!({"weight": 7, "max_share": 0.25})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        (r.body["weight"].clone(), r.body["max_share"].clone()),
        (json!(7), json!(0.25))
    );
    // A field left out is kept; null returns it to the default.
    let r = s
        .call(
            Method::PATCH,
            &path,
            Some(ADMIN),
            Some(json!({"weight": null})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["weight"], Value::Null);
    assert_eq!(r.body["max_share"], 0.25);
    // The tenant itself may not change its share; another id is a 404.
    let r = s
        .call(
            Method::PATCH,
            &path,
            Some(&token),
            Some(json!({"weight": 9})),
        )
        .await;
    assert_problem(&r, 401, None);
    let r = s
        .call(
            Method::PATCH,
            "/v1/tenants/ten_nope",
            Some(ADMIN),
            Some(json!({"weight": 2})),
        )
        .await;
    assert_problem(&r, 404, None);

    // Its status: the defaults in force (weight 1 from --tenant-weight), its own ceiling.
    let status = s.get_ok(&format!("{path}/status"), ADMIN).await;
    assert_eq!(status["tenant_id"], id.as_str());
    assert_eq!(status["weight"], 1);
    assert_eq!(status["max_share"], 0.25);
    assert_eq!(status["condition"], "idle", "{status}");
    assert!(
        status["sentence"].as_str().unwrap().starts_with("idle"),
        "{status}"
    );
    // With a delivery made, the dispatcher knows it: alone, its fair share is its ceiling (a
    // ceiling binds at every moment).
    let rx = receiver::start(Behavior::Fast, false).await.unwrap();
    s.create_endpoint(&token, &rx.url(), json!({})).await;
    let m = s
        .call(
            Method::POST,
            "/v1/messages",
            Some(&token),
            Some(json!({"event_type": "a", "payload": {}})),
        )
        .await;
    assert_eq!(m.status, 202, "{}", m.text);
    let msg = m.body["id"].as_str().unwrap().to_owned();
    s.wait_for(&format!("/v1/messages/{msg}"), &token, |v| {
        v["deliveries"][0]["state"] == "delivered"
    })
    .await;
    let status = s.get_ok(&format!("{path}/status"), ADMIN).await;
    assert_eq!(status["fair_share"], 0.25, "{status}");
    assert!(status["occupancy"].as_f64().is_some(), "{status}");
    assert_eq!(status["in_flight"], 0, "{status}");
    // The tenant reads the same account share in its endpoints' evidence.
    let endpoints = s.get_ok("/v1/endpoints", &token).await;
    let ep = endpoints["data"][0]["id"].as_str().unwrap().to_owned();
    let evidence = s
        .get_ok(&format!("/v1/endpoints/{ep}/status"), &token)
        .await;
    assert_eq!(evidence["account_share"]["tenant_id"], id.as_str());
    let r = s
        .call(Method::GET, &format!("{path}/status"), Some(&token), None)
        .await;
    assert_problem(&r, 401, None);
}
