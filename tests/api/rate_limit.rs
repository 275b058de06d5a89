//! An endpoint's rate limit through the API: bad values are a 422 naming the field, a limit
//! round-trips on both stores, `null` clears it, and other changes leave it alone.

use reqwest::Method;
use serde_json::{Value, json};
use sluice::config::RawSettings;
use sluice_testkit::receiver::{self, Behavior};

use super::{Sluice, assert_problem};

#[tokio::test]
async fn rate_limit_bad_values_are_422_naming_the_field_and_store_nothing() {
    let s = Sluice::start_with(|_| {}).await;
    let (_, token) = s.tenant("acme").await;
    let t = Some(token.as_str());
    let rx = receiver::start(Behavior::Fast, false).await.unwrap();
    let url = rx.url();
    let rate = |limit: Value| json!({ "url": url, "rate_limit": limit });
    let cases = [
        (
            rate(json!({ "per_second": 0, "burst": 10 })),
            "rate_limit.per_second",
        ),
        (
            rate(json!({ "per_second": -5, "burst": 10 })),
            "rate_limit.per_second",
        ),
        (
            rate(json!({ "per_second": "fast", "burst": 10 })),
            "rate_limit.per_second",
        ),
        (
            rate(json!({ "per_second": 1e12, "burst": 10 })),
            "rate_limit.per_second",
        ),
        (
            rate(json!({ "per_second": 0.001 })),
            "rate_limit.per_second",
        ),
        (rate(json!({ "burst": 10 })), "rate_limit.per_second"),
        (
            rate(json!({ "per_second": 50, "burst": 0 })),
            "rate_limit.burst",
        ),
        (
            rate(json!({ "per_second": 50, "burst": -1 })),
            "rate_limit.burst",
        ),
        (
            rate(json!({ "per_second": 50, "burst": 1.5 })),
            "rate_limit.burst",
        ),
        (
            rate(json!({ "per_second": 50, "burst": "many" })),
            "rate_limit.burst",
        ),
        (
            rate(json!({ "per_second": 50, "burst": 100_001 })),
            "rate_limit.burst",
        ),
        (
            rate(json!({ "per_second": 50, "burst": 1e15 })),
            "rate_limit.burst",
        ),
        (
            rate(json!({ "per_second": 50, "colour": 1 })),
            "rate_limit.colour",
        ),
        (rate(json!(50)), "rate_limit"),
    ];
    for (body, field) in cases {
        let r = s
            .call(Method::POST, "/v1/endpoints", t, Some(body.clone()))
            .await;
        assert_problem(&r, 422, Some(field));
    }
    let list = s.get_ok("/v1/endpoints", &token).await;
    assert_eq!(list["data"], json!([]), "nothing stored");

    // The same checks on a change, and a refused change leaves the stored limit as it was.
    let limited = json!({ "rate_limit": { "per_second": 50, "burst": 100 } });
    let e = s.create_endpoint(&token, &url, limited).await;
    let path = format!("/v1/endpoints/{}", e["id"].as_str().unwrap());
    for (limit, field) in [
        (
            json!({ "per_second": 0, "burst": 1 }),
            "rate_limit.per_second",
        ),
        (json!({ "per_second": 5, "burst": 0 }), "rate_limit.burst"),
    ] {
        let body = json!({ "description": "changed", "rate_limit": limit });
        let r = s.call(Method::PATCH, &path, t, Some(body)).await;
        assert_problem(&r, 422, Some(field));
    }
    let got = s.get_ok(&path, &token).await;
    assert_eq!(
        got["rate_limit"],
        json!({ "per_second": 50.0, "burst": 100 })
    );
    assert_eq!(
        got["description"], "",
        "nothing of a refused change is stored"
    );
    s.stop().await;
}

/// Set, read back, changed, left alone by other changes, cleared by `null`.
async fn rate_limit_round_trips(s: &Sluice) {
    let (_, token) = s.tenant("acme").await;
    let t = Some(token.as_str());
    let rx = receiver::start(Behavior::Fast, false).await.unwrap();
    let limited = json!({ "rate_limit": { "per_second": 50, "burst": 100 } });
    let e = s.create_endpoint(&token, &rx.url(), limited).await;
    assert_eq!(e["rate_limit"], json!({ "per_second": 50.0, "burst": 100 }));
    let path = format!("/v1/endpoints/{}", e["id"].as_str().unwrap());
    let got = s.get_ok(&path, &token).await;
    assert_eq!(
        got["rate_limit"],
        json!({ "per_second": 50.0, "burst": 100 })
    );

    // A fraction of an event per second; the burst left out is one second's worth, rounded up.
    let patch = json!({ "rate_limit": { "per_second": 2.5 } });
    let r = s.call(Method::PATCH, &path, t, Some(patch)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.body["rate_limit"],
        json!({ "per_second": 2.5, "burst": 3 })
    );

    let r = s
        .call(
            Method::PATCH,
            &path,
            t,
            Some(json!({ "description": "orders" })),
        )
        .await;
    assert_eq!(
        r.body["rate_limit"],
        json!({ "per_second": 2.5, "burst": 3 })
    );

    let r = s
        .call(Method::PATCH, &path, t, Some(json!({ "rate_limit": null })))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["rate_limit"], Value::Null);
    let got = s.get_ok(&path, &token).await;
    assert_eq!(got["rate_limit"], Value::Null);

    let plain = s.create_endpoint(&token, &rx.url(), json!({})).await;
    assert_eq!(plain["rate_limit"], Value::Null);
}

/// On each store: a limit is set, shown, changed and cleared.
async fn a_limit_round_trips(raw: RawSettings) {
    let s = Sluice::start(raw).await;
    rate_limit_round_trips(&s).await;
    s.stop().await;
}

crate::support::drivers!(a_limit_round_trips);

/// The document describes the field on create, change and the endpoint as shown.
#[tokio::test]
async fn rate_limit_is_in_the_openapi_document() {
    let s = Sluice::start_with(|_| {}).await;
    let r = s.call(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let schemas = &r.body["components"]["schemas"];
    for name in ["CreateEndpoint", "UpdateEndpoint", "EndpointOut"] {
        assert!(
            schemas[name]["properties"].get("rate_limit").is_some(),
            "{name} has no rate_limit"
        );
    }
    for name in ["RateLimitIn", "RateLimitOut"] {
        assert!(
            schemas[name]["properties"].get("per_second").is_some(),
            "{name}: {}",
            schemas[name]
        );
    }
    s.stop().await;
}
