//! Resend and recover: deliveries made ready again whatever happened to them, attempts counted
//! afresh, the attempt log kept, the same message (so the same `webhook-id`).

use super::*;

/// Settle each claimed delivery with `outcome` after one attempt answered `status`.
async fn settle_all(store: &SharedStore, claimed: &[Claimed], outcome: SettleOutcome, at: i64) {
    let status = match outcome {
        SettleOutcome::Delivered => 200,
        _ => 500,
    };
    let batch: Vec<Settlement> = claimed
        .iter()
        .map(|c| settlement(c, outcome.clone(), Some(attempt(Some(status), None))))
        .collect();
    assert_eq!(store.settle(&batch, at).await.unwrap().len(), claimed.len());
}

async fn check_resend_any_state_but_leased(store: SharedStore) {
    let t = tenant(&store).await;
    let other = tenant(&store).await;
    endpoint(&store, &t, &[]).await;
    let now = now_ms();
    enqueue_n(&store, &t, "a", 4, now).await;
    let claimed = store.claim(&req(now, 100, 100)).await.unwrap().claimed;
    assert_eq!(claimed.len(), 4);
    settle_all(&store, &claimed[..1], SettleOutcome::Delivered, now).await;
    let retry = SettleOutcome::Retry {
        at_ms: now + 60_000,
    };
    settle_all(&store, &claimed[1..2], retry, now).await;
    let dead = SettleOutcome::Dead {
        reason: "retries exhausted".into(),
    };
    settle_all(&store, &claimed[2..3], dead, now).await;
    let (delivered, waiting, dead, leased) = (
        claimed[0].delivery_id,
        claimed[1].delivery_id,
        claimed[2].delivery_id,
        claimed[3].delivery_id,
    );

    assert_not_found(
        store
            .replay(&other.id, ReplayTarget::Resend(delivered), now)
            .await,
    );
    assert_not_found(
        store
            .replay(&t.id, ReplayTarget::Resend(999_999), now)
            .await,
    );
    // An attempt in flight would overwrite whatever a resend did.
    assert_conflict(store.replay(&t.id, ReplayTarget::Resend(leased), now).await);
    for id in [delivered, waiting, dead] {
        let n = store
            .replay(&t.id, ReplayTarget::Resend(id), now + 5)
            .await
            .unwrap();
        assert_eq!(n, 1, "delivery {id}");
        let d = delivery(&store, &t, id).await;
        assert_eq!(
            (
                d.state,
                d.attempts,
                d.visible_at_ms,
                d.last_error.as_deref()
            ),
            (DeliveryState::Ready, 0, now + 5, Some("resent")),
            "delivery {id}"
        );
        // The attempt log is kept: the next attempt is one more row of the same delivery.
        assert_eq!(store.attempts(&t.id, id).await.unwrap().len(), 1);
    }
    let again = store.claim(&req(now + 5, 100, 100)).await.unwrap().claimed;
    assert_eq!(ids(&again), BTreeSet::from([delivered, waiting, dead]));
    let by_id: HashMap<i64, &Claimed> = claimed.iter().map(|c| (c.delivery_id, c)).collect();
    for c in &again {
        assert_eq!(
            c.message_id, by_id[&c.delivery_id].message_id,
            "same webhook-id"
        );
    }
    settle_all(&store, &again, SettleOutcome::Delivered, now + 6).await;
    assert_eq!(store.attempts(&t.id, delivered).await.unwrap().len(), 2);
}

async fn check_recover_failed_since(store: SharedStore) {
    let t = tenant(&store).await;
    let other = tenant(&store).await;
    let e = endpoint(&store, &t, &[]).await;
    let second = endpoint(&store, &t, &["b"]).await;
    let start = now_ms();
    // Three generations of messages, a minute apart; each: one delivered, one waiting for a
    // retry, one dead, one never attempted.
    let mut by_gen = Vec::new();
    for generation in 0..3 {
        let at = start + generation * 60_000;
        enqueue_n(&store, &t, "a", 4, at).await;
        let claimed = store.claim(&req(at, 100, 100)).await.unwrap().claimed;
        assert_eq!(claimed.len(), 4);
        settle_all(&store, &claimed[..1], SettleOutcome::Delivered, at).await;
        let retry = SettleOutcome::Retry {
            at_ms: at + 3_600_000,
        };
        settle_all(&store, &claimed[1..2], retry, at).await;
        let dead = SettleOutcome::Dead {
            reason: "retries exhausted".into(),
        };
        settle_all(&store, &claimed[2..3], dead, at).await;
        // Shed until much later: ready, never attempted.
        let later = SettleOutcome::Shed {
            at_ms: at + 86_400_000,
        };
        let shed: Vec<Settlement> = claimed[3..]
            .iter()
            .map(|c| settlement(c, later.clone(), None))
            .collect();
        store.settle(&shed, at).await.unwrap();
        by_gen.push(claimed);
    }
    enqueue_n(&store, &t, "b", 1, start).await;
    let recover = |endpoint: &str, since_ms, until_ms| ReplayTarget::Recover {
        endpoint: endpoint.to_owned(),
        since_ms,
        until_ms,
    };
    assert_not_found(
        store
            .replay(&other.id, recover(&e.id, start, start + 1), start)
            .await,
    );
    let now = start + 200_000;
    // From the second generation on, before the third: its waiting and dead deliveries only.
    let n = store
        .replay(&t.id, recover(&e.id, start + 60_000, start + 120_000), now)
        .await
        .unwrap();
    assert_eq!(n, 2);
    let recovered: BTreeSet<i64> = [by_gen[1][1].delivery_id, by_gen[1][2].delivery_id].into();
    for id in &recovered {
        let d = delivery(&store, &t, *id).await;
        assert_eq!(
            (
                d.state,
                d.attempts,
                d.visible_at_ms,
                d.last_error.as_deref()
            ),
            (DeliveryState::Ready, 0, now, Some("recovered"))
        );
    }
    for untouched in [&by_gen[1][0], &by_gen[1][3], &by_gen[0][1], &by_gen[2][2]] {
        let d = delivery(&store, &t, untouched.delivery_id).await;
        assert_ne!(d.last_error.as_deref(), Some("recovered"));
    }
    // Since the start, for ever: the other generations' failures (the recovered ones wait for
    // their first attempt again: not failed); never another endpoint's.
    let n = store
        .replay(&t.id, recover(&e.id, start, i64::MAX), now + 1)
        .await
        .unwrap();
    assert_eq!(n, 4);
    let n = store
        .replay(&t.id, recover(&second.id, start, i64::MAX), now + 1)
        .await
        .unwrap();
    assert_eq!(n, 0, "a delivery never attempted has not failed");
}

support::drivers!(
    check_resend_any_state_but_leased,
    check_recover_failed_since
);
