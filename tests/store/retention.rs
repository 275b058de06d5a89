//! Retention: delivered history purged in batches.

use super::*;

async fn check_purge(store: SharedStore) {
    let t = tenant(&store).await;
    endpoint(&store, &t, &[]).await;
    let now = now_ms();
    enqueue_n(&store, &t, "a", 3, now).await;
    let c = store.claim(&req(now, 10, 10)).await.unwrap().claimed;
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
    let purge = |before_ms| PurgeRequest {
        before_ms,
        limit: 100,
        after: String::new(),
    };
    assert_eq!(
        store.purge(&purge(now)).await.unwrap(),
        PurgeReport::default()
    );
    // Past retention only the delivered delivery goes, with its attempts and its message (ids
    // are made before their rows are stored: the purge's instant comes after both).
    let past = now_ms() + 1;
    assert_eq!(
        store.purge(&purge(past)).await.unwrap(),
        PurgeReport {
            deliveries: 1,
            messages: 1,
            next: None
        }
    );
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
    assert_eq!(
        store.purge(&purge(past)).await.unwrap(),
        PurgeReport::default()
    );
}

/// A pass of small batches walks the history in message id order: a fanned-out message whose
/// deliveries straddle a batch goes with its last one, messages that never had a delivery go
/// too, and nothing newer than the retention instant is touched.
async fn check_purge_walks_history_in_batches(store: SharedStore) {
    let t = tenant(&store).await;
    for types in [&["fan"][..], &["fan"], &["one"]] {
        endpoint(&store, &t, types).await;
    }
    let now = now_ms();
    enqueue_n(&store, &t, "fan", 3, now).await;
    enqueue_n(&store, &t, "one", 3, now).await;
    enqueue_n(&store, &t, "nobody", 2, now).await;
    let deliver_all = |at: i64| {
        let store = store.clone();
        async move {
            let c = store.claim(&req(at, 100, 100)).await.unwrap().claimed;
            let all: Vec<Settlement> = c
                .iter()
                .map(|c| settlement(c, SettleOutcome::Delivered, Some(attempt(Some(200), None))))
                .collect();
            store.settle(&all, at).await.unwrap();
            c.len()
        }
    };
    assert_eq!(deliver_all(now).await, 9);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let retention = now_ms();
    tokio::time::sleep(Duration::from_millis(5)).await;
    // One message after the retention instant: kept.
    let later = now_ms();
    enqueue_n(&store, &t, "one", 1, later).await;
    assert_eq!(deliver_all(later).await, 1);
    let kept = deliveries(&store, all_of(&t)).await;
    let kept: Vec<_> = kept.iter().filter(|d| d.created_at_ms == later).collect();
    assert_eq!(kept.len(), 1);

    let mut request = PurgeRequest {
        before_ms: retention,
        limit: 3,
        after: String::new(),
    };
    let (mut batches, mut gone, mut messages) = (0, 0, 0);
    loop {
        let report = store.purge(&request).await.unwrap();
        batches += 1;
        gone += report.deliveries;
        messages += report.messages;
        assert!(report.deliveries <= 3, "{report:?}");
        match report.next {
            Some(next) => {
                assert!(next >= request.after, "the walk goes forward: {next}");
                request.after = next;
            }
            None => break,
        }
        assert!(batches < 20, "the walk ends");
    }
    assert!(batches >= 3, "{batches} batches of at most 3");
    assert_eq!(
        (gone, messages),
        (9, 8),
        "9 deliveries, 6 messages with them and 2 without"
    );
    let left = deliveries(&store, all_of(&t)).await;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].message_id, kept[0].message_id);
    assert!(store.message(&t.id, &kept[0].message_id).await.is_ok());
    let log = store.list_messages(&log_of(&t, None, 100)).await.unwrap();
    assert_eq!(log.len(), 1, "only the later message is left");
    // A second pass finds nothing.
    request.after.clear();
    assert_eq!(store.purge(&request).await.unwrap(), PurgeReport::default());
}

support::drivers!(check_purge, check_purge_walks_history_in_batches,);
