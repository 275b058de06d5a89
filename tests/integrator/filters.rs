//! Wildcard event-type filters (`order.*`) decide who receives what; the message log filters by
//! event type, arrival time, endpoint and delivery state, and pages through the result.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use sluice::config::RawSettings;

use crate::capture::Capture;

use crate::support::{self, Sluice};
use crate::{WAIT, get_ok, wait_for};

/// The ids of a log page, and its cursor.
fn page(v: &Value) -> (Vec<String>, Option<String>) {
    let ids = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect();
    (ids, v["next"].as_str().map(str::to_owned))
}

async fn wildcards_route_and_the_log_filters(mut raw: RawSettings) {
    raw.retry_schedule = Some("100ms".into());
    let s = Sluice::start(raw).await;
    let orders_rx = Capture::start(200).await;
    let invoices_rx = Capture::start(500).await;
    let (_, token) = s.tenant("acme").await;
    let (orders, _) = s
        .endpoint(
            &token,
            &orders_rx.url(),
            json!({ "event_types": ["order.*"] }),
        )
        .await;
    let (invoices, _) = s
        .endpoint(
            &token,
            &invoices_rx.url(),
            json!({ "event_types": ["invoice.sent"] }),
        )
        .await;

    let first = s.send(&token, "order.paid", json!({ "n": 1 })).await;
    let deep = s
        .send(&token, "order.refunded.partial", json!({ "n": 2 }))
        .await;
    let bare = s.send(&token, "order", json!({ "n": 3 })).await;
    let invoice = s.send(&token, "invoice.sent", json!({ "n": 4 })).await;
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let boundary = sluice::clock::rfc3339(sluice::clock::now_ms());
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let late = s.send(&token, "order.paid", json!({ "n": 5 })).await;

    // Routing: `order.*` is everything below `order.`, not `order` itself.
    for m in [&first, &deep, &late] {
        let path = format!("/v1/messages/{m}");
        wait_for(&s, &token, &path, |v| crate::states(v) == ["delivered"]).await;
    }
    assert!(crate::eventually(WAIT, || async { invoices_rx.of(&invoice).len() == 2 }).await);
    let got: BTreeSet<String> = orders_rx
        .seen()
        .iter()
        .map(|c| c.header("webhook-id"))
        .collect();
    assert_eq!(
        got,
        BTreeSet::from([first.clone(), deep.clone(), late.clone()])
    );
    let bare_view = get_ok(&s, &token, &format!("/v1/messages/{bare}")).await;
    assert_eq!(
        bare_view["deliveries"],
        json!([]),
        "no endpoint subscribes to `order`"
    );
    // The invoices endpoint fails twice: its delivery is dead.
    let path = format!("/v1/messages/{invoice}");
    wait_for(&s, &token, &path, |v| crate::states(v) == ["dead"]).await;

    let ids = |xs: &[&String]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let log = |query: String| {
        let s = &s;
        let token = token.clone();
        async move { page(&get_ok(s, &token, &format!("/v1/messages?{query}")).await) }
    };
    let everything = log(String::new()).await.0;
    assert_eq!(
        everything,
        ids(&[&late, &invoice, &bare, &deep, &first]),
        "newest first"
    );
    assert_eq!(
        log("event_type=order.*".into()).await.0,
        ids(&[&late, &deep, &first])
    );
    assert_eq!(
        log("event_type=order.paid".into()).await.0,
        ids(&[&late, &first])
    );
    assert_eq!(log("event_type=order".into()).await.0, ids(&[&bare]));
    let since = log(format!("since={boundary}")).await.0;
    assert_eq!(since, ids(&[&late]));
    let until = log(format!("until={boundary}&event_type=order.*")).await.0;
    assert_eq!(until, ids(&[&deep, &first]));
    assert_eq!(
        log(format!("endpoint_id={invoices}")).await.0,
        ids(&[&invoice])
    );
    assert_eq!(log("state=dead".into()).await.0, ids(&[&invoice]));
    let delivered = log(format!("endpoint_id={orders}&state=delivered")).await.0;
    assert_eq!(delivered, ids(&[&late, &deep, &first]));
    assert!(
        log(format!("endpoint_id={orders}&state=dead"))
            .await
            .0
            .is_empty()
    );

    // The cursor pages a filtered log: one at a time, no repeat, no gap.
    let mut paged = Vec::new();
    let mut query = "event_type=order.*&limit=1".to_owned();
    loop {
        let (ids, next) = log(query.clone()).await;
        paged.extend(ids);
        match next {
            Some(after) => query = format!("event_type=order.*&limit=1&after={after}"),
            None => break,
        }
    }
    assert_eq!(paged, ids(&[&late, &deep, &first]));
    s.running.stop().await;
}

support::drivers!(wildcards_route_and_the_log_filters);
