//! Log-linear histogram of service times (about 1 ms to 1 hour, ≤ 4.2 % error), sparse.
//!
//! Each power-of-two octave of microseconds from 2^10 µs (1.024 ms) to 2^32 µs (71.6 min) is split
//! into 12 equal sub-buckets, plus one bucket for everything faster than 1.024 ms: 265 buckets.
//! Only buckets that hold a count are stored, as sorted `(bucket, count)` pairs of 8 bytes: an
//! empty histogram owns no heap memory, an endpoint whose latencies span one decade about 40
//! pairs (320 bytes), and the worst case (every bucket) 2.1 KiB. A quantile is reported at its
//! bucket's midpoint, so its relative error is at most half a bucket width over the bucket's
//! lower edge, 1/24 ≈ 4.2 %.
//! The exact minimum and maximum are kept as well and bound every answer, so a histogram of one
//! repeated value reports it exactly. Values above 71.6 min land in the last bucket.

use std::time::Duration;

/// Base-2 exponent (in µs) of the first octave: 2^10 µs = 1.024 ms.
const FIRST_OCTAVE: u32 = 10;
/// Base-2 exponent (in µs) of the last octave: [2^31, 2^32) µs = 35.8 to 71.6 min.
const LAST_OCTAVE: u32 = 31;
/// Linear sub-buckets per octave; 12 keeps the midpoint error under 5 %.
const SUB_BUCKETS: u32 = 12;
/// Number of buckets: one underflow bucket plus 22 octaves of 12.
pub const BUCKETS: usize = 1 + ((LAST_OCTAVE - FIRST_OCTAVE + 1) * SUB_BUCKETS) as usize;

/// A compact histogram of durations; `merge` adds counts bucket by bucket.
#[derive(Clone, PartialEq, Eq)]
pub struct LatencyHistogram {
    /// `(bucket, count)`, sorted by bucket, counts never zero.
    buckets: Vec<(u16, u32)>,
    count: u64,
    sum_us: u64,
    min_us: u64,
    max_us: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("count", &self.count)
            .field("mean", &self.mean())
            .field("p50", &self.quantile(0.5))
            .field("p95", &self.quantile(0.95))
            .finish()
    }
}

impl LatencyHistogram {
    /// An empty histogram.
    pub const fn new() -> Self {
        Self {
            buckets: Vec::new(),
            count: 0,
            sum_us: 0,
            min_us: u64::MAX,
            max_us: 0,
        }
    }

    /// Counts one duration.
    pub fn record(&mut self, duration: Duration) {
        let us = micros(duration);
        let index = bucket_of(us) as u16;
        match self.buckets.binary_search_by_key(&index, |&(b, _)| b) {
            Ok(at) => self.buckets[at].1 = self.buckets[at].1.saturating_add(1),
            Err(at) => self.buckets.insert(at, (index, 1)),
        }
        self.count += 1;
        self.sum_us = self.sum_us.saturating_add(us);
        self.min_us = self.min_us.min(us);
        self.max_us = self.max_us.max(us);
    }

    /// Adds every count of `other` into `self`.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        if other.count == 0 {
            return;
        }
        let mut merged = Vec::with_capacity(self.buckets.len().max(other.buckets.len()));
        let (mut a, mut b) = (
            self.buckets.iter().peekable(),
            other.buckets.iter().peekable(),
        );
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(&&(i, x)), Some(&&(j, y))) if i == j => {
                    a.next();
                    b.next();
                    (i, x.saturating_add(y))
                }
                (Some(&&(i, x)), Some(&&(j, _))) if i < j => {
                    a.next();
                    (i, x)
                }
                (_, Some(&&pair)) => {
                    b.next();
                    pair
                }
                (Some(&&pair), None) => {
                    a.next();
                    pair
                }
                (None, None) => break,
            };
            merged.push(next);
        }
        self.buckets = merged;
        self.count += other.count;
        self.sum_us = self.sum_us.saturating_add(other.sum_us);
        self.min_us = self.min_us.min(other.min_us);
        self.max_us = self.max_us.max(other.max_us);
    }

    /// The `q`-quantile (`q` in 0..=1, clamped) by nearest rank: the ⌈q·n⌉-th smallest value,
    /// reported at its bucket's midpoint within the exact min and max. `None` when empty.
    ///
    /// With exactly 5 % slow samples the p95 is still a fast one; it takes more than 5 % to move it.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.count == 0 {
            return None;
        }
        let q = if q.is_nan() { 1.0 } else { q.clamp(0.0, 1.0) };
        // Precision of f64 is ample for any count a window can hold.
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        // The smallest and largest values are known exactly.
        if rank == 1 {
            return Some(Duration::from_micros(self.min_us));
        }
        if rank == self.count {
            return Some(Duration::from_micros(self.max_us));
        }
        let mut seen = 0u64;
        for &(index, n) in &self.buckets {
            seen += u64::from(n);
            if seen >= rank {
                let mid = bucket_midpoint_us(usize::from(index)).round() as u64;
                return Some(Duration::from_micros(mid.clamp(self.min_us, self.max_us)));
            }
        }
        // Only reachable if a bucket saturated at u32::MAX: the largest value is the honest answer.
        Some(Duration::from_micros(self.max_us))
    }

    /// The exact arithmetic mean (to the microsecond); `None` when empty.
    pub fn mean(&self) -> Option<Duration> {
        (self.count > 0).then(|| Duration::from_micros(self.sum_us / self.count))
    }

    /// How many durations were recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Forgets everything and gives its heap memory back.
    pub fn clear(&mut self) {
        *self = Self::new();
    }

    /// Bytes it occupies, its heap included.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.buckets.capacity() * std::mem::size_of::<(u16, u32)>()
    }
}

/// A duration in whole microseconds, saturating far beyond any real delivery.
fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// The bucket index of a value in microseconds.
fn bucket_of(us: u64) -> usize {
    if us < 1 << FIRST_OCTAVE {
        return 0;
    }
    let us = us.min((1 << (LAST_OCTAVE + 1)) - 1);
    let octave = us.ilog2();
    let offset = us - (1 << octave);
    let sub = (offset * u64::from(SUB_BUCKETS)) >> octave;
    1 + ((octave - FIRST_OCTAVE) * SUB_BUCKETS) as usize + sub as usize
}

/// The middle of a bucket in microseconds: the value reported for every sample in it.
fn bucket_midpoint_us(index: usize) -> f64 {
    if index == 0 {
        return f64::from(1u32 << FIRST_OCTAVE) / 2.0;
    }
    let i = (index - 1) as u32;
    let base = (1u64 << (FIRST_OCTAVE + i / SUB_BUCKETS)) as f64;
    base * (1.0 + (f64::from(i % SUB_BUCKETS) + 0.5) / f64::from(SUB_BUCKETS))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn within(actual: Duration, expected: Duration, tolerance: f64) -> bool {
        let (a, e) = (actual.as_secs_f64(), expected.as_secs_f64());
        (a - e).abs() <= e * tolerance
    }

    #[test]
    fn memory_follows_the_buckets_in_use() {
        assert_eq!(BUCKETS, 265);
        let mut h = LatencyHistogram::new();
        assert_eq!(h.memory_bytes(), std::mem::size_of::<LatencyHistogram>());
        assert!(h.memory_bytes() <= 64);
        // One decade of latencies (20–200 ms) fills about 40 buckets.
        for n in 20..=200 {
            h.record(ms(n));
        }
        assert!(h.memory_bytes() <= 64 + 64 * 8, "{}", h.memory_bytes());
        // Every bucket: the worst case stays near 2 KiB.
        let mut us = 1u64;
        while us < 1 << 33 {
            h.record(Duration::from_micros(us));
            us = us * 21 / 20 + 1;
        }
        assert!(h.memory_bytes() <= 64 + 512 * 8, "{}", h.memory_bytes());
        h.clear();
        assert_eq!(h.memory_bytes(), std::mem::size_of::<LatencyHistogram>());
    }

    #[test]
    fn every_bucket_midpoint_is_within_five_percent_of_its_values() {
        // Walk values geometrically from 1.1 ms to an hour and check the reported midpoint.
        let mut us = 1_100u64;
        while us <= 3_600_000_000 {
            let mid = bucket_midpoint_us(bucket_of(us));
            assert!(
                (mid - us as f64).abs() <= us as f64 * 0.05,
                "{us} µs reported as {mid}"
            );
            us = us * 101 / 100 + 1;
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn uniform_quantiles_within_five_percent() {
        let mut h = LatencyHistogram::new();
        for n in 1..=1000 {
            h.record(ms(n));
        }
        assert_eq!(h.count(), 1000);
        for (q, expected) in [(0.5, 500), (0.95, 950), (0.99, 990), (0.1, 100)] {
            let got = h.quantile(q).unwrap();
            assert!(within(got, ms(expected), 0.05), "q{q}: {got:?}");
        }
        assert!(within(
            h.mean().unwrap(),
            Duration::from_micros(500_500),
            0.001
        ));
        assert_eq!(h.quantile(0.0), Some(ms(1)));
        assert_eq!(h.quantile(1.0), Some(ms(1000)));
    }

    #[test]
    fn bimodal_quantiles_find_the_slow_mode() {
        let mut h = LatencyHistogram::new();
        for i in 0..1000 {
            h.record(if i % 20 == 0 { ms(25_000) } else { ms(80) });
        }
        assert!(within(h.quantile(0.5).unwrap(), ms(80), 0.05));
        // Exactly 5 % slow: by nearest rank the 950th value is still fast.
        assert!(within(h.quantile(0.95).unwrap(), ms(80), 0.05));
        assert!(within(h.quantile(0.99).unwrap(), ms(25_000), 0.05));
        // One more slow sample per hundred moves the p95 onto the slow mode.
        let mut more = LatencyHistogram::new();
        for i in 0..1000 {
            more.record(if i % 100 < 6 { ms(25_000) } else { ms(80) });
        }
        assert!(within(more.quantile(0.95).unwrap(), ms(25_000), 0.05));
    }

    #[test]
    fn merge_equals_recording_everything_in_one() {
        let mut a = LatencyHistogram::new();
        let mut b = LatencyHistogram::new();
        let mut all = LatencyHistogram::new();
        for n in 0..500u64 {
            let d = ms(n * 37 % 4000 + 1);
            if n % 3 == 0 {
                a.record(d);
            } else {
                b.record(d);
            }
            all.record(d);
        }
        a.merge(&b);
        assert_eq!(a, all);
    }

    #[test]
    fn empty_clear_and_extremes() {
        let mut h = LatencyHistogram::new();
        assert_eq!((h.quantile(0.5), h.mean(), h.count()), (None, None, 0));
        h.record(Duration::from_micros(300));
        h.record(Duration::from_micros(300));
        assert_eq!(h.quantile(0.99), Some(Duration::from_micros(300)));
        h.record(Duration::from_secs(10_000));
        assert_eq!(h.quantile(1.0), Some(Duration::from_secs(10_000)));
        h.clear();
        assert_eq!(h, LatencyHistogram::new());
    }
}
