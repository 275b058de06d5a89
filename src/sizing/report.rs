//! Sizing report: from arrival rate, service time and a wait target to pool size and layout.

use serde::Serialize;
use thiserror::Error;

use super::erlang::{self, ErlangError, mean_queue_wait, wait_percentile_exceeds};
use super::layout::{self, DEFAULT_PROCESSES_PER_POD, DEFAULT_TASKS_PER_PROCESS, Layout};
use super::numbers::thousands;
use super::staffing::{StaffingBeta, littles_law_floor, sqrt_staffing, workers_floor};

/// Tasks per process beyond which one blocking call stalls too many deliveries on a loop.
pub const EVENT_LOOP_FAIRNESS_TASKS: u32 = 500;

/// The queue-wait objective the pool is sized for.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WaitTarget {
    /// Mean time in the queue of at most `wait_s` seconds.
    Mean {
        /// Largest acceptable mean queue wait, seconds (> 0).
        wait_s: f64,
    },
    /// At least `quantile` of deliveries (e.g. 0.95) wait at most `wait_s` seconds.
    Percentile {
        /// Fraction of deliveries that must meet the wait, strictly between 0 and 1.
        quantile: f64,
        /// Queue-wait bound for that fraction, seconds (>= 0).
        wait_s: f64,
    },
}

/// A second, worse operating point (outage surge) to size alongside the steady peak.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Surge {
    /// Arrival rate during the surge, deliveries per second.
    pub rate_per_s: f64,
    /// Mean service time during the surge, seconds.
    pub service_time_s: f64,
}

/// Everything needed to size a pool; check it with [`SizeRequest::validate`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SizeRequest {
    /// Peak arrival rate including retries, deliveries per second (> 0).
    pub rate_per_s: f64,
    /// Mean lease-to-acknowledge service time, seconds (> 0).
    pub service_time_s: f64,
    /// The queue-wait objective.
    pub target: WaitTarget,
    /// Square-root staffing coefficient β, 1.0 ..= 2.0.
    pub beta: f64,
    /// Optional surge operating point, sized against the same target.
    pub surge: Option<Surge>,
    /// Concurrent tasks per process (>= 1).
    pub tasks_per_process: u32,
    /// Processes per pod (>= 1).
    pub processes_per_pod: u32,
}

/// Why a request could not be sized.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SizeError {
    /// One or more request values were invalid; every problem is listed.
    #[error("invalid sizing request: {}", .0.join("; "))]
    Invalid(Vec<String>),
    /// The Erlang C solver could not find a pool (e.g. the load is too large).
    #[error(transparent)]
    Solver(#[from] ErlangError),
    /// The layout could not be planned.
    #[error(transparent)]
    Layout(#[from] layout::LayoutError),
}

impl SizeRequest {
    /// A request with default β (1.5), layout (160 tasks, 4 processes per pod) and no surge.
    pub fn new(rate_per_s: f64, service_time_s: f64, target: WaitTarget) -> Self {
        Self {
            rate_per_s,
            service_time_s,
            target,
            beta: StaffingBeta::DEFAULT,
            surge: None,
            tasks_per_process: DEFAULT_TASKS_PER_PROCESS,
            processes_per_pod: DEFAULT_PROCESSES_PER_POD,
        }
    }

    /// Checks every value, reporting all problems together.
    pub fn validate(&self) -> Result<(), SizeError> {
        let mut problems = Vec::new();
        let mut positive = |name: &str, value: f64| {
            if !(value.is_finite() && value > 0.0) {
                problems.push(format!("{name} must be a finite number > 0, got {value}"));
            }
        };
        positive("rate_per_s", self.rate_per_s);
        positive("service_time_s", self.service_time_s);
        if let Some(surge) = &self.surge {
            positive("surge rate_per_s", surge.rate_per_s);
            positive("surge service_time_s", surge.service_time_s);
        }
        match self.target {
            WaitTarget::Mean { wait_s } => positive("target wait_s", wait_s),
            WaitTarget::Percentile { quantile, wait_s } => {
                if !(wait_s.is_finite() && wait_s >= 0.0) {
                    problems.push(format!(
                        "target wait_s must be finite and >= 0, got {wait_s}"
                    ));
                }
                if !(quantile > 0.0 && quantile < 1.0) {
                    problems.push(format!("quantile must be between 0 and 1, got {quantile}"));
                }
            }
        }
        if StaffingBeta::new(self.beta).is_none() {
            problems.push(format!("beta must be between 1 and 2, got {}", self.beta));
        }
        if self.tasks_per_process == 0 {
            problems.push("tasks_per_process must be at least 1".to_owned());
        }
        if self.processes_per_pod == 0 {
            problems.push("processes_per_pod must be at least 1".to_owned());
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(SizeError::Invalid(problems))
        }
    }
}

/// Sizing figures for one operating point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SizeRow {
    /// "steady" or "surge".
    pub label: String,
    /// Arrival rate, deliveries per second.
    pub rate_per_s: f64,
    /// Mean service time, seconds.
    pub service_time_s: f64,
    /// Offered load in erlangs (rate × service time): mean busy workers.
    pub offered_load_erlangs: f64,
    /// Little's Law floor in whole workers, `ceil(offered load)`; the pool must exceed it.
    pub littles_law_floor_workers: u32,
    /// Square-root staffing figure, `ceil(load + β√load)` workers.
    pub sqrt_staffing_workers: u32,
    /// Smallest Erlang C pool meeting the wait target, workers.
    pub target_pool_workers: u32,
    /// Offered load / pool size, 0..1.
    pub utilisation: f64,
    /// Predicted mean queue wait at the target pool, seconds.
    pub mean_wait_s: f64,
    /// Predicted P(wait > target wait) at the target pool, for a percentile target.
    pub p_wait_exceeds_target: Option<f64>,
    /// Process and pod layout of the target pool.
    pub layout: Layout,
}

/// Result of [`size`]: the steady row, the optional surge row and any warnings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SizeReport {
    /// The queue-wait objective used.
    pub target: WaitTarget,
    /// The square-root staffing β used.
    pub beta: f64,
    /// Figures at the steady peak.
    pub steady: SizeRow,
    /// Figures at the surge, when one was given.
    pub surge: Option<SizeRow>,
    /// Operational warnings (file-descriptor limit, event-loop fairness).
    pub warnings: Vec<String>,
}

/// Sizes `request`, checking the layout against this process's soft `ulimit -n`.
pub fn size(request: &SizeRequest) -> Result<SizeReport, SizeError> {
    size_with_fd_limit(request, layout::current_fd_soft_limit())
}

/// Sizes `request` against a given soft file-descriptor limit (`None` = unknown).
pub fn size_with_fd_limit(
    request: &SizeRequest,
    current_fd_limit: Option<u64>,
) -> Result<SizeReport, SizeError> {
    request.validate()?;
    let beta = StaffingBeta::new(request.beta)
        .ok_or_else(|| SizeError::Invalid(vec![format!("beta out of range: {}", request.beta)]))?;
    let row = |label: &str, rate_per_s: f64, service_time_s: f64| {
        size_row(
            label,
            rate_per_s,
            service_time_s,
            request,
            beta,
            current_fd_limit,
        )
    };
    let steady = row("steady", request.rate_per_s, request.service_time_s)?;
    let surge = match request.surge {
        Some(surge) => Some(row("surge", surge.rate_per_s, surge.service_time_s)?),
        None => None,
    };

    let mut warnings = Vec::new();
    match (current_fd_limit, steady.layout.fd_limit_too_low) {
        (None, _) => warnings.push(
            "could not read the soft open-files limit (ulimit -n) from /proc/self/limits"
                .to_owned(),
        ),
        (Some(limit), true) => warnings.push(format!(
            "ulimit -n is {} but each process needs {} file descriptors: raise it",
            thousands(limit),
            thousands(steady.layout.fds_per_process)
        )),
        (Some(_), false) => {}
    }
    if request.tasks_per_process > EVENT_LOOP_FAIRNESS_TASKS {
        warnings.push(format!(
            "{} tasks per process exceeds ~{EVENT_LOOP_FAIRNESS_TASKS}: one blocking call stalls them all",
            thousands(u64::from(request.tasks_per_process))
        ));
    }
    Ok(SizeReport {
        target: request.target,
        beta: beta.get(),
        steady,
        surge,
        warnings,
    })
}

fn size_row(
    label: &str,
    rate_per_s: f64,
    service_time_s: f64,
    request: &SizeRequest,
    beta: StaffingBeta,
    current_fd_limit: Option<u64>,
) -> Result<SizeRow, SizeError> {
    let load = littles_law_floor(rate_per_s, service_time_s);
    let (pool, p_wait_exceeds_target) = match request.target {
        WaitTarget::Mean { wait_s } => (
            erlang::servers_for_mean_wait(load, service_time_s, wait_s)?,
            None,
        ),
        WaitTarget::Percentile { quantile, wait_s } => {
            let pool = erlang::servers_for_percentile_wait(load, service_time_s, wait_s, quantile)?;
            let exceeds = wait_percentile_exceeds(pool, load, service_time_s, wait_s);
            (pool, Some(exceeds))
        }
    };
    let layout = layout::plan_layout(
        pool,
        request.tasks_per_process,
        request.processes_per_pod,
        current_fd_limit,
    )?;
    Ok(SizeRow {
        label: label.to_owned(),
        rate_per_s,
        service_time_s,
        offered_load_erlangs: load,
        littles_law_floor_workers: workers_floor(load),
        sqrt_staffing_workers: sqrt_staffing(load, beta),
        target_pool_workers: pool,
        utilisation: load / f64::from(pool),
        mean_wait_s: mean_queue_wait(pool, load, service_time_s),
        p_wait_exceeds_target,
        layout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed_request() -> SizeRequest {
        let mut request = SizeRequest::new(900.0, 1.4, WaitTarget::Mean { wait_s: 0.5 });
        request.surge = Some(Surge {
            rate_per_s: 2_400.0,
            service_time_s: 3.1,
        });
        request
    }

    #[test]
    fn seed_steady_row_runs_hot_above_the_floor() {
        let report = size_with_fd_limit(&seed_request(), Some(1_048_576)).expect("valid");
        let steady = &report.steady;
        assert_eq!(steady.littles_law_floor_workers, 1_260);
        assert!((steady.offered_load_erlangs - 1_260.0).abs() < 1e-9);
        assert_eq!(steady.sqrt_staffing_workers, 1_314);
        assert!(steady.target_pool_workers > 1_260);
        assert!(0.9 < steady.utilisation && steady.utilisation < 1.0);
        assert!(steady.mean_wait_s <= 0.5);
        assert_eq!(steady.p_wait_exceeds_target, None);
        let expected_processes = steady.target_pool_workers.div_ceil(160);
        assert_eq!(steady.layout.processes, expected_processes);
        assert!(report.warnings.is_empty(), "{:?}", report.warnings);
        let surge = report.surge.as_ref().expect("surge row");
        assert_eq!(surge.littles_law_floor_workers, 7_440);
        assert!(surge.target_pool_workers > 7_440);
    }

    #[test]
    fn percentile_target_reports_exceedance_within_budget() {
        let target = WaitTarget::Percentile {
            quantile: 0.95,
            wait_s: 2.0,
        };
        let report =
            size_with_fd_limit(&SizeRequest::new(900.0, 1.4, target), None).expect("valid request");
        let exceeds = report.steady.p_wait_exceeds_target.expect("percentile");
        assert!(exceeds <= 0.05 + 1e-12, "{exceeds}");
        assert!(report.warnings[0].contains("/proc/self/limits"));
    }

    #[test]
    fn validate_reports_every_problem_together() {
        let request = SizeRequest {
            rate_per_s: -1.0,
            service_time_s: f64::NAN,
            target: WaitTarget::Percentile {
                quantile: 1.5,
                wait_s: -2.0,
            },
            beta: 3.0,
            surge: Some(Surge {
                rate_per_s: 0.0,
                service_time_s: 1.0,
            }),
            tasks_per_process: 0,
            processes_per_pod: 0,
        };
        let Err(SizeError::Invalid(problems)) = request.validate() else {
            panic!("request should be invalid");
        };
        assert_eq!(problems.len(), 8, "{problems:?}");
        assert!(matches!(size(&request), Err(SizeError::Invalid(_))));
        assert!(seed_request().validate().is_ok());
    }

    #[test]
    fn oversized_load_is_a_solver_error() {
        let request = SizeRequest::new(1.0e8, 1.0, WaitTarget::Mean { wait_s: 1.0 });
        assert!(matches!(
            size_with_fd_limit(&request, None),
            Err(SizeError::Solver(ErlangError::TooLarge { .. }))
        ));
    }

    #[test]
    fn report_serialises_to_json() {
        let report = size_with_fd_limit(&seed_request(), Some(1_024)).expect("valid");
        let json = serde_json::to_value(&report).expect("serialisable");
        assert_eq!(json["target"]["kind"], "mean");
        assert_eq!(json["steady"]["littles_law_floor_workers"], 1_260);
        assert_eq!(json["steady"]["layout"]["fds_per_process"], 576);
        assert_eq!(json["surge"]["label"], "surge");
    }
}
