//! Standard Webhooks signing: the `webhook-*` headers and the two signature schemes, `v1`
//! (HMAC-SHA256 with a `whsec_` secret, [`symmetric`]) and `v1a` (Ed25519 with a `whsk_` key
//! whose `whpk_` public key receivers verify with, [`asymmetric`]).
//!
//! Both sign `{webhook-id}.{webhook-timestamp}.{body}`. An endpoint's key says its scheme by
//! its prefix, so a rotation may also change scheme: during the overlap both keys sign and both
//! signatures go out, space-separated, whichever schemes they are.

pub mod asymmetric;
pub mod jwks;
pub mod symmetric;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub use asymmetric::{Ed25519Key, verify_v1a};
pub use symmetric::{Secret, sign, verify};

/// Header carrying the message id (the same on every retry, so receivers can de-duplicate).
pub const WEBHOOK_ID: &str = "webhook-id";
/// Header carrying the signing time in whole seconds since the Unix epoch.
pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
/// Header carrying one or more space-separated `v1,<base64>` or `v1a,<base64>` signatures.
pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";

/// Why a textual key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// Nothing left after the prefix.
    #[error("webhook secret is empty")]
    Empty,
    /// The part after the prefix is not standard base64.
    #[error("webhook secret is not valid base64: {0}")]
    Base64(#[from] base64::DecodeError),
    /// An Ed25519 secret key that is neither a 32-byte seed nor 64 bytes of seed and public key.
    #[error("an Ed25519 secret key is 32 or 64 bytes, not {0}")]
    Length(usize),
    /// A 64-byte Ed25519 secret key whose public half is not the seed's.
    #[error("the Ed25519 secret key's public half does not match its seed")]
    Mismatch,
}

/// A signature scheme, by its Standard Webhooks identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub enum Scheme {
    /// HMAC-SHA256 with a shared `whsec_` secret.
    #[default]
    #[serde(rename = "v1")]
    V1,
    /// Ed25519: sluice keeps the `whsk_` secret key, receivers verify with the `whpk_` key.
    #[serde(rename = "v1a")]
    V1a,
}

impl Scheme {
    /// The identifier in signatures and in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::V1 => "v1",
            Scheme::V1a => "v1a",
        }
    }
}

/// One endpoint signing key of either scheme.
#[derive(Clone, Debug)]
pub enum SigningKey {
    /// `v1`.
    V1(Secret),
    /// `v1a`.
    V1a(Ed25519Key),
}

impl SigningKey {
    /// A fresh key of `scheme`.
    pub fn generate(scheme: Scheme) -> Self {
        match scheme {
            Scheme::V1 => SigningKey::V1(Secret::generate()),
            Scheme::V1a => SigningKey::V1a(Ed25519Key::generate()),
        }
    }

    /// Parse a stored or pasted key: `whsk_…` is Ed25519; `whsec_…` (or bare base64) is HMAC.
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        if text.trim_start().starts_with(asymmetric::SECRET_PREFIX) {
            Ed25519Key::parse(text).map(SigningKey::V1a)
        } else {
            Secret::parse(text).map(SigningKey::V1)
        }
    }

    /// Its scheme.
    pub fn scheme(&self) -> Scheme {
        match self {
            SigningKey::V1(_) => Scheme::V1,
            SigningKey::V1a(_) => Scheme::V1a,
        }
    }

    /// What receivers verify with, when that is not the secret itself: the `whpk_` key.
    pub fn public_key(&self) -> Option<String> {
        match self {
            SigningKey::V1(_) => None,
            SigningKey::V1a(k) => Some(k.public_key()),
        }
    }
}

impl std::fmt::Display for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SigningKey::V1(s) => s.fmt(f),
            SigningKey::V1a(k) => k.fmt(f),
        }
    }
}

/// The scheme of a stored key's text, judged by its prefix alone (no parsing).
pub fn scheme_of(text: &str) -> Scheme {
    if text.starts_with(asymmetric::SECRET_PREFIX) {
        Scheme::V1a
    } else {
        Scheme::V1
    }
}

/// The `webhook-signature` value: one signature per key, space-separated (during a rotation the
/// current key and the previous one).
pub fn signature_header(
    keys: &[SigningKey],
    msg_id: &str,
    timestamp_s: i64,
    body: &[u8],
) -> String {
    let mut out = String::with_capacity(96 * keys.len());
    for (i, key) in keys.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        match key {
            SigningKey::V1(s) => symmetric::push_signature(&mut out, s, msg_id, timestamp_s, body),
            SigningKey::V1a(k) => {
                asymmetric::push_signature(&mut out, k, msg_id, timestamp_s, body)
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const ID: &str = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
    const TS: i64 = 1_649_367_553;
    const BODY: &[u8] = br#"{"email":"test@example.com","username":"test_user"}"#;
    const EXPECTED: &str = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=";

    #[test]
    fn rotation_header_verifies_against_either_secret() {
        let old = SigningKey::parse(SECRET).unwrap();
        let new = SigningKey::generate(Scheme::V1);
        let header = signature_header(&[new.clone(), old.clone()], ID, TS, BODY);
        assert_eq!(header.split(' ').count(), 2);
        assert!(header.ends_with(EXPECTED));
        let (SigningKey::V1(old), SigningKey::V1(new)) = (old, new) else {
            unreachable!()
        };
        assert!(verify(&old, ID, TS, BODY, &header));
        assert!(verify(&new, ID, TS, BODY, &header));
        assert!(!verify(&Secret::generate(), ID, TS, BODY, &header));
    }

    #[test]
    fn a_rotation_across_schemes_sends_one_signature_of_each() {
        let old = SigningKey::parse(SECRET).unwrap();
        let new = SigningKey::generate(Scheme::V1a);
        assert_eq!(new.scheme(), Scheme::V1a);
        assert_eq!(scheme_of(&new.to_string()), Scheme::V1a);
        assert_eq!(scheme_of(SECRET), Scheme::V1);
        let public = new.public_key().expect("v1a has a public key");
        let reparsed = SigningKey::parse(&new.to_string()).unwrap();
        assert_eq!(reparsed.public_key().as_deref(), Some(public.as_str()));
        let header = signature_header(&[new, old], ID, TS, BODY);
        let parts: Vec<&str> = header.split(' ').collect();
        assert!(
            parts[0].starts_with("v1a,") && parts[1] == EXPECTED,
            "{header}"
        );
        assert!(verify_v1a(&public, ID, TS, BODY, &header));
    }
}
