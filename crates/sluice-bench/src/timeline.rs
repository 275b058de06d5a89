//! What the bench receivers saw, second by second: per group of endpoints (healthy, slow, …) a
//! latency histogram and status counts for every second of the run, plus producer counters.
//!
//! Latency is enqueue → delivery: the receiver's arrival time minus the `sent_at_us` the
//! producer wrote into the payload just before it POSTed the message.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sluice::stats::LatencyHistogram;

/// Microseconds since the Unix epoch, now (the clock written into payloads).
pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// One second of one group.
#[derive(Debug, Default, Clone)]
pub(crate) struct Second {
    /// Enqueue → delivery latency of the 2xx answers in this second.
    pub latency: LatencyHistogram,
    /// Requests answered 2xx.
    pub ok: u64,
    /// Requests answered 429.
    pub throttled: u64,
}

/// Everything recorded for one group.
#[derive(Debug, Default)]
struct GroupData {
    seconds: Vec<Second>,
}

/// Producer-side counters of one group.
#[derive(Debug, Default)]
struct Counters {
    sent: AtomicU64,
    accepted: AtomicU64,
    errors: AtomicU64,
    /// POST → answer time of accepted messages (the ingest share of the latency).
    ingest: Mutex<LatencyHistogram>,
}

/// The per-second record of one bench phase.
#[derive(Debug)]
pub(crate) struct Timeline {
    base: Instant,
    /// Microseconds after `base` at which second 0 starts (moved by [`Timeline::restart`]).
    start_us: AtomicU64,
    names: Vec<&'static str>,
    data: Vec<Mutex<GroupData>>,
    counters: Vec<Counters>,
}

impl Timeline {
    /// A timeline starting now with these groups (indexed in this order).
    pub(crate) fn new(names: &[&'static str]) -> Self {
        Self {
            base: Instant::now(),
            start_us: AtomicU64::new(0),
            names: names.to_vec(),
            data: names.iter().map(|_| Mutex::default()).collect(),
            counters: names.iter().map(|_| Counters::default()).collect(),
        }
    }

    fn since_start(&self) -> Duration {
        let start = Duration::from_micros(self.start_us.load(Ordering::Relaxed));
        self.base.elapsed().saturating_sub(start)
    }

    /// Make second 0 start now (after the set-up, before the load).
    pub(crate) fn restart(&self) {
        let now = self.base.elapsed().as_micros() as u64;
        self.start_us.store(now, Ordering::Relaxed);
    }

    /// Seconds since the timeline started.
    pub(crate) fn elapsed(&self) -> f64 {
        self.since_start().as_secs_f64()
    }

    /// The group names.
    pub(crate) fn names(&self) -> &[&'static str] {
        &self.names
    }

    fn with_second(&self, group: usize, f: impl FnOnce(&mut Second)) {
        let index = self.since_start().as_secs() as usize;
        let mut data = self.data[group].lock().unwrap_or_else(|p| p.into_inner());
        if data.seconds.len() <= index {
            data.seconds.resize_with(index + 1, Second::default);
        }
        f(&mut data.seconds[index]);
    }

    /// A 2xx delivery of a message sent at `sent_at_us` (None when the body had no stamp).
    pub(crate) fn delivered(&self, group: usize, sent_at_us: Option<u64>) {
        let latency = sent_at_us.map(|sent| Duration::from_micros(now_us().saturating_sub(sent)));
        self.with_second(group, |s| {
            s.ok += 1;
            if let Some(l) = latency {
                s.latency.record(l);
            }
        });
    }

    /// A 429 answered by a receiver of `group`.
    pub(crate) fn throttled(&self, group: usize) {
        self.with_second(group, |s| s.throttled += 1);
    }

    /// A producer POSTed a message for `group`, answered after `took`; `ok` when accepted.
    pub(crate) fn sent(&self, group: usize, ok: bool, took: Duration) {
        let c = &self.counters[group];
        c.sent.fetch_add(1, Ordering::Relaxed);
        if ok {
            c.accepted.fetch_add(1, Ordering::Relaxed);
            c.ingest
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .record(took);
        } else {
            c.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `n` messages of `group` written straight into the store (no POST to time).
    pub(crate) fn stored(&self, group: usize, n: u64) {
        let c = &self.counters[group];
        c.sent.fetch_add(n, Ordering::Relaxed);
        c.accepted.fetch_add(n, Ordering::Relaxed);
    }

    /// Messages the API accepted for `group`.
    pub(crate) fn accepted(&self, group: usize) -> u64 {
        self.counters[group].accepted.load(Ordering::Relaxed)
    }

    /// POST → answer times of the messages accepted for `group`.
    pub(crate) fn ingest_latency(&self, group: usize) -> LatencyHistogram {
        self.counters[group]
            .ingest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// POSTs that failed for `group`.
    pub(crate) fn errors(&self, group: usize) -> u64 {
        self.counters[group].errors.load(Ordering::Relaxed)
    }

    /// A copy of every second recorded for `group`.
    pub(crate) fn seconds(&self, group: usize) -> Vec<Second> {
        self.data[group]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .seconds
            .clone()
    }

    /// 2xx deliveries of `group` so far.
    pub(crate) fn delivered_total(&self, group: usize) -> u64 {
        let data = self.data[group].lock().unwrap_or_else(|p| p.into_inner());
        data.seconds.iter().map(|s| s.ok).sum()
    }

    /// 2xx deliveries of `group` within `[from_s, to_s)`.
    pub(crate) fn delivered_between(&self, group: usize, from_s: usize, to_s: usize) -> u64 {
        let data = self.data[group].lock().unwrap_or_else(|p| p.into_inner());
        data.seconds
            .iter()
            .enumerate()
            .filter(|(i, _)| *i >= from_s && *i < to_s)
            .map(|(_, s)| s.ok)
            .sum()
    }

    /// The latency histogram of `group` over the seconds from `from_s` on (skipping warm-up).
    pub(crate) fn latency_from(&self, group: usize, from_s: usize) -> LatencyHistogram {
        let data = self.data[group].lock().unwrap_or_else(|p| p.into_inner());
        let mut out = LatencyHistogram::new();
        for s in data.seconds.iter().skip(from_s) {
            out.merge(&s.latency);
        }
        out
    }

    /// The latency histogram of `group` over the seconds `[from_s, to_s)`.
    pub(crate) fn latency_between(
        &self,
        group: usize,
        from_s: usize,
        to_s: usize,
    ) -> LatencyHistogram {
        let data = self.data[group].lock().unwrap_or_else(|p| p.into_inner());
        let mut out = LatencyHistogram::new();
        for s in data.seconds.iter().take(to_s).skip(from_s) {
            out.merge(&s.latency);
        }
        out
    }

    /// `(second, quantile in ms)` for every second of `group` with at least one delivery.
    pub(crate) fn quantile_series(&self, group: usize, q: f64) -> Vec<(f64, f64)> {
        self.seconds(group)
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i as f64, ms(s.latency.quantile(q)?))))
            .collect()
    }

    /// `(second, count)` per second of `group`, for `field` ok or throttled.
    pub(crate) fn count_series(&self, group: usize, throttled: bool) -> Vec<(f64, f64)> {
        self.seconds(group)
            .iter()
            .enumerate()
            .map(|(i, s)| (i as f64, if throttled { s.throttled } else { s.ok } as f64))
            .collect()
    }
}

/// A duration in milliseconds.
pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Pull `"sent_at_us":N` out of a payload without parsing the rest of it.
pub(crate) fn sent_at_us(body: &[u8]) -> Option<u64> {
    u64_field(body, "sent_at_us")
}

/// Pull the unsigned integer `"name":N` out of a payload without parsing the rest of it.
pub(crate) fn u64_field(body: &[u8], name: &str) -> Option<u64> {
    let key = format!("\"{name}\":");
    let key = key.as_bytes();
    let start = body.windows(key.len()).position(|w| w == key)? + key.len();
    let digits = body[start..]
        .iter()
        .skip_while(|b| **b == b' ')
        .take_while(|b| b.is_ascii_digit());
    let mut n: u64 = 0;
    let mut any = false;
    for d in digits {
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        any = true;
    }
    any.then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_stamp() {
        assert_eq!(sent_at_us(br#"{"sent_at_us":1234,"seq":1}"#), Some(1234));
        assert_eq!(sent_at_us(br#"{"seq":1, "sent_at_us": 99}"#), Some(99));
        assert_eq!(sent_at_us(br#"{"seq":1}"#), None);
        assert_eq!(
            u64_field(br#"{"sent_at_us":5,"c":3,"seq":17}"#, "seq"),
            Some(17)
        );
        assert_eq!(u64_field(br#"{"sent_at_us":5,"c":3}"#, "c"), Some(3));
    }

    #[test]
    fn counts_by_second_and_group() {
        let t = Timeline::new(&["healthy", "slow"]);
        t.delivered(0, Some(now_us() - 5_000));
        t.delivered(0, None);
        t.throttled(1);
        t.sent(0, true, Duration::from_millis(3));
        t.sent(0, false, Duration::from_millis(1));
        assert_eq!((t.accepted(0), t.errors(0)), (1, 1));
        assert_eq!(t.ingest_latency(0).count(), 1);
        assert_eq!(t.delivered_total(0), 2);
        assert_eq!(t.seconds(1)[0].throttled, 1);
        let h = t.latency_from(0, 0);
        assert_eq!(h.count(), 1);
        assert!(h.quantile(0.5).unwrap() >= Duration::from_millis(5));
    }
}
