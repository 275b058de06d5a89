//! Why a claimed delivery is turned away rather than attempted: it keeps no slot or permit,
//! and the caller requeues it (a hold never uses a retry, never feeds the error breaker).

use tokio::time::Instant;

/// Why a claimed delivery is not attempted now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// The endpoint is disabled.
    Disabled,
    /// A Retry-After pause runs until then (or for a moment, when it has no end).
    Paused {
        /// When the pause ends.
        until: Option<Instant>,
    },
    /// The breaker is open until then.
    BreakerOpen {
        /// When it lets a probe through.
        until: Instant,
    },
    /// The endpoint's rate limit has no turn before then.
    RateLimited {
        /// The exact instant its next turn is free.
        until: Instant,
    },
    /// No lane slot (this process's, or the fleet's) within the acquisition deadline.
    Shed,
    /// The tenant holds all the pool its ceiling allows.
    TenantFull,
    /// Drain began before the attempt.
    Draining,
}
