//! The observer of a phase: every tick it reads the dispatcher ([`Probe`]) and the process's
//! memory into time series, and moves the progress bar.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::time::Instant;

use super::harness::Probe;
use super::store_cpu::StoreCpu;
use super::sys;
use super::timeline::Timeline;

/// How often the dispatcher is read.
pub(crate) const TICK: Duration = Duration::from_millis(250);

/// A progress bar over `seconds`, hidden for `--json` or when stderr is not a terminal.
pub(crate) fn progress(json: bool, prefix: &str, seconds: f64) -> ProgressBar {
    let pb = ProgressBar::new(seconds.ceil().max(1.0) as u64);
    if json || !std::io::stderr().is_terminal() {
        pb.set_draw_target(ProgressDrawTarget::hidden());
    } else if let Ok(style) =
        ProgressStyle::with_template("{prefix:>14} [{bar:30}] {pos:>3}/{len}s {msg}")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_prefix(prefix.to_owned());
    pb
}

/// Time series of one phase, by name: `(seconds since start, value)`.
pub(crate) type Series = BTreeMap<String, Vec<(f64, f64)>>;

/// Samples a phase.
pub(crate) struct Watch {
    probe: Probe,
    watched: Vec<(String, String)>,
    timeline: Arc<Timeline>,
    pb: ProgressBar,
    store_cpu: StoreCpu,
    /// Sample the claim-time histogram once a second (see [`Watch::with_claims`]).
    claims: bool,
    ticks: u64,
    /// Everything sampled so far.
    pub series: Series,
    /// The claim-time histogram over time, cumulative: `(seconds, snapshot)`.
    pub claim_samples: Vec<(f64, sluice::plan::prom::HistogramSnapshot)>,
}

impl Watch {
    /// Watch the endpoints `watched` (`(label, endpoint id)`) of `probe`.
    pub(crate) fn new(
        probe: Probe,
        watched: Vec<(String, String)>,
        timeline: Arc<Timeline>,
        pb: ProgressBar,
    ) -> Self {
        Self {
            probe,
            watched,
            timeline,
            pb,
            store_cpu: StoreCpu::Unknown,
            claims: false,
            ticks: 0,
            series: Series::new(),
            claim_samples: Vec::new(),
        }
    }

    /// Also sample the dispatcher's claim-time histogram once a second (in-process only).
    pub(crate) fn with_claims(mut self) -> Self {
        self.claims = true;
        self
    }

    /// Also sample the store's CPU seconds (series `store_cpu_s`, cumulative).
    pub(crate) fn with_store_cpu(mut self, store_cpu: StoreCpu) -> Self {
        self.store_cpu = store_cpu;
        self
    }

    fn push(&mut self, name: String, t: f64, value: f64) {
        self.series.entry(name).or_default().push((t, value));
    }

    /// Take one sample.
    pub(crate) async fn tick(&mut self) {
        let ids: Vec<String> = self.watched.iter().map(|(_, id)| id.clone()).collect();
        let sample = self.probe.sample(&ids).await;
        let t = self.timeline.elapsed();
        if sample.concurrency > 0.0 {
            self.push("free_slots".into(), t, sample.free_slots());
            self.push("in_flight".into(), t, sample.in_flight);
            self.push("concurrency".into(), t, sample.concurrency);
            if let Some(held) = sample.outstanding {
                self.push("outstanding".into(), t, held);
            }
        }
        if let Some(rss) = sys::rss_mib() {
            self.push("rss_mib".into(), t, rss);
        }
        if let Some(cpu) = self.store_cpu.seconds() {
            self.push("store_cpu_s".into(), t, cpu);
        }
        if let Some(cpu) = sys::process_cpu_s() {
            self.push("process_cpu_s".into(), t, cpu);
        }
        self.ticks += 1;
        if self.claims
            && self.ticks % 4 == 1
            && let Probe::Embedded { metrics, .. } = &self.probe
            && let Ok(scrape) = sluice::plan::prom::Scrape::parse(&metrics.encode())
            && let Some(h) = scrape.histogram("sluice_claim_duration_seconds")
        {
            self.claim_samples.push((t, h));
        }
        for (label, id) in self.watched.clone() {
            if let Some(e) = sample.endpoints.get(&id) {
                self.push(format!("{label}.governor"), t, e.governor);
                self.push(format!("{label}.lane_in_use"), t, e.lane_in_use);
                self.push(format!("{label}.lane_size"), t, e.lane_size);
                self.push(format!("{label}.shed_total"), t, e.shed_total);
                self.push(format!("{label}.failed_total"), t, e.failed_total);
            }
        }
        let names = self.timeline.names().to_vec();
        for (g, name) in names.iter().enumerate() {
            let accepted = self.timeline.accepted(g) as f64;
            self.push(format!("{name}.accepted"), t, accepted);
        }
        self.pb.set_position(t as u64);
        let msg: Vec<String> = (0..names.len())
            .map(|g| format!("{} {}", names[g], self.timeline.delivered_total(g)))
            .collect();
        self.pb
            .set_message(format!("delivered: {}", msg.join(", ")));
    }

    /// Sample until `until`.
    pub(crate) async fn until(&mut self, until: Instant) {
        while Instant::now() < until {
            self.tick().await;
            tokio::time::sleep_until((Instant::now() + TICK).min(until)).await;
        }
    }

    /// Sample until `done` holds or `deadline` passes; true when `done` held.
    pub(crate) async fn until_done(
        &mut self,
        deadline: Instant,
        done: impl Fn(&Timeline) -> bool,
    ) -> bool {
        loop {
            if done(&self.timeline) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            self.tick().await;
            tokio::time::sleep(TICK).await;
        }
    }

    /// Finish the progress bar and hand back the series.
    pub(crate) fn finish(self) -> Series {
        self.pb.finish_and_clear();
        self.series
    }
}

/// The last value of a series, if any.
pub(crate) fn last(series: &Series, name: &str) -> Option<f64> {
    series.get(name)?.last().map(|(_, v)| *v)
}

/// The largest value of a series, if any.
pub(crate) fn max(series: &Series, name: &str) -> Option<f64> {
    series.get(name)?.iter().map(|(_, v)| *v).reduce(f64::max)
}

/// The smallest value of a series, if any.
pub(crate) fn min(series: &Series, name: &str) -> Option<f64> {
    series.get(name)?.iter().map(|(_, v)| *v).reduce(f64::min)
}

/// The mean of a series, if any.
pub(crate) fn mean(series: &Series, name: &str) -> Option<f64> {
    let s = series.get(name)?;
    (!s.is_empty()).then(|| s.iter().map(|(_, v)| v).sum::<f64>() / s.len() as f64)
}

/// The increase of a cumulative series between the samples nearest to `from` and `to` seconds.
pub(crate) fn increase(series: &Series, name: &str, from: f64, to: f64) -> Option<f64> {
    let points = series.get(name)?;
    let at = |t: f64| {
        points
            .iter()
            .min_by(|a, b| (a.0 - t).abs().total_cmp(&(b.0 - t).abs()))
            .map(|p| p.1)
    };
    Some(at(to)? - at(from)?)
}

/// A cumulative series turned into a rate per second: the increase over each whole second.
pub(crate) fn per_second(series: &Series, name: &str) -> Vec<(f64, f64)> {
    let Some(points) = series.get(name) else {
        return Vec::new();
    };
    let mut last_per_second: Vec<(usize, f64)> = Vec::new();
    for &(t, v) in points {
        let s = t as usize;
        match last_per_second.last_mut() {
            Some((sec, value)) if *sec == s => *value = v,
            _ => last_per_second.push((s, v)),
        }
    }
    last_per_second
        .windows(2)
        .map(|w| {
            let ((s0, v0), (s1, v1)) = (w[0], w[1]);
            (s1 as f64, (v1 - v0).max(0.0) / (s1 - s0).max(1) as f64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_summaries() {
        let mut s = Series::new();
        s.insert(
            "n".into(),
            vec![
                (0.0, 0.0),
                (0.5, 5.0),
                (1.2, 10.0),
                (1.9, 12.0),
                (3.1, 30.0),
            ],
        );
        assert_eq!(per_second(&s, "n"), vec![(1.0, 7.0), (3.0, 9.0)]);
        assert_eq!(max(&s, "n"), Some(30.0));
        assert_eq!(min(&s, "n"), Some(0.0));
        assert_eq!(last(&s, "n"), Some(30.0));
        assert_eq!(mean(&s, "n"), Some(57.0 / 5.0));
        assert!(per_second(&s, "missing").is_empty());
    }
}
