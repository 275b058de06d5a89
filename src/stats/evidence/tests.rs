//! The evidence arithmetic and sentences, state by state.

use super::*;
use crate::stats::{AttemptKind, Window};
use tokio::time::Instant;

/// A window of 100 delivered attempts at `p95` (none without one), offered `offered_per_s`.
fn snapshot(p95: Option<Duration>, offered_per_s: f64) -> WindowSnapshot {
    let samples = if p95.is_some() { 100 } else { 0 };
    WindowSnapshot {
        span: Duration::from_secs(300),
        samples,
        mean: p95,
        p50: p95,
        p95,
        p99: p95,
        offered_per_s,
        delivered_per_s: samples as f64 / 300.0,
        delivered_p95: p95,
        delivered: samples,
        ..WindowSnapshot::default()
    }
}

fn live(s: &WindowSnapshot, lane: u32) -> Evidence {
    evidence(s, lane, Standing::default())
}

#[test]
fn the_seed_sentence_for_a_25_s_endpoint_with_a_lane_of_4() {
    let e = live(&snapshot(Some(Duration::from_secs(25)), 40.0), 4);
    assert_eq!(
        e.sentence,
        "at your current p95 of 25 s and a lane of 4, you can receive 0.16 events per second; \
         you are generating 40"
    );
    assert!((e.sustainable_per_s.unwrap() - 0.16).abs() < 1e-12);
}

#[test]
fn the_seed_sentence_from_a_measured_window() {
    let start = Instant::now();
    let mut window = Window::new(start, Duration::from_secs(300), 10);
    for i in 0..12_000u64 {
        let now = start + Duration::from_millis(i * 25);
        window.record_offered(now);
        if i % 10 == 0 {
            window.record_attempt(now, Duration::from_secs(25), true);
        } else {
            window.record_shed(now);
        }
    }
    let e = live(&window.snapshot(start + Duration::from_secs(300)), 4);
    assert!(
        e.sentence
            .ends_with("0.16 events per second; you are generating 40")
    );
    assert!((e.shed_share - 0.9).abs() < 1e-9);
}

#[test]
fn a_fast_endpoint_is_within_its_capacity() {
    let e = live(&snapshot(Some(Duration::from_millis(180)), 3.0), 8);
    assert_eq!(
        e.sentence,
        "at your current p95 of 180 ms and a lane of 8, you can receive 44 events per second; \
         you are generating 3, within that"
    );
}

#[test]
fn no_samples_says_so() {
    let e = live(&snapshot(None, 1200.0), 4);
    assert_eq!(e.sustainable_per_s, None);
    assert_eq!(
        e.sentence,
        "no response times measured yet; with a lane of 4 you are generating 1,200 events per \
         second"
    );
}

#[test]
fn evidence_serialises_durations_as_seconds() {
    let e = live(&snapshot(Some(Duration::from_millis(2500)), 1.0), 2);
    let json = serde_json::to_value(&e).unwrap();
    assert_eq!(json["p95_s"], 2.5);
    assert_eq!(json["lane"], 2);
    assert_eq!(json["sustainable_per_s"], 0.8);
    let empty = serde_json::to_value(live(&snapshot(None, 0.0), 2)).unwrap();
    assert!(empty["p95_s"].is_null() && empty["sustainable_per_s"].is_null());
}

#[test]
fn formats_rates_and_durations_sensibly() {
    let rates = [
        (0.16, "0.16"),
        (0.0016, "0.0016"),
        (0.1, "0.1"),
        (2.5, "2.5"),
    ];
    let more = [
        (3.0, "3"),
        (40.0, "40"),
        (44.44, "44"),
        (1200.0, "1,200"),
        (0.0, "0"),
    ];
    for (rate, text) in rates.into_iter().chain(more) {
        assert_eq!(format_rate(rate), text, "{rate}");
    }
    assert_eq!(format_rate(1_234_567.0), "1,234,567");
    let durations = [(450, "450 µs"), (2_500, "2.5 ms"), (180_000, "180 ms")];
    let longer = [
        (2_500_000, "2.5 s"),
        (25_000_000, "25 s"),
        (270_000_000, "4.5 min"),
    ];
    for (us, text) in durations.into_iter().chain(longer) {
        assert_eq!(format_duration(Duration::from_micros(us)), text);
    }
    assert_eq!(format_duration(Duration::from_secs(5400 * 2)), "3 h");
}

/// A window of `delivered` deliveries at 180 ms and these failures (each at 308 µs, as a
/// refused connection answers), offered 0.96 per second.
fn measured(delivered: u32, failures: &[(AttemptKind, u32)]) -> WindowSnapshot {
    let start = Instant::now();
    let mut window = Window::new(start, Duration::from_secs(300), 10);
    let mut at = 0;
    let mut tick = || {
        at += 1;
        start + Duration::from_millis(at * 1_000)
    };
    for _ in 0..delivered {
        window.record(tick(), Duration::from_millis(180), AttemptKind::Delivered);
    }
    for (kind, n) in failures {
        for _ in 0..*n {
            window.record(tick(), Duration::from_micros(308), *kind);
        }
    }
    let mut s = window.snapshot(start + Duration::from_secs(299));
    s.offered_per_s = 0.96;
    s
}

/// Every state, its condition and the sentence it must read: the sentence never claims a
/// capacity the deliveries did not show, and says what fails and how.
#[test]
fn each_state_has_its_own_sentence() {
    use AttemptKind::*;
    let disabled = Standing {
        disabled: Some("endpoint answered 410 Gone"),
        ..Standing::default()
    };
    let paused = Standing {
        paused: true,
        ..Standing::default()
    };
    let breaker = Standing {
        breaker_open: true,
        ..Standing::default()
    };
    let refusing = measured(0, &[(Refused, 288)]);
    let cases: Vec<(&str, WindowSnapshot, Standing, Condition, &str)> = vec![
        (
            "delivering",
            measured(40, &[]),
            Standing::default(),
            Condition::Delivering,
            "at your current p95 of 180 ms and a lane of 4, you can receive 22 events per second; you are generating 0.96, within that",
        ),
        (
            "delivering, some failing",
            measured(40, &[(ServerError, 2), (TimedOut, 1)]),
            Standing::default(),
            Condition::Delivering,
            "at your current p95 of 180 ms and a lane of 4, you can receive 22 events per second; you are generating 0.96, within that; 3 of 43 attempts failed: 2 answered 5xx, 1 timed out",
        ),
        (
            "failing: refused",
            refusing.clone(),
            Standing::default(),
            Condition::Failing,
            "failing: in the last 5 min, 288 of 288 attempts failed: 288 refused the connection; 0 events per second delivered while you are generating 0.96",
        ),
        (
            "failing: timing out",
            measured(0, &[(TimedOut, 10)]),
            Standing::default(),
            Condition::Failing,
            "failing: in the last 5 min, 10 of 10 attempts failed: 10 timed out; 0 events per second delivered while you are generating 0.96",
        ),
        (
            "failing: 5xx and 429, some delivered",
            measured(2, &[(ServerError, 3), (Throttled, 2)]),
            Standing::default(),
            Condition::Failing,
            "failing: in the last 5 min, 5 of 7 attempts failed: 3 answered 5xx, 2 answered 429 (slow down); 0.0067 events per second delivered while you are generating 0.96",
        ),
        (
            "paused",
            measured(0, &[(Throttled, 4)]),
            paused,
            Condition::Paused,
            "paused as the endpoint asked (Retry-After): nothing is attempted until the pause ends; failing: in the last 5 min, 4 of 4 attempts failed: 4 answered 429 (slow down); 0 events per second delivered while you are generating 0.96",
        ),
        (
            "breaker open",
            measured(0, &[(TimedOut, 20)]),
            breaker,
            Condition::BreakerOpen,
            "the breaker is open: deliveries are held, and one probe is tried once its cooldown ends; failing: in the last 5 min, 20 of 20 attempts failed: 20 timed out; 0 events per second delivered while you are generating 0.96",
        ),
        (
            "disabled",
            refusing,
            disabled,
            Condition::Disabled,
            "disabled (endpoint answered 410 Gone): nothing is delivered until it is enabled again; failing: in the last 5 min, 288 of 288 attempts failed: 288 refused the connection; 0 events per second delivered while you are generating 0.96",
        ),
        (
            "idle",
            measured(0, &[]),
            Standing::default(),
            Condition::Idle,
            "no response times measured yet; with a lane of 4 you are generating 0.96 events per second",
        ),
    ];
    for (name, snapshot, standing, condition, sentence) in cases {
        let e = evidence(&snapshot, 4, standing);
        assert_eq!(e.condition, condition, "{name}");
        assert_eq!(e.sentence, sentence, "{name}");
        if snapshot.delivered == 0 {
            assert_eq!(
                e.sustainable_per_s, None,
                "{name}: no capacity from failures"
            );
        }
    }
}

/// The incident this guards against: an endpoint refusing every connection in 308 µs read
/// as able to take thousands of events per second.
#[test]
fn refused_connections_claim_no_capacity() {
    let e = live(&measured(0, &[(AttemptKind::Refused, 288)]), 1);
    assert_eq!(e.sustainable_per_s, None);
    assert!(!e.sentence.contains("you can receive"), "{}", e.sentence);
    // With deliveries among them, capacity is judged from the deliveries' p95 (180 ms).
    let e = live(&measured(10, &[(AttemptKind::Refused, 5)]), 1);
    let sustainable = e.sustainable_per_s.unwrap();
    assert!((sustainable - 1.0 / 0.18).abs() < 0.2, "{sustainable}");
}

#[test]
fn littles_law_lane_clamps() {
    let ms = Duration::from_millis;
    assert_eq!(littles_law_lane(100.0, ms(80), 32), 8);
    assert_eq!(littles_law_lane(100.0, ms(81), 32), 9);
    assert_eq!(
        littles_law_lane(40.0, ms(25_000), 4),
        4,
        "1,000 needed, capped"
    );
    assert_eq!(littles_law_lane(0.0, ms(25_000), 4), 1, "at least one slot");
    assert_eq!(littles_law_lane(f64::NAN, ms(100), 4), 1);
    assert_eq!(littles_law_lane(f64::INFINITY, ms(100), 4), 4);
    assert_eq!(
        littles_law_lane(10.0, ms(1000), 0),
        1,
        "a zero ceiling still leaves one"
    );
}

/// Held to its rate: what was asked, what arrives (offers less the holds that came back), what
/// waits; the sustainable rate never above the limit.
#[test]
fn a_rate_limited_endpoint_says_what_was_asked_what_arrives_and_what_waits() {
    let mut s = snapshot(Some(Duration::from_millis(10)), 190.0);
    s.rate_limited_per_s = 70.0;
    let standing = Standing {
        rate_limit: Some(crate::model::RateLimit::try_new(50.0, 100).unwrap()),
        waiting: Some(12_000),
        ..Standing::default()
    };
    let e = evidence(&s, 4, standing);
    assert_eq!(e.condition, Condition::RateLimited);
    assert!(
        e.sentence.starts_with(
            "held to its rate limit: you asked for 50/s; 120/s are arriving; 12,000 are waiting; "
        ),
        "{}",
        e.sentence
    );
    assert_eq!(e.sustainable_per_s, Some(50.0));
    // Nothing held in the window: delivering, whatever the limit.
    s.rate_limited_per_s = 0.0;
    assert_eq!(evidence(&s, 4, standing).condition, Condition::Delivering);
}
