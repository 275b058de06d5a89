//! Trace context in the portal: the endpoint form's "Send trace context" checkbox turns the
//! endpoint's `trace_context` on and off, and a message's page shows each attempt's trace id.

use serde_json::json;

use crate::client::portal_client;
use crate::support::receiver::{self, Behavior};
use crate::support::{Sluice, eventually, test_settings};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

#[tokio::test]
async fn the_portal_sets_trace_context_and_shows_each_attempts_trace() {
    let s = Sluice::start(test_settings()).await;
    let rx = receiver::start(Behavior::Fast, false).await.unwrap();
    let (_, token) = s.tenant("acme").await;
    let c = portal_client(&s, &token).await;
    let form = c.get("/console/portal/endpoints/new").await;
    assert!(form.body.contains("Send trace context"), "{}", form.body);
    let added = c
        .submit(
            "/console/portal/endpoints",
            &form,
            &[("url", rx.url().as_str()), ("trace_context", "on")],
        )
        .await;
    assert_eq!(added.status, 200, "{}", added.body);
    let (_, list) = s.get(&token, "/v1/endpoints").await;
    let id = list["data"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(list["data"][0]["trace_context"], true, "{list}");

    // Saved without the box ticked: off again.
    let edit = c.get(&format!("/console/portal/endpoints/{id}/edit")).await;
    assert!(
        edit.body
            .contains(r#"name="trace_context" value="on" checked"#),
        "{}",
        edit.body
    );
    let saved = c
        .submit(
            &format!("/console/portal/endpoints/{id}/edit"),
            &edit,
            &[("url", rx.url().as_str())],
        )
        .await;
    assert!(saved.status == 303 || saved.status == 200, "{}", saved.body);
    let (_, shown) = s.get(&token, &format!("/v1/endpoints/{id}")).await;
    assert_eq!(shown["trace_context"], false, "{shown}");

    let r = s
        .http
        .post(format!("{}/v1/messages", s.base))
        .bearer_auth(&token)
        .header("traceparent", format!("00-{TRACE_ID}-00f067aa0ba902b7-01"))
        .json(&json!({ "event_type": "order.created", "payload": {} }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let msg = r.json::<serde_json::Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        eventually(std::time::Duration::from_secs(20), || async {
            s.message(&token, &msg).await["deliveries"][0]["state"] == json!("delivered")
        })
        .await
    );
    let page = c.get(&format!("/console/portal/messages/{msg}")).await;
    assert!(page.body.contains(TRACE_ID), "{}", page.body);
    s.running.stop().await;
}
