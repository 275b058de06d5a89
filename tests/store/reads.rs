//! Listings and operator reads: deliveries, attempts, queue statistics.

use super::*;

async fn check_list_deliveries_and_attempts(store: SharedStore) {
    let t = tenant(&store).await;
    let other = tenant(&store).await;
    let e1 = endpoint(&store, &t, &[]).await;
    endpoint(&store, &t, &[]).await;
    endpoint(&store, &other, &[]).await;
    let now = now_ms();
    let m = message(&t, "a");
    store.enqueue(std::slice::from_ref(&m), now).await.unwrap();
    enqueue_n(&store, &t, "a", 2, now).await;
    // Not yet due, so the claims below take only this tenant's work.
    enqueue_n(&store, &other, "a", 2, now + 3_600_000).await;

    let all = deliveries(&store, all_of(&t)).await;
    assert_eq!(all.len(), 6);
    assert!(all.windows(2).all(|w| w[0].id < w[1].id), "not in id order");

    let of_message = deliveries(
        &store,
        DeliveryFilter {
            message_id: Some(m.id.clone()),
            ..all_of(&t)
        },
    )
    .await;
    assert_eq!(of_message.len(), 2);
    assert!(of_message.iter().all(|d| d.message_id == m.id));
    let of_both = deliveries(
        &store,
        DeliveryFilter {
            message_id: Some(m.id.clone()),
            endpoint_id: Some(e1.id.clone()),
            ..all_of(&t)
        },
    )
    .await;
    assert_eq!(of_both.len(), 1);
    assert_eq!(of_both[0].endpoint_id, e1.id);
    let of_endpoint = deliveries(
        &store,
        DeliveryFilter {
            endpoint_id: Some(e1.id.clone()),
            ..all_of(&t)
        },
    )
    .await;
    assert_eq!(of_endpoint.len(), 3);
    assert!(of_endpoint.iter().all(|d| d.endpoint_id == e1.id));
    // Another tenant's filter sees none of it.
    let foreign = deliveries(
        &store,
        DeliveryFilter {
            message_id: Some(m.id.clone()),
            ..all_of(&other)
        },
    )
    .await;
    assert!(foreign.is_empty());

    // Paging by cursor visits every row once.
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = deliveries(
            &store,
            DeliveryFilter {
                after,
                limit: 4,
                ..all_of(&t)
            },
        )
        .await;
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 4);
        after = page.last().map(|d| d.id);
        paged.extend(page.into_iter().map(|d| d.id));
    }
    assert_eq!(paged, all.iter().map(|d| d.id).collect::<Vec<_>>());

    // By state, after a retry and a dead letter.
    let claimed = store.claim(&req(now, 2, 1)).await.unwrap().claimed;
    assert_eq!(claimed.len(), 2);
    let applied = store
        .settle(
            &[
                settlement(
                    &claimed[0],
                    SettleOutcome::Retry { at_ms: now + 100 },
                    Some(attempt(None, Some("connection_refused"))),
                ),
                settlement(
                    &claimed[1],
                    SettleOutcome::Dead {
                        reason: "gone".into(),
                    },
                    Some(attempt(Some(410), None)),
                ),
            ],
            now,
        )
        .await
        .unwrap();
    assert_eq!(applied.len(), 2);
    let dead = deliveries(
        &store,
        DeliveryFilter {
            state: Some(DeliveryState::Dead),
            ..all_of(&t)
        },
    )
    .await;
    assert_eq!(
        dead.iter().map(|d| d.id).collect::<Vec<_>>(),
        vec![claimed[1].delivery_id]
    );
    let ready = deliveries(
        &store,
        DeliveryFilter {
            state: Some(DeliveryState::Ready),
            ..all_of(&t)
        },
    )
    .await;
    assert_eq!(ready.len(), 5);

    let recorded = store.attempts(&t.id, claimed[0].delivery_id).await.unwrap();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].status, None);
    assert_eq!(
        recorded[0].error_kind.as_deref(),
        Some("connection_refused")
    );
    assert_eq!(recorded[0].response, None);
    assert_not_found(store.attempts(&other.id, claimed[0].delivery_id).await);
    assert_not_found(store.attempts(&t.id, -1).await);
}

async fn check_queue_stats(store: SharedStore) {
    let busy = tenant(&store).await;
    let late = tenant(&store).await;
    endpoint(&store, &busy, &[]).await;
    endpoint(&store, &late, &[]).await;
    let now = now_ms();
    enqueue_n(&store, &busy, "a", 4, now).await;
    enqueue_n(&store, &late, "a", 1, now + 3_000).await;

    let claimed = store.claim(&req(now, 2, 2)).await.unwrap().claimed;
    assert_eq!(claimed.len(), 2);
    store
        .settle(
            &[
                settlement(
                    &claimed[0],
                    SettleOutcome::Delivered,
                    Some(attempt(Some(204), None)),
                ),
                settlement(
                    &claimed[1],
                    SettleOutcome::Dead { reason: "x".into() },
                    None,
                ),
            ],
            now,
        )
        .await
        .unwrap();
    assert_eq!(store.claim(&req(now, 1, 1)).await.unwrap().claimed.len(), 1);

    let stats = store.queue_stats(now + 7_000).await.unwrap();
    assert_eq!((stats.ready, stats.leased, stats.dead), (2, 1, 1));
    assert_eq!(store.delivered_count().await.unwrap(), 1);
    let ages: HashMap<String, i64> = stats.oldest_ready_age_ms.into_iter().collect();
    assert_eq!(ages.get(&busy.id), Some(&7_000), "{ages:?}");
    assert_eq!(ages.get(&late.id), Some(&4_000), "{ages:?}");

    // Work that is not yet due has no age.
    let stats = store.queue_stats(now + 1_000).await.unwrap();
    let ages: HashMap<String, i64> = stats.oldest_ready_age_ms.into_iter().collect();
    assert_eq!(ages.get(&busy.id), Some(&1_000), "{ages:?}");
    assert_eq!(ages.get(&late.id), Some(&0), "{ages:?}");

    // Ages are read endpoint by endpoint from the ready index: a tenant's several endpoints
    // give it their oldest, and a tenant with nothing ready is listed at 0.
    let wide = tenant(&store).await;
    let idle = tenant(&store).await;
    for _ in 0..3 {
        endpoint(&store, &wide, &[]).await;
    }
    endpoint(&store, &idle, &[]).await;
    enqueue_n(&store, &wide, "a", 1, now + 2_000).await;
    enqueue_n(&store, &wide, "a", 1, now + 5_000).await;
    let stats = store.queue_stats(now + 7_000).await.unwrap();
    assert_eq!(stats.ready, 2 + 6);
    let ages: HashMap<String, i64> = stats.oldest_ready_age_ms.into_iter().collect();
    assert_eq!(ages.get(&wide.id), Some(&5_000), "{ages:?}");
    assert_eq!(ages.get(&busy.id), Some(&7_000), "{ages:?}");
    assert_eq!(ages.get(&idle.id), Some(&0), "{ages:?}");
    assert_eq!(ages.len(), 4, "one entry per tenant: {ages:?}");
}

/// A claim's endpoints in one read: those that exist, whichever tenant owns them, each once.
async fn check_endpoints_by_id(store: SharedStore) {
    let (a, b) = (tenant(&store).await, tenant(&store).await);
    let one = endpoint(&store, &a, &[]).await;
    let two = endpoint(&store, &b, &["x"]).await;
    endpoint(&store, &a, &[]).await;
    let mut found = store
        .endpoints_by_id(&[two.id.clone(), "ep_missing".into(), one.id.clone()])
        .await
        .unwrap();
    found.sort_by(|x, y| x.id.cmp(&y.id));
    let mut want = vec![
        (one.id.clone(), a.id.clone()),
        (two.id.clone(), b.id.clone()),
    ];
    want.sort();
    let got: Vec<(String, String)> = found
        .iter()
        .map(|e| (e.id.clone(), e.tenant_id.clone()))
        .collect();
    assert_eq!(got, want);
    assert_eq!(
        found.iter().find(|e| e.id == two.id).unwrap().event_types,
        ["x"]
    );
    assert!(store.endpoints_by_id(&[]).await.unwrap().is_empty());
}

/// The certificate bytes a tenant's endpoints hold: its CA bundles and client certificates
/// (the one before a rotation too), never its keys, another tenant's, or the endpoint left out.
async fn check_tenant_certificate_bytes(store: SharedStore) {
    use sluice::model::ClientIdentity;
    let (a, b) = (tenant(&store).await, tenant(&store).await);
    assert_eq!(store.tenant_certificate_bytes(&a.id, "").await.unwrap(), 0);
    let identity = |certificate: &str| ClientIdentity {
        certificate: certificate.into(),
        key: "k".repeat(1000),
    };
    let mut one = endpoint_for(&a, &[]);
    one.tls.ca_bundle = Some("c".repeat(100));
    one.tls.client = Some(identity(&"d".repeat(20)));
    one.tls.previous_client = Some(identity(&"e".repeat(3)));
    store.create_endpoint(&one).await.unwrap();
    let mut two = endpoint_for(&a, &[]);
    two.tls.ca_bundle = Some("\u{e9}".repeat(7));
    store.create_endpoint(&two).await.unwrap();
    endpoint(&store, &a, &[]).await;
    let mut foreign = endpoint_for(&b, &[]);
    foreign.tls.ca_bundle = Some("f".repeat(5000));
    store.create_endpoint(&foreign).await.unwrap();

    assert_eq!(
        store.tenant_certificate_bytes(&a.id, "").await.unwrap(),
        137
    );
    assert_eq!(
        store
            .tenant_certificate_bytes(&a.id, &one.id)
            .await
            .unwrap(),
        14,
        "bytes, not characters"
    );
    assert_eq!(
        store
            .tenant_certificate_bytes(&a.id, &two.id)
            .await
            .unwrap(),
        123
    );
    assert_eq!(
        store.tenant_certificate_bytes(&b.id, "").await.unwrap(),
        5000
    );
}

support::drivers!(
    check_list_deliveries_and_attempts,
    check_queue_stats,
    check_endpoints_by_id,
    check_tenant_certificate_bytes,
);
