//! FIFO endpoints through the API: bad values are a 422 naming the field, the setting
//! round-trips on both stores, and a running sluice delivers a FIFO endpoint's messages one at a
//! time in acceptance order through a receiver that fails now and then, with the evidence
//! saying when a failing head holds the rest.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use sluice::config::RawSettings;
use sluice_testkit::receiver::{self, Behavior};

use super::{Sluice, assert_problem};

#[tokio::test]
async fn ordering_bad_values_are_422_naming_the_field() {
    let s = Sluice::start_with(|_| {}).await;
    let (_, token) = s.tenant("acme").await;
    let t = Some(token.as_str());
    let rx = receiver::start(Behavior::Fast, false).await.unwrap();
    for bad in [
        json!("lifo"),
        json!(1),
        json!(null),
        json!(["fifo"]),
        json!("FIFO"),
    ] {
        let body = json!({ "url": rx.url(), "ordering": bad });
        let r = s.call(Method::POST, "/v1/endpoints", t, Some(body)).await;
        assert_problem(&r, 422, Some("ordering"));
    }
    let list = s.get_ok("/v1/endpoints", &token).await;
    assert_eq!(list["data"], json!([]), "nothing stored");
    let e = s.create_endpoint(&token, &rx.url(), json!({})).await;
    let path = format!("/v1/endpoints/{}", e["id"].as_str().unwrap());
    let r = s
        .call(
            Method::PATCH,
            &path,
            t,
            Some(json!({ "ordering": "random" })),
        )
        .await;
    assert_problem(&r, 422, Some("ordering"));
    assert_eq!(s.get_ok(&path, &token).await["ordering"], "unordered");
    s.stop().await;
}

/// Each message's `n`, in the order the receiver saw them.
fn seen(rx: &receiver::Receiver) -> Vec<u64> {
    rx.record
        .received()
        .iter()
        .filter_map(|r| serde_json::from_slice::<Value>(&r.body).ok())
        .filter_map(|b| b["data"]["n"].as_u64().or_else(|| b["n"].as_u64()))
        .collect()
}

/// On each store: the setting round-trips, and 30 messages posted one after another reach a
/// FIFO endpoint in order, one at a time, though every fourth request fails.
async fn fifo_delivers_in_order(mut raw: RawSettings) {
    raw.retry_schedule = Some("100ms,100ms,100ms".into());
    let s = Sluice::start(raw).await;
    let (_, token) = s.tenant("acme").await;
    let t = Some(token.as_str());
    let flaky = receiver::start(Behavior::Flaky { every: 4 }, true)
        .await
        .unwrap();
    let fifo = s
        .create_endpoint(&token, &flaky.url(), json!({ "ordering": "fifo" }))
        .await;
    assert_eq!(fifo["ordering"], "fifo");
    let path = format!("/v1/endpoints/{}", fifo["id"].as_str().unwrap());
    assert_eq!(s.get_ok(&path, &token).await["ordering"], "fifo");
    let r = s
        .call(
            Method::PATCH,
            &path,
            t,
            Some(json!({ "description": "ledger" })),
        )
        .await;
    assert_eq!(r.body["ordering"], "fifo", "another change keeps it");
    let plain = s.create_endpoint(&token, &flaky.url(), json!({})).await;
    assert_eq!(plain["ordering"], "unordered");
    let plain_path = format!("/v1/endpoints/{}", plain["id"].as_str().unwrap());
    let r = s.call(Method::DELETE, &plain_path, t, None).await;
    assert!(r.status < 300, "{}", r.text);

    const N: u64 = 30;
    for n in 0..N {
        let body = json!({ "event_type": "ledger.entry", "payload": { "n": n } });
        let r = s.call(Method::POST, "/v1/messages", t, Some(body)).await;
        assert_eq!(r.status, 202, "{}", r.text);
    }
    let done = sluice_testkit::eventually(Duration::from_secs(60), || async {
        let mut got = seen(&flaky);
        got.dedup();
        got.len() as u64 >= N
    })
    .await;
    let got = seen(&flaky);
    assert!(done, "only {} of {N} arrived: {got:?}", got.len());
    // A failed request is retried before anything behind it: the receiver sees each message
    // until it is answered 200, then the next.
    let mut distinct = got.clone();
    distinct.dedup();
    assert_eq!(
        distinct,
        (0..N).collect::<Vec<_>>(),
        "out of order: {got:?}"
    );
    assert!(
        got.len() as u64 > N,
        "no request failed: the test saw no retry"
    );
    assert_eq!(
        flaky.record.peak_concurrency(),
        1,
        "more than one in flight"
    );

    let status = s.get_ok(&format!("{path}/status"), &token).await;
    assert_eq!(status["fifo"]["behind"], 0, "{status}");
    s.stop().await;
}

crate::support::drivers!(fifo_delivers_in_order);

/// A head that keeps failing holds the rest, and the evidence says so.
#[tokio::test]
async fn a_failing_head_is_named_in_the_evidence() {
    let s = Sluice::start_with(|raw| raw.retry_schedule = Some("100ms,100ms,30s".into())).await;
    let (_, token) = s.tenant("acme").await;
    let t = Some(token.as_str());
    let down = receiver::start(Behavior::Status(503), true).await.unwrap();
    let fifo = s
        .create_endpoint(&token, &down.url(), json!({ "ordering": "fifo" }))
        .await;
    let path = format!("/v1/endpoints/{}/status", fifo["id"].as_str().unwrap());
    let mut first = String::new();
    for n in 0..5 {
        let body = json!({ "event_type": "ledger.entry", "payload": { "n": n } });
        let r = s.call(Method::POST, "/v1/messages", t, Some(body)).await;
        assert_eq!(r.status, 202, "{}", r.text);
        if n == 0 {
            first = r.body["id"].as_str().unwrap().to_owned();
        }
    }
    let held = sluice_testkit::eventually(Duration::from_secs(20), || async {
        let st = s.get_ok(&path, &token).await;
        st["fifo"]["held_by_head"] == true
    })
    .await;
    let st = s.get_ok(&path, &token).await;
    assert!(held, "{st}");
    assert_eq!(st["fifo"]["head"]["message_id"], first.as_str(), "{st}");
    assert_eq!(st["fifo"]["behind"], 4, "{st}");
    let sentence = st["sentence"].as_str().unwrap();
    assert!(
        sentence.starts_with("FIFO: 4 deliveries wait behind message")
            && sentence.contains("HTTP 503"),
        "{sentence}"
    );
    // Only the head was ever sent.
    let sent = seen(&down);
    assert!(!sent.is_empty() && sent.iter().all(|&n| n == 0), "{sent:?}");
    s.stop().await;
}

/// The document describes the field and the evidence.
#[tokio::test]
async fn ordering_is_in_the_openapi_document() {
    let s = Sluice::start_with(|_| {}).await;
    let r = s.call(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let schemas = &r.body["components"]["schemas"];
    for name in ["CreateEndpoint", "UpdateEndpoint", "EndpointOut"] {
        assert!(
            schemas[name]["properties"].get("ordering").is_some(),
            "{name} has no ordering"
        );
    }
    assert_eq!(
        schemas["DeliveryOrder"]["enum"],
        json!(["unordered", "fifo"]),
        "{}",
        schemas["DeliveryOrder"]
    );
    assert!(
        schemas["EndpointStatus"]["properties"]
            .get("fifo")
            .is_some()
    );
    s.stop().await;
}
