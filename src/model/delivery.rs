//! Deliveries: one per message × subscribed endpoint, the state each is in, the attempts made
//! at it, how they are listed, and what makes them deliverable again.

use serde::Serialize;

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
    /// The trace it is a span of, 32 lower-case hex digits: the message's (its producer's
    /// `traceparent`, else one derived from the message id, see [`super::trace_id_of`]).
    pub trace_id: String,
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
