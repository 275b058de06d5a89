//! TLS to endpoints: whom sluice trusts (the system's roots, the operator's extra CAs, an
//! endpoint's own bundle), the client certificate an endpoint asks for (mTLS), and what a failed
//! handshake means, read from the rustls error itself rather than from its text.

use std::sync::{Arc, OnceLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{AlertDescription, CertificateError, RootCertStore};

use super::ErrorKind;
use super::timing::TimedSessionStore;

/// Largest PEM bundle (CA certificates, or a client certificate chain or key) accepted, bytes.
pub const MAX_PEM_BYTES: usize = 256 * 1024;

/// A client certificate chain and its private key, both PEM: what sluice presents to an
/// endpoint that asks for one.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClientIdentity {
    /// The certificate, then any intermediates, PEM.
    pub certificate: String,
    /// The private key (PKCS#8, PKCS#1 or SEC1), PEM: a secret, never shown.
    pub key: String,
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("certificate", &self.certificate.len())
            .field("key", &"<hidden>")
            .finish()
    }
}

/// One distinct TLS setting of an attempt: the extra CAs trusted and the client identity
/// presented. Attempts with equal settings share one HTTP client and its keep-alive pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsProfile {
    /// The endpoint's own CA certificates (PEM), trusted beside the process-wide roots.
    pub ca_bundle: Option<String>,
    /// The client certificate presented when the endpoint asks for one.
    pub identity: Option<ClientIdentity>,
    /// SHA-256 of the two: the key of its HTTP client, computed once here rather than on every
    /// attempt (and a cache keyed by it never holds the PEM of a key).
    fingerprint: [u8; 32],
}

impl TlsProfile {
    /// The setting of `ca_bundle` and `identity`.
    pub fn new(ca_bundle: Option<String>, identity: Option<ClientIdentity>) -> Self {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        for part in [
            ca_bundle.as_deref(),
            identity.as_ref().map(|i| i.certificate.as_str()),
            identity.as_ref().map(|i| i.key.as_str()),
        ] {
            // A length prefix, and a distinct one for "none": no two settings hash alike.
            match part {
                None => h.update(u64::MAX.to_be_bytes()),
                Some(text) => {
                    h.update((text.len() as u64).to_be_bytes());
                    h.update(text.as_bytes());
                }
            }
        }
        Self {
            ca_bundle,
            identity,
            fingerprint: h.finalize().into(),
        }
    }

    /// The key of its HTTP client.
    pub fn fingerprint(&self) -> [u8; 32] {
        self.fingerprint
    }
}

/// Every certificate of a PEM bundle; an error names what is wrong, for a 422 or a start-up
/// problem. Anything but `CERTIFICATE` sections (a key pasted by mistake) is refused.
pub fn parse_certificates(pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    if pem.len() > MAX_PEM_BYTES {
        return Err(format!("must be at most {MAX_PEM_BYTES} bytes of PEM"));
    }
    let mut certs = Vec::new();
    for item in rustls::pki_types::pem::PemObject::pem_slice_iter(pem.as_bytes()) {
        let cert: CertificateDer<'static> =
            item.map_err(|e| format!("is not a PEM bundle of certificates: {e}"))?;
        certs.push(cert);
    }
    let sections = pem.matches("-----BEGIN ").count();
    if certs.is_empty() {
        return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into());
    }
    if sections != certs.len() {
        return Err(
            "holds PEM sections that are not certificates (only CERTIFICATE is accepted)".into(),
        );
    }
    Ok(certs)
}

/// The CA certificates of a PEM bundle, each checked to be usable as a trust anchor.
pub fn parse_ca_bundle(pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = parse_certificates(pem)?;
    for (i, cert) in certs.iter().enumerate() {
        let mut store = RootCertStore::empty();
        store
            .add(cert.clone())
            .map_err(|e| format!("certificate {} cannot be a trusted CA: {e}", i + 1))?;
    }
    Ok(certs)
}

/// A client identity ready for rustls: its chain and key, checked to belong together.
pub fn parse_identity(
    identity: &ClientIdentity,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), IdentityError> {
    let chain = parse_certificates(&identity.certificate).map_err(IdentityError::Certificate)?;
    if identity.key.len() > MAX_PEM_BYTES {
        return Err(IdentityError::Key(format!(
            "must be at most {MAX_PEM_BYTES} bytes of PEM"
        )));
    }
    let key = PrivateKeyDer::from_pem_slice(identity.key.as_bytes()).map_err(|e| {
        IdentityError::Key(format!(
            "is not a PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"
        ))
    })?;
    let signing = provider()
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|e| IdentityError::Key(format!("cannot be used to sign: {e}")))?;
    let certified = rustls::sign::CertifiedKey::new(chain.clone(), signing);
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            return Err(IdentityError::Key(
                "does not belong to the certificate (their public keys differ)".into(),
            ));
        }
        Err(e) => {
            return Err(IdentityError::Certificate(format!(
                "cannot be read as an X.509 certificate: {e}"
            )));
        }
    }
    Ok((chain, key))
}

/// What is wrong with a client identity: the certificate or the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// The certificate chain.
    #[error("the client certificate {0}")]
    Certificate(String),
    /// The private key.
    #[error("the client key {0}")]
    Key(String),
}

/// The crypto provider every TLS client uses (ring, installed process-wide).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    static PROVIDER: OnceLock<Arc<rustls::crypto::CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

/// The system's root certificates, read once per process (a unreadable one is skipped, as
/// every TLS client on the host does).
fn system_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let mut roots = RootCertStore::empty();
            let loaded = rustls_native_certs::load_native_certs();
            let (_, ignored) = roots.add_parsable_certificates(loaded.certs);
            if ignored > 0 {
                tracing::warn!(ignored, "system CA certificates ignored: they do not parse");
            }
            Arc::new(roots)
        })
        .clone()
}

/// The roots every endpoint trusts: the system's and the operator's extra CAs.
pub fn base_roots(extra: &[CertificateDer<'static>]) -> Arc<RootCertStore> {
    let system = system_roots();
    if extra.is_empty() {
        return system;
    }
    let mut roots = (*system).clone();
    for cert in extra {
        // Checked when the settings were read; a refusal here cannot happen.
        let _ = roots.add(cert.clone());
    }
    Arc::new(roots)
}

/// The rustls configuration of one [`TlsProfile`] on top of `base` roots.
pub fn client_config(
    base: &Arc<RootCertStore>,
    profile: Option<&TlsProfile>,
) -> Result<rustls::ClientConfig, String> {
    let roots = match profile.and_then(|p| p.ca_bundle.as_deref()) {
        None => base.clone(),
        Some(pem) => {
            let mut roots = (**base).clone();
            for cert in parse_ca_bundle(pem).map_err(|e| format!("the CA bundle {e}"))? {
                let _ = roots.add(cert);
            }
            Arc::new(roots)
        }
    };
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider())
        .build()
        .map_err(|e| format!("no trusted CA certificates: {e}"))?;
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_webpki_verifier(verifier);
    let mut config = match profile.and_then(|p| p.identity.as_ref()) {
        None => builder.with_no_client_auth(),
        Some(identity) => {
            let (chain, key) = parse_identity(identity).map_err(|e| e.to_string())?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("the client certificate cannot be used: {e}"))?
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.resumption = rustls::client::Resumption::store(Arc::new(TimedSessionStore::new()));
    Ok(config)
}

/// The rustls error behind a client error, if a TLS failure caused it. `io::Error::source`
/// skips the error it wraps (and the TLS connector wraps one I/O error in another), so an I/O
/// error is looked into rather than past.
pub fn find_tls_error<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut current = Some(err);
    while let Some(e) = current {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        current = match e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

/// What a TLS failure tells the customer: their certificate is not trusted, has expired, names
/// another host, they refused our client certificate, or the handshake failed otherwise.
pub fn classify(err: &rustls::Error) -> ErrorKind {
    use CertificateError as C;
    match err {
        rustls::Error::InvalidCertificate(cert) => match cert {
            C::UnknownIssuer => ErrorKind::TlsCertificateUnknown,
            C::Expired
            | C::ExpiredContext { .. }
            | C::NotValidYet
            | C::NotValidYetContext { .. } => ErrorKind::TlsCertificateExpired,
            C::NotValidForName | C::NotValidForNameContext { .. } => ErrorKind::TlsCertificateName,
            _ => ErrorKind::TlsHandshake,
        },
        rustls::Error::AlertReceived(
            AlertDescription::BadCertificate
            | AlertDescription::CertificateRequired
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateRevoked
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::AccessDenied,
        ) => ErrorKind::TlsClientCertificate,
        _ => ErrorKind::TlsHandshake,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_errors_name_their_cause() {
        use rustls::Error as E;
        let cases = [
            (
                E::InvalidCertificate(CertificateError::UnknownIssuer),
                ErrorKind::TlsCertificateUnknown,
            ),
            (
                E::InvalidCertificate(CertificateError::Expired),
                ErrorKind::TlsCertificateExpired,
            ),
            (
                E::InvalidCertificate(CertificateError::NotValidYet),
                ErrorKind::TlsCertificateExpired,
            ),
            (
                E::InvalidCertificate(CertificateError::NotValidForName),
                ErrorKind::TlsCertificateName,
            ),
            (
                E::InvalidCertificate(CertificateError::BadSignature),
                ErrorKind::TlsHandshake,
            ),
            (
                E::AlertReceived(AlertDescription::CertificateRequired),
                ErrorKind::TlsClientCertificate,
            ),
            (
                E::AlertReceived(AlertDescription::HandshakeFailure),
                ErrorKind::TlsHandshake,
            ),
        ];
        for (err, kind) in cases {
            assert_eq!(classify(&err), kind, "{err}");
        }
    }

    #[test]
    fn a_tls_error_is_found_inside_an_io_error() {
        let tls = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
        // As the TLS connector hands it on: wrapped once more.
        let io = std::io::Error::other(io);
        let found = find_tls_error(&io).expect("found");
        assert_eq!(classify(found), ErrorKind::TlsCertificateUnknown);
    }

    #[test]
    fn bundles_refuse_what_is_not_a_certificate() {
        assert!(parse_certificates("").is_err());
        assert!(parse_certificates("hello").is_err());
        let key =
            "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIEz7\n-----END PRIVATE KEY-----\n";
        assert!(parse_certificates(key).is_err());
    }
}
