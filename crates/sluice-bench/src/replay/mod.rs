//! `replay`: a recorded peak shape replayed at 1×, 2× and 4× its rate, the check a sizing has to
//! pass before it is trusted. The shape is built in: a few dozen endpoints (each its own tenant)
//! with mixed service times, three that throttle (429 + `Retry-After: 1` above a concurrency),
//! one slow and one dead, all offered traffic at once. One sluice (`--concurrency auto` unless
//! `--concurrency` fixes the pool) warms up at 1× for 30 s, then runs each level in turn.
//!
//! Per level it reports the age of the oldest ready delivery (max and p99 of per-second samples;
//! for the healthy tenants, whose backlog is the pool's, and for all, where the slow, dead and
//! throttling endpoints' own backlogs count too), the mean pool utilisation, deliveries per
//! second, the healthy endpoints' delivery latency (p99, p99.9) and sheds per delivery offered
//! (a shed waits 5–20 s before it is offered again, so a lane too narrow for an endpoint's
//! bursts shows here), and the share of 429s each throttling endpoint answered; then three
//! verdicts: the healthy tenants' oldest age stays under the objective at 2×, the pool's mean
//! utilisation sits in 85–95 %, and no throttling endpoint's 429 share rises from 1× to 2× (the
//! governor, not the pool, decides what an endpoint gets).
//!
//! # Layout
//! - [`run`](mod@run): the levels on one sluice, sampled;
//! - [`verdicts`]: each level's figures reduced from the samples, the pass criteria (pure,
//!   unit-tested);
//! - [`figures`]: the report and the chart.

mod figures;
mod run;
mod verdicts;

use std::time::Duration;

use super::BenchArgs;
use super::report::Report;
use run::levels;

/// What an endpoint of the shape does.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// Answers 200 after this long.
    Answers(Duration),
    /// Serves `capacity` at once in `service`, 429 + Retry-After: 1 beyond.
    Throttles { capacity: usize, service: Duration },
    /// Accepts and never answers.
    Dead,
}

/// One endpoint of the shape at 1×.
#[derive(Debug, Clone, Copy)]
struct Shaped {
    name: &'static str,
    kind: Kind,
    /// Events per second at 1×.
    rate: f64,
    /// Timeline group.
    group: usize,
}

/// Timeline groups: the healthy endpoints together, then each bad one.
const GROUPS: [&str; 6] = [
    "healthy",
    "throttles-2",
    "throttles-3",
    "throttles-4",
    "slow",
    "dead",
];
const HEALTHY: usize = 0;
/// The groups of the throttling endpoints.
const THROTTLING: [usize; 3] = [1, 2, 3];

/// The built-in peak: 24 fast endpoints (5–80 ms) at 8/s, 4 at 300 ms at 4/s, three throttling
/// endpoints offered 1.5× what they can take, a 3 s endpoint at 4/s and a dead one at 2/s.
fn shape() -> Vec<Shaped> {
    let ms = Duration::from_millis;
    let mut out = Vec::new();
    const FAST: [(&str, u64); 24] = [
        ("fast-01", 5),
        ("fast-02", 10),
        ("fast-03", 20),
        ("fast-04", 40),
        ("fast-05", 80),
        ("fast-06", 5),
        ("fast-07", 10),
        ("fast-08", 20),
        ("fast-09", 40),
        ("fast-10", 80),
        ("fast-11", 5),
        ("fast-12", 10),
        ("fast-13", 20),
        ("fast-14", 40),
        ("fast-15", 80),
        ("fast-16", 5),
        ("fast-17", 10),
        ("fast-18", 20),
        ("fast-19", 40),
        ("fast-20", 80),
        ("fast-21", 5),
        ("fast-22", 10),
        ("fast-23", 20),
        ("fast-24", 40),
    ];
    for (name, service) in FAST {
        out.push(Shaped {
            name,
            kind: Kind::Answers(ms(service)),
            rate: 8.0,
            group: HEALTHY,
        });
    }
    for name in ["medium-1", "medium-2", "medium-3", "medium-4"] {
        out.push(Shaped {
            name,
            kind: Kind::Answers(ms(300)),
            rate: 4.0,
            group: HEALTHY,
        });
    }
    for (i, capacity) in [2usize, 3, 4].into_iter().enumerate() {
        let service = ms(100);
        out.push(Shaped {
            name: GROUPS[THROTTLING[i]],
            kind: Kind::Throttles { capacity, service },
            rate: 1.5 * capacity as f64 / service.as_secs_f64(),
            group: THROTTLING[i],
        });
    }
    out.push(Shaped {
        name: "slow",
        kind: Kind::Answers(ms(3_000)),
        rate: 4.0,
        group: 4,
    });
    out.push(Shaped {
        name: "dead",
        kind: Kind::Dead,
        rate: 2.0,
        group: 5,
    });
    out
}

/// The healthy endpoints' two kinds, for their shed shares: name prefix and label.
const HEALTHY_KINDS: [(&str, &str); 2] = [("fast", "fast"), ("medium", "300 ms")];

/// Run the three levels and report.
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let duration = args.duration(60.0);
    let warmup = args.sized(Duration::from_secs(30), Duration::from_secs(1));
    let objective = args.objective.unwrap_or(5.0);
    let levels = levels(args, &[1.0, 2.0, 4.0], warmup, duration).await?;
    figures::report(args, &levels, duration, warmup, objective)
}
