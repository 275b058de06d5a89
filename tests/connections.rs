//! Who gets a connection when the API listener is full (issue 24, finding 3; issue 44, N3):
//! idle keep-alive connections, then connections stalled in a request head, give their slot up
//! to a new client instead of locking everyone out, and one address cannot hold more than its
//! share of the listener (raw TCP on loopback; other loopback addresses, 127.0.0.2 and up,
//! stand for other client machines).

use sluice_testkit as support;

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use support::{ADMIN, Sluice, test_settings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Generous bound on anything that should happen at once.
const BOUND: Duration = Duration::from_secs(15);

/// Connect to `s` from `from` (a loopback address).
async fn connect_from(s: &Sluice, from: [u8; 4]) -> TcpStream {
    let to: SocketAddr = s.base.trim_start_matches("http://").parse().unwrap();
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    socket.connect(to).await.expect("connect")
}

/// Send one request on `stream` and read its answer: (status, body). The connection stays
/// open for keep-alive.
async fn exchange(stream: &mut TcpStream, path: &str) -> Option<(u16, String)> {
    let head = format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n");
    stream.write_all(head.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    let read = async {
        loop {
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length: ")
                            .map(str::to_owned)
                    })
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if body.len() >= length {
                    let status = head.split(' ').nth(1)?.parse().ok()?;
                    return Some((status, body.to_owned()));
                }
            }
        }
    };
    tokio::time::timeout(BOUND, read).await.ok().flatten()
}

/// A connection that has sent half a request head and stalls (slowloris): neither idle nor
/// busy, and the first to go after the idle ones.
async fn half_head(s: &Sluice, from: [u8; 4]) -> TcpStream {
    let mut stream = connect_from(s, from).await;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-a: b\r\n")
        .await
        .expect("write");
    stream
}

/// A connection whose request is in the service, waiting for the rest of its body: busy.
async fn half_body(s: &Sluice, from: [u8; 4]) -> TcpStream {
    let mut stream = connect_from(s, from).await;
    let head = format!(
        "POST /v1/tenants HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ADMIN}\r\n\
         content-type: application/json\r\ncontent-length: 200\r\n\r\n{{\"name\":\""
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    stream
}

/// Whether the server closes `stream` within [`BOUND`] (reading what it sends meanwhile).
async fn closed(stream: &mut TcpStream) -> bool {
    let read = async {
        loop {
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(BOUND, read).await.is_ok()
}

/// Give the server a moment to read what was just sent (ordering only: nothing is timed).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

async fn metric(s: &Sluice, name: &str) -> f64 {
    let text = reqwest::Client::new()
        .get(format!("{}/metrics", s.base))
        .bearer_auth(ADMIN)
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} not in {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connections_give_way_to_new_clients() {
    let mut raw = test_settings();
    raw.http_max_connections = Some(20);
    let s = Sluice::start(raw).await;
    // Twenty clients each make one request and keep their connection open, idle.
    let mut idle = Vec::new();
    for i in 0..20u8 {
        let mut stream = connect_from(&s, [127, 0, 0, 2 + i % 4]).await;
        let (status, _) = exchange(&mut stream, "/healthz").await.expect("served");
        assert_eq!(status, 200);
        idle.push(stream);
    }
    // New clients are served (and stay connected): the oldest idle connections are closed
    // to make room.
    let mut fresh = Vec::new();
    for path in ["/healthz", "/readyz", "/healthz", "/readyz", "/healthz"] {
        let mut stream = connect_from(&s, [127, 0, 0, 1]).await;
        let answer = exchange(&mut stream, path).await;
        assert_eq!(answer.map(|a| a.0), Some(200), "{path} was not served");
        fresh.push(stream);
    }
    // The first idle connections were the ones closed.
    let mut closed = 0;
    for stream in idle.iter_mut().take(5) {
        let mut byte = [0u8; 1];
        if let Ok(Ok(0)) = tokio::time::timeout(BOUND, stream.read(&mut byte)).await {
            closed += 1;
        }
    }
    assert_eq!(closed, 5, "the five oldest idle connections were closed");
    assert!(
        metric(
            &s,
            "sluice_http_connections_evicted_total{listener=\"api\"}"
        )
        .await
            >= 5.0
    );
    s.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_at_most_its_share_of_the_listener() {
    let mut raw = test_settings();
    raw.http_max_connections = Some(100);
    raw.http_max_connections_per_peer = Some(5);
    raw.http_body_timeout = Some("60s".into());
    let s = Sluice::start(raw).await;
    // One address fills its share with requests in the service…
    let mut busy = Vec::new();
    for _ in 0..5 {
        busy.push(half_body(&s, [127, 0, 0, 3]).await);
    }
    settle().await;
    // …so its next connection is refused with a clear 503…
    let mut over = connect_from(&s, [127, 0, 0, 3]).await;
    match exchange(&mut over, "/healthz").await {
        Some((status, body)) => {
            assert_eq!(status, 503, "{body}");
            let json: Value = serde_json::from_str(&body).expect("problem");
            let detail = json["detail"].as_str().unwrap_or_default();
            assert!(
                detail.contains("address") && detail.contains('5'),
                "{detail}"
            );
        }
        None => panic!("the connection over the share saw no answer"),
    }
    // …while another address is served.
    let mut other = connect_from(&s, [127, 0, 0, 4]).await;
    assert_eq!(
        exchange(&mut other, "/healthz").await.map(|a| a.0),
        Some(200)
    );
    // Within its share an address's idle connections give way to its new ones.
    let mut idle = vec![other];
    for _ in 0..4 {
        let mut stream = connect_from(&s, [127, 0, 0, 4]).await;
        assert_eq!(
            exchange(&mut stream, "/healthz").await.map(|a| a.0),
            Some(200)
        );
        idle.push(stream);
    }
    let mut sixth = connect_from(&s, [127, 0, 0, 4]).await;
    assert_eq!(
        exchange(&mut sixth, "/healthz").await.map(|a| a.0),
        Some(200)
    );
    drop(busy);
    s.running.stop().await;
}

/// Finish `stream`'s half-sent head and read the answer: a stalled head that kept its slot is
/// served.
async fn finish_head(stream: &mut TcpStream) -> Option<u16> {
    stream.write_all(b"\r\n").await.ok()?;
    let mut buf = Vec::new();
    let read = async {
        loop {
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.windows(4).any(|w| w == b"\r\n\r\n") {
                let text = String::from_utf8_lossy(&buf);
                return text.split(' ').nth(1)?.parse().ok();
            }
        }
    };
    tokio::time::timeout(BOUND, read).await.ok().flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_stalled_in_a_request_head_give_way_to_new_clients() {
    let mut raw = test_settings();
    raw.http_max_connections = Some(20);
    raw.http_max_connections_per_peer = Some(10);
    // Far longer than the test: only eviction can free these slots.
    raw.http_header_timeout = Some("60s".into());
    let s = Sluice::start(raw).await;
    // Two addresses each fill their share of the listener with half-sent request heads…
    let mut stalled = Vec::new();
    for i in 0..20u8 {
        stalled.push(half_head(&s, [127, 0, 0, 2 + i % 2]).await);
    }
    settle().await;
    // …and a new client is still served, readiness included: the oldest stalled head makes
    // room, and is closed at once rather than left to its header deadline…
    let mut fresh = connect_from(&s, [127, 0, 0, 1]).await;
    let answer = exchange(&mut fresh, "/readyz").await;
    assert_eq!(answer.map(|a| a.0), Some(200), "/readyz was not served");
    assert!(
        closed(&mut stalled[0]).await,
        "the oldest stalled head was not closed"
    );
    // …(the next newcomer takes the idle keep-alive connection's slot before another head's)…
    let mut next = connect_from(&s, [127, 0, 0, 1]).await;
    let answer = exchange(&mut next, "/healthz").await;
    assert_eq!(answer.map(|a| a.0), Some(200), "/healthz was not served");
    assert!(
        closed(&mut fresh).await,
        "the idle connection was not closed"
    );
    // …while the youngest stalled head kept its slot: finished, it is served.
    assert_eq!(finish_head(&mut stalled[19]).await, Some(200));
    assert!(
        metric(
            &s,
            "sluice_http_connections_evicted_total{listener=\"api\"}"
        )
        .await
            >= 2.0
    );
    drop(stalled);
    s.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_stalled_in_request_heads_gives_way_to_its_own_new_client() {
    let mut raw = test_settings();
    raw.http_max_connections = Some(100);
    raw.http_max_connections_per_peer = Some(5);
    raw.http_header_timeout = Some("60s".into());
    let s = Sluice::start(raw).await;
    // An attacker behind the same address as a producer fills the address's share with
    // half-sent heads…
    let mut stalled = Vec::new();
    for _ in 0..5 {
        stalled.push(half_head(&s, [127, 0, 0, 1]).await);
    }
    settle().await;
    // …and the producer is still served: the address's oldest stalled head makes room.
    let mut fresh = connect_from(&s, [127, 0, 0, 1]).await;
    let answer = exchange(&mut fresh, "/readyz").await;
    assert_eq!(answer.map(|a| a.0), Some(200), "/readyz was not served");
    assert!(
        closed(&mut stalled[0]).await,
        "the oldest stalled head was not closed"
    );
    assert_eq!(finish_head(&mut stalled[4]).await, Some(200));
    drop(stalled);
    s.running.stop().await;
}
