//! Enqueue: messages, fan-out through the subscriptions index, idempotency, atomicity, the work
//! signal.

use super::*;

async fn check_messages_and_fan_out(store: SharedStore) {
    let t = tenant(&store).await;
    let other = tenant(&store).await;
    let all = endpoint(&store, &t, &[]).await;
    let only_a = endpoint(&store, &t, &["a"]).await;
    let _only_b = endpoint(&store, &t, &["b"]).await;
    let mut disabled = endpoint_for(&t, &["a"]);
    disabled.enabled = false;
    store.create_endpoint(&disabled).await.unwrap();
    let mut ops = endpoint_for(&t, &[]);
    ops.operational = true;
    store.create_endpoint(&ops).await.unwrap();
    let _foreign = endpoint(&store, &other, &[]).await;

    let now = now_ms();
    let m_a = message(&t, "a");
    let m_c = message(&t, "c");
    let mut m_ops = message(&t, "sluice.endpoint.disabled");
    m_ops.only_endpoint = Some(ops.id.clone());
    let out = store
        .enqueue(&[m_a.clone(), m_c.clone(), m_ops.clone()], now)
        .await
        .unwrap();
    assert_eq!(
        out,
        vec![
            Enqueued::created(m_a.id.clone(), 2),
            Enqueued::created(m_c.id.clone(), 1),
            Enqueued::created(m_ops.id.clone(), 1),
        ]
    );

    let view = store.message(&t.id, &m_a.id).await.unwrap();
    assert_eq!(view.id, m_a.id);
    assert_eq!(view.event_type, "a");
    assert_eq!(view.payload, m_a.payload);
    assert_eq!(view.created_at_ms, now);
    let targets: BTreeSet<String> = view
        .deliveries
        .iter()
        .map(|d| d.endpoint_id.clone())
        .collect();
    assert_eq!(targets, BTreeSet::from([all.id.clone(), only_a.id.clone()]));
    for d in &view.deliveries {
        assert_eq!(d.message_id, m_a.id);
        assert_eq!(d.state, DeliveryState::Ready);
        assert_eq!(d.attempts, 0);
        assert_eq!(d.visible_at_ms, now);
        assert_eq!(d.created_at_ms, now);
        assert_eq!(d.last_status, None);
    }
    let view_c = store.message(&t.id, &m_c.id).await.unwrap();
    assert_eq!(view_c.deliveries.len(), 1);
    assert_eq!(view_c.deliveries[0].endpoint_id, all.id);
    let view_ops = store.message(&t.id, &m_ops.id).await.unwrap();
    assert_eq!(view_ops.deliveries.len(), 1);
    assert_eq!(view_ops.deliveries[0].endpoint_id, ops.id);
    assert_not_found(store.message(&other.id, &m_a.id).await);
    assert_not_found(store.message(&t.id, "msg_missing").await);

    // Newest first, with a cursor.
    let listed = store.list_messages(&log_of(&t, None, 10)).await.unwrap();
    let mut expected = vec![m_a.id.clone(), m_c.id.clone(), m_ops.id.clone()];
    expected.sort();
    expected.reverse();
    assert_eq!(
        listed.iter().map(|m| m.id.clone()).collect::<Vec<_>>(),
        expected
    );
    let page = store
        .list_messages(&log_of(&t, Some(&expected[0]), 1))
        .await
        .unwrap();
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].id, expected[1]);
    assert!(
        store
            .list_messages(&log_of(&other, None, 10))
            .await
            .unwrap()
            .is_empty()
    );

    // Another tenant's message fans out only to its own endpoints.
    let foreign = store.enqueue(&[message(&other, "a")], now).await.unwrap();
    assert_eq!(foreign[0].deliveries, 1);
    assert_eq!(deliveries(&store, all_of(&t)).await.len(), 4);
}

/// Targets of one freshly enqueued message, by endpoint id.
async fn targets(store: &SharedStore, tenant: &Tenant, event_type: &str) -> BTreeSet<String> {
    let m = message(tenant, event_type);
    let out = store
        .enqueue(std::slice::from_ref(&m), now_ms())
        .await
        .unwrap();
    let view = store.message(&tenant.id, &m.id).await.unwrap();
    assert_eq!(out[0].deliveries as usize, view.deliveries.len());
    view.deliveries.into_iter().map(|d| d.endpoint_id).collect()
}

/// The fan-out index follows every change of an endpoint: filters rewritten, disabled and
/// enabled, deleted; prefix patterns and overlapping filters reach an endpoint once.
async fn check_fan_out_follows_endpoint_changes(store: SharedStore) {
    let t = tenant(&store).await;
    let other = tenant(&store).await;
    let mut paid = endpoint(&store, &t, &["order.paid", "order.*"]).await;
    let orders = endpoint(&store, &t, &["order.*"]).await;
    let deep = endpoint(&store, &t, &["order.paid.*"]).await;
    let all = endpoint(&store, &t, &[]).await;
    let _foreign = endpoint(&store, &other, &["order.paid"]).await;
    let set = |ids: &[&Endpoint]| ids.iter().map(|e| e.id.clone()).collect::<BTreeSet<_>>();

    assert_eq!(
        targets(&store, &t, "order.paid").await,
        set(&[&paid, &orders, &all])
    );
    assert_eq!(
        targets(&store, &t, "order.paid.v2").await,
        set(&[&paid, &orders, &deep, &all])
    );
    assert_eq!(targets(&store, &t, "order").await, set(&[&all]));
    assert_eq!(targets(&store, &t, "orders.paid").await, set(&[&all]));

    // Written again with the same filters (a description changed): still reached once.
    paid.description = "renamed".into();
    store.update_endpoint(&paid).await.unwrap();
    assert_eq!(
        targets(&store, &t, "order.paid").await,
        set(&[&paid, &orders, &all])
    );
    // Filters rewritten: the old patterns no longer reach it.
    paid.event_types = vec!["invoice.sent".into()];
    store.update_endpoint(&paid).await.unwrap();
    assert_eq!(
        targets(&store, &t, "order.paid").await,
        set(&[&orders, &all])
    );
    assert_eq!(
        targets(&store, &t, "invoice.sent").await,
        set(&[&paid, &all])
    );
    // No filter: every event.
    paid.event_types = Vec::new();
    store.update_endpoint(&paid).await.unwrap();
    assert_eq!(targets(&store, &t, "anything").await, set(&[&paid, &all]));

    // Disabled: skipped, and back when enabled.
    store
        .set_endpoint_enabled(&all.id, false, Some("test"), now_ms())
        .await
        .unwrap();
    assert_eq!(targets(&store, &t, "anything").await, set(&[&paid]));
    store
        .set_endpoint_enabled(&all.id, true, None, now_ms())
        .await
        .unwrap();
    assert_eq!(targets(&store, &t, "anything").await, set(&[&paid, &all]));

    // Deleted: gone from the index; its tenant deleted: the other tenant is untouched.
    store.delete_endpoint(&t.id, &paid.id).await.unwrap();
    assert_eq!(targets(&store, &t, "anything").await, set(&[&all]));
    store.delete_tenant(&t.id).await.unwrap();
    assert_eq!(targets(&store, &other, "order.paid").await.len(), 1);
}

/// A tenant with many endpoints, each on its own event type: every message reaches exactly its
/// one endpoint, and a type shared by a group reaches the whole group, in one batch.
async fn check_fan_out_at_scale(store: SharedStore) {
    const ENDPOINTS: usize = 3_000;
    const GROUP: usize = 100;
    let t = tenant(&store).await;
    let mut ids = Vec::with_capacity(ENDPOINTS);
    for i in 0..ENDPOINTS {
        let own = format!("e.{i}");
        let group = format!("g.{}", i / GROUP);
        ids.push(endpoint(&store, &t, &[&own, &group]).await.id);
    }
    let picks = [0, 1, 1_499, ENDPOINTS - 1];
    let mut batch: Vec<NewMessage> = picks
        .iter()
        .map(|i| message(&t, &format!("e.{i}")))
        .collect();
    batch.push(message(&t, "g.7"));
    batch.push(message(&t, "nobody"));
    let out = store.enqueue(&batch, now_ms()).await.unwrap();
    let reached: Vec<u32> = out.iter().map(|e| e.deliveries).collect();
    assert_eq!(reached, [1, 1, 1, 1, GROUP as u32, 0]);
    for (m, i) in batch.iter().zip(picks) {
        let view = store.message(&t.id, &m.id).await.unwrap();
        assert_eq!(view.deliveries.len(), 1);
        assert_eq!(view.deliveries[0].endpoint_id, ids[i]);
    }
    let group: BTreeSet<String> = store
        .message(&t.id, &batch[4].id)
        .await
        .unwrap()
        .deliveries
        .into_iter()
        .map(|d| d.endpoint_id)
        .collect();
    assert_eq!(group, ids[700..800].iter().cloned().collect());
}

async fn check_idempotency(store: SharedStore) {
    let t = tenant(&store).await;
    let other = tenant(&store).await;
    endpoint(&store, &t, &[]).await;
    endpoint(&store, &t, &[]).await;
    endpoint(&store, &other, &[]).await;
    let now = now_ms();

    let mut first = message(&t, "a");
    first.idempotency_key = Some("order-1".into());
    let out = store.enqueue(&[first.clone()], now).await.unwrap();
    assert_eq!(out[0], Enqueued::created(first.id.clone(), 2));

    let mut again = message(&t, "a");
    again.idempotency_key = Some("order-1".into());
    let out = store.enqueue(&[again.clone()], now + 1).await.unwrap();
    assert_eq!(out[0], Enqueued::repeat(first.id.clone(), true));
    assert_not_found(store.message(&t.id, &again.id).await);
    assert_eq!(deliveries(&store, all_of(&t)).await.len(), 2);

    // The key reused for another request: the original's id, flagged, nothing stored. A payload
    // that differs only in spacing is another payload (it would be delivered differently).
    let mut other_type = message(&t, "b");
    other_type.idempotency_key = Some("order-1".into());
    let mut other_body = message(&t, "a");
    other_body.payload = other_body.payload.replace(',', ", ");
    other_body.idempotency_key = Some("order-1".into());
    let out = store
        .enqueue(&[other_type.clone(), other_body.clone()], now + 2)
        .await
        .unwrap();
    assert_eq!(out[0], Enqueued::repeat(first.id.clone(), false));
    assert_eq!(out[1], Enqueued::repeat(first.id.clone(), false));
    assert!(out[0].mismatch && out[0].duplicate);
    assert_not_found(store.message(&t.id, &other_type.id).await);
    assert_eq!(deliveries(&store, all_of(&t)).await.len(), 2);

    // The key is per tenant.
    let mut foreign = message(&other, "a");
    foreign.idempotency_key = Some("order-1".into());
    let out = store.enqueue(&[foreign.clone()], now).await.unwrap();
    assert_eq!(out[0].id, foreign.id);
    assert!(!out[0].duplicate);

    // A repeat inside one batch resolves to the first of the batch.
    let mut x = message(&t, "a");
    x.idempotency_key = Some("order-2".into());
    let mut y = message(&t, "a");
    y.idempotency_key = Some("order-2".into());
    let plain = message(&t, "a");
    let out = store
        .enqueue(&[x.clone(), y.clone(), plain.clone()], now)
        .await
        .unwrap();
    assert_eq!(out.len(), 3);
    assert_eq!(
        (out[0].id.as_str(), out[0].duplicate),
        (x.id.as_str(), false)
    );
    assert_eq!(
        (out[1].id.as_str(), out[1].duplicate),
        (x.id.as_str(), true)
    );
    assert_eq!(out[1].deliveries, 0);
    assert_eq!(
        (out[2].id.as_str(), out[2].duplicate),
        (plain.id.as_str(), false)
    );
    assert_eq!(deliveries(&store, all_of(&t)).await.len(), 6);
}

/// An enqueue is one transaction: a batch that fails stores nothing, and its failure does not
/// disturb enqueues running at the same time (SQLite commits them in the same group).
async fn check_failed_enqueue_is_atomic(store: SharedStore) {
    let t = tenant(&store).await;
    endpoint(&store, &t, &[]).await;
    let now = now_ms();
    let taken = message(&t, "a");
    store
        .enqueue(std::slice::from_ref(&taken), now)
        .await
        .unwrap();

    let mut tasks = Vec::new();
    for i in 0..16 {
        let store = store.clone();
        let fresh = message(&t, "a");
        let batch = if i % 3 == 0 {
            // A repeated message id without an idempotency key is refused.
            vec![fresh.clone(), taken.clone()]
        } else {
            vec![fresh.clone()]
        };
        tasks.push(tokio::spawn(async move {
            (i % 3 == 0, fresh.id, store.enqueue(&batch, now).await)
        }));
    }
    for task in tasks {
        let (bad, id, result) = task.await.unwrap();
        if bad {
            assert_conflict(result);
            assert_not_found(store.message(&t.id, &id).await);
        } else {
            assert_eq!(result.unwrap()[0].deliveries, 1);
            assert_eq!(store.message(&t.id, &id).await.unwrap().deliveries.len(), 1);
        }
    }
    assert_eq!(
        store
            .list_messages(&log_of(&t, None, 100))
            .await
            .unwrap()
            .len(),
        11
    );
    assert_eq!(deliveries(&store, all_of(&t)).await.len(), 11);
}

async fn check_concurrent_duplicates(store: SharedStore) {
    let t = tenant(&store).await;
    endpoint(&store, &t, &[]).await;
    endpoint(&store, &t, &[]).await;
    let now = now_ms();
    let start = Arc::new(tokio::sync::Barrier::new(20));
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let (store, start) = (store.clone(), start.clone());
        let mut m = message(&t, "a");
        m.idempotency_key = Some("same-key".into());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            store.enqueue(&[m], now).await.expect("enqueue").remove(0)
        }));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    let originals: HashSet<&str> = answers.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(originals.len(), 1, "answers disagree: {answers:?}");
    assert_eq!(answers.iter().filter(|a| !a.duplicate).count(), 1);
    assert!(
        answers
            .iter()
            .filter(|a| a.duplicate)
            .all(|a| a.deliveries == 0)
    );
    assert_eq!(
        store
            .list_messages(&log_of(&t, None, 100))
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(deliveries(&store, all_of(&t)).await.len(), 2);
}

async fn check_work_signal(store: SharedStore) {
    let t = tenant(&store).await;
    endpoint(&store, &t, &[]).await;
    let signal = store.work_signal();
    // Consume a wake-up left by earlier operations, so the one we see is the enqueue's.
    let _ = tokio::time::timeout(Duration::from_millis(200), signal.notified()).await;
    // PostgreSQL relays the signal through its LISTEN connection, which may still be
    // connecting just after start-up; a few enqueues give it time without a fixed sleep.
    let mut woke = false;
    for _ in 0..5 {
        store.enqueue(&[message(&t, "a")], now_ms()).await.unwrap();
        if tokio::time::timeout(Duration::from_secs(2), signal.notified())
            .await
            .is_ok()
        {
            woke = true;
            break;
        }
    }
    assert!(woke, "an enqueue did not wake the work signal");
}

/// LISTEN/NOTIFY crosses processes: an enqueue through a second store instance on the same
/// database wakes the first instance's idle dispatchers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_work_signal_crosses_instances() {
    let Some(url) = support::fresh_postgres().await else {
        return;
    };
    let idle = support::postgres_store(&url).await;
    let producer = support::postgres_store(&url).await;

    // Wait until both listener connections have issued LISTEN (so a missing wake-up below is
    // the driver's fault, not start-up timing).
    let client = support::postgres_client(&url).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let listening: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND query ILIKE 'LISTEN%' AND state = 'idle'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if listening >= 2 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the store's listener never issued LISTEN"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let t = tenant(&producer).await;
    endpoint(&producer, &t, &[]).await;
    let signal = idle.work_signal();
    let _ = tokio::time::timeout(Duration::from_millis(200), signal.notified()).await;
    producer
        .enqueue(&[message(&t, "a")], now_ms())
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(2), signal.notified())
        .await
        .expect("an enqueue in another instance did not wake this one");
    let claimed = idle.claim(&req(now_ms(), 10, 10)).await.unwrap().claimed;
    assert_eq!(claimed.len(), 1);
}

/// Work only for endpoints the latest claim left out (lane full, paused, breaker open) does not
/// wake the dispatcher: its claim would find nothing it may take, so each such arrival would
/// cost the store an empty claim. Work for any other endpoint wakes it, and a claim that may
/// take both finds both.
async fn check_held_endpoints_do_not_wake(store: SharedStore) {
    let t = tenant(&store).await;
    let held = endpoint(&store, &t, &["held"]).await;
    endpoint(&store, &t, &["free"]).await;
    let signal = store.work_signal();
    let now = now_ms();
    let left_out = ClaimRequest {
        exclude: vec![held.id.clone()],
        ..req(now, 10, 10)
    };
    assert!(store.claim(&left_out).await.unwrap().claimed.is_empty());
    // Consume a wake-up left by earlier operations.
    let _ = tokio::time::timeout(Duration::from_millis(300), signal.notified()).await;
    store.enqueue(&[message(&t, "held")], now).await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(500), signal.notified())
            .await
            .is_err(),
        "woken for work only a left-out endpoint has"
    );
    store.enqueue(&[message(&t, "free")], now).await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(2), signal.notified())
            .await
            .is_ok(),
        "not woken for work another endpoint can take"
    );
    let got = store.claim(&req(now, 10, 10)).await.unwrap().claimed;
    assert_eq!(
        got.len(),
        2,
        "both deliveries wait for a claim that may take them"
    );
}

support::drivers!(
    check_held_endpoints_do_not_wake,
    check_messages_and_fan_out,
    check_fan_out_follows_endpoint_changes,
    check_fan_out_at_scale,
    check_idempotency,
    check_failed_enqueue_is_atomic,
    check_concurrent_duplicates,
    check_work_signal,
);
