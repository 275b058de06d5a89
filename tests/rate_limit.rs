//! An endpoint's rate limit end to end: a real dispatcher on PostgreSQL, a real loopback
//! receiver. The receiver never gets more than the bucket allows; every delivery the limit held
//! arrives, once, with one attempt (a hold is not one); the evidence says the endpoint is held
//! to its rate.

use std::time::{Duration, Instant};

use sluice_testkit as support;

#[allow(dead_code)] // each test file uses its own part of it
#[path = "rate/common.rs"]
mod common;

/// 1 event/s, burst 1, twelve messages waiting before the dispatcher starts: its first claim
/// takes a lane's share (8) at once, of which the bucket admits one; the rest are held and come
/// back at their turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_endpoint_gets_no_more_than_its_bucket_and_every_held_delivery_arrives_once() {
    const N: usize = 12;
    let Some(bench) = common::bench(1.0, 1, N).await else {
        return;
    };
    let started = Instant::now();
    let dispatcher = bench.dispatcher(None).await;
    let got = bench
        .watch(N, started, Duration::from_secs(120), |e| bench.allowed(e))
        .await;
    assert_eq!(got, N, "every message arrives");
    common::windows_within(&bench, Duration::from_millis(300));
    bench.each_delivered_once(N).await;
    let held = bench.held(&dispatcher);
    assert!(
        held >= 1,
        "eight claimed at once against a burst of one: some must have been held"
    );

    // The live evidence: held to the rate asked for (the holds are in its window).
    let path = format!("/v1/endpoints/{}/status", bench.endpoint);
    let status = dispatcher.get_ok(&path, &bench.token).await;
    assert_eq!(status["condition"], "rate_limited", "{status}");
    let sentence = status["sentence"].as_str().unwrap();
    assert!(
        sentence.starts_with("held to its rate limit: you asked for 1/s; "),
        "{sentence}"
    );
    assert!(sentence.contains(" are waiting"), "{sentence}");
    assert!(status["rate_limited_per_s"].as_f64().unwrap() > 0.0);
    dispatcher.stop().await;
    bench.api.stop().await;
    let _ = support::services_required();
}
