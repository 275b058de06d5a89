//! Settings, tenants and endpoints: what operators and tenants write and read back.

use super::*;

async fn check_settings_and_tenants(store: SharedStore) {
    assert_eq!(store.setting("admin").await.unwrap(), None);
    store.set_setting("admin", "h1").await.unwrap();
    store.set_setting("admin", "h2").await.unwrap();
    assert_eq!(store.setting("admin").await.unwrap().as_deref(), Some("h2"));

    let a = tenant(&store).await;
    let b = tenant(&store).await;
    assert_eq!(store.tenant(&a.id).await.unwrap(), a);
    assert_not_found(store.tenant("ten_missing").await);
    assert_eq!(
        store.tenant_by_token(&a.token_hash).await.unwrap(),
        Some(a.clone())
    );
    let listed = store.list_tenants(None, 10).await.unwrap();
    let mut expected = vec![a.id.clone(), b.id.clone()];
    expected.sort();
    assert_eq!(
        listed.iter().map(|t| t.id.clone()).collect::<Vec<_>>(),
        expected
    );
    let after = store.list_tenants(Some(&expected[0]), 10).await.unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].id, expected[1]);

    // Rotation: the old token stops working at once.
    let rotated = hash_token(&new_token("sk"));
    store.set_tenant_token(&a.id, &rotated).await.unwrap();
    assert_eq!(store.tenant_by_token(&a.token_hash).await.unwrap(), None);
    assert_eq!(
        store.tenant_by_token(&rotated).await.unwrap().map(|t| t.id),
        Some(a.id.clone())
    );
    assert_not_found(store.set_tenant_token("ten_missing", "x").await);

    // A second tenant with the same id is a conflict.
    assert_conflict(store.create_tenant(&b).await);
}

/// Initialising a setting keeps the first value stored, also when many race for it (the admin
/// token of a fleet started at once); the write probe commits its heartbeat and leaves nothing.
async fn check_init_setting_and_write_probe(store: SharedStore) {
    assert_eq!(store.init_setting("boot", "first").await.unwrap(), "first");
    assert_eq!(store.init_setting("boot", "second").await.unwrap(), "first");
    let racers = futures_util::future::join_all((0..8).map(|i| {
        let store = store.clone();
        async move { store.init_setting("raced", &format!("v{i}")).await.unwrap() }
    }))
    .await;
    assert!(racers.iter().all(|v| *v == racers[0]), "{racers:?}");
    assert_eq!(
        store.setting("raced").await.unwrap(),
        Some(racers[0].clone())
    );

    store.probe_write().await.unwrap();
    let beat: i64 = store
        .setting(PROBE_SETTING)
        .await
        .unwrap()
        .expect("heartbeat")
        .parse()
        .unwrap();
    assert!((beat - now_ms()).abs() < 60_000, "{beat}");
    store.probe_write().await.unwrap();
    assert_eq!(store.setting("write_probe_room").await.unwrap(), None);
}

async fn check_endpoint_crud(store: SharedStore) {
    let t = tenant(&store).await;
    let other = tenant(&store).await;
    let mut e = endpoint_for(&t, &["invoice.paid", "invoice.failed"]);
    e.lane_size = Some(4);
    e.latency_ceiling_ms = Some(15_000);
    e.connect_timeout_ms = Some(3_000);
    e.read_timeout_ms = Some(10_000);
    e.total_timeout_ms = Some(15_000);
    e.previous_secret = Some("whsec_b2xk".into());
    e.previous_secret_until_ms = Some(123);
    e.headers.insert("x-tenant".into(), "acme".into());
    e.headers
        .insert("authorization".into(), "Bearer receiver-token".into());
    store.create_endpoint(&e).await.unwrap();
    assert_conflict(store.create_endpoint(&e).await);

    assert_eq!(store.endpoint(None, &e.id).await.unwrap(), e);
    assert_eq!(store.endpoint(Some(&t.id), &e.id).await.unwrap(), e);
    assert_not_found(store.endpoint(Some(&other.id), &e.id).await);
    assert_not_found(store.endpoint(None, "ep_missing").await);

    let second = endpoint(&store, &t, &[]).await;
    let listed = store.list_endpoints(&t.id, None, 10).await.unwrap();
    let mut expected = vec![e.id.clone(), second.id.clone()];
    expected.sort();
    assert_eq!(
        listed.iter().map(|e| e.id.clone()).collect::<Vec<_>>(),
        expected
    );
    assert!(
        store
            .list_endpoints(&other.id, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .list_endpoints(&t.id, Some(&expected[0]), 10)
            .await
            .unwrap()
            .len(),
        1
    );

    let mut changed = e.clone();
    changed.url = "https://example.org/v2".into();
    changed.destination = sluice::model::Destination::Http {
        url: changed.url.clone(),
    };
    changed.event_types = vec!["order.created".into()];
    changed.lane_size = None;
    changed.headers = std::collections::BTreeMap::from([("x-region".into(), "eu".into())]);
    changed.updated_at_ms += 1;
    store.update_endpoint(&changed).await.unwrap();
    assert_eq!(store.endpoint(None, &e.id).await.unwrap(), changed);
    let mut foreign = changed.clone();
    foreign.tenant_id = other.id.clone();
    assert_not_found(store.update_endpoint(&foreign).await);

    store
        .set_endpoint_enabled(&e.id, false, Some("410 Gone"), 5)
        .await
        .unwrap();
    let disabled = store.endpoint(None, &e.id).await.unwrap();
    assert!(!disabled.enabled);
    assert_eq!(disabled.disabled_reason.as_deref(), Some("410 Gone"));
    store.set_endpoint_failing(&e.id, Some(99)).await.unwrap();
    assert_eq!(
        store.endpoint(None, &e.id).await.unwrap().failing_since_ms,
        Some(99)
    );
    store
        .set_endpoint_enabled(&e.id, true, None, 6)
        .await
        .unwrap();
    let enabled = store.endpoint(None, &e.id).await.unwrap();
    assert!(enabled.enabled);
    assert_eq!(enabled.disabled_reason, None);
    assert_eq!(enabled.failing_since_ms, None);
    assert_not_found(
        store
            .set_endpoint_enabled("ep_missing", true, None, 1)
            .await,
    );

    // Events: newest first, visible only to the owning tenant.
    for (i, kind) in ["breaker_opened", "breaker_closed"].iter().enumerate() {
        store
            .record_event(&EndpointEvent {
                tenant_id: t.id.clone(),
                endpoint_id: e.id.clone(),
                kind: kind.to_string(),
                detail: format!("p95 over ceiling #{i}"),
                at_ms: 1_000 + i as i64,
            })
            .await
            .unwrap();
    }
    let events = store.list_events(&t.id, &e.id, 10).await.unwrap();
    assert_eq!(
        events.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
        ["breaker_closed", "breaker_opened"]
    );
    assert_eq!(store.list_events(&t.id, &e.id, 1).await.unwrap().len(), 1);
    assert_not_found(store.list_events(&other.id, &e.id, 10).await);

    // Deleting an endpoint deletes its deliveries.
    let now = now_ms();
    store
        .enqueue(&[message(&t, "order.created")], now)
        .await
        .unwrap();
    assert_eq!(deliveries(&store, all_of(&t)).await.len(), 2);
    assert_not_found(store.delete_endpoint(&other.id, &e.id).await);
    store.delete_endpoint(&t.id, &e.id).await.unwrap();
    assert_not_found(store.endpoint(None, &e.id).await);
    let left = deliveries(&store, all_of(&t)).await;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].endpoint_id, second.id);
}

async fn check_delete_tenant(store: SharedStore) {
    let gone = tenant(&store).await;
    let kept = tenant(&store).await;
    let e = endpoint(&store, &gone, &[]).await;
    let k = endpoint(&store, &kept, &[]).await;
    let now = now_ms();
    let m = message(&gone, "a");
    store.enqueue(std::slice::from_ref(&m), now).await.unwrap();
    enqueue_n(&store, &kept, "a", 1, now).await;
    let claimed = store.claim(&req(now, 10, 10)).await.unwrap().claimed;
    let mine = claimed.iter().find(|c| c.tenant_id == gone.id).unwrap();
    store
        .settle(
            &[settlement(
                mine,
                SettleOutcome::Retry { at_ms: now },
                Some(attempt(Some(500), None)),
            )],
            now,
        )
        .await
        .unwrap();
    store
        .record_event(&EndpointEvent {
            tenant_id: gone.id.clone(),
            endpoint_id: e.id.clone(),
            kind: "disabled".into(),
            detail: "x".into(),
            at_ms: now,
        })
        .await
        .unwrap();

    store.delete_tenant(&gone.id).await.unwrap();
    assert_not_found(store.tenant(&gone.id).await);
    assert_eq!(store.tenant_by_token(&gone.token_hash).await.unwrap(), None);
    assert_not_found(store.endpoint(None, &e.id).await);
    assert_not_found(store.message(&gone.id, &m.id).await);
    assert!(deliveries(&store, all_of(&gone)).await.is_empty());
    assert_not_found(store.attempts(&gone.id, mine.delivery_id).await);
    assert!(
        store
            .list_messages(&log_of(&gone, None, 10))
            .await
            .unwrap()
            .is_empty()
    );
    assert_not_found(store.delete_tenant(&gone.id).await);

    // The other tenant is untouched.
    assert_eq!(store.tenant(&kept.id).await.unwrap(), kept);
    assert_eq!(store.endpoint(None, &k.id).await.unwrap(), k);
    assert_eq!(deliveries(&store, all_of(&kept)).await.len(), 1);
    let stats = store.queue_stats(now).await.unwrap();
    let delivered = store.delivered_count().await.unwrap();
    assert_eq!(stats.ready + stats.leased + delivered + stats.dead, 1);
    assert!(stats.oldest_ready_age_ms.iter().all(|(t, _)| *t != gone.id));
}

async fn check_settings_delete_once_and_by_range(store: SharedStore) {
    // One delete wins among concurrent ones: what makes a portal link single-use.
    store.set_setting("link:a", "t1").await.unwrap();
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.delete_setting("link:a").await.unwrap() })
        })
        .collect();
    let mut won = 0;
    for r in racers {
        won += usize::from(r.await.unwrap());
    }
    assert_eq!(won, 1);
    assert_eq!(store.setting("link:a").await.unwrap(), None);
    assert!(!store.delete_setting("link:a").await.unwrap());

    // Keys embedding a zero-padded expiry: a range purges the expired ones, bytewise.
    for key in [
        "s:0000000000100:x",
        "s:0000000000200:y",
        "s:0000000000300:z",
        "s:0000000000300:Z",
        "s;outside",
        "r:0000000000100:x",
    ] {
        store.set_setting(key, "v").await.unwrap();
    }
    let gone = store
        .delete_settings_between("s:", "s:0000000000300")
        .await
        .unwrap();
    assert_eq!(gone, 2);
    for (key, kept) in [
        ("s:0000000000100:x", false),
        ("s:0000000000200:y", false),
        ("s:0000000000300:z", true),
        ("s:0000000000300:Z", true),
        ("s;outside", true),
        ("r:0000000000100:x", true),
    ] {
        assert_eq!(store.setting(key).await.unwrap().is_some(), kept, "{key}");
    }
    assert_eq!(store.delete_settings_between("s:", "s:").await.unwrap(), 0);
}

support::drivers!(
    check_settings_and_tenants,
    check_init_setting_and_write_probe,
    check_endpoint_crud,
    check_delete_tenant,
    check_settings_delete_once_and_by_range,
);
