//! Messages, deliveries and attempts; idempotency under concurrency; dead letters and replay.

use reqwest::Method;
use serde_json::{Value, json};
use sluice_testkit::receiver::{self, Behavior};

use super::{Sluice, assert_problem, states};

#[tokio::test]
async fn messages_deliveries_and_attempts_per_message_and_per_endpoint() {
    let s = Sluice::start_with(|_| {}).await;
    let (_, token) = s.tenant("acme").await;
    let rx = receiver::start(Behavior::Fast, true).await.unwrap();
    let ep = s.create_endpoint(&token, &rx.url(), json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let msg = s.send(&token, "order.paid", json!({ "order": 42 })).await;
    s.wait_for(
        &format!("/v1/messages/{msg}/deliveries?state=delivered"),
        &token,
        |v| states(v) == ["delivered"],
    )
    .await;
    assert_eq!(rx.record.received()[0].body.as_ref(), br#"{"order":42}"#);

    let m = s.get_ok(&format!("/v1/messages/{msg}"), &token).await;
    assert_eq!(
        (m["payload"].clone(), m["event_type"].clone()),
        (json!({ "order": 42 }), json!("order.paid"))
    );
    assert_eq!(m["deliveries"][0]["endpoint_id"], ep.as_str());
    let list = s.get_ok("/v1/messages?limit=1", &token).await;
    assert_eq!(list["data"][0]["id"], msg.as_str());
    assert_eq!(list["next"], msg.as_str(), "a full page has a cursor");
    let after = s
        .get_ok(
            &format!(
                "/v1/messages?limit=1&after={}",
                list["next"].as_str().unwrap()
            ),
            &token,
        )
        .await;
    assert_eq!(
        (after["data"].clone(), after["next"].clone()),
        (json!([]), json!(null))
    );

    let none = s
        .get_ok(&format!("/v1/messages/{msg}/deliveries?state=dead"), &token)
        .await;
    assert_eq!(none["data"], json!([]));
    let by_ep = s
        .get_ok(
            &format!("/v1/endpoints/{ep}/deliveries?state=delivered"),
            &token,
        )
        .await;
    let delivery = by_ep["data"][0]["id"].as_str().unwrap().to_owned();
    assert!(delivery.starts_with("dlv_"), "{delivery}");
    assert_eq!(by_ep["data"][0]["message_id"], msg.as_str());
    // Only the prefixed id is a delivery id; the bare row number is not.
    let bare = delivery.trim_start_matches("dlv_");
    let r = s
        .call(
            Method::GET,
            &format!("/v1/deliveries/{bare}"),
            Some(&token),
            None,
        )
        .await;
    assert_problem(&r, 404, None);

    for path in [
        format!("/v1/messages/{msg}/attempts"),
        format!("/v1/endpoints/{ep}/attempts"),
        format!("/v1/deliveries/{delivery}/attempts"),
    ] {
        let a = s.get_ok(&path, &token).await;
        let a = &a["data"][0];
        assert_eq!(
            (a["delivery_id"].as_str(), a["status"].as_u64()),
            (Some(delivery.as_str()), Some(200)),
            "{path}"
        );
        assert!(a["id"].as_str().unwrap().starts_with("att_"), "{path}: {a}");
        let started = a["started_at"].as_str().unwrap();
        assert!(sluice::clock::parse_rfc3339(started).is_ok(), "{started}");
        assert!(
            a["duration_ms"].is_u64() && a["error_kind"].is_null() && a.get("response").is_some()
        );
    }
    let d = s
        .get_ok(&format!("/v1/deliveries/{delivery}"), &token)
        .await;
    assert_eq!(
        (d["state"].clone(), d["attempts"].clone()),
        (json!("delivered"), json!(1))
    );
    assert_eq!(d["attempt_log"].as_array().unwrap().len(), 1);
    // Replaying what is not dead is a conflict.
    let r = s
        .call(
            Method::POST,
            &format!("/v1/deliveries/{delivery}/replay"),
            Some(&token),
            None,
        )
        .await;
    assert_problem(&r, 409, None);
    s.stop().await;
}

/// A key repeated with the same request is the original (200); repeated with another event
/// type or payload it is refused with 422 naming the key, after the IETF Idempotency-Key draft
/// (409 there is for a request still in progress), and nothing is stored.
#[tokio::test]
async fn a_reused_idempotency_key_with_another_request_is_422_and_stores_nothing() {
    let s = Sluice::start_with(|_| {}).await;
    let (_, token) = s.tenant("acme").await;
    let post = |body: Value| {
        let body = serde_json::to_vec(&body).unwrap();
        let s = &s;
        let token = token.clone();
        async move {
            s.raw(
                Method::POST,
                "/v1/messages",
                Some(&token),
                Some(body),
                "application/json",
                &[("idempotency-key", "order-42")],
            )
            .await
        }
    };
    let first = post(json!({ "event_type": "order.created", "payload": { "order": 42 } })).await;
    assert_eq!(first.status, 202, "{}", first.text);
    let id = first.body["id"].as_str().unwrap().to_owned();
    let same = post(json!({ "event_type": "order.created", "payload": { "order": 42 } })).await;
    assert_eq!(
        (same.status, same.body["id"].as_str()),
        (200, Some(id.as_str()))
    );
    assert_eq!(same.body["duplicate"], true);
    for other in [
        json!({ "event_type": "order.created", "payload": { "order": 43 } }),
        json!({ "event_type": "order.cancelled", "payload": { "order": 42 } }),
    ] {
        let r = post(other).await;
        assert_problem(&r, 422, Some("Idempotency-Key"));
        assert!(
            r.body["detail"].as_str().unwrap().contains(&id),
            "{}",
            r.text
        );
    }
    let log = s.get_ok("/v1/messages", &token).await;
    assert_eq!(
        log["data"].as_array().unwrap().len(),
        1,
        "nothing stored: {log}"
    );
    s.stop().await;
}

#[tokio::test]
async fn twenty_concurrent_duplicates_create_one_message() {
    let s = Sluice::start_with(|_| {}).await;
    let (_, token) = s.tenant("acme").await;
    let rx = receiver::start(Behavior::Fast, true).await.unwrap();
    s.create_endpoint(&token, &rx.url(), json!({})).await;
    let body =
        serde_json::to_vec(&json!({ "event_type": "order.paid", "payload": { "n": 1 } })).unwrap();
    let calls = (0..20).map(|_| {
        s.raw(
            Method::POST,
            "/v1/messages",
            Some(&token),
            Some(body.clone()),
            "application/json",
            &[("idempotency-key", "order-1")],
        )
    });
    let replies = futures_util::future::join_all(calls).await;
    let ids: std::collections::HashSet<String> = replies
        .iter()
        .map(|r| r.body["id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(ids.len(), 1, "one message id for all twenty");
    let created = replies.iter().filter(|r| r.status == 202).count();
    let repeats = replies
        .iter()
        .filter(|r| r.status == 200 && r.body["duplicate"] == true)
        .count();
    assert_eq!((created, repeats), (1, 19));
    assert_eq!(
        s.get_ok("/v1/messages", &token).await["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let id = ids.into_iter().next().unwrap();
    s.wait_for(&format!("/v1/messages/{id}/deliveries"), &token, |v| {
        states(v) == ["delivered"]
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(rx.record.requests(), 1, "delivered once");
    s.stop().await;
}

#[tokio::test]
async fn replay_makes_a_dead_letter_deliverable_again() {
    let s = Sluice::start_with(|raw| raw.retry_schedule = Some("100ms".into())).await;
    let (_, token) = s.tenant("acme").await;
    // The first four requests fail: two messages die after two attempts each, then it recovers.
    let rx = receiver::start(
        Behavior::FailFirst {
            fail_first: 4,
            status: 500,
        },
        false,
    )
    .await
    .unwrap();
    let ep = s.create_endpoint(&token, &rx.url(), json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let first = s.send(&token, "order.paid", json!({ "n": 1 })).await;
    let second = s.send(&token, "order.paid", json!({ "n": 2 })).await;
    for m in [&first, &second] {
        s.wait_for(&format!("/v1/messages/{m}/deliveries"), &token, |v| {
            states(v) == ["dead"]
        })
        .await;
    }
    let dead = s.get_ok("/v1/dead-letters", &token).await;
    assert_eq!(dead["data"].as_array().unwrap().len(), 2);
    assert_eq!(dead["data"][0]["attempts"], 2);
    assert_eq!(
        s.get_ok(&format!("/v1/dead-letters?endpoint_id={ep}"), &token)
            .await["data"],
        dead["data"]
    );
    let one = dead["data"][0]["id"].as_str().unwrap().to_owned();
    let attempts = s
        .get_ok(&format!("/v1/deliveries/{one}/attempts"), &token)
        .await;
    assert_eq!(attempts["data"][0]["status"], 500);

    let r = s
        .call(
            Method::POST,
            &format!("/v1/deliveries/{one}/replay"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(
        (r.status, r.body["replayed"].clone()),
        (200, json!(1)),
        "{}",
        r.text
    );
    let d = s
        .wait_for(&format!("/v1/deliveries/{one}"), &token, |v| {
            v["state"] == "delivered"
        })
        .await;
    assert_eq!(d["attempts"], 1, "attempts were reset");

    let r = s
        .call(
            Method::POST,
            &format!("/v1/endpoints/{ep}/dead-letters/replay"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(
        (r.status, r.body["replayed"].clone()),
        (200, json!(1)),
        "{}",
        r.text
    );
    s.wait_for(
        &format!("/v1/endpoints/{ep}/deliveries?state=delivered"),
        &token,
        |v| v["data"].as_array().unwrap().len() == 2,
    )
    .await;
    assert_eq!(
        s.get_ok("/v1/dead-letters", &token).await["data"],
        json!([])
    );
    let events = s
        .get_ok(&format!("/v1/endpoints/{ep}/events"), &token)
        .await;
    let replays = events["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "replayed")
        .count();
    assert_eq!(replays, 2, "both replays recorded: {events}");
    s.stop().await;
}
