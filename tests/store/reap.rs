//! The reaper and dead letters: expired leases, poison leases, replay.

use super::*;

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
        let claimed = store.claim(&r).await.unwrap().claimed;
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
    assert!(
        store
            .claim(&req(clock, 1, 1))
            .await
            .unwrap()
            .claimed
            .is_empty()
    );
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

/// Issue 10, finding 7: a poison lease is N expiries in a row. Expiries with a settle between
/// them (an attempt, or a shed that ended the lease normally) never add up to a dead letter,
/// however many crashes the delivery lives through.
async fn check_reap_counts_expiries_in_a_row(store: SharedStore) {
    const MAX: u32 = 3;
    let t = tenant(&store).await;
    endpoint(&store, &t, &[]).await;
    let mut clock = now_ms();
    enqueue_n(&store, &t, "a", 1, clock).await;
    let claim = |clock: i64| {
        let store = store.clone();
        async move {
            let mut r = req(clock, 1, 1);
            r.lease_ms = 1_000;
            let mut claimed = store.claim(&r).await.unwrap().claimed;
            assert_eq!(claimed.len(), 1, "nothing to claim at {clock}");
            claimed.remove(0)
        }
    };
    // Expire twice (one short of the limit), then settle; ten times over: 20 expiries in all.
    for round in 0..10 {
        for _ in 0..MAX - 1 {
            claim(clock).await;
            clock += 5_000;
            assert_eq!(
                store.reap(clock, MAX).await.unwrap(),
                ReapReport {
                    returned: 1,
                    dead: 0
                },
                "round {round}"
            );
        }
        let c = claim(clock).await;
        let (outcome, attempt) = if round % 2 == 0 {
            (
                SettleOutcome::Retry { at_ms: clock },
                Some(attempt(Some(500), Some("http_500"))),
            )
        } else {
            (SettleOutcome::Shed { at_ms: clock }, None)
        };
        let applied = store
            .settle(&[settlement(&c, outcome, attempt)], clock)
            .await
            .unwrap();
        assert_eq!(applied, vec![c.delivery_id]);
    }
    let c = claim(clock).await;
    let d = delivery(&store, &t, c.delivery_id).await;
    assert_eq!((d.state, d.attempts), (DeliveryState::Leased, 5));

    // Now MAX expiries in a row, nothing settled between them: poison.
    for expiry in 1..=MAX {
        if expiry > 1 {
            claim(clock).await;
        }
        clock += 5_000;
        let report = store.reap(clock, MAX).await.unwrap();
        let dead = u64::from(expiry == MAX);
        assert_eq!(
            report,
            ReapReport {
                returned: 1 - dead,
                dead
            },
            "expiry {expiry}"
        );
    }
    let d = delivery(&store, &t, c.delivery_id).await;
    assert_eq!(d.state, DeliveryState::Dead);
    assert_eq!(d.attempts, 5, "the poison verdict keeps the attempts made");
    assert!(
        d.last_error
            .as_deref()
            .is_some_and(|e| e.contains("lease expired 3 times")),
        "{:?}",
        d.last_error
    );
}

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
    let claimed = store.claim(&req(now, 100, 100)).await.unwrap().claimed;
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
    let again = store.claim(&req(now + 2, 100, 100)).await.unwrap().claimed;
    let mut expected: BTreeSet<i64> = on_e1.iter().map(|c| c.delivery_id).collect();
    expected.insert(one);
    assert_eq!(ids(&again), expected);
    assert!(again.iter().all(|c| c.attempts == 0));
}

support::drivers!(
    check_reap_poison,
    check_reap_counts_expiries_in_a_row,
    check_replay,
);
