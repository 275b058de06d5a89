//! The portal's flows over HTTP: an endpoint added through the form (the API's validation and
//! egress guard answer next to the field), the evidence page and its sentence when paused,
//! delivered messages in the log, hostile response bodies shown escaped, dead letters replayed.

use std::time::Duration;

use serde_json::json;
use sluice_testkit::receiver::{self, Behavior};

use crate::client::portal_client;
use crate::support::{Sluice, eventually, test_settings};

/// The endpoint id in a page that links to it.
fn endpoint_id(body: &str) -> String {
    let at = body
        .find("/console/portal/endpoints/ep_")
        .expect("an endpoint link")
        + 26;
    body[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

#[tokio::test]
async fn an_endpoint_added_in_the_portal_is_checked_by_the_api_and_receives() {
    let s = Sluice::start(test_settings()).await;
    let receiver = receiver::start(Behavior::Fast, true).await.unwrap();
    let (_, token) = s.tenant("acme").await;
    let c = portal_client(&s, &token).await;
    let form = c.get("/console/portal/endpoints/new").await;

    // The egress guard refuses a private destination, next to the URL field.
    let refused = c
        .submit(
            "/console/portal/endpoints",
            &form,
            &[("url", "http://10.1.2.3/hook")],
        )
        .await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(refused.body.contains("field-error"), "{}", refused.body);
    assert!(
        refused.body.contains("http://10.1.2.3/hook"),
        "the input is kept"
    );
    let bad_lane = c
        .submit(
            "/console/portal/endpoints",
            &form,
            &[("url", &receiver.url()), ("lane_size", "0")],
        )
        .await;
    assert_eq!(bad_lane.status, 422);
    assert!(
        bad_lane.body.contains("lane_size must be 1–10000"),
        "{}",
        bad_lane.body
    );

    let added = c
        .submit(
            "/console/portal/endpoints",
            &form,
            &[
                ("url", &receiver.url()),
                ("event_types", "order.created, order.paid"),
                ("lane_size", "3"),
                ("description", "orders <b>bold</b>"),
            ],
        )
        .await;
    assert_eq!(added.status, 200, "{}", added.body);
    assert!(added.body.contains("whsec_"), "the secret is shown once");
    let ep = endpoint_id(&added.body);
    let (_, e) = s.get(&token, &format!("/v1/endpoints/{ep}")).await;
    assert_eq!(e["lane_size"], json!(3));
    assert_eq!(e["event_types"], json!(["order.created", "order.paid"]));
    let list = c.get("/console/portal/").await;
    assert!(list.body.contains(&receiver.url()));
    assert!(
        list.body.contains("orders &lt;b&gt;bold&lt;/b&gt;"),
        "escaped"
    );
    let detail = c.get(&format!("/console/portal/endpoints/{ep}")).await;
    assert!(
        !detail.body.contains("whsec_"),
        "the secret is not shown again"
    );

    // Messages sent through the API are delivered and show in the log.
    let m1 = s.send(&token, "order.created", json!({ "n": 1 })).await;
    let m2 = s.send(&token, "order.paid", json!({ "n": 2 })).await;
    assert!(
        eventually(Duration::from_secs(20), || async {
            receiver.record.requests() >= 2
        })
        .await
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            let log = c.get("/console/portal/messages").await;
            log.body.matches("badge delivered").count() >= 2
        })
        .await
    );
    let log = c
        .get(&format!(
            "/console/portal/messages?endpoint={ep}&state=delivered"
        ))
        .await;
    assert!(
        log.body.contains(&m1) && log.body.contains(&m2),
        "{}",
        log.body
    );
    let detail = c.get(&format!("/console/portal/messages/{m1}")).await;
    assert_eq!(detail.status, 200);
    assert!(detail.body.contains("&quot;n&quot;: 1") || detail.body.contains("\"n\": 1"));
    assert!(
        detail.body.contains("badge ok"),
        "the 200 attempt: {}",
        detail.body
    );

    // The log filters by event type (exact or a prefix pattern) and by arrival time.
    let paid = c
        .get("/console/portal/messages?event_type=order.paid")
        .await;
    assert!(
        paid.body.contains(&m2) && !paid.body.contains(&m1),
        "{}",
        paid.body
    );
    let orders = c.get("/console/portal/messages?event_type=order.*").await;
    assert!(orders.body.contains(&m1) && orders.body.contains(&m2));
    let later = c
        .get("/console/portal/messages?since=2999-01-01T00:00:00Z")
        .await;
    assert!(!later.body.contains(&m1) && later.body.contains("No message matches"));
    let bad = c.get("/console/portal/messages?since=yesterday").await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("since"), "{}", bad.body);

    // Resend a delivered message: the receiver gets it again, with the same webhook-id.
    let before = receiver.record.requests();
    let delivery = s.message(&token, &m1).await["deliveries"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        detail
            .body
            .contains(&format!("/console/portal/deliveries/{delivery}/resend"))
    );
    let resent = c
        .submit(
            &format!("/console/portal/deliveries/{delivery}/resend"),
            &detail,
            &[],
        )
        .await;
    assert_eq!(resent.status, 303, "{}", resent.body);
    assert_eq!(resent.location(), format!("/console/portal/messages/{m1}"));
    assert!(
        eventually(Duration::from_secs(20), || async {
            receiver.record.requests() > before
        })
        .await
    );
    let for_m1 = receiver
        .record
        .received()
        .into_iter()
        .filter(|r| r.id == m1)
        .count();
    assert_eq!(for_m1, 2, "the first delivery and the resend");

    // The evidence page, then paused: the sentence says so, and the JSON status agrees.
    let page = c.get(&format!("/console/portal/endpoints/{ep}")).await;
    assert!(page.body.contains("id=\"sentence\""));
    assert!(page.body.contains("you can receive"), "{}", page.body);
    assert!(page.body.contains("<svg"), "charts");
    let paused = c
        .submit(
            &format!("/console/portal/endpoints/{ep}/disable"),
            &page,
            &[],
        )
        .await;
    assert_eq!(paused.status, 303);
    let page = c.get(&format!("/console/portal/endpoints/{ep}")).await;
    assert!(
        page.body.contains("disabled (paused in the portal)"),
        "{}",
        page.body
    );
    let (_, st) = s.get(&token, &format!("/v1/endpoints/{ep}/status")).await;
    assert!(
        st["sentence"].as_str().unwrap().starts_with("disabled"),
        "{st}"
    );
    assert!(
        page.body.contains("disabled"),
        "the event log shows the pause"
    );
    let enabled = c
        .submit(
            &format!("/console/portal/endpoints/{ep}/enable"),
            &page,
            &[],
        )
        .await;
    assert_eq!(enabled.status, 303);

    // Edit: a blank lane clears the override; rotate shows a new secret; delete asks first.
    let edit = c.get(&format!("/console/portal/endpoints/{ep}/edit")).await;
    assert!(edit.body.contains("value=\"3\""));
    let saved = c
        .submit(
            &format!("/console/portal/endpoints/{ep}/edit"),
            &edit,
            &[
                ("url", &receiver.url()),
                ("lane_size", ""),
                ("event_types", ""),
            ],
        )
        .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let (_, e) = s.get(&token, &format!("/v1/endpoints/{ep}")).await;
    assert_eq!(
        (e["lane_size"].clone(), e["event_types"].clone()),
        (json!(null), json!([]))
    );
    let rotated = c
        .submit(
            &format!("/console/portal/endpoints/{ep}/rotate-secret"),
            &edit,
            &[],
        )
        .await;
    assert_eq!(rotated.status, 200);
    assert!(rotated.body.contains("whsec_"));
    let confirm = c
        .get(&format!("/console/portal/endpoints/{ep}/delete"))
        .await;
    assert_eq!(confirm.status, 200);
    let gone = c
        .submit(
            &format!("/console/portal/endpoints/{ep}/delete"),
            &confirm,
            &[],
        )
        .await;
    assert_eq!((gone.status, gone.location()), (303, "/console/portal/"));
    assert_eq!(s.get(&token, &format!("/v1/endpoints/{ep}")).await.0, 404);
}

#[tokio::test]
async fn hostile_response_bodies_are_shown_as_text() {
    let s = Sluice::start(test_settings()).await;
    let hostile = "<script>alert('x')</script><img src=x onerror=alert(1)>";
    let receiver = receiver::start(
        Behavior::Body {
            status: 200,
            body: hostile.as_bytes().to_vec().into(),
        },
        false,
    )
    .await
    .unwrap();
    let (_, token) = s.tenant("acme").await;
    s.endpoint(&token, &receiver.url(), json!({})).await;
    let msg = s
        .send(
            &token,
            "x.y",
            json!({ "html": "</pre><script>alert(2)</script>" }),
        )
        .await;
    assert!(
        eventually(Duration::from_secs(20), || async {
            s.message(&token, &msg).await["deliveries"][0]["state"] == json!("delivered")
        })
        .await
    );
    let c = portal_client(&s, &token).await;
    let page = c.get(&format!("/console/portal/messages/{msg}")).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body
            .contains("&lt;script&gt;alert('x')&lt;/script&gt;"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("<script>alert"), "{}", page.body);
    assert!(!page.body.contains("<img src=x"));
    assert!(page.body.contains("&lt;/pre&gt;&lt;script&gt;alert(2)"));
}

#[tokio::test]
async fn dead_letters_are_listed_and_replayed_from_the_portal() {
    let mut raw = test_settings();
    raw.retry_schedule = Some("100ms".into());
    let s = Sluice::start(raw).await;
    // Fails twice (the attempt and its one retry), then answers 200: the replay delivers.
    let receiver = receiver::start(
        Behavior::FailFirst {
            fail_first: 2,
            status: 500,
        },
        false,
    )
    .await
    .unwrap();
    let (_, token) = s.tenant("acme").await;
    let (ep, _) = s.endpoint(&token, &receiver.url(), json!({})).await;
    let msg = s.send(&token, "order.created", json!({ "n": 1 })).await;
    assert!(
        eventually(Duration::from_secs(20), || async {
            s.message(&token, &msg).await["deliveries"][0]["state"] == json!("dead")
        })
        .await
    );
    let c = portal_client(&s, &token).await;
    let dead = c.get("/console/portal/dead-letters").await;
    assert!(dead.body.contains(&msg), "{}", dead.body);
    let page = c.get(&format!("/console/portal/endpoints/{ep}")).await;
    assert!(
        page.body.contains("Replay all dead letters"),
        "{}",
        page.body
    );
    let detail = c.get(&format!("/console/portal/messages/{msg}")).await;
    assert_eq!(
        detail.body.matches("badge bad").count(),
        2,
        "two failed attempts"
    );
    let delivery = s.message(&token, &msg).await["deliveries"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let replayed = c
        .submit(
            &format!("/console/portal/deliveries/{delivery}/replay"),
            &detail,
            &[],
        )
        .await;
    assert_eq!(replayed.status, 303);
    assert_eq!(
        replayed.location(),
        format!("/console/portal/messages/{msg}")
    );
    assert!(
        eventually(Duration::from_secs(20), || async {
            s.message(&token, &msg).await["deliveries"][0]["state"] == json!("delivered")
        })
        .await
    );
    let (_, events) = s.get(&token, &format!("/v1/endpoints/{ep}/events")).await;
    assert!(events.to_string().contains("replayed"), "{events}");
}

/// A `v1a` endpoint's page names where its public keys are published (the JWKS); a `v1`
/// endpoint's page has no key set to name.
#[tokio::test]
async fn a_v1a_endpoints_page_links_its_published_keys() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let (status, v1a) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({ "url": "http://127.0.0.1:9/hook", "signature_scheme": "v1a" }),
        )
        .await;
    assert_eq!(status, 201, "{v1a}");
    let (_, v1) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({ "url": "http://127.0.0.1:9/other" }),
        )
        .await;
    let c = portal_client(&s, &token).await;
    let id = v1a["id"].as_str().unwrap();
    let page = c.get(&format!("/console/portal/endpoints/{id}")).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains(&format!("/v1/endpoints/{id}/jwks.json")),
        "{}",
        page.body
    );
    let other = c
        .get(&format!(
            "/console/portal/endpoints/{}",
            v1["id"].as_str().unwrap()
        ))
        .await;
    assert!(!other.body.contains("jwks.json"), "{}", other.body);
    s.stop().await;
}
