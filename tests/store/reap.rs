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

/// A heartbeat of dispatcher `id` written at `at_ms`, idle.
fn heartbeat(id: &str, at_ms: i64) -> Heartbeat {
    Heartbeat {
        id: id.into(),
        host: "test".into(),
        started_at_ms: at_ms,
        beat_at_ms: at_ms,
        in_flight: 0,
        concurrency: 8,
        capacity: 8,
        arrivals_per_s: 0.0,
        mean_service_s: 0.0,
        draining: false,
        tally: Tally::default(),
        host_seconds: HostSeconds::default(),
    }
}

/// How many live backends dispatcher `id`'s heartbeat names that have been connected at least
/// `connected_ms` (0 or 1).
async fn backends(sql: &tokio_postgres::Client, id: &str, connected_ms: i64) -> i64 {
    sql.query_one(
        "SELECT count(*) FROM pg_stat_activity a JOIN dispatchers d ON a.pid = d.backend_pid \
         WHERE d.id = $1 AND a.backend_start <= now() - $2::bigint * interval '1 millisecond'",
        &[&id, &connected_ms],
    )
    .await
    .unwrap()
    .get(0)
}

/// A dispatcher killed outright (PostgreSQL): once its process is gone (its listener's backend)
/// and its heartbeat is old, another dispatcher's reaper expires its leases at once, not at
/// their TTL, and only its; not while its backend lives, nor while its heartbeat is young, nor
/// while the asking process has not itself been connected that long (after an outage, everyone
/// gets that long to beat again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leases_of_a_dead_dispatcher_come_back_before_their_ttl() {
    let Some(url) = support::fresh_postgres().await else {
        return;
    };
    let connect = || async {
        Arc::new(
            sluice::store::postgres::PostgresStore::connect(&url)
                .await
                .expect("connect"),
        ) as SharedStore
    };
    let (dead, live) = (connect().await, connect().await);
    let sql = support::postgres_client(&url).await;
    let t = tenant(&live).await;
    endpoint(&live, &t, &[]).await;
    let now = now_ms();
    enqueue_n(&live, &t, "a", 3, now).await;
    let mut r = req(now, 2, 2);
    r.lease_ms = 600_000;
    let lost = dead.claim(&r).await.unwrap().claimed;
    assert_eq!(lost.len(), 2);
    let mut r = req(now, 1, 1);
    r.lease_ms = 600_000;
    let kept = live.claim(&r).await.unwrap().claimed;
    assert_eq!(kept.len(), 1);
    assert!(
        dead.beat(&heartbeat("dsp_dead", now - 60_000))
            .await
            .unwrap()
    );
    assert!(live.beat(&heartbeat("dsp_live", now_ms())).await.unwrap());
    let expire = |dead_after_ms: i64| {
        let live = live.clone();
        async move {
            live.expire_leases_of_dead(now_ms(), dead_after_ms)
                .await
                .unwrap()
        }
    };
    // Old heartbeat, but its process lives.
    assert!(
        support::eventually(Duration::from_secs(10), || async {
            backends(&sql, "dsp_live", 600).await == 1
        })
        .await,
        "the live store's listener has been connected for a while"
    );
    assert_eq!(expire(500).await, 0, "a live process's leases are its own");

    // Killed: its listener's connection goes, and nothing beats for it again.
    sql.execute(
        "SELECT pg_terminate_backend(backend_pid) FROM dispatchers WHERE id = 'dsp_dead'",
        &[],
    )
    .await
    .unwrap();
    assert!(
        support::eventually(Duration::from_secs(10), || async {
            backends(&sql, "dsp_dead", 0).await == 0
        })
        .await,
        "the killed backend is gone"
    );
    // Its heartbeat young: a dispatcher may just have lost its connection and be beating anew.
    sql.execute(
        "UPDATE dispatchers SET beat_at_ms = $1 WHERE id = 'dsp_dead'",
        &[&now_ms()],
    )
    .await
    .unwrap();
    assert_eq!(expire(60_000).await, 0, "a young heartbeat is not dead");
    sql.execute(
        "UPDATE dispatchers SET beat_at_ms = $1 WHERE id = 'dsp_dead'",
        &[&(now - 3_600_000)],
    )
    .await
    .unwrap();
    // The asker has not been connected for the whole window: it cannot tell an outage.
    assert_eq!(
        expire(600_000).await,
        0,
        "judged only by a process connected that long"
    );

    assert_eq!(expire(500).await, 2, "the dead process's two leases expire");
    assert_eq!(expire(500).await, 0, "once");
    let report = live.reap(now_ms(), 5).await.unwrap();
    assert_eq!(
        report,
        ReapReport {
            returned: 2,
            dead: 0
        }
    );
    for c in &lost {
        let d = delivery(&live, &t, c.delivery_id).await;
        assert_eq!(d.state, DeliveryState::Ready, "returned to the queue");
        assert_eq!(d.attempts, 0, "an expiry is not an attempt");
    }
    assert_eq!(
        delivery(&live, &t, kept[0].delivery_id).await.state,
        DeliveryState::Leased,
        "the live dispatcher keeps its lease"
    );
    // The dead process's tokens no longer settle anything.
    let stale: Vec<Settlement> = lost
        .iter()
        .map(|c| Settlement {
            delivery_id: c.delivery_id,
            lease_token: c.lease_token,
            outcome: SettleOutcome::Delivered,
            attempt: None,
        })
        .collect();
    assert!(live.settle(&stale, now_ms()).await.unwrap().is_empty());
}
