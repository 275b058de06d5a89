//! The evidence arithmetic: what an endpoint can receive at its measured p95 and lane, in figures
//! and in the one sentence a customer needs to read, plus the Little's Law lane size.

use std::time::Duration;

use serde::Serialize;

use super::WindowSnapshot;
use super::snapshot::opt_secs;

/// The figures behind a conversation with a slow consumer, and the sentence that states them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Evidence {
    /// Median response time measured by us.
    #[serde(rename = "p50_s", serialize_with = "opt_secs")]
    pub p50: Option<Duration>,
    /// 95th-percentile response time measured by us.
    #[serde(rename = "p95_s", serialize_with = "opt_secs")]
    pub p95: Option<Duration>,
    /// 99th-percentile response time measured by us.
    #[serde(rename = "p99_s", serialize_with = "opt_secs")]
    pub p99: Option<Duration>,
    /// Mean response time measured by us.
    #[serde(rename = "mean_s", serialize_with = "opt_secs")]
    pub mean: Option<Duration>,
    /// Concurrent deliveries allowed to this endpoint.
    pub lane: u32,
    /// Deliveries per second the lane sustains at the p95 (lane ÷ p95); `None` without samples.
    pub sustainable_per_s: Option<f64>,
    /// Deliveries per second reaching admission for this endpoint.
    pub offered_per_s: f64,
    /// Share of offered deliveries shed at the full lane, 0 to 1.
    pub shed_share: f64,
    /// The figures in one sentence, for the status page and the notice to the customer.
    pub sentence: String,
}

/// The evidence for an endpoint whose window reads `snapshot` and whose lane is `lane` slots.
pub fn evidence(snapshot: &WindowSnapshot, lane: u32) -> Evidence {
    // A p95 under the histogram's resolution is floored at 1 µs rather than divided by zero.
    let sustainable_per_s = snapshot
        .p95
        .map(|p95| f64::from(lane) / p95.as_secs_f64().max(1e-6));
    let offered = format_rate(snapshot.offered_per_s);
    let sentence = match (snapshot.p95, sustainable_per_s) {
        (Some(p95), Some(sustainable)) => {
            let head = format!(
                "at your current p95 of {} and a lane of {lane}, you can receive {} events per \
                 second; you are generating {offered}",
                format_duration(p95),
                format_rate(sustainable),
            );
            if sustainable >= snapshot.offered_per_s {
                format!("{head}, within that")
            } else {
                head
            }
        }
        _ => format!(
            "no response times measured yet; with a lane of {lane} you are generating {offered} \
             events per second"
        ),
    };
    Evidence {
        p50: snapshot.p50,
        p95: snapshot.p95,
        p99: snapshot.p99,
        mean: snapshot.mean,
        lane,
        sustainable_per_s,
        offered_per_s: snapshot.offered_per_s,
        shed_share: snapshot.shed_share,
        sentence,
    }
}

/// The lane Little's Law asks for: ⌈offered rate × p95⌉ slots, at least 1 and at most `ceiling`.
///
/// The ceiling is the fairness cap (a share of the worker pool): an endpoint that would need more
/// is the one to cap, so however slow it is it never holds more than its share of the fleet.
pub fn littles_law_lane(offered_per_s: f64, p95: Duration, ceiling: u32) -> u32 {
    let ceiling = ceiling.max(1);
    let needed = (offered_per_s * p95.as_secs_f64()).ceil();
    if needed.is_nan() {
        return 1;
    }
    // `as` saturates, and `min` has already capped an infinite need at the ceiling.
    (needed.min(f64::from(ceiling)) as u32).max(1)
}

/// A duration the way a person writes it: "450 µs", "2.5 ms", "180 ms", "2.5 s", "25 s", "4.5 min",
/// "1.5 h".
pub fn format_duration(duration: Duration) -> String {
    let s = duration.as_secs_f64();
    if s < 0.000_999_5 {
        format!("{} µs", (s * 1e6).round())
    } else if s < 0.009_95 {
        format!("{} ms", one_decimal(s * 1e3))
    } else if s < 0.999_5 {
        format!("{} ms", (s * 1e3).round())
    } else if s < 9.95 {
        format!("{} s", one_decimal(s))
    } else if s < 119.5 {
        format!("{} s", s.round())
    } else if s < 7_170.0 {
        format!("{} min", one_decimal(s / 60.0))
    } else {
        format!("{} h", one_decimal(s / 3600.0))
    }
}

/// A rate the way a person writes it: two significant figures below 1 ("0.16"), one decimal
/// below 10 ("2.5", "3"), whole numbers with thousands separators above ("40", "1,200").
pub fn format_rate(per_s: f64) -> String {
    if per_s.is_nan() || per_s <= 0.0 {
        "0".to_owned()
    } else if per_s >= 9.95 {
        thousands(per_s.min(u64::MAX as f64).round() as u64)
    } else if per_s >= 0.995 {
        one_decimal(per_s)
    } else {
        // floor(log10) is -1 for 0.1..1, so two decimals there, three for 0.01..0.1, and so on.
        let decimals = (1 - per_s.log10().floor() as i32).clamp(0, 6) as usize;
        trim(format!("{per_s:.decimals$}"))
    }
}

/// One decimal place, without a trailing ".0".
fn one_decimal(x: f64) -> String {
    trim(format!("{x:.1}"))
}

/// Drops trailing zeros after a decimal point, and the point if nothing follows it.
fn trim(text: String) -> String {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// An integer with a comma between each group of three digits.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Window;
    use tokio::time::Instant;

    fn snapshot(p95: Option<Duration>, offered_per_s: f64) -> WindowSnapshot {
        WindowSnapshot {
            span: Duration::from_secs(300),
            samples: if p95.is_some() { 100 } else { 0 },
            mean: p95,
            p50: p95,
            p95,
            p99: p95,
            offered_per_s,
            delivered_per_s: 0.0,
            failed_per_s: 0.0,
            shed_per_s: 0.0,
            held_per_s: 0.0,
            shed_share: 0.0,
            failure_ratio: 0.0,
        }
    }

    #[test]
    fn the_seed_sentence_for_a_25_s_endpoint_with_a_lane_of_4() {
        let e = evidence(&snapshot(Some(Duration::from_secs(25)), 40.0), 4);
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
        let e = evidence(&window.snapshot(start + Duration::from_secs(300)), 4);
        assert!(
            e.sentence
                .ends_with("0.16 events per second; you are generating 40")
        );
        assert!((e.shed_share - 0.9).abs() < 1e-9);
    }

    #[test]
    fn a_fast_endpoint_is_within_its_capacity() {
        let e = evidence(&snapshot(Some(Duration::from_millis(180)), 3.0), 8);
        assert_eq!(
            e.sentence,
            "at your current p95 of 180 ms and a lane of 8, you can receive 44 events per second; \
             you are generating 3, within that"
        );
    }

    #[test]
    fn no_samples_says_so() {
        let e = evidence(&snapshot(None, 1200.0), 4);
        assert_eq!(e.sustainable_per_s, None);
        assert_eq!(
            e.sentence,
            "no response times measured yet; with a lane of 4 you are generating 1,200 events per \
             second"
        );
    }

    #[test]
    fn evidence_serialises_durations_as_seconds() {
        let e = evidence(&snapshot(Some(Duration::from_millis(2500)), 1.0), 2);
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["p95_s"], 2.5);
        assert_eq!(json["lane"], 2);
        assert_eq!(json["sustainable_per_s"], 0.8);
        let empty = serde_json::to_value(evidence(&snapshot(None, 0.0), 2)).unwrap();
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
}
