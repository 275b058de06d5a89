//! The standard `process_*` metrics (CPU time, resident and virtual memory, open and maximum
//! file descriptors, start time), read from `/proc/self` at each scrape. Elsewhere than Linux
//! the family is simply absent.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

/// One reading of this process.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessReading {
    /// User plus system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Resident set size, bytes.
    pub resident_bytes: u64,
    /// Virtual memory size, bytes.
    pub virtual_bytes: u64,
    /// File descriptors open now.
    pub open_fds: u64,
    /// The soft limit on open file descriptors.
    pub max_fds: Option<u64>,
    /// When the process started, seconds since the Unix epoch.
    pub start_time_seconds: f64,
}

/// Parse the fields of `/proc/self/stat` that matter, given the clock ticks per second, the
/// page size and the boot time (`btime` of `/proc/stat`, seconds since the epoch).
pub fn parse_stat(
    stat: &str,
    ticks_per_s: u64,
    page_size: u64,
    boot_time_s: u64,
) -> Option<ProcessReading> {
    // The command name (field 2) is in parentheses and may hold spaces: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): field n is fields[n - 3].
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    let ticks = ticks_per_s.max(1) as f64;
    Some(ProcessReading {
        cpu_seconds: (field(14)? + field(15)?) as f64 / ticks,
        virtual_bytes: field(23)?,
        resident_bytes: field(24)? * page_size,
        start_time_seconds: boot_time_s as f64 + field(22)? as f64 / ticks,
        open_fds: 0,
        max_fds: None,
    })
}

/// `btime` of `/proc/stat`.
pub fn parse_boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// Read this process now (None where `/proc` is not there).
pub fn read() -> Option<ProcessReading> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let boot = parse_boot_time(&std::fs::read_to_string("/proc/stat").ok()?)?;
    let ticks = rustix::param::clock_ticks_per_second();
    let page = rustix::param::page_size() as u64;
    let mut reading = parse_stat(&stat, ticks, page, boot)?;
    reading.open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
    reading.max_fds = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    Some(reading)
}

/// The `process_*` collector.
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(r) = read() else { return Ok(()) };
        encoder
            .encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                MetricType::Counter,
            )?
            .encode_counter::<NoLabelSet, _, u64>(&r.cpu_seconds, None)?;
        let mut gauge = |name: &str, help: &str, value: f64| {
            encoder
                .encode_descriptor(name, help, None, MetricType::Gauge)?
                .encode_gauge(&value)
        };
        gauge(
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            r.resident_bytes as f64,
        )?;
        gauge(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            r.virtual_bytes as f64,
        )?;
        gauge(
            "process_open_fds",
            "Number of open file descriptors",
            r.open_fds as f64,
        )?;
        if let Some(max) = r.max_fds {
            gauge(
                "process_max_fds",
                "Maximum number of open file descriptors",
                max as f64,
            )?;
        }
        gauge(
            "process_start_time_seconds",
            "Start time of the process since the Unix epoch in seconds",
            r.start_time_seconds,
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_stat_line_whose_name_has_spaces_and_parentheses() {
        // Fields 3.. of a real line, the name holding ") (".
        let stat = "4242 (sluice ) (x) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 150 0 0 20 0 \
                    9 0 12000 104857600 2560 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 \
                    1 0 0 0 0 0";
        let r = parse_stat(stat, 100, 4096, 1_700_000_000).expect("parses");
        assert_eq!(r.cpu_seconds, 4.0);
        assert_eq!(r.virtual_bytes, 104_857_600);
        assert_eq!(r.resident_bytes, 2560 * 4096);
        assert_eq!(r.start_time_seconds, 1_700_000_120.0);
        assert_eq!(
            parse_boot_time("cpu 1 2\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
        assert!(parse_stat("garbage", 100, 4096, 0).is_none());
    }

    #[test]
    fn this_process_reads_on_linux() {
        if !std::path::Path::new("/proc/self/stat").exists() {
            return;
        }
        let r = read().expect("a reading");
        assert!(r.resident_bytes > 0 && r.open_fds > 0, "{r:?}");
        assert!(r.start_time_seconds > 1_600_000_000.0, "{r:?}");
    }
}
