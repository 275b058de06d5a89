//! A scenario's result: named figures with units, the parameters and machine it ran with, the
//! time series behind its chart, and notes. Printed as a table for people or as JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use super::sys::Machine;

/// One figure.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// Stable key for scripts (`healthy_p99_ms`).
    pub key: String,
    /// What it is, for people.
    pub label: String,
    /// The value; `null` when it could not be measured.
    pub value: Option<f64>,
    /// Its unit.
    pub unit: &'static str,
}

/// One claim a scenario checks, and whether the run met it.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// Whether the claim held.
    pub pass: bool,
    /// The claim and the figures behind the answer.
    pub text: String,
    /// A claim that holds at any size (order, nothing lost), so a smoke run checks it too;
    /// a timing or rate claim is not one.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub invariant: bool,
}

/// The result of one `sluice bench` run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: &'static str,
    /// What was measured: the embedded sluice and its store, or the target.
    pub sluice: String,
    /// The machine.
    pub machine: Machine,
    /// Settings of this run.
    pub params: BTreeMap<String, Value>,
    /// Every figure, in reading order.
    pub figures: Vec<Figure>,
    /// What the figures mean, and caveats.
    pub notes: Vec<String>,
    /// Charts written.
    pub charts: Vec<String>,
    /// The time series behind the charts: name → `[seconds, value]` points.
    pub series: BTreeMap<String, Vec<(f64, f64)>>,
    /// The claims checked, PASS or FAIL (scenarios with pass criteria).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub verdicts: Vec<Verdict>,
}

impl Report {
    /// An empty report for `scenario`.
    pub fn new(scenario: &'static str, sluice: String) -> Self {
        Self {
            scenario,
            sluice,
            machine: Machine::read(),
            params: BTreeMap::new(),
            figures: Vec::new(),
            notes: Vec::new(),
            charts: Vec::new(),
            series: BTreeMap::new(),
            verdicts: Vec::new(),
        }
    }

    /// Record a parameter.
    pub fn param(&mut self, key: &str, value: impl Into<Value>) {
        self.params.insert(key.to_owned(), value.into());
    }

    /// Record a figure.
    pub fn figure(&mut self, key: &str, label: &str, value: Option<f64>, unit: &'static str) {
        self.figures.push(Figure {
            key: key.to_owned(),
            label: label.to_owned(),
            value: value.filter(|v| v.is_finite()),
            unit,
        });
    }

    /// Add a note.
    pub fn note(&mut self, text: impl Into<String>) {
        self.notes.push(text.into());
    }

    /// Record whether a claim held.
    pub fn verdict(&mut self, pass: bool, text: impl Into<String>) {
        self.verdicts.push(Verdict {
            pass,
            text: text.into(),
            invariant: false,
        });
    }

    /// Record whether a claim that holds at any size held (a smoke run fails on it).
    pub fn invariant(&mut self, pass: bool, text: impl Into<String>) {
        self.verdicts.push(Verdict {
            pass,
            text: text.into(),
            invariant: true,
        });
    }

    /// Claims that did not hold.
    pub fn failures(&self) -> usize {
        self.verdicts.iter().filter(|v| !v.pass).count()
    }

    /// Claims that hold at any size and did not: a smoke run fails on these alone.
    pub fn broken_invariants(&self) -> usize {
        self.verdicts
            .iter()
            .filter(|v| v.invariant && !v.pass)
            .count()
    }

    /// The claims a run fails on: in a smoke run only those that hold at any size.
    pub fn claims_failed(&self, smoke: bool) -> usize {
        if smoke {
            self.broken_invariants()
        } else {
            self.failures()
        }
    }

    /// Keep a series for the JSON output.
    pub fn series(&mut self, name: &str, points: Vec<(f64, f64)>) {
        self.series.insert(name.to_owned(), points);
    }

    /// The value of a figure by key.
    pub fn value(&self, key: &str) -> Option<f64> {
        self.figures.iter().find(|f| f.key == key)?.value
    }

    /// The human summary. A smoke run (`smoke`) checks its timing and rate claims at a size
    /// where they mean nothing: they print as not judged, with their figures, not as FAIL.
    pub fn table(&self, smoke: bool) -> String {
        let mut out = String::new();
        let m = &self.machine;
        let _ = writeln!(
            out,
            "sluice bench {}: {} ({} cores, {} GiB)",
            self.scenario, self.sluice, m.cores, m.memory_gib
        );
        let params: Vec<String> = self
            .params
            .iter()
            .map(|(k, v)| format!("{k}={}", v.to_string().trim_matches('"')))
            .collect();
        let _ = writeln!(out, "  {}", params.join(" "));
        let width = self
            .figures
            .iter()
            .map(|f| f.label.chars().count())
            .max()
            .unwrap_or(0);
        for f in &self.figures {
            let value = f.value.map_or("n/a".to_owned(), format_value);
            let _ = writeln!(
                out,
                "  {:<width$}  {:>12} {}",
                f.label,
                value,
                f.unit,
                width = width
            );
        }
        for n in &self.notes {
            let _ = writeln!(out, "  note: {n}");
        }
        for v in &self.verdicts {
            let verdict = if smoke && !v.invariant {
                "not judged at smoke size"
            } else if v.pass {
                "PASS"
            } else {
                "FAIL"
            };
            let _ = writeln!(out, "  {verdict}: {}", v.text);
        }
        for c in &self.charts {
            let _ = writeln!(out, "  chart: {c}");
        }
        out
    }

    /// Everything as pretty JSON.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// Three significant digits or so, without a wall of decimals.
pub(crate) fn format_value(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 || (v == v.trunc() && a < 1e15) {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// Nearest-rank percentile of `values`.
pub(crate) fn percentile(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// `a / b` when both exist and `b` is not zero.
pub(crate) fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_and_json_carry_every_figure() {
        let mut r = Report::new("throughput", "embedded".into());
        r.param("duration_s", 3);
        r.figure("rate", "delivery rate", Some(1234.5), "/s");
        r.figure("missing", "not measured", None, "ms");
        r.figure("p50", "p50", Some(0.01234), "ms");
        r.verdict(true, "it held");
        r.verdict(false, "it broke");
        let t = r.table(false);
        assert!(t.contains("PASS: it held") && t.contains("FAIL: it broke"));
        assert_eq!(r.failures(), 1);
        assert_eq!(r.broken_invariants(), 0);
        r.invariant(true, "order held");
        assert_eq!(r.broken_invariants(), 0);
        r.invariant(false, "order broke");
        assert_eq!((r.failures(), r.broken_invariants()), (2, 1));
        let smoke = r.table(true);
        assert!(smoke.contains("not judged at smoke size: it broke"));
        assert!(smoke.contains("PASS: order held") && smoke.contains("FAIL: order broke"));
        assert!(t.contains("delivery rate") && t.contains("1234") && t.contains("n/a"));
        assert!(t.contains("0.012"));
        let v: Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(v["figures"].as_array().unwrap().len(), 3);
        assert_eq!(v["verdicts"][1]["pass"], false);
        assert_eq!(r.value("rate"), Some(1234.5));
        assert_eq!(ratio(Some(4.0), Some(2.0)), Some(2.0));
        assert_eq!(ratio(Some(4.0), Some(0.0)), None);
    }
}
