//! Claims: leases, concurrency, fairness and round robin over due endpoints, work due later.

use super::*;

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
            .claimed
            .is_empty()
    );
    assert!(
        store
            .claim(&req(now, 0, 100))
            .await
            .unwrap()
            .claimed
            .is_empty()
    );

    // `limit` bounds the batch; the lease carries everything needed to attempt it.
    let first = store.claim(&req(now, 5, 100)).await.unwrap().claimed;
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
    let second = store.claim(&req(now, 100, 3)).await.unwrap().claimed;
    let counts = endpoints_of(&second);
    assert!(counts.values().all(|&n| n == 3), "{counts:?}");
    assert_eq!(counts.len(), 2);
    assert!(ids(&first).is_disjoint(&ids(&second)));

    // `room` takes no more of an endpoint than its lane has free; others keep `per_endpoint`.
    let mut roomy = req(now, 100, 100);
    // (Both endpoints still have due work whichever of them the first claim drew from.)
    roomy.room = vec![(e1.id.clone(), 1), (e2.id.clone(), 1)];
    let roomed = store.claim(&roomy).await.unwrap().claimed;
    let counts = endpoints_of(&roomed);
    assert_eq!(counts.get(&e1.id).copied(), Some(1), "{counts:?}");
    assert_eq!(counts.get(&e2.id).copied(), Some(1), "{counts:?}");
    assert!(ids(&roomed).is_disjoint(&ids(&second)));

    // `exclude` skips endpoints whose lanes are full.
    let mut excluding = req(now, 100, 100);
    excluding.exclude = vec![e1.id.clone()];
    let third = store.claim(&excluding).await.unwrap().claimed;
    assert!(!third.is_empty());
    assert!(third.iter().all(|c| c.endpoint_id == e2.id));

    // Disabled endpoints are held, not claimed, and claimable again after re-enable.
    store
        .set_endpoint_enabled(&e1.id, false, Some("operator"), now)
        .await
        .unwrap();
    assert!(
        store
            .claim(&req(now, 100, 100))
            .await
            .unwrap()
            .claimed
            .is_empty()
    );
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
    let fourth = store.claim(&req(now, 100, 100)).await.unwrap().claimed;
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
                let batch = store.claim(&req(now, 16, 4)).await.expect("claim").claimed;
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
                let batch = store.claim(&req(now, 8, 2)).await.expect("claim").claimed;
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
        (
            stats.ready,
            stats.leased,
            store.delivered_count().await.unwrap()
        ),
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

    let batch = store.claim(&req(now, 64, 8)).await.unwrap().claimed;
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

/// Claims take due endpoints longest due first and put a served endpoint that has more work
/// behind the others: one delivery per claim visits every endpoint before any twice.
async fn check_round_robin(store: SharedStore) {
    let t = tenant(&store).await;
    let mut eps = Vec::new();
    for _ in 0..3 {
        eps.push(endpoint(&store, &t, &[]).await.id);
    }
    eps.sort();
    let now = now_ms();
    enqueue_n(&store, &t, "a", 3, now - 1_000).await;

    let mut order = Vec::new();
    for step in 0..9 {
        let batch = store.claim(&req(now + step, 1, 1)).await.unwrap().claimed;
        assert_eq!(batch.len(), 1, "step {step}");
        order.push(batch[0].endpoint_id.clone());
    }
    assert_eq!(
        order[..3].iter().collect::<BTreeSet<_>>().len(),
        3,
        "{order:?}"
    );
    assert_eq!(order[3..6], order[..3], "{order:?}");
    assert_eq!(order[6..9], order[..3], "{order:?}");
    assert!(
        store
            .claim(&req(now + 10, 10, 10))
            .await
            .unwrap()
            .claimed
            .is_empty()
    );
}

/// Work that becomes due later is claimed when it does, however often an idle claim ran in
/// between; an endpoint enabled again gets its waiting work claimed.
async fn check_due_later_and_after_enable(store: SharedStore) {
    let t = tenant(&store).await;
    let e = endpoint(&store, &t, &[]).await;
    let now = now_ms();
    enqueue_n(&store, &t, "a", 1, now).await;
    let first = store.claim(&req(now, 10, 10)).await.unwrap().claimed;
    assert_eq!(first.len(), 1);
    // Retry in 30 s: not due before, claimed after.
    let retry = SettleOutcome::Retry {
        at_ms: now + 30_000,
    };
    let applied = store
        .settle(&[settlement(&first[0], retry, None)], now)
        .await
        .unwrap();
    assert_eq!(applied.len(), 1);
    for s in 0..5 {
        assert!(
            store
                .claim(&req(now + s * 1_000, 10, 10))
                .await
                .unwrap()
                .claimed
                .is_empty()
        );
    }
    let again = store
        .claim(&req(now + 30_000, 10, 10))
        .await
        .unwrap()
        .claimed;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].delivery_id, first[0].delivery_id);

    // Disabled: nothing claimed, the work waits; enabled: claimed.
    store
        .set_endpoint_enabled(&e.id, false, Some("test"), now)
        .await
        .unwrap();
    let direct = NewMessage {
        only_endpoint: Some(e.id.clone()),
        traceparent: None,
        tracestate: None,
        ..message(&t, "a")
    };
    store.enqueue(&[direct], now + 31_000).await.unwrap();
    assert!(
        store
            .claim(&req(now + 32_000, 10, 10))
            .await
            .unwrap()
            .claimed
            .is_empty()
    );
    store
        .set_endpoint_enabled(&e.id, true, None, now + 33_000)
        .await
        .unwrap();
    assert_eq!(
        store
            .claim(&req(now + 33_000, 10, 10))
            .await
            .unwrap()
            .claimed
            .len(),
        1
    );
}

/// Producers and claimers at once (PostgreSQL: separate connections and transactions): nothing
/// deadlocks, and no delivery is left ready where no claim finds it.
async fn check_concurrent_enqueue_and_claim_strand_nothing(store: SharedStore) {
    // Many connections at once (PostgreSQL's pool): the race needs real concurrency.
    const PRODUCERS: usize = 8;
    const BATCHES: usize = 12;
    const PER_BATCH: usize = 20;
    let t = tenant(&store).await;
    for _ in 0..4 {
        endpoint(&store, &t, &[]).await;
    }
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut producers = Vec::new();
    for _ in 0..PRODUCERS {
        let (store, t) = (store.clone(), t.clone());
        producers.push(tokio::spawn(async move {
            for _ in 0..BATCHES {
                let batch: Vec<NewMessage> = (0..PER_BATCH).map(|_| message(&t, "a")).collect();
                store.enqueue(&batch, now_ms()).await.unwrap();
            }
        }));
    }
    let expected = PRODUCERS * BATCHES * PER_BATCH * 4;
    let delivered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut claimers = Vec::new();
    for _ in 0..6 {
        let (store, done, delivered) = (store.clone(), done.clone(), delivered.clone());
        claimers.push(tokio::spawn(async move {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let batch = store.claim(&req(now_ms(), 64, 8)).await.unwrap().claimed;
                if batch.is_empty() {
                    tokio::task::yield_now().await;
                    continue;
                }
                let settled: Vec<Settlement> = batch
                    .iter()
                    .map(|c| settlement(c, SettleOutcome::Delivered, None))
                    .collect();
                let applied = store.settle(&settled, now_ms()).await.unwrap();
                delivered.fetch_add(applied.len(), std::sync::atomic::Ordering::Relaxed);
            }
        }));
    }
    for p in producers {
        p.await.unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    for c in claimers {
        c.await.unwrap();
    }
    // Whatever is left must be claimable: a stranded delivery is ready but never claimed.
    let mut rest = 0;
    loop {
        let batch = store
            .claim(&req(now_ms() + 3_600_000, 500, 500))
            .await
            .unwrap()
            .claimed;
        if batch.is_empty() {
            break;
        }
        rest += batch.len();
    }
    let stats = store.queue_stats(now_ms()).await.unwrap();
    assert_eq!(
        stats.ready,
        0,
        "{} delivered during the run, {rest} claimed after it; {} ready deliveries no claim finds",
        delivered.load(std::sync::atomic::Ordering::Relaxed),
        stats.ready
    );
    assert_eq!(
        delivered.load(std::sync::atomic::Ordering::Relaxed) + rest,
        expected
    );
}

/// A hundred thousand endpoints, work due on a few: a claim finds the due ones and serves them
/// in turn (no starvation of the late-comer); endpoints with nothing due cost nothing to skip.
async fn check_claim_among_many_endpoints(store: SharedStore) {
    const ENDPOINTS: usize = 100_000;
    let t = tenant(&store).await;
    let now = now_ms();
    let mut ids = Vec::with_capacity(ENDPOINTS);
    let mut batch = Vec::with_capacity(1_000);
    for _ in 0..ENDPOINTS {
        let e = endpoint_for(&t, &["none"]);
        ids.push(e.id.clone());
        batch.push(e);
        if batch.len() == 1_000 {
            store
                .create_endpoints(&batch)
                .await
                .expect("create endpoints");
            batch.clear();
        }
    }
    // Five endpoints with work, spread over the id space; the last one gets its work later.
    let busy: Vec<&String> = [7, 20_011, 50_000, 77_777, 99_998]
        .iter()
        .map(|&i| &ids[i])
        .collect();
    for (n, e) in busy.iter().enumerate() {
        let msgs: Vec<NewMessage> = (0..20)
            .map(|_| NewMessage {
                only_endpoint: Some((*e).clone()),
                traceparent: None,
                tracestate: None,
                ..message(&t, "none")
            })
            .collect();
        let at = if n == 4 { now } else { now - 60_000 };
        store.enqueue(&msgs, at).await.unwrap();
    }
    let mut per: HashMap<String, usize> = HashMap::new();
    for step in 0..5 {
        let batch = store.claim(&req(now + step, 10, 2)).await.unwrap().claimed;
        assert_eq!(batch.len(), 10, "step {step}");
        for c in batch {
            *per.entry(c.endpoint_id).or_default() += 1;
        }
    }
    for e in &busy {
        assert_eq!(per.get(*e), Some(&10), "{per:?}");
    }
}

/// A claim that finds an endpoint empty while a writer's delivery for it is not yet committed
/// must not drop the endpoint from the due table: the delivery would never be claimed. Here the
/// writer is held open by hand at exactly that moment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_claim_keeps_an_endpoint_a_writer_is_filling() {
    let Some(url) = support::fresh_postgres().await else {
        return;
    };
    let store = support::postgres_store(&url).await;
    let t = tenant(&store).await;
    let e = endpoint(&store, &t, &[]).await;
    let now = now_ms();
    enqueue_n(&store, &t, "a", 1, now).await;

    let mut writer = support::postgres_client(&url).await;
    let tx = writer.transaction().await.unwrap();
    tx.execute(
        "INSERT INTO messages (id, tenant_id, event_type, payload, created_at_ms) \
         VALUES ('msg_held', $1, 'a', '{}', $2)",
        &[&t.id, &now],
    )
    .await
    .unwrap();
    tx.execute(
        "INSERT INTO deliveries (message_id, endpoint_id, tenant_id, state, attempts, \
         visible_at_ms, created_at_ms, updated_at_ms) VALUES ('msg_held', $1, $2, 0, 0, $3, $3, $3)",
        &[&e.id, &t.id, &now],
    )
    .await
    .unwrap();
    // The committed delivery is claimed; the writer's is not visible yet, so the endpoint looks
    // empty to this claim.
    let first = store.claim(&req(now, 10, 10)).await.unwrap().claimed;
    assert_eq!(first.len(), 1);
    assert_ne!(first[0].message_id, "msg_held");
    tx.commit().await.unwrap();
    let second = store.claim(&req(now + 1, 10, 10)).await.unwrap().claimed;
    assert_eq!(
        second
            .iter()
            .map(|c| c.message_id.as_str())
            .collect::<Vec<_>>(),
        ["msg_held"],
        "the writer's delivery was stranded"
    );
}

/// Issue 23: the deliveries a claim took are handed out only once its correction of the due
/// tables (after the claim's commit) ends, so that correction must never wait for another
/// transaction: waiting held the batch back until the other ended, and two corrections taking
/// the same rows in different orders deadlocked until PostgreSQL's `deadlock_timeout` (1 s)
/// broke the cycle, the fleet's one-second tail. Here another transaction holds, by hand, the
/// row the correction must change; the claim must come back with its delivery while it still
/// does, and its connection must never be seen waiting for a lock.
async fn claim_beside_a_held_row(url: &str, lock: &str, id: &str) {
    let mut other = support::postgres_client(url).await;
    let watcher = support::postgres_client(url).await;
    let store = support::postgres_store(url).await;
    let t = tenant(&store).await;
    let e = endpoint(&store, &t, &[]).await;
    let now = now_ms();
    enqueue_n(&store, &t, "a", 1, now).await;
    let held = match id {
        "endpoint" => e.id.clone(),
        _ => t.id.clone(),
    };
    let tx = other.transaction().await.unwrap();
    assert_eq!(tx.execute(lock, &[&held]).await.unwrap(), 1, "{lock}");

    // The claim takes the endpoint's only delivery, so its correction moves the endpoint's row
    // and its tenant's: exactly the row held.
    let claim = {
        let store = store.clone();
        tokio::spawn(async move { store.claim(&req(now, 10, 10)).await })
    };
    while !claim.is_finished() {
        let waiting: i64 = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            tx.rollback().await.unwrap();
            panic!(
                "the claim's correction waits for another transaction's lock on the {id}'s due \
                 row: its deliveries are held back until that transaction ends"
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let got = claim.await.unwrap().unwrap().claimed;
    assert_eq!(got.len(), 1, "the claimed delivery comes back");
    tx.rollback().await.unwrap();
    // The row left due is found empty by a later claim and corrected then.
    assert!(
        store
            .claim(&req(now + 1, 10, 10))
            .await
            .unwrap()
            .claimed
            .is_empty()
    );
    enqueue_n(&store, &t, "a", 1, now + 2).await;
    assert_eq!(
        store
            .claim(&req(now + 3, 10, 10))
            .await
            .unwrap()
            .claimed
            .len(),
        1
    );
}

/// The endpoint's row held by another transaction (in a mode a claim's own lock does not
/// conflict with, so only the correction meets it, as when another correction or a writer
/// takes the row between a claim's commit and its correction).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_claim_correction_never_waits_for_an_endpoint_row() {
    let Some(url) = support::fresh_postgres().await else {
        return;
    };
    claim_beside_a_held_row(
        &url,
        "SELECT 1 FROM due_endpoints WHERE endpoint_id = $1 FOR KEY SHARE",
        "endpoint",
    )
    .await;
}

/// The tenant's row held as another dispatcher's charge or correction holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_claim_correction_never_waits_for_a_tenant_row() {
    let Some(url) = support::fresh_postgres().await else {
        return;
    };
    claim_beside_a_held_row(
        &url,
        "SELECT 1 FROM due_tenants WHERE tenant_id = $1 FOR NO KEY UPDATE",
        "tenant",
    )
    .await;
}

/// An endpoint whose due work a claim took all of loses its due row (moved after the claim
/// committed, in a transaction of its own on PostgreSQL) and is found again once new work
/// arrives, round after round; deleting an endpoint takes its due row with it (no foreign key
/// does it any more), so claims neither find its work nor trip over it.
async fn check_emptied_and_deleted_endpoints(store: SharedStore) {
    let t = tenant(&store).await;
    let a = endpoint(&store, &t, &["a"]).await;
    let b = endpoint(&store, &t, &["b"]).await;
    let now = now_ms();
    for round in 0..5 {
        let at = now + round * 1_000;
        enqueue_n(&store, &t, "a", 2, at).await;
        let got = store.claim(&req(at, 10, 10)).await.unwrap().claimed;
        assert_eq!(got.len(), 2, "round {round}: both found");
        assert!(
            store
                .claim(&req(at, 10, 10))
                .await
                .unwrap()
                .claimed
                .is_empty()
        );
        let done: Vec<Settlement> = got
            .iter()
            .map(|c| settlement(c, SettleOutcome::Delivered, Some(attempt(Some(200), None))))
            .collect();
        assert_eq!(store.settle(&done, at).await.unwrap().len(), 2);
    }
    enqueue_n(&store, &t, "b", 3, now + 10_000).await;
    store.delete_endpoint(&t.id, &b.id).await.unwrap();
    assert!(
        store
            .claim(&req(now + 10_000, 10, 10))
            .await
            .unwrap()
            .claimed
            .is_empty()
    );
    enqueue_n(&store, &t, "a", 1, now + 11_000).await;
    let got = store
        .claim(&req(now + 11_000, 10, 10))
        .await
        .unwrap()
        .claimed;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].endpoint_id, a.id);
}

support::drivers!(
    check_emptied_and_deleted_endpoints,
    check_claim_basics,
    check_concurrent_claimers,
    check_concurrent_claim_settle,
    check_fairness,
    check_round_robin,
    check_due_later_and_after_enable,
    check_concurrent_enqueue_and_claim_strand_nothing,
    check_claim_among_many_endpoints,
);

/// A claim whose answer never reached its process (the deadline passed while the database
/// held it; a freeze or a broken connection does the same) may still commit, leasing its
/// deliveries to nobody. The process's next claim gives them back and they go out at once,
/// not when the lease ends a minute later. Here the claim's charge waits on the test's lock of
/// the tenant's row, and the claim, sent behind it on the same connection, commits once the
/// lock is let go: with certainty, and after the store gave up on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_claim_whose_answer_was_lost_gives_its_deliveries_back_at_the_next_claim() {
    let Some(url) = support::fresh_postgres().await else {
        return;
    };
    let store = sluice::store::deadline::Bounded::wrap(
        support::postgres_store(&url).await,
        Duration::from_secs(1),
    );
    let t = tenant(&store).await;
    endpoint(&store, &t, &[]).await;
    let now = now_ms();
    enqueue_n(&store, &t, "a", 5, now).await;

    let mut holder = support::postgres_client(&url).await;
    let lock = holder.transaction().await.unwrap();
    let held = lock
        .execute(
            "SELECT 1 FROM due_tenants WHERE tenant_id = $1 FOR UPDATE",
            &[&t.id],
        )
        .await
        .unwrap();
    assert_eq!(held, 1, "the tenant is due");
    let charged = ClaimRequest {
        charges: vec![TenantCharge {
            tenant_id: t.id.clone(),
            start: 0.0,
            seconds: 0.1,
            deliveries: 1,
        }],
        ..req(now, 5, 5)
    };
    let lost = store.claim(&charged).await;
    assert!(
        matches!(lost, Err(StoreError::Unavailable(_))),
        "the claim waits behind its charge past the deadline: {lost:?}"
    );
    lock.commit().await.unwrap();
    // Now it runs, and leases the five for a minute.
    let watcher = support::postgres_client(&url).await;
    let leased = || async {
        watcher
            .query_one("SELECT count(*) FROM deliveries WHERE state = 1", &[])
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    assert!(
        support::eventually(Duration::from_secs(10), || async { leased().await == 5 }).await,
        "the lost claim committed: {} leased",
        leased().await
    );

    let got = store.claim(&req(now_ms(), 5, 5)).await.unwrap().claimed;
    assert_eq!(
        got.len(),
        5,
        "the next claim has the lost claim's deliveries"
    );
    let attempts: Vec<u32> = got.iter().map(|c| c.attempts).collect();
    assert_eq!(attempts, [0; 5], "giving back is no attempt");
    assert_eq!(leased().await, 5, "leased once more, to this claim");
}
