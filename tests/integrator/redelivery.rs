//! Resend any delivery (a delivered one included) and recover an endpoint's failed deliveries
//! since a time: each makes new attempts of the same delivery, with the same `webhook-id`.

use serde_json::json;

use sluice::config::RawSettings;

use crate::capture::Capture;

use crate::support::{self, Sluice};
use crate::{WAIT, get_ok, post_expect, wait_for};

async fn resend_and_recover_keep_the_webhook_id(mut raw: RawSettings) {
    raw.retry_schedule = Some("100ms".into());
    let s = Sluice::start(raw).await;
    let rx = Capture::start(200).await;
    let (_, token) = s.tenant("acme").await;
    let (ep, _) = s.endpoint(&token, &rx.url(), json!({})).await;

    // Resend a delivered message: a second attempt, a second request with the same id.
    let msg = s.send(&token, "order.paid", json!({ "n": 1 })).await;
    let path = format!("/v1/messages/{msg}");
    let m = wait_for(&s, &token, &path, |v| crate::states(v) == ["delivered"]).await;
    let delivery = m["deliveries"][0]["id"].as_str().unwrap().to_owned();
    let resend = format!("/v1/deliveries/{delivery}/resend");
    let r = post_expect(&s, &token, &resend, json!({}), 200).await;
    assert_eq!(r["resent"], 1);
    let attempts = format!("/v1/deliveries/{delivery}/attempts");
    let log = wait_for(&s, &token, &attempts, |v| {
        v["data"].as_array().unwrap().len() == 2
    })
    .await;
    assert!(
        log["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["status"] == 200)
    );
    assert!(crate::eventually(WAIT, || async { rx.of(&msg).len() == 2 }).await);
    let d = wait_for(&s, &token, &format!("/v1/deliveries/{delivery}"), |v| {
        v["state"] == "delivered"
    })
    .await;
    assert_eq!(
        (d["attempts"].clone(), d["last_status"].clone()),
        (json!(1), json!(200))
    );

    // Recover: three messages die against a failing receiver (an attempt and one retry each).
    rx.answer(500);
    let mut dead = Vec::new();
    for n in 0..3 {
        dead.push(s.send(&token, "order.paid", json!({ "n": 10 + n })).await);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for m in &dead {
        let path = format!("/v1/messages/{m}");
        wait_for(&s, &token, &path, |v| crate::states(v) == ["dead"]).await;
    }
    rx.answer(200);
    // Since the second one arrived: the first stays dead.
    let second = get_ok(&s, &token, &format!("/v1/messages/{}", dead[1])).await;
    let since = second["created_at"].as_str().unwrap().to_owned();
    let recover = format!("/v1/endpoints/{ep}/recover");
    let r = post_expect(&s, &token, &recover, json!({ "since": since }), 200).await;
    assert_eq!(r["resent"], 2, "{r}");
    for m in &dead[1..] {
        let path = format!("/v1/messages/{m}");
        wait_for(&s, &token, &path, |v| crate::states(v) == ["delivered"]).await;
        let seen = rx.of(m);
        assert_eq!(seen.len(), 3, "two failures, then the recovered attempt");
        assert!(seen.iter().all(|c| c.header("webhook-id") == *m));
    }
    let first = get_ok(&s, &token, &format!("/v1/messages/{}", dead[0])).await;
    assert_eq!(
        crate::states(&first),
        ["dead"],
        "before `since`: not recovered"
    );
    // A delivery in flight cannot be resent; an unknown one is 404.
    let (status, body) = s
        .post(&token, "/v1/deliveries/dlv_999999/resend", json!({}))
        .await;
    assert_eq!(status, 404, "{body}");

    let events = get_ok(&s, &token, &format!("/v1/endpoints/{ep}/events")).await;
    let kinds: Vec<&str> = events["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["recovered", "resent"], "newest first: {events}");
    s.running.stop().await;
}

support::drivers!(resend_and_recover_keep_the_webhook_id);
