//! A fleet without Redis keeps the fleet's promises: three dispatchers on one PostgreSQL count
//! each other by their heartbeats, and each holds only its part of an endpoint's rate limit and
//! of its lane, so the fleet as a whole never exceeds either. Upper bounds only, measured from an
//! instant taken before any message is accepted: a slow machine only makes them looser.

use std::time::{Duration, Instant};

use serde_json::json;
use sluice::dispatcher::Look;
use sluice_testkit as support;
use support::receiver::{self, Behavior};
use support::{Sluice, eventually};

#[allow(dead_code)] // each test file uses its own part of it
#[path = "rate/common.rs"]
mod common;

/// A dispatcher (and API) on `db` without Redis, beating every second.
async fn dispatcher(db: &str) -> Sluice {
    Sluice::start_with(|raw| {
        raw.database_url = Some(db.to_owned());
        raw.heartbeat_interval = Some("1s".into());
    })
    .await
}

/// Wait until each of `fleet` counts all of them live.
async fn counted(fleet: &[&Sluice]) {
    let n = fleet.len() as u32;
    let live = |s: &Sluice| {
        let ctx = s.running.dispatcher.as_ref().expect("a dispatcher");
        ctx.view(Look::Pool).pool.live_dispatchers
    };
    let all = eventually(Duration::from_secs(30), || async {
        fleet.iter().all(|s| live(s) == Some(n))
    })
    .await;
    assert!(all, "the dispatchers never counted each other");
}

/// 2 events/s, burst 2, on three dispatchers: before, each enforced the whole limit, and the
/// fleet sent up to three times it; now each holds its share and all together stay within
/// `2 + 2 × elapsed`, every message arriving once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_dispatchers_without_redis_together_keep_to_the_rate_limit() {
    const N: usize = 12;
    let Some(bench) = common::bench(2.0, 2, 0).await else {
        return;
    };
    let one = dispatcher(&bench.db).await;
    let two = dispatcher(&bench.db).await;
    let three = dispatcher(&bench.db).await;
    counted(&[&one, &two, &three]).await;
    let started = Instant::now();
    bench.send(N).await;
    let got = bench
        .watch(N, started, Duration::from_secs(180), |e| bench.allowed(e))
        .await;
    assert_eq!(got, N, "every message arrives");
    bench.each_delivered_once(N).await;
    for s in [three, two, one] {
        s.stop().await;
    }
    bench.api.stop().await;
}

/// A lane of 3 slots to an endpoint that answers in 300 ms, on three dispatchers: before, each
/// opened the whole lane (up to 9 requests at once); now each holds its part (one slot each)
/// and the receiver never sees more than 3 at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_dispatchers_without_redis_together_keep_to_the_lane() {
    const N: usize = 60;
    let Some(db) = support::fresh_postgres().await else {
        return;
    };
    let api = Sluice::start_with(|raw| {
        raw.database_url = Some(db.clone());
        raw.role = Some(sluice::config::Role::Api);
    })
    .await;
    let (_, token) = api.tenant("laned").await;
    let rx = receiver::start(Behavior::Slow(Duration::from_millis(300)), true)
        .await
        .unwrap();
    api.endpoint(&token, &rx.url(), json!({ "lane_size": 3 }))
        .await;
    let one = dispatcher(&db).await;
    let two = dispatcher(&db).await;
    let three = dispatcher(&db).await;
    counted(&[&one, &two, &three]).await;
    for i in 0..N {
        api.send(&token, "order.created", json!({ "i": i })).await;
    }
    let all = eventually(Duration::from_secs(120), || async {
        rx.record.distinct_ids().len() >= N
    })
    .await;
    assert!(all, "{} of {N} arrived", rx.record.distinct_ids().len());
    assert!(
        rx.record.peak_concurrency() <= 3,
        "{} requests at once to a lane of 3",
        rx.record.peak_concurrency()
    );
    for s in [three, two, one, api] {
        s.stop().await;
    }
}
