//! What of an attempt is kept: the boundary where a receiver's bytes become a stored record.
//!
//! A receiver can answer anything: NUL bytes (which PostgreSQL refuses in a `text` column),
//! bytes that are not UTF-8, megabytes. None of that may ever make a write fail, so everything
//! that came from the receiver or the network is turned into storable text here, once, before
//! it reaches the store: the response body and the failure message of the attempt record, and
//! a failure message that becomes a dead-letter reason.

use std::fmt::Write;

use super::{Report, Response};
use crate::model::AttemptRecord;

/// Longest failure message kept, in bytes (error chains name hosts and causes; a few hundred
/// bytes is typical).
pub const MAX_ERROR_BYTES: usize = 2048;

/// Text every store accepts, of at most `cap` bytes, from bytes that came from outside.
///
/// Valid UTF-8 is kept as it is, except NUL (U+0000), which PostgreSQL refuses in `text`: it is
/// written as the four characters `\x00`. Every byte that is not part of valid UTF-8 is written
/// the same way, `\xNN` with two lower-case hex digits (so one bad byte never swallows the
/// characters after it, as U+FFFD replacement of a run would). Backslashes in the input are kept
/// as they are: the escape is for a person reading the attempt log, not a reversible encoding.
/// The text is cut at the last whole character or escape that fits in `cap` bytes, never
/// inside one; a character the body cap cut in half at the very end shows as its `\xNN` bytes.
pub fn storable(bytes: &[u8], cap: usize) -> String {
    let mut out = String::with_capacity(bytes.len().min(cap));
    for chunk in bytes.utf8_chunks() {
        for (i, text) in chunk.valid().split('\0').enumerate() {
            if i > 0 && !push_escape(&mut out, 0, cap) {
                return out;
            }
            let room = cap - out.len();
            if text.len() > room {
                out.push_str(&text[..floor_char_boundary(text, room)]);
                return out;
            }
            out.push_str(text);
        }
        for &b in chunk.invalid() {
            if !push_escape(&mut out, b, cap) {
                return out;
            }
        }
    }
    out
}

/// Append `\xNN` if it fits within `cap`; false when it does not (the text is full).
fn push_escape(out: &mut String, byte: u8, cap: usize) -> bool {
    if out.len() + 4 > cap {
        return false;
    }
    let _ = write!(out, "\\x{byte:02x}");
    true
}

/// The largest index at most `at` that is a character boundary of `s`.
fn floor_char_boundary(s: &str, at: usize) -> usize {
    (0..=at.min(s.len()))
        .rev()
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(0)
}

/// The attempt record of `report`: status, error kind, and the response body (or the failure
/// message) made storable within `max_response_bytes`.
pub fn attempt_record(report: &Report, max_response_bytes: usize) -> AttemptRecord {
    let (status, error_kind, response) = match &report.result {
        Ok(Response { status, body, .. }) => (
            Some(*status),
            (!(200..300).contains(status)).then(|| format!("http_{status}")),
            (!body.is_empty()).then(|| storable(body, max_response_bytes)),
        ),
        Err(f) => (
            None,
            Some(f.kind.as_str().to_owned()),
            Some(storable(f.message.as_bytes(), MAX_ERROR_BYTES)),
        ),
    };
    AttemptRecord {
        started_at_ms: report.started_at_ms,
        duration_ms: report.duration.as_millis().min(u128::from(u32::MAX)) as u32,
        status,
        error_kind,
        response,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::delivery::{ErrorKind, Failure, Phases};

    #[test]
    fn clean_text_is_kept_as_it_is() {
        assert_eq!(storable(b"{\"ok\":true}", 100), "{\"ok\":true}");
        assert_eq!(storable("café ☕".as_bytes(), 100), "café ☕");
        assert_eq!(storable(b"", 100), "");
    }

    #[test]
    fn nul_and_invalid_bytes_are_escaped() {
        assert_eq!(storable(b"a\0b", 100), "a\\x00b");
        assert_eq!(storable(b"\0", 100), "\\x00");
        assert_eq!(storable(b"caf\xc3 \xff", 100), "caf\\xc3 \\xff");
        // One bad byte does not swallow the valid character after it.
        assert_eq!(storable(b"\xc3\x28", 100), "\\xc3(");
        assert_eq!(storable(b"\xe2\x82", 100), "\\xe2\\x82");
    }

    #[test]
    fn the_cap_never_cuts_a_character_or_an_escape() {
        assert_eq!(storable("aé".as_bytes(), 2), "a");
        assert_eq!(storable("aé".as_bytes(), 3), "aé");
        assert_eq!(storable(b"ab\0", 5), "ab");
        assert_eq!(storable(b"ab\0", 6), "ab\\x00");
        assert_eq!(storable(b"ab\xff", 5), "ab");
        assert_eq!(storable(b"abc", 0), "");
    }

    #[test]
    fn a_record_keeps_the_status_and_a_storable_body() {
        let report = |result| Report {
            started_at_ms: 7,
            duration: Duration::from_millis(12),
            result,
            phases: Phases::default(),
        };
        let ok = attempt_record(
            &report(Ok(Response {
                status: 200,
                retry_after: None,
                body: Vec::new(),
            })),
            64,
        );
        assert_eq!(
            ok,
            AttemptRecord {
                started_at_ms: 7,
                duration_ms: 12,
                status: Some(200),
                error_kind: None,
                response: None
            }
        );
        let failed = attempt_record(
            &report(Ok(Response {
                status: 500,
                retry_after: None,
                body: b"boom\0".to_vec(),
            })),
            64,
        );
        assert_eq!(failed.error_kind.as_deref(), Some("http_500"));
        assert_eq!(failed.response.as_deref(), Some("boom\\x00"));
        let broken = attempt_record(
            &report(Err(Failure {
                kind: ErrorKind::ConnectionReset,
                message: "reset by \0 peer".into(),
            })),
            64,
        );
        assert_eq!(broken.status, None);
        assert_eq!(broken.error_kind.as_deref(), Some("connection_reset"));
        assert_eq!(broken.response.as_deref(), Some("reset by \\x00 peer"));
    }

    proptest! {
        #[test]
        fn anything_becomes_bounded_text_without_nul(
            bytes in proptest::collection::vec(any::<u8>(), 0..600),
            cap in 0usize..700,
        ) {
            let text = storable(&bytes, cap);
            prop_assert!(text.len() <= cap);
            prop_assert!(!text.contains('\0'));
            // Cutting is the only loss: a larger cap extends the same text.
            let whole = storable(&bytes, usize::MAX);
            prop_assert!(whole.starts_with(&text));
            // And it stops only where the next character or escape (at most 4 bytes) would not fit.
            prop_assert!(text == whole || text.len() + 4 > cap);
        }

        #[test]
        fn clean_text_within_the_cap_is_unchanged(text in "[^\u{0}]{0,200}") {
            prop_assert_eq!(storable(text.as_bytes(), text.len()), text);
        }
    }
}
