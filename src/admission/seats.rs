//! A tenant's seats in this dispatcher's pool: how many attempts it holds now, and the guard
//! that holds one. Admission takes a seat last, under the tenant's ceiling, so a tenant never
//! holds more of the pool than its written policy allows, at any moment, whatever the claim
//! saw ([`crate::fairness`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// One tenant's attempts holding a slot of the pool in this process.
#[derive(Debug, Default)]
pub struct Seats {
    held: AtomicU32,
}

impl Seats {
    /// Attempts it holds now.
    pub fn held(&self) -> u32 {
        self.held.load(Ordering::Acquire)
    }

    /// Take a seat if it holds fewer than `ceiling`; atomically.
    pub fn try_take(self: &Arc<Self>, ceiling: u32) -> Option<Seat> {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < ceiling).then_some(n + 1)
            })
            .ok()
            .map(|_| Seat(self.clone()))
    }
}

/// A seat held; dropping it gives it back.
#[derive(Debug)]
pub struct Seat(Arc<Seats>);

impl Drop for Seat {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seats_stop_at_the_ceiling_and_come_back_when_dropped() {
        let seats = Arc::new(Seats::default());
        let taken: Vec<Seat> = (0..3).filter_map(|_| seats.try_take(3)).collect();
        assert_eq!((taken.len(), seats.held()), (3, 3));
        assert!(seats.try_take(3).is_none());
        drop(taken);
        assert_eq!(seats.held(), 0);
        assert!(seats.try_take(1).is_some());
    }
}
