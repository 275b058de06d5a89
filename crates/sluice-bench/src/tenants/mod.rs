//! `tenants`: one tenant's backlog beside the others. A **busy** tenant fans 100 messages out
//! to its 2,000 endpoints, which answer correctly in 200 ms (200,000 ready deliveries), while a
//! **quiet** tenant sends 20 messages a second to its 10 fast endpoints (200 deliveries a second).
//! Each phase runs on a fresh sluice (and a fresh database on PostgreSQL; with
//! `--dispatchers N`, on a fleet of one API process and N dispatcher processes):
//!
//! 1. `quiet alone`: the quiet tenant's enqueue→delivery latency with nothing else going on;
//! 2. `beside backlog`: the same load beside the busy tenant's backlog: its latency must stay
//!    within twice its latency alone, and every one of its deliveries must be made;
//! 3. `busy alone`: the backlog drained alone, the rate the pool gives it: beside the quiet
//!    tenant it must keep at least 90 % of it (fair shares are work-conserving);
//! 4. `weights`: three tenants of weights 1, 2 and 4, each with a backlog over 100 endpoints
//!    answering in 50 ms (lanes of 16, so the pool, not the lanes, is what they share; backlogs
//!    of 40,000, 80,000 and 160,000, so none runs dry): their deliveries must split 1/7, 2/7,
//!    4/7 (within 10 %);
//! 5. `trickle`: one message a second from a third tenant beside the backlog: its latency.
//!
//! # Layout
//! - [`run`](mod@run): one phase on a fresh sluice, its tenants and load;
//! - [`verdicts`]: what a phase recorded, the shares and the pass criteria (pure, unit-tested);
//! - [`figures`]: the report and the chart.

mod figures;
mod run;
mod verdicts;

use std::time::Duration;

use super::BenchArgs;
use super::report::Report;
use run::phase;
use verdicts::Outcome;

/// Timeline groups.
const QUIET: usize = 0;
const BUSY: usize = 1;
const TRICKLE: usize = 2;
/// The weighted tenants' groups, weights 1, 2 and 4.
const WEIGHTED: [(usize, u32); 3] = [(3, 1), (4, 2), (5, 4)];
const GROUPS: [&str; 6] = [
    "quiet", "busy", "trickle", "weight-1", "weight-2", "weight-4",
];

/// Most API calls of the set-up in flight at once.
const SETUP_CONCURRENCY: usize = 16;
/// How long the phase waits after the load for the quiet deliveries already accepted.
const DRAIN: Duration = Duration::from_secs(60);

/// The sizes of a run.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    quiet_endpoints: usize,
    quiet_rate: f64,
    busy_endpoints: usize,
    busy_messages: u64,
    busy_service: Duration,
    weighted_endpoints: usize,
    /// Messages of the weight-1 tenant's backlog; the others have theirs × their weight.
    weighted_messages: u64,
    weighted_service: Duration,
    duration: Duration,
}

impl Sizes {
    fn of(args: &BenchArgs) -> Self {
        Self {
            quiet_endpoints: args.endpoints.unwrap_or(10),
            quiet_rate: args.rate.unwrap_or(args.sized(20.0, 5.0)),
            busy_endpoints: args.backlog_endpoints.unwrap_or(args.sized(2_000, 20)),
            busy_messages: args.backlog.unwrap_or(args.sized(100, 5)),
            busy_service: Duration::from_millis(args.slow_ms.unwrap_or(200)),
            weighted_endpoints: args.sized(100, 4),
            weighted_messages: args.sized(400, 10),
            weighted_service: Duration::from_millis(50),
            duration: args.duration(20.0),
        }
    }
}

/// Who is in a phase.
#[derive(Debug, Clone, Copy, Default)]
struct Cast {
    quiet: bool,
    busy: bool,
    trickle: bool,
    weighted: bool,
}

/// What every phase recorded.
struct Phases {
    alone: Outcome,
    beside: Outcome,
    busy_alone: Outcome,
    weights: Outcome,
    trickle: Outcome,
}

/// Run every phase and report.
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let sizes = Sizes::of(args);
    let quiet = Cast {
        quiet: true,
        ..Cast::default()
    };
    let alone = phase(args, sizes, "quiet alone", quiet).await?;
    let beside_cast = Cast {
        busy: true,
        ..quiet
    };
    let beside = phase(args, sizes, "beside backlog", beside_cast).await?;
    let busy = Cast {
        busy: true,
        ..Cast::default()
    };
    let busy_alone = phase(args, sizes, "busy alone", busy).await?;
    let weighted = Cast {
        weighted: true,
        ..Cast::default()
    };
    let weights = phase(args, sizes, "weights", weighted).await?;
    let trickle_cast = Cast {
        busy: true,
        trickle: true,
        ..Cast::default()
    };
    let trickle = phase(args, sizes, "trickle", trickle_cast).await?;

    let phases = Phases {
        alone,
        beside,
        busy_alone,
        weights,
        trickle,
    };
    figures::report(args, sizes, &phases)
}
