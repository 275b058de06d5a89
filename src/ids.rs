//! Identifiers: sortable, prefixed public ids (`msg_…`, `ep_…`, `ten_…`), the public form of
//! the store's numbered rows (`dlv_…` deliveries, `att_…` attempts, opaque: [`RowIds`]), tokens
//! and lease tokens.

use hmac::{Hmac, Mac};
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

/// Characters after the prefix of a numbered row's public id: 63 bits in base32.
pub const ROW_ID_CHARS: usize = 13;

/// The public ids of the store's numbered rows (deliveries and attempts, one index each, in
/// insertion order): `dlv_` + 13 base32 characters of a keyed permutation of the row number,
/// so a tenant cannot learn from two of its ids how many rows the platform wrote between them,
/// while the store keeps paging by the number. The key is the installation's own (generated
/// once, kept in the database: every process sharing it formats the same ids, and ids survive
/// restarts).
///
/// The permutation is a four-round Feistel network over 64 bits whose round function is
/// HMAC-SHA256 of the round, the half and the prefix (so an attempt and a delivery of the same
/// number look unrelated), restricted to the 63-bit range of row numbers by cycle walking. Only
/// the one spelling a row formats to parses back: anything else is `None`, which the API
/// answers as an unknown id.
#[derive(Clone)]
pub struct RowIds {
    mac: Hmac<Sha256>,
}

impl std::fmt::Debug for RowIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RowIds(..)")
    }
}

/// Feistel rounds: four make a keyed permutation indistinguishable from a random one, given a
/// pseudorandom round function (Luby–Rackoff).
const ROUNDS: u8 = 4;
/// Row numbers, and their permuted forms, are below this.
const ROW_SPACE: u64 = 1 << 63;

impl RowIds {
    /// Ids keyed by `secret` (the installation's, from the store's settings).
    pub fn from_secret(secret: &str) -> Self {
        // HMAC takes a key of any length.
        let mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
        Self { mac }
    }

    /// The public id of row `n` (positive) counted under `prefix`: `dlv_…`.
    pub fn format(&self, prefix: &str, n: i64) -> String {
        debug_assert!(n > 0, "row numbers are positive");
        let mut x = n as u64 & (ROW_SPACE - 1);
        loop {
            x = self.permute(prefix, x);
            if x < ROW_SPACE {
                break;
            }
        }
        let mut out = String::with_capacity(prefix.len() + 1 + ROW_ID_CHARS);
        out.push_str(prefix);
        out.push('_');
        for i in (0..ROW_ID_CHARS).rev() {
            out.push(ALPHABET[((x >> (i * 5)) & 31) as usize] as char);
        }
        out
    }

    /// The row number behind `prefix_…`; `None` for anything [`RowIds::format`] cannot have
    /// written (another prefix, another length, upper case, a character outside the alphabet).
    pub fn parse(&self, prefix: &str, id: &str) -> Option<i64> {
        let text = id.strip_prefix(prefix)?.strip_prefix('_')?;
        if text.len() != ROW_ID_CHARS {
            return None;
        }
        let mut x: u64 = 0;
        for b in text.bytes() {
            let digit = ALPHABET.iter().position(|a| *a == b)? as u64;
            x = x.checked_mul(32)? | digit;
        }
        if x >= ROW_SPACE {
            return None;
        }
        loop {
            x = self.unpermute(prefix, x);
            if x < ROW_SPACE {
                break;
            }
        }
        i64::try_from(x).ok().filter(|n| *n > 0)
    }

    /// The round function: 32 bits of HMAC(key, prefix, round, half).
    fn round(&self, prefix: &str, round: u8, half: u32) -> u32 {
        let mut mac = self.mac.clone();
        mac.update(prefix.as_bytes());
        mac.update(&[0, round]);
        mac.update(&half.to_be_bytes());
        let out = mac.finalize().into_bytes();
        u32::from_be_bytes([out[0], out[1], out[2], out[3]])
    }

    fn permute(&self, prefix: &str, x: u64) -> u64 {
        let (mut left, mut right) = ((x >> 32) as u32, x as u32);
        for round in 0..ROUNDS {
            (left, right) = (right, left ^ self.round(prefix, round, right));
        }
        (u64::from(left) << 32) | u64::from(right)
    }

    fn unpermute(&self, prefix: &str, x: u64) -> u64 {
        let (mut left, mut right) = ((x >> 32) as u32, x as u32);
        for round in (0..ROUNDS).rev() {
            (left, right) = (right ^ self.round(prefix, round, left), left);
        }
        (u64::from(left) << 32) | u64::from(right)
    }
}

/// The pattern (ECMA 262, as OpenAPI documents take it) of every public id of rows counted
/// under `prefix`: what [`RowIds::parse`] takes apart from the key.
pub fn row_id_pattern(prefix: &str) -> String {
    format!("^{prefix}_[0-7][0-9a-hjkmnp-tv-z]{{{}}}$", ROW_ID_CHARS - 1)
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
    fn row_ids_read_back_and_nothing_else_does() {
        let ids = RowIds::from_secret("0123456789abcdef");
        for n in [1, 2, 42, 1 << 32, i64::MAX - 1, i64::MAX] {
            let id = ids.format(DELIVERY, n);
            assert!(
                id.starts_with("dlv_") && id.len() == 4 + ROW_ID_CHARS,
                "{id}"
            );
            assert_eq!(ids.parse(DELIVERY, &id), Some(n), "{id}");
            assert_eq!(ids.parse(ATTEMPT, &id), None, "{id} is no attempt id");
            let pattern = row_id_pattern(DELIVERY);
            assert!(pattern.starts_with("^dlv_[0-7]"), "{pattern}");
            assert!(id.as_bytes()[4] <= b'7', "{id} within the pattern");
            let upper = id.to_uppercase().replacen("DLV", "dlv", 1);
            assert_eq!(ids.parse(DELIVERY, &upper), None, "{upper}");
        }
        let one = ids.format(DELIVERY, 1);
        let body = &one[4..];
        for bad in [
            "42".to_owned(),
            "dlv_42".to_owned(),
            "dlv_".to_owned(),
            format!("dlv_{body}0"),
            format!("dlv_{}", &body[1..]),
            format!("dlv_8{}", &body[1..]),
            format!("dlv_{}i", &body[..12]),
            format!("dlv_{}u", &body[..12]),
            format!("att_{body}"),
            format!("dlv-{body}"),
        ] {
            assert_eq!(ids.parse(DELIVERY, &bad), None, "{bad}");
        }
    }

    #[test]
    fn row_ids_are_a_permutation_of_every_spelling() {
        // Every well-formed spelling decodes to some row (cycle walking is a bijection), and
        // formats back to itself: there is exactly one id per row.
        let ids = RowIds::from_secret("k");
        for x in [1u64, 2, 1 << 40, (1 << 63) - 1, 0x0123_4567_89ab_cdef] {
            let mut text = String::from("att_");
            for i in (0..ROW_ID_CHARS).rev() {
                text.push(ALPHABET[((x >> (i * 5)) & 31) as usize] as char);
            }
            if let Some(n) = ids.parse(ATTEMPT, &text) {
                assert_eq!(ids.format(ATTEMPT, n), text);
            }
        }
    }

    /// Consecutive rows get ids that say nothing of their distance: not in order, and not
    /// close together.
    #[test]
    fn consecutive_row_ids_hide_their_difference() {
        let ids = RowIds::from_secret("an installation's key");
        let decoded = |id: &str| {
            id[4..].bytes().fold(0u64, |x, b| {
                x * 32 + ALPHABET.iter().position(|a| *a == b).unwrap() as u64
            })
        };
        let spelled: Vec<u64> = (1..=200)
            .map(|n| decoded(&ids.format(DELIVERY, n)))
            .collect();
        let ascending = spelled.windows(2).filter(|w| w[0] < w[1]).count();
        assert!(
            (40..=160).contains(&ascending),
            "{ascending} of 199 steps go up"
        );
        let close = spelled
            .windows(2)
            .filter(|w| w[0].abs_diff(w[1]) < 1 << 40)
            .count();
        assert!(close <= 2, "{close} of 199 neighbours are close");
        let mut distinct = spelled.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), spelled.len());
    }

    #[test]
    fn another_key_spells_other_ids() {
        let (a, b) = (RowIds::from_secret("one"), RowIds::from_secret("two"));
        let id = a.format(DELIVERY, 7);
        assert_eq!(id, a.clone().format(DELIVERY, 7), "stable for one key");
        assert_ne!(id, b.format(DELIVERY, 7));
        assert_ne!(b.parse(DELIVERY, &id), Some(7));
        assert_ne!(a.format(DELIVERY, 7)[4..], a.format(ATTEMPT, 7)[4..]);
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
