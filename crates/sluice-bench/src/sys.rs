//! What the process and the machine cost: CPU seconds from `/proc/self/stat` and `/proc/stat`,
//! resident memory from `/proc/self/status` (or another process's). Linux only; elsewhere every
//! reading is `None`.

use serde::Serialize;

/// Kernel clock ticks per second (`USER_HZ`), fixed at 100 in the Linux user-space ABI.
pub(crate) const TICKS_PER_S: f64 = 100.0;

/// This process's user + system CPU time so far, seconds.
pub(crate) fn process_cpu_s() -> Option<f64> {
    cpu_s_of("self")
}

/// Process `pid`'s (`"self"` for this one) user + system CPU time so far, seconds.
pub(crate) fn cpu_s_of(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: the fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field 14 (utime) and 15 (stime) of stat(5); `rest` starts at field 3.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / TICKS_PER_S)
}

/// CPU time the whole machine spent busy so far (every core, not idle or iowait), seconds.
pub(crate) fn machine_busy_cpu_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<f64> = line
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal: busy = all but idle and iowait.
    let busy = v.get(0..3)?.iter().sum::<f64>() + v.get(5..8)?.iter().sum::<f64>();
    Some(busy / TICKS_PER_S)
}

fn status_kib(pid: &str, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Resident memory now, MiB.
pub(crate) fn rss_mib() -> Option<f64> {
    rss_mib_of("self")
}

/// Resident memory of process `pid` now, MiB.
pub(crate) fn rss_mib_of(pid: &str) -> Option<f64> {
    status_kib(pid, "VmRSS").map(|k| k as f64 / 1024.0)
}

/// Peak resident memory of the process so far (`VmHWM`), MiB.
pub(crate) fn peak_rss_mib() -> Option<f64> {
    peak_rss_mib_of("self")
}

/// Peak resident memory of process `pid` so far (`VmHWM`), MiB.
pub(crate) fn peak_rss_mib_of(pid: &str) -> Option<f64> {
    status_kib(pid, "VmHWM").map(|k| k as f64 / 1024.0)
}

/// The machine a run was measured on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// Cores this process may use.
    pub cores: usize,
    /// Total memory, GiB.
    pub memory_gib: f64,
    /// `uname -r`-like kernel release, when readable.
    pub kernel: Option<String>,
}

impl Machine {
    /// Read it now.
    pub fn read() -> Self {
        let memory_gib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))?
                    .split_whitespace()
                    .next()?
                    .parse::<f64>()
                    .ok()
            })
            .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
        Self {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_gib: (memory_gib * 10.0).round() / 10.0,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .ok()
                .map(|s| s.trim().to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_proc_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(process_cpu_s().is_some());
            assert!(machine_busy_cpu_s().is_some());
            assert!(rss_mib().unwrap() > 0.0);
            assert!(peak_rss_mib().unwrap() >= rss_mib().unwrap() * 0.5);
            let me = std::process::id().to_string();
            assert!(peak_rss_mib_of(&me).unwrap() >= rss_mib_of(&me).unwrap() * 0.5);
            assert_eq!(peak_rss_mib_of("0"), None);
            // The scheduler's figure itself, not the fallback of one when it cannot be read,
            // and never more than the machine has.
            let cores = std::thread::available_parallelism().expect("parallelism");
            assert_eq!(Machine::read().cores, cores.get());
            let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").expect("cpuinfo");
            let processors = cpuinfo
                .lines()
                .filter(|l| l.starts_with("processor"))
                .count();
            assert!(cores.get() <= processors, "{cores} of {processors}");
        }
    }
}
