//! The fleet's report: the baseline beside the fleet, the lane, loss and duplicates, the
//! leases of the SIGTERM'd dispatcher, `/v1/scale`, Redis down, saturation; and the chart.

use super::baseline::OneProcess;
use super::run::Observed;
use super::verdicts::{Tally, drain_counts, lag, steady_window, tally};
use super::{DISPATCHERS, HEALTHY, PHASES, Plan, SLOW, Sizes, heartbeat, round};
use crate::chart::{Line, Panel};
use crate::report::{Report, ratio};
use crate::timeline::{Timeline, ms};
use crate::{BenchArgs, save_chart};

/// The figures and the claims.
pub(super) fn figures(
    sizes: Sizes,
    plan: Plan,
    timeline: &Timeline,
    start_lag: Option<f64>,
    seen: &Observed,
    one: &OneProcess,
) -> Report {
    let counts = Counts::of(sizes, plan, seen);
    let mut report = parameters(sizes, plan, seen, &counts);
    lane_loss_and_leases(&mut report, sizes, plan, timeline, seen, &counts);
    let lags = scale_read(&mut report, seen, &counts, start_lag);
    let redis_down_delivered = phases(&mut report, timeline, &counts);
    beside_one_process(&mut report, plan, timeline, seen, one);
    claims(
        &mut report,
        sizes,
        seen,
        &counts,
        &lags,
        redis_down_delivered,
    );
    report
}

/// What the figures and the claims both read, counted once.
struct Counts<'a> {
    heartbeat_s: f64,
    kill_window_s: f64,
    t: Tally,
    lost: u64,
    left_by_term: Vec<&'a (i64, Option<i64>)>,
    finished: Option<f64>,
    released: Option<f64>,
    bounds: [f64; 7],
    peak: usize,
}

impl<'a> Counts<'a> {
    fn of(sizes: Sizes, plan: Plan, seen: &'a Observed) -> Self {
        let slow_ms = sizes.slow_ms;
        let Observed {
            kill_at,
            ref orphaned,
            ref at_exit,
            ref after_exit,
            ref said,
            ref peaks,
            drained_s,
            ref acks,
            ref arrivals,
            ..
        } = *seen;
        let heartbeat_s = heartbeat().as_secs_f64();
        let kill_window_s = slow_ms as f64 / 1000.0 + 1.0;
        let t = tally(arrivals, acks, kill_at, kill_window_s);
        let lost = t.acknowledged - t.delivered;
        let left_by_term: Vec<_> = at_exit
            .intersection(after_exit)
            .filter(|l| !orphaned.contains(l))
            .collect();
        let (finished, released) = drain_counts(said);
        let bounds = plan.bounds(drained_s);
        let peak = peaks.iter().copied().max().unwrap_or(0);
        Counts {
            heartbeat_s,
            kill_window_s,
            t,
            lost,
            left_by_term,
            finished,
            released,
            bounds,
            peak,
        }
    }
}

/// The report, its parameters.
fn parameters(sizes: Sizes, plan: Plan, seen: &Observed, counts: &Counts<'_>) -> Report {
    let Sizes {
        healthy,
        healthy_rate,
        slow_ms,
        slow_rate,
        lane,
        ..
    } = sizes;
    let Observed {
        kill_at, term_at, ..
    } = *seen;
    let Counts { heartbeat_s, .. } = *counts;
    let mut report = Report::new(
        "fleet",
        format!(
            "1 API + {DISPATCHERS} dispatcher processes (sluice serve --role), PostgreSQL, \
             redis-server of their own, all on loopback"
        ),
    );
    report.param("load_s", plan.end_s);
    report.param("healthy_endpoints", healthy);
    report.param("healthy_rate_per_endpoint", healthy_rate);
    report.param("slow_ms", slow_ms);
    report.param("slow_rate", slow_rate);
    report.param("lane", lane);
    report.param("heartbeat_s", heartbeat_s);
    report.param("kill9_at_s", round(kill_at));
    report.param("sigterm_at_s", round(term_at));
    report.param(
        "redis_down_s",
        format!("{}–{}", plan.redis_down_s, plan.redis_up_s),
    );
    report
}

/// The lane, loss and duplicates, and the SIGTERM'd dispatcher's leases.
fn lane_loss_and_leases(
    report: &mut Report,
    sizes: Sizes,
    plan: Plan,
    timeline: &Timeline,
    seen: &Observed,
    counts: &Counts<'_>,
) {
    let Sizes { lane, .. } = sizes;
    let Observed {
        term_at,
        exited_at,
        ref orphaned,
        ref at_exit,
        ref peaks,
        dead,
        ..
    } = *seen;
    let Counts {
        heartbeat_s,
        kill_window_s,
        ref t,
        lost,
        ref left_by_term,
        finished,
        released,
        peak,
        ..
    } = *counts;

    let n = f64::from(lane);
    report.figure("lane", "slow endpoint: fleet-wide lane N", Some(n), "slots");
    report.figure(
        "slow_max_in_flight",
        "slow receiver: most requests in flight at once, whole run",
        Some(peak as f64),
        "",
    );
    for (i, (key, label)) in PHASES.iter().enumerate() {
        report.figure(
            &format!("slow_max_in_flight.{key}"),
            &format!("slow receiver: most in flight, {label}"),
            peaks.get(i).map(|&p| p as f64),
            "",
        );
    }
    report.figure(
        "acknowledged",
        "messages acknowledged (202)",
        Some(t.acknowledged as f64),
        "",
    );
    report.figure(
        "delivered",
        "acknowledged messages delivered at least once",
        Some(t.delivered as f64),
        "",
    );
    report.figure(
        "lost",
        "lost (acknowledged − delivered)",
        Some(lost as f64),
        "",
    );
    report.figure(
        "delivered_unacknowledged",
        "delivered although the POST got no 202",
        Some(t.delivered_unacknowledged as f64),
        "",
    );
    report.figure(
        "post_errors",
        "POSTs without a 202",
        Some((timeline.errors(HEALTHY) + timeline.errors(SLOW)) as f64),
        "",
    );
    report.figure(
        "requests",
        "requests the receivers saw",
        Some(t.requests as f64),
        "",
    );
    report.figure(
        "duplicates",
        "duplicate deliveries (requests beyond an event's first)",
        Some(t.duplicates as f64),
        "",
    );
    report.figure(
        "duplicates_same_webhook_id",
        "duplicates with the first delivery's webhook-id",
        Some(t.duplicates_same_id as f64),
        "",
    );
    report.figure(
        "duplicated_events",
        "events delivered more than once",
        Some(t.duplicated_events as f64),
        "",
    );
    report.figure(
        "duplicated_at_kill",
        &format!("… of which first delivered within {kill_window_s} s before the kill -9"),
        Some(t.duplicated_at_kill as f64),
        "",
    );
    report.figure(
        "wrong_webhook_id",
        "deliveries whose webhook-id is not the acknowledged message id",
        Some(t.wrong_id as f64),
        "",
    );
    report.figure("dead", "dead-lettered at the end", Some(dead as f64), "");
    report.figure(
        "sigterm_drain_s",
        "SIGTERM → exit of the scaled-in dispatcher",
        Some(exited_at - term_at),
        "s",
    );
    report.figure(
        "sigterm_finished",
        "scaled-in dispatcher: attempts finished in its drain",
        finished,
        "",
    );
    report.figure(
        "sigterm_released",
        "scaled-in dispatcher: claimed deliveries released unattempted",
        released,
        "",
    );
    report.figure(
        "leased_at_sigterm_exit",
        "leased right after its exit (the others' work included)",
        Some(at_exit.len() as f64),
        "",
    );
    report.figure(
        "leased_left_by_sigterm",
        &format!(
            "… still leased {} s later and not an orphan of the kill -9",
            plan.lease_gap.as_secs()
        ),
        Some(left_by_term.len() as f64),
        "",
    );
    report.figure(
        "kill9_leases_at_sigterm",
        "the killed dispatcher's leases still held at the SIGTERM",
        Some(orphaned.len() as f64),
        "",
    );
    report.figure("heartbeat_s", "heartbeat interval", Some(heartbeat_s), "s");
}

/// How long `/v1/scale` took to follow the live dispatcher count.
struct Lags {
    stale_s: f64,
    lag_start: Option<f64>,
    lag_kill: Option<f64>,
    lag_term: Option<f64>,
}

/// `/v1/scale` beside the live dispatcher count.
fn scale_read(
    report: &mut Report,
    seen: &Observed,
    counts: &Counts<'_>,
    start_lag: Option<f64>,
) -> Lags {
    let Observed {
        kill_at,
        term_at,
        ref scale,
        drained_s,
        ..
    } = *seen;
    let Counts { heartbeat_s, .. } = *counts;
    let stale_s = heartbeat_s * 3.0;
    let lag_start = start_lag;
    let lag_kill = lag(scale, kill_at, term_at, DISPATCHERS - 1);
    let lag_term = lag(scale, term_at, drained_s + 1.0, DISPATCHERS - 2);
    report.figure(
        "scale_lag_start_s",
        "/v1/scale current_replicas = 3 after the dispatchers are ready",
        lag_start,
        "s",
    );
    report.figure(
        "scale_lag_kill9_s",
        "/v1/scale current_replicas = 2 after the kill -9",
        lag_kill,
        "s",
    );
    report.figure(
        "scale_lag_sigterm_s",
        "/v1/scale current_replicas = 1 after the SIGTERM",
        lag_term,
        "s",
    );
    let readings = scale
        .iter()
        .filter(|s| s.current_replicas.is_some())
        .count();
    let matching = scale
        .iter()
        .filter(|s| s.current_replicas == Some(s.live))
        .count();
    report.figure(
        "scale_readings_matching",
        "/v1/scale readings equal to the live dispatcher count",
        (readings > 0).then(|| matching as f64 / readings as f64),
        "",
    );
    Lags {
        stale_s,
        lag_start,
        lag_kill,
        lag_term,
    }
}

/// Each phase's healthy latency and deliveries per second; the deliveries while Redis was down
/// `(healthy, slow)`.
fn phases(report: &mut Report, timeline: &Timeline, counts: &Counts<'_>) -> (u64, u64) {
    let bounds = counts.bounds;
    let mut redis_down_delivered = (0, 0);
    for (i, (key, label)) in PHASES.iter().enumerate() {
        let (from, to) = (bounds[i], bounds[i + 1]);
        // The load's first 2 s are warm-up (as in the other scenarios' phases of 10 s or more);
        // every later phase starts with its event, which is what it measures.
        let from = if i == 0 && to >= 10.0 { 2.0 } else { from };
        let (from_i, to_i) = (
            from.ceil() as usize,
            (to.floor() as usize).max(from.ceil() as usize),
        );
        let h = timeline.latency_between(HEALTHY, from_i, to_i);
        report.figure(
            &format!("healthy_p50_ms.{key}"),
            &format!("healthy p50 enqueue→delivery, {label}"),
            h.quantile(0.5).map(ms),
            "ms",
        );
        report.figure(
            &format!("healthy_p99_ms.{key}"),
            &format!("healthy p99 enqueue→delivery, {label}"),
            h.quantile(0.99).map(ms),
            "ms",
        );
        let span = (to_i - from_i) as f64;
        let slow = timeline.delivered_between(SLOW, from_i, to_i);
        let healthy = timeline.delivered_between(HEALTHY, from_i, to_i);
        if *key == "redis_down" {
            redis_down_delivered = (healthy, slow);
        }
        report.figure(
            &format!("healthy_delivered_per_s.{key}"),
            &format!("healthy deliveries, {label}"),
            (span > 0.0).then(|| healthy as f64 / span),
            "/s",
        );
        report.figure(
            &format!("slow_delivered_per_s.{key}"),
            &format!("slow deliveries, {label}"),
            (span > 0.0).then(|| slow as f64 / span),
            "/s",
        );
    }
    redis_down_delivered
}

/// The fleet beside one process, over the same steady seconds of the same load.
fn beside_one_process(
    report: &mut Report,
    plan: Plan,
    timeline: &Timeline,
    seen: &Observed,
    one: &OneProcess,
) {
    let Observed {
        load_end,
        drained_s,
        settled,
        ..
    } = *seen;
    let (from, to) = steady_window(plan);
    let steady = timeline.latency_between(HEALTHY, from, to);
    let fleet_p99 = steady.quantile(0.99).map(ms);
    report.figure(
        "one_process_healthy_p50_ms",
        "one process, same load: healthy p50 enqueue→delivery",
        one.p50_ms,
        "ms",
    );
    report.figure(
        "one_process_healthy_p99_ms",
        "one process, same load: healthy p99 enqueue→delivery",
        one.p99_ms,
        "ms",
    );
    report.figure(
        "one_process_healthy_per_s",
        "one process, same load: healthy deliveries",
        one.per_s,
        "/s",
    );
    let factor = ratio(fleet_p99, one.p99_ms);
    report.figure(
        "fleet_p99_vs_one_process",
        "healthy p99 before the kill -9: fleet ÷ one process",
        factor,
        "×",
    );
    report.verdict(
        factor.is_some_and(|f| f <= 2.0),
        format!(
            "the fleet's healthy p99 is within 2× one process's at the same load: {} ({} against {} ms)",
            factor.map_or("n/a".into(), |f| format!("{f:.2}×")),
            fleet_p99.map_or("n/a".into(), |v| format!("{v:.1}")),
            one.p99_ms.map_or("n/a".into(), |v| format!("{v:.1}")),
        ),
    );
    report.figure(
        "drain_s",
        "load stopped → everything delivered",
        settled.then_some(drained_s - load_end),
        "s",
    );
}

/// The claims.
fn claims(
    report: &mut Report,
    sizes: Sizes,
    seen: &Observed,
    counts: &Counts<'_>,
    lags: &Lags,
    redis_down_delivered: (u64, u64),
) {
    let Sizes { lane, .. } = sizes;
    let Observed {
        exit,
        ref peaks,
        settled,
        survivors_ok,
        ..
    } = *seen;
    let Counts {
        heartbeat_s,
        ref t,
        lost,
        ref left_by_term,
        finished,
        released,
        peak,
        ..
    } = *counts;
    let Lags {
        stale_s,
        lag_start,
        lag_kill,
        lag_term,
    } = *lags;
    let phase_peaks: Vec<String> = peaks.iter().map(usize::to_string).collect();
    report.invariant(
        peak <= lane as usize,
        format!(
            "at most N = {lane} requests in flight at the slow receiver: most {peak} (per phase: {})",
            phase_peaks.join(", ")
        ),
    );
    report.verdict(
        lost == 0 && settled,
        format!(
            "0 acknowledged messages lost: {} acknowledged, {} delivered, {lost} lost{}",
            t.acknowledged,
            t.delivered,
            if settled {
                ""
            } else {
                " (the drain did not finish)"
            }
        ),
    );
    report.invariant(
        t.duplicates == t.duplicates_same_id
            && t.duplicated_events == t.duplicated_at_kill
            && t.wrong_id == 0,
        format!(
            "duplicates only for attempts in flight at the kill -9, with the same webhook-id: \
             {} duplicates of {} events, {} with the first's webhook-id, {} events first \
             delivered just before the kill, {} deliveries with another webhook-id than the \
             acknowledged one",
            t.duplicates,
            t.duplicated_events,
            t.duplicates_same_id,
            t.duplicated_at_kill,
            t.wrong_id
        ),
    );
    report.verdict(
        exit.success() && left_by_term.is_empty(),
        format!(
            "nothing left leased after the SIGTERM: exit status {}, {} of its leases left \
             (finished {}, released {})",
            exit.code().map_or("none".into(), |c| c.to_string()),
            left_by_term.len(),
            finished.map_or("?".into(), |f| f.to_string()),
            released.map_or("?".into(), |r| r.to_string())
        ),
    );
    let within = |lag: Option<f64>| lag.is_some_and(|l| l <= heartbeat_s);
    let fmt = |lag: Option<f64>| lag.map_or("never".into(), |l| format!("{l:.1} s"));
    report.verdict(
        within(lag_start),
        format!(
            "/v1/scale shows the 3 dispatchers within one heartbeat ({heartbeat_s} s) of their \
             start: {}",
            fmt(lag_start)
        ),
    );
    report.verdict(
        within(lag_kill),
        format!(
            "/v1/scale drops to 2 within one heartbeat ({heartbeat_s} s) of the kill -9: {} \
             (a heartbeat counts until it is {stale_s} s old, or until PostgreSQL drops its \
             process's connection)",
            fmt(lag_kill)
        ),
    );
    report.verdict(
        within(lag_term),
        format!(
            "/v1/scale drops to 1 within one heartbeat ({heartbeat_s} s) of the SIGTERM: {}",
            fmt(lag_term)
        ),
    );
    report.verdict(
        redis_down_delivered.0 > 0 && redis_down_delivered.1 > 0,
        format!(
            "every endpoint keeps being delivered to while Redis is down: {} healthy, {} slow \
             deliveries in the outage",
            redis_down_delivered.0, redis_down_delivered.1
        ),
    );
    report.note(
        "while Redis is down, each dispatcher admits per endpoint at most what it held when the \
         outage began until that endpoint's own earlier attempts must have ended (twice its \
         longest recent attempt, at least 250 ms, at most its deadline), then its local share",
    );
    if !survivors_ok {
        report.note("a surviving process did not exit cleanly on SIGTERM at the end");
    }
    report.note(
        "in flight = requests the slow receiver is serving at once (its exact peak per phase; \
         the chart samples it every 50 ms); a request of the killed dispatcher counts until the \
         receiver answers it",
    );
    report.note(
        "duplicates are counted per event (customer, sequence number in the payload); the \
         killed dispatcher's leases expire after the lease TTL and are delivered again",
    );
}

/// The series and the chart.
pub(super) fn chart(
    args: &BenchArgs,
    report: &mut Report,
    sizes: Sizes,
    plan: Plan,
    timeline: &Timeline,
    seen: &Observed,
) -> anyhow::Result<()> {
    let n = f64::from(sizes.lane);
    let Observed {
        kill_at,
        term_at,
        drained_s,
        ref scale,
        ref in_flight,
        ..
    } = *seen;
    let lane_line = vec![(0.0, n), (drained_s, n)];
    let replicas_series: Vec<(f64, f64)> = scale
        .iter()
        .filter_map(|s| Some((s.at_s, f64::from(s.current_replicas?))))
        .collect();
    let live_series: Vec<(f64, f64)> = scale.iter().map(|s| (s.at_s, f64::from(s.live))).collect();
    let p99 = timeline.quantile_series(HEALTHY, 0.99);
    let p50 = timeline.quantile_series(HEALTHY, 0.5);
    report.series("slow_in_flight", in_flight.clone());
    report.series("current_replicas", replicas_series.clone());
    report.series("live_dispatchers", live_series.clone());
    report.series("healthy_p50_ms", p50.clone());
    report.series("healthy_p99_ms", p99.clone());
    let panels = [
        Panel::linear(
            "slow receiver: requests in flight vs the fleet-wide lane",
            "requests",
            vec![
                Line::new("in flight (50 ms samples)", in_flight.clone()),
                Line::new(format!("lane N = {}", sizes.lane), lane_line),
            ],
        ),
        Panel::linear(
            "dispatchers: /v1/scale current_replicas vs live processes",
            "dispatchers",
            vec![
                Line::new("current_replicas", replicas_series),
                Line::new("live dispatcher processes", live_series),
            ],
        ),
        Panel::log(
            "healthy endpoints: enqueue → delivery",
            "ms",
            vec![Line::new("p50", p50), Line::new("p99", p99)],
        ),
    ];
    save_chart(
        args,
        report,
        &format!(
            "fleet: kill -9 at {:.0} s, SIGTERM at {:.0} s, Redis down {:.0}–{:.0} s, load until {:.0} s",
            kill_at, term_at, plan.redis_down_s, plan.redis_up_s, plan.end_s
        ),
        &panels,
    )?;
    Ok(())
}
