//! `/metrics` as a scraper sees it: the Prometheus text format unless OpenMetrics is asked for,
//! every counter present from the start at 0, failed attempts counted as attempts, the build
//! and process metrics, and per-endpoint series only for the top-N endpoints by occupancy.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use sluice_testkit::receiver::{self as receivers, Behavior};

use super::{ADMIN, Sluice, states};

/// `name{labels}` → value, for every sample line.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("sample line");
            (series.to_owned(), value.parse().expect("value"))
        })
        .collect()
}

/// The series of `name` (exactly that name).
fn series<'a>(all: &'a BTreeMap<String, f64>, name: &str) -> Vec<(&'a str, f64)> {
    all.iter()
        .filter(|(k, _)| k.split('{').next() == Some(name))
        .map(|(k, v)| (k.as_str(), *v))
        .collect()
}

async fn scrape(s: &Sluice, accept: Option<&str>) -> (String, String) {
    let headers: Vec<(&str, &str)> = accept.map(|a| ("accept", a)).into_iter().collect();
    let r = s
        .raw(Method::GET, "/metrics", Some(ADMIN), None, "", &headers)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    (r.content_type, r.text)
}

#[tokio::test]
async fn prometheus_text_by_default_openmetrics_on_request_counters_from_zero() {
    let s = Sluice::start_with(|_| {}).await;
    let (content_type, text) = scrape(&s, None).await;
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    assert!(!text.contains("# EOF"));
    let all = samples(&text);
    // Nothing has been delivered yet: the counters are there, at 0, failures included.
    for name in [
        "webhook_deliveries_ok_total",
        "webhook_deliveries_shed_total",
        "sluice_attempts_failed_total",
        "sluice_dead_letters_total",
    ] {
        assert_eq!(
            series(&all, name),
            [(format!("{name}{{endpoint=\"other\"}}").as_str(), 0.0)],
            "{name}"
        );
    }
    for reason in ["paused", "breaker_open", "disabled", "store_unavailable"] {
        let key = format!("sluice_deliveries_held_total{{reason=\"{reason}\"}}");
        assert_eq!(all.get(&key), Some(&0.0), "{key}");
    }
    assert_eq!(all.get("sluice_messages_accepted_total"), Some(&0.0));
    assert_eq!(
        all.get("webhook_phase_seconds_count{phase=\"http\"}"),
        Some(&0.0)
    );
    assert_eq!(
        all.get(&format!(
            "sluice_build_info{{version=\"{}\"}}",
            env!("CARGO_PKG_VERSION")
        )),
        Some(&1.0)
    );
    assert!(all["process_resident_memory_bytes"] > 0.0);
    assert!(all["process_start_time_seconds"] > 1.6e9);
    assert!(all["process_open_fds"] >= 1.0);
    assert!(all.contains_key("process_cpu_seconds_total"));
    assert!(!text.contains("sluice_deliveries_failed"), "renamed");

    let (content_type, text) = scrape(&s, Some("application/openmetrics-text")).await;
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    assert!(text.ends_with("# EOF\n"));
    assert!(text.contains("# TYPE sluice_build info"));
    s.stop().await;
}

#[tokio::test]
async fn only_the_busiest_endpoints_have_series_and_failed_attempts_are_attempts() {
    let s = Sluice::start_with(|raw| {
        raw.metrics_top_endpoints = Some(2);
        raw.retry_schedule = Some("1s,1s".into());
    })
    .await;
    let (_, token) = s.tenant("acme").await;
    let slow = receivers::start(Behavior::Slow(Duration::from_millis(300)), false)
        .await
        .unwrap();
    let fast = receivers::start(Behavior::Fast, false).await.unwrap();
    let failing = receivers::start(Behavior::Status(500), false)
        .await
        .unwrap();
    let slow_ep = s.create_endpoint(&token, &slow.url(), json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut others = Vec::new();
    for url in [fast.url(), fast.url(), failing.url()] {
        let ep = s.create_endpoint(&token, &url, json!({})).await;
        others.push(ep["id"].as_str().unwrap().to_owned());
    }
    let mut messages = Vec::new();
    for n in 0..3 {
        messages.push(s.send(&token, "order.paid", json!({ "n": n })).await);
    }
    // Every message reaches a final state on each endpoint: three attempts on the failing one.
    for msg in &messages {
        s.wait_for(&format!("/v1/messages/{msg}/deliveries"), &token, |v| {
            let st = states(v);
            st.iter().filter(|s| *s == "delivered").count() == 3 && st.contains(&"dead".into())
        })
        .await;
    }
    let (_, text) = scrape(&s, None).await;
    let all = samples(&text);
    let ok = series(&all, "webhook_deliveries_ok_total");
    assert_eq!(ok.len(), 3, "two endpoints and other: {ok:?}");
    assert!(
        ok.iter().any(|(k, _)| k.contains(&slow_ep)),
        "the slowest endpoint holds the most worker-seconds: {ok:?}"
    );
    let sum = |name: &str| series(&all, name).iter().map(|(_, v)| v).sum::<f64>();
    assert_eq!(sum("webhook_deliveries_ok_total"), 9.0, "{ok:?}");
    // Three messages, each attempted three times (first try and two retries), then dead.
    assert_eq!(sum("sluice_attempts_failed_total"), 9.0);
    assert_eq!(sum("sluice_dead_letters_total"), 3.0);
    for name in ["sluice_lane_size", "sluice_governor_limit"] {
        let gauges = series(&all, name);
        assert!(
            gauges.len() <= 2 && !gauges.is_empty(),
            "{name}: {gauges:?}"
        );
    }
    let breaker = series(&all, "sluice_breaker_state");
    assert!(
        breaker
            .iter()
            .any(|(k, v)| k.contains(&slow_ep) && k.contains("state=\"closed\"") && *v == 1.0),
        "{breaker:?}"
    );
    let breakers = series(&all, "sluice_breakers");
    assert_eq!(
        breakers.iter().map(|(_, v)| v).sum::<f64>(),
        4.0,
        "{breakers:?}"
    );
    s.stop().await;
}
