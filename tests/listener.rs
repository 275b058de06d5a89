//! The API listener against slow, idle and too many clients (raw TCP on loopback): slow headers,
//! a trickled body and idle keep-alive connections are cut off by their timeouts while normal
//! clients are served, and a flood beyond the connection limit is refused with a clear 503.
//!
//! The timeouts under test are bounds, so the assertions are bounds too, with generous margins
//! (a cut-off must happen within 15 s of a 1–2 s timeout; nothing asserts how early).

use sluice_testkit as support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{ADMIN, Sluice, test_settings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest a cut-off may take in these tests, far above every timeout configured here.
const CUT_OFF_BOUND: Duration = Duration::from_secs(15);

/// What a raw connection saw: a response (status, lower-cased head, body), or only a close.
#[derive(Debug)]
enum Seen {
    Response {
        status: u16,
        head: String,
        body: String,
    },
    Closed,
}

/// Read until the server closes the connection or `bound` passes (None: still open).
async fn read_until_close(stream: &mut TcpStream, bound: Duration) -> Option<Seen> {
    let mut buf = Vec::new();
    let until = Instant::now() + bound;
    loop {
        let mut chunk = [0u8; 8192];
        let left = until.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut chunk)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    Some(parse(&buf))
}

fn parse(bytes: &[u8]) -> Seen {
    let text = String::from_utf8_lossy(bytes).into_owned();
    match text.split_once("\r\n\r\n") {
        None => Seen::Closed,
        Some((head, body)) => Seen::Response {
            status: head
                .split(' ')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
            head: head.to_ascii_lowercase(),
            body: body.to_owned(),
        },
    }
}

/// A normal request through a fresh client: the API still answers.
async fn healthy(s: &Sluice) -> bool {
    let client = reqwest::Client::new();
    client
        .get(format!("{}/healthz", s.base))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .is_ok_and(|r| r.status() == 200)
}

fn addr(s: &Sluice) -> String {
    s.base.trim_start_matches("http://").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_and_a_trickled_body_are_cut_off_while_others_are_served() {
    let mut raw = test_settings();
    raw.http_header_timeout = Some("1s".into());
    raw.http_body_timeout = Some("1s".into());
    let s = Sluice::start(raw).await;
    let addr = addr(&s);

    // Five clients send a request line and then one header byte every 200 ms, forever.
    let mut slow_headers = Vec::new();
    for _ in 0..5 {
        let addr = addr.clone();
        slow_headers.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(&addr).await.expect("connect");
            let started = Instant::now();
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: ")
                .await
                .expect("write");
            while started.elapsed() < CUT_OFF_BOUND {
                if stream.write_all(b"a").await.is_err() {
                    return Some(started.elapsed());
                }
                let mut probe = [0u8; 1];
                match tokio::time::timeout(Duration::from_millis(200), stream.read(&mut probe))
                    .await
                {
                    Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
                    _ => {}
                }
            }
            None
        }));
    }
    // One client sends complete headers, then trickles its body a byte every 200 ms.
    let trickle = {
        let addr = addr.clone();
        tokio::spawn(async move {
            let mut stream = TcpStream::connect(&addr).await.expect("connect");
            let head = format!(
                "POST /v1/tenants HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ADMIN}\r\n\
                 content-type: application/json\r\ncontent-length: 200\r\n\r\n{{\"name\":\""
            );
            stream.write_all(head.as_bytes()).await.expect("write");
            let started = Instant::now();
            let mut buf = Vec::new();
            while started.elapsed() < CUT_OFF_BOUND {
                let _ = stream.write_all(b"a").await;
                let mut chunk = [0u8; 4096];
                match tokio::time::timeout(Duration::from_millis(200), stream.read(&mut chunk))
                    .await
                {
                    Ok(Ok(0)) | Ok(Err(_)) => return Some(parse(&buf)),
                    Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
                    Err(_) => {}
                }
            }
            None
        })
    };

    // Meanwhile normal clients are served, again and again.
    for _ in 0..10 {
        assert!(healthy(&s).await, "a normal client was not served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for task in slow_headers {
        let cut = task.await.expect("slow-header client");
        assert!(
            cut.is_some(),
            "a client trickling its headers was still connected after {CUT_OFF_BOUND:?}"
        );
    }
    match trickle.await.expect("trickling client") {
        None => panic!("a client trickling its body was still connected after {CUT_OFF_BOUND:?}"),
        Some(Seen::Response { status, head, body }) => {
            assert_eq!(status, 408, "{head}\n{body}");
            assert!(
                head.contains("content-type: application/problem+json"),
                "{head}"
            );
            let json: Value = serde_json::from_str(&body).expect("problem body");
            assert_eq!(json["status"], 408);
        }
        Some(Seen::Closed) => panic!("a client trickling its body was cut off without a 408"),
    }
    assert!(healthy(&s).await);
    s.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let mut raw = test_settings();
    raw.http_idle_timeout = Some("1s".into());
    let s = Sluice::start(raw).await;
    let mut stream = TcpStream::connect(addr(&s)).await.expect("connect");
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("write");
    // The response arrives and the connection stays open for keep-alive…
    let mut buf = [0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
        .await
        .expect("a response")
        .expect("read");
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    // …until it has been idle for the timeout.
    let closed = read_until_close(&mut stream, CUT_OFF_BOUND).await;
    assert!(
        closed.is_some(),
        "an idle keep-alive connection was still open after {CUT_OFF_BOUND:?}"
    );
    assert!(healthy(&s).await);
    s.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_beyond_the_limit_is_refused_clearly() {
    let mut raw = test_settings();
    raw.http_max_connections = Some(20);
    // The flood comes from one address: let it reach the listener's own limit.
    raw.http_max_connections_per_peer = Some(20);
    // Long enough that the flood holds its connections for the whole test.
    raw.http_body_timeout = Some("60s".into());
    let s = Sluice::start(raw).await;
    let addr = addr(&s);

    // Twenty requests in the service, waiting for the rest of their bodies, hold every slot
    // (idle connections and stalled heads would give theirs up: see tests/connections.rs)…
    let mut flood = Vec::new();
    for _ in 0..20 {
        let mut stream = TcpStream::connect(&addr).await.expect("connect");
        let head = format!(
            "POST /v1/tenants HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ADMIN}\r\n\
             content-type: application/json\r\ncontent-length: 200\r\n\r\n{{\"name\":\""
        );
        stream.write_all(head.as_bytes()).await.expect("write");
        flood.push(stream);
    }
    // Let the server read those requests (ordering only: a connection it has heard nothing
    // from yet counts as idle and would give its slot up).
    tokio::time::sleep(Duration::from_millis(300)).await;
    // …so the next ones are answered 503 problem+json with Retry-After, and closed.
    for _ in 0..5 {
        let mut stream = TcpStream::connect(&addr).await.expect("connect");
        let _ = stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await;
        match read_until_close(&mut stream, CUT_OFF_BOUND).await {
            Some(Seen::Response { status, head, body }) => {
                assert_eq!(status, 503, "{head}\n{body}");
                assert!(
                    head.contains("content-type: application/problem+json"),
                    "{head}"
                );
                assert!(head.contains("retry-after: "), "{head}");
                let json: Value = serde_json::from_str(&body).expect("problem body");
                assert_eq!(json["status"], 503);
                assert!(json["detail"].as_str().is_some_and(|d| d.contains("20")));
            }
            other => panic!("a connection beyond the limit saw {other:?}, not a 503"),
        }
    }
    // Once the flood lets go, normal clients are served again.
    drop(flood);
    assert!(
        support::eventually(CUT_OFF_BOUND, || healthy(&s)).await,
        "the API stayed unreachable after the flood ended"
    );
    // And the operator can see that it happened.
    let metrics = reqwest::Client::new()
        .get(format!("{}/metrics", s.base))
        .bearer_auth(ADMIN)
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    let refused = metrics
        .lines()
        .find(|l| l.starts_with("sluice_http_connections_refused_total{listener=\"api\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok());
    // At least the five above (a retry of `healthy` may have been refused too).
    assert!(refused.is_some_and(|n| n >= 5.0), "{metrics}");
    s.running.stop().await;
}
