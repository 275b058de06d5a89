//! Rolling per-endpoint window: a ring of sub-windows, each with latency histograms (delivered and
//! failed attempts apart, so capacity is judged from deliveries only) and outcome counters
//! (failures by how they failed).
//!
//! Time is cut into periods of one slot length counted from the window's origin; period `p` lives
//! in slot `p % slots`. A slot still holding an older period is reset when that period is first
//! written, and a snapshot only reads slots whose period is among the last `slots`, so nothing
//! is ever swept: a record is O(1) and a snapshot is O(slots × buckets).

use std::time::Duration;

use tokio::time::Instant;

use super::failures::{AttemptKind, FailureCounts};
use super::{LatencyHistogram, WindowSnapshot};

/// Window length unless configured: five minutes, as in the latency breaker's window.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(300);
/// Sub-windows per window unless configured: ten, so a 300 s window moves in steps of 30 s.
pub const DEFAULT_SLOTS: u32 = 10;
/// Upper bound on sub-windows, to keep memory per endpoint fixed.
pub const MAX_SLOTS: u32 = 1000;
/// Rates divide by at least this span (or one slot, if shorter), so a window that saw its first
/// event a microsecond ago does not report a million events per second.
const MIN_RATE_SPAN: Duration = Duration::from_secs(1);

/// What happened to deliveries within one sub-window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counters {
    offered: u64,
    delivered: u64,
    failed: u64,
    shed: u64,
    held: u64,
    rate_limited: u64,
    failures: FailureCounts,
}

impl Counters {
    fn add(&mut self, other: &Counters) {
        self.offered += other.offered;
        self.delivered += other.delivered;
        self.failed += other.failed;
        self.shed += other.shed;
        self.held += other.held;
        self.rate_limited += other.rate_limited;
        self.failures.add(&other.failures);
    }
}

/// One slot's response times: delivered attempts and failed ones apart. A healthy endpoint
/// fills only the first and a dead one only the second, and an empty histogram owns no heap,
/// so the split costs memory only where both happen.
#[derive(Clone, Debug, Default)]
struct Latencies {
    delivered: LatencyHistogram,
    failed: LatencyHistogram,
}

/// One sub-window: the period it currently holds and its counters.
#[derive(Clone, Debug, Default)]
struct Slot {
    period: u64,
    counters: Counters,
}

/// A rolling window of deliveries to one endpoint.
///
/// Offered, shed and held deliveries are counted but are not attempts; only `record_attempt`
/// adds a response time. Records older than the whole window are dropped.
#[derive(Clone, Debug)]
pub struct Window {
    origin: Instant,
    slot_length: Duration,
    slots: Vec<Slot>,
    /// Response times per slot; empty for a counters-only window.
    histograms: Vec<Latencies>,
    /// The latest period written to, so a late `now` cannot resurrect an expired slot.
    head: u64,
}

impl Window {
    /// A window of `length` split into `slots` sub-windows, starting at `now`.
    ///
    /// `slots` is clamped to 1..=[`MAX_SLOTS`] and each slot lasts at least 1 ms; the effective
    /// length is `slots × slot length` (see [`Window::length`]).
    pub fn new(now: Instant, length: Duration, slots: u32) -> Self {
        let mut window = Self::counters_only(now, length, slots);
        window.histograms = vec![Latencies::default(); window.slots.len()];
        window
    }

    /// Like [`Window::new`] but keeping no latency histograms (about 1 KiB less per slot):
    /// snapshots then report counts and rates with no quantiles or mean.
    pub fn counters_only(now: Instant, length: Duration, slots: u32) -> Self {
        let slots = slots.clamp(1, MAX_SLOTS);
        let slot_length = (length / slots).max(Duration::from_millis(1));
        Self {
            origin: now,
            slot_length,
            slots: vec![Slot::default(); slots as usize],
            histograms: Vec::new(),
            head: 0,
        }
    }

    /// The effective window length: slot length × number of slots.
    pub fn length(&self) -> Duration {
        self.slot_length * self.slots.len() as u32
    }

    /// The length of one sub-window: how far the window moves at a time.
    pub fn slot_length(&self) -> Duration {
        self.slot_length
    }

    /// Records one attempt that took `duration`: delivered (2xx) when `ok`, failed otherwise
    /// (counted as [`AttemptKind::Other`]; [`Window::record`] says how it failed).
    pub fn record_attempt(&mut self, now: Instant, duration: Duration, ok: bool) {
        let kind = if ok {
            AttemptKind::Delivered
        } else {
            AttemptKind::Other
        };
        self.record(now, duration, kind);
    }

    /// Records one attempt that took `duration` and ended as `kind`.
    pub fn record(&mut self, now: Instant, duration: Duration, kind: AttemptKind) {
        if let Some(i) = self.slot_at(now) {
            let counters = &mut self.slots[i].counters;
            let delivered = kind == AttemptKind::Delivered;
            if delivered {
                counters.delivered += 1;
            } else {
                counters.failed += 1;
                counters.failures.record(kind);
            }
            if let Some(latencies) = self.histograms.get_mut(i) {
                match delivered {
                    true => latencies.delivered.record(duration),
                    false => latencies.failed.record(duration),
                }
            }
        }
    }

    /// Records a delivery that reached admission.
    pub fn record_offered(&mut self, now: Instant) {
        if let Some(i) = self.slot_at(now) {
            self.slots[i].counters.offered += 1;
        }
    }

    /// Records a delivery shed because the lane was full (not an attempt).
    pub fn record_shed(&mut self, now: Instant) {
        if let Some(i) = self.slot_at(now) {
            self.slots[i].counters.shed += 1;
        }
    }

    /// Records a delivery held back by a pause or an open breaker (not an attempt).
    pub fn record_held(&mut self, now: Instant) {
        if let Some(i) = self.slot_at(now) {
            self.slots[i].counters.held += 1;
        }
    }

    /// Records a delivery held by the endpoint's rate limit (not an attempt).
    pub fn record_rate_limited(&mut self, now: Instant) {
        if let Some(i) = self.slot_at(now) {
            self.slots[i].counters.rate_limited += 1;
        }
    }

    /// Forgets everything and starts again at `now`.
    pub fn clear(&mut self, now: Instant) {
        self.origin = now;
        self.head = 0;
        self.slots.fill(Slot::default());
        self.histograms.iter_mut().for_each(Latencies::clear);
    }

    /// All response times still inside the window at `now`, merged.
    pub fn histogram(&self, now: Instant) -> LatencyHistogram {
        self.merged(now, true)
    }

    /// The response times of delivered attempts still inside the window at `now`.
    pub fn delivered_histogram(&self, now: Instant) -> LatencyHistogram {
        self.merged(now, false)
    }

    fn merged(&self, now: Instant, with_failed: bool) -> LatencyHistogram {
        let mut merged = LatencyHistogram::new();
        for i in self.live(now) {
            if let Some(latencies) = self.histograms.get(i) {
                merged.merge(&latencies.delivered);
                if with_failed {
                    merged.merge(&latencies.failed);
                }
            }
        }
        merged
    }

    /// The figures over the window as it stands at `now`.
    pub fn snapshot(&self, now: Instant) -> WindowSnapshot {
        let mut counts = Counters::default();
        for i in self.live(now) {
            counts.add(&self.slots[i].counters);
        }
        let latencies = self.histogram(now);
        let delivered = self.delivered_histogram(now);
        let span = self.covered_span(now);
        let per_s = span.max(MIN_RATE_SPAN.min(self.slot_length)).as_secs_f64();
        let attempts = counts.delivered + counts.failed;
        WindowSnapshot {
            span,
            samples: attempts,
            mean: latencies.mean(),
            p50: latencies.quantile(0.50),
            p95: latencies.quantile(0.95),
            p99: latencies.quantile(0.99),
            offered_per_s: counts.offered as f64 / per_s,
            delivered_per_s: counts.delivered as f64 / per_s,
            failed_per_s: counts.failed as f64 / per_s,
            shed_per_s: counts.shed as f64 / per_s,
            held_per_s: counts.held as f64 / per_s,
            rate_limited_per_s: counts.rate_limited as f64 / per_s,
            shed_share: ratio(counts.shed, counts.offered).min(1.0),
            failure_ratio: ratio(counts.failed, attempts),
            delivered_p95: delivered.quantile(0.95),
            delivered: counts.delivered,
            failures: counts.failures,
        }
    }

    /// Did nothing happen within the window as it stands at `now` (no offer, attempt, shed or
    /// hold in any live slot)?
    pub fn is_idle(&self, now: Instant) -> bool {
        self.live(now)
            .all(|i| self.slots[i].counters == Counters::default())
    }

    /// The period `now` falls in, counted in slots from the origin.
    fn period(&self, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.origin).as_nanos();
        u64::try_from(elapsed / self.slot_length.as_nanos()).unwrap_or(u64::MAX)
    }

    /// The slot to write to at `now`, reset first if it held an older period; `None` if `now`
    /// is older than the whole window.
    fn slot_at(&mut self, now: Instant) -> Option<usize> {
        let period = self.period(now);
        self.head = self.head.max(period);
        let n = self.slots.len() as u64;
        if self.head - period >= n {
            return None;
        }
        let i = (period % n) as usize;
        let slot = &mut self.slots[i];
        if slot.period < period {
            *slot = Slot {
                period,
                counters: Counters::default(),
            };
            if let Some(latencies) = self.histograms.get_mut(i) {
                latencies.clear();
            }
        }
        // A slot already holding a newer period cannot happen once the head check passed.
        (slot.period == period).then_some(i)
    }

    /// Indices of the slots whose period is among the last `slots` at `now`.
    fn live(&self, now: Instant) -> impl Iterator<Item = usize> + '_ {
        let newest = self.period(now).max(self.head);
        let n = self.slots.len() as u64;
        self.slots
            .iter()
            .enumerate()
            .filter(move |(_, slot)| slot.period <= newest && newest - slot.period < n)
            .map(|(i, _)| i)
    }

    /// The time the live slots cover: from the start of the oldest live period (or the origin,
    /// while the window is younger than its length) to `now`.
    fn covered_span(&self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.origin);
        let oldest = (self.period(now) + 1).saturating_sub(self.slots.len() as u64);
        let before = self.slot_length.as_nanos() * u128::from(oldest);
        let covered = elapsed.as_nanos().saturating_sub(before);
        Duration::from_nanos(u64::try_from(covered).unwrap_or(u64::MAX))
    }
}

impl Latencies {
    fn clear(&mut self) {
        self.delivered.clear();
        self.failed.clear();
    }
}

/// `part ÷ whole`, or 0 when the whole is 0.
fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn slots_expire_as_paused_time_advances() {
        let mut window = Window::new(Instant::now(), secs(300), 10);
        for _ in 0..20 {
            window.record_attempt(Instant::now(), secs(25), true);
        }
        tokio::time::advance(secs(150)).await;
        for _ in 0..20 {
            window.record_attempt(Instant::now(), ms(100), false);
        }
        let both = window.snapshot(Instant::now());
        assert_eq!((both.samples, both.failure_ratio), (40, 0.5));
        assert_eq!(both.p99.map(|p| p.as_secs()), Some(25));

        // 300 s after the first records their slot has left the window; the later ones remain.
        tokio::time::advance(secs(150)).await;
        let later = window.snapshot(Instant::now());
        assert_eq!((later.samples, later.failure_ratio), (20, 1.0));
        assert!(later.p99.unwrap() < ms(110));

        tokio::time::advance(secs(300)).await;
        let empty = window.snapshot(Instant::now());
        assert_eq!((empty.samples, empty.p95, empty.mean), (0, None, None));
        assert_eq!(window.histogram(Instant::now()).count(), 0);
    }

    #[test]
    fn a_slot_is_reused_only_for_its_next_period() {
        let start = Instant::now();
        let mut window = Window::new(start, secs(10), 10);
        window.record_offered(start + ms(500));
        window.record_offered(start + ms(10_500)); // same slot, next lap: the old count is reset
        let snap = window.snapshot(start + ms(10_900));
        assert_eq!(snap.offered_per_s * snap.span.as_secs_f64(), 1.0);
        // A record older than the whole window is dropped rather than counted as new.
        window.record_offered(start + ms(200));
        assert_eq!(window.snapshot(start + ms(10_900)), snap);
    }

    #[test]
    fn rates_over_a_young_window_divide_by_its_age() {
        let start = Instant::now();
        let mut window = Window::new(start, secs(300), 10);
        for i in 0..60 {
            window.record_offered(start + ms(i * 500));
        }
        let young = window.snapshot(start + secs(30));
        assert_eq!(young.span, secs(30));
        assert!((young.offered_per_s - 2.0).abs() < 1e-9);

        // Once full, the span is the live slots: nine whole ones plus the current part.
        let full = window.snapshot(start + secs(615));
        assert_eq!(full.span, secs(285));
        assert_eq!(full.offered_per_s, 0.0);

        // No division by zero at the origin, and no absurd rate from a first event.
        window.clear(start);
        window.record_offered(start);
        let first = window.snapshot(start);
        assert_eq!((first.span, first.offered_per_s), (Duration::ZERO, 1.0));
        assert_eq!(window.snapshot(start - secs(5)).span, Duration::ZERO);
    }

    #[test]
    fn shed_share_and_failure_ratio() {
        let start = Instant::now();
        let mut window = Window::new(start, secs(60), 6);
        let nothing = window.snapshot(start + secs(1));
        assert_eq!((nothing.shed_share, nothing.failure_ratio), (0.0, 0.0));
        for i in 0..100 {
            let now = start + ms(i * 100);
            window.record_offered(now);
            match i % 4 {
                0 => window.record_shed(now),
                1 => window.record_held(now),
                2 => window.record_attempt(now, ms(40), false),
                _ => window.record_attempt(now, ms(40), true),
            }
        }
        let snap = window.snapshot(start + secs(10));
        assert_eq!(
            (snap.shed_share, snap.failure_ratio, snap.samples),
            (0.25, 0.5, 50)
        );
        assert!((snap.offered_per_s - 10.0).abs() < 1e-9);
        assert!((snap.shed_per_s - 2.5).abs() < 1e-9);
        assert!((snap.held_per_s - 2.5).abs() < 1e-9);
        assert!((snap.delivered_per_s - 2.5).abs() < 1e-9);
        assert!((snap.failed_per_s - 2.5).abs() < 1e-9);
    }

    #[test]
    fn counters_only_keeps_no_latencies() {
        let start = Instant::now();
        let mut window = Window::counters_only(start, secs(60), 0);
        assert_eq!(
            (window.length(), window.slot_length()),
            (secs(60), secs(60))
        );
        window.record_attempt(start, secs(3), false);
        let snap = window.snapshot(start + secs(2));
        assert_eq!((snap.samples, snap.p50, snap.failure_ratio), (1, None, 1.0));
    }

    #[test]
    fn snapshot_serialises_seconds() {
        let start = Instant::now();
        let mut window = Window::new(start, secs(300), 10);
        window.record_attempt(start, ms(1500), true);
        let json = serde_json::to_value(window.snapshot(start + secs(10))).unwrap();
        assert_eq!(
            (json["p95_s"].as_f64(), json["span_s"].as_f64()),
            (Some(1.5), Some(10.0))
        );
        assert_eq!(json["samples"], 1);
    }
}
