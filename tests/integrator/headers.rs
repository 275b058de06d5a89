//! An endpoint's own headers go out with every attempt, retries included, beside sluice's own;
//! a change replaces them for the next delivery.

use serde_json::json;

use crate::capture::Capture;
use crate::support::Sluice;
use crate::{WAIT, get_ok, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_headers_go_with_every_attempt_and_follow_a_change() {
    let s = Sluice::start_with(|raw| {
        raw.retry_schedule = Some("200ms,200ms,200ms".into());
    })
    .await;
    let rx = Capture::start(503).await;
    let (_, token) = s.tenant("acme").await;
    let headers = json!({ "X-Route": "eu-1", "Authorization": "Bearer receiver-token" });
    let (ep, _) = s
        .endpoint(&token, &rx.url(), json!({ "headers": headers }))
        .await;
    let shown = get_ok(&s, &token, &format!("/v1/endpoints/{ep}")).await;
    assert_eq!(
        shown["headers"],
        json!({ "authorization": "Bearer receiver-token", "x-route": "eu-1" }),
        "stored with lower-case names"
    );

    let msg = s.send(&token, "order.created", json!({ "order": 1 })).await;
    assert!(crate::eventually(WAIT, || async { rx.of(&msg).len() >= 2 }).await);
    rx.answer(200);
    let path = format!("/v1/messages/{msg}");
    wait_for(&s, &token, &path, |m| crate::states(m) == ["delivered"]).await;
    let attempts = rx.of(&msg);
    assert!(attempts.len() >= 3, "two failures, then a success");
    for got in &attempts {
        assert_eq!(got.header("x-route"), "eu-1");
        assert_eq!(got.header("authorization"), "Bearer receiver-token");
        assert_eq!(got.header("content-type"), "application/json");
        assert_eq!(got.header("webhook-id"), msg);
        assert!(got.header("webhook-signature").starts_with("v1,"));
    }

    // A change replaces the headers for the next delivery.
    let change = json!({ "headers": { "X-Other": "2" } });
    let (status, body) = crate::patch(&s, &token, &format!("/v1/endpoints/{ep}"), change).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["headers"], json!({ "x-other": "2" }));
    let next = s.send(&token, "order.created", json!({ "order": 2 })).await;
    assert!(crate::eventually(WAIT, || async { !rx.of(&next).is_empty() }).await);
    let got = &rx.of(&next)[0];
    assert_eq!(
        (got.header("x-other"), got.header("x-route")),
        ("2".to_owned(), String::new())
    );
    s.running.stop().await;
}

/// A custom `User-Agent` replaces sluice's own: one header goes out, not two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_user_agent_replaces_sluices_own() {
    let s = Sluice::start_with(|_| {}).await;
    let rx = Capture::start(200).await;
    let (_, token) = s.tenant("acme").await;
    let headers = json!({ "User-Agent": "acme-hooks/2" });
    s.endpoint(&token, &rx.url(), json!({ "headers": headers }))
        .await;
    let plain = Capture::start(200).await;
    s.endpoint(&token, &plain.url(), json!({})).await;
    let msg = s.send(&token, "order.created", json!({ "order": 1 })).await;
    assert!(crate::eventually(WAIT, || async { !rx.of(&msg).is_empty() }).await);
    let got = &rx.of(&msg)[0];
    let agents: Vec<_> = got.headers.get_all("user-agent").iter().collect();
    assert_eq!(agents, ["acme-hooks/2"], "exactly the endpoint's own");
    assert!(crate::eventually(WAIT, || async { !plain.of(&msg).is_empty() }).await);
    let got = &plain.of(&msg)[0];
    assert!(
        got.header("user-agent").starts_with("sluice/"),
        "sluice's by default"
    );
    s.running.stop().await;
}
