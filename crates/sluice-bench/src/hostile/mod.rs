//! `hostile`: a healthy tenant beside a hostile one, on a pool of 64 (`--concurrency 64` unless
//! given). Tenant **B** sends 5 messages a second to one fast endpoint; tenant **A** has 16
//! endpoints and a backlog of 100 messages fanned out to all of them (1,600 deliveries), accepted
//! before B's load starts. Each phase runs on a fresh sluice (a fresh database on PostgreSQL;
//! with `--dispatchers N`, a fleet):
//!
//! 1. `alone`: B alone; its latency (accepted → received) is the baseline;
//! 2. `hanging token`: A's endpoints share one set of OAuth2 client credentials whose token URL
//!    accepts and never answers: B's latency beside it, A's attempts by kind, the requests the
//!    token URL got; A's endpoints must receive nothing;
//! 3. `slow endpoints`: A's endpoints answer 200 after 9.5 s, A under the default policy;
//! 4. `slow, ceiling`: the same with A's `max_share` at 0.5;
//! 5. `token answer`: a `sluice serve` process of its own beside a token URL answering 200 with
//!    a 200 MB body: its peak RSS.
//!
//! Verdicts: B's p99 beside A within 2× its p99 alone or under 100 ms, every B delivery made, A
//! within its ceiling, the process under 200 MB; at any size (so in a smoke run too): no
//! `webhook-id` received twice at any receiver, nothing sent to A's endpoints without a token.
//!
//! # Layout
//! - [`run`](mod@run): one phase on a fresh sluice, what it recorded;
//! - [`verdicts`]: the verdicts' arithmetic (pure, unit-tested);
//! - [`figures`]: the figures and verdicts;
//! - [`token_answer`]: the `sluice serve` process beside a huge token answer.

mod figures;
mod run;
mod token_answer;
mod verdicts;

use std::time::Duration;

use super::chart::{Line, Panel};
use super::report::Report;
use super::{BenchArgs, save_chart};

/// Timeline groups: the healthy tenant B and the hostile tenant A.
const B: usize = 0;
const A: usize = 1;
const GROUPS: [&str; 2] = ["healthy", "hostile"];

/// The pool, small enough that a tenant holding it is plain to see.
const DEFAULT_CONCURRENCY: u32 = 64;
/// A's ceiling in the `slow, ceiling` phase.
const MAX_SHARE: f64 = 0.5;
/// B's p99 beside A may be this many times its p99 alone…
const FACTOR: f64 = 2.0;
/// …or under this, ms, whatever its p99 alone.
const FLOOR_MS: f64 = 100.0;
/// The most the process may reach beside a huge token answer, bytes.
const RSS_TARGET_BYTES: f64 = 200e6;
/// Most API calls of the set-up in flight at once.
const SETUP_CONCURRENCY: usize = 16;
/// How long a phase waits after the load for B's deliveries already accepted.
const DRAIN: Duration = Duration::from_secs(60);

/// The sizes of a run.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    concurrency: u32,
    b_rate: f64,
    a_endpoints: usize,
    a_messages: u64,
    slow: Duration,
    duration: Duration,
    token: token_answer::Sizes,
}

impl Sizes {
    fn of(args: &BenchArgs) -> Self {
        let concurrency = args.concurrency.unwrap_or(DEFAULT_CONCURRENCY);
        Self {
            concurrency,
            b_rate: args.rate.unwrap_or(5.0),
            a_endpoints: args.backlog_endpoints.unwrap_or(args.sized(16, 4)),
            a_messages: args.backlog.unwrap_or(args.sized(100, 5)),
            slow: Duration::from_millis(args.slow_ms.unwrap_or(args.sized(9_500, 1_000))),
            duration: args.duration(40.0),
            token: token_answer::Sizes {
                answer_bytes: args.sized(200_000_000, 16_000_000),
                endpoints: 4,
                messages: 5,
                window: Duration::from_secs(args.sized(10, 3)),
                concurrency,
            },
        }
    }
}

/// What tenant A is in a phase.
#[derive(Debug, Clone, Copy)]
enum Hostile {
    /// Absent: B alone.
    None,
    /// Its endpoints' OAuth2 token URL accepts and never answers.
    HangingToken,
    /// Its endpoints answer correctly after the slow time; `max_share` its ceiling, if set.
    Slow { max_share: Option<f64> },
}

/// One phase: a key for figures, labels for people, and A in it.
#[derive(Debug, Clone, Copy)]
struct Spec {
    key: &'static str,
    /// Where B is: `alone`, `beside …`.
    label: &'static str,
    /// What A is.
    a_label: &'static str,
    hostile: Hostile,
}

impl Spec {
    /// Is tenant A in the phase?
    fn with_a(&self) -> bool {
        !matches!(self.hostile, Hostile::None)
    }
}

const PHASES: [Spec; 4] = [
    Spec {
        key: "alone",
        label: "alone",
        a_label: "",
        hostile: Hostile::None,
    },
    Spec {
        key: "token",
        label: "beside A's hanging token URL",
        a_label: "A, token URL never answers",
        hostile: Hostile::HangingToken,
    },
    Spec {
        key: "slow",
        label: "beside A's slow endpoints",
        a_label: "A, slow endpoints",
        hostile: Hostile::Slow { max_share: None },
    },
    Spec {
        key: "ceiling",
        label: "beside A's slow endpoints at max_share 0.5",
        a_label: "A, slow endpoints, max_share 0.5",
        hostile: Hostile::Slow {
            max_share: Some(MAX_SHARE),
        },
    },
];

/// Run every phase and report.
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let sizes = Sizes::of(args);
    let mut phases = Vec::with_capacity(PHASES.len());
    for spec in PHASES {
        phases.push(run::run(args, sizes, spec).await?);
    }
    let token = token_answer::run(args, sizes.token).await?;

    let mut report = Report::new("hostile", args.describe());
    report.param("duration_s", sizes.duration.as_secs_f64());
    report.param("concurrency", sizes.concurrency);
    report.param("b_messages_per_s", sizes.b_rate);
    report.param("a_endpoints", sizes.a_endpoints);
    report.param("a_messages", sizes.a_messages);
    report.param("a_slow_ms", sizes.slow.as_millis() as u64);
    report.param("a_max_share", MAX_SHARE);
    report.param("token_answer_bytes", sizes.token.answer_bytes);
    report.param("dispatchers", args.dispatchers.unwrap_or(0));
    figures::phases(&mut report, sizes, &phases);
    figures::token_answer(&mut report, sizes.token, &token);
    report.note(
        "latency: B's receiver's arrival − the time its producer stamped into the payload just \
         before the POST (accepted → received); in phases of 10 s or more the first 2 s are \
         skipped as warm-up. A's backlog is accepted before B's load starts.",
    );
    report.note(
        "A's in-flight figures are its dispatcher's sluice_tenant_in_flight (deliveries in \
         flight or waiting at a lane) sampled once a second, so a peak between samples is missed; \
         none on a fleet, whose API process does not dispatch.",
    );
    report.note(format!(
        "the token answer phase runs a sluice serve process of its own (embedded SQLite, the \
         binary beside this one, --concurrency {}): {} endpoints sharing one set of credentials, \
         {} messages each, watched for {} s; the answer is one JSON object whose access_token \
         fills it, sent chunked without Content-Length. Its RSS figures are that process's \
         VmHWM.",
        sizes.token.concurrency,
        sizes.token.endpoints,
        sizes.token.messages,
        sizes.token.window.as_secs()
    ));

    for o in &phases {
        report.series(
            &format!("{}.b_p99_ms", o.spec.key),
            o.timeline.quantile_series(B, 0.99),
        );
        if o.spec.with_a() {
            report.series(
                &format!("{}.a_in_flight", o.spec.key),
                o.a_in_flight.clone(),
            );
        }
    }
    let panels = [
        Panel::log(
            "tenant B (5 messages/s, one fast endpoint): accepted → received p99 per second",
            "ms (log)",
            phases
                .iter()
                .map(|o| Line::new(o.spec.label, o.timeline.quantile_series(B, 0.99)))
                .collect(),
        ),
        Panel::linear(
            "tenant A: deliveries in flight or waiting at a lane",
            "deliveries",
            phases
                .iter()
                .filter(|o| o.spec.with_a())
                .map(|o| Line::new(o.spec.a_label, o.a_in_flight.clone()))
                .collect(),
        ),
    ];
    save_chart(
        args,
        &mut report,
        &format!(
            "hostile: a healthy tenant beside a hostile one, pool of {}",
            sizes.concurrency
        ),
        &panels,
    )?;
    Ok(report)
}
