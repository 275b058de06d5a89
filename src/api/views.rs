//! What the API shows: the response shapes of every resource, documented for the OpenAPI
//! document, built from the store's rows (which never leak secrets or other tenants' fields).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::time::Timestamp;
use crate::ids;
use crate::model::{
    AttemptView, ClientAuth, Credentials, DeliveryOrder, DeliveryState, DeliveryView, Destination,
    DestinationCredentials, Endpoint, EndpointEvent, EndpointTls,
};
use crate::pem;
use crate::signing::{Scheme, SigningKey, scheme_of};
use crate::web::problem::Problem;

/// Does `id` look like one of our ids (`ep_…`, `msg_…`)? Anything else cannot exist, so it is a
/// 404 without a trip to the store (and odd bytes never reach SQL).
pub(crate) fn looks_like_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Check a path id of a resource; an impossible id is that resource's 404.
pub(crate) fn check_id(what: &'static str, id: &str) -> Result<(), Problem> {
    if looks_like_id(id) {
        Ok(())
    } else {
        Err(Problem::not_found(what))
    }
}

/// A delivery id (`dlv_…`) from the path, as the store's row number; anything else is a 404.
pub(crate) fn delivery_id(row_ids: &ids::RowIds, id: &str) -> Result<i64, Problem> {
    row_ids
        .parse(ids::DELIVERY, id)
        .ok_or_else(|| Problem::not_found("delivery"))
}

/// Reject text with control characters (they have no place in names and descriptions, and some
/// databases refuse NUL).
pub(crate) fn check_text(field: &str, text: &str, max_chars: usize) -> Result<(), Problem> {
    if text.chars().count() > max_chars {
        return Err(Problem::unprocessable(
            field,
            format!("{field} must be at most {max_chars} characters"),
        ));
    }
    if text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return Err(Problem::unprocessable(
            field,
            format!("{field} must not contain control characters"),
        ));
    }
    Ok(())
}

/// A delivery state, as the API names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StateParam {
    /// Waiting to be claimed.
    Ready,
    /// Being attempted now.
    Leased,
    /// Delivered (2xx).
    Delivered,
    /// Dead-lettered.
    Dead,
}

impl From<StateParam> for DeliveryState {
    fn from(s: StateParam) -> Self {
        match s {
            StateParam::Ready => DeliveryState::Ready,
            StateParam::Leased => DeliveryState::Leased,
            StateParam::Delivered => DeliveryState::Delivered,
            StateParam::Dead => DeliveryState::Dead,
        }
    }
}

impl From<DeliveryState> for StateParam {
    fn from(s: DeliveryState) -> Self {
        match s {
            DeliveryState::Ready => StateParam::Ready,
            DeliveryState::Leased => StateParam::Leased,
            DeliveryState::Delivered => StateParam::Delivered,
            DeliveryState::Dead => StateParam::Dead,
        }
    }
}

/// An endpoint; `secret` only on create and on rotation, its certificates (PEM) everywhere but
/// in lists (which show their fingerprints).
#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointOut {
    /// `ep_…`
    pub id: String,
    /// Destination URL.
    pub url: String,
    /// Free text.
    pub description: String,
    /// Event types delivered here (exact, or a prefix pattern like `order.*`); empty means every
    /// type.
    pub event_types: Vec<String>,
    /// Disabled endpoints keep their deliveries but receive nothing.
    pub enabled: bool,
    /// Why it was disabled.
    pub disabled_reason: Option<String>,
    /// True for the tenant's operational webhook (sluice's own notifications).
    pub operational: bool,
    /// Lane size override (in-flight deliveries).
    pub lane_size: Option<u32>,
    /// Latency breaker ceiling, milliseconds.
    pub latency_ceiling_ms: Option<u32>,
    /// Connect timeout override, milliseconds.
    pub connect_timeout_ms: Option<u32>,
    /// Read timeout override, milliseconds.
    pub read_timeout_ms: Option<u32>,
    /// Total deadline override, milliseconds.
    pub total_timeout_ms: Option<u32>,
    /// Headers sent with every attempt (lower-case names).
    pub headers: BTreeMap<String, String>,
    /// How deliveries are signed: `v1` (HMAC-SHA256, verify with the `whsec_` secret) or `v1a`
    /// (Ed25519, verify with `public_key`).
    pub signature_scheme: Scheme,
    /// For `v1a`: the `whpk_…` public key receivers verify with (null for `v1`).
    pub public_key: Option<String>,
    /// Until when the previous key still signs too (after a rotation); both signatures are sent.
    pub previous_secret_until: Option<Timestamp>,
    /// Where a receiver fetches the `v1a` public keys signing now, as a JSON Web Key Set,
    /// without a token (relative to the API's address); the set is empty while only `v1`
    /// keys sign.
    pub jwks_url: String,
    /// CA certificates (PEM) trusted for this endpoint beside the operator's and the system's,
    /// re-encoded (nothing around them is kept). Left out of lists, which show
    /// `tls_ca_bundle_sha256`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, required = false)]
    pub tls_ca_bundle: Option<Option<String>>,
    /// SHA-256 over the DER of the CA bundle's certificates in order, lower-case hex (for one
    /// certificate, its usual SHA-256 fingerprint); null without a bundle.
    pub tls_ca_bundle_sha256: Option<String>,
    /// How many certificates the CA bundle holds; null without a bundle.
    pub tls_ca_bundle_certificates: Option<u32>,
    /// The client certificate presented when the receiver asks for one, then any
    /// intermediates (PEM, re-encoded; its key is never shown). Left out of lists, which show
    /// `tls_client_certificate_sha256`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, required = false)]
    pub tls_client_certificate: Option<Option<String>>,
    /// SHA-256 of the client certificate's DER (the first of the chain), lower-case hex; null
    /// without one.
    pub tls_client_certificate_sha256: Option<String>,
    /// Until when the client certificate before the last rotation is still presented (when
    /// the receiver refuses the current one).
    pub previous_tls_client_certificate_until: Option<Timestamp>,
    /// OAuth2 client credentials (the client secret is never shown).
    pub oauth2: Option<OAuth2Out>,
    /// What it delivers to (`url` is its address, whatever the type); a broker's credentials
    /// are never shown.
    pub destination: DestinationOut,
    /// Its rate limit, fleet-wide (null: none).
    pub rate_limit: Option<RateLimitOut>,
    /// `unordered`, or `fifo`: one delivery at a time, in acceptance order.
    pub ordering: DeliveryOrder,
    /// Whether each attempt (HTTP or broker message) carries W3C `traceparent` (and `tracestate`), so the
    /// receiver's tracing joins the producer's trace.
    pub trace_context: bool,
    /// When it was created.
    pub created_at: Timestamp,
    /// Last change.
    pub updated_at: Timestamp,
    /// The signing secret, shown only when created or rotated: `whsec_…` for `v1`, the
    /// `whsk_…` secret key for `v1a` (sluice signs with it; receivers need only the public key).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// An endpoint's rate limit as shown.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct RateLimitOut {
    /// Events per second on average, fleet-wide.
    pub per_second: f64,
    /// Events that may go at once after a quiet spell.
    pub burst: u32,
}

/// An endpoint's destination as shown: never its credentials, only whether it has some.
#[derive(Debug, Serialize, ToSchema)]
pub struct DestinationOut {
    /// `http`, `rabbitmq`, …
    #[serde(rename = "type")]
    pub kind: String,
    /// Where it connects.
    pub url: String,
    /// `rabbitmq`: the exchange (`""`: the default exchange).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exchange: Option<String>,
    /// `rabbitmq`: the routing key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routing_key: Option<String>,
    /// `nats`: the subject.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// `redis`: the stream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<String>,
    /// `redis`: the approximate length the stream is trimmed to (null: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_len: Option<u64>,
    /// `sqs`: the queue's URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_url: Option<String>,
    /// `sns`: the topic's ARN.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic_arn: Option<String>,
    /// `eventbridge`: the event bus.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_bus_name: Option<String>,
    /// `eventbridge`: each entry's `Source`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// `sqs`, `sns`, `eventbridge`: the region signed for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// `pubsub`: the project.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// `pubsub`: the topic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// `sqs`, `sns`, `eventbridge`, `pubsub`: the service endpoint connected to (the one given,
    /// or the region's, or Google's); the same as `url`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint_url: Option<String>,
    /// Whether credentials are stored (they are never shown).
    pub has_credentials: bool,
}

impl DestinationOut {
    /// The view of `d`.
    pub fn of(d: &Destination, credentials: &Option<DestinationCredentials>) -> Self {
        let (exchange, routing_key) = match d {
            Destination::Rabbitmq {
                exchange,
                routing_key,
                ..
            } => (Some(exchange.clone()), Some(routing_key.clone())),
            _ => (None, None),
        };
        let subject = match d {
            Destination::Nats { subject, .. } => Some(subject.clone()),
            _ => None,
        };
        let (stream, max_len) = match d {
            Destination::Redis {
                stream, max_len, ..
            } => (Some(stream.clone()), *max_len),
            _ => (None, None),
        };
        let (mut queue_url, mut topic_arn, mut event_bus_name, mut source) =
            (None, None, None, None);
        let (project_id, topic) = match d {
            Destination::Pubsub {
                project_id, topic, ..
            } => (Some(project_id.clone()), Some(topic.clone())),
            _ => (None, None),
        };
        let region = match d {
            Destination::Sqs {
                queue_url: q,
                region,
                ..
            } => {
                queue_url = Some(q.clone());
                Some(region.clone())
            }
            Destination::Sns {
                topic_arn: t,
                region,
                ..
            } => {
                topic_arn = Some(t.clone());
                Some(region.clone())
            }
            Destination::Eventbridge {
                event_bus_name: b,
                region,
                source: s,
                ..
            } => {
                event_bus_name = Some(b.clone());
                source = Some(s.clone());
                Some(region.clone())
            }
            _ => None,
        };
        Self {
            kind: d.kind().to_owned(),
            url: d.url().to_owned(),
            exchange,
            routing_key,
            subject,
            stream,
            max_len,
            queue_url,
            topic_arn,
            event_bus_name,
            source,
            endpoint_url: d.is_cloud().then(|| d.url().to_owned()),
            project_id,
            topic,
            region,
            has_credentials: credentials.is_some(),
        }
    }
}

/// OAuth2 client credentials as shown: everything but the client secret.
#[derive(Debug, Serialize, ToSchema)]
pub struct OAuth2Out {
    /// The token endpoint.
    pub token_url: String,
    /// The client id.
    pub client_id: String,
    /// Scopes asked for.
    pub scope: Option<String>,
    /// Audience asked for.
    pub audience: Option<String>,
    /// `basic` or `post`.
    pub client_auth: ClientAuth,
}

impl From<&Credentials> for OAuth2Out {
    fn from(c: &Credentials) -> Self {
        Self {
            token_url: c.token_url.clone(),
            client_id: c.client_id.clone(),
            scope: c.scope.clone(),
            audience: c.audience.clone(),
            client_auth: c.auth,
        }
    }
}

/// What [`EndpointOut`] shows of an endpoint's TLS setting: its certificates (never the key)
/// when `with_pem`, their fingerprints always, and the end of a rotation's overlap. The
/// certificates are shown as they are parsed from what is stored, re-encoded: nothing stored
/// around them (by a version that kept the text as given) is ever shown.
struct TlsShown {
    ca_bundle: Option<Option<String>>,
    ca_bundle_sha256: Option<String>,
    ca_bundle_certificates: Option<u32>,
    client_certificate: Option<Option<String>>,
    client_certificate_sha256: Option<String>,
    overlap: Option<Timestamp>,
}

impl TlsShown {
    fn of(t: &EndpointTls, with_pem: bool) -> Self {
        let ca = t.ca_bundle.as_deref().map(pem::stored_certificates);
        let chain = t
            .client
            .as_ref()
            .map(|c| pem::stored_certificates(&c.certificate));
        let shown =
            |certs: &Option<Vec<_>>| with_pem.then(|| certs.as_deref().map(pem::certificates_pem));
        let overlap = t
            .previous_client_until_ms
            .filter(|until| *until > crate::clock::now_ms() && t.previous_client.is_some());
        Self {
            ca_bundle: shown(&ca),
            ca_bundle_sha256: ca.as_deref().map(pem::certificates_sha256),
            ca_bundle_certificates: ca.as_ref().map(|c| c.len() as u32),
            client_certificate: shown(&chain),
            client_certificate_sha256: chain
                .as_deref()
                .map(|c| pem::certificates_sha256(&c[..c.len().min(1)])),
            overlap: overlap.map(Timestamp),
        }
    }
}

/// The Ed25519 keys `e` signs with at `now_ms` (what its JWKS publishes): its key, and the
/// previous one while the rotation's overlap runs.
pub(crate) fn public_keys(e: &Endpoint, now_ms: i64) -> Vec<SigningKey> {
    crate::signing::jwks::signing_keys(
        &e.secret,
        e.previous_secret.as_deref(),
        e.previous_secret_until_ms,
        now_ms,
    )
}

impl EndpointOut {
    /// The view of `e`, with its secret when `with_secret`.
    pub fn new(e: Endpoint, with_secret: bool) -> Self {
        Self::build(e, with_secret, true)
    }

    /// The view of `e` in a list: its certificates' fingerprints, not their PEM (up to 256 KiB
    /// each), so a page stays small whatever the endpoints trust.
    pub fn listed(e: Endpoint) -> Self {
        Self::build(e, false, false)
    }

    fn build(e: Endpoint, with_secret: bool, with_pem: bool) -> Self {
        let overlap = e
            .previous_secret_until_ms
            .filter(|until| *until > crate::clock::now_ms() && e.previous_secret.is_some());
        let scheme = scheme_of(&e.secret);
        let public_key = match scheme {
            Scheme::V1 => None,
            Scheme::V1a => SigningKey::parse(&e.secret)
                .ok()
                .and_then(|k| k.public_key()),
        };
        let tls = TlsShown::of(&e.tls, with_pem);
        let jwks_url = format!("/v1/endpoints/{}/jwks.json", e.id);
        Self {
            oauth2: e.oauth2.as_ref().map(Into::into),
            destination: DestinationOut::of(&e.destination, &e.destination_credentials),
            ordering: e.ordering,
            trace_context: e.trace_context,
            rate_limit: e.rate_limit.map(|l| RateLimitOut {
                per_second: l.per_second(),
                burst: l.burst(),
            }),
            tls_ca_bundle: tls.ca_bundle,
            tls_ca_bundle_sha256: tls.ca_bundle_sha256,
            tls_ca_bundle_certificates: tls.ca_bundle_certificates,
            tls_client_certificate: tls.client_certificate,
            tls_client_certificate_sha256: tls.client_certificate_sha256,
            previous_tls_client_certificate_until: tls.overlap,
            secret: with_secret.then_some(e.secret),
            id: e.id,
            url: e.url,
            description: e.description,
            event_types: e.event_types,
            enabled: e.enabled,
            disabled_reason: e.disabled_reason,
            operational: e.operational,
            lane_size: e.lane_size,
            latency_ceiling_ms: e.latency_ceiling_ms,
            connect_timeout_ms: e.connect_timeout_ms,
            read_timeout_ms: e.read_timeout_ms,
            total_timeout_ms: e.total_timeout_ms,
            headers: e.headers,
            signature_scheme: scheme,
            public_key,
            previous_secret_until: overlap.map(Timestamp),
            jwks_url,
            created_at: Timestamp(e.created_at_ms),
            updated_at: Timestamp(e.updated_at_ms),
        }
    }
}

/// One message × endpoint pair.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DeliveryOut {
    /// `dlv_…`: opaque (it says nothing of when or how many deliveries were made).
    pub id: String,
    /// `msg_…`: also the `webhook-id` of every attempt.
    pub message_id: String,
    /// `ep_…`
    pub endpoint_id: String,
    /// Current state.
    pub state: StateParam,
    /// Attempts made since it was created or last replayed, resent or recovered (shedding
    /// never counts).
    pub attempts: u32,
    /// When the next attempt is due, while it is `ready` (null in every other state).
    pub next_attempt_at: Option<Timestamp>,
    /// HTTP status of the last attempt.
    pub last_status: Option<u16>,
    /// Error kind of the last attempt, the dead-letter reason, or how it was made ready again
    /// (`replayed`, `resent`, `recovered`).
    pub last_error: Option<String>,
    /// When it was created (the message's arrival).
    pub created_at: Timestamp,
    /// Last change.
    pub updated_at: Timestamp,
}

impl DeliveryOut {
    /// The view of `d`, its id made public with `row_ids`.
    pub(crate) fn new(d: DeliveryView, row_ids: &ids::RowIds) -> Self {
        Self {
            id: row_ids.format(ids::DELIVERY, d.id),
            message_id: d.message_id,
            endpoint_id: d.endpoint_id,
            state: d.state.into(),
            attempts: d.attempts,
            next_attempt_at: (d.state == DeliveryState::Ready)
                .then_some(Timestamp(d.visible_at_ms)),
            last_status: d.last_status,
            last_error: d.last_error,
            created_at: Timestamp(d.created_at_ms),
            updated_at: Timestamp(d.updated_at_ms),
        }
    }
}

/// One attempt: status, error kind, duration, truncated response.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AttemptOut {
    /// `att_…`: opaque, like delivery ids.
    pub id: String,
    /// `dlv_…`
    pub delivery_id: String,
    /// When it started.
    pub started_at: Timestamp,
    /// How long it took, milliseconds.
    pub duration_ms: u32,
    /// HTTP status, if a response arrived.
    pub status: Option<u16>,
    /// Error kind (`timeout_read`, `connection_refused`, …) when it failed without a status.
    pub error_kind: Option<String>,
    /// The response body, truncated.
    pub response: Option<String>,
    /// The trace the attempt is a span of (32 lower-case hex digits): the producer's, when the
    /// message came with a valid `traceparent`, else one sluice derived from the message id.
    /// Every attempt of a message is in the same trace.
    pub trace_id: String,
}

impl AttemptOut {
    /// The view of `a`, its ids made public with `row_ids`.
    pub(crate) fn new(a: AttemptView, row_ids: &ids::RowIds) -> Self {
        Self {
            id: row_ids.format(ids::ATTEMPT, a.id),
            delivery_id: row_ids.format(ids::DELIVERY, a.delivery_id),
            started_at: Timestamp(a.started_at_ms),
            duration_ms: a.duration_ms,
            status: a.status,
            error_kind: a.error_kind,
            response: a.response,
            trace_id: a.trace_id,
        }
    }
}

/// Something that happened to an endpoint: breaker transitions, disables, replays.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EventOut {
    /// `breaker_open`, `disabled`, `enabled`, `replayed`, `resent`, `recovered`,
    /// `secret_rotated`, …
    pub kind: String,
    /// What happened, with the figures that caused it.
    pub detail: String,
    /// When.
    pub at: Timestamp,
}

impl From<EndpointEvent> for EventOut {
    fn from(e: EndpointEvent) -> Self {
        Self {
            kind: e.kind,
            detail: e.detail,
            at: Timestamp(e.at_ms),
        }
    }
}
