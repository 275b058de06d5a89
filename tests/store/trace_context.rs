//! Trace context: a message's `traceparent` and `tracestate` reach every claim of its
//! deliveries, an endpoint's `trace_context` is kept, and the attempt log names each attempt's
//! trace (the producer's, or one derived from the message id).

use super::*;

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

async fn check_trace_context_round_trips(store: SharedStore) {
    let t = tenant(&store).await;
    let mut e = endpoint_for(&t, &[]);
    e.trace_context = true;
    store.create_endpoint(&e).await.unwrap();
    let read = store.endpoint(Some(&t.id), &e.id).await.unwrap();
    assert!(read.trace_context);
    let mut changed = read.clone();
    changed.trace_context = false;
    store.update_endpoint(&changed).await.unwrap();
    assert!(!store.endpoint(None, &e.id).await.unwrap().trace_context);

    let now = now_ms();
    let mut traced = message(&t, "a");
    traced.traceparent = Some(PARENT.into());
    traced.tracestate = Some("vendor=1".into());
    let plain = message(&t, "a");
    // One with a key too: PostgreSQL inserts keyed messages apart.
    let mut keyed = message(&t, "a");
    keyed.idempotency_key = Some("k1".into());
    keyed.traceparent = Some(PARENT.into());
    store
        .enqueue(&[traced.clone(), plain.clone(), keyed.clone()], now)
        .await
        .unwrap();
    let claimed = store.claim(&req(now, 10, 10)).await.unwrap().claimed;
    assert_eq!(claimed.len(), 3);
    let of = |id: &str| claimed.iter().find(|c| c.message_id == id).unwrap();
    assert_eq!(of(&traced.id).traceparent.as_deref(), Some(PARENT));
    assert_eq!(of(&traced.id).tracestate.as_deref(), Some("vendor=1"));
    assert_eq!(of(&plain.id).traceparent, None);
    assert_eq!(of(&plain.id).tracestate, None);
    assert_eq!(of(&keyed.id).traceparent.as_deref(), Some(PARENT));

    let batch: Vec<_> = claimed
        .iter()
        .map(|c| settlement(c, SettleOutcome::Delivered, Some(attempt(Some(200), None))))
        .collect();
    store.settle(&batch, now).await.unwrap();
    let traced_attempts = store
        .attempts(&t.id, of(&traced.id).delivery_id)
        .await
        .unwrap();
    assert_eq!(
        traced_attempts[0].trace_id,
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    let plain_attempts = store
        .attempts(&t.id, of(&plain.id).delivery_id)
        .await
        .unwrap();
    assert_eq!(
        plain_attempts[0].trace_id,
        hex(&trace_id_of(None, &plain.id)),
        "derived from the message id"
    );
    let listed = store
        .endpoint_attempts(&t.id, &e.id, 0, None, 10)
        .await
        .unwrap();
    assert_eq!(listed.len(), 3);
    for a in &listed {
        let own = if a.delivery_id == of(&plain.id).delivery_id {
            hex(&trace_id_of(None, &plain.id))
        } else {
            "4bf92f3577b34da6a3ce929d0e0e4736".to_owned()
        };
        assert_eq!(a.trace_id, own);
    }
}

support::drivers!(check_trace_context_round_trips);
