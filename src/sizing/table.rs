//! Aligned text rendering of a [`SizeReport`], with thousands separators.

use std::fmt;

use super::numbers::{thousands, thousands_f64};
use super::report::{SizeReport, SizeRow, WaitTarget};

/// Seconds for humans: `"1.40 s"`, `"412.3 ms"`, `"<0.1 ms"`, `"0 s"`, `"inf"`.
fn seconds(value_s: f64) -> String {
    if !value_s.is_finite() {
        "inf".to_owned()
    } else if value_s == 0.0 {
        "0 s".to_owned()
    } else if value_s >= 1.0 {
        format!("{} s", thousands_f64(value_s, 2))
    } else if value_s >= 0.000_05 {
        format!("{:.1} ms", value_s * 1_000.0)
    } else {
        "<0.1 ms".to_owned()
    }
}

/// A number printed with up to `decimals` decimals and no trailing zeros: `95.0` → `"95"`.
fn trimmed(value: f64, decimals: usize) -> String {
    let text = format!("{value:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

fn describe_target(target: &WaitTarget) -> String {
    match *target {
        WaitTarget::Mean { wait_s } => format!("mean queue wait <= {}", seconds(wait_s)),
        WaitTarget::Percentile { quantile, wait_s } => format!(
            "p{} queue wait <= {}",
            trimmed(quantile * 100.0, 3),
            seconds(wait_s)
        ),
    }
}

fn cells(row: &SizeRow, target: &WaitTarget) -> Vec<(String, String)> {
    let rate_decimals = if row.rate_per_s.fract() == 0.0 { 0 } else { 2 };
    let mut cells = vec![
        (
            "rate".to_owned(),
            format!("{}/s", thousands_f64(row.rate_per_s, rate_decimals)),
        ),
        ("service".to_owned(), seconds(row.service_time_s)),
        (
            "load".to_owned(),
            format!("{} E", thousands_f64(row.offered_load_erlangs, 1)),
        ),
        (
            "floor".to_owned(),
            thousands(u64::from(row.littles_law_floor_workers)),
        ),
        (
            "sqrt".to_owned(),
            thousands(u64::from(row.sqrt_staffing_workers)),
        ),
        (
            "target".to_owned(),
            thousands(u64::from(row.target_pool_workers)),
        ),
        (
            "util".to_owned(),
            format!("{:.1}%", row.utilisation * 100.0),
        ),
        ("wait".to_owned(), seconds(row.mean_wait_s)),
    ];
    if let (Some(exceeds), WaitTarget::Percentile { wait_s, .. }) =
        (row.p_wait_exceeds_target, target)
    {
        cells.push((
            format!("P(wait>{})", seconds(*wait_s)),
            format!("{:.2}%", exceeds * 100.0),
        ));
    }
    cells.push((
        "processes".to_owned(),
        thousands(u64::from(row.layout.processes)),
    ));
    cells.push(("pods".to_owned(), thousands(u64::from(row.layout.pods))));
    cells
}

impl fmt::Display for SizeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "worker pool sizing for {} (sqrt staffing beta = {})",
            describe_target(&self.target),
            trimmed(self.beta, 2)
        )?;
        let rows: Vec<&SizeRow> = std::iter::once(&self.steady).chain(&self.surge).collect();
        let table: Vec<Vec<(String, String)>> =
            rows.iter().map(|row| cells(row, &self.target)).collect();
        let label_width = rows.iter().map(|row| row.label.len()).max().unwrap_or(0);
        let columns = table.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|column| {
                table
                    .iter()
                    .filter_map(|cells| cells.get(column))
                    .map(|(_, value)| value.len())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for (row, cells) in rows.iter().zip(&table) {
            write!(f, "{:<label_width$}", row.label)?;
            for ((key, value), width) in cells.iter().zip(&widths) {
                write!(f, "  {key}={value:>width$}")?;
            }
            writeln!(f)?;
        }
        let layout = &self.steady.layout;
        let limit = match layout.current_fd_limit {
            None => "unknown".to_owned(),
            Some(u64::MAX) => "unlimited".to_owned(),
            Some(limit) => thousands(limit),
        };
        let verdict = match (layout.current_fd_limit, layout.fd_limit_too_low) {
            (None, _) => "unchecked",
            (Some(_), true) => "TOO LOW",
            (Some(_), false) => "ok",
        };
        writeln!(
            f,
            "layout: {} tasks/process, {} processes/pod, {} fds/process; ulimit -n = {limit} ({verdict})",
            thousands(u64::from(layout.tasks_per_process)),
            thousands(u64::from(layout.processes_per_pod)),
            thousands(layout.fds_per_process),
        )?;
        for warning in &self.warnings {
            writeln!(f, "warning: {warning}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sizing::report::{SizeRequest, Surge, size_with_fd_limit};

    #[test]
    fn seconds_pick_a_readable_unit() {
        assert_eq!(seconds(1.4), "1.40 s");
        assert_eq!(seconds(0.5), "500.0 ms");
        assert_eq!(seconds(0.000_01), "<0.1 ms");
        assert_eq!(seconds(f64::INFINITY), "inf");
    }

    #[test]
    fn table_is_aligned_and_grouped() {
        let mut request = SizeRequest::new(900.0, 1.4, WaitTarget::Mean { wait_s: 0.5 });
        request.surge = Some(Surge {
            rate_per_s: 2_400.0,
            service_time_s: 3.1,
        });
        let report = size_with_fd_limit(&request, Some(1_024)).expect("valid request");
        let text = report.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].starts_with("steady  rate=  900/s"), "{text}");
        assert!(lines[1].contains("floor=1,260"), "{text}");
        assert!(lines[2].starts_with("surge   rate=2,400/s"), "{text}");
        assert!(lines[2].contains("floor=7,440"), "{text}");
        for key in ["floor=", "target=", "util=", "pods="] {
            assert_eq!(
                lines[1].find(key),
                lines[2].find(key),
                "{key} misaligned:\n{text}"
            );
        }
        assert!(
            lines[3].contains("576 fds/process; ulimit -n = 1,024 (ok)"),
            "{text}"
        );
        assert_eq!(lines.len(), 4, "{text}");
    }

    #[test]
    fn percentile_column_and_warnings_are_printed() {
        let target = WaitTarget::Percentile {
            quantile: 0.95,
            wait_s: 2.0,
        };
        let mut request = SizeRequest::new(900.0, 1.4, target);
        request.tasks_per_process = 600;
        let text = size_with_fd_limit(&request, Some(1_024))
            .expect("valid request")
            .to_string();
        assert!(
            text.starts_with("worker pool sizing for p95 queue wait <= 2.00 s"),
            "{text}"
        );
        assert!(text.contains("P(wait>2.00 s)="), "{text}");
        assert!(text.contains("(TOO LOW)"), "{text}");
        assert!(text.contains("warning: ulimit -n is 1,024 but each process needs 1,456"));
        assert!(
            text.contains("warning: 600 tasks per process exceeds ~500"),
            "{text}"
        );
    }
}
