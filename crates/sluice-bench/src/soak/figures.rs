//! The soak's report: its parameters, each fault's reading, loss and duplicates, where the
//! slowest deliveries spent their time, how the POSTs went, the claims, and the chart.

use std::collections::{BTreeMap, HashSet};

use super::run::Observed;
use super::schedule::Kind;
use super::verdicts::{Duplicates, duplicates, late_requests, tail};
use super::{
    ATTEMPT_S, DISPATCHERS, EXPLAIN_AFTER_S, HEALTHY, KNOWN_DEAD_S, LEASE_TTL_S, REAP_S, SLOW,
    Sizes, TAIL_FACTOR, TAIL_FLOOR_MS, round,
};
use crate::chart::{Line, Panel};
use crate::report::{Report, percentile};
use crate::timeline::{Timeline, ms};
use crate::{BenchArgs, save_chart};

/// One fault's reading.
pub(super) struct Reading {
    pub(super) judged_s: f64,
    pub(super) tail_s: Option<f64>,
}

/// The figures and the claims.
pub(super) fn figures(
    args: &BenchArgs,
    sizes: Sizes,
    seed: u64,
    timeline: &Timeline,
    seen: &Observed,
) -> Report {
    let mut report = parameters(sizes, seed, seen);
    let thresholds = thresholds(&mut report, timeline, sizes, seen);
    let readings = fault_readings(&mut report, seen, &thresholds);
    tails_read(&mut report, seen, &readings);
    let loss = loss_and_duplicates(&mut report, seen);
    where_the_time_went(&mut report, seen, sizes.healthy as u64);
    claims(&mut report, args, sizes, seen, &readings, &loss);
    report
}

/// The report, its parameters.
fn parameters(sizes: Sizes, seed: u64, seen: &Observed) -> Report {
    let mut report = Report::new(
        "soak",
        format!(
            "1 API + {DISPATCHERS} dispatcher processes (sluice serve --role, --lease-ttl \
             {LEASE_TTL_S}s) on PostgreSQL through a proxy that freezes and drops connections, \
             a redis-server of their own, all on loopback"
        ),
    );
    report.param("seed", seed);
    report.param("load_s", round(seen.schedule.load_s));
    report.param("warmup_s", seen.schedule.warmup_s);
    report.param("healthy_endpoints", sizes.healthy);
    report.param("healthy_rate_per_endpoint", sizes.healthy_rate);
    report.param("slow_ms", sizes.slow_ms);
    report.param("slow_rate", sizes.slow_rate);
    report.param("lane", sizes.lane);
    report.param("lease_ttl_s", LEASE_TTL_S);

    report
}

/// What a tail is judged against: the healthy (and the slow endpoint's) per-second p99, the
/// threshold it must come back under, and the requests that arrived later than that.
struct Thresholds {
    p99: Vec<Option<f64>>,
    slow_p99: Vec<Option<f64>>,
    threshold_ms: f64,
    slow_threshold_ms: f64,
    late_healthy: Vec<(f64, f64)>,
    late_slow: Vec<(f64, f64)>,
}

/// The baselines over the fault-free warm-up and the thresholds they give.
fn thresholds(
    report: &mut Report,
    timeline: &Timeline,
    sizes: Sizes,
    seen: &Observed,
) -> Thresholds {
    // The baseline: healthy p99 over the fault-free warm-up (its first second skipped).
    let warm = seen.schedule.warmup_s.floor() as usize;
    let baseline = timeline
        .latency_between(HEALTHY, 1.min(warm), warm)
        .quantile(0.99)
        .map(ms);
    let threshold_ms = baseline.map_or(TAIL_FLOOR_MS, |b| (TAIL_FACTOR * b).max(TAIL_FLOOR_MS));
    let p99_of = |group: usize| -> Vec<Option<f64>> {
        timeline
            .seconds(group)
            .iter()
            .map(|s| s.latency.quantile(0.99).map(ms))
            .collect()
    };
    let p99 = p99_of(HEALTHY);
    // The slow endpoint's tail too, for reading (not judged: its lane makes it queue).
    let slow_p99 = p99_of(SLOW);
    let slow_baseline = timeline
        .latency_between(SLOW, 1.min(warm), warm)
        .quantile(0.99)
        .map(ms);
    let slow_threshold_ms =
        slow_baseline.map_or(TAIL_FLOOR_MS, |b| (TAIL_FACTOR * b).max(TAIL_FLOOR_MS));
    report.figure(
        "baseline_p99_ms",
        "healthy p99 enqueue→delivery before the first fault (baseline)",
        baseline,
        "ms",
    );
    report.figure(
        "tail_threshold_ms",
        &format!("a tail ends when the per-second p99 is ≤ this ({TAIL_FACTOR}× baseline, ≥ {TAIL_FLOOR_MS} ms)"),
        Some(threshold_ms),
        "ms",
    );

    let slow_customer = sizes.healthy as u64;
    let late_healthy = late_requests(&seen.arrivals, |c| c != slow_customer, threshold_ms);
    let late_slow = late_requests(&seen.arrivals, |c| c == slow_customer, slow_threshold_ms);
    Thresholds {
        p99,
        slow_p99,
        threshold_ms,
        slow_threshold_ms,
        late_healthy,
        late_slow,
    }
}

/// Each fault: when, how long, its tail, the slow endpoint's tail and queue.
fn fault_readings(report: &mut Report, seen: &Observed, thresholds: &Thresholds) -> Vec<Reading> {
    let Thresholds {
        p99,
        slow_p99,
        threshold_ms,
        slow_threshold_ms,
        late_healthy,
        late_slow,
    } = thresholds;
    let (threshold_ms, slow_threshold_ms) = (*threshold_ms, *slow_threshold_ms);
    // Each fault.
    let mut readings = Vec::new();
    for (i, f) in seen.done.iter().enumerate() {
        let judged_s = f.kind.judged_length(f.length_s());
        let tail_s = tail(p99, late_healthy, f, threshold_ms);
        let target = match f.kind {
            Kind::DispatcherKill | Kind::DispatcherTerm => format!(" dispatcher-{}", f.target),
            _ => String::new(),
        };
        let drain = f.drain.map_or(String::new(), |(s, ok)| {
            format!(
                ", drained in {s:.1} s{}",
                if ok { "" } else { " (not clean)" }
            )
        });
        report.figure(
            &format!("tail_s.{i}.{}", f.kind.name()),
            &format!(
                "fault {:>3}: {}{target} at {:.1} s, {:.1} s long{drain}, judged on {:.1} s: tail \
                 ({})",
                i + 1,
                f.kind.name(),
                f.start_s,
                f.length_s(),
                judged_s,
                match tail_s {
                    Some(t) if t <= TAIL_FACTOR * judged_s => "ok",
                    Some(_) => "too long",
                    None => "nothing to read",
                }
            ),
            tail_s.map(round),
            "s",
        );
        report.figure(
            &format!("slow_tail_s.{i}.{}", f.kind.name()),
            &format!(
                "fault {:>3}: the slow endpoint's tail (p99 ≤ {slow_threshold_ms:.0} ms; not judged)",
                i + 1
            ),
            tail(slow_p99, late_slow, f, slow_threshold_ms).map(round),
            "s",
        );
        if let Some(q) = seen.slow_queue.get(i) {
            report.figure(
                &format!("slow_queue.{i}.{}", f.kind.name()),
                &format!(
                    "fault {:>3}: the slow endpoint's queue as it began: {}",
                    i + 1,
                    q.describe()
                ),
                Some(q.total()),
                "",
            );
        }
        readings.push(Reading { judged_s, tail_s });
    }
    readings
}

/// Faults by kind, the worst and the median tail.
fn tails_read(report: &mut Report, seen: &Observed, readings: &[Reading]) {
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for f in &seen.done {
        *by_kind.entry(f.kind.name()).or_default() += 1;
    }
    for kind in Kind::ALL {
        report.figure(
            &format!("faults.{}", kind.name()),
            &format!("faults: {}", kind.name()),
            Some(by_kind.get(kind.name()).copied().unwrap_or(0) as f64),
            "",
        );
    }
    let mut tails: Vec<f64> = readings.iter().filter_map(|r| r.tail_s).collect();
    tails.sort_by(f64::total_cmp);
    let worst = readings
        .iter()
        .map(|r| r.tail_s.unwrap_or(f64::INFINITY))
        .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.max(t))));
    report.figure(
        "worst_tail_s",
        "worst tail (n/a: a fault had nothing to read its tail by)",
        worst,
        "s",
    );
    report.figure(
        "median_tail_s",
        "median tail",
        tails.get(tails.len() / 2).copied(),
        "s",
    );
}

/// What loss and duplicates were counted.
struct Loss {
    lost: usize,
    dup: Duplicates,
    wrong_id: usize,
}

/// Acknowledged, delivered, lost, duplicated (and which fault explains each), wrong ids.
fn loss_and_duplicates(report: &mut Report, seen: &Observed) -> Loss {
    // Loss and duplicates.
    let delivered: HashSet<(u64, u64)> = seen.arrivals.iter().map(|a| a.key).collect();
    let lost = seen.acks.keys().filter(|k| !delivered.contains(k)).count();
    let dup = duplicates(&seen.arrivals, &seen.done);
    let wrong_id = seen
        .arrivals
        .iter()
        .filter(|a| seen.acks.get(&a.key).is_some_and(|id| *id != a.webhook_id))
        .count();
    let span = (seen.load_end_s).max(1.0);
    report.figure(
        "acknowledged",
        "messages acknowledged (202, or 200 for a retried key)",
        Some(seen.acks.len() as f64),
        "",
    );
    report.figure(
        "post_retries",
        "POSTs retried with the same Idempotency-Key",
        Some(seen.retries as f64),
        "",
    );
    report.figure(
        "abandoned",
        "messages the producers gave up on",
        Some(seen.abandoned as f64),
        "",
    );
    report.figure(
        "delivered_per_s",
        "requests the receivers saw, per second of load",
        Some(seen.arrivals.len() as f64 / span),
        "/s",
    );
    report.figure(
        "lost",
        "lost (acknowledged, never delivered)",
        Some(lost as f64),
        "",
    );
    report.figure(
        "duplicates",
        "duplicate requests (beyond a message's first)",
        Some(dup.requests as f64),
        "",
    );
    report.figure(
        "duplicated_messages",
        "messages delivered more than once",
        Some(dup.messages as f64),
        "",
    );
    for kind in Kind::ALL {
        if kind.explains(0.0, 0.0).is_some() {
            report.figure(
                &format!("duplicated_explained.{}", kind.name()),
                &format!("… first delivered at a {}", kind.name()),
                Some(dup.explained.get(kind.name()).copied().unwrap_or(0) as f64),
                "",
            );
        }
    }
    report.figure(
        "duplicated_explained",
        "… explained by a fault",
        Some(dup.explained_total() as f64),
        "",
    );
    report.figure(
        "duplicated_unexplained",
        "… explained by no fault",
        Some(dup.unexplained as f64),
        "",
    );
    report.figure(
        "wrong_webhook_id",
        "deliveries whose webhook-id is not the acknowledged message id",
        Some(wrong_id as f64),
        "",
    );
    Loss {
        lost,
        dup,
        wrong_id,
    }
}

/// Where the time went for the slowest deliveries, and when the late ones were sent.
fn where_the_time_went(report: &mut Report, seen: &Observed, slow_customer: u64) {
    // Where the time went for the slowest deliveries.
    let slow_requests = |group_of: &dyn Fn(u64) -> bool, over_s: f64| {
        seen.arrivals
            .iter()
            .filter(|a| group_of(a.key.0) && a.took_s.is_some_and(|t| t > over_s))
            .count() as f64
    };
    report.figure(
        "healthy_over_5s",
        "healthy requests more than 5 s after their POST",
        Some(slow_requests(&|c| c != slow_customer, 5.0)),
        "",
    );
    report.figure(
        "slow_over_5s",
        "slow endpoint's requests more than 5 s after their POST",
        Some(slow_requests(&|c| c == slow_customer, 5.0)),
        "",
    );
    let last = |slow: bool| {
        seen.arrivals
            .iter()
            .filter(|a| (a.key.0 == slow_customer) == slow)
            .map(|a| a.at_s)
            .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.max(t))))
            .map(|t| round(t - seen.load_end_s))
    };
    report.figure(
        "healthy_last_after_load_s",
        "last healthy request, after the load stopped",
        last(false),
        "s",
    );
    report.figure(
        "slow_last_after_load_s",
        "last request to the slow endpoint, after the load stopped",
        last(true),
        "s",
    );
    // When the late requests were sent: a fault's victims, or something else.
    let mut late_by_second: BTreeMap<i64, usize> = BTreeMap::new();
    for a in &seen.arrivals {
        if let Some(took) = a.took_s.filter(|t| *t > 5.0) {
            *late_by_second
                .entry((a.at_s - took).floor() as i64)
                .or_default() += 1;
        }
    }
    if !late_by_second.is_empty() {
        let seconds: Vec<String> = late_by_second
            .iter()
            .map(|(s, n)| format!("{s} s: {n}"))
            .collect();
        report.note(format!(
            "requests more than 5 s after their POST, by the second the POST began: {}",
            seconds.join(", ")
        ));
    }
    posts_read(report, seen, slow_customer);
    report.figure(
        "shed_slow",
        "slow endpoint: deliveries shed at a full lane, requeued after the shed delay (/metrics)",
        Some(seen.shed.0),
        "",
    );
    report.figure(
        "shed_healthy",
        "healthy endpoints: deliveries shed at a full lane, requeued after the shed delay (/metrics)",
        Some(seen.shed.1 - seen.shed.0),
        "",
    );
    report.figure(
        "attempted_more_than_once",
        "deliveries with more than one recorded attempt (store; a killed one is not recorded)",
        Some(seen.redelivered as f64),
        "",
    );
    report.figure(
        "dead",
        "dead-lettered at the end",
        Some(seen.dead as f64),
        "",
    );
    report.figure(
        "exits",
        "processes that exited by themselves",
        Some(seen.exits.len() as f64),
        "",
    );
    report.figure(
        "lane_peak",
        "slow receiver: most requests in flight at once",
        Some(seen.lane_peak as f64),
        "",
    );
    report.figure(
        "drain_s",
        "load stopped → everything delivered",
        seen.settled
            .then_some(round(seen.drained_s - seen.load_end_s)),
        "s",
    );
    report.figure(
        "slow_queue_left",
        &format!(
            "the slow endpoint's queue when the drain ended: {}",
            seen.slow_queue_left.describe()
        ),
        Some(seen.slow_queue_left.total()),
        "",
    );
}

/// The claims, and the notes that say how they are read.
fn claims(
    report: &mut Report,
    args: &BenchArgs,
    sizes: Sizes,
    seen: &Observed,
    readings: &[Reading],
    loss: &Loss,
) {
    let Loss {
        lost,
        dup,
        wrong_id,
    } = loss;
    let (lost, wrong_id) = (*lost, *wrong_id);
    let not_back = readings.iter().filter(|r| r.tail_s.is_none()).count();
    let too_long: Vec<usize> = readings
        .iter()
        .enumerate()
        .filter(|(_, r)| r.tail_s.is_none_or(|t| t > TAIL_FACTOR * r.judged_s))
        .map(|(i, _)| i + 1)
        .collect();
    // The claims.
    report.invariant(
        lost == 0 && seen.settled,
        format!(
            "0 acknowledged messages lost: {} acknowledged, {lost} lost{}",
            seen.acks.len(),
            if seen.settled {
                ""
            } else {
                " (the drain did not finish)"
            }
        ),
    );
    let exits: Vec<String> = seen
        .exits
        .iter()
        .map(|e| format!("{} at {:.1} s ({})", e.name, e.at_s, e.status))
        .collect();
    report.invariant(
        exits.is_empty(),
        format!(
            "no process exited by itself: {}",
            if exits.is_empty() {
                "none".to_owned()
            } else {
                exits.join(", ")
            }
        ),
    );
    report.invariant(
        seen.lane_peak <= sizes.lane as usize,
        format!(
            "at most N = {} requests in flight at the slow receiver: most {}",
            sizes.lane, seen.lane_peak
        ),
    );
    let explained: Vec<String> = dup
        .explained
        .iter()
        .map(|(k, n)| format!("{n} at a {k}"))
        .collect();
    report.verdict(
        dup.unexplained == 0 && dup.other_id == 0 && wrong_id == 0,
        format!(
            "duplicates only for deliveries in flight at a dispatcher kill -9 or a database \
             freeze or restart, with the same webhook-id: {} duplicates of {} messages ({}), \
             {} unexplained, {} with another webhook-id",
            dup.requests,
            dup.messages,
            if explained.is_empty() {
                "none explained".to_owned()
            } else {
                explained.join(", ")
            },
            dup.unexplained,
            dup.other_id + wrong_id as u64
        ),
    );
    report.verdict(
        too_long.is_empty() && !readings.is_empty(),
        format!(
            "every fault's tail back to baseline within {TAIL_FACTOR}× its length: {} of {} \
             faults{}{}",
            readings.len() - too_long.len(),
            readings.len(),
            if too_long.is_empty() {
                String::new()
            } else {
                format!(
                    "; not: fault {}",
                    too_long
                        .iter()
                        .map(usize::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
            if not_back > 0 {
                format!(" ({not_back} with nothing to read)")
            } else {
                String::new()
            }
        ),
    );
    if seen.skipped > 0 {
        report.note(format!(
            "{} fault(s) of the schedule left out: the run fell behind it (restarts, drains) \
             and they would not have ended before the load",
            seen.skipped
        ));
    }
    if !seen.survivors_clean {
        report.note("a process did not exit cleanly on SIGTERM at the end of the run");
    }
    report.note(format!(
        "a fault's tail: from its end (proxy thawed or up, process or Redis back and ready) \
         until the first second from which every second until the next fault has a healthy \
         p99 enqueue→delivery (by delivery second) ≤ the threshold (a second without deliveries \
         is not back), or until the last of its stragglers arrived (healthy requests already late \
         before the next fault began and not before this one did), whichever is later. A \
         dispatcher kill -9 is judged on two heartbeats + the reap interval \
         ({} s) when longer than its down time: its claimed work comes back only once it is \
         known dead",
        KNOWN_DEAD_S + REAP_S
    ));
    report.note(format!(
        "a duplicated message is explained when its first arrival lies within {ATTEMPT_S} s \
         (the total attempt deadline) before a dispatcher kill -9 (to {EXPLAIN_AFTER_S} s after \
         it), or from {ATTEMPT_S} s before a database freeze or restart to {EXPLAIN_AFTER_S} s \
         after its end"
    ));
    if args.smoke {
        report.note("smoke: faults of a few seconds with 5 s gaps; tails are printed, not judged");
    }
}

/// How the POSTs went, to tell an ingest that failed (the latency of a message acknowledged on
/// its third POST includes the producer's back-off) from a delivery that was late: messages
/// acknowledged on their first POST, the unacknowledged POSTs by minute and cause, and the
/// healthy p50 by two-minute window read from the first POST and from the acknowledged one.
pub(super) fn posts_read(report: &mut Report, seen: &Observed, slow_customer: u64) {
    let first = seen.posts.values().filter(|(tries, _)| *tries == 1).count();
    report.figure(
        "acknowledged_first_post",
        "messages acknowledged on their first POST",
        Some(first as f64),
        "",
    );
    let mut by_minute: BTreeMap<i64, BTreeMap<&str, usize>> = BTreeMap::new();
    for (at_s, why) in &seen.failures {
        *by_minute
            .entry((at_s / 60.0).floor() as i64)
            .or_default()
            .entry(why.as_str())
            .or_default() += 1;
    }
    if !by_minute.is_empty() {
        let minutes: Vec<String> = by_minute
            .iter()
            .map(|(m, kinds)| {
                let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} ×{n}")).collect();
                format!("min {m}: {}", kinds.join(" "))
            })
            .collect();
        report.note(format!(
            "POSTs not acknowledged, by the minute they began: {}",
            minutes.join("; ")
        ));
    }
    let mut windows: BTreeMap<i64, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for a in seen.arrivals.iter().filter(|a| a.key.0 != slow_customer) {
        let (Some(took), Some((_, post_s))) = (a.took_s, seen.posts.get(&a.key)) else {
            continue;
        };
        let w = windows.entry((a.at_s / 120.0).floor() as i64).or_default();
        w.0.push(took * 1e3);
        w.1.push((a.at_s - post_s) * 1e3);
    }
    let median = |v: &[f64]| percentile(v, 0.5).unwrap_or(f64::NAN);
    let read: Vec<String> = windows
        .iter()
        .map(|(w, (from_first, from_ack))| {
            format!(
                "{}–{} min {:.0}/{:.0}",
                w * 2,
                w * 2 + 2,
                median(from_first),
                median(from_ack)
            )
        })
        .collect();
    report.note(format!(
        "healthy p50 POST→delivery by two-minute window, from the first POST / from the \
         acknowledged POST (ms): {}",
        read.join(", ")
    ));
}

/// The series and the chart.
pub(super) fn chart(
    args: &BenchArgs,
    report: &mut Report,
    timeline: &Timeline,
    seen: &Observed,
) -> anyhow::Result<()> {
    let p99 = timeline.quantile_series(HEALTHY, 0.99);
    let p50 = timeline.quantile_series(HEALTHY, 0.5);
    let slow_p99 = timeline.quantile_series(SLOW, 0.99);
    let faults: Vec<(f64, f64)> = seen
        .done
        .iter()
        .flat_map(|f| {
            [
                (f.start_s, 0.0),
                (f.start_s, 1.0),
                (f.end_s, 1.0),
                (f.end_s, 0.0),
            ]
        })
        .collect();
    report.series("healthy_p50_ms", p50.clone());
    report.series("healthy_p99_ms", p99.clone());
    report.series("slow_p99_ms", slow_p99.clone());
    report.series("fault_active", faults.clone());
    let panels = [
        Panel::log(
            "enqueue → delivery, by delivery second",
            "ms",
            vec![
                Line::new("healthy p50", p50),
                Line::new("healthy p99", p99),
                Line::new("slow p99", slow_p99),
            ],
        ),
        Panel::linear(
            "faults (1 while one is active)",
            "",
            vec![Line::new("fault", faults)],
        ),
    ];
    save_chart(
        args,
        report,
        &format!(
            "soak: {} faults over {:.0} s of load",
            seen.done.len(),
            seen.schedule.load_s
        ),
        &panels,
    )
}
