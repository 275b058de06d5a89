//! The queue's requests and reports: claims and what they charge tenants, leased deliveries,
//! settlements and the attempts they record, reaping, retention, and the queue's figures.

use serde::Serialize;

use super::tenant::SharePolicy;

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
    /// The producer's `traceparent` kept with the message, if it sent one.
    pub traceparent: Option<String>,
    /// The producer's `tracestate` kept with the message, if it sent one.
    pub tracestate: Option<String>,
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
