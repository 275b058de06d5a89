//! The symmetric scheme: `whsec_` secrets, `v1,` HMAC-SHA256 signatures and their verification.
//!
//! The signed content is fed to the MAC in pieces (no concatenated copy of the body), and each
//! [`Secret`] keeps a pre-keyed MAC that is cloned per message, so signing costs one clone, one
//! pass over the body and one base64 encode.

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::SecretError;

/// Prefix of the textual secret form.
pub(super) const PREFIX: &str = "whsec_";
/// Bytes of key material in a generated secret (the Standard Webhooks range is 24–64).
const GENERATED_LEN: usize = 24;

type HmacSha256 = Hmac<Sha256>;

/// An endpoint signing secret with its HMAC already keyed.
#[derive(Clone)]
pub struct Secret {
    key: Box<[u8]>,
    mac: HmacSha256,
}

impl Secret {
    /// Builds a secret from raw key bytes; refuses an empty key.
    pub fn from_bytes(key: &[u8]) -> Result<Self, SecretError> {
        if key.is_empty() {
            return Err(SecretError::Empty);
        }
        // HMAC accepts keys of any length, so this cannot fail for a non-empty key.
        let mac = HmacSha256::new_from_slice(key).map_err(|_| SecretError::Empty)?;
        Ok(Self {
            key: key.into(),
            mac,
        })
    }

    /// Parses `whsec_<base64>`, or the bare base64 without the prefix.
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        let text = text.trim();
        let encoded = text.strip_prefix(PREFIX).unwrap_or(text);
        if encoded.is_empty() {
            return Err(SecretError::Empty);
        }
        Self::from_bytes(&STANDARD.decode(encoded)?)
    }

    /// Generates a fresh secret of 24 random bytes.
    pub fn generate() -> Self {
        let key: [u8; GENERATED_LEN] = rand::random();
        Self {
            key: key.into(),
            mac: HmacSha256::new_from_slice(&key).expect("HMAC takes keys of any length"),
        }
    }

    /// The raw key bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.key
    }

    /// A copy of the keyed MAC with the signed content `{id}.{timestamp}.{body}` fed in.
    fn mac_over(&self, msg_id: &str, timestamp_s: i64, body: &[u8]) -> HmacSha256 {
        let mut mac = self.mac.clone();
        let mut digits = [0u8; 20];
        mac.update(msg_id.as_bytes());
        mac.update(b".");
        mac.update(format_i64(timestamp_s, &mut digits));
        mac.update(b".");
        mac.update(body);
        mac
    }
}

impl FromStr for Secret {
    type Err = SecretError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}{}", STANDARD.encode(&self.key))
    }
}

impl fmt::Debug for Secret {
    // Never print key material into logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(whsec_…)")
    }
}

/// Writes `value` in decimal into `buf` (20 bytes hold any i64) and returns the digits.
pub(super) fn format_i64(value: i64, buf: &mut [u8; 20]) -> &[u8] {
    let mut n = value.unsigned_abs();
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if value < 0 {
        start -= 1;
        buf[start] = b'-';
    }
    &buf[start..]
}

/// Signs one message: returns `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`.
pub fn sign(secret: &Secret, msg_id: &str, timestamp_s: i64, body: &[u8]) -> String {
    let mut out = String::with_capacity(48);
    push_signature(&mut out, secret, msg_id, timestamp_s, body);
    out
}

/// Appends one `v1,<base64>` signature to `out`.
pub(super) fn push_signature(
    out: &mut String,
    secret: &Secret,
    msg_id: &str,
    timestamp_s: i64,
    body: &[u8],
) {
    let tag = secret
        .mac_over(msg_id, timestamp_s, body)
        .finalize()
        .into_bytes();
    out.push_str("v1,");
    STANDARD.encode_string(tag, out);
}

/// True when any `v1,` signature in `header_value` matches (constant-time compare).
///
/// The timestamp is not checked against the clock here; a receiver applies its own tolerance.
pub fn verify(
    secret: &Secret,
    msg_id: &str,
    timestamp_s: i64,
    body: &[u8],
    header_value: &str,
) -> bool {
    let expected = secret.mac_over(msg_id, timestamp_s, body);
    let mut decoded = [0u8; 64];
    header_value.split_ascii_whitespace().any(|candidate| {
        let Some(encoded) = candidate.strip_prefix("v1,") else {
            return false;
        };
        match STANDARD.decode_slice(encoded, &mut decoded) {
            Ok(len) => expected.clone().verify_slice(&decoded[..len]).is_ok(),
            Err(_) => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const ID: &str = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
    const TS: i64 = 1_649_367_553;
    const BODY: &[u8] = br#"{"email":"test@example.com","username":"test_user"}"#;
    const EXPECTED: &str = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=";

    fn known() -> Secret {
        Secret::parse(SECRET).expect("vector secret parses")
    }

    #[test]
    fn known_answer_vector() {
        assert_eq!(sign(&known(), ID, TS, BODY), EXPECTED);
    }

    #[test]
    fn bare_base64_secret_signs_the_same() {
        let bare = Secret::parse(&SECRET[PREFIX.len()..]).expect("bare base64 parses");
        assert_eq!(sign(&bare, ID, TS, BODY), EXPECTED);
    }

    #[test]
    fn verify_accepts_vector_and_rejects_tampering() {
        let s = known();
        assert!(verify(&s, ID, TS, BODY, EXPECTED));
        assert!(!verify(
            &s,
            ID,
            TS,
            br#"{"email":"evil@example.com","username":"test_user"}"#,
            EXPECTED
        ));
        assert!(!verify(&s, ID, TS + 1, BODY, EXPECTED));
        assert!(!verify(&s, "msg_other", TS, BODY, EXPECTED));
        assert!(!verify(&s, ID, TS, BODY, ""));
        assert!(!verify(&s, ID, TS, BODY, "v1,not-base64!!"));
        assert!(!verify(
            &s,
            ID,
            TS,
            BODY,
            &EXPECTED.replacen("v1,", "v2,", 1)
        ));
    }

    #[test]
    fn generated_secret_round_trips() {
        let s = Secret::generate();
        let text = s.to_string();
        assert!(text.starts_with(PREFIX));
        let back: Secret = text.parse().expect("generated secret parses");
        assert_eq!(back.as_bytes(), s.as_bytes());
        assert_eq!(back.as_bytes().len(), GENERATED_LEN);
        assert_eq!(sign(&back, ID, TS, BODY), sign(&s, ID, TS, BODY));
        assert_eq!(format!("{s:?}"), "Secret(whsec_…)");
    }

    #[test]
    fn bad_secrets_are_refused() {
        assert!(matches!(Secret::parse("whsec_"), Err(SecretError::Empty)));
        assert!(matches!(Secret::parse(""), Err(SecretError::Empty)));
        assert!(matches!(
            Secret::parse("whsec_***"),
            Err(SecretError::Base64(_))
        ));
    }

    #[test]
    fn timestamps_format_like_display() {
        let mut buf = [0u8; 20];
        for v in [0, 7, -7, 1_649_367_553, i64::MAX, i64::MIN] {
            assert_eq!(format_i64(v, &mut buf), v.to_string().as_bytes());
        }
    }
}
