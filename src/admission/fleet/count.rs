//! This process's fleet-wide admissions to one endpoint, counted so that a Redis outage never
//! lets it admit more than it held when the outage began.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio::time::Instant;

/// This process's fleet-wide admissions to one endpoint: how many it has in flight, and how
/// many it held when the current Redis outage began.
#[derive(Debug, Default)]
pub struct FleetCount {
    in_flight: AtomicU32,
    at_outage: Mutex<Option<(Instant, u32)>>,
}

impl FleetCount {
    /// Attempts in flight under fleet admission.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Count one more if fewer than `limit` are in flight; atomically.
    pub(in crate::admission) fn try_reserve(&self, limit: u32) -> bool {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok()
    }

    pub(in crate::admission) fn reserve(&self) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
    }

    pub(in crate::admission) fn unreserve(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }

    /// How many were in flight when the outage that began at `since` was first seen here.
    pub(in crate::admission) fn held_at_outage(&self, since: Instant) -> u32 {
        let mut at = self.at_outage.lock().unwrap_or_else(|p| p.into_inner());
        match *at {
            Some((seen, n)) if seen == since => n,
            _ => {
                let n = self.in_flight();
                *at = Some((since, n));
                n
            }
        }
    }
}
