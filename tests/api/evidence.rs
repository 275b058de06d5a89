//! The evidence (`/status`) from live measurements and from the store, throttle notices, and
//! `/metrics` as Prometheus text with the seed names.

use std::collections::HashMap;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use sluice::config::Role;
use sluice::stats::{format_duration, format_rate};
use sluice_testkit::receiver::{self, Behavior};

use super::{ADMIN, Sluice, states};

/// The sentence the status should carry for its own figures.
fn expected_sentence(status: &Value) -> String {
    let p95 = Duration::from_secs_f64(status["p95_s"].as_f64().expect("p95"));
    let lane = status["effective_lane"].as_u64().unwrap();
    let sustainable = status["sustainable_per_s"].as_f64().unwrap();
    format!(
        "at your current p95 of {} and a lane of {lane}, you can receive {} events per second; \
         you are generating {}",
        format_duration(p95),
        format_rate(sustainable),
        format_rate(status["offered_per_s"].as_f64().unwrap()),
    )
}

#[tokio::test]
async fn the_status_sentence_matches_live_measurements_from_a_slow_receiver() {
    let s = Sluice::start_with(|_| {}).await;
    let (_, token) = s.tenant("acme").await;
    let rx = receiver::start(Behavior::Slow(Duration::from_millis(300)), false)
        .await
        .unwrap();
    let ep = s
        .create_endpoint(&token, &rx.url(), json!({ "lane_size": 2 }))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = s
        .get_ok(&format!("/v1/endpoints/{ep}/status"), &token)
        .await;
    assert_eq!(before["source"], "dispatcher");
    assert!(
        before["p95_s"].is_null()
            && before["sentence"]
                .as_str()
                .unwrap()
                .starts_with("no response times")
    );
    for n in 0..6 {
        s.send(&token, "order.paid", json!({ "n": n })).await;
    }
    s.wait_for(
        &format!("/v1/endpoints/{ep}/deliveries?state=delivered"),
        &token,
        |v| v["data"].as_array().unwrap().len() == 6,
    )
    .await;
    let st = s
        .get_ok(&format!("/v1/endpoints/{ep}/status"), &token)
        .await;
    let p95 = st["p95_s"].as_f64().unwrap();
    assert!(
        (0.29..2.0).contains(&p95),
        "p95 {p95} from a 300 ms receiver"
    );
    assert!(st["p50_s"].as_f64().unwrap() >= 0.29 && st["mean_s"].as_f64().unwrap() >= 0.29);
    assert_eq!(
        (st["lane_size"].clone(), st["samples"].clone()),
        (json!(2), json!(6))
    );
    assert!(st["effective_lane"].as_u64().unwrap() <= 2);
    assert_eq!(
        (st["in_flight"].clone(), st["breaker_state"].clone()),
        (json!(0), json!("closed"))
    );
    assert!(
        st["governor_limit"].as_f64().is_some() && st["delivered_per_s"].as_f64().unwrap() > 0.0
    );
    assert!(st["offered_per_s"].as_f64().unwrap() > 0.0 && st["shed_share"].as_f64().is_some());
    let lane = st["effective_lane"].as_f64().unwrap();
    assert!((st["sustainable_per_s"].as_f64().unwrap() - lane / p95).abs() < 1e-6);
    assert!(
        st["sentence"]
            .as_str()
            .unwrap()
            .starts_with(&expected_sentence(&st)),
        "{st}"
    );

    s.stop().await;
}

#[tokio::test]
async fn without_a_dispatcher_the_status_comes_from_the_attempts_in_the_store() {
    // API-only processes share a PostgreSQL database with the dispatchers.
    let Some(url) = crate::support::fresh_postgres().await else {
        return;
    };
    let with_url = |role: Role| {
        let url = url.clone();
        move |raw: &mut sluice::config::RawSettings| {
            raw.database_url = Some(url);
            raw.role = Some(role);
        }
    };
    let s = Sluice::start_with(with_url(Role::All)).await;
    let (_, token) = s.tenant("acme").await;
    let rx = receiver::start(Behavior::Slow(Duration::from_millis(300)), false)
        .await
        .unwrap();
    let ep = s.create_endpoint(&token, &rx.url(), json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for n in 0..4 {
        s.send(&token, "order.paid", json!({ "n": n })).await;
    }
    let path = format!("/v1/endpoints/{ep}/deliveries?state=delivered");
    s.wait_for(&path, &token, |v| v["data"].as_array().unwrap().len() == 4)
        .await;
    s.stop().await;
    let api = Sluice::start_with(with_url(Role::Api)).await;
    let st = api
        .get_ok(&format!("/v1/endpoints/{ep}/status"), &token)
        .await;
    assert_eq!(
        (st["source"].clone(), st["samples"].clone()),
        (json!("store"), json!(4))
    );
    assert!(st["note"].as_str().unwrap().contains("no dispatcher"));
    let p95 = st["p95_s"].as_f64().unwrap();
    assert!((0.29..2.0).contains(&p95), "p95 {p95} from the store");
    assert!(st["in_flight"].is_null() && st["breaker_state"].is_null());
    let sentence = st["sentence"].as_str().unwrap();
    assert!(sentence.starts_with(&expected_sentence(&st)), "{st}");
    api.stop().await;
}

/// The status of an endpoint once `check` holds of it.
async fn status_when(s: &Sluice, token: &str, ep: &str, check: impl Fn(&Value) -> bool) -> Value {
    s.wait_for(&format!("/v1/endpoints/{ep}/status"), token, check)
        .await
}

/// Real receivers in each state, through the API: the condition and the sentence tell them
/// apart, a refusing endpoint is offered no capacity, and a lane change shows at once.
#[tokio::test]
async fn the_status_tells_each_state_apart_from_real_receivers() {
    let s = Sluice::start_with(|raw| raw.retry_schedule = Some("100ms,100ms,100ms".into())).await;
    let (_, token) = s.tenant("acme").await;
    let id = |v: Value| v["id"].as_str().unwrap().to_owned();

    // Refused: nothing listens on the port.
    let nobody = format!("http://127.0.0.1:{}/hook", sluice_testkit::free_port());
    let refused = id(s
        .create_endpoint(&token, &nobody, json!({ "event_types": ["r"] }))
        .await);
    s.send(&token, "r", json!({})).await;
    let st = status_when(&s, &token, &refused, |v| {
        v["failures"]["refused"].as_u64() >= Some(2)
    })
    .await;
    assert_eq!(st["condition"], "failing", "{st}");
    let sentence = st["sentence"].as_str().unwrap();
    assert!(
        sentence.starts_with("failing: in the last") && sentence.contains("refused the connection"),
        "{st}"
    );
    assert!(
        !sentence.contains("you can receive") && st["sustainable_per_s"].is_null(),
        "{st}"
    );

    // 5xx: a server that answers 500.
    let broken = receiver::start(Behavior::Status(500), false).await.unwrap();
    let failing = id(s
        .create_endpoint(&token, &broken.url(), json!({ "event_types": ["f"] }))
        .await);
    s.send(&token, "f", json!({})).await;
    let st = status_when(&s, &token, &failing, |v| {
        v["failures"]["server_error"].as_u64() >= Some(2)
    })
    .await;
    assert_eq!(st["condition"], "failing");
    assert!(
        st["sentence"].as_str().unwrap().contains("answered 5xx"),
        "{st}"
    );
    // More of the same: the error breaker opens (half of 20 samples failed) and holds them.
    for _ in 0..6 {
        s.send(&token, "f", json!({})).await;
    }
    let st = status_when(&s, &token, &failing, |v| v["condition"] == "breaker_open").await;
    assert_eq!(st["breaker_state"], "open");
    assert!(
        st["sentence"]
            .as_str()
            .unwrap()
            .starts_with("the breaker is open"),
        "{st}"
    );

    // 429 with Retry-After: paused as the endpoint asked.
    let throttling = receiver::start(Behavior::Throttle { retry_after_s: 60 }, false)
        .await
        .unwrap();
    let paused = id(s
        .create_endpoint(&token, &throttling.url(), json!({ "event_types": ["p"] }))
        .await);
    s.send(&token, "p", json!({})).await;
    let st = status_when(&s, &token, &paused, |v| v["paused"] == true).await;
    assert_eq!(st["condition"], "paused", "{st}");
    assert!(
        st["sentence"]
            .as_str()
            .unwrap()
            .starts_with("paused as the endpoint asked"),
        "{st}"
    );
    assert!(
        st["sentence"].as_str().unwrap().contains("answered 429"),
        "{st}"
    );

    // Delivering, then a lane change, then disabled.
    let fast = receiver::start(Behavior::Fast, false).await.unwrap();
    let good = id(s
        .create_endpoint(
            &token,
            &fast.url(),
            json!({ "event_types": ["d"], "lane_size": 4 }),
        )
        .await);
    s.send(&token, "d", json!({})).await;
    let st = status_when(&s, &token, &good, |v| v["samples"].as_u64() >= Some(1)).await;
    assert_eq!(st["condition"], "delivering", "{st}");
    assert!(
        st["sentence"]
            .as_str()
            .unwrap()
            .contains("a lane of 4, you can receive"),
        "{st}"
    );
    let r = s
        .call(
            Method::PATCH,
            &format!("/v1/endpoints/{good}"),
            Some(&token),
            Some(json!({ "lane_size": 2 })),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let st = s
        .get_ok(&format!("/v1/endpoints/{good}/status"), &token)
        .await;
    assert_eq!(
        (st["lane_size"].clone(), st["effective_lane"].as_u64()),
        (json!(2), Some(2)),
        "{st}"
    );
    assert!(
        st["sentence"].as_str().unwrap().contains("a lane of 2,"),
        "the new lane at once: {st}"
    );
    let r = s
        .call(
            Method::POST,
            &format!("/v1/endpoints/{good}/disable"),
            Some(&token),
            Some(json!({ "reason": "maintenance" })),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let st = s
        .get_ok(&format!("/v1/endpoints/{good}/status"), &token)
        .await;
    assert_eq!(st["condition"], "disabled");
    assert!(
        st["sentence"]
            .as_str()
            .unwrap()
            .starts_with("disabled (maintenance): nothing is delivered"),
        "{st}"
    );
    s.stop().await;
}

#[tokio::test]
async fn sustained_shedding_sends_a_throttle_notice_with_lane_rate_and_remedy() {
    let s = Sluice::start_with(|raw| {
        raw.lane_deadline = Some("50ms".into());
        raw.shed_min_delay = Some("200ms".into());
        raw.shed_max_delay = Some("400ms".into());
    })
    .await;
    let (_, token) = s.tenant("acme").await;
    let ops = receiver::start(Behavior::Fast, true).await.unwrap();
    let r = s
        .call(
            Method::PUT,
            "/v1/operational-webhook",
            Some(&token),
            Some(json!({ "url": ops.url() })),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let slow = receiver::start(Behavior::Slow(Duration::from_millis(500)), false)
        .await
        .unwrap();
    let ep = s
        .create_endpoint(&token, &slow.url(), json!({ "lane_size": 1 }))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for n in 0..8 {
        s.send(&token, "order.paid", json!({ "n": n })).await;
    }
    let mut notice = None;
    for _ in 0..300 {
        if let Some(r) = ops.record.received().into_iter().next() {
            notice = Some(serde_json::from_slice::<Value>(&r.body).unwrap());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let notice = notice.expect("a throttle notice within 30 s");
    assert_eq!(notice["type"], "sluice.endpoint.throttled");
    let data = &notice["data"];
    assert_eq!(
        (data["endpoint_id"].clone(), data["lane_size"].clone()),
        (json!(ep), json!(1))
    );
    assert!(data["shed_share"].as_f64().unwrap() > 0.2, "{notice}");
    assert!(data["remedy"].as_str().unwrap().contains("2xx at once"));
    assert!(data["effective_lane"].is_u64() && data.get("effective_rate_per_s").is_some());
    let text = s
        .call(Method::GET, "/metrics", Some(ADMIN), None)
        .await
        .text;
    let shed = &parse_metrics(&text)["webhook_deliveries_shed_total"];
    let mine = shed
        .iter()
        .find(|(l, _)| l.contains(ep.as_str()))
        .expect("shed series");
    assert!(mine.1 >= 1.0, "sheds counted: {text}");
    s.stop().await;
}

/// Parse Prometheus / OpenMetrics text: name{labels} value lines, checking the syntax.
fn parse_metrics(text: &str) -> HashMap<String, Vec<(String, f64)>> {
    let mut out: HashMap<String, Vec<(String, f64)>> = HashMap::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            assert!(
                line.is_empty()
                    || line.starts_with("# HELP ")
                    || line.starts_with("# TYPE ")
                    || line.starts_with("# UNIT ")
                    || line == "# EOF",
                "bad comment line {line:?}"
            );
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no value: {line:?}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v
                .parse()
                .unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => {
                let labels = rest
                    .strip_suffix('}')
                    .unwrap_or_else(|| panic!("unclosed {line:?}"));
                for pair in labels.split(',').filter(|p| !p.is_empty()) {
                    let (k, v) = pair
                        .split_once('=')
                        .unwrap_or_else(|| panic!("bad label {line:?}"));
                    assert!(
                        k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                        "{line:?}"
                    );
                    assert!(
                        v.starts_with('"') && v.ends_with('"') && v.len() >= 2,
                        "{line:?}"
                    );
                }
                (n, labels.to_owned())
            }
            None => (series, String::new()),
        };
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name in {line:?}"
        );
        out.entry(name.to_owned())
            .or_default()
            .push((labels, value));
    }
    out
}

#[tokio::test]
async fn metrics_parse_as_prometheus_text_and_carry_the_seed_names() {
    let s = Sluice::start_with(|_| {}).await;
    let (_, token) = s.tenant("acme").await;
    let rx = receiver::start(Behavior::Fast, false).await.unwrap();
    let ep = s.create_endpoint(&token, &rx.url(), json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let msg = s.send(&token, "order.paid", json!({})).await;
    s.wait_for(&format!("/v1/messages/{msg}/deliveries"), &token, |v| {
        states(v) == ["delivered"]
    })
    .await;
    let r = s.call(Method::GET, "/metrics", Some(ADMIN), None).await;
    assert_eq!(r.status, 200);
    let m = parse_metrics(&r.text);
    let has = |name: &str, label: &str| {
        m.get(name)
            .is_some_and(|series| series.iter().any(|(l, _)| l.contains(label)))
    };
    assert!(
        has("webhook_deliveries_ok_total", &format!("endpoint=\"{ep}\"")),
        "{}",
        r.text
    );
    assert!(has(
        "webhook_deliveries_shed_total",
        &format!("endpoint=\"{ep}\"")
    ));
    assert!(has("webhook_service_seconds_bucket", "le="));
    assert!(has("webhook_phase_seconds_bucket", "phase="));
    assert!(has(
        "delivery_duration_seconds_bucket",
        "host=\"127.0.0.1\""
    ));
    assert!(
        has("sluice_lane_size", &format!("endpoint=\"{ep}\"")),
        "{}",
        r.text
    );
    for state in ["ready", "leased", "delivered", "dead"] {
        assert!(
            has("sluice_queue_depth", &format!("state=\"{state}\"")),
            "{}",
            r.text
        );
    }
    for name in [
        "sluice_governor_limit",
        "sluice_breaker_state",
        "sluice_lane_in_flight",
    ] {
        assert!(has(name, &format!("endpoint=\"{ep}\"")), "{name}");
    }
    assert!(
        r.text
            .contains("# TYPE sluice_oldest_ready_age_seconds gauge")
    );
    assert!(m.contains_key("sluice_in_flight"));
    s.stop().await;
}
