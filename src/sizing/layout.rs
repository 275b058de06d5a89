//! Turns a worker concurrency into processes, pods and a file-descriptor budget per process.

use serde::Serialize;
use thiserror::Error;

/// Concurrent delivery tasks per process when none is given (well under event-loop limits).
pub const DEFAULT_TASKS_PER_PROCESS: u32 = 160;
/// Processes per pod when none is given (about one per vCPU of a 2 vCPU pod).
pub const DEFAULT_PROCESSES_PER_POD: u32 = 4;
/// File descriptors per process beyond two per task: broker connections plus headroom.
pub const FD_HEADROOM_PER_PROCESS: u64 = 256;

/// A layout was asked for with a zero divisor.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LayoutError {
    /// Tasks per process must be at least 1.
    #[error("tasks per process must be at least 1")]
    ZeroTasksPerProcess,
    /// Processes per pod must be at least 1.
    #[error("processes per pod must be at least 1")]
    ZeroProcessesPerPod,
}

/// How a concurrency target is spread over processes and pods.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Layout {
    /// Total concurrent deliveries to run (the worker pool size).
    pub concurrency: u32,
    /// Concurrent tasks in each process.
    pub tasks_per_process: u32,
    /// Processes in each pod.
    pub processes_per_pod: u32,
    /// Processes needed: `ceil(concurrency / tasks_per_process)`.
    pub processes: u32,
    /// Pods needed: `ceil(processes / processes_per_pod)`.
    pub pods: u32,
    /// File descriptors each process needs: `tasks_per_process × 2 + 256`.
    pub fds_per_process: u64,
    /// Soft `ulimit -n` of the process that planned this layout, if it could be read.
    pub current_fd_limit: Option<u64>,
    /// True when the known soft limit is below `fds_per_process`.
    pub fd_limit_too_low: bool,
}

/// Plans a layout for `concurrency` deliveries and checks it against `current_fd_limit`.
///
/// Pure: pass [`current_fd_soft_limit()`] to check against this process's real limit.
pub fn plan_layout(
    concurrency: u32,
    tasks_per_process: u32,
    processes_per_pod: u32,
    current_fd_limit: Option<u64>,
) -> Result<Layout, LayoutError> {
    if tasks_per_process == 0 {
        return Err(LayoutError::ZeroTasksPerProcess);
    }
    if processes_per_pod == 0 {
        return Err(LayoutError::ZeroProcessesPerPod);
    }
    let processes = concurrency.div_ceil(tasks_per_process);
    let pods = processes.div_ceil(processes_per_pod);
    let fds_per_process = u64::from(tasks_per_process) * 2 + FD_HEADROOM_PER_PROCESS;
    let fd_limit_too_low = current_fd_limit.is_some_and(|limit| limit < fds_per_process);
    Ok(Layout {
        concurrency,
        tasks_per_process,
        processes_per_pod,
        processes,
        pods,
        fds_per_process,
        current_fd_limit,
        fd_limit_too_low,
    })
}

/// Soft `ulimit -n` of this process, read from `/proc/self/limits`.
///
/// `None` when the file is unreadable (e.g. not Linux) or has no parsable line;
/// `Some(u64::MAX)` when the limit is `unlimited`.
pub fn current_fd_soft_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    parse_fd_soft_limit(&text)
}

/// Extracts the soft "Max open files" limit from the text of a `/proc/<pid>/limits` file.
pub fn parse_fd_soft_limit(limits_text: &str) -> Option<u64> {
    let line = limits_text
        .lines()
        .find_map(|line| line.strip_prefix("Max open files"))?;
    match line.split_whitespace().next()? {
        "unlimited" => Some(u64::MAX),
        soft => soft.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max open files            1024                 1048576              files
Max locked memory         8388608              8388608              bytes
";

    #[test]
    fn seed_layout_for_1300_is_9_processes_on_3_pods() {
        let layout = plan_layout(1_300, 160, 4, None).expect("valid layout");
        assert_eq!(layout.processes, 9);
        assert_eq!(layout.pods, 3);
        assert_eq!(layout.fds_per_process, 576);
        assert!(!layout.fd_limit_too_low);
    }

    #[test]
    fn exact_multiples_do_not_round_up() {
        let layout = plan_layout(1_280, 160, 4, None).expect("valid layout");
        assert_eq!((layout.processes, layout.pods), (8, 2));
        let layout = plan_layout(1_281, 160, 4, None).expect("valid layout");
        assert_eq!((layout.processes, layout.pods), (9, 3));
    }

    #[test]
    fn zero_divisors_are_refused() {
        assert_eq!(
            plan_layout(10, 0, 4, None),
            Err(LayoutError::ZeroTasksPerProcess)
        );
        assert_eq!(
            plan_layout(10, 160, 0, None),
            Err(LayoutError::ZeroProcessesPerPod)
        );
    }

    #[test]
    fn low_fd_limit_is_flagged() {
        let layout = plan_layout(5_000, 500, 4, Some(1_024)).expect("valid layout");
        assert_eq!(layout.fds_per_process, 1_256);
        assert!(layout.fd_limit_too_low);
        let layout = plan_layout(5_000, 384, 4, Some(1_024)).expect("valid layout");
        assert_eq!(layout.fds_per_process, 1_024);
        assert!(!layout.fd_limit_too_low);
    }

    #[test]
    fn parses_soft_limit_from_proc_limits() {
        assert_eq!(parse_fd_soft_limit(SAMPLE), Some(1_024));
        let unlimited = SAMPLE.replace("1024                 1048576", "unlimited unlimited");
        assert_eq!(parse_fd_soft_limit(&unlimited), Some(u64::MAX));
        assert_eq!(parse_fd_soft_limit("Limit Soft Hard Units\n"), None);
        assert_eq!(
            parse_fd_soft_limit("Max open files  lots  lots files\n"),
            None
        );
    }

    /// The soft limit read from `/proc/self/limits` is the one the kernel reports through
    /// `getrlimit` (unlimited as `u64::MAX`).
    #[cfg(unix)]
    #[test]
    fn reads_this_process_limit_on_linux() {
        if std::path::Path::new("/proc/self/limits").exists() {
            let kernel = rustix::process::getrlimit(rustix::process::Resource::Nofile);
            assert_eq!(
                current_fd_soft_limit(),
                Some(kernel.current.unwrap_or(u64::MAX))
            );
        }
    }
}
