//! Commit delivers, as the API would have; rollback and a rolled-back savepoint deliver nothing;
//! 32 producers' transactions at once are each delivered once; idempotency keys inside and
//! across transactions.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::json;
use sluice::signing::{self, Secret};
use sluice_testkit::receiver::{self, Behavior};

use super::{WAIT, app, send, sqlstate, support};

/// The committed message arrives signed, with its id as `webhook-id`, at the endpoints an API
/// message of its type reaches and no other; before the commit nothing of it shows. The
/// dispatcher's idle poll is a minute here, so an arrival within seconds is the commit's
/// notification waking it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_message_is_delivered_like_an_api_message_on_commit() {
    let Some(app) = app(Duration::from_secs(60), None).await else {
        return;
    };
    let orders = receiver::start(Behavior::Fast, true).await.unwrap();
    let invoices = receiver::start(Behavior::Fast, true).await.unwrap();
    let everything = receiver::start(Behavior::Fast, true).await.unwrap();
    let (_, secret) = app
        .sluice
        .endpoint(
            &app.token,
            &orders.url(),
            json!({"event_types": ["order.*"]}),
        )
        .await;
    app.endpoint(&invoices.url(), &["invoice.paid"]).await;
    app.endpoint(&everything.url(), &[]).await;
    // Let the dispatcher go idle (its last look finds nothing).
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let mut db = support::postgres_client(&app.url).await;
    let tx = db.transaction().await.unwrap();
    let id = send(
        &tx,
        &app.tenant,
        "order.created",
        json!({"order": 42}),
        None,
    )
    .await
    .expect("send_message");
    assert!(id.starts_with("msg_") && id.len() == 30, "{id}");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(orders.record.requests(), 0, "delivered before the commit");
    assert!(
        app.message(&id).await.is_none(),
        "visible before the commit"
    );
    let committed = Instant::now();
    tx.commit().await.unwrap();

    assert!(
        support::eventually(Duration::from_secs(10), || async {
            orders.record.requests() >= 1 && everything.record.requests() >= 1
        })
        .await,
        "not delivered within 10 s of the commit (idle poll: 60 s)"
    );
    let woke_after = committed.elapsed();
    let got = orders.record.received().remove(0);
    assert_eq!(got.id, id, "webhook-id is the returned message id");
    assert_eq!(&got.body[..], br#"{"order": 42}"#, "the payload as stored");
    let secret = Secret::parse(&secret).unwrap();
    let ts: i64 = got.timestamp.parse().unwrap();
    assert!(signing::verify(
        &secret,
        &got.id,
        ts,
        &got.body,
        &got.signature
    ));
    assert_eq!(invoices.record.requests(), 0, "fan-out ignored the filters");
    assert!(woke_after < Duration::from_secs(10), "{woke_after:?}");

    // The same rows as the API's: the same endpoints, the message log, delivered states.
    let api = app
        .sluice
        .send(&app.token, "order.created", json!({"order": 42}))
        .await;
    assert_eq!(app.delivered_to(&id).await, app.delivered_to(&api).await);
    assert_eq!(app.delivered_to(&id).await.len(), 2);
    let (status, log) = app
        .sluice
        .get(&app.token, "/v1/messages?event_type=order.*")
        .await;
    assert_eq!(status, 200, "{log}");
    let listed: Vec<&str> = log["data"]
        .as_array()
        .expect("a page")
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert!(listed.contains(&id.as_str()), "{log}");
    assert!(
        support::eventually(WAIT, || async {
            let m = app.message(&id).await.unwrap();
            m["deliveries"]
                .as_array()
                .unwrap()
                .iter()
                .all(|d| d["state"] == "delivered")
        })
        .await
    );
    app.sluice.stop().await;
}

/// A rolled-back transaction, and a savepoint rolled back inside a committed one, leave no
/// message and deliver nothing; a released savepoint's message is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_and_rolled_back_savepoints_deliver_nothing() {
    let Some(app) = app(Duration::from_secs(1), None).await else {
        return;
    };
    let rx = receiver::start(Behavior::Fast, true).await.unwrap();
    app.endpoint(&rx.url(), &[]).await;
    let mut db = support::postgres_client(&app.url).await;

    let tx = db.transaction().await.unwrap();
    let rolled_back = send(&tx, &app.tenant, "order.created", json!({"n": 1}), None)
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let mut tx = db.transaction().await.unwrap();
    let undone = {
        let sp = tx.savepoint("undone").await.unwrap();
        let id = send(&sp, &app.tenant, "order.created", json!({"n": 2}), None)
            .await
            .unwrap();
        sp.rollback().await.unwrap();
        id
    };
    let kept = {
        let sp = tx.savepoint("kept").await.unwrap();
        let id = send(&sp, &app.tenant, "order.created", json!({"n": 3}), None)
            .await
            .unwrap();
        sp.commit().await.unwrap();
        id
    };
    tx.commit().await.unwrap();

    assert!(support::eventually(WAIT, || async { rx.record.requests() >= 1 }).await);
    // Several idle polls more: anything else would have arrived by now.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let got = rx.record.distinct_ids();
    assert_eq!(
        got,
        HashSet::from([kept.clone()]),
        "rolled back: {rolled_back}, {undone}"
    );
    assert_eq!(rx.record.requests(), 1);
    assert!(app.message(&rolled_back).await.is_none());
    assert!(app.message(&undone).await.is_none());
    let rows: i64 = app
        .db
        .query_one("SELECT count(*) FROM sluice.deliveries", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1, "a rolled-back message left deliveries behind");
    app.sluice.stop().await;
}

/// 32 producers, each on its own connection, commit their transactions at once: every message
/// is delivered, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_concurrent_producers_are_each_delivered_once() {
    const PRODUCERS: usize = 32;
    const PER_TRANSACTION: usize = 4;
    let Some(app) = app(Duration::from_secs(1), None).await else {
        return;
    };
    let rx = receiver::start(Behavior::Fast, true).await.unwrap();
    app.endpoint(&rx.url(), &[]).await;
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(PRODUCERS));
    let mut tasks = Vec::new();
    for p in 0..PRODUCERS {
        let (url, tenant, start) = (app.url.clone(), app.tenant.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            let mut db = support::postgres_client(&url).await;
            start.wait().await;
            let tx = db.transaction().await.unwrap();
            let mut ids = Vec::new();
            for i in 0..PER_TRANSACTION {
                let payload = json!({"producer": p, "i": i});
                ids.push(
                    send(&tx, &tenant, "order.created", payload, None)
                        .await
                        .unwrap(),
                );
            }
            tx.commit().await.unwrap();
            ids
        }));
    }
    let mut sent = HashSet::new();
    for t in tasks {
        sent.extend(t.await.unwrap());
    }
    assert_eq!(sent.len(), PRODUCERS * PER_TRANSACTION, "ids repeated");
    assert!(
        support::eventually(WAIT, || async { rx.record.distinct_ids() == sent }).await,
        "{} of {} delivered",
        rx.record.distinct_ids().len(),
        sent.len()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(rx.record.requests() as usize, sent.len(), "delivered twice");
    app.sluice.stop().await;
}

/// The same key inside one transaction, in a later one, and through the API answers the first
/// id; a second transaction using a key another holds waits for it, and takes the original if
/// it commits or makes its own if it rolls back. Each committed message is delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_keys_hold_inside_and_across_transactions() {
    let Some(app) = app(Duration::from_secs(1), None).await else {
        return;
    };
    let rx = receiver::start(Behavior::Fast, true).await.unwrap();
    app.endpoint(&rx.url(), &[]).await;
    let body = json!({"order": 7});
    let mut db = support::postgres_client(&app.url).await;

    let tx = db.transaction().await.unwrap();
    let first = send(&tx, &app.tenant, "order.created", body.clone(), Some("k1"))
        .await
        .unwrap();
    let again = send(&tx, &app.tenant, "order.created", body.clone(), Some("k1"))
        .await
        .unwrap();
    assert_eq!(first, again, "a repeat inside the transaction");
    tx.commit().await.unwrap();
    let later = send(
        &app.db,
        &app.tenant,
        "order.created",
        body.clone(),
        Some("k1"),
    )
    .await
    .unwrap();
    assert_eq!(first, later, "a repeat in a later transaction");
    // Through the API, the payload is compared byte for byte with the stored text, which is
    // jsonb's form (`{"order": 7}`): a repeat written that way is the same request, the
    // compact spelling another one.
    let api_repeat = |payload: &'static str| {
        app.sluice
            .http
            .post(format!("{}/v1/messages", app.sluice.base))
            .bearer_auth(&app.token)
            .header("Idempotency-Key", "k1")
            .header("content-type", "application/json")
            .body(format!(
                r#"{{"event_type": "order.created", "payload": {payload}}}"#
            ))
            .send()
    };
    let r = api_repeat(r#"{"order": 7}"#).await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let r: serde_json::Value = r.json().await.unwrap();
    assert_eq!(r["id"], first.as_str(), "the API's repeat: {r}");
    assert_eq!(r["duplicate"], true);
    let r = api_repeat(r#"{"order":7}"#).await.unwrap();
    assert_eq!(r.status().as_u16(), 422, "another spelling of the payload");

    // A key held by an open transaction: the second waits for its outcome.
    for commit in [true, false] {
        let key = if commit { "k-commit" } else { "k-rollback" };
        let tx = db.transaction().await.unwrap();
        let held = send(&tx, &app.tenant, "order.created", body.clone(), Some(key))
            .await
            .unwrap();
        let (url, tenant, payload) = (app.url.clone(), app.tenant.clone(), body.clone());
        let waiter = tokio::spawn(async move {
            let other = support::postgres_client(&url).await;
            send(&other, &tenant, "order.created", payload, Some(key)).await
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !waiter.is_finished(),
            "did not wait for the holder of {key}"
        );
        if commit {
            tx.commit().await.unwrap();
            assert_eq!(waiter.await.unwrap().unwrap(), held);
        } else {
            tx.rollback().await.unwrap();
            let own = waiter.await.unwrap().unwrap();
            assert_ne!(own, held, "took a rolled-back id");
            assert!(app.message(&own).await.is_some());
            assert!(app.message(&held).await.is_none());
        }
    }
    assert!(support::eventually(WAIT, || async { rx.record.distinct_ids().len() >= 3 }).await);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(rx.record.requests(), 3, "{:?}", rx.record.distinct_ids());
    let error = send(
        &app.db,
        &app.tenant,
        "order.created",
        json!({"order": 8}),
        Some("k1"),
    )
    .await
    .expect_err("the key with another payload");
    assert_eq!(sqlstate(&error).0, "SL006");
    app.sluice.stop().await;
}
