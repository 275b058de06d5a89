//! The asymmetric scheme: Ed25519 key pairs (`whsk_` secret key, `whpk_` public key) and `v1a,`
//! signatures over the same content as `v1`. Only sluice holds the secret key; receivers verify
//! with the public key, so a receiver that leaks its key cannot forge webhooks.
//!
//! The signatures come from `ring` (already the TLS provider, so no second implementation of
//! the curve is linked). Ed25519 hashes the message twice and cannot be fed in pieces, so the
//! signed content is assembled once per attempt; the key pair is expanded once per endpoint
//! configuration, not per message.

use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};

use super::SecretError;
use super::symmetric::format_i64;

/// Prefix of a serialised secret key: base64 of the 32-byte RFC 8032 seed.
pub(super) const SECRET_PREFIX: &str = "whsk_";
/// Prefix of a serialised public key: base64 of the 32-byte public key.
pub const PUBLIC_PREFIX: &str = "whpk_";

/// An Ed25519 signing key with its key pair expanded.
#[derive(Clone)]
pub struct Ed25519Key {
    seed: [u8; 32],
    pair: Arc<Ed25519KeyPair>,
}

impl Ed25519Key {
    /// A fresh key pair from 32 random bytes.
    pub fn generate() -> Self {
        Self::from_seed(rand::random())
    }

    fn from_seed(seed: [u8; 32]) -> Self {
        // Any 32 bytes are a valid seed; "unchecked" refers to the absent public key.
        let pair = Ed25519KeyPair::from_seed_unchecked(&seed).expect("a 32-byte seed is valid");
        Self {
            seed,
            pair: Arc::new(pair),
        }
    }

    /// Parse `whsk_<base64>`: the 32-byte seed, or 64 bytes of seed and public key (the form
    /// libsodium and several webhook libraries write), whose public half must match.
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        let encoded = text
            .trim()
            .strip_prefix(SECRET_PREFIX)
            .ok_or(SecretError::Empty)?;
        if encoded.is_empty() {
            return Err(SecretError::Empty);
        }
        let bytes = STANDARD.decode(encoded)?;
        let seed: [u8; 32] = bytes
            .get(..32)
            .and_then(|s| s.try_into().ok())
            .filter(|_| bytes.len() == 32 || bytes.len() == 64)
            .ok_or(SecretError::Length(bytes.len()))?;
        let key = Self::from_seed(seed);
        if bytes.len() == 64 && bytes[32..] != *key.public_bytes() {
            return Err(SecretError::Mismatch);
        }
        Ok(key)
    }

    /// The raw public key.
    pub fn public_bytes(&self) -> &[u8] {
        self.pair.public_key().as_ref()
    }

    /// The public key as receivers configure it: `whpk_<base64>`.
    pub fn public_key(&self) -> String {
        format!("{PUBLIC_PREFIX}{}", STANDARD.encode(self.public_bytes()))
    }

    /// Sign `{id}.{timestamp}.{body}`.
    pub fn sign(&self, msg_id: &str, timestamp_s: i64, body: &[u8]) -> [u8; 64] {
        let content = signed_content(msg_id, timestamp_s, body);
        let mut out = [0u8; 64];
        out.copy_from_slice(self.pair.sign(&content).as_ref());
        out
    }
}

/// The bytes both schemes sign.
fn signed_content(msg_id: &str, timestamp_s: i64, body: &[u8]) -> Vec<u8> {
    let mut digits = [0u8; 20];
    let ts = format_i64(timestamp_s, &mut digits);
    let mut content = Vec::with_capacity(msg_id.len() + ts.len() + body.len() + 2);
    content.extend_from_slice(msg_id.as_bytes());
    content.push(b'.');
    content.extend_from_slice(ts);
    content.push(b'.');
    content.extend_from_slice(body);
    content
}

/// Appends one `v1a,<base64>` signature to `out`.
pub(super) fn push_signature(
    out: &mut String,
    key: &Ed25519Key,
    msg_id: &str,
    timestamp_s: i64,
    body: &[u8],
) {
    out.push_str("v1a,");
    STANDARD.encode_string(key.sign(msg_id, timestamp_s, body), out);
}

/// True when any `v1a,` signature in `header_value` verifies under `public_key` (`whpk_…` or
/// the raw base64). The timestamp is not checked against the clock here.
pub fn verify_v1a(
    public_key: &str,
    msg_id: &str,
    timestamp_s: i64,
    body: &[u8],
    header_value: &str,
) -> bool {
    let encoded = public_key.strip_prefix(PUBLIC_PREFIX).unwrap_or(public_key);
    let Ok(public) = STANDARD.decode(encoded) else {
        return false;
    };
    let public = UnparsedPublicKey::new(&ED25519, public);
    let content = signed_content(msg_id, timestamp_s, body);
    header_value.split_ascii_whitespace().any(|candidate| {
        candidate
            .strip_prefix("v1a,")
            .and_then(|s| STANDARD.decode(s).ok())
            .is_some_and(|sig| public.verify(&content, &sig).is_ok())
    })
}

impl fmt::Display for Ed25519Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SECRET_PREFIX}{}", STANDARD.encode(self.seed))
    }
}

impl fmt::Debug for Ed25519Key {
    // Never print key material into logs; the public key is fine.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ed25519Key({})", self.public_key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8032 §7.1, test 2: the seed, its public key and the signature of the byte 0x72.
    const SEED: &str = "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb";
    const PUBLIC: &str = "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c";
    const SIGNATURE: &str = "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da\
        085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00";

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn rfc_8032_vector() {
        let seed: [u8; 32] = hex(SEED).try_into().unwrap();
        let key = Ed25519Key::from_seed(seed);
        assert_eq!(key.public_bytes(), hex(PUBLIC));
        assert_eq!(key.pair.sign(&[0x72]).as_ref(), hex(SIGNATURE));
    }

    #[test]
    fn keys_round_trip_in_both_serialisations() {
        let key = Ed25519Key::generate();
        let text = key.to_string();
        assert!(text.starts_with("whsk_"));
        let back = Ed25519Key::parse(&text).unwrap();
        assert_eq!(back.public_key(), key.public_key());
        let mut long = key.seed.to_vec();
        long.extend_from_slice(key.public_bytes());
        let libsodium = format!("whsk_{}", STANDARD.encode(&long));
        assert_eq!(Ed25519Key::parse(&libsodium).unwrap().seed, key.seed);
        long[40] ^= 1;
        let wrong = format!("whsk_{}", STANDARD.encode(&long));
        assert!(matches!(
            Ed25519Key::parse(&wrong),
            Err(SecretError::Mismatch)
        ));
        assert!(matches!(
            Ed25519Key::parse("whsk_AAAA"),
            Err(SecretError::Length(3))
        ));
        assert!(format!("{key:?}").contains("whpk_"));
        assert!(!format!("{key:?}").contains(&text));
    }

    #[test]
    fn signatures_verify_and_tampering_does_not() {
        let key = Ed25519Key::generate();
        let public = key.public_key();
        let mut header = String::new();
        push_signature(&mut header, &key, "msg_1", 1_700_000_000, b"{}");
        assert!(header.starts_with("v1a,") && header.len() == 4 + 88);
        assert!(verify_v1a(&public, "msg_1", 1_700_000_000, b"{}", &header));
        assert!(!verify_v1a(&public, "msg_1", 1_700_000_001, b"{}", &header));
        assert!(!verify_v1a(&public, "msg_2", 1_700_000_000, b"{}", &header));
        assert!(!verify_v1a(&public, "msg_1", 1_700_000_000, b"[]", &header));
        let other = Ed25519Key::generate().public_key();
        assert!(!verify_v1a(&other, "msg_1", 1_700_000_000, b"{}", &header));
        let v1 = header.replacen("v1a,", "v1,", 1);
        assert!(!verify_v1a(&public, "msg_1", 1_700_000_000, b"{}", &v1));
    }
}
