//! A small parser for the Prometheus text exposition format, tolerant of OpenMetrics
//! (`# EOF`, `# UNIT`, `_created` series, exemplars after ` # `), plus the counter and
//! histogram arithmetic `sluice plan` needs: deltas between two scrapes (reset-aware), the mean
//! and interpolated quantiles of a histogram.

use std::collections::BTreeMap;

use thiserror::Error;

/// A line that is neither a comment nor a well-formed sample.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("metrics line {line}: {reason}: {text:?}")]
pub struct PromError {
    /// 1-based line number.
    pub line: usize,
    /// What was wrong.
    pub reason: &'static str,
    /// The offending line.
    pub text: String,
}

/// One sample: a metric name, its labels (in exposition order) and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Full series name, e.g. `webhook_service_seconds_bucket`.
    pub name: String,
    /// Label pairs.
    pub labels: Vec<(String, String)>,
    /// The value (`+Inf`, `-Inf` and `NaN` are accepted).
    pub value: f64,
}

impl Sample {
    /// The value of label `key`, if present.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Every sample of one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scrape {
    /// Samples in exposition order; `_created` series are dropped.
    pub samples: Vec<Sample>,
}

/// A cumulative histogram: `(upper bound, cumulative count)` buckets, sum and count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistogramSnapshot {
    /// Buckets sorted by upper bound; the last is usually `+Inf`.
    pub buckets: Vec<(f64, f64)>,
    /// Sum of observations.
    pub sum: f64,
    /// Number of observations.
    pub count: f64,
}

/// Increase of a counter between two readings; a smaller later reading means the process
/// restarted, so the later reading itself is the increase (Prometheus `increase` semantics).
pub fn counter_delta(before: f64, after: f64) -> f64 {
    if after >= before {
        after - before
    } else {
        after
    }
}

impl Scrape {
    /// Parses exposition text. Comments, blank lines and `_created` series are skipped.
    pub fn parse(text: &str) -> Result<Scrape, PromError> {
        let mut samples = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fail = |reason| PromError {
                line: index + 1,
                reason,
                text: raw.to_owned(),
            };
            let sample = parse_sample(line).map_err(fail)?;
            if !sample.name.ends_with("_created") {
                samples.push(sample);
            }
        }
        Ok(Scrape { samples })
    }

    fn matching<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.name == name)
    }

    /// Sum of `name` over every label set; `None` when the series is absent.
    pub fn sum(&self, name: &str) -> Option<f64> {
        self.matching(name)
            .map(|s| s.value)
            .fold(None, |acc, v| Some(acc.unwrap_or(0.0) + v))
    }

    /// `name` summed per value of `label` (samples without the label are ignored).
    pub fn by_label(&self, name: &str, label: &str) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for s in self.matching(name) {
            if let Some(key) = s.label(label) {
                *out.entry(key.to_owned()).or_insert(0.0) += s.value;
            }
        }
        out
    }

    /// Histogram `base` (`base_bucket`, `base_sum`, `base_count`) merged over all label sets.
    pub fn histogram(&self, base: &str) -> Option<HistogramSnapshot> {
        self.histograms(base, None).remove("")
    }

    /// Histogram `base` split by the value of `label` (or merged under `""` when `None`).
    pub fn histograms(
        &self,
        base: &str,
        label: Option<&str>,
    ) -> BTreeMap<String, HistogramSnapshot> {
        let key_of = |s: &Sample| match label {
            None => Some(String::new()),
            Some(l) => s.label(l).map(str::to_owned),
        };
        let mut buckets: BTreeMap<String, BTreeMap<u64, (f64, f64)>> = BTreeMap::new();
        let mut out: BTreeMap<String, HistogramSnapshot> = BTreeMap::new();
        for s in &self.samples {
            let Some(rest) = s.name.strip_prefix(base) else {
                continue;
            };
            let Some(key) = key_of(s) else { continue };
            match rest {
                "_bucket" => {
                    let Some(le) = s.label("le").and_then(parse_value) else {
                        continue;
                    };
                    // Keyed by the bound's bits so equal bounds from several label sets merge.
                    let slot = buckets.entry(key.clone()).or_default();
                    slot.entry(ordered_bits(le)).or_insert((le, 0.0)).1 += s.value;
                    out.entry(key).or_default();
                }
                "_sum" => out.entry(key).or_default().sum += s.value,
                "_count" => out.entry(key).or_default().count += s.value,
                _ => {}
            }
        }
        for (key, hist) in &mut out {
            hist.buckets = buckets
                .remove(key)
                .unwrap_or_default()
                .into_values()
                .collect();
        }
        out
    }
}

/// Maps a float to an integer with the same order (for sorting bucket bounds in a map).
fn ordered_bits(value: f64) -> u64 {
    let bits = value.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

impl HistogramSnapshot {
    /// Observations between `earlier` and `self` (bucket by bucket; reset-aware).
    pub fn delta(&self, earlier: &HistogramSnapshot) -> HistogramSnapshot {
        let reset = self.count < earlier.count;
        let before = |le: f64| {
            earlier
                .buckets
                .iter()
                .find(|(b, _)| *b == le)
                .map_or(0.0, |(_, c)| *c)
        };
        let buckets = self
            .buckets
            .iter()
            .map(|&(le, c)| (le, if reset { c } else { (c - before(le)).max(0.0) }))
            .collect();
        let (sum, count) = if reset {
            (self.sum, self.count)
        } else {
            (self.sum - earlier.sum, self.count - earlier.count)
        };
        HistogramSnapshot {
            buckets,
            sum,
            count,
        }
    }

    /// Mean observation, `sum / count`; `None` without observations.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.sum / self.count)
    }

    /// The `q`-quantile (0..=1), interpolated linearly inside the bucket that holds it, as
    /// PromQL's `histogram_quantile` does: the first bucket starts at 0, and a rank that falls
    /// in the `+Inf` bucket returns the highest finite bound. `None` without observations.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.buckets.last().map_or(self.count, |(_, c)| *c);
        if total.is_nan() || total <= 0.0 || !(0.0..=1.0).contains(&q) {
            return None;
        }
        let rank = q * total;
        let (mut lower, mut below) = (0.0_f64, 0.0_f64);
        for &(le, cumulative) in &self.buckets {
            if cumulative >= rank && cumulative > below {
                if le.is_infinite() {
                    return Some(lower);
                }
                let fraction = (rank - below) / (cumulative - below);
                return Some(lower + (le - lower) * fraction);
            }
            if le.is_finite() {
                lower = le;
            }
            below = cumulative;
        }
        Some(lower)
    }
}

fn parse_value(text: &str) -> Option<f64> {
    match text {
        "+Inf" | "Inf" | "+inf" | "inf" => Some(f64::INFINITY),
        "-Inf" | "-inf" => Some(f64::NEG_INFINITY),
        "NaN" | "nan" => Some(f64::NAN),
        other => other.parse().ok(),
    }
}

type Labels = Vec<(String, String)>;

fn parse_sample(line: &str) -> Result<Sample, &'static str> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .ok_or("no value")?;
    let name = &line[..name_end];
    if name.is_empty() {
        return Err("no metric name");
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(inner)?;
        labels = parsed;
        rest = after;
    }
    // An OpenMetrics exemplar follows ` # `; it is not part of the sample.
    let rest = rest.split(" # ").next().unwrap_or_default();
    let value = rest.split_whitespace().next().ok_or("no value")?;
    let value = parse_value(value).ok_or("bad value")?;
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// Parses `k="v",k2="v2"}` and returns the pairs and the text after the closing brace.
fn parse_labels(mut text: &str) -> Result<(Labels, &str), &'static str> {
    let mut labels = Vec::new();
    loop {
        text = text.trim_start_matches([' ', ',']);
        if let Some(after) = text.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = text.find('=').ok_or("bad label")?;
        let key = text[..eq].trim().to_owned();
        let quoted = text[eq + 1..]
            .trim_start()
            .strip_prefix('"')
            .ok_or("unquoted label value")?;
        let mut value = String::new();
        let mut chars = quoted.char_indices();
        let end = loop {
            match chars.next() {
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => return Err("unterminated label value"),
                },
                Some((_, c)) => value.push(c),
                None => return Err("unterminated label value"),
            }
        };
        labels.push((key, value));
        text = &quoted[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_openmetrics_with_escapes_exemplars_and_eof() {
        let text = "# HELP x_total A counter.\n# TYPE x counter\n\
            x_total{endpoint=\"a\\\"b\",host=\"h\"} 3 # {trace_id=\"t\"} 1.0\n\
            x_created{endpoint=\"a\"} 1.7e9\n\
            g 2.5 1700000000\n# EOF\n";
        let scrape = Scrape::parse(text).expect("parses");
        assert_eq!(scrape.samples.len(), 2);
        assert_eq!(scrape.samples[0].label("endpoint"), Some("a\"b"));
        assert_eq!(scrape.sum("x_total"), Some(3.0));
        assert_eq!(scrape.sum("g"), Some(2.5));
        assert_eq!(scrape.sum("missing"), None);
        assert!(Scrape::parse("bad{le=1} 2\n").is_err());
        assert!(Scrape::parse("novalue\n").is_err());
    }

    #[test]
    fn counter_reset_counts_from_zero() {
        assert_eq!(counter_delta(10.0, 15.0), 5.0);
        assert_eq!(counter_delta(10.0, 4.0), 4.0);
    }

    #[test]
    fn quantile_in_the_inf_bucket_is_the_highest_bound() {
        let h = HistogramSnapshot {
            buckets: vec![(1.0, 1.0), (f64::INFINITY, 10.0)],
            sum: 100.0,
            count: 10.0,
        };
        assert_eq!(h.quantile(0.9), Some(1.0));
        assert_eq!(h.mean(), Some(10.0));
        assert_eq!(HistogramSnapshot::default().quantile(0.5), None);
    }
}
