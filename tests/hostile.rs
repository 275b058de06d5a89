//! Hostile receivers end to end (issue 10, finding 1): endpoints that answer with a NUL byte,
//! invalid UTF-8 or a megabyte body, retried again and again, while twenty healthy endpoints of
//! another tenant receive steady traffic. The healthy ones must keep receiving without a gap,
//! lose nothing and receive nothing twice. Run on SQLite and on PostgreSQL (which refuses a NUL
//! in a `text` column, the write that used to stop the settler for everyone).

use sluice_testkit as support;

use std::collections::HashMap;
use std::time::Duration;

use axum::body::Bytes;
use serde_json::json;
use sluice::config::RawSettings;
use sluice::delivery::storable;
use sluice::dispatcher::DispatchSettings;
use sluice_testkit::receiver::{self, Behavior, Receiver};
use support::{Sluice, eventually};

/// Healthy endpoints, all subscribed to every message of the healthy tenant.
const HEALTHY: usize = 20;
/// Messages per second to the healthy tenant (each fans out to every healthy endpoint).
const HEALTHY_PER_S: u64 = 10;
/// Messages per second to the hostile tenant (each fans out to every hostile endpoint).
const HOSTILE_PER_S: u64 = 2;
/// How long traffic runs.
const TRAFFIC: Duration = Duration::from_secs(10);
/// The longest a healthy endpoint may go without a delivery while traffic runs: the
/// requirement itself (a stalled settler or claimer shows up as tens of seconds).
const MAX_GAP_MS: i64 = 1_000;

/// One test at a time in this binary: the gaps are measured on a shared 2-core machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The hostile answers: (status, body).
fn hostile_answers() -> Vec<(u16, Bytes)> {
    let nul = Bytes::from_static(b"{\"error\":\"nul\0byte\"}");
    let invalid = Bytes::from_static(b"caf\xc3 \xff\xfe\xc3\x28 end");
    // A megabyte of two-byte characters after one ASCII byte, so the body cap falls inside a
    // character, with a NUL and a stray continuation byte early on.
    let mut huge = b"x\0\x80".to_vec();
    while huge.len() < 1 << 20 {
        huge.extend_from_slice("é".as_bytes());
    }
    let mixed = Bytes::from_static(b"ok\0\xff");
    vec![
        (500, nul),
        (500, invalid),
        (500, Bytes::from(huge)),
        (200, mixed),
    ]
}

async fn hostile_receivers_never_stop_healthy_delivery(raw: RawSettings) {
    let _serial = SERIAL.lock().await;
    let mut raw = raw;
    // Retry the hostile deliveries quickly, so each one is written many times while we watch.
    raw.retry_schedule = Some("1s,1s,1s,1s,1s,1s,1s,1s".into());
    let s = Sluice::start(raw).await;

    let (_, healthy_token) = s.tenant("healthy").await;
    let mut healthy: Vec<Receiver> = Vec::new();
    for _ in 0..HEALTHY {
        let rx = receiver::start(Behavior::Fast, true).await.unwrap();
        s.endpoint(&healthy_token, &rx.url(), json!({})).await;
        healthy.push(rx);
    }
    let (hostile_tenant, hostile_token) = s.tenant("hostile").await;
    let mut hostile: Vec<(Receiver, String, Bytes)> = Vec::new();
    for (status, body) in hostile_answers() {
        let behavior = Behavior::Body {
            status,
            body: body.clone(),
        };
        let rx = receiver::start(behavior, false).await.unwrap();
        let (endpoint, _) = s.endpoint(&hostile_token, &rx.url(), json!({})).await;
        hostile.push((rx, endpoint, body));
    }

    // Steady traffic: each POST on its own task, so one slow POST does not delay the next.
    let traffic_from_ms = sluice::clock::now_ms();
    let started = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / HEALTHY_PER_S));
    let mut posts = Vec::new();
    let mut n = 0u64;
    while started.elapsed() < TRAFFIC {
        tick.tick().await;
        let s_http = (s.http.clone(), s.base.clone(), healthy_token.clone());
        posts.push(tokio::spawn(send(s_http, json!({ "n": n }))));
        if n.is_multiple_of(HEALTHY_PER_S / HOSTILE_PER_S) {
            let h_http = (s.http.clone(), s.base.clone(), hostile_token.clone());
            tokio::spawn(send(h_http, json!({ "hostile": n })));
        }
        n += 1;
    }
    let traffic_until_ms = sluice::clock::now_ms();
    let mut sent = Vec::new();
    for p in posts {
        sent.push(p.await.unwrap());
    }

    let everything = eventually(Duration::from_secs(30), || async {
        healthy.iter().all(|rx| {
            let got = rx.record.distinct_ids();
            sent.iter().all(|id| got.contains(id))
        })
    })
    .await;
    let hostile_requests: Vec<u64> = hostile.iter().map(|h| h.0.record.requests()).collect();
    let store = s.running.store.clone();
    let driver = store.driver();
    s.running.stop().await;

    let mut problems = Vec::new();
    let mut longest = 0;
    for (i, rx) in healthy.iter().enumerate() {
        let received = rx.record.received();
        let mut copies: HashMap<&str, usize> = HashMap::new();
        for r in &received {
            *copies.entry(r.id.as_str()).or_default() += 1;
        }
        let missing = sent
            .iter()
            .filter(|id| !copies.contains_key(id.as_str()))
            .count();
        let duplicated = copies.values().filter(|&&c| c > 1).count();
        // Gaps between consecutive receipts, and from the start and to the end of the traffic
        // (a receiver that stops receiving altogether has one long gap at the end).
        let mut at: Vec<i64> = received.iter().map(|r| r.at_ms).collect();
        at.extend([traffic_from_ms + MAX_GAP_MS / 2, traffic_until_ms]);
        at.sort_unstable();
        let gap = at.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        longest = longest.max(gap);
        if missing > 0 || duplicated > 0 || gap > MAX_GAP_MS {
            problems.push(format!(
                "healthy #{i}: {} of {} received, {missing} missing, {duplicated} duplicated, \
                 longest gap {gap} ms",
                copies.len(),
                sent.len()
            ));
        }
    }
    eprintln!(
        "{driver}: {} messages to {HEALTHY} healthy endpoints, longest gap {longest} ms; \
         hostile requests {hostile_requests:?}",
        sent.len()
    );
    assert!(
        everything && problems.is_empty(),
        "{driver}: healthy delivery was disturbed by the hostile endpoints \
         (hostile requests: {hostile_requests:?}):\n{}",
        problems.join("\n")
    );
    // The hostile endpoints were really exercised, again and again, and every attempt made of
    // them is in the log with the response as storable text, within the cap.
    let cap = DispatchSettings::default().max_response_bytes;
    for (i, (_, endpoint, body)) in hostile.iter().enumerate() {
        assert!(
            hostile_requests[i] >= 5,
            "{driver}: hostile #{i} was asked only {} times",
            hostile_requests[i]
        );
        let log = store
            .endpoint_attempts(&hostile_tenant, endpoint, 0, None, 500)
            .await
            .unwrap();
        assert!(
            log.len() >= 5,
            "{driver}: hostile #{i}: {} attempts logged",
            log.len()
        );
        let expected = storable(&body[..body.len().min(cap)], cap);
        for a in &log {
            assert_eq!(
                a.response.as_deref(),
                Some(expected.as_str()),
                "{driver}: hostile #{i}"
            );
        }
    }
}

async fn send(
    (http, base, token): (reqwest::Client, String, String),
    payload: serde_json::Value,
) -> String {
    let r = http
        .post(format!("{base}/v1/messages"))
        .bearer_auth(token)
        .json(&json!({ "event_type": "e", "payload": payload }))
        .send()
        .await
        .expect("post message");
    assert!(r.status().is_success(), "{}", r.status());
    let body: serde_json::Value = r.json().await.unwrap();
    body["id"].as_str().expect("id").to_owned()
}

support::drivers!(hostile_receivers_never_stop_healthy_delivery);
