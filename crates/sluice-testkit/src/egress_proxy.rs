//! A real HTTP egress proxy for tests: Debian's `tinyproxy` (installed by `.ci/run`), started
//! on a free loopback port with a configuration of its own and a log the test can read to see
//! what went through it. Without `tinyproxy` the test is skipped loudly, or fails under CI.

use std::path::PathBuf;
use std::time::Duration;

/// A running tinyproxy, stopped when dropped.
pub struct Tinyproxy {
    child: std::process::Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Tinyproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Tinyproxy {
    /// What it has logged so far (one line per connection and request).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Start tinyproxy on a free port, or None (skip) where it is not installed.
pub async fn tinyproxy() -> Option<Tinyproxy> {
    let found = std::process::Command::new("tinyproxy")
        .arg("-v")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            !crate::services_required(),
            "tinyproxy is not installed but SLUICE_REQUIRE_SERVICES=1 (.ci/run installs it)"
        );
        eprintln!("SKIPPED: tinyproxy is not installed; this egress proxy test did not run");
        return None;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let port = crate::free_port();
    let log = dir.path().join("tinyproxy.log");
    let conf = dir.path().join("tinyproxy.conf");
    // No ConnectPort line: CONNECT to every port (the receivers' ports are random).
    let text = format!(
        "Port {port}\nListen 127.0.0.1\nTimeout 30\nLogFile \"{}\"\nLogLevel Info\n\
         MaxClients 64\nAllow 127.0.0.1\nDisableViaHeader Yes\n",
        log.display()
    );
    std::fs::write(&conf, text).expect("tinyproxy.conf");
    let child = std::process::Command::new("tinyproxy")
        .arg("-d")
        .arg("-c")
        .arg(&conf)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start tinyproxy");
    let up = crate::eventually(Duration::from_secs(10), || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;
    assert!(up, "tinyproxy did not start listening on {port}");
    Some(Tinyproxy {
        child,
        port,
        log,
        _dir: dir,
    })
}
