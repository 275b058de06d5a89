//! TLS to brokers (`amqps://`, NATS `tls://`, `rediss://`): the trust an HTTP endpoint has (the
//! system's roots, the operator's extra CAs, the endpoint's own CA bundle and client
//! certificate), the certificate verified against the host name of the URL while the socket goes
//! to the address the egress guard checked, and a failed handshake named as HTTP names it
//! (`tls_certificate_unknown`, `tls_certificate_name`, …).

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;

use crate::delivery::tls::{self, TlsProfile};
use crate::delivery::{ErrorKind, Failure};

/// The TLS of one broker connection: whom it trusts and the name its certificate must carry.
pub(super) struct Trust<'a> {
    /// The roots every endpoint trusts (the system's and the operator's).
    pub roots: &'a Arc<RootCertStore>,
    /// The endpoint's own TLS setting, if it has one.
    pub profile: Option<&'a TlsProfile>,
    /// The URL's host: a name, or an IP literal (its certificate must then name that address).
    pub host: &'a str,
}

/// What tells two TLS settings apart in a connection pool's key: a connection verified as one
/// name, or trusting one CA bundle, is never handed to an endpoint with another.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct TrustKey {
    host: String,
    profile: Option<[u8; 32]>,
}

impl<'a> Trust<'a> {
    /// The setting of a broker URL: `None` for a scheme without TLS.
    pub(super) fn of(
        url: &'a url::Url,
        roots: &'a Arc<RootCertStore>,
        profile: Option<&'a TlsProfile>,
    ) -> Option<Self> {
        if !crate::model::broker_scheme_is_tls(url.scheme()) {
            return None;
        }
        let host = url.host_str()?;
        Some(Self {
            roots,
            profile,
            // An IPv6 literal is bracketed in a URL, never in a certificate.
            host: host.trim_start_matches('[').trim_end_matches(']'),
        })
    }

    /// Its part of a pool key.
    pub(super) fn key(&self) -> TrustKey {
        TrustKey {
            host: self.host.to_owned(),
            profile: self.profile.map(TlsProfile::fingerprint),
        }
    }

    /// The name the certificate is verified against (and sent as SNI, when it is a name).
    pub(super) fn server_name(&self) -> Result<ServerName<'static>, Failure> {
        ServerName::try_from(self.host.to_owned()).map_err(|e| Failure {
            kind: ErrorKind::Other,
            message: format!("the broker's host cannot be a TLS server name: {e}"),
        })
    }

    /// The client configuration: the certificate is verified against the name the handshake
    /// is given.
    pub(super) fn config(&self) -> Result<Arc<rustls::ClientConfig>, Failure> {
        let mut config = tls::client_config(self.roots, self.profile).map_err(unusable)?;
        // Brokers speak their own protocol over TLS, not HTTP.
        config.alpn_protocols.clear();
        Ok(Arc::new(config))
    }

    /// The client configuration for a client that starts the handshake with the address it
    /// connected to (NATS): the certificate is verified against the URL's host all the same.
    pub(super) fn config_for_address(&self) -> Result<rustls::ClientConfig, Failure> {
        let mut config = Arc::unwrap_or_clone(self.config()?);
        let verifier = tls::verifier(self.roots, self.profile).map_err(unusable)?;
        config.dangerous().set_certificate_verifier(Arc::new(Named {
            inner: verifier,
            name: self.server_name()?,
        }));
        Ok(config)
    }

    /// A TLS stream to `address`, its certificate verified against the URL's host.
    pub(super) async fn connect(
        &self,
        broker: &str,
        address: SocketAddr,
    ) -> Result<tokio_rustls::client::TlsStream<TcpStream>, Failure> {
        let config = self.config()?;
        let name = self.server_name()?;
        let tcp = TcpStream::connect(address).await.map_err(|e| Failure {
            kind: match e.kind() {
                std::io::ErrorKind::ConnectionRefused => ErrorKind::ConnectionRefused,
                std::io::ErrorKind::TimedOut => ErrorKind::ConnectTimeout,
                _ => ErrorKind::ConnectionReset,
            },
            message: format!("{broker}: {e}"),
        })?;
        let _ = tcp.set_nodelay(true);
        tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(|e| {
                failure(broker, &e).unwrap_or_else(|| Failure {
                    kind: ErrorKind::TlsHandshake,
                    message: format!("{broker}: TLS: {e}"),
                })
            })
    }
}

/// A TLS failure somewhere in `err`, named as HTTP names it; `None` when TLS did not cause it.
pub(super) fn failure(broker: &str, err: &(dyn std::error::Error + 'static)) -> Option<Failure> {
    let found = tls::find_tls_error(err)?;
    Some(Failure {
        kind: tls::classify(found),
        message: format!("{broker}: TLS: {found}"),
    })
}

/// A setting the client cannot be built from (a stored bundle that no longer reads).
fn unusable(message: String) -> Failure {
    Failure {
        kind: ErrorKind::Other,
        message: format!("the endpoint's TLS setting cannot be used: {message}"),
    }
}

/// A verifier that checks the certificate against one name, whatever name the client started
/// the handshake with (the address it connected to).
#[derive(Debug)]
struct Named {
    inner: Arc<WebPkiServerVerifier>,
    name: ServerName<'static>,
}

impl ServerCertVerifier for Named {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, &self.name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trust<'a>(url: &'a url::Url, roots: &'a Arc<RootCertStore>) -> Option<Trust<'a>> {
        Trust::of(url, roots, None)
    }

    #[test]
    fn only_the_tls_schemes_connect_with_tls_verified_as_the_urls_host() {
        let roots = Arc::new(RootCertStore::empty());
        for (url, host) in [
            ("amqps://broker.example:5671/%2f", Some("broker.example")),
            ("tls://nats.example:4222", Some("nats.example")),
            ("rediss://[::1]:6380/0", Some("::1")),
            ("amqp://broker.example/%2f", None),
            ("nats://nats.example:4222", None),
            ("redis://127.0.0.1/0", None),
        ] {
            let url = url::Url::parse(url).unwrap();
            assert_eq!(trust(&url, &roots).map(|t| t.host), host, "{url}");
        }
        let url = url::Url::parse("rediss://[::1]:6380/0").unwrap();
        let name = trust(&url, &roots).unwrap().server_name().unwrap();
        assert!(matches!(name, ServerName::IpAddress(_)), "{name:?}");
    }

    #[test]
    fn two_hosts_or_two_bundles_never_share_a_key() {
        let roots = Arc::new(RootCertStore::empty());
        let a = url::Url::parse("amqps://a.example/%2f").unwrap();
        let b = url::Url::parse("amqps://b.example/%2f").unwrap();
        let one = TlsProfile::new(Some("one".into()), None);
        let two = TlsProfile::new(Some("two".into()), None);
        let key = |url, profile| Trust::of(url, &roots, profile).unwrap().key();
        assert!(key(&a, None) == key(&a, None));
        assert!(key(&a, None) != key(&b, None));
        assert!(key(&a, Some(&one)) != key(&a, None));
        assert!(key(&a, Some(&one)) != key(&a, Some(&two)));
    }
}
