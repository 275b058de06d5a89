//! Tests of the breaker state machine: scenarios from the seed, then a property test.

use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;

use super::*;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A closed breaker with default settings (ceiling 15 s, 20 samples, cooldowns 600 s and 30 s).
fn breaker(start: Instant) -> Breaker {
    Breaker::new(BreakerSettings::default(), start)
}

/// Records `n` attempts a second apart from `from`, returning the transitions seen.
fn feed(b: &mut Breaker, from: Instant, n: u64, took: Duration, failed: bool) -> Vec<Transition> {
    (0..n)
        .filter_map(|i| b.record(from + secs(i), took, failed))
        .collect()
}

/// Trips `b` on latency at `start` + 19 s and returns when the cooldown ends.
fn tripped(b: &mut Breaker, start: Instant) -> Instant {
    let seen = feed(b, start, 20, secs(45), false);
    assert_eq!(seen.len(), 1);
    start + secs(19) + secs(600)
}

#[test]
fn a_200_ok_endpoint_at_three_times_its_ceiling_trips_after_min_samples() {
    let start = Instant::now();
    let mut b = breaker(start);
    assert!(feed(&mut b, start, 19, secs(45), false).is_empty());
    assert_eq!(b.state_name(), "closed");
    let t = b
        .record(start + secs(19), secs(45), false)
        .expect("20th sample trips");
    assert_eq!((t.from, t.to, t.at), ("closed", "open", start + secs(19)));
    assert!(
        t.reason.contains("p95 of 4") && t.reason.contains("ceiling of 15 s"),
        "{}",
        t.reason
    );
    let BreakerState::Open { until, reason } = b.state() else {
        panic!("not open: {:?}", b.state());
    };
    assert_eq!(until, start + secs(619));
    assert!(matches!(reason, TripReason::Latency { p95 } if p95 > secs(43)));
    assert_eq!((b.state_name(), b.state_code()), ("open", 1));
}

#[test]
fn below_min_samples_it_does_not_trip() {
    let start = Instant::now();
    let mut b = breaker(start);
    // 19 very slow samples within the window, then the window moves on: never 20 at once.
    assert!(feed(&mut b, start, 19, secs(600), false).is_empty());
    assert!(feed(&mut b, start + secs(400), 19, secs(600), false).is_empty());
    assert_eq!(b.admit(start + secs(500)), Admission::Allow);
}

#[test]
fn while_open_every_caller_is_held_until_the_cooldown_ends() {
    let start = Instant::now();
    let mut b = breaker(start);
    let until = tripped(&mut b, start);
    for at in [start + secs(20), until - Duration::from_millis(1)] {
        assert_eq!(b.admit(at), Admission::Hold { until });
    }
    // A delivery already in flight when it tripped is measured but changes nothing.
    assert_eq!(
        b.record(start + secs(30), Duration::from_millis(5), false),
        None
    );
    assert_eq!(b.state_name(), "open");
}

#[tokio::test(start_paused = true)]
async fn after_the_cooldown_exactly_one_caller_probes() {
    let mut b = breaker(Instant::now());
    let until = tripped(&mut b, Instant::now());
    tokio::time::advance(until - Instant::now()).await;
    assert_eq!(b.admit(Instant::now()), Admission::Probe);
    assert_eq!((b.state_name(), b.state_code()), ("half_open", 2));
    for _ in 0..5 {
        let Admission::Hold { until } = b.admit(Instant::now()) else {
            panic!("a second probe");
        };
        assert_eq!(until, Instant::now() + HALF_OPEN_HOLD);
        tokio::time::advance(secs(1)).await;
    }
}

#[test]
fn a_fast_probe_closes_and_clears_the_windows() {
    let start = Instant::now();
    let mut b = breaker(start);
    let until = tripped(&mut b, start);
    assert_eq!(b.admit(until), Admission::Probe);
    let t = b.record(until + secs(2), secs(2), false).expect("closes");
    assert_eq!((t.from, t.to), ("half_open", "closed"));
    assert_eq!(t.reason, "probe succeeded in 2 s");
    assert_eq!(b.admit(until + secs(2)), Admission::Allow);
    assert_eq!(b.latency_snapshot(until + secs(2)).samples, 1);
    // One slow delivery after closing does not re-trip on the old evidence.
    assert_eq!(b.record(until + secs(3), secs(45), false), None);
}

#[test]
fn a_slow_probe_reopens_for_another_cooldown() {
    let start = Instant::now();
    let mut b = breaker(start);
    let until = tripped(&mut b, start);
    assert_eq!(b.admit(until), Admission::Probe);
    let t = b
        .record(until + secs(40), secs(40), false)
        .expect("re-opens");
    assert_eq!((t.from, t.to), ("half_open", "open"));
    assert_eq!(t.reason, "probe took 40 s, over the ceiling of 15 s");
    let next = until + secs(640);
    assert_eq!(b.admit(until + secs(41)), Admission::Hold { until: next });
    assert_eq!(b.admit(next), Admission::Probe);
    // A failed fast probe re-opens for the shorter error cooldown.
    let t = b.record(next + secs(1), secs(1), true).expect("re-opens");
    assert_eq!(t.reason, "probe failed after 1 s");
    let hold = b.admit(next + secs(1));
    assert_eq!(
        hold,
        Admission::Hold {
            until: next + secs(31)
        }
    );
}

#[test]
fn a_cancelled_or_lost_probe_lets_another_caller_probe() {
    let start = Instant::now();
    let mut b = breaker(start);
    let until = tripped(&mut b, start);
    assert_eq!(b.admit(until), Admission::Probe);
    b.cancel_probe(); // the probe was shed at its lane: no attempt was made
    assert_eq!(b.admit(until + secs(1)), Admission::Probe);
    let lost = until + secs(1) + b.settings().probe_timeout;
    assert_eq!(b.admit(lost - secs(1)), Admission::Hold { until: lost });
    assert_eq!(b.admit(lost), Admission::Probe);
}

#[test]
fn the_error_breaker_trips_on_a_sustained_ratio_not_a_single_failure() {
    let start = Instant::now();
    let mut b = breaker(start);
    assert_eq!(b.record(start, Duration::from_millis(30), true), None);
    assert!(feed(&mut b, start, 30, Duration::from_millis(30), false).is_empty());
    assert_eq!(b.state_name(), "closed");

    let later = start + secs(100); // the successes above have left the 60 s error window
    let mut trips = Vec::new();
    for i in 0..20 {
        trips.extend(b.record(later + secs(i), Duration::from_millis(30), i % 5 < 3));
    }
    assert_eq!(trips.len(), 1);
    assert_eq!(
        trips[0].reason,
        "60 % of 20 attempts failed, threshold 50 %"
    );
    let BreakerState::Open { until, reason } = b.state() else {
        panic!("not open");
    };
    assert_eq!(
        (until, reason),
        (later + secs(49), TripReason::Errors { ratio: 0.6 })
    );
}

#[test]
fn settings_refuse_values_out_of_range() {
    assert_eq!(
        BreakerSettings::try_new(BreakerSettings::default()),
        Ok(BreakerSettings::default())
    );
    let bad = BreakerSettings {
        latency_ceiling: Duration::ZERO,
        latency_min_samples: 0,
        error_ratio: f64::NAN,
        probe_timeout: secs(100_000),
        ..BreakerSettings::default()
    };
    let fields: Vec<_> = bad
        .problems()
        .into_iter()
        .map(|problem| problem.field)
        .collect();
    let expected = [
        "latency_ceiling",
        "probe_timeout",
        "latency_min_samples",
        "error_ratio",
    ];
    assert_eq!(fields, expected);
    let first = BreakerSettings::try_new(bad).unwrap_err();
    assert_eq!(first.to_string(), "latency_ceiling: 0ns must be 1ms–1h");
    for error_ratio in [0.0, 1.5] {
        let settings = BreakerSettings {
            error_ratio,
            ..BreakerSettings::default()
        };
        assert!(BreakerSettings::try_new(settings).is_err());
    }
}

/// One step of a random sequence driven against the breaker.
#[derive(Clone, Debug)]
enum Step {
    Admit,
    Record { took_ms: u64, failed: bool },
    Cancel,
    Wait { ms: u64 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => Just(Step::Admit),
        4 => (0u64..40_000, any::<bool>()).prop_map(|(took_ms, failed)| Step::Record { took_ms, failed }),
        1 => Just(Step::Cancel),
        2 => (0u64..90_000).prop_map(|ms| Step::Wait { ms }),
    ]
}

proptest! {
    #[test]
    fn one_probe_at_a_time_and_no_trip_below_min_samples(
        fast in any::<bool>(),
        steps in prop::collection::vec(step(), 1..300),
    ) {
        let settings = BreakerSettings::try_new(BreakerSettings {
            latency_window: secs(60),
            latency_min_samples: 5,
            cooldown: secs(60),
            error_window: secs(30),
            error_min_samples: 7,
            error_cooldown: secs(10),
            probe_timeout: secs(20),
            ..BreakerSettings::default()
        }).unwrap();
        let mut now = Instant::now();
        let mut b = Breaker::new(settings.clone(), now);
        // When the outstanding probe was handed out, until a record or a cancel settles it.
        let mut probe_at: Option<Instant> = None;
        for step in steps {
            match step {
                Step::Admit => match b.admit(now) {
                    Admission::Probe => {
                        if let Some(at) = probe_at {
                            prop_assert!(now >= at + settings.probe_timeout, "two probes");
                        }
                        probe_at = Some(now);
                    }
                    Admission::Allow => prop_assert_eq!(b.state_name(), "closed"),
                    Admission::Hold { until } => prop_assert!(until > now),
                },
                Step::Record { took_ms, failed } => {
                    let was_closed = b.state() == BreakerState::Closed;
                    // A fast endpoint (3 s at most) reaches the error breaker instead.
                    let took_ms = if fast { took_ms % 3_000 } else { took_ms };
                    let t = b.record(now, Duration::from_millis(took_ms), failed);
                    probe_at = None;
                    if let Some(t) = t.filter(|_| was_closed) {
                        prop_assert_eq!((t.from, t.to), ("closed", "open"));
                        match b.state() {
                            BreakerState::Open { reason: TripReason::Latency { p95 }, .. } => {
                                prop_assert!(b.latency_snapshot(now).samples >= 5);
                                prop_assert!(p95 > settings.latency_ceiling);
                            }
                            BreakerState::Open { reason: TripReason::Errors { ratio }, .. } => {
                                prop_assert!(b.error_snapshot(now).samples >= 7);
                                prop_assert!(ratio >= settings.error_ratio);
                            }
                            other => prop_assert!(false, "tripped into {:?}", other),
                        }
                    }
                }
                Step::Cancel => {
                    b.cancel_probe();
                    probe_at = None;
                }
                Step::Wait { ms } => now += Duration::from_millis(if fast { ms / 9 } else { ms }),
            }
        }
    }
}
