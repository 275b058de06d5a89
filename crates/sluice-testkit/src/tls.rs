//! Certificates made at test time (nothing is committed): a test CA that issues server
//! certificates (valid, expired, for another name) and client certificates, and the rustls
//! server configuration of a TLS receiver, optionally requiring a client certificate.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use time::{Duration, OffsetDateTime};

/// A certificate and its key, PEM.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The certificate, PEM.
    pub certificate: String,
    /// Its private key (PKCS#8), PEM.
    pub key: String,
}

impl Issued {
    /// The certificate as DER.
    pub fn der(&self) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(self.certificate.as_bytes()).expect("issued certificate")
    }

    /// The key as DER.
    pub fn key_der(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::from_pem_slice(self.key.as_bytes()).expect("issued key")
    }
}

/// How long a server certificate is valid, around now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    /// From yesterday to next year.
    Current,
    /// It expired yesterday.
    Expired,
}

/// A certificate authority made for one test.
pub struct TestCa {
    /// The CA certificate, PEM: what a client must trust.
    pub certificate: String,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    /// A fresh CA named `name`.
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("CA key");
        let certificate = params.self_signed(&key).expect("CA certificate").pem();
        TestCa {
            certificate,
            issuer: Issuer::new(params, key),
        }
    }

    fn issue(&self, names: &[&str], validity: Validity, usage: ExtendedKeyUsagePurpose) -> Issued {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).expect("names");
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        let now = OffsetDateTime::now_utc();
        (params.not_before, params.not_after) = match validity {
            Validity::Current => (now - Duration::days(1), now + Duration::days(365)),
            Validity::Expired => (now - Duration::days(30), now - Duration::days(1)),
        };
        params.extended_key_usages = vec![usage];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        Issued {
            certificate: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// A server certificate for `names` (host names or IP addresses).
    pub fn server(&self, names: &[&str], validity: Validity) -> Issued {
        self.issue(names, validity, ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate named `name`.
    pub fn client(&self, name: &str) -> Issued {
        self.issue(
            &[name],
            Validity::Current,
            ExtendedKeyUsagePurpose::ClientAuth,
        )
    }
}

/// The server side of a TLS receiver: its certificate (with the CA's appended, as servers send
/// their chain) and, when set, the CAs whose client certificates it requires.
pub fn server_config(server: &Issued, require_client_from: &[&str]) -> Arc<rustls::ServerConfig> {
    sluice::delivery::install_tls_provider();
    let provider = sluice::delivery::tls::provider();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("protocol versions");
    let builder = if require_client_from.is_empty() {
        builder.with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        for pem in require_client_from {
            for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                roots.add(cert.expect("client CA")).expect("client CA");
            }
        }
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .expect("client verifier");
        builder.with_client_cert_verifier(verifier)
    };
    let mut config = builder
        .with_single_cert(vec![server.der()], server.key_der())
        .expect("server certificate");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}
