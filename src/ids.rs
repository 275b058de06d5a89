//! Identifiers: sortable, prefixed public ids (`msg_…`, `ep_…`, `ten_…`), tokens and lease tokens.

use rand::Rng;
use sha2::{Digest, Sha256};

const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// A new id: `prefix_` + 10 characters of millisecond time + 16 random characters (base32),
/// so ids sort by creation time and never collide in practice.
pub fn new_id(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + 27);
    out.push_str(prefix);
    out.push('_');
    let ms = crate::clock::now_ms().max(0) as u64;
    for i in (0..10).rev() {
        out.push(ALPHABET[((ms >> (i * 5)) & 31) as usize] as char);
    }
    let mut rng = rand::rng();
    let bits: u128 = rng.random();
    for i in 0..16 {
        out.push(ALPHABET[((bits >> (i * 5)) & 31) as usize] as char);
    }
    out
}

/// A fresh API token (shown once, stored only as its hash).
pub fn new_token(prefix: &str) -> String {
    let mut rng = rand::rng();
    let bits: u128 = rng.random();
    let more: u64 = rng.random();
    format!("{prefix}_{bits:032x}{more:016x}")
}

/// SHA-256 hex of a token, as stored.
pub fn hash_token(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    let mut hex = String::with_capacity(64);
    for b in digest {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
}

/// A fresh, positive lease token.
pub fn lease_token() -> i64 {
    (rand::rng().random::<u64>() >> 1) as i64 | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_prefixed_sortable_and_distinct() {
        let a = new_id("msg");
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = new_id("msg");
        assert!(a.starts_with("msg_") && a.len() == 30);
        assert!(a < b, "{a} should sort before {b}");
    }

    #[test]
    fn token_hash_is_stable_hex() {
        assert_eq!(hash_token("abc").len(), 64);
        assert_eq!(hash_token("abc"), hash_token("abc"));
        assert_ne!(hash_token("abc"), hash_token("abd"));
    }
}
