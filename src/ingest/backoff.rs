//! How long a source waits before trying again: after a broker connection fails, or while the
//! store cannot take a message. Doubling from 100 ms to 30 s, back to the start after a success.

use std::time::Duration;

/// The first wait.
pub const FIRST: Duration = Duration::from_millis(100);

/// The longest wait.
pub const LONGEST: Duration = Duration::from_secs(30);

/// Exponential backoff: pure, the caller sleeps.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { next: FIRST }
    }
}

impl Backoff {
    /// The wait after one more failure.
    pub fn failed(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(LONGEST);
        wait
    }

    /// A success: the next failure waits [`FIRST`] again.
    pub fn succeeded(&mut self) {
        self.next = FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_to_the_longest_and_start_over_after_a_success() {
        let mut b = Backoff::default();
        let waits: Vec<_> = (0..12).map(|_| b.failed()).collect();
        assert_eq!(waits[0], FIRST);
        assert_eq!(waits[1], FIRST * 2);
        assert_eq!(*waits.last().unwrap(), LONGEST);
        assert!(waits.windows(2).all(|w| w[0] <= w[1]));
        b.succeeded();
        assert_eq!(b.failed(), FIRST);
    }
}
