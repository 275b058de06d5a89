//! One conformance suite for the `Store` trait, run against both drivers.
//!
//! Each behaviour is written once as `check_*(store)`; the `conformance!` macro runs it against a
//! fresh embedded SQLite store and, when `SLUICE_TEST_DATABASE_URL` is set, against a fresh
//! PostgreSQL database. Times are passed in explicitly, so no check depends on the wall clock
//! beyond generous timeouts for wake-ups.

mod support;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use sluice::clock::now_ms;
use sluice::ids::{hash_token, new_id, new_token};
use sluice::store::*;

// ---- fixtures ---------------------------------------------------------------------------------

async fn tenant(store: &SharedStore) -> Tenant {
    let t = Tenant {
        id: new_id("ten"),
        name: "Acme".into(),
        token_hash: hash_token(&new_token("sk")),
        created_at_ms: now_ms(),
    };
    store.create_tenant(&t).await.expect("create tenant");
    t
}

fn endpoint_for(tenant: &Tenant, event_types: &[&str]) -> Endpoint {
    let now = now_ms();
    Endpoint {
        id: new_id("ep"),
        tenant_id: tenant.id.clone(),
        url: "https://example.com/hook".into(),
        description: "a test endpoint".into(),
        event_types: event_types.iter().map(|s| s.to_string()).collect(),
        secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
        previous_secret: None,
        previous_secret_until_ms: None,
        enabled: true,
        disabled_reason: None,
        operational: false,
        lane_size: None,
        latency_ceiling_ms: None,
        connect_timeout_ms: None,
        read_timeout_ms: None,
        total_timeout_ms: None,
        failing_since_ms: None,
        created_at_ms: now,
        updated_at_ms: now,
    }
}

async fn endpoint(store: &SharedStore, tenant: &Tenant, event_types: &[&str]) -> Endpoint {
    let e = endpoint_for(tenant, event_types);
    store.create_endpoint(&e).await.expect("create endpoint");
    e
}

fn message(tenant: &Tenant, event_type: &str) -> NewMessage {
    NewMessage {
        id: new_id("msg"),
        tenant_id: tenant.id.clone(),
        event_type: event_type.into(),
        payload: format!(r#"{{"type":"{event_type}","n":1}}"#),
        idempotency_key: None,
        only_endpoint: None,
    }
}

async fn enqueue_n(store: &SharedStore, tenant: &Tenant, event_type: &str, n: usize, now: i64) {
    let batch: Vec<NewMessage> = (0..n).map(|_| message(tenant, event_type)).collect();
    for chunk in batch.chunks(1_000) {
        store.enqueue(chunk, now).await.expect("enqueue");
    }
}

fn req(now: i64, limit: u32, per_endpoint: u32) -> ClaimRequest {
    ClaimRequest {
        now_ms: now,
        limit,
        per_endpoint,
        lease_ms: 60_000,
        exclude: Vec::new(),
        room: vec![],
        after_endpoint: None,
    }
}

fn attempt(status: Option<u16>, error_kind: Option<&str>) -> AttemptRecord {
    AttemptRecord {
        started_at_ms: 1_700_000_000_000,
        duration_ms: 37,
        status,
        error_kind: error_kind.map(str::to_owned),
        response: status.map(|s| format!("body of {s}")),
    }
}

fn settlement(c: &Claimed, outcome: SettleOutcome, attempt: Option<AttemptRecord>) -> Settlement {
    Settlement {
        delivery_id: c.delivery_id,
        lease_token: c.lease_token,
        outcome,
        attempt,
    }
}

async fn deliveries(store: &SharedStore, filter: DeliveryFilter) -> Vec<DeliveryView> {
    store
        .list_deliveries(&filter)
        .await
        .expect("list deliveries")
}

fn all_of(tenant: &Tenant) -> DeliveryFilter {
    DeliveryFilter {
        tenant_id: tenant.id.clone(),
        limit: 10_000,
        ..Default::default()
    }
}

async fn delivery(store: &SharedStore, tenant: &Tenant, id: i64) -> DeliveryView {
    let found = deliveries(
        store,
        DeliveryFilter {
            after: Some(id - 1),
            limit: 1,
            ..all_of(tenant)
        },
    )
    .await;
    assert_eq!(found.len(), 1, "delivery {id} not found");
    assert_eq!(found[0].id, id);
    found.into_iter().next().unwrap()
}

fn ids(claimed: &[Claimed]) -> BTreeSet<i64> {
    claimed.iter().map(|c| c.delivery_id).collect()
}

fn endpoints_of(claimed: &[Claimed]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for c in claimed {
        *counts.entry(c.endpoint_id.clone()).or_default() += 1;
    }
    counts
}

#[track_caller]
fn assert_not_found<T: Debug>(result: StoreResult<T>) {
    match result {
        Err(StoreError::NotFound(_)) => {}
        other => panic!("expected NotFound, got {other:?}"),
    }
}

#[track_caller]
fn assert_conflict<T: Debug>(result: StoreResult<T>) {
    match result {
        Err(StoreError::Conflict(_)) => {}
        other => panic!("expected Conflict, got {other:?}"),
    }
}

// ---- tenants, endpoints, messages -------------------------------------------------------------

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
    changed.event_types = vec!["order.created".into()];
    changed.lane_size = None;
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
            Enqueued {
                id: m_a.id.clone(),
                duplicate: false,
                deliveries: 2
            },
            Enqueued {
                id: m_c.id.clone(),
                duplicate: false,
                deliveries: 1
            },
            Enqueued {
                id: m_ops.id.clone(),
                duplicate: false,
                deliveries: 1
            },
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
    let listed = store.list_messages(&t.id, None, 10).await.unwrap();
    let mut expected = vec![m_a.id.clone(), m_c.id.clone(), m_ops.id.clone()];
    expected.sort();
    expected.reverse();
    assert_eq!(
        listed.iter().map(|m| m.id.clone()).collect::<Vec<_>>(),
        expected
    );
    let page = store
        .list_messages(&t.id, Some(&expected[0]), 1)
        .await
        .unwrap();
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].id, expected[1]);
    assert!(
        store
            .list_messages(&other.id, None, 10)
            .await
            .unwrap()
            .is_empty()
    );

    // Another tenant's message fans out only to its own endpoints.
    let foreign = store.enqueue(&[message(&other, "a")], now).await.unwrap();
    assert_eq!(foreign[0].deliveries, 1);
    assert_eq!(deliveries(&store, all_of(&t)).await.len(), 4);
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
    assert_eq!(
        out[0],
        Enqueued {
            id: first.id.clone(),
            duplicate: false,
            deliveries: 2
        }
    );

    let mut again = message(&t, "a");
    again.idempotency_key = Some("order-1".into());
    let out = store.enqueue(&[again.clone()], now + 1).await.unwrap();
    assert_eq!(
        out[0],
        Enqueued {
            id: first.id.clone(),
            duplicate: true,
            deliveries: 0
        }
    );
    assert_not_found(store.message(&t.id, &again.id).await);
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
        store.list_messages(&t.id, None, 100).await.unwrap().len(),
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
        store.list_messages(&t.id, None, 100).await.unwrap().len(),
        1
    );
    assert_eq!(deliveries(&store, all_of(&t)).await.len(), 2);
}

// ---- claims -----------------------------------------------------------------------------------

async fn check_claim_basics(store: SharedStore) {
    let t = tenant(&store).await;
    let e1 = endpoint(&store, &t, &[]).await;
    let e2 = endpoint(&store, &t, &[]).await;
    let now = now_ms();
    let m = message(&t, "a");
    store.enqueue(std::slice::from_ref(&m), now).await.unwrap();
    enqueue_n(&store, &t, "a", 9, now).await;

    // Nothing is visible before its time.
    assert!(
        store
            .claim(&req(now - 1, 100, 100))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.claim(&req(now, 0, 100)).await.unwrap().is_empty());

    // `limit` bounds the batch; the lease carries everything needed to attempt it.
    let first = store.claim(&req(now, 5, 100)).await.unwrap();
    assert_eq!(first.len(), 5);
    for c in &first {
        assert_ne!(c.lease_token, 0);
        assert_eq!(c.tenant_id, t.id);
        assert_eq!(c.attempts, 0);
        assert_eq!(c.event_type, "a");
        assert_eq!(c.visible_at_ms, now);
        assert_eq!(c.message_created_at_ms, now);
        if c.message_id == m.id {
            assert_eq!(c.payload, m.payload);
        }
        let d = delivery(&store, &t, c.delivery_id).await;
        assert_eq!(d.state, DeliveryState::Leased);
        assert_eq!(d.message_id, c.message_id);
        assert_eq!(d.endpoint_id, c.endpoint_id);
    }
    // The lease lasts `lease_ms`: the reaper leaves it alone until then.
    let report = store.reap(now + 60_000 - 1, 5).await.unwrap();
    assert_eq!(report, ReapReport::default());

    // `per_endpoint` bounds each endpoint's share of a batch.
    let second = store.claim(&req(now, 100, 3)).await.unwrap();
    let counts = endpoints_of(&second);
    assert!(counts.values().all(|&n| n == 3), "{counts:?}");
    assert_eq!(counts.len(), 2);
    assert!(ids(&first).is_disjoint(&ids(&second)));

    // `room` takes no more of an endpoint than its lane has free; others keep `per_endpoint`.
    let mut roomy = req(now, 100, 100);
    // (Both endpoints still have due work whichever of them the first claim drew from.)
    roomy.room = vec![(e1.id.clone(), 1), (e2.id.clone(), 1)];
    let roomed = store.claim(&roomy).await.unwrap();
    let counts = endpoints_of(&roomed);
    assert_eq!(counts.get(&e1.id).copied(), Some(1), "{counts:?}");
    assert_eq!(counts.get(&e2.id).copied(), Some(1), "{counts:?}");
    assert!(ids(&roomed).is_disjoint(&ids(&second)));

    // `exclude` skips endpoints whose lanes are full.
    let mut excluding = req(now, 100, 100);
    excluding.exclude = vec![e1.id.clone()];
    let third = store.claim(&excluding).await.unwrap();
    assert!(!third.is_empty());
    assert!(third.iter().all(|c| c.endpoint_id == e2.id));

    // Disabled endpoints are held, not claimed, and claimable again after re-enable.
    store
        .set_endpoint_enabled(&e1.id, false, Some("operator"), now)
        .await
        .unwrap();
    assert!(store.claim(&req(now, 100, 100)).await.unwrap().is_empty());
    let held = deliveries(
        &store,
        DeliveryFilter {
            endpoint_id: Some(e1.id.clone()),
            state: Some(DeliveryState::Ready),
            ..all_of(&t)
        },
    )
    .await;
    assert!(!held.is_empty());
    store
        .set_endpoint_enabled(&e1.id, true, None, now)
        .await
        .unwrap();
    let fourth = store.claim(&req(now, 100, 100)).await.unwrap();
    assert_eq!(ids(&fourth), held.iter().map(|d| d.id).collect());

    let stats = store.queue_stats(now).await.unwrap();
    assert_eq!((stats.ready, stats.leased), (0, 20));
}

async fn check_concurrent_claimers(store: SharedStore) {
    let t = tenant(&store).await;
    for _ in 0..4 {
        endpoint(&store, &t, &[]).await;
    }
    let now = now_ms();
    enqueue_n(&store, &t, "a", 250, now).await;
    let total = 1_000;

    let start = Arc::new(tokio::sync::Barrier::new(8));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (store, start) = (store.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let mut held = Vec::new();
            loop {
                let batch = store.claim(&req(now, 16, 4)).await.expect("claim");
                if batch.is_empty() {
                    return held;
                }
                held.extend(batch.into_iter().map(|c| (c.delivery_id, c.lease_token)));
            }
        }));
    }
    let mut seen: HashMap<i64, Vec<i64>> = HashMap::new();
    for task in tasks {
        for (id, token) in task.await.unwrap() {
            seen.entry(id).or_default().push(token);
        }
    }
    let twice: Vec<_> = seen.iter().filter(|(_, tokens)| tokens.len() > 1).collect();
    assert!(twice.is_empty(), "claimed more than once: {twice:?}");
    assert_eq!(seen.len(), total);
    let stats = store.queue_stats(now).await.unwrap();
    assert_eq!((stats.ready, stats.leased), (0, total as u64));
}

/// 8 claimers that settle what they hold (a retry due at once, then delivered) never hold the
/// same delivery at the same time, and together deliver everything exactly as often as planned.
async fn check_concurrent_claim_settle(store: SharedStore) {
    let t = tenant(&store).await;
    for _ in 0..4 {
        endpoint(&store, &t, &[]).await;
    }
    let now = now_ms();
    enqueue_n(&store, &t, "a", 100, now).await;
    let total = 400;

    let held = Arc::new(std::sync::Mutex::new(HashSet::new()));
    let start = Arc::new(tokio::sync::Barrier::new(8));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (store, start, held) = (store.clone(), start.clone(), held.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let mut idle = 0;
            while idle < 3 {
                let batch = store.claim(&req(now, 8, 2)).await.expect("claim");
                if batch.is_empty() {
                    // Others may still hold retries that will become ready again.
                    idle += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                idle = 0;
                let mut settlements = Vec::new();
                {
                    let mut held = held.lock().unwrap();
                    for c in &batch {
                        assert!(held.insert(c.delivery_id), "{} held twice", c.delivery_id);
                    }
                    // Release our hold before the settle commits: once it commits another
                    // claimer may legitimately take the delivery.
                    for c in &batch {
                        held.remove(&c.delivery_id);
                        let outcome = if c.attempts == 0 {
                            SettleOutcome::Retry { at_ms: now }
                        } else {
                            SettleOutcome::Delivered
                        };
                        settlements.push(settlement(c, outcome, Some(attempt(Some(200), None))));
                    }
                }
                let applied = store.settle(&settlements, now).await.expect("settle");
                assert_eq!(applied.len(), batch.len(), "a held lease was not ours");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let stats = store.queue_stats(now).await.unwrap();
    assert_eq!(
        (stats.ready, stats.leased, stats.delivered),
        (0, 0, total as u64)
    );
    let all = deliveries(&store, all_of(&t)).await;
    assert!(
        all.iter().all(|d| d.attempts == 2),
        "every delivery took two attempts"
    );
}

async fn check_fairness(store: SharedStore) {
    let t = tenant(&store).await;
    let a = endpoint(&store, &t, &["flood"]).await;
    let b = endpoint(&store, &t, &["trickle"]).await;
    let now = now_ms();
    enqueue_n(&store, &t, "flood", 100_000, now - 60_000).await;
    let m = message(&t, "trickle");
    store.enqueue(std::slice::from_ref(&m), now).await.unwrap();

    let batch = store.claim(&req(now, 64, 8)).await.unwrap();
    let counts = endpoints_of(&batch);
    assert_eq!(counts.get(&b.id), Some(&1), "B was not claimed: {counts:?}");
    assert!(counts.get(&a.id).copied().unwrap_or(0) <= 8, "{counts:?}");
    assert!(batch.len() <= 64);
    assert!(
        batch
            .iter()
            .any(|c| c.endpoint_id == b.id && c.message_id == m.id)
    );
    let stats = store.queue_stats(now).await.unwrap();
    assert_eq!(stats.ready + stats.leased, 100_001);
}

async fn check_round_robin_cursor(store: SharedStore) {
    let t = tenant(&store).await;
    let mut eps = Vec::new();
    for _ in 0..3 {
        eps.push(endpoint(&store, &t, &[]).await.id);
    }
    eps.sort();
    let now = now_ms();
    enqueue_n(&store, &t, "a", 2, now).await;

    // After the second endpoint: the third first, then wrap to the first.
    let mut r = req(now, 2, 1);
    r.after_endpoint = Some(eps[1].clone());
    let batch = store.claim(&r).await.unwrap();
    let got: BTreeSet<String> = batch.iter().map(|c| c.endpoint_id.clone()).collect();
    assert_eq!(got, BTreeSet::from([eps[2].clone(), eps[0].clone()]));

    // After the last endpoint: wrap straight to the start.
    r.after_endpoint = Some(eps[2].clone());
    let batch = store.claim(&r).await.unwrap();
    let got: BTreeSet<String> = batch.iter().map(|c| c.endpoint_id.clone()).collect();
    assert_eq!(got, BTreeSet::from([eps[0].clone(), eps[1].clone()]));

    // The cursor's own endpoint is reached last, after the wrap.
    r.after_endpoint = Some(eps[0].clone());
    r.limit = 10;
    let batch = store.claim(&r).await.unwrap();
    let got: BTreeSet<String> = batch.iter().map(|c| c.endpoint_id.clone()).collect();
    assert_eq!(got, BTreeSet::from([eps[1].clone(), eps[2].clone()]));
    assert!(store.claim(&r).await.unwrap().is_empty());
}

// ---- settling, leases, reaping ----------------------------------------------------------------

async fn check_settle_outcomes(store: SharedStore) {
    let t = tenant(&store).await;
    endpoint(&store, &t, &[]).await;
    let now = now_ms();
    enqueue_n(&store, &t, "a", 6, now).await;
    let claimed = store.claim(&req(now, 10, 10)).await.unwrap();
    assert_eq!(claimed.len(), 6);
    let [done, retry, shed, dead, release, shed_with_attempt] = &claimed[..] else {
        unreachable!()
    };
    let at = now + 1_000;
    let stale = Settlement {
        lease_token: done.lease_token ^ 0x7fff,
        ..settlement(done, SettleOutcome::Delivered, None)
    };
    let batch = vec![
        stale,
        settlement(
            done,
            SettleOutcome::Delivered,
            Some(attempt(Some(200), None)),
        ),
        settlement(
            retry,
            SettleOutcome::Retry { at_ms: now + 5_000 },
            Some(attempt(Some(503), Some("http_status"))),
        ),
        settlement(shed, SettleOutcome::Shed { at_ms: now + 9_000 }, None),
        settlement(
            dead,
            SettleOutcome::Dead {
                reason: "410 Gone".into(),
            },
            Some(attempt(Some(410), None)),
        ),
        settlement(release, SettleOutcome::Release, None),
        settlement(
            shed_with_attempt,
            SettleOutcome::Shed { at_ms: now + 9_000 },
            Some(attempt(None, Some("lane_full"))),
        ),
    ];
    let applied: BTreeSet<i64> = store
        .settle(&batch, at)
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(applied, ids(&claimed));

    let d = delivery(&store, &t, done.delivery_id).await;
    assert_eq!(
        (d.state, d.attempts, d.last_status),
        (DeliveryState::Delivered, 1, Some(200))
    );
    assert_eq!(d.updated_at_ms, at);

    let d = delivery(&store, &t, retry.delivery_id).await;
    assert_eq!((d.state, d.attempts), (DeliveryState::Ready, 1));
    assert_eq!(d.visible_at_ms, now + 5_000);
    assert_eq!(d.last_status, Some(503));
    assert_eq!(d.last_error.as_deref(), Some("http_status"));
    let recorded = store.attempts(&t.id, retry.delivery_id).await.unwrap();
    assert_eq!(recorded.len(), 1);
    let a = &recorded[0];
    assert_eq!(a.delivery_id, retry.delivery_id);
    assert_eq!(a.status, Some(503));
    assert_eq!(a.error_kind.as_deref(), Some("http_status"));
    assert_eq!(a.duration_ms, 37);
    assert_eq!(a.started_at_ms, 1_700_000_000_000);
    assert_eq!(a.response.as_deref(), Some("body of 503"));

    for s in [shed, shed_with_attempt] {
        let d = delivery(&store, &t, s.delivery_id).await;
        assert_eq!(
            (d.state, d.attempts),
            (DeliveryState::Ready, 0),
            "shed used an attempt"
        );
        assert_eq!(d.visible_at_ms, now + 9_000);
        assert_eq!((d.last_status, d.last_error.as_deref()), (None, None));
    }
    assert!(
        store
            .attempts(&t.id, shed.delivery_id)
            .await
            .unwrap()
            .is_empty()
    );

    let d = delivery(&store, &t, dead.delivery_id).await;
    assert_eq!((d.state, d.attempts), (DeliveryState::Dead, 1));
    assert_eq!(d.last_error.as_deref(), Some("410 Gone"));
    assert_eq!(d.last_status, Some(410));

    let d = delivery(&store, &t, release.delivery_id).await;
    assert_eq!((d.state, d.attempts), (DeliveryState::Ready, 0));
    assert_eq!(d.visible_at_ms, at);
    assert!(
        store
            .attempts(&t.id, release.delivery_id)
            .await
            .unwrap()
            .is_empty()
    );

    // A settled lease cannot be settled again.
    let again = store
        .settle(&[settlement(done, SettleOutcome::Delivered, None)], at)
        .await
        .unwrap();
    assert!(again.is_empty());
    assert!(store.settle(&[], at).await.unwrap().is_empty());

    // Each comes back at its own time, attempts carried.
    let back = store.claim(&req(at, 10, 10)).await.unwrap();
    assert_eq!(ids(&back), BTreeSet::from([release.delivery_id]));
    let back = store.claim(&req(now + 9_000, 10, 10)).await.unwrap();
    assert_eq!(
        ids(&back),
        BTreeSet::from([
            retry.delivery_id,
            shed.delivery_id,
            shed_with_attempt.delivery_id
        ])
    );
    let retried = back
        .iter()
        .find(|c| c.delivery_id == retry.delivery_id)
        .unwrap();
    assert_eq!(retried.attempts, 1);
}

async fn check_stale_token(store: SharedStore) {
    let t = tenant(&store).await;
    endpoint(&store, &t, &[]).await;
    let now = now_ms();
    enqueue_n(&store, &t, "a", 1, now).await;
    let mut r = req(now, 1, 1);
    r.lease_ms = 1_000;
    let old = store.claim(&r).await.unwrap().remove(0);

    let report = store.reap(now + 2_000, 5).await.unwrap();
    assert_eq!(
        report,
        ReapReport {
            returned: 1,
            dead: 0
        }
    );
    let d = delivery(&store, &t, old.delivery_id).await;
    assert_eq!((d.state, d.attempts), (DeliveryState::Ready, 0));

    r.now_ms = now + 2_000;
    r.lease_ms = 60_000;
    let new = store.claim(&r).await.unwrap().remove(0);
    assert_eq!(new.delivery_id, old.delivery_id);
    assert_ne!(new.lease_token, old.lease_token);

    // The late worker's outcome changes nothing.
    let late = store
        .settle(
            &[settlement(
                &old,
                SettleOutcome::Dead {
                    reason: "late".into(),
                },
                Some(attempt(Some(500), None)),
            )],
            now + 3_000,
        )
        .await
        .unwrap();
    assert!(late.is_empty());
    assert!(
        !store
            .extend_lease(old.delivery_id, old.lease_token, now + 99_000)
            .await
            .unwrap()
    );
    let d = delivery(&store, &t, old.delivery_id).await;
    assert_eq!(
        (d.state, d.attempts, d.last_error),
        (DeliveryState::Leased, 0, None)
    );
    assert!(
        store
            .attempts(&t.id, old.delivery_id)
            .await
            .unwrap()
            .is_empty()
    );

    // The current holder's outcome applies.
    let applied = store
        .settle(
            &[settlement(
                &new,
                SettleOutcome::Retry {
                    at_ms: now + 10_000,
                },
                Some(attempt(None, Some("timeout_read"))),
            )],
            now + 3_000,
        )
        .await
        .unwrap();
    assert_eq!(applied, vec![new.delivery_id]);
    let d = delivery(&store, &t, new.delivery_id).await;
    assert_eq!((d.state, d.attempts), (DeliveryState::Ready, 1));
    assert_eq!(d.last_error.as_deref(), Some("timeout_read"));
}

async fn check_extend_lease(store: SharedStore) {
    let t = tenant(&store).await;
    endpoint(&store, &t, &[]).await;
    let now = now_ms();
    enqueue_n(&store, &t, "a", 1, now).await;
    let mut r = req(now, 1, 1);
    r.lease_ms = 1_000;
    let c = store.claim(&r).await.unwrap().remove(0);

    assert!(
        !store
            .extend_lease(c.delivery_id, c.lease_token ^ 0x55, now + 30_000)
            .await
            .unwrap()
    );
    assert!(
        !store
            .extend_lease(c.delivery_id + 1_000, c.lease_token, now + 30_000)
            .await
            .unwrap()
    );
    assert!(
        store
            .extend_lease(c.delivery_id, c.lease_token, now + 30_000)
            .await
            .unwrap()
    );
    assert_eq!(
        store.reap(now + 20_000, 5).await.unwrap(),
        ReapReport::default()
    );
    assert_eq!(
        store.reap(now + 30_001, 5).await.unwrap(),
        ReapReport {
            returned: 1,
            dead: 0
        }
    );
    // Once reaped, the old lease cannot be extended.
    assert!(
        !store
            .extend_lease(c.delivery_id, c.lease_token, now + 90_000)
            .await
            .unwrap()
    );
}

async fn check_reap_poison(store: SharedStore) {
    let t = tenant(&store).await;
    endpoint(&store, &t, &[]).await;
    let now = now_ms();
    enqueue_n(&store, &t, "a", 1, now).await;
    let mut clock = now;
    let mut id = 0;
    for expiry in 1..=3 {
        let mut r = req(clock, 1, 1);
        r.lease_ms = 1_000;
        let claimed = store.claim(&r).await.unwrap();
        assert_eq!(claimed.len(), 1, "expiry {expiry}: nothing to claim");
        id = claimed[0].delivery_id;
        clock += 5_000;
        let report = store.reap(clock, 3).await.unwrap();
        let d = delivery(&store, &t, id).await;
        assert_eq!(d.attempts, 0, "an expiry is not an attempt");
        if expiry < 3 {
            assert_eq!(
                report,
                ReapReport {
                    returned: 1,
                    dead: 0
                }
            );
            assert_eq!(d.state, DeliveryState::Ready);
            assert_eq!(d.visible_at_ms, clock);
        } else {
            assert_eq!(
                report,
                ReapReport {
                    returned: 0,
                    dead: 1
                }
            );
            assert_eq!(d.state, DeliveryState::Dead);
            let reason = d.last_error.unwrap_or_default();
            assert!(
                reason.contains("lease expired") && reason.contains("(poison message)"),
                "{reason:?}"
            );
        }
    }
    assert!(store.claim(&req(clock, 1, 1)).await.unwrap().is_empty());
    // Replay gives the poison message a fresh count.
    assert_eq!(
        store
            .replay(&t.id, ReplayTarget::Delivery(id), clock)
            .await
            .unwrap(),
        1
    );
    let mut r = req(clock, 1, 1);
    r.lease_ms = 1_000;
    store.claim(&r).await.unwrap();
    assert_eq!(
        store.reap(clock + 5_000, 3).await.unwrap(),
        ReapReport {
            returned: 1,
            dead: 0
        }
    );
}

// ---- dead letters, listings, operators --------------------------------------------------------

async fn kill(store: &SharedStore, claimed: &[Claimed], at: i64) {
    let batch: Vec<Settlement> = claimed
        .iter()
        .map(|c| {
            settlement(
                c,
                SettleOutcome::Dead {
                    reason: "retries exhausted".into(),
                },
                Some(attempt(Some(500), None)),
            )
        })
        .collect();
    assert_eq!(store.settle(&batch, at).await.unwrap().len(), claimed.len());
}

async fn check_replay(store: SharedStore) {
    let t = tenant(&store).await;
    let other = tenant(&store).await;
    let e1 = endpoint(&store, &t, &[]).await;
    let e2 = endpoint(&store, &t, &[]).await;
    let now = now_ms();
    enqueue_n(&store, &t, "a", 3, now).await;
    let claimed = store.claim(&req(now, 100, 100)).await.unwrap();
    assert_eq!(claimed.len(), 6);
    let (on_e1, on_e2): (Vec<Claimed>, Vec<Claimed>) =
        claimed.into_iter().partition(|c| c.endpoint_id == e1.id);
    kill(&store, &on_e1, now).await;
    kill(&store, &on_e2[..1], now).await;

    let one = on_e2[0].delivery_id;
    assert_not_found(
        store
            .replay(&other.id, ReplayTarget::Delivery(one), now)
            .await,
    );
    assert_not_found(store.replay(&t.id, ReplayTarget::Delivery(-5), now).await);
    assert_eq!(
        store
            .replay(&t.id, ReplayTarget::Delivery(one), now + 1)
            .await
            .unwrap(),
        1
    );
    let d = delivery(&store, &t, one).await;
    assert_eq!(
        (d.state, d.attempts, d.visible_at_ms),
        (DeliveryState::Ready, 0, now + 1)
    );
    // Only dead letters can be replayed.
    assert_conflict(store.replay(&t.id, ReplayTarget::Delivery(one), now).await);
    let leased = on_e2[1].delivery_id;
    assert_conflict(
        store
            .replay(&t.id, ReplayTarget::Delivery(leased), now)
            .await,
    );

    assert_not_found(
        store
            .replay(&other.id, ReplayTarget::Endpoint(e1.id.clone()), now)
            .await,
    );
    assert_eq!(
        store
            .replay(&t.id, ReplayTarget::Endpoint(e1.id.clone()), now + 2)
            .await
            .unwrap(),
        3
    );
    assert_eq!(
        store
            .replay(&t.id, ReplayTarget::Endpoint(e2.id.clone()), now + 2)
            .await
            .unwrap(),
        0
    );
    let again = store.claim(&req(now + 2, 100, 100)).await.unwrap();
    let mut expected: BTreeSet<i64> = on_e1.iter().map(|c| c.delivery_id).collect();
    expected.insert(one);
    assert_eq!(ids(&again), expected);
    assert!(again.iter().all(|c| c.attempts == 0));
}

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
    let claimed = store.claim(&req(now, 2, 1)).await.unwrap();
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

    let claimed = store.claim(&req(now, 2, 2)).await.unwrap();
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
    assert_eq!(store.claim(&req(now, 1, 1)).await.unwrap().len(), 1);

    let stats = store.queue_stats(now + 7_000).await.unwrap();
    assert_eq!(
        (stats.ready, stats.leased, stats.delivered, stats.dead),
        (2, 1, 1, 1)
    );
    let ages: HashMap<String, i64> = stats.oldest_ready_age_ms.into_iter().collect();
    assert_eq!(ages.get(&busy.id), Some(&7_000), "{ages:?}");
    assert_eq!(ages.get(&late.id), Some(&4_000), "{ages:?}");

    // Work that is not yet due has no age.
    let stats = store.queue_stats(now + 1_000).await.unwrap();
    let ages: HashMap<String, i64> = stats.oldest_ready_age_ms.into_iter().collect();
    assert_eq!(ages.get(&busy.id), Some(&1_000), "{ages:?}");
    assert_eq!(ages.get(&late.id).copied().unwrap_or(0), 0, "{ages:?}");
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

async fn check_delete_tenant(store: SharedStore) {
    let gone = tenant(&store).await;
    let kept = tenant(&store).await;
    let e = endpoint(&store, &gone, &[]).await;
    let k = endpoint(&store, &kept, &[]).await;
    let now = now_ms();
    let m = message(&gone, "a");
    store.enqueue(std::slice::from_ref(&m), now).await.unwrap();
    enqueue_n(&store, &kept, "a", 1, now).await;
    let claimed = store.claim(&req(now, 10, 10)).await.unwrap();
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
            .list_messages(&gone.id, None, 10)
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
    assert_eq!(stats.ready + stats.leased + stats.delivered + stats.dead, 1);
    assert!(stats.oldest_ready_age_ms.iter().all(|(t, _)| *t != gone.id));
}

// ---- the two drivers --------------------------------------------------------------------------

async fn check_purge(store: SharedStore) {
    let t = tenant(&store).await;
    endpoint(&store, &t, &[]).await;
    let now = now_ms();
    enqueue_n(&store, &t, "a", 3, now).await;
    let c = store.claim(&req(now, 10, 10)).await.unwrap();
    assert_eq!(c.len(), 3);
    // One delivered, one dead-lettered, one released back to ready.
    let applied = store
        .settle(
            &[
                Settlement {
                    delivery_id: c[0].delivery_id,
                    lease_token: c[0].lease_token,
                    outcome: SettleOutcome::Delivered,
                    attempt: Some(attempt(Some(200), None)),
                },
                Settlement {
                    delivery_id: c[1].delivery_id,
                    lease_token: c[1].lease_token,
                    outcome: SettleOutcome::Dead {
                        reason: "gave up".into(),
                    },
                    attempt: Some(attempt(Some(500), Some("http_500"))),
                },
                Settlement {
                    delivery_id: c[2].delivery_id,
                    lease_token: c[2].lease_token,
                    outcome: SettleOutcome::Release,
                    attempt: None,
                },
            ],
            now,
        )
        .await
        .unwrap();
    assert_eq!(applied.len(), 3);
    // Nothing is old enough yet.
    assert_eq!(store.purge(now, 100).await.unwrap(), 0);
    // Past retention only the delivered delivery goes, with its attempts and its message.
    assert_eq!(store.purge(now + 1, 100).await.unwrap(), 1);
    let left = deliveries(&store, all_of(&t)).await;
    assert_eq!(left.len(), 2);
    assert!(left.iter().all(|d| d.state != DeliveryState::Delivered));
    assert!(matches!(
        store.message(&t.id, &c[0].message_id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.attempts(&t.id, c[0].delivery_id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(store.message(&t.id, &c[1].message_id).await.is_ok());
    assert_eq!(
        store.attempts(&t.id, c[1].delivery_id).await.unwrap().len(),
        1
    );
    assert_eq!(store.purge(now + 1, 100).await.unwrap(), 0);
}

macro_rules! conformance {
    ($($check:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let (store, _dir) = crate::support::fresh_sqlite();
                    super::$check(store).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let Some(store) = crate::support::fresh_postgres_store().await else {
                        return;
                    };
                    super::$check(store).await;
                }
            )*
        }
    };
}

conformance!(
    check_settings_and_tenants,
    check_endpoint_crud,
    check_messages_and_fan_out,
    check_idempotency,
    check_concurrent_duplicates,
    check_failed_enqueue_is_atomic,
    check_claim_basics,
    check_concurrent_claimers,
    check_concurrent_claim_settle,
    check_fairness,
    check_round_robin_cursor,
    check_settle_outcomes,
    check_stale_token,
    check_extend_lease,
    check_reap_poison,
    check_replay,
    check_list_deliveries_and_attempts,
    check_queue_stats,
    check_work_signal,
    check_delete_tenant,
    check_purge,
);

/// LISTEN/NOTIFY crosses processes: an enqueue through a second store instance on the same
/// database wakes the first instance's idle dispatchers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_work_signal_crosses_instances() {
    let Some(url) = support::fresh_postgres().await else {
        return;
    };
    let idle: SharedStore = Arc::new(
        sluice::store::postgres::PostgresStore::connect(&url)
            .await
            .unwrap(),
    );
    let producer: SharedStore = Arc::new(
        sluice::store::postgres::PostgresStore::connect(&url)
            .await
            .unwrap(),
    );

    // Wait until both listener connections have issued LISTEN (so a missing wake-up below is
    // the driver's fault, not start-up timing).
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
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
    let claimed = idle.claim(&req(now_ms(), 10, 10)).await.unwrap();
    assert_eq!(claimed.len(), 1);
}
