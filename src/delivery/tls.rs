//! TLS to endpoints: whom sluice trusts (the system's roots, the operator's extra CAs, an
//! endpoint's own bundle), the client certificate an endpoint asks for (mTLS), and what a failed
//! handshake means, read from the rustls error itself rather than from its text.

use std::sync::{Arc, OnceLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{AlertDescription, CertificateError, RootCertStore};

use super::ErrorKind;
use super::timing::TimedSessionStore;
use crate::model::ClientIdentity;
use crate::pem::{
    self, MAX_PEM_BYTES, certificates_pem, key_pem, parse_ca_bundle, parse_certificates,
};

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

/// What a part of a [`TlsProfile`] is built from, for its fingerprint: read as
/// [`client_config`] reads it.
enum Material<'a> {
    /// The DER items its PEM holds.
    Der(Vec<Vec<u8>>),
    /// Text that holds none (its client fails to build, whatever the text).
    Text(&'a str),
}

impl Material<'_> {
    fn certificates(pem: &str) -> Material<'_> {
        match stored_certificates(pem) {
            Ok(certs) => Material::Der(certs.into_iter().map(|c| c.to_vec()).collect()),
            Err(_) => Material::Text(pem),
        }
    }

    fn key(pem: &str) -> Material<'_> {
        match PrivateKeyDer::from_pem_slice(pem.as_bytes()) {
            Ok(key) => Material::Der(vec![key.secret_der().to_vec()]),
            Err(_) => Material::Text(pem),
        }
    }
}

impl TlsProfile {
    /// The setting of `ca_bundle` and `identity`.
    pub fn new(ca_bundle: Option<String>, identity: Option<ClientIdentity>) -> Self {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        // The DER the client is built from, not the PEM text: the same certificates and key
        // with other line breaks or comments around them share one client.
        for part in [
            ca_bundle.as_deref().map(Material::certificates),
            identity
                .as_ref()
                .map(|i| Material::certificates(&i.certificate)),
            identity.as_ref().map(|i| Material::key(&i.key)),
        ] {
            // Length prefixes, a tag per kind and a distinct marker for "none": no two
            // settings hash alike.
            match part {
                None => h.update(u64::MAX.to_be_bytes()),
                Some(Material::Der(items)) => {
                    h.update([0]);
                    h.update((items.len() as u64).to_be_bytes());
                    for item in items {
                        h.update((item.len() as u64).to_be_bytes());
                        h.update(&item);
                    }
                }
                Some(Material::Text(text)) => {
                    h.update([1]);
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

/// A CA bundle as it is kept: its certificates re-encoded, each checked to be usable as a
/// trust anchor; nothing around them is kept.
pub fn canonical_ca_bundle(pem: &str) -> Result<String, String> {
    parse_ca_bundle(pem).map(|certs| certificates_pem(&certs))
}

/// A client identity as it is kept: its chain and key re-encoded, checked to belong together.
pub fn canonical_identity(identity: &ClientIdentity) -> Result<ClientIdentity, IdentityError> {
    let (chain, key) = parse_identity(identity)?;
    Ok(ClientIdentity {
        certificate: certificates_pem(&chain),
        key: key_pem(&key),
    })
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
    pem::check_text(&identity.key).map_err(IdentityError::Key)?;
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

/// The roots one [`TlsProfile`] trusts: `base`, and the endpoint's own CA bundle.
pub fn trusted_roots(
    base: &Arc<RootCertStore>,
    profile: Option<&TlsProfile>,
) -> Result<Arc<RootCertStore>, String> {
    let Some(pem) = profile.and_then(|p| p.ca_bundle.as_deref()) else {
        return Ok(base.clone());
    };
    let mut roots = (**base).clone();
    for (i, cert) in stored_certificates(pem)?.into_iter().enumerate() {
        roots.add(cert).map_err(|e| {
            format!(
                "the CA bundle's certificate {} cannot be a trusted CA: {e}",
                i + 1
            )
        })?;
    }
    Ok(Arc::new(roots))
}

/// The certificate verifier of one [`TlsProfile`] on top of `base` roots.
pub fn verifier(
    base: &Arc<RootCertStore>,
    profile: Option<&TlsProfile>,
) -> Result<Arc<rustls::client::WebPkiServerVerifier>, String> {
    let roots = trusted_roots(base, profile)?;
    rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider())
        .build()
        .map_err(|e| format!("no trusted CA certificates: {e}"))
}

/// The rustls configuration of one [`TlsProfile`] on top of `base` roots.
pub fn client_config(
    base: &Arc<RootCertStore>,
    profile: Option<&TlsProfile>,
) -> Result<rustls::ClientConfig, String> {
    let verifier = verifier(base, profile)?;
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_webpki_verifier(verifier);
    let mut config = match profile.and_then(|p| p.identity.as_ref()) {
        None => builder.with_no_client_auth(),
        Some(identity) => {
            let chain = stored_certificates(&identity.certificate)?;
            let key = PrivateKeyDer::from_pem_slice(identity.key.as_bytes())
                .map_err(|e| format!("the client key is not a PEM private key: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("the client certificate cannot be used: {e}"))?
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.resumption = rustls::client::Resumption::store(Arc::new(TimedSessionStore::new()));
    Ok(config)
}

/// The certificates of a stored PEM field, read as they were when the API checked them: text
/// around them is passed over, so a row written before control characters were refused still
/// delivers (what is written now holds the certificates alone).
fn stored_certificates(pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = pem::stored_certificates(pem);
    match certs.is_empty() {
        true => Err("no PEM certificate in a stored TLS setting".into()),
        false => Ok(certs),
    }
}

/// The rustls error behind a client error, if a TLS failure caused it. `io::Error::source`
/// skips the error it wraps (and the TLS connector wraps one I/O error in another), so an I/O
/// error is looked into rather than past; so is a shared one (`Arc<dyn Error>`, as the Redis
/// client hands on its socket's error), whose `source` skips it too.
pub fn find_tls_error<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    type Shared = Arc<dyn std::error::Error + Send + Sync>;
    let mut current = Some(err);
    while let Some(e) = current {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        let inner = match e.downcast_ref::<Shared>() {
            Some(shared) => Some(&**shared as &(dyn std::error::Error + 'static)),
            None => e
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
        };
        current = inner.or_else(|| e.source());
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

    /// An error that holds its cause as a shared one, as the Redis client's error does.
    #[derive(Debug)]
    struct Holder(Arc<dyn std::error::Error + Send + Sync>);

    impl std::fmt::Display for Holder {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("held")
        }
    }

    impl std::error::Error for Holder {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_tls_error_is_found_inside_a_shared_io_error() {
        let tls = rustls::Error::AlertReceived(AlertDescription::CertificateRequired);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
        let held = Holder(Arc::new(io));
        let found = find_tls_error(&held).expect("found");
        assert_eq!(classify(found), ErrorKind::TlsClientCertificate);
    }

    /// Two stand-in certificates: the PEM layer never reads inside the DER.
    const ONE: &str = "-----BEGIN CERTIFICATE-----\nMAMCAQE=\n-----END CERTIFICATE-----\n";
    const TWO: &str = "-----BEGIN CERTIFICATE-----\nMAMCAQI=\n-----END CERTIFICATE-----\n";
    const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMAMCAQM=\n-----END PRIVATE KEY-----\n";

    #[test]
    fn a_key_with_control_characters_is_refused() {
        for junk in ["\0", "\u{1b}[2J", "\u{7f}", "\u{85}"] {
            let identity = ClientIdentity {
                certificate: ONE.into(),
                key: format!("{junk}{KEY}"),
            };
            assert!(matches!(
                parse_identity(&identity),
                Err(IdentityError::Key(_))
            ));
        }
    }

    #[test]
    fn a_profile_is_known_by_its_certificates_not_their_text() {
        let identity = |certificate: &str, key: &str| ClientIdentity {
            certificate: certificate.into(),
            key: key.into(),
        };
        let plain = TlsProfile::new(Some(format!("{ONE}{TWO}")), Some(identity(ONE, KEY)));
        let dressed = TlsProfile::new(
            Some(format!(
                "\u{0}# ours\n{}\n\n{TWO}\n",
                ONE.replace('\n', "\r\n")
            )),
            Some(identity(
                &format!("Bag Attributes\n{ONE}"),
                &format!("{KEY}\n"),
            )),
        );
        assert_eq!(plain.fingerprint(), dressed.fingerprint());
        let others = [
            TlsProfile::new(Some(format!("{TWO}{ONE}")), Some(identity(ONE, KEY))),
            TlsProfile::new(Some(ONE.into()), Some(identity(ONE, KEY))),
            TlsProfile::new(Some(format!("{ONE}{TWO}")), Some(identity(TWO, KEY))),
            TlsProfile::new(Some(format!("{ONE}{TWO}")), None),
            TlsProfile::new(None, Some(identity(ONE, KEY))),
            TlsProfile::new(Some("not PEM".into()), Some(identity(ONE, KEY))),
        ];
        for (i, other) in others.iter().enumerate() {
            assert_ne!(plain.fingerprint(), other.fingerprint(), "{i}");
        }
    }
}
