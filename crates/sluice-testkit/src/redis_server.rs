//! A private `redis-server` child process on a loopback port of its own, so a test or a bench
//! scenario can kill it (every lane slot gone, nothing saved) and start it again on the same
//! port. `SLUICE_REDIS_SERVER` may name the binary; otherwise `redis-server` on `PATH`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long a started server is given to answer PING.
const PATIENCE: Duration = Duration::from_secs(20);

/// A `redis-server` on `127.0.0.1:port`; killed on drop.
pub struct RedisServer {
    binary: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// The binary: `SLUICE_REDIS_SERVER`, else `redis-server` on `PATH` or in `/usr/bin`.
    pub fn binary() -> Option<PathBuf> {
        if let Some(named) = std::env::var_os("SLUICE_REDIS_SERVER") {
            return Some(PathBuf::from(named));
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .map(|d| d.join("redis-server"))
            .chain([PathBuf::from("/usr/bin/redis-server")])
            .find(|candidate| candidate.is_file())
    }

    /// For tests: a server on a free port, answering PING; `None` (the test is skipped, loudly)
    /// without a binary, which is a failure under `SLUICE_REQUIRE_SERVICES`.
    pub async fn start() -> Option<RedisServer> {
        let mut server = Self::not_started()?;
        server.restart().await.expect("redis-server");
        Some(server)
    }

    /// For tests: a server for a free port with nothing listening yet (Redis down at start);
    /// `None` as for [`RedisServer::start`].
    pub fn not_started() -> Option<RedisServer> {
        let Some(binary) = Self::binary() else {
            assert!(
                !crate::services_required(),
                "redis-server not found but SLUICE_REQUIRE_SERVICES=1: Redis is required"
            );
            eprintln!("SKIPPED: redis-server not found; this test did not run");
            return None;
        };
        Some(RedisServer {
            binary,
            port: crate::free_port(),
            child: None,
        })
    }

    /// A server on `port`, answering PING; an error without a binary or an answer.
    pub async fn start_on(port: u16) -> anyhow::Result<RedisServer> {
        let binary = Self::binary()
            .context("redis-server not found (on PATH, or named by SLUICE_REDIS_SERVER)")?;
        let mut server = RedisServer {
            binary,
            port,
            child: None,
        };
        server.restart().await?;
        Ok(server)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// (Re)start it on its port, empty, and wait until it answers PING.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.stop();
        let child = Command::new(&self.binary)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("spawn {}", self.binary.display()))?;
        self.child = Some(child);
        let until = std::time::Instant::now() + PATIENCE;
        while std::time::Instant::now() < until {
            if self.ping().await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bail!("redis-server on port {} never answered PING", self.port)
    }

    /// Whether it answers PING now.
    pub async fn ping(&self) -> bool {
        let Ok(mut socket) = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await else {
            return false;
        };
        let mut buf = [0u8; 16];
        socket.write_all(b"PING\r\n").await.is_ok()
            && tokio::time::timeout(Duration::from_secs(1), socket.read(&mut buf))
                .await
                .is_ok_and(|r| r.is_ok_and(|n| buf[..n].starts_with(b"+PONG")))
    }

    /// Stop it hard (`kill -9`: nothing saved, every lane slot gone).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
