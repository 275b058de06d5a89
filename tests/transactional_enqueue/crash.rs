//! A dispatcher killed (SIGKILL) while producers keep committing loses nothing: what was
//! committed while it was down, and what it held leased when it died, is delivered by the next.

use std::time::Duration;

use serde_json::json;
use sluice_testkit::process::{Client, Process};
use sluice_testkit::receiver::{self, Behavior};

use super::{send, support};

/// `sluice serve` on the database at `url`, up once `/readyz` answers.
async fn dispatcher(url: &str) -> Process {
    let p = Process::serve()
        .args(&[
            "--database-url",
            url,
            "--read-timeout",
            "3s",
            "--total-timeout",
            "3s",
            "--lease-ttl",
            "9s",
        ])
        .spawn();
    assert!(p.answers("/readyz").await, "sluice did not start");
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_killed_while_transactions_commit_loses_nothing() {
    const MESSAGES: usize = 120;
    let Some(url) = support::fresh_postgres().await else {
        return;
    };
    let rx = receiver::start(Behavior::Slow(Duration::from_millis(150)), true)
        .await
        .unwrap();
    let first = dispatcher(&url).await;
    let api = Client::new(&first.base);
    let (tenant, token) = api.tenant("shop").await;
    api.endpoint(&token, &rx.url(), json!({"lane_size": 4}))
        .await;

    // Producers commit one message per transaction, on and on, whatever the dispatchers do.
    let producer = {
        let (url, tenant) = (url.clone(), tenant.clone());
        tokio::spawn(async move {
            let mut db = support::postgres_client(&url).await;
            let mut ids = Vec::new();
            for i in 0..MESSAGES {
                let tx = db.transaction().await.unwrap();
                ids.push(
                    send(&tx, &tenant, "order.created", json!({"i": i}), None)
                        .await
                        .unwrap(),
                );
                tx.commit().await.unwrap();
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            ids
        })
    };
    assert!(
        support::eventually(Duration::from_secs(30), || async {
            rx.record.requests() >= 8
        })
        .await,
        "nothing delivered before the kill"
    );
    first.kill();
    let at_kill = rx.record.distinct_ids().len();
    // Commits go on with no dispatcher at all for a while.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let second = dispatcher(&url).await;
    let ids = producer.await.unwrap();
    assert!(
        at_kill < ids.len(),
        "everything was delivered before the kill: the test proves nothing"
    );
    let all = support::eventually(Duration::from_secs(60), || async {
        let got = rx.record.distinct_ids();
        ids.iter().all(|id| got.contains(id))
    })
    .await;
    second.kill();
    assert!(
        all,
        "lost: {} of {} arrived",
        rx.record.distinct_ids().len(),
        ids.len()
    );
}
