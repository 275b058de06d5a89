//! The targets, pure: a broker destination costs no more than an HTTP one, a cloud destination
//! (to the sink) no more than twice.

/// The least share of HTTP's deliveries/s a broker destination must reach.
pub(super) const LEAST_SHARE_OF_HTTP: f64 = 0.8;

/// The least share a cloud destination (SQS, SNS, EventBridge, Pub/Sub) must reach, to the
/// cloud sink: its call is signed, and its answer parsed, beside what an HTTP delivery does.
pub(super) const LEAST_SHARE_OF_HTTP_CLOUD: f64 = 0.5;

/// A broker's deliveries/s against HTTP's, and whether it reaches `least`; `None` when HTTP
/// delivered nothing to compare with.
pub(super) fn against_http(broker_per_s: f64, http_per_s: f64, least: f64) -> Option<(f64, bool)> {
    (http_per_s > 0.0).then(|| {
        let share = broker_per_s / http_per_s;
        (share, share >= least)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_passes_at_four_fifths_of_http_and_fails_below() {
        let least = LEAST_SHARE_OF_HTTP;
        assert_eq!(against_http(800.0, 1000.0, least), Some((0.8, true)));
        assert_eq!(against_http(1500.0, 1000.0, least), Some((1.5, true)));
        let (share, pass) = against_http(790.0, 1000.0, least).unwrap();
        assert!((share - 0.79).abs() < 1e-9);
        assert!(!pass);
    }

    #[test]
    fn nothing_delivered_over_http_is_nothing_to_compare_with() {
        assert_eq!(against_http(500.0, 0.0, LEAST_SHARE_OF_HTTP), None);
        assert_eq!(
            against_http(500.0, 1000.0, LEAST_SHARE_OF_HTTP_CLOUD),
            Some((0.5, true))
        );
    }
}
