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

support::drivers!(check_purge,);
