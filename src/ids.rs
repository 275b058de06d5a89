//! Identifiers: sortable, prefixed public ids (`msg_…`, `ep_…`, `ten_…`), the public form of
//! the store's numbered rows (`dlv_…` deliveries, `att_…` attempts), tokens and lease tokens.

use rand::{Rng, RngCore};
use sha2::{Digest, Sha256};

/// The base32 alphabet of ids' time and random parts (Crockford's, lower case): in ASCII order,
/// so ids sort by the numbers they spell.
pub const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// A new id: `prefix_` + 10 characters of millisecond time + 16 random characters (base32),
/// so ids sort by creation time and never collide in practice. Within one process they are
/// strictly increasing: an id made in the same millisecond as the last one (or while the clock
/// stands behind it) takes the last one's random part plus one, so "newest first" is the order
/// in which this process made them.
pub fn new_id(prefix: &str) -> String {
    static LAST: std::sync::Mutex<(u64, u128)> = std::sync::Mutex::new((0, 0));
    const RANDOM_BITS: u32 = 80;
    let (ms, random) = {
        let now = crate::clock::now_ms().max(0) as u64;
        let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
        let next = if now > last.0 {
            (now, rand::rng().random::<u128>() >> (128 - RANDOM_BITS))
        } else if last.1 + 1 < 1 << RANDOM_BITS {
            (last.0, last.1 + 1)
        } else {
            (last.0 + 1, 0)
        };
        *last = next;
        next
    };
    let mut out = String::with_capacity(prefix.len() + 27);
    out.push_str(prefix);
    out.push('_');
    for i in (0..10).rev() {
        out.push(ALPHABET[((ms >> (i * 5)) & 31) as usize] as char);
    }
    for i in (0..16).rev() {
        out.push(ALPHABET[((random >> (i * 5)) & 31) as usize] as char);
    }
    out
}

/// Prefix of a delivery's public id.
pub const DELIVERY: &str = "dlv";
/// Prefix of an attempt's public id.
pub const ATTEMPT: &str = "att";

/// The public id of row `n` of a numbered table: `dlv_42`. Deliveries and attempts are numbered
/// by the store (one index, batched inserts); the prefix says what the number counts, as every
/// other id does, so an attempt id pasted where a delivery id belongs is a 404, not the wrong row.
pub fn numbered(prefix: &str, n: i64) -> String {
    format!("{prefix}_{n}")
}

/// The row number in `prefix_N`; `None` for anything else (a bare number included).
pub fn parse_numbered(prefix: &str, id: &str) -> Option<i64> {
    let digits = id.strip_prefix(prefix)?.strip_prefix('_')?;
    if digits.is_empty() || digits.len() > 18 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|n| *n > 0)
}

/// The smallest id [`new_id`] can give `prefix` at `ms` (epoch ms): every id made at or after
/// `ms` sorts at or above it, so a time range of ids is an index range.
pub fn time_floor(prefix: &str, ms: i64) -> String {
    let mut out = String::with_capacity(prefix.len() + 11);
    out.push_str(prefix);
    out.push('_');
    let ms = ms.max(0) as u64;
    for i in (0..10).rev() {
        out.push(ALPHABET[((ms >> (i * 5)) & 31) as usize] as char);
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

/// `bytes` random bytes as hex.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buf);
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// What a console session or a portal link keeps of the token in force when it was made: the
/// first 16 hex digits of its hash. A rotation changes it, and with it ends both.
pub fn token_fingerprint(token_hash: &str) -> String {
    token_hash.chars().take(16).collect()
}

/// A fresh, positive lease token.
pub fn lease_token() -> i64 {
    (rand::rng().random::<u64>() >> 1) as i64 | 1
}

/// A fresh, positive lease token whose high half is `tag` (a process's lease tag, positive), so
/// the leases of a process known dead can be found by their tokens alone (`token >> 32`).
pub fn tagged_lease_token(tag: i32) -> i64 {
    debug_assert!(tag > 0, "a lease tag is positive");
    (i64::from(tag) << 32) | i64::from(rand::rng().random::<u32>() | 1)
}

/// A fresh lease tag for a process: positive, so its tokens are too.
pub fn lease_tag() -> i32 {
    (rand::rng().random::<u32>() >> 1).max(1) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tagged_lease_token_names_its_process() {
        for _ in 0..1_000 {
            let tag = lease_tag();
            assert!(tag > 0);
            let token = tagged_lease_token(tag);
            assert!(token > 0, "tokens are positive");
            assert_eq!(token >> 32, i64::from(tag));
            assert_ne!(
                token,
                tagged_lease_token(tag),
                "tokens of one process differ"
            );
        }
        assert_eq!(tagged_lease_token(i32::MAX) >> 32, i64::from(i32::MAX));
    }

    #[test]
    fn ids_are_prefixed_sortable_and_distinct() {
        let a = new_id("msg");
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = new_id("msg");
        assert!(a.starts_with("msg_") && a.len() == 30);
        assert!(a < b, "{a} should sort before {b}");
    }

    /// Ids made in one millisecond still sort in the order they were made (a message log that
    /// lists newest first lists them as they were posted).
    #[test]
    fn ids_made_in_the_same_millisecond_sort_in_order() {
        let ids: Vec<String> = (0..1_000).map(|_| new_id("msg")).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, ids);
    }

    #[test]
    fn numbered_ids_read_back_and_nothing_else_does() {
        assert_eq!(numbered(DELIVERY, 42), "dlv_42");
        assert_eq!(parse_numbered(DELIVERY, "dlv_42"), Some(42));
        for bad in [
            "42",
            "att_42",
            "dlv_",
            "dlv_-1",
            "dlv_0",
            "dlv_4x",
            "dlv_99999999999999999999",
        ] {
            assert_eq!(parse_numbered(DELIVERY, bad), None, "{bad}");
        }
    }

    #[test]
    fn a_time_floor_sorts_below_every_later_id_and_above_earlier_ones() {
        let before = new_id("msg");
        std::thread::sleep(std::time::Duration::from_millis(2));
        let floor = time_floor("msg", crate::clock::now_ms());
        let after = new_id("msg");
        assert!(before < floor && floor <= after, "{before} {floor} {after}");
    }

    #[test]
    fn token_hash_is_stable_hex() {
        assert_eq!(hash_token("abc").len(), 64);
        assert_eq!(hash_token("abc"), hash_token("abc"));
        assert_ne!(hash_token("abc"), hash_token("abd"));
    }
}
