//! What happens next after an attempt: the one place that turns a response or failure into a
//! settle outcome, a governor observation and a disable. Pure, so it is tested alone. (A
//! `Retry-After` pauses the endpoint through the governor, which reads it from the observation;
//! here it only sets the earliest retry.)

use std::time::Duration;

use super::{ErrorKind, Failure, MAX_ERROR_BYTES, Response, storable};
use crate::admission::governor::Observation;
use crate::model::SettleOutcome;
use crate::retry::{RetrySchedule, clamp_retry_after};
use crate::stats::AttemptKind;

/// The consequences of one attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// What the store does with the delivery.
    pub outcome: SettleOutcome,
    /// What the governor learns.
    pub observation: Observation,
    /// Disable the endpoint with this reason (410 Gone).
    pub disable: Option<String>,
    /// Did the attempt fail (for the error breaker and auto-disable)?
    pub failed: bool,
    /// How it ended, for the evidence (delivered, refused, timed out, 5xx, 429, other).
    pub kind: AttemptKind,
}

/// Decide what follows an attempt; `attempts_made` includes this one.
pub fn decide(
    result: &Result<Response, Failure>,
    attempts_made: u32,
    schedule: &RetrySchedule,
    max_pause: Duration,
    now_ms: i64,
    jitter_sample: f64,
) -> Decision {
    let retry_or_dead = |floor_ms: i64, why: String| match schedule.next_attempt_at(
        attempts_made,
        now_ms,
        jitter_sample,
    ) {
        Some(at_ms) => SettleOutcome::Retry {
            at_ms: at_ms.max(floor_ms),
        },
        None => SettleOutcome::Dead {
            reason: format!("{why} after {attempts_made} attempts"),
        },
    };
    let kind = match result {
        Ok(r) => AttemptKind::classify(Some(r.status), None),
        Err(f) => AttemptKind::classify(None, Some(f.kind.as_str())),
    };
    match result {
        Ok(r) if (200..300).contains(&r.status) => Decision {
            outcome: SettleOutcome::Delivered,
            observation: Observation::Success,
            disable: None,
            failed: false,
            kind,
        },
        Ok(r) if r.status == 410 => Decision {
            // Held, not dropped: the endpoint is disabled and its deliveries wait for re-enable.
            outcome: SettleOutcome::Retry { at_ms: now_ms },
            observation: Observation::OtherFailure,
            disable: Some("endpoint answered 410 Gone".into()),
            failed: true,
            kind,
        },
        Ok(r) if matches!(r.status, 429 | 502 | 503 | 504) => {
            let pause = r.retry_after.map(|d| clamp_retry_after(d, max_pause));
            let floor_ms = now_ms + pause.map_or(0, |d| d.as_millis() as i64);
            Decision {
                outcome: retry_or_dead(floor_ms, format!("HTTP {}", r.status)),
                observation: Observation::Throttled {
                    retry_after: r.retry_after,
                },
                disable: None,
                failed: true,
                kind,
            }
        }
        Ok(r) => Decision {
            outcome: retry_or_dead(now_ms, format!("HTTP {}", r.status)),
            observation: Observation::OtherFailure,
            disable: None,
            failed: true,
            kind,
        },
        // Refused by the guard, or a message the service can never accept: no retry changes it.
        Err(f) if matches!(f.kind, ErrorKind::Refused | ErrorKind::Invalid) => Decision {
            outcome: SettleOutcome::Dead {
                reason: storable(f.message.as_bytes(), MAX_ERROR_BYTES),
            },
            observation: Observation::OtherFailure,
            disable: None,
            failed: true,
            kind,
        },
        // A broker's backpressure is its 503: the governor slows down for it.
        // A cloud service's throttling is its 429.
        Err(f) if matches!(f.kind, ErrorKind::BrokerBlocked | ErrorKind::Throttled) => Decision {
            outcome: retry_or_dead(now_ms, f.kind.as_str().to_string()),
            observation: Observation::Throttled { retry_after: None },
            disable: None,
            failed: true,
            kind,
        },
        Err(f) => Decision {
            outcome: retry_or_dead(now_ms, f.kind.as_str().to_string()),
            observation: if f.kind.is_timeout() {
                Observation::Timeout
            } else if matches!(
                f.kind,
                ErrorKind::ConnectionRefused | ErrorKind::ConnectionReset | ErrorKind::Dns
            ) {
                Observation::ConnectFailure
            } else {
                Observation::OtherFailure
            },
            disable: None,
            failed: true,
            kind,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: u16, retry_after: Option<u64>) -> Result<Response, Failure> {
        Ok(Response {
            status,
            retry_after: retry_after.map(Duration::from_secs),
            body: Vec::new(),
        })
    }

    fn failure(kind: ErrorKind) -> Result<Response, Failure> {
        Err(Failure {
            kind,
            message: kind.as_str().into(),
        })
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn a_cloud_services_throttling_is_read_like_a_429_and_an_invalid_message_is_dead() {
        let schedule = RetrySchedule::default();
        let d = decide(&failure(ErrorKind::Throttled), 1, &schedule, HOUR, 0, 0.5);
        assert_eq!(d.observation, Observation::Throttled { retry_after: None });
        assert_eq!(d.kind, AttemptKind::Throttled);
        assert!(matches!(d.outcome, SettleOutcome::Retry { .. }));
        let d = decide(&failure(ErrorKind::Invalid), 1, &schedule, HOUR, 0, 0.5);
        assert!(matches!(d.outcome, SettleOutcome::Dead { .. }), "{d:?}");
        assert_eq!(d.observation, Observation::OtherFailure);
    }

    #[test]
    fn success_delivers() {
        let d = decide(
            &response(204, None),
            1,
            &RetrySchedule::default(),
            HOUR,
            0,
            0.5,
        );
        assert_eq!(d.outcome, SettleOutcome::Delivered);
        assert_eq!(d.observation, Observation::Success);
        assert!(!d.failed);
    }

    #[test]
    fn gone_disables_and_holds() {
        let d = decide(
            &response(410, None),
            1,
            &RetrySchedule::default(),
            HOUR,
            7,
            0.5,
        );
        assert_eq!(d.outcome, SettleOutcome::Retry { at_ms: 7 });
        assert!(d.disable.is_some());
    }

    #[test]
    fn throttling_honours_retry_after_and_pauses() {
        let d = decide(
            &response(429, Some(120)),
            1,
            &RetrySchedule::default(),
            HOUR,
            0,
            0.5,
        );
        // The first retry is due after 5 s, but not before the endpoint's Retry-After.
        assert_eq!(d.outcome, SettleOutcome::Retry { at_ms: 120_000 });
        assert!(matches!(d.observation, Observation::Throttled { .. }));
    }

    #[test]
    fn retry_after_is_clamped() {
        let d = decide(
            &response(503, Some(10 * 86_400)),
            1,
            &RetrySchedule::default(),
            HOUR,
            0,
            0.5,
        );
        // The retry is due no sooner than the Retry-After, clamped to the longest pause (an
        // hour here).
        assert_eq!(d.outcome, SettleOutcome::Retry { at_ms: 3_600_000 });
    }

    #[test]
    fn other_statuses_retry_on_schedule_then_dead_letter() {
        let d = decide(
            &response(500, None),
            1,
            &RetrySchedule::default(),
            HOUR,
            0,
            0.5,
        );
        assert_eq!(d.outcome, SettleOutcome::Retry { at_ms: 5_000 });
        assert_eq!(d.observation, Observation::OtherFailure);
        let d = decide(
            &response(500, None),
            8,
            &RetrySchedule::default(),
            HOUR,
            0,
            0.5,
        );
        assert!(matches!(d.outcome, SettleOutcome::Dead { .. }));
    }

    #[test]
    fn redirects_are_failures() {
        let d = decide(
            &response(302, None),
            1,
            &RetrySchedule::default(),
            HOUR,
            0,
            0.5,
        );
        assert!(d.failed);
        assert!(matches!(d.outcome, SettleOutcome::Retry { .. }));
    }

    #[test]
    fn timeouts_and_refusals_feed_the_governor_and_retry() {
        let d = decide(
            &failure(ErrorKind::ReadTimeout),
            1,
            &RetrySchedule::default(),
            HOUR,
            0,
            0.5,
        );
        assert_eq!(d.observation, Observation::Timeout);
        let d = decide(
            &failure(ErrorKind::ConnectionRefused),
            1,
            &RetrySchedule::default(),
            HOUR,
            0,
            0.5,
        );
        assert_eq!(d.observation, Observation::ConnectFailure);
        assert!(matches!(d.outcome, SettleOutcome::Retry { .. }));
    }

    /// Certificate and handshake failures, and a token endpoint that gives no token, are
    /// failures (the error breaker and auto-disable count them) retried on the schedule; none
    /// of them is throttling, and only a handshake that stalled slows the governor like a
    /// timeout.
    #[test]
    fn tls_and_token_failures_are_failures_never_throttling() {
        for kind in [
            ErrorKind::TlsCertificateUnknown,
            ErrorKind::TlsCertificateExpired,
            ErrorKind::TlsCertificateName,
            ErrorKind::TlsClientCertificate,
            ErrorKind::TlsHandshake,
            ErrorKind::TlsTimeout,
            ErrorKind::TokenEndpoint,
        ] {
            let d = decide(&failure(kind), 1, &RetrySchedule::default(), HOUR, 0, 0.5);
            assert!(d.failed, "{kind:?}");
            assert!(matches!(d.outcome, SettleOutcome::Retry { .. }), "{kind:?}");
            let expected = match kind {
                ErrorKind::TlsTimeout => Observation::Timeout,
                _ => Observation::OtherFailure,
            };
            assert_eq!(d.observation, expected, "{kind:?}");
            assert_ne!(d.kind, AttemptKind::Throttled);
            assert_ne!(
                d.kind,
                AttemptKind::Other,
                "{kind:?} is named in the evidence"
            );
        }
    }

    #[test]
    fn a_refused_destination_is_not_retried() {
        let d = decide(
            &failure(ErrorKind::Refused),
            1,
            &RetrySchedule::default(),
            HOUR,
            0,
            0.5,
        );
        assert!(matches!(d.outcome, SettleOutcome::Dead { .. }));
    }
}
