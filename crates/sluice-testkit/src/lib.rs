//! sluice's test kit: what the integration tests and the benchmarks share, so neither carries
//! its own copy and none of it is compiled into the server.
//!
//! # Layout
//!
//! - [`receiver`]: real HTTP receivers on loopback (fast, slow, blackhole, throttling, capped,
//!   flaky, gone, redirecting, oversized, hostile), each recording what it saw.
//! - [`process`]: the `sluice` binary as a child process (`sluice serve` and the rest), stopped
//!   with SIGTERM or SIGKILL, what it wrote collected.
//! - [`harness`]: a sluice started in this process, with helpers for the public API; [`api`]:
//!   requests that keep every part of the answer, and the assertions API tests share.
//! - [`services`]: a fresh PostgreSQL database or SQLite store per test, the Redis URL, the
//!   independent signature verifier; a missing service skips loudly, or fails under CI.
//! - [`drivers`]: one test body run on SQLite and on PostgreSQL ([`drivers!`]), as
//!   `sqlite::name` and `postgres::name`.
//! - [`freeze_proxy`]: a TCP proxy that stops forwarding on demand (a hung database) or closes
//!   and refuses every connection (a database restart).
//! - [`redis_server`]: a private `redis-server` child on a port of its own, to kill and restart.
//! - [`egress_proxy`]: a real HTTP egress proxy (Debian's tinyproxy) with a log to read.
//! - [`tls`]: a test CA made at test time, its server and client certificates, the server
//!   configuration of an HTTPS receiver (optionally requiring a client certificate).
//!
//! An endpoint row with defaults is the product's own `sluice::model::Endpoint::new`.

#![forbid(unsafe_code)]

pub mod api;
pub mod drivers;
pub mod egress_proxy;
pub mod freeze_proxy;
pub mod harness;
pub mod process;
pub mod receiver;
pub mod redis_server;
pub mod services;
pub mod tls;

pub use harness::{ADMIN, Sluice, test_settings};
pub use redis_server::RedisServer;
pub use services::{
    bare_postgres, fresh_postgres, fresh_postgres_store, fresh_sqlite, postgres_client,
    postgres_store, python_verifier, redis_url, services_required,
};

/// Poll `check` every 50 ms until it holds or `timeout` passes; returns whether it held.
pub async fn eventually<F, Fut>(timeout: std::time::Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = std::time::Instant::now() + timeout;
    loop {
        if check().await {
            return true;
        }
        if std::time::Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// An HTTP client for tests (installs the TLS provider first).
pub fn http() -> reqwest::Client {
    sluice::delivery::install_tls_provider();
    reqwest::Client::new()
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}
