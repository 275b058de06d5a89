//! One signed HTTP attempt: the shared clients, timeouts, the capped body read, phase timing and
//! the classification of what came back.
//!
//! A client never follows redirects, ignores proxy settings from the environment (it uses only
//! `--egress-proxy`), resolves names through the egress guard (so it connects only to
//! addresses that were checked) and keeps one keep-alive pool sized to the dispatcher's
//! concurrency. There is one client per distinct (timeouts, TLS setting): endpoints with their
//! own CA bundle or client certificate get a client of their own, shared by every endpoint
//! with the same certificates and key (whatever their PEM text looked like).

mod clients;
pub mod oauth2;
mod outcome;
mod record;
pub mod timing;
pub mod tls;

use std::time::Duration;

use reqwest::header::HeaderValue;

use crate::egress::EgressError;
use crate::model::{Destination, DestinationCredentials};
use crate::signing::SigningKey;

pub use clients::Clients;
pub use outcome::{Decision, decide};
pub use record::{MAX_ERROR_BYTES, attempt_record, storable};
pub use tls::TlsProfile;

/// Install the process-wide TLS crypto provider (ring) once; safe to call repeatedly.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// What an endpoint needs to be delivered to, parsed once per configuration change.
#[derive(Debug, Clone)]
pub struct Target {
    /// Endpoint id.
    pub endpoint_id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// Destination.
    pub url: reqwest::Url,
    /// Signing keys: the current one first, then the previous during its overlap.
    pub secrets: Vec<SigningKey>,
    /// The endpoint's own headers, sent with every attempt (checked when they were stored).
    pub headers: Vec<(reqwest::header::HeaderName, HeaderValue)>,
    /// Effective timeouts (endpoint overrides within the operator's caps).
    pub timeouts: AttemptTimeouts,
    /// The endpoint's own TLS setting (CA bundle, client certificate), if it has one.
    pub tls: Option<TlsProfile>,
    /// The same setting with the client certificate before the last rotation, during its
    /// overlap: presented when the receiver refuses the current one.
    pub previous_tls: Option<TlsProfile>,
    /// What its OAuth2 tokens are fetched with (the endpoint's client credentials, a Pub/Sub
    /// destination's service account): a bearer token is sent with every attempt.
    pub grant: Option<oauth2::Grant>,
    /// What it delivers to: HTTP at `url`, or a broker (published by
    /// [`crate::destinations`]).
    pub destination: Destination,
    /// The broker's credentials (write-only: never shown or logged).
    pub destination_credentials: Option<DestinationCredentials>,
    /// The endpoint asked for W3C trace context on its attempts.
    pub trace_context: bool,
    /// The endpoint is FIFO (one at a time, in acceptance order): a Pub/Sub message carries
    /// its ordering key.
    pub fifo: bool,
}

/// The W3C trace context headers of one attempt (for an endpoint that asked for them): the
/// attempt span as the parent, the producer's `tracestate`.
#[derive(Debug, Clone)]
pub struct TraceHeaders {
    /// `traceparent`.
    pub traceparent: HeaderValue,
    /// `tracestate`, when the producer sent one.
    pub tracestate: Option<HeaderValue>,
}

/// Timeouts of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptTimeouts {
    /// TCP (and TLS) connect.
    pub connect: Duration,
    /// Longest silence while reading the response.
    pub read: Duration,
    /// The whole attempt, from connect to the last byte read.
    pub total: Duration,
}

/// Why an attempt failed without a usable response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// TCP/TLS connect did not finish in time.
    ConnectTimeout,
    /// The response stalled longer than the read timeout.
    ReadTimeout,
    /// The whole attempt passed its total deadline.
    TotalTimeout,
    /// Nothing listens there.
    ConnectionRefused,
    /// The peer reset or closed the connection mid-exchange.
    ConnectionReset,
    /// The name did not resolve.
    Dns,
    /// The endpoint's certificate chains to no CA sluice trusts.
    TlsCertificateUnknown,
    /// The endpoint's certificate has expired (or is not valid yet).
    TlsCertificateExpired,
    /// The endpoint's certificate is not valid for the host name in its URL.
    TlsCertificateName,
    /// The endpoint refused the client certificate sluice presented (or wanted one).
    TlsClientCertificate,
    /// The TLS handshake failed otherwise (a protocol error, no common version or cipher, a
    /// server that does not speak TLS).
    TlsHandshake,
    /// The TLS handshake did not finish within the connect timeout.
    TlsTimeout,
    /// The token endpoint (an HTTP endpoint's OAuth2 one, a service account's `token_uri`) gave
    /// no token (in time).
    TokenEndpoint,
    /// The token endpoint's answer, or the token in it, is longer than sluice accepts.
    TokenTooLarge,
    /// The egress guard refused the destination (not retried).
    Refused,
    /// A broker returned the message: nothing is bound to its exchange and routing key.
    Unroutable,
    /// A broker refused the credentials (or their access to the vhost or exchange).
    BrokerAuth,
    /// A broker has no such exchange, stream, subject or vhost.
    BrokerNotFound,
    /// A broker is blocking publishers or refused the message for its limits (a memory or
    /// disk alarm, a full queue): backpressure, read like a 503.
    BrokerBlocked,
    /// A broker refused the message as too large.
    TooLarge,
    /// A cloud service (SQS, SNS, EventBridge, Pub/Sub) throttled the request: read like a 429.
    Throttled,
    /// The service refused the message itself as invalid (a parameter it rejects, an
    /// EventBridge payload that is not a JSON object): no retry would change it, so it is dead
    /// at once.
    Invalid,
    /// Anything else.
    Other,
}

impl ErrorKind {
    /// The name recorded in the attempt log and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::ConnectTimeout => "timeout_connect",
            ErrorKind::ReadTimeout => "timeout_read",
            ErrorKind::TotalTimeout => "timeout_total",
            ErrorKind::ConnectionRefused => "connection_refused",
            ErrorKind::ConnectionReset => "connection_reset",
            ErrorKind::Dns => "dns",
            ErrorKind::TlsCertificateUnknown => "tls_certificate_unknown",
            ErrorKind::TlsCertificateExpired => "tls_certificate_expired",
            ErrorKind::TlsCertificateName => "tls_certificate_name",
            ErrorKind::TlsClientCertificate => "tls_client_certificate",
            ErrorKind::TlsHandshake => "tls_handshake",
            ErrorKind::TlsTimeout => "tls_timeout",
            ErrorKind::TokenEndpoint => "token_endpoint",
            ErrorKind::TokenTooLarge => "token_too_large",
            ErrorKind::Refused => "destination_refused",
            ErrorKind::Unroutable => "unroutable",
            ErrorKind::BrokerAuth => "broker_auth",
            ErrorKind::BrokerNotFound => "broker_not_found",
            ErrorKind::BrokerBlocked => "broker_blocked",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::Throttled => "throttled",
            ErrorKind::Invalid => "invalid",
            ErrorKind::Other => "error",
        }
    }

    /// Is this a timeout of any kind?
    pub fn is_timeout(self) -> bool {
        matches!(
            self,
            ErrorKind::ConnectTimeout
                | ErrorKind::ReadTimeout
                | ErrorKind::TotalTimeout
                | ErrorKind::TlsTimeout
        )
    }

    /// Every kind, in the order of the enum (the label values of the failures metric).
    pub const ALL: [ErrorKind; 23] = [
        ErrorKind::ConnectTimeout,
        ErrorKind::ReadTimeout,
        ErrorKind::TotalTimeout,
        ErrorKind::ConnectionRefused,
        ErrorKind::ConnectionReset,
        ErrorKind::Dns,
        ErrorKind::TlsCertificateUnknown,
        ErrorKind::TlsCertificateExpired,
        ErrorKind::TlsCertificateName,
        ErrorKind::TlsClientCertificate,
        ErrorKind::TlsHandshake,
        ErrorKind::TlsTimeout,
        ErrorKind::TokenEndpoint,
        ErrorKind::TokenTooLarge,
        ErrorKind::Refused,
        ErrorKind::Unroutable,
        ErrorKind::BrokerAuth,
        ErrorKind::BrokerNotFound,
        ErrorKind::BrokerBlocked,
        ErrorKind::TooLarge,
        ErrorKind::Throttled,
        ErrorKind::Invalid,
        ErrorKind::Other,
    ];
}

/// A response that arrived.
#[derive(Debug, Clone)]
pub struct Response {
    /// HTTP status.
    pub status: u16,
    /// `Retry-After`, parsed and not yet clamped.
    pub retry_after: Option<Duration>,
    /// The body as it arrived, cut at the cap: raw bytes, made storable by [`attempt_record`].
    pub body: Vec<u8>,
}

/// A failure without a response.
#[derive(Debug, Clone)]
pub struct Failure {
    /// Classification.
    pub kind: ErrorKind,
    /// Human detail (from the network: made storable by [`attempt_record`] and [`decide`]).
    pub message: String,
}

/// How long each phase of an attempt took.
#[derive(Debug, Clone, Copy, Default)]
pub struct Phases {
    /// Getting an OAuth2 token (zero when a cached one was used).
    pub token: Duration,
    /// Computing the signature.
    pub sign: Duration,
    /// Opening a new connection: name lookup, TCP, a proxy's tunnel (zero on a reused one).
    pub connect: Duration,
    /// The TLS handshake of a new connection (zero on a reused one, or plain HTTP).
    pub tls: Duration,
    /// From sending to the response headers, less connect and TLS: the request and the
    /// receiver's answer.
    pub http: Duration,
    /// Reading the (capped) body.
    pub body: Duration,
    /// A broker attempt's publish, from sending to the broker's acknowledgement (HTTP's `http`
    /// and `body` for a broker destination).
    pub publish: Duration,
    /// Was it a broker attempt (so `publish` was measured, and `http` and `body` were not)?
    pub published: bool,
    /// Did the attempt open a new connection (so `connect` and `tls` were measured)?
    pub connected: bool,
    /// Did it fetch a token (so `token` was measured)?
    pub fetched_token: bool,
}

/// Everything one attempt produced.
#[derive(Debug, Clone)]
pub struct Report {
    /// Wall-clock start, epoch milliseconds.
    pub started_at_ms: i64,
    /// Whole attempt duration.
    pub duration: Duration,
    /// Response or failure.
    pub result: Result<Response, Failure>,
    /// Phase timings.
    pub phases: Phases,
}

/// Classify a client error by walking its causes: the egress guard's refusal, then a TLS error
/// (from the rustls error itself), then timeouts and I/O errors. `handshake_unfinished` tells a
/// connect timeout in the middle of a TLS handshake from one before it.
fn classify(
    e: &reqwest::Error,
    elapsed: Duration,
    t: &AttemptTimeouts,
    handshake_unfinished: bool,
) -> Failure {
    let message = error_chain(e);
    if let Some(refused) = EgressError::find_in(e) {
        let kind = if refused.is_refused() {
            ErrorKind::Refused
        } else {
            ErrorKind::Dns
        };
        return Failure {
            kind,
            message: refused.to_string(),
        };
    }
    if let Some(tls) = tls::find_tls_error(e) {
        return Failure {
            kind: tls::classify(tls),
            message,
        };
    }
    let kind = if e.is_timeout() {
        if e.is_connect() && handshake_unfinished {
            ErrorKind::TlsTimeout
        } else if e.is_connect() {
            ErrorKind::ConnectTimeout
        } else if elapsed + Duration::from_millis(50) >= t.total {
            ErrorKind::TotalTimeout
        } else {
            ErrorKind::ReadTimeout
        }
    } else if let Some(io) = io_cause(e) {
        match io.kind() {
            std::io::ErrorKind::ConnectionRefused => ErrorKind::ConnectionRefused,
            std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::UnexpectedEof => ErrorKind::ConnectionReset,
            std::io::ErrorKind::TimedOut => ErrorKind::ReadTimeout,
            _ if e.is_connect() => ErrorKind::ConnectionRefused,
            _ => ErrorKind::Other,
        }
    } else if message.contains("dns") || message.contains("resolve") {
        ErrorKind::Dns
    } else if message.contains("closed") || message.contains("reset") {
        ErrorKind::ConnectionReset
    } else if e.is_connect() {
        ErrorKind::ConnectionRefused
    } else {
        ErrorKind::Other
    };
    Failure { kind, message }
}

pub(crate) fn io_cause<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a std::io::Error> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = current {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        current = err.source();
    }
    None
}

pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut current = e.source();
    while let Some(err) = current {
        out.push_str(": ");
        out.push_str(&err.to_string());
        current = err.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ALL` holds every kind once: the metric's label values and the attempt log's names agree.
    #[test]
    fn every_error_kind_has_its_own_name() {
        let names: std::collections::BTreeSet<&str> =
            ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), ErrorKind::ALL.len());
        for kind in ErrorKind::ALL {
            // An exhaustive match: a new kind fails to compile here until it is in `ALL`.
            let listed = match kind {
                ErrorKind::ConnectTimeout
                | ErrorKind::ReadTimeout
                | ErrorKind::TotalTimeout
                | ErrorKind::ConnectionRefused
                | ErrorKind::ConnectionReset
                | ErrorKind::Dns
                | ErrorKind::TlsCertificateUnknown
                | ErrorKind::TlsCertificateExpired
                | ErrorKind::TlsCertificateName
                | ErrorKind::TlsClientCertificate
                | ErrorKind::TlsHandshake
                | ErrorKind::TlsTimeout
                | ErrorKind::TokenEndpoint
                | ErrorKind::TokenTooLarge
                | ErrorKind::Refused
                | ErrorKind::Unroutable
                | ErrorKind::BrokerAuth
                | ErrorKind::BrokerNotFound
                | ErrorKind::BrokerBlocked
                | ErrorKind::TooLarge
                | ErrorKind::Throttled
                | ErrorKind::Invalid
                | ErrorKind::Other => true,
            };
            assert!(listed);
        }
    }
}
