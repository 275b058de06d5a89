//! The SIGTERM drain: `/readyz` turns 503 the moment it begins (while `/healthz` and `/metrics`
//! still answer), and when it ends nothing is left leased: every claimed delivery was either
//! attempted or released, including those a claim was fetching when the drain began.

use sluice_testkit as support;

use std::time::Duration;

use serde_json::json;
use sluice_testkit::process::{Client, Process};
use sluice_testkit::receiver::{self as receivers, Behavior};
use support::{Sluice, eventually, test_settings};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_false_from_the_first_moment_of_the_drain() {
    let dir = tempfile::tempdir().unwrap();
    let mut raw = test_settings();
    raw.data_dir = Some(dir.path().to_path_buf());
    raw.operator_listen = Some("127.0.0.1:0".into());
    raw.drain_grace = Some("3s".into());
    let s = Sluice::start(raw).await;
    let operator = format!("http://{}", s.running.operator_addr.expect("operator"));
    let http = support::http();
    let status = |path: &'static str| {
        let (http, operator) = (http.clone(), operator.clone());
        async move {
            http.get(format!("{operator}{path}"))
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0)
        }
    };
    assert_eq!(status("/readyz").await, 200);

    // A receiver that never answers holds one attempt in flight through the whole grace.
    let hole = receivers::start(Behavior::Blackhole, false).await.unwrap();
    let (_, token) = s.tenant("acme").await;
    s.endpoint(&token, &hole.url(), json!({})).await;
    s.send(&token, "order.paid", json!({})).await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            hole.record.in_flight() == 1
        })
        .await
    );

    let store = s.running.store.clone();
    let Sluice { running, .. } = s;
    let stopping = tokio::spawn(running.stop());
    assert!(
        eventually(Duration::from_secs(2), || async {
            status("/readyz").await == 503
        })
        .await,
        "/readyz stayed ready during the drain"
    );
    // Still alive and observable while it drains.
    assert_eq!(status("/healthz").await, 200);
    assert_eq!(status("/metrics").await, 200);
    assert!(!stopping.is_finished(), "the drain outlasts the probe");
    let report = stopping.await.expect("drain");
    assert_eq!((report.finished, report.released), (0, 1), "{report:?}");
    let stats = store.queue_stats(sluice::clock::now_ms()).await.unwrap();
    assert_eq!((stats.leased, stats.ready), (0, 1), "released, not leased");
}

/// SIGTERMs dispatcher processes at arbitrary moments of a busy claim loop and checks after
/// each exit that the store holds no lease. An API process builds a backlog first (400
/// messages to 10 endpoints: 4,000 deliveries, several times what sixteen rounds can work
/// through on a fast machine); each dispatcher then works through it eight attempts at a time
/// against a receiver taking 10 ms, so a slot frees (and a claim starts) about every
/// millisecond: the leaser is nearly always inside a claim when SIGTERM comes. Before the fix the leaser was aborted there, and a claim whose leases had
/// committed was dropped with them: those deliveries stayed leased until the lease expired,
/// while the drain reported "0 released".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_stays_leased_after_a_sigterm_drain_however_it_falls() {
    let Some(db) = support::fresh_postgres().await else {
        return;
    };
    let rx = receivers::start(Behavior::Slow(Duration::from_millis(10)), false)
        .await
        .unwrap();
    let store = sluice::store::open(Some(&db), std::path::Path::new("."), Default::default())
        .await
        .unwrap();
    let api = Process::start(&["--role", "api", "--database-url", &db]).await;
    let c = Client::new(&api.base);
    let (_, token) = c.tenant("acme").await;
    for _ in 0..10 {
        c.endpoint(&token, &rx.url(), json!({})).await;
    }
    for chunk in 0..50 {
        let sends = (0..8).map(|n| c.send(&token, "e", json!({ "n": chunk * 8 + n })));
        futures_util::future::join_all(sends).await;
    }
    for round in 0..16u64 {
        let args = ["--role", "dispatcher", "--database-url", &db];
        let p =
            Process::start(&[&args[..], &["--concurrency", "8", "--drain-grace", "2s"]].concat())
                .await;
        tokio::time::sleep(Duration::from_millis(30 + round * 13)).await;
        let said = p.terminate();
        let stats = store.queue_stats(sluice::clock::now_ms()).await.unwrap();
        assert_eq!(
            stats.leased, 0,
            "round {round}: {} left leased after a drain that said {said:?}",
            stats.leased
        );
        assert!(stats.ready > 0, "the backlog lasts every round");
    }
    api.terminate();
}
