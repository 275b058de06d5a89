//! The human-readable rendering of a [`PlanReport`].

use std::fmt;
use std::time::Duration;

use super::analyse::PlanReport;
use crate::sizing::WaitTarget;
use crate::stats::{format_duration, format_rate};

fn secs(value: Option<f64>) -> String {
    match value {
        Some(v) if v.is_infinite() => "inf".to_owned(),
        Some(v) if v.is_finite() && v >= 0.0 => {
            format_duration(Duration::try_from_secs_f64(v).unwrap_or(Duration::MAX))
        }
        _ => "-".to_owned(),
    }
}

fn percent(value: f64) -> String {
    format!("{:.1} %", value * 100.0)
}

/// Left-aligned columns padded to the widest cell, two spaces apart, indented by two.
fn columns(f: &mut fmt::Formatter<'_>, rows: &[Vec<String>]) -> fmt::Result {
    let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    for row in rows {
        let mut line = String::from(" ");
        for (cell, width) in row.iter().zip(&widths) {
            line.push(' ');
            line.push_str(cell);
            line.push_str(&" ".repeat(width - cell.chars().count() + 1));
        }
        writeln!(f, "{}", line.trim_end())?;
    }
    Ok(())
}

impl fmt::Display for PlanReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.measured;
        writeln!(
            f,
            "measured from {} over {}",
            m.source,
            secs(Some(m.interval_s))
        )?;
        let mut rows = vec![
            vec![
                "arrival rate (incl. retries)".to_owned(),
                format!(
                    "{}/s ({} attempts)",
                    format_rate(m.arrival_rate_per_s),
                    m.attempts.round()
                ),
            ],
            vec![
                "service time".to_owned(),
                format!(
                    "mean {} · p50 {} · p95 {}",
                    secs(m.mean_service_s),
                    secs(m.p50_service_s),
                    secs(m.p95_service_s)
                ),
            ],
        ];
        if let Some(growth) = m.backlog_growth_per_s {
            rows.push(vec![
                "backlog growth (ready + leased)".to_owned(),
                format!("{growth:+.1}/s"),
            ]);
        }
        if let Some(fleet) = &m.fleet {
            rows.push(vec![
                "fleet (fresh heartbeats)".to_owned(),
                format!(
                    "{} dispatchers, {} in flight, {:.1} attempts/s",
                    fleet.dispatchers, fleet.in_flight, fleet.arrivals_per_s
                ),
            ]);
        }
        if let Some(current) = m.current_concurrency {
            let util = self
                .current_utilisation
                .map_or_else(String::new, |u| format!(" (utilisation {})", percent(u)));
            rows.push(vec![
                "current concurrency".to_owned(),
                format!("{current}{util}"),
            ]);
        }
        if m.oldest_ready_age_s.is_some() {
            rows.push(vec![
                "oldest ready age".to_owned(),
                secs(m.oldest_ready_age_s),
            ]);
        }
        columns(f, &rows)?;

        let objective = match self.target {
            WaitTarget::Mean { wait_s } => format!("mean queue wait <= {}", secs(Some(wait_s))),
            WaitTarget::Percentile { quantile, wait_s } => {
                format!("p{} queue wait <= {}", quantile * 100.0, secs(Some(wait_s)))
            }
        };
        writeln!(f, "\nrecommendation ({objective})")?;
        let l = &self.layout;
        columns(
            f,
            &[
                vec![
                    "offered rate".to_owned(),
                    format!("{}/s", format_rate(self.offered_rate_per_s)),
                ],
                vec![
                    "offered load".to_owned(),
                    format!("{:.1} erlangs (busy workers)", self.offered_load_erlangs),
                ],
                vec![
                    "concurrency".to_owned(),
                    self.recommended_concurrency.to_string(),
                ],
                vec!["utilisation".to_owned(), percent(self.utilisation)],
                vec![
                    "predicted mean wait".to_owned(),
                    secs(Some(self.predicted_mean_wait_s)),
                ],
                vec![
                    "layout".to_owned(),
                    format!(
                        "{} process(es) × {} tasks on {} pod(s) of {}; ulimit -n >= {}",
                        l.processes,
                        l.tasks_per_process,
                        l.pods,
                        l.processes_per_pod,
                        l.fds_per_process
                    ),
                ],
            ],
        )?;

        if !m.hosts.is_empty() {
            writeln!(f, "\nhosts")?;
            let mut rows = vec![
                ["host", "attempts/s", "mean", "p95"]
                    .map(str::to_owned)
                    .to_vec(),
            ];
            rows.extend(m.hosts.iter().map(|h| {
                vec![
                    h.host.clone(),
                    format_rate(h.attempts_per_s),
                    secs(h.mean_s),
                    secs(h.p95_s),
                ]
            }));
            columns(f, &rows)?;
        }
        if !self.lanes.is_empty() {
            writeln!(
                f,
                "\nlanes (Little's Law, ceiling {} = share of {})",
                self.lane_ceiling, self.recommended_concurrency
            )?;
            let header = [
                "endpoint",
                "offered/s",
                "latency",
                "source",
                "now",
                "recommended",
            ];
            let mut rows = vec![header.map(str::to_owned).to_vec()];
            rows.extend(self.lanes.iter().map(|lane| {
                vec![
                    lane.endpoint.clone(),
                    format_rate(lane.offered_per_s),
                    secs(Some(lane.latency_s)),
                    lane.latency_source.clone(),
                    lane.current_lane
                        .map_or_else(|| "-".to_owned(), |n| n.to_string()),
                    format!(
                        "{}{}",
                        lane.recommended_lane,
                        if lane.clamped_by_ceiling {
                            " (capped)"
                        } else {
                            ""
                        }
                    ),
                ]
            }));
            columns(f, &rows)?;
        }
        if let Some(ratio) = self.mean_to_p50 {
            writeln!(f, "\nmean ÷ p50 service time: {ratio:.1}")?;
        }
        for warning in &self.warnings {
            writeln!(f, "warning: {warning}")?;
        }
        Ok(())
    }
}
