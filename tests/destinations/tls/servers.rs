//! The TLS listeners of the broker tests, on loopback ports of their own: the test CA's files,
//! a `nats-server` or `redis-server` child process killed when the test ends, and a TLS
//! terminator in front of the shared RabbitMQ (which listens in plain only).

use std::sync::Arc;

use sluice_testkit::tls::{Issued, TestCa, Validity, server_config};
use tokio::net::{TcpListener, TcpStream};

pub(super) use crate::servers::{Running, binary, start};
use crate::support;

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
