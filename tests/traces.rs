//! OpenTelemetry traces against a real OTLP receiver (tests/otlp_receiver.py, which decodes the
//! protobuf with PyPI's opentelemetry-proto): every attempt of a message POSTed with a W3C
//! `traceparent` is a span in the producer's trace, a child of the producer's span, across a
//! retry; an endpoint that asked for trace context receives a `traceparent` naming the attempt
//! span, another receives none; with export off nothing reaches the collector.

use sluice_testkit as support;

use std::io::BufRead;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use serde_json::{Value, json};
use support::receiver::{self, Behavior, Observer, Options};
use support::{Sluice, eventually, test_settings};

const WAIT: Duration = Duration::from_secs(20);
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER_SPAN: &str = "00f067aa0ba902b7";
const TRACESTATE: &str = "vendor=abc123";

/// The OTLP receiver, stopped when dropped; its spans are JSON lines in a file.
struct Collector {
    child: std::process::Child,
    base: String,
    out: tempfile::NamedTempFile,
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Collector {
    /// Start it, or None (skip) without Python.
    fn start() -> Option<Collector> {
        let python = support::python_verifier()?;
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/otlp_receiver.py");
        let out = tempfile::NamedTempFile::new().expect("temp file");
        let mut child = std::process::Command::new(python)
            .arg(script)
            .arg("--out")
            .arg(out.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("start the OTLP receiver (opentelemetry-proto installed by .ci/run)");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the receiver's port");
        let port = serde_json::from_str::<Value>(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
            ["port"]
            .as_u64()
            .expect("port");
        Some(Collector {
            child,
            base: format!("http://127.0.0.1:{port}"),
            out,
        })
    }

    /// Every span received so far; a body the receiver could not decode fails the test.
    fn spans(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.out.path()).unwrap_or_default();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        for l in &lines {
            assert!(l.get("error").is_none(), "the receiver refused a body: {l}");
        }
        lines
    }
}

/// Records the trace headers of every request a receiver answers.
#[derive(Default)]
struct TraceHeaders(Mutex<Vec<(Option<String>, Option<String>)>>);

impl Observer for TraceHeaders {
    fn request(&self, headers: &HeaderMap, _body: &[u8]) {
        let get = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let mut seen = self.0.lock().unwrap();
        seen.push((get("traceparent"), get("tracestate")));
    }
}

impl TraceHeaders {
    fn seen(&self) -> Vec<(Option<String>, Option<String>)> {
        self.0.lock().unwrap().clone()
    }
}

async fn observed(behavior: Behavior) -> (receiver::Receiver, Arc<TraceHeaders>) {
    let headers = Arc::new(TraceHeaders::default());
    let options = Options {
        observer: Some(headers.clone()),
        ..Options::default()
    };
    let rx = receiver::start_with(behavior, options).await.unwrap();
    (rx, headers)
}

/// POST a message with these extra headers; returns its id.
async fn send_with(s: &Sluice, token: &str, headers: &[(&str, &str)]) -> String {
    let mut request = s
        .http
        .post(format!("{}/v1/messages", s.base))
        .bearer_auth(token)
        .json(&json!({ "event_type": "order.created", "payload": { "n": 1 } }));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let r = request.send().await.unwrap();
    assert_eq!(r.status(), 202);
    let body: Value = r.json().await.unwrap();
    body["id"].as_str().unwrap().to_owned()
}

/// The attempts of the message's delivery to `endpoint`, oldest first.
async fn attempts(s: &Sluice, token: &str, message: &str, endpoint: &str) -> Vec<Value> {
    let m = s.message(token, message).await;
    let delivery = m["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["endpoint_id"] == endpoint)
        .unwrap_or_else(|| panic!("no delivery to {endpoint}: {m}"))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, log) = s
        .get(token, &format!("/v1/deliveries/{delivery}/attempts"))
        .await;
    log["data"].as_array().cloned().unwrap_or_default()
}

fn traceparent() -> String {
    format!("00-{TRACE_ID}-{PRODUCER_SPAN}-01")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempt_spans_join_the_producers_trace_across_a_retry() {
    let Some(collector) = Collector::start() else {
        return;
    };
    let mut raw = test_settings();
    raw.retry_schedule = Some("1s".into());
    raw.traces.endpoint = Some(collector.base.clone());
    raw.traces.schedule_delay = Some(100);
    let s = Sluice::start(raw).await;
    let (_, token) = s.tenant("acme").await;
    let (asking, asking_seen) = observed(Behavior::FailFirst {
        fail_first: 1,
        status: 500,
    })
    .await;
    let (other, other_seen) = observed(Behavior::Fast).await;
    let (asking_id, _) = s
        .endpoint(&token, &asking.url(), json!({ "trace_context": true }))
        .await;
    let (other_id, _) = s.endpoint(&token, &other.url(), json!({})).await;
    let (_, shown) = s.get(&token, &format!("/v1/endpoints/{asking_id}")).await;
    assert_eq!(shown["trace_context"], true, "{shown}");
    let (_, shown) = s.get(&token, &format!("/v1/endpoints/{other_id}")).await;
    assert_eq!(shown["trace_context"], false, "{shown}");

    let parent = traceparent();
    let msg = send_with(
        &s,
        &token,
        &[("traceparent", &parent), ("tracestate", TRACESTATE)],
    )
    .await;

    // Two attempts to the one that fails first, one to the other: three spans.
    let attempt_spans = || {
        collector
            .spans()
            .into_iter()
            .filter(|s| s["attributes"]["sluice.message.id"] == msg.as_str())
            .filter(|s| s["name"] == "POST")
            .collect::<Vec<_>>()
    };
    assert!(
        eventually(WAIT, || async { attempt_spans().len() >= 3 }).await,
        "spans: {:?}",
        collector.spans()
    );
    let spans = attempt_spans();
    assert_eq!(spans.len(), 3, "{spans:#?}");
    for span in &spans {
        assert_eq!(span["trace_id"], TRACE_ID, "{span}");
        assert_eq!(span["parent_span_id"], PRODUCER_SPAN, "{span}");
        assert_eq!(span["trace_state"], TRACESTATE, "{span}");
        assert_eq!(span["kind"], 3, "SPAN_KIND_CLIENT: {span}");
        assert_eq!(span["service"], "sluice");
        let a = &span["attributes"];
        assert_eq!(a["http.request.method"], "POST");
        assert_eq!(a["server.address"], "127.0.0.1");
        assert_eq!(a["url.scheme"], "http");
        assert!(a["server.port"].as_i64().unwrap() > 0, "{a}");
        assert!(a["sluice.tenant.id"].as_str().unwrap().starts_with("ten_"));
        assert!(
            a["sluice.delivery.id"]
                .as_str()
                .unwrap()
                .starts_with("dlv_")
        );
        let text = span.to_string();
        assert!(
            !text.contains("whsec_") && !text.contains("\"n\""),
            "{text}"
        );
    }
    let mut to_asking: Vec<&Value> = spans
        .iter()
        .filter(|s| s["attributes"]["sluice.endpoint.id"] == asking_id.as_str())
        .collect();
    to_asking.sort_by_key(|s| s["attributes"]["sluice.attempt.number"].as_i64());
    assert_eq!(to_asking.len(), 2, "{spans:#?}");
    let (first, second) = (&to_asking[0]["attributes"], &to_asking[1]["attributes"]);
    assert_eq!(first["sluice.attempt.number"], 1);
    assert_eq!(first["http.response.status_code"], 500);
    assert_eq!(first["error.type"], "500");
    assert_eq!(first["sluice.outcome"], "retry");
    assert_eq!(to_asking[0]["status"]["code"], 2, "STATUS_CODE_ERROR");
    assert_eq!(second["sluice.attempt.number"], 2);
    assert_eq!(second["http.response.status_code"], 200);
    assert_eq!(second["sluice.outcome"], "delivered");
    assert!(second.get("error.type").is_none(), "{second}");
    assert_ne!(to_asking[0]["span_id"], to_asking[1]["span_id"]);

    // The endpoint that asked saw each attempt's span as the parent, in the producer's trace.
    let seen = asking_seen.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for (span, (tp, ts)) in to_asking.iter().zip(&seen) {
        let expected = format!("00-{TRACE_ID}-{}-01", span["span_id"].as_str().unwrap());
        assert_eq!(tp.as_deref(), Some(expected.as_str()));
        assert_eq!(ts.as_deref(), Some(TRACESTATE));
    }
    // The other saw no trace header at all.
    assert!(
        eventually(WAIT, || async { !other_seen.seen().is_empty() }).await,
        "the other endpoint got its delivery"
    );
    assert!(
        other_seen
            .seen()
            .iter()
            .all(|(tp, ts)| tp.is_none() && ts.is_none()),
        "{:?}",
        other_seen.seen()
    );

    // The attempt log shows the trace of every attempt.
    let log = attempts(&s, &token, &msg, &asking_id).await;
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(log.iter().all(|a| a["trace_id"] == TRACE_ID), "{log:?}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_without_context_starts_a_trace_and_an_invalid_one_is_ignored() {
    let Some(collector) = Collector::start() else {
        return;
    };
    let mut raw = test_settings();
    raw.traces.endpoint = Some(collector.base.clone());
    raw.traces.schedule_delay = Some(100);
    let s = Sluice::start(raw).await;
    let (_, token) = s.tenant("acme").await;
    let (rx, seen) = observed(Behavior::Fast).await;
    let (ep, _) = s
        .endpoint(&token, &rx.url(), json!({ "trace_context": true }))
        .await;
    // Upper-case hex is invalid: ignored, not refused.
    let invalid = traceparent().to_uppercase();
    let msg = send_with(&s, &token, &[("traceparent", &invalid)]).await;
    let spans_of = || {
        collector
            .spans()
            .into_iter()
            .filter(|s| s["attributes"]["sluice.message.id"] == msg.as_str())
            .collect::<Vec<_>>()
    };
    assert!(eventually(WAIT, || async { !spans_of().is_empty() }).await);
    let span = &spans_of()[0];
    assert_eq!(span["parent_span_id"], "", "a root span: {span}");
    assert_ne!(span["trace_id"], TRACE_ID.to_uppercase());
    let trace = span["trace_id"].as_str().unwrap().to_owned();
    assert_eq!(trace.len(), 32);
    // With export on, the endpoint that asked is sent sluice's trace.
    let headers = seen.seen();
    let expected = format!("00-{trace}-{}-01", span["span_id"].as_str().unwrap());
    assert_eq!(headers[0].0.as_deref(), Some(expected.as_str()));
    let log = attempts(&s, &token, &msg, &ep).await;
    assert_eq!(log[0]["trace_id"], trace.as_str());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_export_off_nothing_is_sent_and_only_the_producers_context_goes_on() {
    let Some(collector) = Collector::start() else {
        return;
    };
    // The collector runs, but sluice is not told about it.
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let (rx, seen) = observed(Behavior::Fast).await;
    let (ep, _) = s
        .endpoint(&token, &rx.url(), json!({ "trace_context": true }))
        .await;
    let unsampled = format!("00-{TRACE_ID}-{PRODUCER_SPAN}-00");
    let with = send_with(&s, &token, &[("traceparent", &unsampled)]).await;
    let without = send_with(&s, &token, &[]).await;
    assert!(eventually(WAIT, || async { seen.seen().len() >= 2 }).await);
    let headers = seen.seen();
    let with_context: Vec<_> = headers.iter().filter(|(tp, _)| tp.is_some()).collect();
    assert_eq!(
        with_context.len(),
        1,
        "only the message with a traceparent: {headers:?}"
    );
    let tp = with_context[0].0.as_deref().unwrap();
    assert!(
        tp.starts_with(&format!("00-{TRACE_ID}-")) && tp.ends_with("-00"),
        "the producer's trace and its unsampled flag: {tp}"
    );
    assert!(
        !tp.contains(PRODUCER_SPAN),
        "the attempt is the parent: {tp}"
    );
    let log = attempts(&s, &token, &with, &ep).await;
    assert_eq!(log[0]["trace_id"], TRACE_ID);
    let log = attempts(&s, &token, &without, &ep).await;
    assert_eq!(log[0]["trace_id"].as_str().unwrap().len(), 32);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(collector.spans(), Vec::<Value>::new());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_collector_costs_spans_never_deliveries() {
    // Nothing listens on the collector's port: every export fails at once.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = dead.local_addr().unwrap().port();
    drop(dead);
    let mut raw = test_settings();
    raw.traces.endpoint = Some(format!("http://127.0.0.1:{port}"));
    raw.traces.schedule_delay = Some(10);
    raw.traces.max_queue = Some(4);
    raw.traces.max_batch = Some(2);
    let s = Sluice::start(raw).await;
    let (_, token) = s.tenant("acme").await;
    let rx = receiver::start(Behavior::Fast, false).await.unwrap();
    s.endpoint(&token, &rx.url(), json!({ "trace_context": true }))
        .await;
    for _ in 0..40 {
        send_with(&s, &token, &[("traceparent", &traceparent())]).await;
    }
    assert!(
        eventually(WAIT, || async { rx.record.requests() >= 40 }).await,
        "every message delivered: {}",
        rx.record.requests()
    );
    let metrics = &s.running.metrics;
    assert!(
        eventually(WAIT, || async { metrics.trace_spans_dropped.get() >= 40 }).await,
        "every span dropped and counted: {}",
        metrics.trace_spans_dropped.get()
    );
    assert_eq!(metrics.trace_spans_exported.get(), 0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_attempt_is_a_producer_span_with_the_messaging_conventions() {
    let Some(collector) = Collector::start() else {
        return;
    };
    let Some(redis_url) = support::redis_url() else {
        return;
    };
    let client = redis::Client::open(redis_url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let key = format!("sluice-trace-{}", sluice::ids::new_id("st"));
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&key)
        .arg("readers")
        .arg("$")
        .arg("MKSTREAM")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut raw = test_settings();
    raw.traces.endpoint = Some(collector.base.clone());
    raw.traces.schedule_delay = Some(100);
    let s = Sluice::start(raw).await;
    let (_, token) = s.tenant("acme").await;
    let (status, created) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({
                "destination": { "type": "redis", "url": redis_url, "stream": key },
                "trace_context": true,
            }),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let msg = send_with(
        &s,
        &token,
        &[("traceparent", &traceparent()), ("tracestate", TRACESTATE)],
    )
    .await;
    let spans_of = || {
        collector
            .spans()
            .into_iter()
            .filter(|s| s["attributes"]["sluice.message.id"] == msg.as_str())
            .collect::<Vec<_>>()
    };
    assert!(eventually(WAIT, || async { !spans_of().is_empty() }).await);
    let span = &spans_of()[0];
    assert_eq!(span["name"], format!("send {key}"), "{span}");
    assert_eq!(span["kind"], 4, "SPAN_KIND_PRODUCER: {span}");
    assert_eq!(span["trace_id"], TRACE_ID);
    assert_eq!(span["parent_span_id"], PRODUCER_SPAN);
    let a = &span["attributes"];
    assert_eq!(a["messaging.system"], "redis");
    assert_eq!(a["messaging.destination.name"], key.as_str());
    assert_eq!(a["messaging.operation.type"], "send");
    assert_eq!(a["sluice.outcome"], "delivered");
    assert!(a.get("http.request.method").is_none(), "{a}");

    // The entry carries the trace context as fields: the attempt span as the parent.
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(&key)
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap();
    let field = |name: &str| {
        entries[0]
            .1
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let expected = format!("00-{TRACE_ID}-{}-01", span["span_id"].as_str().unwrap());
    assert_eq!(field("traceparent"), Some(expected));
    assert_eq!(field("tracestate").as_deref(), Some(TRACESTATE));
    s.stop().await;
}
