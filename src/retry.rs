//! Retry schedule with jitter, shed requeue delays and `Retry-After` parsing: pure functions of their inputs.
//!
//! Randomness and the clock are passed in (`jitter_sample`, `now_ms`, `now`) so every function here is
//! deterministic under test; the `*_random` conveniences draw the sample from `rand` for callers.

use std::time::{Duration, SystemTime};

use rand::Rng;

use crate::setting::{Problems, SettingProblem, shown};

/// The longest single delay a schedule or shed range may hold; keeps millisecond arithmetic exact.
pub const MAX_DELAY: Duration = Duration::from_secs(30 * 24 * 3600);

/// When a failed delivery is tried again, and when it is dead-lettered instead.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrySchedule {
    /// Nominal delay before each retry, in order: entry `i` follows attempt `i + 1`; each in
    /// `(0 s, 30 days]`. The delivery is dead-lettered once they are used up.
    pub delays: Vec<Duration>,
    /// Relative jitter applied to each delay: 0.2 spreads it uniformly over ±20 %; within `[0, 1)`.
    pub jitter: f64,
}

impl Default for RetrySchedule {
    /// 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h (8 attempts in all), ±20 %.
    fn default() -> Self {
        const MINUTE: u64 = 60;
        const HOUR: u64 = 3600;
        let secs = [
            5,
            5 * MINUTE,
            30 * MINUTE,
            2 * HOUR,
            5 * HOUR,
            10 * HOUR,
            10 * HOUR,
        ];
        Self {
            delays: secs.into_iter().map(Duration::from_secs).collect(),
            jitter: 0.2,
        }
    }
}

impl RetrySchedule {
    /// Builds a schedule, refusing any delay or jitter outside its documented range.
    pub fn try_new(delays: Vec<Duration>, jitter: f64) -> Result<Self, SettingProblem> {
        let schedule = Self { delays, jitter };
        schedule.validate()?;
        Ok(schedule)
    }

    /// Checks every delay and the jitter; reports the first value out of range (see
    /// [`RetrySchedule::problems`] for all of them).
    pub fn validate(&self) -> Result<(), SettingProblem> {
        first(self.problems())
    }

    /// Every delay out of `(0 s, 30 days]` (each named by its position, from 1) and the jitter
    /// if it is outside `[0, 1)`.
    pub fn problems(&self) -> Vec<SettingProblem> {
        let mut p = Problems::default();
        for (index, delay) in self.delays.iter().enumerate() {
            p.check(
                !delay.is_zero() && *delay <= MAX_DELAY,
                "delays",
                format_args!("{} (delay {})", shown(*delay), index + 1),
                "above zero and at most 30 days",
            );
        }
        // `contains` is false for NaN, so NaN is refused too.
        let jitter = self.jitter;
        p.check((0.0..1.0).contains(&jitter), "jitter", jitter, "in [0, 1)");
        p.into_vec()
    }

    /// Attempts a delivery gets in all before it is dead-lettered: the first plus one per delay.
    pub fn max_attempts(&self) -> u32 {
        u32::try_from(self.delays.len())
            .unwrap_or(u32::MAX)
            .saturating_add(1)
    }

    /// Wall-clock time (ms since the Unix epoch) of the next attempt, or `None` to dead-letter.
    ///
    /// `attempts_made` counts attempts already made, including the one that just failed (0 means
    /// none yet: due at `now_ms`). `jitter_sample` in `[0, 1)` picks the point in the ±jitter band:
    /// 0 is the earliest, 0.5 the nominal delay; values outside are clamped.
    pub fn next_attempt_at(
        &self,
        attempts_made: u32,
        now_ms: i64,
        jitter_sample: f64,
    ) -> Option<i64> {
        let Some(index) = attempts_made.checked_sub(1) else {
            return Some(now_ms);
        };
        let nominal = self.delays.get(usize::try_from(index).ok()?)?;
        let factor = 1.0 + self.jitter * (2.0 * unit(jitter_sample) - 1.0);
        // `as` saturates; the delay is bounded by MAX_DELAY in a validated schedule anyway.
        let delay_ms = (nominal.as_millis() as f64 * factor).round() as i64;
        Some(now_ms.saturating_add(delay_ms.max(0)))
    }

    /// [`Self::next_attempt_at`] with the jitter sample drawn from the thread's random generator.
    pub fn next_attempt_at_random(&self, attempts_made: u32, now_ms: i64) -> Option<i64> {
        self.next_attempt_at(attempts_made, now_ms, rand::rng().random::<f64>())
    }
}

/// How long a shed delivery waits before it is offered again (it used no attempt).
#[derive(Debug, Clone, PartialEq)]
pub struct ShedSettings {
    /// Shortest requeue delay; `> 0` and `<= max_delay`. Default 5 s.
    pub min_delay: Duration,
    /// Longest requeue delay; `<= 30 days`. Default 20 s.
    pub max_delay: Duration,
}

impl Default for ShedSettings {
    fn default() -> Self {
        Self {
            min_delay: Duration::from_secs(5),
            max_delay: Duration::from_secs(20),
        }
    }
}

impl ShedSettings {
    /// Builds shed settings, refusing an empty, zero-based or over-long range.
    pub fn try_new(min_delay: Duration, max_delay: Duration) -> Result<Self, SettingProblem> {
        let settings = Self {
            min_delay,
            max_delay,
        };
        settings.validate()?;
        Ok(settings)
    }

    /// Checks `0 < min_delay <= max_delay <= 30 days`; reports the first value out of range
    /// (see [`ShedSettings::problems`] for all of them).
    pub fn validate(&self) -> Result<(), SettingProblem> {
        first(self.problems())
    }

    /// Every value out of range: `min_delay` above zero and at most `max_delay`, `max_delay`
    /// at most 30 days.
    pub fn problems(&self) -> Vec<SettingProblem> {
        let (min, max) = (self.min_delay, self.max_delay);
        let mut p = Problems::default();
        p.check(
            !min.is_zero() && min <= max,
            "min_delay",
            shown(min),
            format_args!("above zero and at most the longest delay ({})", shown(max)),
        );
        p.check(max <= MAX_DELAY, "max_delay", shown(max), "at most 30 days");
        p.into_vec()
    }

    /// The requeue delay for a given `sample` in `[0, 1]`; see [`shed_delay`].
    pub fn delay(&self, sample: f64) -> Duration {
        shed_delay(self.min_delay, self.max_delay, sample)
    }

    /// The requeue delay with the sample drawn from the thread's random generator.
    pub fn random_delay(&self) -> Duration {
        self.delay(rand::rng().random::<f64>())
    }

    /// The requeue delay of a delivery shed at a lane expected to serve what is ahead of it
    /// within `expected_wait` (its measured service time × deliveries ahead ÷ slots; `None`
    /// before it is measured). A lane that turns over slower than `min_delay` keeps the whole
    /// range; a faster one scales the range down by the same factor (never under `floor`, the
    /// lane deadline it just waited out), keeping its spread, so a burst shed at a fast lane
    /// after an outage comes back in about a second, not in 5–20 s.
    pub fn delay_after(
        &self,
        expected_wait: Option<Duration>,
        floor: Duration,
        sample: f64,
    ) -> Duration {
        let delay = self.delay(sample);
        let Some(wait) = expected_wait else {
            return delay;
        };
        let min = self.min_delay.as_secs_f64();
        let scale = (wait.max(floor).as_secs_f64() / min).min(1.0);
        delay.mul_f64(scale)
    }
}

/// The first of `problems`, if any.
fn first(problems: Vec<SettingProblem>) -> Result<(), SettingProblem> {
    match problems.into_iter().next() {
        Some(problem) => Err(problem),
        None => Ok(()),
    }
}

/// A delay uniform in `[min, max]` as `sample` runs over `[0, 1]` (clamped; bounds swapped if reversed).
///
/// The spread keeps shed work from coming back as one herd when a lane frees up.
pub fn shed_delay(min: Duration, max: Duration, sample: f64) -> Duration {
    let (low, high) = (min.min(max), min.max(max));
    low + (high - low).mul_f64(unit(sample))
}

/// Parses a `Retry-After` header value: delta-seconds or an HTTP-date relative to `now`.
///
/// A date in the past means "now" (zero). Anything else (negative or fractional numbers, junk) is
/// `None`, and the caller falls back to its own schedule. Clamp the result with
/// [`clamp_retry_after`] before trusting it.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // All digits, so the only possible failure is overflow: saturate, the clamp follows.
        let secs = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Caps a `Retry-After` delay so a hostile or broken endpoint cannot park its work indefinitely.
pub fn clamp_retry_after(delay: Duration, max: Duration) -> Duration {
    delay.min(max)
}

/// Clamps a random sample into `[0, 1]`; NaN becomes the midpoint.
fn unit(sample: f64) -> f64 {
    if sample.is_nan() {
        0.5
    } else {
        sample.clamp(0.0, 1.0)
    }
}

/// A wait that doubles after each failure up to a ceiling and starts over after a success: how
/// the leaser and the settler ride out a store they cannot reach (not a delivery's schedule,
/// which is [`RetrySchedule`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// The store's reconnect pace: 0.1 s doubling to 5 s.
    pub const STORE: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));

    /// Waits of `first`, doubling up to `max`.
    pub const fn new(first: Duration, max: Duration) -> Self {
        Self {
            first,
            max,
            next: first,
        }
    }

    /// The wait to take now; the one after it is twice as long, up to the ceiling.
    pub fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = wait.saturating_mul(2).min(self.max);
        wait
    }

    /// A success: the next wait is the first again.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::UNIX_EPOCH;

    const NOW_MS: i64 = 1_700_000_000_000;
    /// Wed, 21 Oct 2015 07:28:00 GMT.
    const OCT_21_2015: u64 = 1_445_412_480;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn default_schedule_has_the_design_delays() {
        let schedule = RetrySchedule::default();
        let expected = [5, 300, 1_800, 7_200, 18_000, 36_000, 36_000].map(secs);
        assert_eq!(schedule.delays, expected);
        assert_eq!(schedule.jitter, 0.2);
        assert_eq!(schedule.max_attempts(), 8);
        assert_eq!(schedule.validate(), Ok(()));
    }

    #[test]
    fn nominal_delays_at_the_jitter_midpoint() {
        let schedule = RetrySchedule::default();
        let due: Vec<_> = (1..=7)
            .map(|n| {
                schedule
                    .next_attempt_at(n, NOW_MS, 0.5)
                    .map(|at| at - NOW_MS)
            })
            .collect();
        let expected = [5, 300, 1_800, 7_200, 18_000, 36_000, 36_000].map(|s| Some(s * 1_000));
        assert_eq!(due, expected);
    }

    #[test]
    fn exhausted_after_eight_attempts() {
        let schedule = RetrySchedule::default();
        assert!(schedule.next_attempt_at(7, NOW_MS, 0.5).is_some());
        assert_eq!(schedule.next_attempt_at(8, NOW_MS, 0.5), None);
        assert_eq!(schedule.next_attempt_at(u32::MAX, NOW_MS, 0.5), None);
        assert_eq!(schedule.next_attempt_at(0, NOW_MS, 0.5), Some(NOW_MS));
    }

    #[test]
    fn jitter_band_edges() {
        let schedule = RetrySchedule::default();
        assert_eq!(schedule.next_attempt_at(1, 0, 0.0), Some(4_000));
        assert_eq!(schedule.next_attempt_at(1, 0, 1.0), Some(6_000));
        assert_eq!(schedule.next_attempt_at(1, 0, -3.0), Some(4_000));
        assert_eq!(schedule.next_attempt_at(1, 0, f64::NAN), Some(5_000));
        let random = schedule.next_attempt_at_random(2, 0);
        assert!(random.is_some_and(|at| (240_000..=360_000).contains(&at)));
    }

    #[test]
    fn invalid_settings_are_refused() {
        let zero = RetrySchedule::try_new(vec![secs(5), Duration::ZERO], 0.2);
        assert_eq!(
            zero.map_err(|problem| problem.to_string()),
            Err("delays: 0ns (delay 2) must be above zero and at most 30 days".to_owned())
        );
        assert!(RetrySchedule::try_new(vec![MAX_DELAY + secs(1)], 0.2).is_err());
        for jitter in [-0.1, 1.0, f64::NAN] {
            assert!(RetrySchedule::try_new(vec![secs(5)], jitter).is_err());
        }
        assert!(RetrySchedule::try_new(Vec::new(), 0.0).is_ok_and(|s| s.max_attempts() == 1));
        assert_eq!(ShedSettings::default().validate(), Ok(()));
        assert!(ShedSettings::try_new(secs(20), secs(5)).is_err());
        assert!(ShedSettings::try_new(Duration::ZERO, secs(5)).is_err());
        assert!(ShedSettings::try_new(secs(5), MAX_DELAY + secs(1)).is_err());
    }

    #[test]
    fn every_bad_value_is_a_problem_and_the_edges_are_not() {
        let schedule = RetrySchedule {
            delays: vec![Duration::ZERO, secs(5), MAX_DELAY + secs(1)],
            jitter: 1.0,
        };
        let found: Vec<_> = schedule
            .problems()
            .into_iter()
            .map(|p| (p.field, p.value))
            .collect();
        let expected = [
            ("delays", "0ns (delay 1)".to_owned()),
            ("delays", "2592001s (delay 3)".to_owned()),
            ("jitter", "1".to_owned()),
        ];
        assert_eq!(found, expected);
        assert_eq!(RetrySchedule::default().problems(), []);
        let edges = RetrySchedule {
            delays: vec![Duration::from_nanos(1), MAX_DELAY],
            jitter: 0.0,
        };
        assert_eq!(edges.problems(), []);

        let shed = ShedSettings {
            min_delay: Duration::ZERO,
            max_delay: MAX_DELAY + secs(1),
        };
        let fields: Vec<_> = shed.problems().into_iter().map(|p| p.field).collect();
        assert_eq!(fields, ["min_delay", "max_delay"]);
        assert_eq!(ShedSettings::default().problems(), []);
        let edges = ShedSettings {
            min_delay: MAX_DELAY,
            max_delay: MAX_DELAY,
        };
        assert_eq!(edges.problems(), []);
    }

    /// 5–20 s for a lane slower than 5 s or not measured; a lane that serves what is ahead in
    /// 0.25 s sheds for 0.5–2 s (its 0.5 s deadline is the floor); 2.5 s ahead, 2.5–10 s.
    #[test]
    fn a_fast_lane_sheds_for_less() {
        let shed = ShedSettings::default();
        let floor = Duration::from_millis(500);
        let ms = Duration::from_millis;
        assert_eq!(shed.delay_after(None, floor, 0.0), secs(5));
        assert_eq!(shed.delay_after(Some(secs(30)), floor, 1.0), secs(20));
        assert_eq!(shed.delay_after(Some(secs(5)), floor, 0.0), secs(5));
        assert_eq!(shed.delay_after(Some(ms(250)), floor, 0.0), ms(500));
        assert_eq!(shed.delay_after(Some(ms(250)), floor, 1.0), secs(2));
        assert_eq!(shed.delay_after(Some(ms(2_500)), floor, 0.0), ms(2_500));
        assert_eq!(shed.delay_after(Some(ms(2_500)), floor, 1.0), secs(10));
    }

    #[test]
    fn shed_delay_spans_its_range() {
        let shed = ShedSettings::default();
        assert_eq!(shed.delay(0.0), secs(5));
        assert_eq!(shed.delay(0.5), Duration::from_millis(12_500));
        assert_eq!(shed.delay(1.0), secs(20));
        assert_eq!(shed_delay(secs(20), secs(5), 0.0), secs(5));
        assert_eq!(shed_delay(secs(5), secs(20), 7.0), secs(20));
        assert!((secs(5)..=secs(20)).contains(&shed.random_delay()));
    }

    #[test]
    fn retry_after_in_seconds() {
        let now = SystemTime::now();
        assert_eq!(parse_retry_after("120", now), Some(secs(120)));
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        let huge = parse_retry_after("99999999999999999999999", now);
        assert_eq!(
            huge.map(|d| clamp_retry_after(d, secs(3600))),
            Some(secs(3600))
        );
    }

    #[test]
    fn retry_after_as_http_date() {
        let date = UNIX_EPOCH + secs(OCT_21_2015);
        let value = "Wed, 21 Oct 2015 07:28:00 GMT";
        assert_eq!(parse_retry_after(value, date - secs(90)), Some(secs(90)));
        assert_eq!(
            parse_retry_after(value, date + secs(90)),
            Some(Duration::ZERO)
        );
        // The obsolete RFC 850 form is still legal HTTP.
        let rfc850 = "Wednesday, 21-Oct-15 07:28:00 GMT";
        assert_eq!(parse_retry_after(rfc850, date - secs(30)), Some(secs(30)));
    }

    #[test]
    fn retry_after_garbage_and_negative_are_refused() {
        let now = UNIX_EPOCH + secs(OCT_21_2015);
        for value in [
            "",
            "soon",
            "-5",
            "+5",
            "1.5",
            "5s",
            "Wed, 32 Oct 2015 07:28:00 GMT",
        ] {
            assert_eq!(parse_retry_after(value, now), None, "{value:?}");
        }
    }

    #[test]
    fn clamp_caps_only_long_delays() {
        assert_eq!(clamp_retry_after(secs(30), secs(3600)), secs(30));
        assert_eq!(clamp_retry_after(secs(86_400), secs(3600)), secs(3600));
    }

    proptest! {
        #[test]
        fn jitter_stays_within_twenty_percent(
            attempts in 1u32..=7,
            sample in 0.0..1.0f64,
            now_ms in -1_000_000_000_000i64..4_000_000_000_000,
        ) {
            let schedule = RetrySchedule::default();
            let nominal = schedule.delays[attempts as usize - 1].as_millis() as i64;
            let at = schedule.next_attempt_at(attempts, now_ms, sample);
            prop_assert!(at.is_some());
            let delay = at.unwrap_or_default() - now_ms;
            prop_assert!(delay * 10 >= nominal * 8 && delay * 10 <= nominal * 12, "{delay} vs {nominal}");
        }

        #[test]
        fn exhausted_schedule_always_dead_letters(attempts in 8u32.., sample in 0.0..1.0f64) {
            prop_assert_eq!(RetrySchedule::default().next_attempt_at(attempts, NOW_MS, sample), None);
        }

        #[test]
        fn shed_delay_stays_in_range(min_ms in 1u64..100_000, span_ms in 0u64..100_000, sample in 0.0..=1.0f64) {
            let (min, max) = (Duration::from_millis(min_ms), Duration::from_millis(min_ms + span_ms));
            let delay = shed_delay(min, max, sample);
            prop_assert!(delay >= min && delay <= max);
        }
    }

    #[test]
    fn a_backoff_doubles_to_its_ceiling_and_starts_over_after_a_success() {
        let mut b = Backoff::STORE;
        let waits: Vec<u64> = (0..8).map(|_| b.next_wait().as_millis() as u64).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1_600, 3_200, 5_000, 5_000]);
        b.reset();
        assert_eq!(b.next_wait(), Duration::from_millis(100));
    }
}
