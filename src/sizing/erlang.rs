//! Erlang B / Erlang C queueing formulas and minimal-pool solvers for an M/M/n worker pool.
//!
//! Loads are in erlangs (arrival rate per second × mean service time in seconds), which by
//! Little's Law is also the mean number of busy workers.

use thiserror::Error;

/// Largest pool the solvers will consider; bigger answers are reported as [`ErlangError::TooLarge`].
pub const MAX_SOLVER_SERVERS: u32 = 10_000_000;

/// Invalid input to a solver, or a pool that would exceed [`MAX_SOLVER_SERVERS`].
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ErlangError {
    /// The offered load must be finite and non-negative.
    #[error("offered load must be finite and >= 0 erlangs, got {0}")]
    InvalidLoad(f64),
    /// The mean service time must be finite and positive.
    #[error("service time must be finite and > 0 s, got {0}")]
    InvalidServiceTime(f64),
    /// The wait target must be finite and positive (mean) or non-negative (percentile).
    #[error("wait target must be finite and > 0 s (>= 0 s for a percentile), got {0}")]
    InvalidTarget(f64),
    /// The quantile must lie strictly between 0 and 1.
    #[error("quantile must be strictly between 0 and 1, got {0}")]
    InvalidQuantile(f64),
    /// The pool needed exceeds [`MAX_SOLVER_SERVERS`].
    #[error("a pool for {load_erlangs} erlangs needs more than {max_servers} servers")]
    TooLarge {
        /// The offered load that was asked for.
        load_erlangs: f64,
        /// The solver's search limit.
        max_servers: u32,
    },
}

/// Erlang B blocking probability for `servers` servers offered `load_erlangs`.
///
/// Uses the iterative recurrence `B(n) = a·B(n-1) / (n + a·B(n-1))`, which is numerically
/// stable for any pool size (no factorials or powers). O(`servers`).
pub fn erlang_b(servers: u32, load_erlangs: f64) -> f64 {
    erlang_b_from(0, 1.0, servers, load_erlangs)
}

/// Continues the Erlang B recurrence from a known `B(from_servers)` up to `B(servers)`.
///
/// Performs exactly the operations [`erlang_b`] would past `from_servers`, so results are
/// bit-identical; the solvers use it to avoid recomputing the common prefix.
fn erlang_b_from(from_servers: u32, from_blocking: f64, servers: u32, load_erlangs: f64) -> f64 {
    let mut blocking = from_blocking;
    for n in from_servers.saturating_add(1)..=servers {
        let carried = load_erlangs * blocking;
        blocking = carried / (f64::from(n) + carried);
    }
    blocking
}

/// Erlang C: probability that an arriving delivery has to wait for a free worker.
///
/// Returns 1.0 when the pool is saturated (`load_erlangs >= servers`).
pub fn erlang_c(servers: u32, load_erlangs: f64) -> f64 {
    erlang_c_given_b(servers, load_erlangs, erlang_b(servers, load_erlangs))
}

fn erlang_c_given_b(servers: u32, load_erlangs: f64, blocking: f64) -> f64 {
    if load_erlangs >= f64::from(servers) {
        return 1.0;
    }
    let utilisation = load_erlangs / f64::from(servers);
    blocking / (1.0 - utilisation * (1.0 - blocking))
}

/// Mean time in seconds a delivery waits in the queue before a worker takes it.
///
/// `C · service_time_s / (servers − load)`; infinite when `load_erlangs >= servers`.
pub fn mean_queue_wait(servers: u32, load_erlangs: f64, service_time_s: f64) -> f64 {
    let blocking = erlang_b(servers, load_erlangs);
    mean_wait_given_b(servers, load_erlangs, service_time_s, blocking)
}

fn mean_wait_given_b(servers: u32, load_erlangs: f64, service_time_s: f64, blocking: f64) -> f64 {
    if load_erlangs >= f64::from(servers) {
        return f64::INFINITY;
    }
    let waiting = erlang_c_given_b(servers, load_erlangs, blocking);
    waiting * service_time_s / (f64::from(servers) - load_erlangs)
}

/// Probability that a delivery waits longer than `wait_s` seconds in the queue.
///
/// `C · exp(−(servers − load) · wait_s / service_time_s)`; 1.0 when saturated or `wait_s < 0`.
pub fn wait_percentile_exceeds(
    servers: u32,
    load_erlangs: f64,
    service_time_s: f64,
    wait_s: f64,
) -> f64 {
    let blocking = erlang_b(servers, load_erlangs);
    exceeds_given_b(servers, load_erlangs, service_time_s, wait_s, blocking)
}

fn exceeds_given_b(
    servers: u32,
    load_erlangs: f64,
    service_time_s: f64,
    wait_s: f64,
    blocking: f64,
) -> f64 {
    if load_erlangs >= f64::from(servers) || wait_s < 0.0 {
        return 1.0;
    }
    let spare = f64::from(servers) - load_erlangs;
    erlang_c_given_b(servers, load_erlangs, blocking) * (-spare * wait_s / service_time_s).exp()
}

/// Smallest pool with a mean queue wait of at most `target_wait_s` seconds.
///
/// The answer always exceeds the Little's Law floor. The search gallops then bisects above
/// the load; each probe continues Erlang B from `B(floor(load))`, so the cost is
/// O(load + (pool − load) · log(pool − load)), about a millisecond at 100,000 servers.
pub fn servers_for_mean_wait(
    load_erlangs: f64,
    service_time_s: f64,
    target_wait_s: f64,
) -> Result<u32, ErlangError> {
    check_load_and_service(load_erlangs, service_time_s)?;
    if !(target_wait_s.is_finite() && target_wait_s > 0.0) {
        return Err(ErlangError::InvalidTarget(target_wait_s));
    }
    minimal_servers(load_erlangs, |servers, blocking| {
        mean_wait_given_b(servers, load_erlangs, service_time_s, blocking) <= target_wait_s
    })
}

/// Smallest pool where at least `quantile` (e.g. 0.95) of deliveries wait at most `wait_s`.
///
/// Equivalently the smallest pool with `P(wait > wait_s) <= 1 − quantile`. Same search and
/// cost as [`servers_for_mean_wait`].
pub fn servers_for_percentile_wait(
    load_erlangs: f64,
    service_time_s: f64,
    wait_s: f64,
    quantile: f64,
) -> Result<u32, ErlangError> {
    check_load_and_service(load_erlangs, service_time_s)?;
    if !(wait_s.is_finite() && wait_s >= 0.0) {
        return Err(ErlangError::InvalidTarget(wait_s));
    }
    if !(quantile > 0.0 && quantile < 1.0) {
        return Err(ErlangError::InvalidQuantile(quantile));
    }
    let allowed = 1.0 - quantile;
    minimal_servers(load_erlangs, |servers, blocking| {
        exceeds_given_b(servers, load_erlangs, service_time_s, wait_s, blocking) <= allowed
    })
}

fn check_load_and_service(load_erlangs: f64, service_time_s: f64) -> Result<(), ErlangError> {
    if !(load_erlangs.is_finite() && load_erlangs >= 0.0) {
        return Err(ErlangError::InvalidLoad(load_erlangs));
    }
    if !(service_time_s.is_finite() && service_time_s > 0.0) {
        return Err(ErlangError::InvalidServiceTime(service_time_s));
    }
    Ok(())
}

/// Finds the least `n > load` with `meets(n, B(n))`, given `meets` is monotone in `n`.
fn minimal_servers(
    load_erlangs: f64,
    meets: impl Fn(u32, f64) -> bool,
) -> Result<u32, ErlangError> {
    let too_large = ErlangError::TooLarge {
        load_erlangs,
        max_servers: MAX_SOLVER_SERVERS,
    };
    if load_erlangs >= f64::from(MAX_SOLVER_SERVERS) {
        return Err(too_large);
    }
    // At or below the load the queue is unstable, so `base` never meets the target.
    // The cast is exact: the load is finite, non-negative and below MAX_SOLVER_SERVERS.
    let base = load_erlangs.floor() as u32;
    let base_blocking = erlang_b(base, load_erlangs);
    let probe = |servers: u32| {
        meets(
            servers,
            erlang_b_from(base, base_blocking, servers, load_erlangs),
        )
    };
    // Gallop: base + 1, base + 2, base + 4, ... until a pool meets the target.
    let mut failing = base;
    let mut step = 1_u32;
    let mut passing = loop {
        let candidate = base.saturating_add(step).min(MAX_SOLVER_SERVERS);
        if probe(candidate) {
            break candidate;
        }
        if candidate == MAX_SOLVER_SERVERS {
            return Err(too_large);
        }
        failing = candidate;
        step = step.saturating_mul(2);
    };
    // Bisect, keeping `failing` failing and `passing` passing.
    while passing - failing > 1 {
        let middle = failing + (passing - failing) / 2;
        if probe(middle) {
            passing = middle;
        } else {
            failing = middle;
        }
    }
    Ok(passing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sizing::staffing::{littles_law_floor, workers_floor};
    use proptest::prelude::*;

    /// Independent factorial-form Erlang C, only usable for small pools.
    fn naive_erlang_c(servers: u32, load: f64) -> f64 {
        let factorial = |k: u32| (1..=k).map(f64::from).product::<f64>();
        let n = f64::from(servers);
        let top = load.powi(servers as i32) / factorial(servers) * n / (n - load);
        let bottom: f64 = (0..servers)
            .map(|k| load.powi(k as i32) / factorial(k))
            .sum();
        top / (bottom + top)
    }

    fn close(actual: f64, expected: f64, tolerance: f64) -> bool {
        (actual - expected).abs() <= tolerance
    }

    #[test]
    fn erlang_c_matches_textbook_values() {
        // Exact values computed with rational arithmetic from the factorial form.
        let cases = [
            (2, 1.0, 1.0 / 3.0),
            (3, 2.0, 4.0 / 9.0),
            (5, 4.0, 0.554_112_554_112_554_1),
            (10, 8.0, 0.409_180_150_796_443_5),
            (11, 10.0, 0.682_118_204_689_332_4),
            (20, 15.0, 0.160_429_387_416_923_6),
            (4, 2.5, 0.319_856_704_196_52),
        ];
        for (servers, load, expected) in cases {
            let iterative = erlang_c(servers, load);
            assert!(
                close(iterative, expected, 1e-12),
                "C({servers}, {load}) = {iterative}"
            );
            let naive = naive_erlang_c(servers, load);
            assert!(
                close(iterative, naive, 1e-12),
                "naive {naive} vs {iterative}"
            );
        }
        assert!(close(erlang_c(3, 2.0), 0.4444, 1e-4));
    }

    #[test]
    fn erlang_b_matches_factorial_form() {
        for servers in 1..=15 {
            let load = 0.7 * f64::from(servers);
            let factorial = |k: u32| (1..=k).map(f64::from).product::<f64>();
            let terms: Vec<f64> = (0..=servers)
                .map(|k| load.powi(k as i32) / factorial(k))
                .collect();
            let naive = terms[servers as usize] / terms.iter().sum::<f64>();
            assert!(close(erlang_b(servers, load), naive, 1e-12));
        }
    }

    #[test]
    fn wait_falls_monotonically_as_servers_are_added() {
        let waits: Vec<f64> = (121..200)
            .map(|servers| mean_queue_wait(servers, 120.0, 1.2))
            .collect();
        assert!(waits.windows(2).all(|pair| pair[1] <= pair[0]));
        assert!(waits[0] > waits[waits.len() - 1]);
    }

    #[test]
    fn saturated_pool_reports_infinite_wait() {
        assert_eq!(mean_queue_wait(100, 100.0, 1.0), f64::INFINITY);
        assert_eq!(mean_queue_wait(100, 150.0, 1.0), f64::INFINITY);
        assert_eq!(erlang_c(100, 100.0), 1.0);
        assert_eq!(wait_percentile_exceeds(100, 100.0, 1.0, 5.0), 1.0);
        assert!(mean_queue_wait(101, 100.0, 1.0).is_finite());
    }

    #[test]
    fn percentile_exceedance_decays_with_wait() {
        let at_zero = wait_percentile_exceeds(10, 8.0, 1.0, 0.0);
        assert!(close(at_zero, erlang_c(10, 8.0), 1e-15));
        let at_one = wait_percentile_exceeds(10, 8.0, 1.0, 1.0);
        assert!(close(at_one, at_zero * (-2.0_f64).exp(), 1e-15));
    }

    #[test]
    fn seed_pool_for_mean_target_is_above_floor_and_runs_hot() {
        let load = littles_law_floor(900.0, 1.4);
        assert_eq!(workers_floor(load), 1_260);
        let pool = servers_for_mean_wait(load, 1.4, 0.5).expect("valid inputs");
        assert!(pool > 1_260, "pool {pool}");
        let utilisation = load / f64::from(pool);
        assert!(0.9 < utilisation && utilisation < 1.0, "{utilisation}");
        assert!(mean_queue_wait(pool, load, 1.4) <= 0.5);
        assert!(mean_queue_wait(pool - 1, load, 1.4) > 0.5);
    }

    #[test]
    fn hundred_thousand_servers_is_finite() {
        let load = 99_000.0;
        assert!(mean_queue_wait(100_000, load, 1.0).is_finite());
        let pool = servers_for_mean_wait(load, 1.0, 0.001).expect("valid inputs");
        assert!(pool > 99_000 && pool <= 100_000, "pool {pool}");
        let pool = servers_for_percentile_wait(100_000.0, 1.0, 0.1, 0.99).expect("valid");
        assert!(pool > 100_000);
        assert!(wait_percentile_exceeds(pool, 100_000.0, 1.0, 0.1).is_finite());
    }

    #[test]
    fn solvers_refuse_bad_input() {
        assert_eq!(
            servers_for_mean_wait(-1.0, 1.0, 0.5),
            Err(ErlangError::InvalidLoad(-1.0))
        );
        assert_eq!(
            servers_for_mean_wait(1.0, 0.0, 0.5),
            Err(ErlangError::InvalidServiceTime(0.0))
        );
        assert_eq!(
            servers_for_mean_wait(1.0, 1.0, 0.0),
            Err(ErlangError::InvalidTarget(0.0))
        );
        assert_eq!(
            servers_for_percentile_wait(1.0, 1.0, 1.0, 1.0),
            Err(ErlangError::InvalidQuantile(1.0))
        );
        assert!(matches!(
            servers_for_mean_wait(2.0e7, 1.0, 0.5),
            Err(ErlangError::TooLarge { .. })
        ));
    }

    #[test]
    fn zero_load_needs_one_server() {
        assert_eq!(servers_for_mean_wait(0.0, 1.0, 0.1), Ok(1));
    }

    proptest! {
        #[test]
        fn more_servers_never_increase_mean_wait(
            load in 0.01_f64..5_000.0,
            service_time_s in 0.001_f64..30.0,
            extra in 0_u32..400,
        ) {
            let servers = workers_floor(load) + extra;
            let now = mean_queue_wait(servers, load, service_time_s);
            let more = mean_queue_wait(servers + 1, load, service_time_s);
            prop_assert!(more <= now, "W({}) = {more} > W({servers}) = {now}", servers + 1);
        }

        #[test]
        fn percentile_pool_is_minimal_and_sufficient(
            load in 0.01_f64..3_000.0,
            service_time_s in 0.01_f64..10.0,
            wait_s in 0.0_f64..20.0,
            quantile in 0.5_f64..0.999,
        ) {
            let pool = servers_for_percentile_wait(load, service_time_s, wait_s, quantile)
                .map_err(|error| TestCaseError::fail(error.to_string()))?;
            let allowed = 1.0 - quantile;
            prop_assert!(f64::from(pool) > load);
            prop_assert!(wait_percentile_exceeds(pool, load, service_time_s, wait_s) <= allowed);
            prop_assert!(wait_percentile_exceeds(pool - 1, load, service_time_s, wait_s) > allowed);
        }

        #[test]
        fn mean_wait_pool_exceeds_floor_and_is_minimal(
            rate_per_s in 0.01_f64..5_000.0,
            service_time_s in 0.01_f64..5.0,
            target_wait_s in 0.001_f64..10.0,
        ) {
            let load = littles_law_floor(rate_per_s, service_time_s);
            let pool = servers_for_mean_wait(load, service_time_s, target_wait_s)
                .map_err(|error| TestCaseError::fail(error.to_string()))?;
            prop_assert!(f64::from(pool) > load);
            prop_assert!(mean_queue_wait(pool, load, service_time_s) <= target_wait_s);
            prop_assert!(mean_queue_wait(pool - 1, load, service_time_s) > target_wait_s);
        }
    }
}
