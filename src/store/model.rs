//! The rows and requests the store speaks in, shared by both drivers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::fairness::SharePolicy;

/// A customer of the platform: owns endpoints and messages, authenticates with its own token.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tenant {
    /// `ten_…`
    pub id: String,
    /// Display name.
    pub name: String,
    /// SHA-256 hex of the tenant's API token (the token itself is never stored).
    #[serde(skip)]
    pub token_hash: String,
    /// When it was created.
    pub created_at_ms: i64,
    /// Its share of the pool while tenants compete (weight, ceiling).
    pub share: SharePolicy,
}

/// A customer URL that receives signed webhooks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Endpoint {
    /// `ep_…`
    pub id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// Destination URL (checked by the egress guard on create and on every delivery).
    pub url: String,
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
    pub rate_limit: Option<crate::admission::rate::RateLimit>,
    /// Whether its deliveries may overtake one another ([`DeliveryOrder::Unordered`]) or go one
    /// at a time in acceptance order ([`DeliveryOrder::Fifo`]).
    pub ordering: DeliveryOrder,
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
    pub oauth2: Option<crate::delivery::oauth2::Credentials>,
    /// When it was created.
    pub created_at_ms: i64,
    /// Last change.
    pub updated_at_ms: i64,
}

/// An endpoint's own TLS setting, stored as one JSON text column.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct EndpointTls {
    /// CA certificates (PEM) trusted for this endpoint beside the process-wide ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
    /// The client certificate and key presented when the endpoint asks for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<crate::delivery::ClientIdentity>,
    /// The client identity before the last rotation, still presented (when the current one is
    /// refused) until `previous_client_until_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_client: Option<crate::delivery::ClientIdentity>,
    /// End of the client certificate's rotation overlap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_client_until_ms: Option<i64>,
}

impl EndpointTls {
    /// Nothing set: the process-wide trust, no client certificate.
    pub fn is_empty(&self) -> bool {
        self.ca_bundle.is_none() && self.client.is_none() && self.previous_client.is_none()
    }

    /// The stored form: JSON, or NULL when nothing is set.
    pub fn to_column(&self) -> Option<String> {
        (!self.is_empty()).then(|| serde_json::to_string(self).unwrap_or_default())
    }

    /// From the stored form (NULL or unreadable: nothing set).
    pub fn from_column(text: Option<&str>) -> Self {
        text.and_then(|t| serde_json::from_str(t).ok())
            .unwrap_or_default()
    }
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
pub fn rate_limit_from_columns(
    per_second: Option<f64>,
    burst: Option<i64>,
) -> Option<crate::admission::rate::RateLimit> {
    let burst = u32::try_from(burst?).ok()?;
    crate::admission::rate::RateLimit::try_new(per_second?, burst).ok()
}

/// OAuth2 credentials in their stored form: JSON, or NULL.
pub fn oauth2_column(c: &Option<crate::delivery::oauth2::Credentials>) -> Option<String> {
    c.as_ref().and_then(|c| serde_json::to_string(c).ok())
}

/// OAuth2 credentials from their stored form.
pub fn oauth2_from_column(text: Option<&str>) -> Option<crate::delivery::oauth2::Credentials> {
    text.and_then(|t| serde_json::from_str(t).ok())
}

impl Endpoint {
    /// An enabled endpoint of `tenant_id` for every event type, with the defaults for everything
    /// else (no overrides, no previous secret), created and updated at `now_ms`.
    pub fn new(id: String, tenant_id: String, url: String, secret: String, now_ms: i64) -> Self {
        Self {
            id,
            tenant_id,
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
            failing_since_ms: None,
            headers: BTreeMap::new(),
            tls: EndpointTls::default(),
            oauth2: None,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
        }
    }
}

/// A message to store and fan out.
#[derive(Debug, Clone)]
pub struct NewMessage {
    /// `msg_…`, generated by the caller; becomes `webhook-id` on every attempt.
    pub id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// Event type, matched against endpoint filters.
    pub event_type: String,
    /// The JSON body delivered verbatim.
    pub payload: String,
    /// Per-tenant idempotency key: a repeat returns the original message.
    pub idempotency_key: Option<String>,
    /// Deliver only to this endpoint (operational notifications), bypassing the filters.
    pub only_endpoint: Option<String>,
}

/// The result of enqueueing one message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Enqueued {
    /// The message id (the original one for an idempotent repeat).
    pub id: String,
    /// True when the idempotency key matched an existing message.
    pub duplicate: bool,
    /// How many deliveries were created (0 for a duplicate).
    pub deliveries: u32,
    /// A duplicate whose event type or payload differs from the original's (byte for byte):
    /// the key was reused for another request, and nothing was stored.
    pub mismatch: bool,
}

impl Enqueued {
    /// A new message and its deliveries.
    pub fn created(id: String, deliveries: u32) -> Self {
        Self {
            id,
            duplicate: false,
            deliveries,
            mismatch: false,
        }
    }

    /// The original `id` of a repeated idempotency key; `same` when the request matches it.
    pub fn repeat(id: String, same: bool) -> Self {
        Self {
            id,
            duplicate: true,
            deliveries: 0,
            mismatch: !same,
        }
    }
}

/// Where a delivery is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Waiting to be claimed once `visible_at_ms` has passed.
    Ready = 0,
    /// Claimed by a dispatcher until `lease_until_ms`.
    Leased = 1,
    /// Delivered (2xx).
    Delivered = 2,
    /// Dead-lettered: retries exhausted, refused, or a poison lease.
    Dead = 3,
}

impl DeliveryState {
    /// Every state, in code order.
    pub const ALL: [DeliveryState; 4] = [Self::Ready, Self::Leased, Self::Delivered, Self::Dead];

    /// The stored code.
    pub fn code(self) -> i64 {
        self as i64
    }

    /// From the stored code.
    pub fn from_code(code: i64) -> Self {
        match code {
            0 => Self::Ready,
            1 => Self::Leased,
            2 => Self::Delivered,
            _ => Self::Dead,
        }
    }

    /// Lower-case name, as in the API.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Leased => "leased",
            Self::Delivered => "delivered",
            Self::Dead => "dead",
        }
    }

    /// Parse the API name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// A message with its deliveries.
#[derive(Debug, Clone, Serialize)]
pub struct MessageView {
    /// `msg_…`
    pub id: String,
    /// Event type.
    pub event_type: String,
    /// The payload as stored (JSON text).
    #[serde(skip)]
    pub payload: String,
    /// When it was accepted.
    pub created_at_ms: i64,
    /// One per subscribed endpoint.
    pub deliveries: Vec<DeliveryView>,
}

/// A message in a listing.
#[derive(Debug, Clone, Serialize)]
pub struct MessageSummary {
    /// `msg_…`
    pub id: String,
    /// Event type.
    pub event_type: String,
    /// When it was accepted.
    pub created_at_ms: i64,
}

/// One message × endpoint pair: the unit the queue moves.
#[derive(Debug, Clone, Serialize)]
pub struct DeliveryView {
    /// Delivery id.
    pub id: i64,
    /// Message id.
    pub message_id: String,
    /// Endpoint id.
    pub endpoint_id: String,
    /// Current state.
    pub state: DeliveryState,
    /// Attempts made (shed and held requeues never count).
    pub attempts: u32,
    /// When it becomes (or became) claimable.
    pub visible_at_ms: i64,
    /// HTTP status of the last attempt.
    pub last_status: Option<u16>,
    /// Error kind or dead-letter reason of the last attempt.
    pub last_error: Option<String>,
    /// When it was created.
    pub created_at_ms: i64,
    /// Last change.
    pub updated_at_ms: i64,
}

/// A request to lease work.
#[derive(Debug, Clone, Default)]
pub struct ClaimRequest {
    /// Current time.
    pub now_ms: i64,
    /// At most this many deliveries in all (the dispatcher's free capacity).
    pub limit: u32,
    /// At most this many for any one endpoint (fairness bound).
    pub per_endpoint: u32,
    /// Lease duration.
    pub lease_ms: i64,
    /// Endpoints not to claim for (lane full, paused, breaker open).
    pub exclude: Vec<String>,
    /// Endpoints with less room than `per_endpoint` (free lane slots): take at most this many.
    pub room: Vec<(String, u32)>,
    /// Tenants with little room: take at most this many of each (under its ceiling, or none of
    /// a tenant already holding slots while the pool keeps its reserve for the others).
    pub tenant_room: Vec<(String, u32)>,
    /// The claiming dispatcher's virtual time (the highest floor its claims have returned):
    /// a tenant that is newly due, or whose pass fell behind it, starts here. `None` on a
    /// dispatcher's first claim: the highest pass in the store.
    pub fair_floor: Option<f64>,
    /// What the dispatcher's previous claims took, applied to the tenants' passes first.
    pub charges: Vec<TenantCharge>,
    /// The weight of tenants without one of their own (`--tenant-weight`; 0 counts as 1).
    pub default_weight: u32,
}

/// What a claim took of one tenant: charged to its pass as `seconds ÷ weight`, from `start`
/// (its effective pass in that claim).
#[derive(Debug, Clone, PartialEq)]
pub struct TenantCharge {
    /// The tenant.
    pub tenant_id: String,
    /// Its effective pass in the claim that served it ([`Claimed::tenant_pass`]).
    pub start: f64,
    /// The expected attempt seconds of what the claim took.
    pub seconds: f64,
    /// How many deliveries the claim took (the tenant's cost per delivery is `seconds ÷` this).
    pub deliveries: u32,
}

/// What a claim leased, and the virtual time it served at.
#[derive(Debug, Clone, Default)]
pub struct ClaimBatch {
    /// The leased deliveries.
    pub claimed: Vec<Claimed>,
    /// The lowest effective pass among the tenants the claim looked at (`None`: it found no
    /// tenant with due work). The dispatcher keeps the highest it has seen as its
    /// [`ClaimRequest::fair_floor`].
    pub floor: Option<f64>,
}

/// A leased delivery, with what is needed to attempt it.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// Delivery id.
    pub delivery_id: i64,
    /// Fencing token: the settle must name it.
    pub lease_token: i64,
    /// Message id (`webhook-id`).
    pub message_id: String,
    /// Endpoint id.
    pub endpoint_id: String,
    /// Tenant id.
    pub tenant_id: String,
    /// Attempts already made.
    pub attempts: u32,
    /// Event type.
    pub event_type: String,
    /// Body to deliver.
    pub payload: String,
    /// When the message was accepted (for enqueue→delivery latency).
    pub message_created_at_ms: i64,
    /// When this delivery became claimable.
    pub visible_at_ms: i64,
    /// Its tenant's effective pass in the claim (what its charge starts from).
    pub tenant_pass: f64,
    /// Its tenant's written share policy, as the claim read it.
    pub tenant_share: SharePolicy,
}

/// What happens to a leased delivery next.
#[derive(Debug, Clone, PartialEq)]
pub enum SettleOutcome {
    /// Done.
    Delivered,
    /// Try again at `at_ms`.
    Retry {
        /// Next attempt time.
        at_ms: i64,
    },
    /// Not attempted (lane full, paused, breaker open): visible again at `at_ms`, attempts unchanged.
    Shed {
        /// When it becomes claimable again.
        at_ms: i64,
    },
    /// Dead-letter with a reason.
    Dead {
        /// Why.
        reason: String,
    },
    /// Drain: ready again now, attempts unchanged.
    Release,
}

/// One attempt's record.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRecord {
    /// When the request started.
    pub started_at_ms: i64,
    /// How long the attempt took.
    pub duration_ms: u32,
    /// HTTP status, if a response arrived.
    pub status: Option<u16>,
    /// Error kind (timeout_read, connection_refused, …) when it failed.
    pub error_kind: Option<String>,
    /// The response body, truncated.
    pub response: Option<String>,
}

/// One outcome to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Settlement {
    /// Delivery id.
    pub delivery_id: i64,
    /// The lease token held; a stale token changes nothing.
    pub lease_token: i64,
    /// What happens next.
    pub outcome: SettleOutcome,
    /// The attempt made, if one was made; its presence is what increments `attempts`.
    pub attempt: Option<AttemptRecord>,
}

/// What the reaper did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ReapReport {
    /// Expired leases returned to ready.
    pub returned: u64,
    /// Deliveries dead-lettered as poison: their lease expired too many times in a row.
    pub dead: u64,
}

/// One batch of retention: delivered history last changed before `before_ms`, walked in
/// message id order (ids sort by creation time) from `after` on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PurgeRequest {
    /// Delete delivered deliveries last changed before this instant, and messages created
    /// before it that have no delivery left.
    pub before_ms: i64,
    /// At most this many deliveries.
    pub limit: u32,
    /// Start at this message id (inclusive); empty for the start of a pass. Each batch
    /// returns where the next one starts.
    pub after: String,
}

impl PurgeRequest {
    /// The highest message id a batch reaches: every message stored before `before_ms` has an
    /// id below it (ids are made before their rows are stored, and sort by the time they were
    /// made), and so has every delivery delivered before it. No id equals it (it has no random
    /// part), so "at or below" is "below".
    pub fn id_ceiling(&self) -> String {
        crate::ids::time_floor("msg", self.before_ms)
    }

    /// Where the messages a batch may delete end: at its last delivery's message when it was
    /// full (`next`: that message may keep deliveries past the limit, and the next batch starts
    /// there), else at the ceiling (the rest of the history).
    pub fn messages_up_to(&self, next: Option<&str>) -> String {
        next.map_or_else(|| self.id_ceiling(), str::to_owned)
    }
}

/// What one batch of retention deleted, and where the next batch starts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PurgeReport {
    /// Delivered deliveries deleted (with their attempts).
    pub deliveries: u64,
    /// Messages deleted: those whose last delivery went, and those that never had one.
    pub messages: u64,
    /// The message id the next batch starts at; `None` when this pass is done.
    pub next: Option<String>,
}

/// Filter for listing deliveries.
#[derive(Debug, Clone, Default)]
pub struct DeliveryFilter {
    /// Restrict to a tenant (always set by the API).
    pub tenant_id: String,
    /// Only this message's deliveries.
    pub message_id: Option<String>,
    /// Only this endpoint's deliveries.
    pub endpoint_id: Option<String>,
    /// Only deliveries in this state.
    pub state: Option<DeliveryState>,
    /// Cursor: ids greater than this.
    pub after: Option<i64>,
    /// Page size.
    pub limit: u32,
}

/// One recorded attempt.
#[derive(Debug, Clone, Serialize)]
pub struct AttemptView {
    /// Attempt id.
    pub id: i64,
    /// Delivery id.
    pub delivery_id: i64,
    /// When it started.
    pub started_at_ms: i64,
    /// How long it took.
    pub duration_ms: u32,
    /// HTTP status, if any.
    pub status: Option<u16>,
    /// Error kind, if it failed without a status.
    pub error_kind: Option<String>,
    /// Response body, truncated.
    pub response: Option<String>,
}

/// What to make deliverable again (ready now, attempts reset, the `webhook-id` kept: the next
/// attempts are new rows of the same delivery).
#[derive(Debug, Clone)]
pub enum ReplayTarget {
    /// One dead-lettered delivery (`Conflict` in any other state).
    Delivery(i64),
    /// Every dead-lettered delivery of an endpoint.
    Endpoint(String),
    /// One delivery in any state but leased, delivered ones included (`Conflict` while an
    /// attempt is in flight: its outcome would overwrite the resend).
    Resend(i64),
    /// An endpoint's failed deliveries (dead-lettered, or waiting for a retry after a failed
    /// attempt) whose message arrived in `[since_ms, until_ms)`.
    Recover {
        /// The endpoint.
        endpoint: String,
        /// Earliest message arrival included.
        since_ms: i64,
        /// First arrival excluded.
        until_ms: i64,
    },
}

/// For a replay or resend of a delivery now in `state`: the states (as an SQL list) the update
/// may change, or why it may not happen. The reason names no id: the store knows only the row
/// number, which is never shown (the caller named the delivery by its public id).
pub(crate) fn replayable(
    target: &ReplayTarget,
    state: DeliveryState,
) -> Result<&'static str, super::StoreError> {
    match (target, state) {
        (ReplayTarget::Delivery(_), DeliveryState::Dead) => Ok("3"),
        (ReplayTarget::Delivery(_), other) => Err(super::StoreError::Conflict(format!(
            "the delivery is {}, not dead-lettered (resend it instead)",
            other.name()
        ))),
        (ReplayTarget::Resend(_), DeliveryState::Leased) => Err(super::StoreError::Conflict(
            "the delivery is being attempted now; resend it once that attempt settles".to_owned(),
        )),
        (_, _) => Ok("0, 2, 3"),
    }
}

impl ReplayTarget {
    /// What `last_error` says about a delivery made ready this way.
    pub fn reason(&self) -> &'static str {
        match self {
            ReplayTarget::Delivery(_) | ReplayTarget::Endpoint(_) => "replayed",
            ReplayTarget::Resend(_) => "resent",
            ReplayTarget::Recover { .. } => "recovered",
        }
    }
}

/// Figures for operators ([`crate::store::Store::queue_stats`]); the delivered history is
/// counted apart ([`crate::store::Store::delivered_count`]).
#[derive(Debug, Clone, Default, Serialize)]
pub struct QueueStats {
    /// Ready (due now or later).
    pub ready: u64,
    /// Leased now.
    pub leased: u64,
    /// Dead-lettered and kept.
    pub dead: u64,
    /// Per tenant: how long its oldest due ready delivery has waited (now − visible_at), ms;
    /// 0 when it has none due.
    pub oldest_ready_age_ms: Vec<(String, i64)>,
}

/// What one tenant has waiting ([`crate::store::Store::tenant_backlog`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TenantBacklog {
    /// Its endpoints with deliveries due now.
    pub due_endpoints: u64,
    /// How long its oldest due ready delivery has waited (now − visible_at), ms; 0 when none.
    pub oldest_ready_age_ms: i64,
    /// Tenants with due work now, this one included.
    pub tenants_due: u64,
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

/// A dispatcher's heartbeat: who it is and its load, rewritten every heartbeat interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Heartbeat {
    /// The dispatcher's id (`dsp_…`, new at every start).
    pub id: String,
    /// The name of the host it runs on (a pod's name on Kubernetes); empty when unknown.
    pub host: String,
    /// When it started, ms epoch.
    pub started_at_ms: i64,
    /// When this heartbeat was written, ms epoch.
    pub beat_at_ms: i64,
    /// Attempts in flight.
    pub in_flight: u32,
    /// Its global bound on in-flight attempts now.
    pub concurrency: u32,
    /// The largest bound it may reach (`--concurrency`, or the top of `auto:MIN-MAX`).
    pub capacity: u32,
    /// Offered attempts per second (delivered and failed), from its rolling windows.
    pub arrivals_per_s: f64,
    /// Mean attempt duration, seconds (0 without samples).
    pub mean_service_s: f64,
    /// Has it begun to drain?
    pub draining: bool,
    /// What it has done since it started, for fleet-wide rates on any process.
    pub tally: Tally,
    /// Its attempts' seconds per destination host since it started, for fleet-wide
    /// occupancy shares on any process.
    pub host_seconds: HostSeconds,
}

/// A dispatcher's worker-seconds (attempt durations added up) per destination host since it
/// started, carried by its heartbeat and stored as JSON text (`{"hosts":{…},"other":…}`).
/// Bounded: at most [`HostSeconds::TOP`] hosts by name, the ones busiest lately, and every
/// other host's seconds in `other`, so the sum is always the dispatcher's whole time. A named
/// host's figure is its whole time since the start, whenever it joined the named ones; like
/// the [`Tally`], every figure starts at 0 with the process. See
/// [`crate::sizing::fleet::HostShares`] for how a reader takes shares from two of them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostSeconds {
    /// Seconds per named host.
    #[serde(default)]
    pub hosts: BTreeMap<String, f64>,
    /// Seconds of every host not named.
    #[serde(default)]
    pub other: f64,
}

impl HostSeconds {
    /// Hosts named in one heartbeat at most.
    pub const TOP: usize = 32;

    /// Every host's seconds, the named ones and the others.
    pub fn total(&self) -> f64 {
        self.hosts.values().sum::<f64>() + self.other
    }

    /// As stored: JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
    }

    /// From the stored text; text that does not parse (never written by sluice) reads as none,
    /// as a dispatcher that has just started.
    pub fn from_json(text: &str) -> HostSeconds {
        let mut read: HostSeconds = serde_json::from_str(text).unwrap_or_default();
        let clean = |v: f64| if v.is_finite() { v.max(0.0) } else { 0.0 };
        read.hosts.values_mut().for_each(|v| *v = clean(*v));
        read.other = clean(read.other);
        read
    }
}

/// A dispatcher's cumulative counts since it started, carried by its heartbeat: a reader takes
/// rates from two of them (see [`crate::sizing::fleet::FleetRates`]). They start at 0 with
/// every process, so a count lower than the one before means a restart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    /// Deliveries answered 2xx.
    pub delivered: u64,
    /// Attempts that failed (retried later or dead-lettered).
    pub failed: u64,
    /// Deliveries shed at a full lane and requeued (no attempt used).
    pub shed: u64,
}
