//! The message log's filters on both drivers: event type (exact and `order.*`), arrival time,
//! endpoint, delivery state, and the cursor under all of them.

use super::*;

/// The ids of a tenant's log under `filter`, newest first.
async fn log(store: &SharedStore, filter: MessageFilter) -> Vec<String> {
    store
        .list_messages(&filter)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect()
}

async fn check_message_log_filters(store: SharedStore) {
    let t = tenant(&store).await;
    let other = tenant(&store).await;
    let orders = endpoint(&store, &t, &["order.*"]).await;
    let all = endpoint(&store, &t, &[]).await;
    endpoint(&store, &other, &[]).await;
    let start = now_ms();
    // One message per (type, minute), ids made in order like the API makes them.
    let kinds = [
        "order.paid",
        "order.refunded.partial",
        "invoice.sent",
        "order",
    ];
    let mut sent: Vec<(String, &str, i64)> = Vec::new();
    for minute in 0..3 {
        let at = start + minute * 60_000;
        for kind in kinds {
            let m = message(&t, kind);
            store.enqueue(std::slice::from_ref(&m), at).await.unwrap();
            sent.push((m.id, kind, at));
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    store
        .enqueue(&[message(&other, "order.paid")], start)
        .await
        .unwrap();
    let base = MessageFilter {
        tenant_id: t.id.clone(),
        limit: 100,
        ..Default::default()
    };
    let expect = |keep: &dyn Fn(&str, i64) -> bool| -> Vec<String> {
        let mut ids: Vec<String> = sent
            .iter()
            .filter(|(_, kind, at)| keep(kind, *at))
            .map(|(id, _, _)| id.clone())
            .collect();
        ids.reverse();
        ids
    };

    assert_eq!(log(&store, base.clone()).await, expect(&|_, _| true));
    let exact = MessageFilter {
        event_type: Some("order.paid".into()),
        ..base.clone()
    };
    assert_eq!(log(&store, exact).await, expect(&|k, _| k == "order.paid"));
    let prefix = MessageFilter {
        event_type: Some("order.*".into()),
        ..base.clone()
    };
    let below_order = |k: &str, _| k.starts_with("order.");
    assert_eq!(log(&store, prefix.clone()).await, expect(&below_order));

    // Arrival time: [since, until).
    let window = MessageFilter {
        since_ms: Some(start + 60_000),
        until_ms: Some(start + 120_000),
        ..base.clone()
    };
    let in_window = |_: &str, at| at == start + 60_000;
    assert_eq!(log(&store, window.clone()).await, expect(&in_window));
    let since = MessageFilter {
        since_ms: Some(start + 60_000),
        ..prefix.clone()
    };
    let later_orders = |k: &str, at| k.starts_with("order.") && at >= start + 60_000;
    assert_eq!(log(&store, since).await, expect(&later_orders));

    // Endpoint and delivery state: `order` reaches only `all`; one delivery of it delivered.
    let to_orders = MessageFilter {
        endpoint_id: Some(orders.id.clone()),
        ..base.clone()
    };
    assert_eq!(log(&store, to_orders).await, expect(&below_order));
    let claimed = store
        .claim(&req(start + 200_000, 100, 100))
        .await
        .unwrap()
        .claimed;
    let target = sent[3].0.clone();
    let done: Vec<Settlement> = claimed
        .iter()
        .filter(|c| c.message_id == target)
        .map(|c| settlement(c, SettleOutcome::Delivered, Some(attempt(Some(200), None))))
        .collect();
    assert_eq!(done.len(), 1);
    store.settle(&done, start + 200_000).await.unwrap();
    let delivered = MessageFilter {
        state: Some(DeliveryState::Delivered),
        ..base.clone()
    };
    assert_eq!(log(&store, delivered).await, vec![target.clone()]);
    let delivered_to = |endpoint: &Endpoint| MessageFilter {
        state: Some(DeliveryState::Delivered),
        endpoint_id: Some(endpoint.id.clone()),
        ..base.clone()
    };
    assert_eq!(log(&store, delivered_to(&all)).await, vec![target]);
    assert!(log(&store, delivered_to(&orders)).await.is_empty());

    // The cursor pages through a filtered log without repeats or gaps.
    let mut paged = Vec::new();
    let mut before = None;
    loop {
        let page = log(
            &store,
            MessageFilter {
                before: before.clone(),
                limit: 2,
                ..prefix.clone()
            },
        )
        .await;
        if page.is_empty() {
            break;
        }
        before = page.last().cloned();
        paged.extend(page);
    }
    assert_eq!(paged, expect(&below_order));
    let other_log = MessageFilter {
        tenant_id: other.id.clone(),
        ..base
    };
    assert_eq!(log(&store, other_log).await.len(), 1);
}

support::drivers!(check_message_log_filters);
