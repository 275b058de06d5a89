//! One signed HTTP attempt: the shared client, timeouts, the capped body read, phase timing and
//! the classification of what came back.
//!
//! The client never follows redirects, ignores proxy settings from the environment, resolves
//! names through the egress guard (so it connects only to addresses that were checked) and keeps
//! one keep-alive pool sized to the dispatcher's concurrency.

mod outcome;
mod record;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER, USER_AGENT};
use tokio::time::Instant;

use crate::config::AttemptTimeouts;
use crate::egress::{EgressError, EgressPolicy, GuardedResolver};
use crate::signing::{self, SigningKey};

pub use outcome::{Decision, decide};
pub use record::{MAX_ERROR_BYTES, attempt_record, storable};

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
    /// TLS failed.
    Tls,
    /// The egress guard refused the destination (not retried).
    Refused,
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
            ErrorKind::Tls => "tls",
            ErrorKind::Refused => "destination_refused",
            ErrorKind::Other => "error",
        }
    }

    /// Is this a timeout of any kind?
    pub fn is_timeout(self) -> bool {
        matches!(
            self,
            ErrorKind::ConnectTimeout | ErrorKind::ReadTimeout | ErrorKind::TotalTimeout
        )
    }
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
    /// Computing the signature.
    pub sign: Duration,
    /// From sending to the response headers (includes connect on a cold connection).
    pub http: Duration,
    /// Reading the (capped) body.
    pub body: Duration,
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

/// The shared HTTP clients: one per distinct (connect, read) timeout pair, each with a
/// keep-alive pool sized to the concurrency. Nearly every endpoint uses the default pair.
pub struct Clients {
    policy: Arc<EgressPolicy>,
    pool_size: usize,
    clients: Mutex<HashMap<(Duration, Duration), reqwest::Client>>,
    max_body_bytes: usize,
}

impl Clients {
    /// Clients that resolve through `policy`, keep up to `pool_size` idle connections per host,
    /// and keep at most `max_body_bytes` of each response.
    pub fn new(policy: Arc<EgressPolicy>, pool_size: usize, max_body_bytes: usize) -> Self {
        install_tls_provider();
        Self {
            policy,
            pool_size,
            clients: Mutex::new(HashMap::new()),
            max_body_bytes,
        }
    }

    /// The egress policy in force.
    pub fn policy(&self) -> &EgressPolicy {
        &self.policy
    }

    fn client(&self, t: &AttemptTimeouts) -> Result<reqwest::Client, Failure> {
        let key = (t.connect, t.read);
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        let client = reqwest::Client::builder()
            .connect_timeout(t.connect)
            .read_timeout(t.read)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(GuardedResolver(self.policy.clone())))
            .pool_max_idle_per_host(self.pool_size)
            .pool_idle_timeout(Duration::from_secs(90))
            .tcp_nodelay(true)
            .build()
            .map_err(|e| Failure {
                kind: ErrorKind::Other,
                message: format!("cannot build the HTTP client: {e}"),
            })?;
        clients.insert(key, client.clone());
        Ok(client)
    }

    /// Make one signed attempt of `payload` as message `message_id` to `target`.
    pub async fn attempt(&self, target: &Target, message_id: &str, payload: &str) -> Report {
        let started_at_ms = crate::clock::now_ms();
        let started = Instant::now();
        let mut phases = Phases::default();
        let result = self
            .send(target, message_id, payload, started_at_ms, &mut phases)
            .await;
        Report {
            started_at_ms,
            duration: started.elapsed(),
            result,
            phases,
        }
    }

    async fn send(
        &self,
        target: &Target,
        message_id: &str,
        payload: &str,
        started_at_ms: i64,
        phases: &mut Phases,
    ) -> Result<Response, Failure> {
        // IP-literal hosts never reach the resolver: check them here, on every attempt.
        self.policy
            .check_url(target.url.as_str())
            .map_err(|e| Failure {
                kind: ErrorKind::Refused,
                message: e.to_string(),
            })?;
        let client = self.client(&target.timeouts)?;
        let clock = Instant::now();
        let timestamp_s = started_at_ms / 1000;
        let signature =
            signing::signature_header(&target.secrets, message_id, timestamp_s, payload.as_bytes());
        phases.sign = clock.elapsed();

        let clock = Instant::now();
        let mut request = client.post(target.url.clone());
        // The endpoint's headers first: sluice's own come after and cannot be overridden (the
        // API refuses the names anyway), except `User-Agent`, which the endpoint's replaces so
        // that one goes out, not two.
        for (name, value) in &target.headers {
            request = request.header(name, value);
        }
        if !target.headers.iter().any(|(name, _)| name == USER_AGENT) {
            request = request.header(USER_AGENT, HeaderValue::from_static("sluice/0.1"));
        }
        let request = request
            .timeout(target.timeouts.total)
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header(signing::WEBHOOK_ID, message_id)
            .header(signing::WEBHOOK_TIMESTAMP, timestamp_s.to_string())
            .header(signing::WEBHOOK_SIGNATURE, signature)
            .body(payload.to_owned());
        let mut response = request
            .send()
            .await
            .map_err(|e| classify(&e, clock.elapsed(), &target.timeouts))?;
        phases.http = clock.elapsed();

        let clock = Instant::now();
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| crate::retry::parse_retry_after(v, std::time::SystemTime::now()));
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    let room = self.max_body_bytes - body.len();
                    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    if body.len() >= self.max_body_bytes {
                        break; // the rest is dropped with the connection
                    }
                }
                Ok(None) => break,
                // A broken body after a status line still counts as the status we got.
                Err(_) => break,
            }
        }
        phases.body = clock.elapsed();
        Ok(Response {
            status,
            retry_after,
            body,
        })
    }
}

/// Classify a client error by walking its causes.
fn classify(e: &reqwest::Error, elapsed: Duration, t: &AttemptTimeouts) -> Failure {
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
    let kind = if e.is_timeout() {
        if e.is_connect() {
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
    } else if message.contains("tls") || message.contains("certificate") {
        ErrorKind::Tls
    } else if message.contains("closed") || message.contains("reset") {
        ErrorKind::ConnectionReset
    } else if e.is_connect() {
        ErrorKind::ConnectionRefused
    } else {
        ErrorKind::Other
    };
    Failure { kind, message }
}

fn io_cause<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a std::io::Error> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = current {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        current = err.source();
    }
    None
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut current = e.source();
    while let Some(err) = current {
        out.push_str(": ");
        out.push_str(&err.to_string());
        current = err.source();
    }
    out
}
