//! Settling: every outcome, stale lease tokens, lease extension.

use super::*;

async fn check_settle_outcomes(store: SharedStore) {
    let t = tenant(&store).await;
    endpoint(&store, &t, &[]).await;
    let now = now_ms();
    enqueue_n(&store, &t, "a", 6, now).await;
    let claimed = store.claim(&req(now, 10, 10)).await.unwrap().claimed;
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
    let back = store.claim(&req(at, 10, 10)).await.unwrap().claimed;
    assert_eq!(ids(&back), BTreeSet::from([release.delivery_id]));
    let back = store
        .claim(&req(now + 9_000, 10, 10))
        .await
        .unwrap()
        .claimed;
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
    let old = store.claim(&r).await.unwrap().claimed.remove(0);

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
    let new = store.claim(&r).await.unwrap().claimed.remove(0);
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
    let c = store.claim(&r).await.unwrap().claimed.remove(0);

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

support::drivers!(check_settle_outcomes, check_stale_token, check_extend_lease,);

/// Settles find their rows by key on a queue that was young when their plans were made. The
/// store's statements run generic plans, made per connection when first run; made on a young
/// `deliveries` they read the whole table, and stay so as it grows until statistics arrive. This
/// makes that happen on a connection of its own (autovacuum kept away from the table, so only
/// the store can bring statistics), then writes a queue through the store and waits for the
/// same cached plan to be made again by key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_plans_made_on_a_young_queue_are_made_again_by_key() {
    let Some(url) = support::fresh_postgres().await else {
        return;
    };
    let store = support::postgres_store(&url).await;
    let t = tenant(&store).await;
    for _ in 0..10 {
        endpoint(&store, &t, &[]).await;
    }
    // A young queue: 200 deliveries, as after a new install's first seconds.
    enqueue_n(&store, &t, "a", 20, now_ms()).await;
    let watcher = support::postgres_client(&url).await;
    watcher
        .batch_execute(
            "ALTER TABLE deliveries SET (autovacuum_enabled = false); \
             SET plan_cache_mode = force_generic_plan; \
             PREPARE settle_like(bigint[], bigint, bigint) AS \
                 UPDATE deliveries SET updated_at_ms = $2 \
                 WHERE id = ANY($1) AND lease_token = $3",
        )
        .await
        .unwrap();
    let plan = || async {
        let rows = watcher
            .simple_query("EXPLAIN EXECUTE settle_like('{1,2,3}', 0, 0)")
            .await
            .unwrap();
        rows.iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let young = plan().await;
    assert!(
        young.contains("Seq Scan on deliveries"),
        "the generic plan made on a young queue reads the whole table:\n{young}"
    );

    // 600 messages more: 6,200 deliveries, more than the store waits for.
    enqueue_n(&store, &t, "a", 600, now_ms()).await;
    support::eventually(Duration::from_secs(30), || async {
        plan().await.contains("deliveries_pkey")
    })
    .await;
    let grown = plan().await;
    assert!(
        grown.contains("deliveries_pkey") && !grown.contains("Seq Scan"),
        "the same cached plan, once the store wrote 6,200 deliveries, finds rows by key:\n{grown}"
    );
}

/// A process that starts on a grown queue (statistics of thousands of deliveries) leaves its
/// statistics to autovacuum: the first analysis is for young queues only, and on months of
/// history it costs a second of the server's CPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_process_starting_on_a_grown_queue_does_not_analyze_it() {
    let Some(url) = support::fresh_postgres().await else {
        return;
    };
    let watcher = support::postgres_client(&url).await;
    let analyses = || async {
        watcher
            .query_one(
                "SELECT coalesce(sum(analyze_count), 0)::bigint FROM pg_stat_user_tables \
                 WHERE relname IN ('deliveries', 'messages', 'attempts')",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    {
        let young = support::postgres_store(&url).await;
        let t = tenant(&young).await;
        for _ in 0..10 {
            endpoint(&young, &t, &[]).await;
        }
        enqueue_n(&young, &t, "a", 620, now_ms()).await;
        // The young queue's first analysis: one of each table.
        support::eventually(Duration::from_secs(30), || async { analyses().await >= 3 }).await;
    }
    let before = analyses().await;
    let grown = support::postgres_store(&url).await;
    let t = tenant(&grown).await;
    for _ in 0..10 {
        endpoint(&grown, &t, &[]).await;
    }
    enqueue_n(&grown, &t, "a", 620, now_ms()).await;
    // The analysis would have started with the write that crossed 5,000; give it time to show.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(analyses().await, before, "no analysis of a grown queue");
}
