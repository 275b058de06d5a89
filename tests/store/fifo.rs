//! FIFO endpoints: one delivery in flight at a time, fleet-wide, in acceptance order; the next
//! only once the one before it is delivered or dead-lettered.

use super::*;

use tokio::sync::Mutex;

async fn fifo_endpoint(store: &SharedStore, tenant: &Tenant) -> Endpoint {
    let e = Endpoint {
        ordering: DeliveryOrder::Fifo,
        ..endpoint_for(tenant, &[])
    };
    store.create_endpoint(&e).await.expect("create endpoint");
    e
}

/// Messages accepted one after another (each acknowledged before the next is sent), so their
/// acceptance order is total; returns their ids in that order.
async fn accept_in_order(store: &SharedStore, tenant: &Tenant, n: usize, now: i64) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        let m = message(tenant, "a");
        ids.push(m.id.clone());
        store.enqueue(&[m], now).await.expect("enqueue");
    }
    ids
}

fn of<'a>(claimed: &'a [Claimed], endpoint: &Endpoint) -> Vec<&'a Claimed> {
    claimed
        .iter()
        .filter(|c| c.endpoint_id == endpoint.id)
        .collect()
}

async fn check_fifo_takes_only_the_head(store: SharedStore) {
    let t = tenant(&store).await;
    let fifo = fifo_endpoint(&store, &t).await;
    let open = endpoint(&store, &t, &[]).await;
    let now = now_ms();
    let order = accept_in_order(&store, &t, 6, now).await;
    let settle_one = |c: &Claimed, outcome, attempt| {
        let s = settlement(c, outcome, attempt);
        let store = store.clone();
        async move { store.settle(&[s], now).await.unwrap() }
    };

    // The unordered endpoint gives all it has; the FIFO one its head alone.
    let batch = store.claim(&req(now, 100, 100)).await.unwrap().claimed;
    let others: Vec<Settlement> = of(&batch, &open)
        .iter()
        .map(|c| settlement(c, SettleOutcome::Delivered, Some(attempt(Some(200), None))))
        .collect();
    assert_eq!(others.len(), 6);
    store.settle(&others, now).await.unwrap();
    let heads = of(&batch, &fifo);
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert_eq!(heads[0].message_id, order[0]);
    // While the head is leased, nothing behind it goes, however much room is offered.
    let clock = now + 1;
    assert!(
        of(
            &store.claim(&req(clock, 100, 100)).await.unwrap().claimed,
            &fifo
        )
        .is_empty(),
        "a second delivery in flight"
    );

    // Delivered: the next one.
    settle_one(
        heads[0],
        SettleOutcome::Delivered,
        Some(attempt(Some(200), None)),
    )
    .await;
    let batch = store.claim(&req(clock, 100, 100)).await.unwrap().claimed;
    let second = of(&batch, &fifo);
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].message_id, order[1]);

    // A retry holds everything behind it until its turn, then goes first.
    settle_one(
        second[0],
        SettleOutcome::Retry { at_ms: now + 5_000 },
        Some(attempt(Some(500), None)),
    )
    .await;
    assert!(
        of(
            &store
                .claim(&req(now + 4_000, 100, 100))
                .await
                .unwrap()
                .claimed,
            &fifo
        )
        .is_empty(),
        "something overtook a head waiting to retry"
    );
    let batch = store
        .claim(&req(now + 5_000, 100, 100))
        .await
        .unwrap()
        .claimed;
    let again = of(&batch, &fifo);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].message_id, order[1]);
    assert_eq!(again[0].attempts, 1);

    // Dead-lettered: the next one goes.
    settle_one(
        again[0],
        SettleOutcome::Dead {
            reason: "retries exhausted".into(),
        },
        Some(attempt(Some(500), None)),
    )
    .await;
    let batch = store
        .claim(&req(now + 5_001, 100, 100))
        .await
        .unwrap()
        .claimed;
    let third = of(&batch, &fifo);
    assert_eq!(third.len(), 1);
    assert_eq!(third[0].message_id, order[2]);

    // Shed (not attempted): it stays the head.
    settle_one(third[0], SettleOutcome::Shed { at_ms: now + 6_000 }, None).await;
    assert!(
        of(
            &store
                .claim(&req(now + 5_500, 100, 100))
                .await
                .unwrap()
                .claimed,
            &fifo
        )
        .is_empty()
    );
    let batch = store
        .claim(&req(now + 6_000, 100, 100))
        .await
        .unwrap()
        .claimed;
    let shed = of(&batch, &fifo);
    assert_eq!(shed.len(), 1);
    assert_eq!(shed[0].message_id, order[2]);
    assert_eq!(shed[0].attempts, 0, "a shed is not an attempt");

    // Its lease expires (the dispatcher was killed mid-attempt): the reaper returns the head,
    // and it goes again before anything behind it.
    let expired_at = now + 6_000 + 60_000 + 1;
    let report = store.reap(expired_at, 5).await.unwrap();
    assert_eq!(report.returned, 1);
    let batch = store
        .claim(&req(expired_at, 100, 100))
        .await
        .unwrap()
        .claimed;
    let returned = of(&batch, &fifo);
    assert_eq!(returned.len(), 1);
    assert_eq!(returned[0].message_id, order[2]);
    settle_one(
        returned[0],
        SettleOutcome::Delivered,
        Some(attempt(Some(200), None)),
    )
    .await;

    // Replaying a delivered one puts it back in its place: before everything still waiting.
    let first = store
        .list_deliveries(&DeliveryFilter {
            endpoint_id: Some(fifo.id.clone()),
            message_id: Some(order[0].clone()),
            ..all_of(&t)
        })
        .await
        .unwrap();
    assert_eq!(
        store
            .replay(&t.id, ReplayTarget::Resend(first[0].id), expired_at)
            .await
            .unwrap(),
        1
    );
    let batch = store
        .claim(&req(expired_at + 1, 100, 100))
        .await
        .unwrap()
        .claimed;
    let replayed = of(&batch, &fifo);
    assert_eq!(replayed.len(), 1);
    assert_eq!(replayed[0].message_id, order[0]);
    settle_one(
        replayed[0],
        SettleOutcome::Delivered,
        Some(attempt(Some(200), None)),
    )
    .await;

    // Then the rest, one at a time, in order.
    let mut clock = expired_at + 2;
    for expected in &order[3..] {
        let batch = store.claim(&req(clock, 100, 100)).await.unwrap().claimed;
        let got = of(&batch, &fifo);
        assert_eq!(got.len(), 1);
        assert_eq!(&got[0].message_id, expected);
        settle_one(
            got[0],
            SettleOutcome::Delivered,
            Some(attempt(Some(200), None)),
        )
        .await;
        clock += 1;
    }
    assert!(
        store
            .claim(&req(clock, 100, 100))
            .await
            .unwrap()
            .claimed
            .is_empty()
    );
}

/// A head dead-lettered as poison by the reaper lets the next one go.
async fn check_fifo_poison_head_lets_the_next_go(store: SharedStore) {
    let t = tenant(&store).await;
    let fifo = fifo_endpoint(&store, &t).await;
    let now = now_ms();
    let order = accept_in_order(&store, &t, 2, now).await;
    let mut clock = now;
    for _ in 0..2 {
        let mut r = req(clock, 10, 10);
        r.lease_ms = 1_000;
        let batch = store.claim(&r).await.unwrap().claimed;
        assert_eq!(batch.len(), 1);
        assert_eq!(batch[0].message_id, order[0]);
        clock += 5_000;
        store.reap(clock, 2).await.unwrap();
    }
    let batch = store.claim(&req(clock, 10, 10)).await.unwrap().claimed;
    assert_eq!(batch.len(), 1, "the poison head still holds the queue");
    assert_eq!(batch[0].message_id, order[1]);
    assert_eq!(batch[0].endpoint_id, fifo.id);
}

/// Several dispatchers claim at once, one of them dies holding heads (its leases expire and
/// the reaper returns them): each FIFO endpoint still never has two deliveries in flight, and
/// its receiver sees its messages in acceptance order (a head seen twice, at the death, is the
/// one duplicate allowed).
async fn check_fifo_order_under_concurrent_claims(store: SharedStore) {
    const ENDPOINTS: usize = 12;
    const MESSAGES: usize = 15;
    const DISPATCHERS: usize = 4;
    let t = tenant(&store).await;
    let mut fifo = Vec::new();
    for _ in 0..ENDPOINTS {
        fifo.push(fifo_endpoint(&store, &t).await.id);
    }
    let open = endpoint(&store, &t, &[]).await;
    let now = now_ms();
    let order = accept_in_order(&store, &t, MESSAGES, now).await;

    #[derive(Default)]
    struct Seen {
        /// Endpoint → the delivery it has in flight.
        in_flight: HashMap<String, i64>,
        /// Endpoint → messages its receiver saw, in order.
        received: HashMap<String, Vec<String>>,
        violations: Vec<String>,
    }
    let seen = Arc::new(Mutex::new(Seen::default()));
    let clock = Arc::new(std::sync::atomic::AtomicI64::new(now));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));

    // The dispatcher that dies: it claims heads, the receivers see them, it never settles.
    let dead = store.claim(&req(now, 5, 1)).await.unwrap().claimed;
    assert!(!dead.is_empty());
    {
        let mut s = seen.lock().await;
        for c in dead.iter().filter(|c| c.endpoint_id != open.id) {
            s.received
                .entry(c.endpoint_id.clone())
                .or_default()
                .push(c.message_id.clone());
        }
    }

    let mut tasks = Vec::new();
    for d in 0..DISPATCHERS {
        let (store, seen, clock, stop, open) = (
            store.clone(),
            seen.clone(),
            clock.clone(),
            stop.clone(),
            open.id.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let now = clock.load(std::sync::atomic::Ordering::SeqCst);
                let batch = store.claim(&req(now, 7, 3)).await.unwrap().claimed;
                let mine: Vec<&Claimed> = batch.iter().filter(|c| c.endpoint_id != open).collect();
                if batch.is_empty() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                {
                    let mut s = seen.lock().await;
                    for c in &mine {
                        if let Some(other) =
                            s.in_flight.insert(c.endpoint_id.clone(), c.delivery_id)
                        {
                            s.violations.push(format!(
                                "dispatcher {d}: {} claimed while {other} is in flight on {}",
                                c.delivery_id, c.endpoint_id
                            ));
                        }
                        s.received
                            .entry(c.endpoint_id.clone())
                            .or_default()
                            .push(c.message_id.clone());
                    }
                }
                // The attempt, then its settlement: in flight until the settle commits.
                tokio::task::yield_now().await;
                let settles: Vec<Settlement> = batch
                    .iter()
                    .map(|c| {
                        settlement(c, SettleOutcome::Delivered, Some(attempt(Some(200), None)))
                    })
                    .collect();
                {
                    let mut s = seen.lock().await;
                    for c in &mine {
                        s.in_flight.remove(&c.endpoint_id);
                    }
                }
                store.settle(&settles, now).await.unwrap();
            }
        }));
    }
    // Once the live dispatchers are idle, the dead one's leases expire and come back.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let later = now + 60_000 + 1;
    clock.store(later, std::sync::atomic::Ordering::SeqCst);
    let report = store.reap(later, 5).await.unwrap();
    assert_eq!(report.returned as usize, dead.len());
    let total = (ENDPOINTS + 1) * MESSAGES;
    let all_delivered = support::eventually(Duration::from_secs(30), || {
        let store = store.clone();
        let filter = DeliveryFilter {
            state: Some(DeliveryState::Delivered),
            ..all_of(&t)
        };
        async move { store.list_deliveries(&filter).await.unwrap().len() == total }
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for task in tasks {
        task.await.unwrap();
    }
    let s = seen.lock().await;
    assert!(s.violations.is_empty(), "{:#?}", s.violations);
    assert!(all_delivered, "not everything was delivered");
    for e in &fifo {
        let mut got = s.received.get(e).cloned().unwrap_or_default();
        got.dedup();
        assert_eq!(got, order, "endpoint {e} received out of order");
    }
}

/// Switching an endpoint from FIFO to unordered with a backlog and its head in flight: once
/// the head settles, the rest go together.
async fn check_fifo_switched_off_releases_the_backlog(store: SharedStore) {
    let t = tenant(&store).await;
    let mut e = fifo_endpoint(&store, &t).await;
    let now = now_ms();
    accept_in_order(&store, &t, 4, now).await;
    let head = store.claim(&req(now, 10, 10)).await.unwrap().claimed;
    assert_eq!(head.len(), 1);
    e.ordering = DeliveryOrder::Unordered;
    store.update_endpoint(&e).await.unwrap();
    store
        .settle(
            &[settlement(
                &head[0],
                SettleOutcome::Delivered,
                Some(attempt(Some(200), None)),
            )],
            now,
        )
        .await
        .unwrap();
    let rest = store.claim(&req(now + 1, 10, 10)).await.unwrap().claimed;
    assert_eq!(rest.len(), 3);
}

support::drivers!(
    check_fifo_takes_only_the_head,
    check_fifo_poison_head_lets_the_next_go,
    check_fifo_order_under_concurrent_claims,
    check_fifo_switched_off_releases_the_backlog,
);

// ---- the ordering core, by property ------------------------------------------------------------

mod property {
    use super::*;

    use proptest::prelude::*;

    /// One step a fleet might take.
    #[derive(Debug, Clone)]
    enum Step {
        /// Messages accepted one after another.
        Accept(usize),
        /// A claim with this limit and per-endpoint share.
        Claim(u32, u32),
        /// The in-flight delivery at this index (modulo) ends: 0 delivered, 1 retry, 2 dead,
        /// 3 shed.
        Settle(usize, u8),
        /// Time passes (ms).
        Tick(i64),
        /// Every lease expires and the reaper returns them (the dispatchers were killed).
        Expire,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            2 => (1usize..4).prop_map(Step::Accept),
            4 => (1u32..6, 1u32..4).prop_map(|(l, p)| Step::Claim(l, p)),
            4 => (0usize..8, 0u8..4).prop_map(|(i, o)| Step::Settle(i, o)),
            1 => (1i64..3_000).prop_map(Step::Tick),
            1 => Just(Step::Expire),
        ]
    }

    const LEASE_MS: i64 = 60_000;

    /// What the receivers of the FIFO endpoints must see: per endpoint, the messages finished
    /// (delivered or dead-lettered) in acceptance order, and at most one in flight.
    struct Model {
        order: Vec<String>,
        /// Endpoint → index (in `order`) of the next message not finished.
        next: HashMap<String, usize>,
        /// In flight: the claim, and whether it is on a FIFO endpoint.
        in_flight: Vec<Claimed>,
    }

    async fn run(steps: Vec<Step>) -> Result<(), TestCaseError> {
        let (store, _dir) = support::fresh_sqlite();
        let t = tenant(&store).await;
        let fifo: Vec<String> = [
            fifo_endpoint(&store, &t).await,
            fifo_endpoint(&store, &t).await,
        ]
        .into_iter()
        .map(|e| e.id)
        .collect();
        endpoint(&store, &t, &[]).await;
        let mut clock = now_ms();
        let mut m = Model {
            order: Vec::new(),
            next: fifo.iter().map(|e| (e.clone(), 0)).collect(),
            in_flight: Vec::new(),
        };
        let claim = |clock: i64, limit: u32, per: u32| {
            let store = store.clone();
            async move {
                let mut r = req(clock, limit, per);
                r.lease_ms = LEASE_MS;
                store.claim(&r).await.unwrap().claimed
            }
        };
        for s in steps.into_iter().chain([Step::Expire]) {
            match s {
                Step::Accept(n) => m.order.extend(accept_in_order(&store, &t, n, clock).await),
                Step::Claim(limit, per) => {
                    for c in claim(clock, limit, per).await {
                        if let Some(&next) = m.next.get(&c.endpoint_id) {
                            prop_assert!(
                                !m.in_flight.iter().any(|f| f.endpoint_id == c.endpoint_id),
                                "two in flight on {}",
                                c.endpoint_id
                            );
                            prop_assert_eq!(
                                Some(&c.message_id),
                                m.order.get(next),
                                "not the head of {}",
                                c.endpoint_id
                            );
                        }
                        m.in_flight.push(c);
                    }
                }
                Step::Settle(i, outcome) if !m.in_flight.is_empty() => {
                    let c = m.in_flight.remove(i % m.in_flight.len());
                    let (outcome, attempt_made) = match outcome {
                        0 => (SettleOutcome::Delivered, true),
                        1 => (
                            SettleOutcome::Retry {
                                at_ms: clock + 1_000,
                            },
                            true,
                        ),
                        2 => (
                            SettleOutcome::Dead {
                                reason: "gone".into(),
                            },
                            true,
                        ),
                        _ => (SettleOutcome::Shed { at_ms: clock + 500 }, false),
                    };
                    let finished = matches!(
                        outcome,
                        SettleOutcome::Delivered | SettleOutcome::Dead { .. }
                    );
                    let a = attempt_made.then(|| attempt(Some(200), None));
                    store
                        .settle(&[settlement(&c, outcome, a)], clock)
                        .await
                        .unwrap();
                    if finished && let Some(next) = m.next.get_mut(&c.endpoint_id) {
                        *next += 1;
                    }
                }
                Step::Settle(..) => {}
                Step::Tick(ms) => clock += ms,
                Step::Expire => {
                    clock += LEASE_MS + 1;
                    store.reap(clock, 1_000).await.unwrap();
                    m.in_flight.clear();
                }
            }
        }
        // Then everything goes, in order: nothing is stranded.
        for _ in 0..(m.order.len() * 3 + 10) {
            clock += 1_001;
            let batch = claim(clock, 10, 10).await;
            for c in &batch {
                if let Some(next) = m.next.get_mut(&c.endpoint_id) {
                    prop_assert_eq!(Some(&c.message_id), m.order.get(*next));
                    *next += 1;
                }
            }
            let done: Vec<Settlement> = batch
                .iter()
                .map(|c| settlement(c, SettleOutcome::Delivered, Some(attempt(Some(200), None))))
                .collect();
            store.settle(&done, clock).await.unwrap();
        }
        for e in &fifo {
            prop_assert_eq!(m.next[e], m.order.len(), "{} stranded messages", e);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

        /// Whatever claims, settlements, retries, sheds, dead letters and lease expiries come
        /// in whatever order, a FIFO endpoint's claims are its head alone, never two in flight,
        /// and in the end every message goes, in acceptance order.
        #[test]
        fn fifo_claims_follow_acceptance_order(steps in prop::collection::vec(step(), 1..40)) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(run(steps))?;
        }
    }
}
