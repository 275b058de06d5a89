//! The fleet's judgements over what the run collected: loss and duplicates by event, how long
//! `/v1/scale` took to agree with the live dispatcher count, a drained process's counts, the
//! steady window. Pure: no I/O, unit-tested below.

use std::collections::HashMap;

use super::Plan;
use crate::arrivals::Arrival;

/// One reading of `/v1/scale`.
#[derive(Debug, Clone, Copy)]
pub(super) struct ScaleSample {
    pub(super) at_s: f64,
    pub(super) current_replicas: Option<u32>,
    pub(super) live: u32,
}

/// Seconds from `from_s` until the first reading before `until_s` that says `want` replicas.
pub(super) fn lag(samples: &[ScaleSample], from_s: f64, until_s: f64, want: u32) -> Option<f64> {
    samples
        .iter()
        .filter(|s| s.at_s >= from_s && s.at_s < until_s)
        .find(|s| s.current_replicas == Some(want))
        .map(|s| s.at_s - from_s)
}

/// What the deliveries say about loss and duplicates.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Tally {
    pub(super) acknowledged: u64,
    /// Acknowledged messages that reached their receiver at least once.
    pub(super) delivered: u64,
    /// Events delivered whose POST got no 202 (the answer was lost, the message kept).
    pub(super) delivered_unacknowledged: u64,
    /// Requests the receivers saw.
    pub(super) requests: u64,
    /// Requests beyond the first for the same event.
    pub(super) duplicates: u64,
    /// Events delivered more than once.
    pub(super) duplicated_events: u64,
    /// Duplicates with the same `webhook-id` as the event's first delivery.
    pub(super) duplicates_same_id: u64,
    /// Duplicated events whose first delivery arrived within `window_s` before the kill.
    pub(super) duplicated_at_kill: u64,
    /// Deliveries whose `webhook-id` is not the id the API acknowledged for the event.
    pub(super) wrong_id: u64,
}

/// Count loss and duplicates: an event's first delivery arrived "at the kill" when within
/// `window_s` before `kill_s` (plus a tenth of a second for the clock reads).
pub(super) fn tally(
    arrivals: &[Arrival],
    acks: &HashMap<(u64, u64), String>,
    kill_s: f64,
    window_s: f64,
) -> Tally {
    let mut by_key: HashMap<(u64, u64), Vec<&Arrival>> = HashMap::new();
    for a in arrivals {
        by_key.entry(a.key).or_default().push(a);
    }
    let mut t = Tally {
        acknowledged: acks.len() as u64,
        requests: arrivals.len() as u64,
        ..Tally::default()
    };
    for (key, seen) in &by_key {
        match acks.get(key) {
            Some(id) => {
                t.delivered += 1;
                t.wrong_id += seen.iter().filter(|a| &a.webhook_id != id).count() as u64;
            }
            None => t.delivered_unacknowledged += 1,
        }
        if seen.len() > 1 {
            t.duplicated_events += 1;
            t.duplicates += seen.len() as u64 - 1;
            let first = *seen
                .iter()
                .min_by(|a, b| a.at_s.total_cmp(&b.at_s))
                .expect("non-empty");
            t.duplicates_same_id += seen
                .iter()
                .filter(|a| !std::ptr::eq(**a, first) && a.webhook_id == first.webhook_id)
                .count() as u64;
            if first.at_s >= kill_s - window_s && first.at_s <= kill_s + 0.1 {
                t.duplicated_at_kill += 1;
            }
        }
    }
    t
}

/// `finished=N released=M` from the `stopped:` line of a drained process.
pub(super) fn drain_counts(said: &str) -> (Option<f64>, Option<f64>) {
    let line = said.lines().find(|l| l.contains("stopped:")).unwrap_or("");
    let field = |name: &str| {
        let at = line.find(&format!("{name}="))? + name.len() + 1;
        line[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    (field("finished"), field("released"))
}

/// The whole seconds of the steady phase the healthy figures are read over: after 2 s of
/// warm-up when the phase is 10 s or longer.
pub(super) fn steady_window(plan: Plan) -> (usize, usize) {
    let to = plan.kill_s;
    let from = if to >= 10.0 { 2 } else { 0 };
    (from, (to.floor() as usize).max(from))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrival(c: u64, seq: u64, id: &str, at_s: f64) -> Arrival {
        Arrival {
            key: (c, seq),
            webhook_id: id.into(),
            at_s,
            took_s: None,
        }
    }

    #[test]
    fn tally_counts_loss_and_duplicates_by_event() {
        let acks: HashMap<_, _> = [((0, 0), "msg_a"), ((0, 1), "msg_b"), ((0, 2), "msg_c")]
            .into_iter()
            .map(|(k, v)| (k, v.to_owned()))
            .collect();
        let seen = [
            arrival(0, 0, "msg_a", 1.0),
            // In flight at the kill at 10 s, delivered again after its lease expired.
            arrival(0, 1, "msg_b", 9.8),
            arrival(0, 1, "msg_b", 70.0),
            // Not acknowledged (the 202 was lost), delivered anyway.
            arrival(0, 3, "msg_d", 2.0),
        ];
        let t = tally(&seen, &acks, 10.0, 1.25);
        assert_eq!(
            t,
            Tally {
                acknowledged: 3,
                delivered: 2,
                delivered_unacknowledged: 1,
                requests: 4,
                duplicates: 1,
                duplicated_events: 1,
                duplicates_same_id: 1,
                duplicated_at_kill: 1,
                wrong_id: 0,
            }
        );
        // A duplicate long before the kill, under another id.
        let t = tally(
            &[arrival(0, 0, "msg_a", 1.0), arrival(0, 0, "msg_x", 2.0)],
            &acks,
            10.0,
            1.25,
        );
        assert_eq!(
            (t.duplicated_at_kill, t.duplicates_same_id, t.wrong_id),
            (0, 0, 1)
        );
    }

    #[test]
    fn lag_is_the_first_reading_that_agrees() {
        let s = |at_s, n| ScaleSample {
            at_s,
            current_replicas: Some(n),
            live: 2,
        };
        let samples = [s(9.0, 3), s(10.5, 3), s(21.0, 2), s(22.0, 2)];
        assert_eq!(lag(&samples, 10.0, 30.0, 2), Some(11.0));
        assert_eq!(lag(&samples, 10.0, 20.0, 2), None);
    }

    #[test]
    fn reads_the_drain_counts() {
        let said = "2026-01-01T00:00:00Z  INFO sluice: stopped: in-flight attempts finished, the \
                    rest released for redelivery finished=7 released=0\n";
        assert_eq!(drain_counts(said), (Some(7.0), Some(0.0)));
        assert_eq!(drain_counts("nothing"), (None, None));
    }
}
