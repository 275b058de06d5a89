//! Certificates and keys as text: PEM read strictly (only `CERTIFICATE` sections, no control
//! characters), written back canonically (the DER alone, base64 in lines of 64), and known by
//! the SHA-256 of their DER. What sluice keeps and shows of a PEM field is what this module
//! writes, never the text it was given.

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Largest PEM bundle (CA certificates, or a client certificate chain or key) accepted, bytes.
pub const MAX_PEM_BYTES: usize = 256 * 1024;

/// Every certificate of a PEM bundle; an error names what is wrong, for a 422 or a start-up
/// problem. Anything but `CERTIFICATE` sections (a key pasted by mistake) and control
/// characters are refused; other text between the sections (comments) is left behind.
pub fn parse_certificates(pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    if pem.len() > MAX_PEM_BYTES {
        return Err(format!("must be at most {MAX_PEM_BYTES} bytes of PEM"));
    }
    check_text(pem)?;
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

/// Refuse control characters (NUL, ESC, …): line breaks and tabs are the only ones PEM text
/// holds, and nothing else has a reason to sit around its sections.
pub(crate) fn check_text(pem: &str) -> Result<(), String> {
    let found = pem
        .char_indices()
        .find(|(_, c)| c.is_control() && !matches!(c, '\n' | '\r' | '\t'));
    match found {
        None => Ok(()),
        Some((at, c)) => Err(format!(
            "holds a control character (U+{:04X} at byte {at}): only text and line breaks may \
             surround its PEM sections",
            u32::from(c)
        )),
    }
}

/// One PEM section of `der` labelled `label`: base64 in lines of 64 characters.
fn push_section(out: &mut String, label: &str, der: &[u8]) {
    use base64::Engine;
    let text = base64::engine::general_purpose::STANDARD.encode(der);
    out.push_str("-----BEGIN ");
    out.push_str(label);
    out.push_str("-----\n");
    let mut rest = text.as_str();
    while !rest.is_empty() {
        // Base64 is ASCII: every index is a character boundary.
        let (line, tail) = rest.split_at(rest.len().min(64));
        out.push_str(line);
        out.push('\n');
        rest = tail;
    }
    out.push_str("-----END ");
    out.push_str(label);
    out.push_str("-----\n");
}

/// `certs` as PEM and nothing else: what is stored and shown of a CA bundle or a certificate
/// chain, whatever text surrounded the certificates when they were given.
pub fn certificates_pem(certs: &[CertificateDer<'_>]) -> String {
    let mut out = String::with_capacity(certs.iter().map(|c| c.len() * 4 / 3 + 70).sum());
    for cert in certs {
        push_section(&mut out, "CERTIFICATE", cert);
    }
    out
}

/// A private key as PEM and nothing else, labelled by its kind.
pub fn key_pem(key: &PrivateKeyDer<'_>) -> String {
    let label = match key {
        PrivateKeyDer::Pkcs1(_) => "RSA PRIVATE KEY",
        PrivateKeyDer::Sec1(_) => "EC PRIVATE KEY",
        _ => "PRIVATE KEY",
    };
    let mut out = String::new();
    push_section(&mut out, label, key.secret_der());
    out
}

/// SHA-256 over the DER of `certs` in order, lower-case hex: for one certificate, its usual
/// SHA-256 fingerprint (`openssl x509 -fingerprint -sha256` without the colons).
pub fn certificates_sha256(certs: &[CertificateDer<'_>]) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for cert in certs {
        h.update(cert.as_ref());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The certificates stored `pem` holds, whatever else is around them (text stored before the
/// API re-encoded what it keeps): what is shown of it, re-encoded by [`certificates_pem`].
pub fn stored_certificates(pem: &str) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .filter_map(Result::ok)
        .collect()
}

/// Stored `pem` as it is shown: its certificates, re-encoded.
pub fn shown_pem(pem: &str) -> String {
    certificates_pem(&stored_certificates(pem))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundles_refuse_what_is_not_a_certificate() {
        assert!(parse_certificates("").is_err());
        assert!(parse_certificates("hello").is_err());
        let key =
            "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIEz7\n-----END PRIVATE KEY-----\n";
        assert!(parse_certificates(key).is_err());
    }

    /// Two stand-in certificates: the PEM layer never reads inside the DER.
    const ONE: &str = "-----BEGIN CERTIFICATE-----\nMAMCAQE=\n-----END CERTIFICATE-----\n";
    const TWO: &str = "-----BEGIN CERTIFICATE-----\nMAMCAQI=\n-----END CERTIFICATE-----\n";
    const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMAMCAQM=\n-----END PRIVATE KEY-----\n";

    #[test]
    fn bundles_refuse_control_characters_anywhere() {
        for junk in ["\0", "\u{1b}[2J", "\u{7f}", "\u{85}"] {
            let text = format!("{ONE}{junk}\n{TWO}");
            let err = parse_certificates(&text).expect_err(junk);
            assert!(err.contains("control character"), "{err}");
        }
        // Tabs and either line break are text.
        let text = format!("# a comment\twith a tab\r\n{}", TWO.replace('\n', "\r\n"));
        assert_eq!(parse_certificates(&text).unwrap().len(), 1);
    }

    #[test]
    fn certificates_are_kept_re_encoded_and_alone() {
        let dressed = format!(
            "# CA one\nsubject=CN = one\n{}\nMAMCAQM=\nnot a section\n\n{TWO}trailing\n",
            ONE.replace('\n', "\r\n")
        );
        let certs = parse_certificates(&dressed).unwrap();
        assert_eq!(certificates_pem(&certs), format!("{ONE}{TWO}"));
        assert_eq!(stored_certificates(&dressed), certs);
        // One certificate's value is its usual fingerprint: the SHA-256 of its DER.
        assert_eq!(
            certificates_sha256(&certs[..1]),
            "1b65f68a522c858715f5dd951cd0402dc16691778814bf0759822b7a257421d0"
        );
        let long = CertificateDer::from(vec![7u8; 100]);
        let pem = certificates_pem(std::slice::from_ref(&long));
        assert!(pem.lines().all(|l| l.len() <= 64), "{pem}");
        assert_eq!(parse_certificates(&pem).unwrap(), [long]);
        let key = PrivateKeyDer::from_pem_slice(format!("a comment\n{KEY}").as_bytes()).unwrap();
        assert_eq!(key_pem(&key), KEY);
    }
}
