//! `hostile`'s judgements over collected numbers: whether B's latency holds, how an attempt
//! ended, the most and the mean of a watched series. Pure: no I/O, unit-tested below.

use serde_json::Value;

use super::{FACTOR, FLOOR_MS};

/// Does B's p99 beside A hold the target: within [`FACTOR`]× its p99 alone, or under
/// [`FLOOR_MS`]? No delivery beside A (`None`) does not.
pub(super) fn latency_holds(beside_p99_ms: Option<f64>, alone_p99_ms: Option<f64>) -> bool {
    match (beside_p99_ms, alone_p99_ms) {
        (Some(beside), _) if beside < FLOOR_MS => true,
        (Some(beside), Some(alone)) => beside <= FACTOR * alone,
        _ => false,
    }
}

/// How an attempt (an item of `GET /v1/endpoints/{id}/attempts`) ended: its error kind
/// (`token_endpoint`, `timeout_read`, …), else `http_<status>`.
pub(super) fn attempt_kind(attempt: &Value) -> String {
    if let Some(kind) = attempt["error_kind"].as_str() {
        return kind.to_owned();
    }
    match attempt["status"].as_u64() {
        Some(status) => format!("http_{status}"),
        None => "unknown".to_owned(),
    }
}

/// The most of a watched series.
pub(super) fn watch_max(points: &[(f64, f64)]) -> Option<f64> {
    points.iter().map(|p| p.1).reduce(f64::max)
}

/// The mean of a watched series.
pub(super) fn watch_mean(points: &[(f64, f64)]) -> Option<f64> {
    (!points.is_empty()).then(|| points.iter().map(|p| p.1).sum::<f64>() / points.len() as f64)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn b_holds_within_twice_its_baseline_or_under_the_floor() {
        assert!(latency_holds(Some(19.0), Some(10.0)));
        assert!(latency_holds(Some(20.0), Some(10.0)));
        // Above 2× a tiny baseline, but under 100 ms.
        assert!(latency_holds(Some(90.0), Some(3.0)));
        assert!(!latency_holds(Some(250.0), Some(100.0)));
        assert!(latency_holds(Some(150.0), Some(80.0)));
        // The 9.4 s of a pool held by 9.5 s answers.
        assert!(!latency_holds(Some(9_400.0), Some(5.0)));
        // Nothing delivered beside A holds nothing; no baseline leaves only the floor.
        assert!(!latency_holds(None, Some(5.0)));
        assert!(latency_holds(Some(50.0), None));
        assert!(!latency_holds(Some(150.0), None));
    }

    #[test]
    fn an_attempt_is_its_error_kind_else_its_status() {
        let kind = |v: Value| attempt_kind(&v);
        assert_eq!(
            kind(json!({ "status": null, "error_kind": "token_endpoint" })),
            "token_endpoint"
        );
        assert_eq!(
            kind(json!({ "status": 200, "error_kind": null })),
            "http_200"
        );
        assert_eq!(
            kind(json!({ "status": 401, "error_kind": "token_too_large" })),
            "token_too_large"
        );
        assert_eq!(kind(json!({})), "unknown");
    }

    #[test]
    fn samples_give_their_most_and_mean() {
        assert_eq!(watch_max(&[]), None);
        assert_eq!(watch_mean(&[]), None);
        let s = [(0.0, 4.0), (1.0, 64.0), (2.0, 1.0)];
        assert_eq!(watch_max(&s), Some(64.0));
        assert_eq!(watch_mean(&s), Some(23.0));
    }
}
