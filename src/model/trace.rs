//! A message's W3C trace context (`traceparent`, `tracestate`): read strictly from the
//! producer's headers, kept beside the message, and the trace id every attempt of it is in.
//!
//! Validation follows W3C Trace Context Level 1: a `traceparent` of another version than `00` is
//! read for its first four fields when it is at least as long and `-` follows them (a future
//! version may append more), and kept as version `00`; upper-case hex, an all-zero trace or
//! parent id, version `ff` or anything else malformed makes the whole context invalid, and an
//! invalid context is ignored (the message starts a trace of its own), never refused. A
//! `tracestate` is kept only beside a valid `traceparent` and only when it is valid itself: at
//! most 32 `key=value` members with keys and values as the specification spells them, and at most
//! [`MAX_TRACESTATE_BYTES`] in all (an invalid or longer one is dropped, the `traceparent` kept).

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

/// Longest `tracestate` kept, bytes: the 512 the specification asks every vendor to propagate.
pub const MAX_TRACESTATE_BYTES: usize = 512;

/// Most `tracestate` members the specification allows.
const MAX_TRACESTATE_MEMBERS: usize = 32;

/// The W3C trace context a producer gave a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace the message belongs to (never all zero).
    pub trace_id: [u8; 16],
    /// The producer's span: the parent of every attempt span (never all zero).
    pub parent_id: [u8; 8],
    /// Trace flags; bit 0 is `sampled`.
    pub flags: u8,
}

impl TraceParent {
    /// Read a `traceparent` header value; `None` when it is not valid.
    pub fn parse(text: &str) -> Option<Self> {
        let b = text.as_bytes();
        if b.len() < 55 {
            return None;
        }
        let version = hex_byte(&b[0..2])?;
        if version == 0xff || b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
            return None;
        }
        // Version 00 is exactly 55 characters; a later one may carry more after a `-`.
        if (version == 0 && b.len() != 55) || (b.len() > 55 && b[55] != b'-') {
            return None;
        }
        let mut trace_id = [0u8; 16];
        for (i, byte) in trace_id.iter_mut().enumerate() {
            *byte = hex_byte(&b[3 + 2 * i..5 + 2 * i])?;
        }
        let mut parent_id = [0u8; 8];
        for (i, byte) in parent_id.iter_mut().enumerate() {
            *byte = hex_byte(&b[36 + 2 * i..38 + 2 * i])?;
        }
        let flags = hex_byte(&b[53..55])?;
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(Self {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// Did the producer sample its trace (flag bit 0)?
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The version `00` header value.
    pub fn header(&self) -> String {
        traceparent_header(&self.trace_id, &self.parent_id, self.sampled())
    }
}

/// A version `00` `traceparent` value for a span `span_id` of trace `trace_id`.
pub fn traceparent_header(trace_id: &[u8; 16], span_id: &[u8; 8], sampled: bool) -> String {
    let mut s = String::with_capacity(55);
    s.push_str("00-");
    s.push_str(&hex(trace_id));
    s.push('-');
    s.push_str(&hex(span_id));
    s.push_str(if sampled { "-01" } else { "-00" });
    s
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// One byte from two lower-case hex digits (the specification refuses upper case).
fn hex_byte(pair: &[u8]) -> Option<u8> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    Some(digit(pair[0])? << 4 | digit(pair[1])?)
}

/// A `tracestate` value as kept: its members with the optional whitespace around them removed,
/// or `None` when it is empty, invalid or longer than [`MAX_TRACESTATE_BYTES`]. Several
/// `tracestate` headers are one list joined by commas before this.
pub fn tracestate(text: &str) -> Option<String> {
    let members: Vec<&str> = text
        .split(',')
        .map(|m| m.trim_matches([' ', '\t']))
        .filter(|m| !m.is_empty())
        .collect();
    if members.is_empty() || members.len() > MAX_TRACESTATE_MEMBERS {
        return None;
    }
    let mut keys = Vec::with_capacity(members.len());
    for m in &members {
        let (key, value) = m.split_once('=')?;
        if !valid_key(key) || !valid_value(value) || keys.contains(&key) {
            return None;
        }
        keys.push(key);
    }
    let kept = members.join(",");
    (kept.len() <= MAX_TRACESTATE_BYTES).then_some(kept)
}

/// `simple-key` or `tenant-id@system-id` (lower-case letters, digits, `_-*/`).
fn valid_key(key: &str) -> bool {
    let rest = |s: &str, max: usize| {
        s.len() <= max
            && s.bytes().all(|c| {
                c.is_ascii_lowercase()
                    || c.is_ascii_digit()
                    || matches!(c, b'_' | b'-' | b'*' | b'/')
            })
    };
    match key.split_once('@') {
        None => key.as_bytes().first().is_some_and(u8::is_ascii_lowercase) && rest(&key[1..], 255),
        Some((tenant, system)) => {
            let t = tenant.as_bytes();
            let s = system.as_bytes();
            t.first()
                .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
                && rest(&tenant[1..], 240)
                && s.first().is_some_and(u8::is_ascii_lowercase)
                && rest(&system[1..], 13)
        }
    }
}

/// Up to 256 printable ASCII characters but `,` and `=`, not ending in a space.
fn valid_value(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 256
        && !value.ends_with(' ')
        && value
            .bytes()
            .all(|c| (0x20..=0x7e).contains(&c) && c != b',' && c != b'=')
}

/// The trace id of a message: its producer's when it came with a valid `traceparent`, otherwise
/// one derived from the message id (the first 16 bytes of a SHA-256 of it), so every attempt of
/// it, on any dispatcher and however late, is in one trace without storing anything for it.
pub fn trace_id_of(traceparent: Option<&str>, message_id: &str) -> [u8; 16] {
    if let Some(parent) = traceparent.and_then(TraceParent::parse) {
        return parent.trace_id;
    }
    let digest = Sha256::new()
        .chain_update(b"sluice trace id\0")
        .chain_update(message_id.as_bytes())
        .finalize();
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest[..16]);
    if id == [0; 16] {
        id[15] = 1;
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_read_and_written_back() {
        let p = TraceParent::parse(GOOD).expect("valid");
        assert!(p.sampled());
        assert_eq!(hex(&p.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(hex(&p.parent_id), "00f067aa0ba902b7");
        assert_eq!(p.header(), GOOD);
        let later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-what-comes";
        let p = TraceParent::parse(later).expect("a later version is read");
        assert!(!p.sampled());
        assert!(p.header().starts_with("00-4bf92f"));
    }

    #[test]
    fn an_invalid_traceparent_is_none() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn tracestate_is_kept_only_when_valid() {
        assert_eq!(
            tracestate(" rojo=00f067aa0ba902b7 , congo=t61rcWkgMzE,,").as_deref(),
            Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
        );
        assert!(tracestate("fw529a3039@dt=x,a1@b=y").is_some());
        for bad in [
            "",
            "Rojo=1",
            "rojo",
            "rojo=a=b",
            "rojo=1,rojo=2",
            "rojo=tab\tin",
            "1abc=x",
        ] {
            assert_eq!(tracestate(bad), None, "{bad:?}");
        }
        let many = (0..33).map(|i| format!("k{i}=v")).collect::<Vec<_>>();
        assert_eq!(tracestate(&many.join(",")), None);
        let long = format!("k={}", "v".repeat(256));
        let three = [long.replace("k=", "a="), long.replace("k=", "b=")].join(",");
        assert_eq!(tracestate(&three), None, "over 512 bytes");
    }

    #[test]
    fn a_message_without_context_has_a_stable_trace_of_its_own() {
        let a = trace_id_of(None, "msg_1");
        assert_eq!(a, trace_id_of(None, "msg_1"));
        assert_ne!(a, trace_id_of(None, "msg_2"));
        assert_eq!(
            trace_id_of(Some("garbage"), "msg_1"),
            a,
            "an invalid one is none"
        );
        let p = TraceParent::parse(GOOD).expect("valid");
        assert_eq!(trace_id_of(Some(GOOD), "msg_1"), p.trace_id);
    }
}
