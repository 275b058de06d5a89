//! How an attempt ended, as the evidence tells a customer: delivered, or failed in one of the
//! ways that call for different remedies (nothing listening, too slow, a server error, asking
//! us to slow down, anything else).

use serde::Serialize;
use utoipa::ToSchema;

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptKind {
    /// Answered 2xx.
    Delivered,
    /// The connection was refused: nothing listens there.
    Refused,
    /// Connect, read or the whole attempt timed out.
    TimedOut,
    /// Answered 5xx.
    ServerError,
    /// Answered 429.
    Throttled,
    /// Anything else: a 3xx or 4xx answer, a reset, DNS, TLS, a refused destination.
    Other,
}

impl AttemptKind {
    /// Classify an attempt by its HTTP status, or by the error kind recorded when no answer
    /// came (the names of [`crate::delivery::ErrorKind::as_str`]).
    pub fn classify(status: Option<u16>, error_kind: Option<&str>) -> Self {
        match (status, error_kind) {
            (Some(200..=299), _) => Self::Delivered,
            (Some(429), _) => Self::Throttled,
            (Some(500..=599), _) => Self::ServerError,
            (Some(_), _) => Self::Other,
            (None, Some("connection_refused")) => Self::Refused,
            (None, Some(kind)) if kind.starts_with("timeout") => Self::TimedOut,
            (None, _) => Self::Other,
        }
    }
}

/// Failed attempts by how they failed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct FailureCounts {
    /// Connections refused.
    pub refused: u32,
    /// Attempts that timed out (connect, read or total).
    pub timed_out: u32,
    /// 5xx answers.
    pub server_error: u32,
    /// 429 answers.
    pub throttled: u32,
    /// Every other failure (3xx and 4xx answers, resets, DNS, TLS).
    pub other: u32,
}

impl FailureCounts {
    /// Count one attempt of `kind` (a delivered one counts nowhere here).
    pub fn record(&mut self, kind: AttemptKind) {
        let slot = match kind {
            AttemptKind::Delivered => return,
            AttemptKind::Refused => &mut self.refused,
            AttemptKind::TimedOut => &mut self.timed_out,
            AttemptKind::ServerError => &mut self.server_error,
            AttemptKind::Throttled => &mut self.throttled,
            AttemptKind::Other => &mut self.other,
        };
        *slot = slot.saturating_add(1);
    }

    /// Add `other`'s counts.
    pub fn add(&mut self, other: &FailureCounts) {
        self.refused = self.refused.saturating_add(other.refused);
        self.timed_out = self.timed_out.saturating_add(other.timed_out);
        self.server_error = self.server_error.saturating_add(other.server_error);
        self.throttled = self.throttled.saturating_add(other.throttled);
        self.other = self.other.saturating_add(other.other);
    }

    /// All failures.
    pub fn total(&self) -> u64 {
        [
            self.refused,
            self.timed_out,
            self.server_error,
            self.throttled,
            self.other,
        ]
        .iter()
        .map(|n| u64::from(*n))
        .sum()
    }

    /// The failures in words, most frequent first: `12 refused the connection, 3 timed out`.
    pub fn describe(&self) -> String {
        let mut parts = [
            (self.refused, "refused the connection"),
            (self.timed_out, "timed out"),
            (self.server_error, "answered 5xx"),
            (self.throttled, "answered 429 (slow down)"),
            (
                self.other,
                "failed otherwise (3xx or 4xx, reset, DNS or TLS)",
            ),
        ];
        // Stable: equal counts keep the order above.
        parts.sort_by_key(|p| std::cmp::Reverse(p.0));
        parts
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!("{n} {what}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_classified_by_status_then_by_error() {
        let cases = [
            (Some(204), None, AttemptKind::Delivered),
            (Some(429), None, AttemptKind::Throttled),
            (Some(503), None, AttemptKind::ServerError),
            (Some(500), None, AttemptKind::ServerError),
            (Some(410), None, AttemptKind::Other),
            (Some(302), None, AttemptKind::Other),
            (None, Some("connection_refused"), AttemptKind::Refused),
            (None, Some("timeout_read"), AttemptKind::TimedOut),
            (None, Some("timeout_connect"), AttemptKind::TimedOut),
            (None, Some("connection_reset"), AttemptKind::Other),
            (None, None, AttemptKind::Other),
        ];
        for (status, error, kind) in cases {
            assert_eq!(
                AttemptKind::classify(status, error),
                kind,
                "{status:?} {error:?}"
            );
        }
    }

    #[test]
    fn failures_are_told_most_frequent_first() {
        let mut f = FailureCounts::default();
        for kind in [
            AttemptKind::TimedOut,
            AttemptKind::Refused,
            AttemptKind::Refused,
            AttemptKind::Delivered,
        ] {
            f.record(kind);
        }
        assert_eq!(f.total(), 3);
        assert_eq!(f.describe(), "2 refused the connection, 1 timed out");
        assert_eq!(FailureCounts::default().describe(), "");
    }
}
