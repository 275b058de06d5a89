//! The TLS listeners of the broker tests, on loopback ports of their own: the test CA's files,
//! a `nats-server` or `redis-server` child process killed when the test ends, and a TLS
//! terminator in front of the shared RabbitMQ (which listens in plain only).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice_testkit::tls::{Issued, TestCa, Validity, server_config};
use tokio::net::{TcpListener, TcpStream};

use super::WAIT;
use super::support::{self, eventually};

/// A test CA, a server certificate of it for `localhost`, and both written to files.
pub(super) struct Certificates {
    pub ca: TestCa,
    pub server: Issued,
    pub dir: tempfile::TempDir,
}

impl Certificates {
    pub(super) fn new() -> Self {
        // The test's own TLS clients take the process's provider.
        sluice::delivery::install_tls_provider();
        let ca = TestCa::new("sluice broker test CA");
        let server = ca.server(&["localhost"], Validity::Current);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), &ca.certificate).unwrap();
        std::fs::write(dir.path().join("server.pem"), &server.certificate).unwrap();
        std::fs::write(dir.path().join("server.key"), &server.key).unwrap();
        Certificates { ca, server, dir }
    }

    pub(super) fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
}

/// A server process, killed when the test ends.
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
    let up = eventually(WAIT, || async {
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

/// A `redis-server` with a plain port (for the test to read) and a TLS one (for sluice), asking
/// for a client certificate of the test CA when `clients` says so; `None` without a binary.
pub(super) async fn redis_tls(certs: &Certificates, clients: bool) -> Option<(Running, u16, u16)> {
    let binary = binary("redis-server")?;
    let (plain, port) = (support::free_port(), support::free_port());
    let auth_clients = if clients { "yes" } else { "no" };
    let args = [
        "--bind",
        "127.0.0.1",
        "--port",
        &plain.to_string(),
        "--tls-port",
        &port.to_string(),
        "--tls-cert-file",
        &certs.path("server.pem"),
        "--tls-key-file",
        &certs.path("server.key"),
        "--tls-ca-cert-file",
        &certs.path("ca.pem"),
        "--tls-auth-clients",
        auth_clients,
        "--save",
        "",
        "--appendonly",
        "no",
    ]
    .map(String::from);
    let log = certs.dir.path().join("redis.log");
    Some((start(&binary, &args, &log, port).await, plain, port))
}

/// A TLS listener on loopback presenting `server`, each connection's bytes carried to the
/// shared RabbitMQ at 127.0.0.1:5672; it stops accepting when dropped.
pub(super) struct Terminator {
    pub port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Terminator {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(super) async fn terminator(server: &Issued) -> Terminator {
    let mut config = Arc::unwrap_or_clone(server_config(server, &[]));
    config.alpn_protocols.clear();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A client that refuses the certificate ends here, before any AMQP.
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                if let Ok(mut rabbit) = TcpStream::connect("127.0.0.1:5672").await {
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut rabbit).await;
                }
            });
        }
    });
    Terminator { port, task }
}
