//! How an attempt ended, as the evidence tells a customer: delivered, or failed in one of the
//! ways that call for different remedies (nothing listening, too slow, a server error, asking
//! us to slow down, a certificate or TLS handshake problem, no OAuth2 token, a broker blocking
//! publishers or refusing the message, anything else).

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
    /// Its certificate chains to no CA sluice trusts.
    CertificateUnknown,
    /// Its certificate has expired (or is not valid yet).
    CertificateExpired,
    /// Its certificate is for another host name.
    CertificateName,
    /// It refused sluice's client certificate (or wanted one).
    ClientCertificate,
    /// The TLS handshake failed otherwise.
    TlsHandshake,
    /// The TLS handshake did not finish in time.
    TlsTimeout,
    /// Its OAuth2 token endpoint gave no token.
    Token,
    /// A broker is blocking publishers or is at its limits (backpressure).
    BrokerBlocked,
    /// A broker refused the message: unroutable, no such exchange or stream, credentials
    /// refused, too large.
    BrokerRefused,
    /// Anything else: a 3xx or 4xx answer, a reset, DNS, a refused destination.
    Other,
}

impl AttemptKind {
    /// Classify an attempt by its HTTP status, or by the error kind recorded when no answer
    /// came (the names of [`crate::delivery::ErrorKind::as_str`]).
    pub fn classify(status: Option<u16>, error_kind: Option<&str>) -> Self {
        match (status, error_kind) {
            (Some(200..=299), _) => Self::Delivered,
            // A cloud service's throttling error is its 429.
            (Some(429), _) | (None, Some("throttled")) => Self::Throttled,
            (Some(500..=599), _) => Self::ServerError,
            (Some(_), _) => Self::Other,
            (None, Some("connection_refused")) => Self::Refused,
            (None, Some(kind)) if kind.starts_with("timeout") => Self::TimedOut,
            (None, Some("tls_certificate_unknown")) => Self::CertificateUnknown,
            (None, Some("tls_certificate_expired")) => Self::CertificateExpired,
            (None, Some("tls_certificate_name")) => Self::CertificateName,
            (None, Some("tls_client_certificate")) => Self::ClientCertificate,
            // `tls` is how attempts were recorded before TLS failures were told apart.
            (None, Some("tls_handshake" | "tls")) => Self::TlsHandshake,
            (None, Some("tls_timeout")) => Self::TlsTimeout,
            (None, Some("token_endpoint" | "token_too_large")) => Self::Token,
            (None, Some("broker_blocked")) => Self::BrokerBlocked,
            (
                None,
                Some("unroutable" | "broker_auth" | "broker_not_found" | "too_large" | "invalid"),
            ) => Self::BrokerRefused,
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
    /// 429 answers, and a cloud service's throttling errors (`throttled`).
    pub throttled: u32,
    /// Certificates no trusted CA signed.
    pub certificate_unknown: u32,
    /// Expired (or not yet valid) certificates.
    pub certificate_expired: u32,
    /// Certificates for another host name.
    pub certificate_name: u32,
    /// Our client certificate refused.
    pub client_certificate: u32,
    /// TLS handshakes that failed otherwise.
    pub tls_handshake: u32,
    /// TLS handshakes that did not finish in time.
    pub tls_timeout: u32,
    /// No OAuth2 token from the token endpoint.
    pub token: u32,
    /// A broker blocking publishers or at its limits.
    pub broker_blocked: u32,
    /// A broker or cloud service refusing the message (unroutable, no such exchange, stream,
    /// queue, topic or bus, credentials, size, an invalid message).
    pub broker_refused: u32,
    /// Every other failure (3xx and 4xx answers, resets, DNS, refused destinations).
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
            AttemptKind::CertificateUnknown => &mut self.certificate_unknown,
            AttemptKind::CertificateExpired => &mut self.certificate_expired,
            AttemptKind::CertificateName => &mut self.certificate_name,
            AttemptKind::ClientCertificate => &mut self.client_certificate,
            AttemptKind::TlsHandshake => &mut self.tls_handshake,
            AttemptKind::TlsTimeout => &mut self.tls_timeout,
            AttemptKind::Token => &mut self.token,
            AttemptKind::BrokerBlocked => &mut self.broker_blocked,
            AttemptKind::BrokerRefused => &mut self.broker_refused,
            AttemptKind::Other => &mut self.other,
        };
        *slot = slot.saturating_add(1);
    }

    /// Each count with the words that tell it, in the order equal counts are told.
    fn told(&self) -> [(u32, &'static str); 14] {
        [
            (self.refused, "refused the connection"),
            (self.timed_out, "timed out"),
            (self.server_error, "answered 5xx"),
            (self.throttled, "answered 429 (slow down)"),
            (
                self.certificate_unknown,
                "presented a TLS certificate no trusted CA signed",
            ),
            (
                self.certificate_expired,
                "presented an expired (or not yet valid) TLS certificate",
            ),
            (
                self.certificate_name,
                "presented a TLS certificate for another host name",
            ),
            (
                self.client_certificate,
                "refused our TLS client certificate",
            ),
            (self.tls_handshake, "failed the TLS handshake"),
            (self.tls_timeout, "did not finish the TLS handshake in time"),
            (
                self.token,
                "got no OAuth2 token (the token endpoint failed)",
            ),
            (
                self.broker_blocked,
                "found the broker blocking publishers or at its limits",
            ),
            (
                self.broker_refused,
                "were refused by the broker or service (unroutable, no such exchange, stream, \
                 queue, topic or bus, credentials, size, invalid)",
            ),
            (self.other, "failed otherwise (3xx or 4xx, reset or DNS)"),
        ]
    }

    /// Add `other`'s counts.
    pub fn add(&mut self, other: &FailureCounts) {
        for (mine, theirs) in [
            (&mut self.refused, other.refused),
            (&mut self.timed_out, other.timed_out),
            (&mut self.server_error, other.server_error),
            (&mut self.throttled, other.throttled),
            (&mut self.certificate_unknown, other.certificate_unknown),
            (&mut self.certificate_expired, other.certificate_expired),
            (&mut self.certificate_name, other.certificate_name),
            (&mut self.client_certificate, other.client_certificate),
            (&mut self.tls_handshake, other.tls_handshake),
            (&mut self.tls_timeout, other.tls_timeout),
            (&mut self.token, other.token),
            (&mut self.broker_blocked, other.broker_blocked),
            (&mut self.broker_refused, other.broker_refused),
            (&mut self.other, other.other),
        ] {
            *mine = mine.saturating_add(theirs);
        }
    }

    /// All failures.
    pub fn total(&self) -> u64 {
        self.told().iter().map(|(n, _)| u64::from(*n)).sum()
    }

    /// The failures in words, most frequent first: `12 refused the connection, 3 timed out`.
    pub fn describe(&self) -> String {
        let mut parts = self.told();
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
            (
                None,
                Some("tls_certificate_unknown"),
                AttemptKind::CertificateUnknown,
            ),
            (
                None,
                Some("tls_certificate_expired"),
                AttemptKind::CertificateExpired,
            ),
            (
                None,
                Some("tls_certificate_name"),
                AttemptKind::CertificateName,
            ),
            (
                None,
                Some("tls_client_certificate"),
                AttemptKind::ClientCertificate,
            ),
            (None, Some("tls_handshake"), AttemptKind::TlsHandshake),
            (None, Some("tls"), AttemptKind::TlsHandshake),
            (None, Some("tls_timeout"), AttemptKind::TlsTimeout),
            (None, Some("token_endpoint"), AttemptKind::Token),
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
        let mut tls = FailureCounts::default();
        for kind in [
            AttemptKind::CertificateUnknown,
            AttemptKind::CertificateUnknown,
            AttemptKind::Token,
        ] {
            tls.record(kind);
        }
        assert_eq!(
            tls.describe(),
            "2 presented a TLS certificate no trusted CA signed, 1 got no OAuth2 token (the token \
             endpoint failed)"
        );
    }
}
