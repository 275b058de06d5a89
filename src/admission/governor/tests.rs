//! Tests of the AIMD governor: its steps one by one, then simulations of a fleet against a
//! throttling receiver.

use super::*;
use proptest::prelude::*;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const THROTTLED: Observation = Observation::Throttled { retry_after: None };

#[tokio::test(start_paused = true)]
async fn a_batch_overshoot_halves_once_per_round_trip() {
    let settings = GovernorSettings::default();
    let sent = Instant::now();
    tokio::time::advance(Duration::from_millis(100)).await;
    let mut state = at(16.0);
    // Eight attempts sent together all come back throttled: one decrease, not eight.
    for _ in 0..8 {
        let now = Instant::now();
        state = step_sent(
            &settings,
            state,
            &Observation::Throttled { retry_after: None },
            bound(sent),
            now,
        );
    }
    assert_eq!(state.limit, 8.0);
    // An attempt sent after that decrease that is throttled again decreases again.
    tokio::time::advance(Duration::from_millis(10)).await;
    let later = Instant::now();
    tokio::time::advance(Duration::from_millis(100)).await;
    state = step_sent(
        &settings,
        state,
        &Observation::Timeout,
        bound(later),
        Instant::now(),
    );
    assert_eq!(state.limit, 4.0);
    // A Retry-After from the old episode still pauses the endpoint.
    let now = Instant::now();
    state = step_sent(
        &settings,
        state,
        &Observation::Throttled {
            retry_after: Some(Duration::from_secs(5)),
        },
        bound(sent),
        now,
    );
    assert_eq!(state.limit, 4.0);
    assert!(is_paused(&state, now));
}

fn bound(at: Instant) -> Sent {
    Sent {
        at,
        limit_bound: true,
    }
}

/// `state` with its limit moved to `limit`.
fn limited(state: GovernorState, limit: f64) -> GovernorState {
    GovernorState { limit, ..state }
}

fn at(limit: f64) -> GovernorState {
    GovernorState {
        limit,
        ..GovernorState::new(&GovernorSettings::default())
    }
}

fn run(settings: &GovernorSettings, state: GovernorState, obs: &[Observation]) -> GovernorState {
    let now = Instant::now();
    obs.iter().fold(state, |s, o| step(settings, s, o, now))
}

fn throttled_for(secs: u64) -> Observation {
    Observation::Throttled {
        retry_after: Some(Duration::from_secs(secs)),
    }
}

#[test]
fn halves_on_429() {
    let s = GovernorSettings::default();
    assert_eq!(run(&s, at(16.0), &[THROTTLED]).limit, 8.0);
}

#[test]
fn timeouts_and_refusals_decrease_but_a_500_does_not() {
    let s = GovernorSettings::default();
    assert_eq!(run(&s, at(16.0), &[Observation::Timeout]).limit, 8.0);
    assert_eq!(run(&s, at(16.0), &[Observation::ConnectFailure]).limit, 8.0);
    let server_error = Observation::from_http_status(500, None);
    assert_eq!(run(&s, at(16.0), &[server_error]).limit, 16.0);
}

#[test]
fn never_below_floor() {
    let s = GovernorSettings::default();
    assert_eq!(run(&s, at(64.0), &[THROTTLED; 20]).limit, 1.0);
}

#[test]
fn a_success_adds_half_an_attempt_per_round_trip_up_to_the_ceiling() {
    let s = GovernorSettings::default();
    // 0.5 ÷ 8 per success: eight successes (one round trip at a limit of 8) add 0.5.
    assert_eq!(run(&s, at(8.0), &[Observation::Success]).limit, 8.0625);
    let round_trip = run(&s, at(8.0), &[Observation::Success; 8]).limit;
    assert!((8.45..8.5).contains(&round_trip), "{round_trip}");
    assert_eq!(run(&s, at(63.995), &[Observation::Success]).limit, 64.0);
    assert_eq!(run(&s, at(8.0), &[Observation::Success; 5_000]).limit, 64.0);
}

#[tokio::test(start_paused = true)]
async fn below_the_safe_limit_it_recovers_fast_then_holds_before_probing() {
    let s = GovernorSettings::default();
    let known = GovernorState {
        safe: Some(8.0),
        ..at(1.0)
    };
    // +0.5 per success back to what the endpoint is known to take: 14 successes.
    let after_13 = run(&s, known, &[Observation::Success; 13]);
    assert_eq!(effective_limit(&after_13, 64), 7);
    let held = run(&s, after_13, &[Observation::Success; 100]);
    assert_eq!(held.limit, 8.0, "held at the safe limit");
    // After the probe interval, successes probe above it, additively.
    tokio::time::advance(s.probe_interval).await;
    let probing = step(&s, held, &Observation::Success, Instant::now());
    assert_eq!(probing.limit, 8.0625);
}

#[test]
fn a_throttle_while_probing_sets_the_safe_limit_just_below_it() {
    let s = GovernorSettings::default();
    let probing = GovernorState {
        safe: Some(8.0),
        ..at(9.2)
    };
    let next = run(&s, probing, &[THROTTLED]);
    assert_eq!((next.limit, next.safe), (4.6, Some(8.0)));
    let further = GovernorState {
        safe: Some(8.0),
        ..at(12.5)
    };
    assert_eq!(run(&s, further, &[THROTTLED]).safe, Some(11.0));
}

#[test]
fn a_throttle_at_the_safe_limit_means_the_capacity_fell() {
    let s = GovernorSettings::default();
    let holding = GovernorState {
        safe: Some(16.0),
        ..at(16.0)
    };
    let next = run(&s, holding, &[THROTTLED]);
    assert_eq!((next.limit, next.safe), (8.0, Some(8.0)));
    // The first throttle ever: the concurrency it met, less one.
    assert_eq!(run(&s, at(16.4), &[THROTTLED]).safe, Some(15.0));
}

/// A limit that does not bind (fewer attempts out than allowed, none waiting) learns nothing
/// about more concurrency: it does not grow before the first throttle or past the safe
/// limit, but still recovers to what is known safe.
#[tokio::test(start_paused = true)]
async fn a_limit_that_does_not_bind_does_not_grow_untested() {
    let s = GovernorSettings::default();
    let idle = |state: GovernorState, n: usize| {
        let sent = Sent {
            at: Instant::now(),
            limit_bound: false,
        };
        (0..n).fold(state, |st, _| {
            step_sent(&s, st, &Observation::Success, sent, Instant::now())
        })
    };
    assert_eq!(idle(at(8.0), 1_000).limit, 8.0);
    let known = GovernorState {
        safe: Some(8.0),
        ..at(2.0)
    };
    let recovered = idle(known, 20);
    assert_eq!(recovered.limit, 8.0);
    tokio::time::advance(s.probe_interval * 2).await;
    assert_eq!(idle(recovered, 1_000).limit, 8.0);
    // The same successes with the limit bound probe above it.
    assert!(run(&s, recovered, &[Observation::Success; 8]).limit > 8.0);
}

/// Each failed probe doubles the wait before the next, up to eight intervals; one that holds
/// (two above the safe limit without a throttle) raises the safe limit and resets the wait,
/// and so does a throttle at the safe limit (the capacity fell: find it again).
#[tokio::test(start_paused = true)]
async fn failed_probes_wait_longer_and_a_probe_that_holds_resets_the_wait() {
    let s = GovernorSettings::default();
    let waits: Vec<u64> = (0..6)
        .map(|failed_probes| {
            let state = GovernorState {
                failed_probes,
                ..at(8.0)
            };
            state.probe_wait(&s).as_secs()
        })
        .collect();
    assert_eq!(waits, [10, 20, 40, 80, 80, 80]);
    let probing = GovernorState {
        safe: Some(8.0),
        ..at(9.1)
    };
    let failed = run(&s, probing, &[THROTTLED]);
    assert_eq!((failed.safe, failed.failed_probes), (Some(8.0), 1));
    let twice = run(&s, limited(failed, 9.0), &[THROTTLED]);
    assert_eq!(twice.failed_probes, 2);
    // Held at the safe limit, it does not probe before 40 s.
    let held = run(&s, twice, &[Observation::Success; 40]);
    assert_eq!(held.limit, 8.0);
    tokio::time::advance(Duration::from_secs(39)).await;
    assert_eq!(run(&s, held, &[Observation::Success; 40]).limit, 8.0);
    tokio::time::advance(Duration::from_secs(1)).await;
    // Past the wait: additive probing, and at 10 the probe has held.
    let grown = run(&s, held, &[Observation::Success; 40]);
    assert!(grown.limit >= 10.0, "{}", grown.limit);
    assert_eq!((grown.safe, grown.failed_probes), (Some(9.0), 0));
    // A throttle at the safe limit resets the wait too.
    let fell = run(&s, limited(twice, 8.0), &[THROTTLED]);
    assert_eq!((fell.safe, fell.failed_probes), (Some(4.0), 0));
}

#[tokio::test(start_paused = true)]
async fn retry_after_pauses_until_it_elapses() {
    let s = GovernorSettings::default();
    let state = step(&s, at(8.0), &throttled_for(30), Instant::now());
    assert!(is_paused(&state, Instant::now()));
    tokio::time::advance(Duration::from_secs(29)).await;
    assert!(is_paused(&state, Instant::now()));
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(!is_paused(&state, Instant::now()));
    let later = step(&s, state, &Observation::Success, Instant::now());
    assert_eq!(later.paused_until, None);
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_clamped_to_max_pause() {
    let s = GovernorSettings::default();
    let now = Instant::now();
    let state = step(&s, at(8.0), &throttled_for(86_400), now);
    assert_eq!(state.paused_until, Some(now + Duration::from_secs(3600)));
}

#[tokio::test(start_paused = true)]
async fn a_shorter_retry_after_never_shortens_a_pause() {
    let s = GovernorSettings::default();
    let now = Instant::now();
    let long = step(&s, at(8.0), &throttled_for(600), now);
    let both = step(&s, long, &throttled_for(5), now);
    assert_eq!(both.paused_until, Some(now + Duration::from_secs(600)));
    let extended = step(&s, both, &throttled_for(900), now);
    assert_eq!(extended.paused_until, Some(now + Duration::from_secs(900)));
}

#[test]
fn effective_limit_is_floored_capped_by_the_lane_and_at_least_one() {
    assert_eq!(effective_limit(&at(7.9), 8), 7);
    assert_eq!(effective_limit(&at(64.0), 8), 8);
    assert_eq!(effective_limit(&at(3.0), 0), 1);
    assert_eq!(effective_limit(&at(f64::NAN), 8), 1);
}

#[test]
fn statuses_map_to_observations() {
    let ra = Some(Duration::from_secs(3));
    assert_eq!(Observation::from_http_status(204, ra), Observation::Success);
    for status in [429, 502, 503, 504] {
        let obs = Observation::from_http_status(status, ra);
        assert_eq!(obs, Observation::Throttled { retry_after: ra });
    }
    for status in [301, 400, 410, 500] {
        let obs = Observation::from_http_status(status, ra);
        assert_eq!(obs, Observation::OtherFailure);
    }
}

#[test]
fn invalid_settings_are_refused() {
    let hour = Duration::from_secs(3600);
    assert_eq!(GovernorSettings::default().validate(), Ok(()));
    assert_eq!(GovernorSettings::default().problems(), []);
    let bad = |i, c, f, inc, d, p| {
        GovernorSettings::try_new(i, c, f, inc, d, p)
            .err()
            .map(|problem| problem.field)
    };
    assert_eq!(bad(8.0, 64.0, 0.5, 0.5, 0.5, hour), Some("floor"));
    assert_eq!(bad(4.0, 2.0, 4.0, 0.5, 0.5, hour), Some("ceiling"));
    assert_eq!(bad(99.0, 64.0, 1.0, 0.5, 0.5, hour), Some("initial_limit"));
    assert_eq!(bad(8.0, 64.0, 1.0, 0.0, 0.5, hour), Some("increase"));
    assert_eq!(bad(8.0, 64.0, 1.0, 0.5, 1.0, hour), Some("decrease_factor"));
    assert!(bad(8.0, 64.0, 1.0, 0.5, f64::NAN, hour).is_some());
    let zero = bad(8.0, 64.0, 1.0, 0.5, 0.5, Duration::ZERO);
    assert_eq!(zero, Some("max_pause"));
    let below = GovernorSettings::try_new(4.0, 2.0, 4.0, 0.5, 0.5, hour);
    assert_eq!(
        below.map_err(|problem| problem.to_string()),
        Err("ceiling: 2 must be finite and at least the floor (4)".to_owned())
    );
}

#[test]
fn every_bad_value_is_a_problem_and_the_edges_are_not() {
    let bad = GovernorSettings {
        initial_limit: f64::NAN,
        floor: 0.0,
        increase: -1.0,
        decrease_factor: 0.0,
        max_pause: MAX_PAUSE_LIMIT + Duration::from_secs(1),
        probe_interval: Duration::ZERO,
        ..GovernorSettings::default()
    };
    let fields: Vec<_> = bad.problems().into_iter().map(|p| p.field).collect();
    let expected = [
        "floor",
        "initial_limit",
        "increase",
        "decrease_factor",
        "max_pause",
        "probe_interval",
    ];
    assert_eq!(fields, expected);
    let edges = GovernorSettings {
        initial_limit: 1.0,
        ceiling: 1.0,
        floor: 1.0,
        increase: f64::MIN_POSITIVE,
        decrease_factor: 0.999,
        max_pause: MAX_PAUSE_LIMIT,
        probe_interval: Duration::from_secs(3600),
    };
    assert_eq!(edges.problems(), []);
}

fn any_observation() -> impl Strategy<Value = Observation> {
    prop_oneof![
        Just(Observation::Success),
        proptest::option::of(0..7_200u64).prop_map(|secs| Observation::Throttled {
            retry_after: secs.map(Duration::from_secs),
        }),
        Just(Observation::Timeout),
        Just(Observation::ConnectFailure),
        Just(Observation::OtherFailure),
    ]
}

fn any_settings() -> impl Strategy<Value = GovernorSettings> {
    (
        1.0..10.0f64,
        0.0..100.0f64,
        0.0..=1.0f64,
        0.01..5.0f64,
        0.05..0.95f64,
    )
        .prop_map(
            |(floor, span, start, increase, decrease_factor)| GovernorSettings {
                initial_limit: floor + span * start,
                ceiling: floor + span,
                floor,
                increase,
                decrease_factor,
                max_pause: Duration::from_secs(3600),
                probe_interval: Duration::from_secs(10),
            },
        )
}

proptest! {
    #[test]
    fn limit_stays_within_floor_and_ceiling(
        s in any_settings(),
        obs in proptest::collection::vec(any_observation(), 0..300),
    ) {
        prop_assert!(s.validate().is_ok());
        let mut state = GovernorState::new(&s);
        let now = Instant::now();
        for o in &obs {
            state = step(&s, state, o, now);
            prop_assert!(state.limit >= s.floor && state.limit <= s.ceiling);
        }
    }

    #[test]
    fn success_never_decreases_and_congestion_never_increases(
        s in any_settings(),
        obs in proptest::collection::vec(any_observation(), 1..300),
    ) {
        let mut state = GovernorState::new(&s);
        let now = Instant::now();
        for o in &obs {
            let next = step(&s, state, o, now);
            match o {
                Observation::Success => prop_assert!(next.limit >= state.limit),
                Observation::OtherFailure => prop_assert_eq!(next.limit, state.limit),
                _ => prop_assert!(next.limit <= state.limit),
            }
            state = next;
        }
    }
}

/// What a simulated run saw.
struct Report {
    /// Time-weighted mean limit.
    mean_limit: f64,
    /// Share of the time after the warm-up with the limit within [C, 1.3 C].
    in_band: f64,
    delivered: u32,
    throttled: u32,
    final_limit: f64,
}

/// The simulated endpoint.
#[derive(Clone, Copy, Default)]
struct Endpoint {
    /// Requests it serves at once (0: it never answers, a 15 s timeout each).
    capacity: u32,
    /// From this long after the start, it serves this many at once instead.
    raised: Option<(Duration, u32)>,
    /// Time to serve one.
    service: Duration,
    /// Retry-After on its 429s.
    retry_after: Option<Duration>,
}

/// Continuous model under paused time: the dispatcher keeps `effective_limit` attempts in
/// flight (lane 64) against `endpoint`, which answers 429 in 10 ms beyond its capacity. Time
/// in the band is counted after `warmup`.
async fn drive(endpoint: Endpoint, span: Duration, warmup: Duration) -> Report {
    let Endpoint {
        capacity,
        raised,
        service,
        retry_after,
    } = endpoint;
    let (reject, deadline) = (Duration::from_millis(10), Duration::from_secs(15));
    let s = GovernorSettings::default();
    let mut state = GovernorState::new(&s);
    let start = Instant::now();
    let mut last = start;
    let (mut area, mut busy, mut in_flight, mut seq) = (0.0, 0u32, 0u32, 0u64);
    let (mut in_band, mut counted) = (0.0, 0.0);
    let (mut delivered, mut throttled) = (0, 0);
    let serves = |now: Instant| match raised {
        Some((after, more)) if now >= start + after => more,
        _ => capacity,
    };
    let mut answers = BinaryHeap::new();
    let mut arrivals = Vec::new();
    while last < start + span {
        let now = Instant::now();
        while !is_paused(&state, now) && in_flight < effective_limit(&state, 64) {
            let (after, obs) = match serves(now) {
                0 => (deadline, Observation::Timeout),
                c if busy < c => (service, Observation::Success),
                _ => (reject, Observation::Throttled { retry_after }),
            };
            busy += u32::from(obs == Observation::Success);
            in_flight += 1;
            seq += 1;
            arrivals.push(now);
            answers.push(Reverse((
                now + after,
                seq,
                now,
                obs == Observation::Success,
            )));
        }
        let wake = match (answers.peek(), state.paused_until) {
            (Some(Reverse((at, ..))), _) => *at,
            (None, Some(until)) => until,
            (None, None) => break,
        };
        tokio::time::sleep_until(wake).await;
        let now = Instant::now();
        let dt = (now - last).as_secs_f64();
        area += state.limit * dt;
        let c = f64::from(serves(last));
        if last >= start + warmup {
            counted += dt;
            if (c..=1.3 * c).contains(&state.limit) {
                in_band += dt;
            }
        }
        last = now;
        if let Some(Reverse((_, _, sent, ok))) = answers.pop() {
            in_flight -= 1;
            let obs = match (ok, capacity) {
                (true, _) => Observation::Success,
                (false, 0) => Observation::Timeout,
                (false, _) => Observation::Throttled { retry_after },
            };
            busy -= u32::from(ok);
            delivered += u32::from(ok);
            throttled += u32::from(!ok && capacity > 0);
            state = step_sent(&s, state, &obs, bound(sent), now);
            if let Some(until) = state.paused_until.filter(|_| !ok) {
                // Endpoint's view: nothing new arrives while the pause it asked for lasts.
                assert!(arrivals.iter().all(|a| *a <= now || *a >= until));
            }
        }
    }
    Report {
        mean_limit: area / (last - start).as_secs_f64(),
        in_band: if counted > 0.0 {
            in_band / counted
        } else {
            0.0
        },
        delivered,
        throttled,
        final_limit: state.limit,
    }
}

fn simulate(endpoint: Endpoint, span: Duration, warmup: Duration) -> Report {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
        .block_on(drive(endpoint, span, warmup))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// On an endpoint of fixed capacity C the limit spends at least 85 % of the time within
    /// [C, 1.3 C] once it has found it, and the endpoint gets at least 85 % of what it could
    /// serve with at most 5 % of the attempts answered 429.
    #[test]
    fn it_converges_on_a_fixed_capacity(
        capacity in 1u32..=40,
        service_ms in 20u64..=300,
    ) {
        let service = Duration::from_millis(service_ms);
        let endpoint = Endpoint { capacity, service, ..Endpoint::default() };
        let span = Duration::from_secs(300);
        let r = simulate(endpoint, span, Duration::from_secs(60));
        prop_assert!(r.in_band >= 0.85, "in band {:.3} (mean limit {:.2})", r.in_band, r.mean_limit);
        let best = f64::from(capacity) * span.as_secs_f64() / service.as_secs_f64();
        prop_assert!(f64::from(r.delivered) >= 0.85 * best, "delivered {} of {best}", r.delivered);
        let attempts = f64::from(r.delivered + r.throttled);
        prop_assert!(f64::from(r.throttled) <= 0.05 * attempts, "429s {} of {attempts}", r.throttled);
    }
}

#[test]
fn retry_after_pauses_cost_little_once_the_capacity_is_known() {
    // The first round trip meets the capacity with the initial limit (8 against 2: six
    // 429s); after that each probe past the capacity earns one 429 and a pause, and the
    // probes back off to one per 80 s: after 10, 20, 40 and 80 s, then every 80 s, nine in
    // 600 s. Probing every 10 s would cost sixty.
    let endpoint = Endpoint {
        capacity: 2,
        service: Duration::from_millis(50),
        retry_after: Some(Duration::from_secs(1)),
        ..Endpoint::default()
    };
    let span = Duration::from_secs(600);
    let r = simulate(endpoint, span, Duration::from_secs(30));
    let best = 2.0 * span.as_secs_f64() / 0.05;
    assert!(
        f64::from(r.delivered) >= 0.85 * best,
        "delivered {} of {best}",
        r.delivered
    );
    assert!((6..=20).contains(&r.throttled), "throttled {}", r.throttled);
}

/// The probes' back-off does not hide a capacity that rises: the next probe, at most eight
/// intervals later, holds, and the limit climbs to the new capacity.
#[test]
fn a_capacity_that_rises_is_found_after_the_probes_backed_off() {
    let endpoint = Endpoint {
        capacity: 4,
        raised: Some((Duration::from_secs(300), 8)),
        service: Duration::from_millis(100),
        retry_after: Some(Duration::from_secs(1)),
    };
    let span = Duration::from_secs(600);
    let r = simulate(endpoint, span, Duration::from_secs(400));
    assert!(
        (8.0..=10.4).contains(&r.final_limit),
        "final {}",
        r.final_limit
    );
    assert!(r.in_band >= 0.85, "in band {:.3}", r.in_band);
    let best = (4.0 * 300.0 + 8.0 * 300.0) / 0.1;
    assert!(
        f64::from(r.delivered) >= 0.85 * best,
        "delivered {} of {best}",
        r.delivered
    );
}

#[test]
fn a_dead_endpoint_is_held_at_the_floor() {
    let endpoint = Endpoint {
        capacity: 0,
        service: Duration::from_millis(100),
        ..Endpoint::default()
    };
    let r = simulate(endpoint, Duration::from_secs(300), Duration::ZERO);
    assert_eq!(r.final_limit, 1.0);
    assert!(r.mean_limit <= 2.0, "mean limit {}", r.mean_limit);
}
