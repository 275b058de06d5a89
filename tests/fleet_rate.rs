//! An endpoint's rate limit across a fleet: two dispatchers sharing PostgreSQL and a private
//! `redis-server` together never exceed the limit; with Redis gone, each keeps to its share,
//! and the shares together keep to the limit. Upper bounds only, from the bucket's arithmetic.

use std::time::{Duration, Instant};

use sluice::admission::fleet::{FleetLanes, FleetRate, FleetSettings};
use sluice::dispatcher::Look;
use sluice::model::RateLimit;
use sluice_testkit as support;
use support::{RedisServer, Sluice, eventually};

#[allow(dead_code)] // each test file uses its own part of it
#[path = "rate/common.rs"]
mod common;

/// The Redis bucket, one script call per turn: the burst at once, then a hold naming the wait
/// to the next turn (one interval, less the little time the calls took); separate endpoints
/// have separate buckets; a Redis that is gone is `Unavailable`, never a turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_bucket_gives_the_burst_then_names_the_wait() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let lanes = FleetLanes::connect(&redis.url(), FleetSettings::default())
        .await
        .unwrap();
    // One turn every 100 s: the calls below take far less than that, however slow the machine.
    let limit = RateLimit::try_new(0.01, 3).unwrap();
    for _ in 0..3 {
        assert!(matches!(
            lanes.try_rate("ep_a", &limit).await,
            FleetRate::Taken { .. }
        ));
    }
    match lanes.try_rate("ep_a", &limit).await {
        FleetRate::Held { wait, ahead } => {
            assert!(wait <= Duration::from_secs(100), "{wait:?}");
            assert!(wait > Duration::from_secs(90), "{wait:?}");
            // The TAT runs the tolerance (two intervals) past the next turn.
            assert_eq!(ahead - wait, Duration::from_secs(200));
        }
        other => panic!("expected a hold, got {other:?}"),
    }
    assert!(matches!(
        lanes.try_rate("ep_b", &limit).await,
        FleetRate::Taken { .. }
    ));
    drop(redis);
    let mut gone = FleetRate::Taken {
        ahead: Duration::ZERO,
    };
    // The first call after the kill may still find the old connection: a few tries at most.
    for _ in 0..5 {
        gone = lanes.try_rate("ep_b", &limit).await;
        if gone == FleetRate::Unavailable {
            break;
        }
    }
    assert_eq!(gone, FleetRate::Unavailable);
}

/// 2 events/s, burst 2, thirty messages waiting; two dispatchers start together. The first
/// claims a lane's share (8) at once against a burst of 2, so holds are certain; together they
/// never pass `2 + 2 × elapsed`, and every message arrives once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_dispatchers_together_never_exceed_the_limit() {
    const N: usize = 30;
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let Some(bench) = common::bench(2.0, 2, N).await else {
        return;
    };
    let started = Instant::now();
    let one = bench.dispatcher(Some(&redis.url())).await;
    let two = bench.dispatcher(Some(&redis.url())).await;
    let got = bench
        .watch(N, started, Duration::from_secs(180), |e| bench.allowed(e))
        .await;
    assert_eq!(got, N, "every message arrives");
    common::windows_within(&bench, Duration::from_millis(300));
    bench.each_delivered_once(N).await;
    assert!(
        bench.held(&one) + bench.held(&two) >= 1,
        "eight claimed at once against a burst of two: some must have been held"
    );
    two.stop().await;
    one.stop().await;
    bench.api.stop().await;
}

/// Both dispatchers see each other in Redis, then Redis goes away before any message: each
/// admits under its share (1/s, burst 1 of 2/s, burst 2), so each stays within
/// `1 + 1 × elapsed` and both together within `2 + 2 × elapsed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_gone_each_dispatcher_keeps_to_its_share() {
    const N: usize = 12;
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    // A short deadline: the fleet lanes' outage rule waits for attempts admitted through Redis
    // to end (at most the deadline) before each process's local share admits.
    let extra = serde_json::json!({ "total_timeout_ms": 2000 });
    let Some(bench) = common::bench_with(2.0, 2, 0, extra).await else {
        return;
    };
    let one = bench.dispatcher(Some(&redis.url())).await;
    let two = bench.dispatcher(Some(&redis.url())).await;
    let live = |s: &Sluice| {
        let ctx = s.running.dispatcher.as_ref().expect("a dispatcher");
        ctx.view(Look::Pool).pool.live_dispatchers
    };
    // Heartbeats every 5 s: both count two (and so know their places) within one beat.
    let known = eventually(Duration::from_secs(30), || async {
        live(&one) == Some(2) && live(&two) == Some(2)
    })
    .await;
    assert!(known, "the dispatchers never saw each other in Redis");
    drop(redis);

    let started = Instant::now();
    bench.send(N).await;
    let share = |elapsed: Duration| 1.0 + elapsed.as_secs_f64();
    let deadline = Duration::from_secs(180);
    loop {
        let elapsed = started.elapsed();
        let (a, b) = (bench.delivered_by(&one), bench.delivered_by(&two));
        let total = bench.rx.record.requests();
        assert!(
            a as f64 <= share(elapsed) && b as f64 <= share(elapsed),
            "{a} and {b} delivered within {elapsed:?}: a share allows {:.2} each",
            share(elapsed)
        );
        assert!(
            total as f64 <= bench.allowed(elapsed),
            "{total} arrivals within {elapsed:?}: the limit allows {:.2}",
            bench.allowed(elapsed)
        );
        if bench.rx.record.distinct_ids().len() >= N || elapsed > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        bench.rx.record.distinct_ids().len(),
        N,
        "every message arrives"
    );
    common::windows_within(&bench, Duration::from_millis(300));
    bench.each_delivered_once(N).await;
    two.stop().await;
    one.stop().await;
    bench.api.stop().await;
}
