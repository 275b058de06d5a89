//! Broker servers of a test's own, for what the shared ones must not be put through (no
//! JetStream, a password, TLS): a child process on a loopback port of its own, killed when
//! the test ends. (Redis without TLS has the testkit's `RedisServer`.)

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::TcpStream;

use super::support::{self, eventually};

/// A server process, killed (and reaped) when dropped, also when the test fails.
pub(super) struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `name` on `PATH` (or in `/usr/sbin`, `/usr/bin`), or `None`: a loud skip, which is a failure
/// under `SLUICE_REQUIRE_SERVICES=1`.
pub(super) fn binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|d| d.join(name))
        .find(|candidate| candidate.is_file());
    if found.is_none() {
        assert!(
            !support::services_required(),
            "{name} not found but SLUICE_REQUIRE_SERVICES=1"
        );
        eprintln!("SKIPPED: {name} not found; this test did not run");
    }
    found
}

/// Start `binary` with `args`, its output in `log`, and wait for `port` to accept.
pub(super) async fn start(binary: &Path, args: &[String], log: &Path, port: u16) -> Running {
    let out = std::fs::File::create(log).unwrap();
    let child = std::process::Command::new(binary)
        .args(args)
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let running = Running(child);
    let up = eventually(Duration::from_secs(20), || async {
        TcpStream::connect(("127.0.0.1", port)).await.is_ok()
    })
    .await;
    assert!(
        up,
        "{} is not listening on {port}: {}",
        binary.display(),
        std::fs::read_to_string(log).unwrap_or_default()
    );
    running
}

/// A plain `nats-server` on a free port with `extra` arguments; it, its port, and the
/// directory of its log. `None` without a binary.
pub(super) async fn nats(extra: &[&str]) -> Option<(Running, u16, tempfile::TempDir)> {
    let nats = binary("nats-server")?;
    let port = support::free_port();
    let dir = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = ["-a", "127.0.0.1", "-p", &port.to_string()]
        .iter()
        .map(|a| a.to_string())
        .collect();
    args.extend(extra.iter().map(|a| a.to_string()));
    let running = start(&nats, &args, &dir.path().join("nats.log"), port).await;
    Some((running, port, dir))
}
