//! Endpoints: the customer URLs that receive signed webhooks, what is stored beside each (its
//! ordering, rate limit, TLS setting, OAuth2 credentials, headers) and what happens to them.

mod destination;
mod oauth2;
mod rate;
mod tls;

use std::collections::BTreeMap;

use serde::Serialize;

pub use destination::*;
pub use oauth2::*;
pub use rate::*;
pub use tls::*;

/// A customer URL that receives signed webhooks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Endpoint {
    /// `ep_…`
    pub id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// The destination's URL, whatever its kind (checked by the egress guard on create and on
    /// every delivery): always `destination.url()`, kept apart for what reads only the address.
    pub url: String,
    /// What it delivers to: HTTP (the default) or a broker.
    pub destination: Destination,
    /// The broker's credentials: write-only.
    #[serde(skip)]
    pub destination_credentials: Option<DestinationCredentials>,
    /// Free text for the customer.
    pub description: String,
    /// Event types delivered here; empty means every type.
    pub event_types: Vec<String>,
    /// Current signing key: `whsec_…` (HMAC, `v1`) or `whsk_…` (Ed25519, `v1a`).
    #[serde(skip)]
    pub secret: String,
    /// The key before the last rotation (of either scheme), still signing until
    /// `previous_secret_until_ms`.
    #[serde(skip)]
    pub previous_secret: Option<String>,
    /// End of the rotation overlap.
    #[serde(skip)]
    pub previous_secret_until_ms: Option<i64>,
    /// Disabled endpoints keep their deliveries but are not claimed.
    pub enabled: bool,
    /// Why it was disabled (410 Gone, auto-disable, operator…).
    pub disabled_reason: Option<String>,
    /// An operational endpoint receives sluice's own notifications, never regular fan-out.
    pub operational: bool,
    /// Operator override of the lane size (in-flight slots).
    pub lane_size: Option<u32>,
    /// Latency breaker ceiling for this endpoint, milliseconds.
    pub latency_ceiling_ms: Option<u32>,
    /// Connect timeout override, milliseconds (capped by the operator's maximum).
    pub connect_timeout_ms: Option<u32>,
    /// Read timeout override, milliseconds.
    pub read_timeout_ms: Option<u32>,
    /// Total deadline override, milliseconds.
    pub total_timeout_ms: Option<u32>,
    /// Its rate limit: events per second with a burst, fleet-wide.
    pub rate_limit: Option<RateLimit>,
    /// Whether its deliveries may overtake one another ([`DeliveryOrder::Unordered`]) or go one
    /// at a time in acceptance order ([`DeliveryOrder::Fifo`]).
    pub ordering: DeliveryOrder,
    /// Send W3C `traceparent` (and `tracestate`) with each attempt, as the attempt span's
    /// context, so the receiver's own tracing joins the producer's trace.
    pub trace_context: bool,
    /// Start of the current unbroken run of failures, for auto-disable.
    pub failing_since_ms: Option<i64>,
    /// Headers sent with every attempt, lower-case names (checked by the API: no hop-by-hop,
    /// `webhook-*` or framing headers).
    pub headers: BTreeMap<String, String>,
    /// Its own TLS setting: CA certificates to trust, a client certificate to present.
    #[serde(skip)]
    pub tls: EndpointTls,
    /// OAuth2 client credentials: a bearer token goes with every attempt.
    #[serde(skip)]
    pub oauth2: Option<Credentials>,
    /// When it was created.
    pub created_at_ms: i64,
    /// Last change.
    pub updated_at_ms: i64,
}

/// How an endpoint's deliveries are ordered.
///
/// FIFO: the claim takes only its head (its lowest pending delivery, that is the earliest
/// accepted message not yet delivered or dead-lettered), only when nothing of it is in flight
/// anywhere in the fleet; a head in retry back-off holds everything behind it, and a head
/// dead-lettered lets the next one go. Throughput is one round trip at a time.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryOrder {
    /// Deliveries go as the lane allows, several at once, retries behind newer ones.
    #[default]
    Unordered,
    /// One in flight at a time, strictly in acceptance order.
    Fifo,
}

impl DeliveryOrder {
    /// The stored code.
    pub fn code(self) -> i64 {
        match self {
            Self::Unordered => 0,
            Self::Fifo => 1,
        }
    }

    /// From the stored code (anything unknown: unordered).
    pub fn from_code(code: i64) -> Self {
        if code == 1 {
            Self::Fifo
        } else {
            Self::Unordered
        }
    }

    /// One at a time, in order.
    pub fn is_fifo(self) -> bool {
        self == Self::Fifo
    }
}

/// A rate limit from its two stored columns (both NULL: none; a pair out of range, which no
/// check lets in: none either).
pub fn rate_limit_from_columns(per_second: Option<f64>, burst: Option<i64>) -> Option<RateLimit> {
    let burst = u32::try_from(burst?).ok()?;
    RateLimit::try_new(per_second?, burst).ok()
}

/// OAuth2 credentials in their stored form: JSON, or NULL.
pub fn oauth2_column(c: &Option<Credentials>) -> Option<String> {
    c.as_ref().and_then(|c| serde_json::to_string(c).ok())
}

/// OAuth2 credentials from their stored form.
pub fn oauth2_from_column(text: Option<&str>) -> Option<Credentials> {
    text.and_then(|t| serde_json::from_str(t).ok())
}

impl Endpoint {
    /// An enabled endpoint of `tenant_id` for every event type, with the defaults for everything
    /// else (no overrides, no previous secret), created and updated at `now_ms`.
    pub fn new(id: String, tenant_id: String, url: String, secret: String, now_ms: i64) -> Self {
        Self {
            id,
            tenant_id,
            destination: Destination::Http { url: url.clone() },
            destination_credentials: None,
            url,
            description: String::new(),
            event_types: Vec::new(),
            secret,
            previous_secret: None,
            previous_secret_until_ms: None,
            enabled: true,
            disabled_reason: None,
            operational: false,
            lane_size: None,
            latency_ceiling_ms: None,
            connect_timeout_ms: None,
            read_timeout_ms: None,
            total_timeout_ms: None,
            rate_limit: None,
            ordering: DeliveryOrder::Unordered,
            trace_context: false,
            failing_since_ms: None,
            headers: BTreeMap::new(),
            tls: EndpointTls::default(),
            oauth2: None,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
        }
    }
}

impl Endpoint {
    /// Deliver to `d` from now on (its URL becomes the endpoint's `url`).
    pub fn set_destination(&mut self, d: Destination) {
        self.url = d.url().to_owned();
        self.destination = d;
    }
}

/// Something that happened to an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EndpointEvent {
    /// Owning tenant.
    pub tenant_id: String,
    /// Endpoint id.
    pub endpoint_id: String,
    /// `breaker_opened`, `breaker_closed`, `disabled`, `enabled`, `replayed`, …
    pub kind: String,
    /// Human detail with the figures that caused it.
    pub detail: String,
    /// When.
    pub at_ms: i64,
}
