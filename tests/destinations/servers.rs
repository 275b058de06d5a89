//! NATS servers of a test's own, for what the shared one must not be put through (no
//! JetStream, a password): started on a free port, killed when dropped. (Redis has the
//! testkit's `RedisServer`.)

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::support::{self, eventually};

/// A server process, killed (and reaped) when dropped, also when the test fails.
pub(super) struct Server {
    child: Child,
    pub port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `program` with `args` (where `{port}` is a free port), once it accepts connections; None
/// (a loud skip) when it is not installed and services are not required.
pub(super) async fn start(program: &str, args: &[&str]) -> Option<Server> {
    let port = support::free_port();
    let args: Vec<String> = args
        .iter()
        .map(|a| a.replace("{port}", &port.to_string()))
        .collect();
    let child = match Command::new(program)
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            assert!(
                !support::services::services_required(),
                "{program} is not installed: {e}"
            );
            eprintln!("SKIPPED: {program} is not installed: {e}");
            return None;
        }
    };
    let server = Server { child, port };
    assert!(
        eventually(Duration::from_secs(10), || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await,
        "{program} did not listen on {port}"
    );
    Some(server)
}
