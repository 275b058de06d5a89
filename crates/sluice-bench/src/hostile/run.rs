//! One phase of `hostile` on a fresh sluice: tenant B's load beside tenant A as the phase
//! has it, sampled once a second; then A's attempts read back and every receiver's repeats
//! counted.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;
use tokio::time::Instant;

use super::verdicts::attempt_kind;
use super::{A, B, DRAIN, GROUPS, Hostile, SETUP_CONCURRENCY, Sizes, Spec};
use crate::harness::Tuning;
use crate::load::Api;
use crate::receiver::{self, Mode, WebhookIds};
use crate::stage::Stage;
use crate::timeline::{Timeline, ms};
use crate::{BenchArgs, watch};

/// What a phase recorded.
pub(super) struct Outcome {
    pub(super) spec: Spec,
    pub(super) timeline: Arc<Timeline>,
    warmup_s: usize,
    /// B's messages accepted, and the distinct ones its receiver got.
    pub(super) b_accepted: u64,
    pub(super) b_made: u64,
    /// Requests beyond the first of a `webhook-id` at any receiver of the phase.
    pub(super) duplicates: u64,
    /// Requests A's receivers got.
    pub(super) a_received: u64,
    /// A's attempts by kind ([`attempt_kind`]).
    pub(super) a_attempts: BTreeMap<String, u64>,
    /// How long each of A's attempts took, ms.
    pub(super) a_attempt_ms: Vec<f64>,
    /// Requests A's token URL got (connections: it never answers one).
    pub(super) token_requests: Option<u64>,
    /// A's deliveries in flight or waiting at a lane, once a second (its dispatcher's
    /// `sluice_tenant_in_flight`).
    pub(super) a_in_flight: Vec<(f64, f64)>,
    /// The pool's attempts in flight, once a second.
    pub(super) in_flight: Vec<(f64, f64)>,
}

impl Outcome {
    /// B's latency quantile `q` after warm-up, ms.
    pub(super) fn b_ms(&self, q: f64) -> Option<f64> {
        self.timeline
            .latency_from(B, self.warmup_s)
            .quantile(q)
            .map(ms)
    }
}

/// Run one phase on a fresh sluice.
pub(super) async fn run(args: &BenchArgs, sizes: Sizes, spec: Spec) -> anyhow::Result<Outcome> {
    let tuning = Tuning {
        concurrency: Some(sizes.concurrency),
        ..Tuning::default()
    };
    let stage = Stage::start(args, &tuning).await?;
    let outcome = run_on(args, sizes, spec, &stage).await;
    stage.stop().await;
    outcome
}

async fn run_on(
    args: &BenchArgs,
    sizes: Sizes,
    spec: Spec,
    stage: &Stage,
) -> anyhow::Result<Outcome> {
    let timeline = Arc::new(Timeline::new(&GROUPS));
    let sluice = &stage.sluice;
    let api = Api {
        http: sluice.http.clone(),
        url: sluice.messages_url().into(),
        timeline: timeline.clone(),
        event_types: None,
    };
    let b_ids = Arc::new(WebhookIds::default());
    let b_receiver =
        receiver::start_counted(Mode::Fast, timeline.clone(), B, b_ids.clone()).await?;
    let (b_token, _) = sluice.customer("healthy", &b_receiver.url(), None).await?;

    // Tenant A: its token URL, receivers (one per endpoint, so a repeat is a repeat of one
    // delivery), endpoints, ceiling and backlog.
    let token_url = match spec.hostile {
        Hostile::HangingToken => Some(receiver::start(Mode::Blackhole, timeline.clone(), A).await?),
        _ => None,
    };
    let mut a_receivers = Vec::new();
    let mut a_ids = Vec::new();
    let mut a_endpoints = Vec::new();
    let mut a_tenant = None;
    if spec.with_a() {
        let (id, token) = sluice.tenant_with_id("hostile").await?;
        let mode = match spec.hostile {
            Hostile::Slow { .. } => Mode::Slow(sizes.slow),
            _ => Mode::Fast,
        };
        for i in 0..sizes.a_endpoints {
            let ids = Arc::new(WebhookIds::default());
            let r = receiver::start_counted(mode, timeline.clone(), A, ids.clone()).await?;
            let mut body = json!({ "url": format!("{}/{i}", r.url()) });
            if let Some(t) = &token_url {
                body["oauth2"] = json!({
                    "token_url": t.url(),
                    "client_id": "hostile",
                    "client_secret": "hostile-secret",
                });
            }
            a_endpoints.push(sluice.endpoint_with(&token, body).await?);
            a_receivers.push(r);
            a_ids.push(ids);
        }
        if let Hostile::Slow {
            max_share: Some(share),
        } = spec.hostile
        {
            sluice.tenant_max_share(&id, share).await?;
        }
        let accepted = futures_util::stream::iter(0..sizes.a_messages)
            .map(|seq| api.send(&token, A, seq))
            .buffer_unordered(SETUP_CONCURRENCY)
            .filter(|ok| std::future::ready(*ok))
            .count()
            .await;
        anyhow::ensure!(
            accepted as u64 == sizes.a_messages,
            "only {accepted} of {} of A's backlog messages accepted",
            sizes.a_messages
        );
        a_tenant = Some((id, token));
    }

    let seconds = sizes.duration.as_secs_f64();
    let pb = watch::progress(args.json, spec.key, seconds);
    timeline.restart();
    let until = Instant::now() + sizes.duration;
    let producer = api.open_loop(b_token, B, sizes.b_rate, until);
    let (mut a_in_flight, mut in_flight) = (Vec::new(), Vec::new());
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(1).min(until - Instant::now())).await;
        let t = timeline.elapsed();
        let scrape = tokio::time::timeout(Duration::from_secs(2), sluice.scrape()).await;
        if let Ok(Ok(scrape)) = scrape
            && let Some(v) = scrape.sum("sluice_in_flight")
        {
            in_flight.push((t, v));
            if let Some((id, _)) = &a_tenant {
                let by_tenant = scrape.by_label("sluice_tenant_in_flight", "tenant");
                a_in_flight.push((t, by_tenant.get(id).copied().unwrap_or(0.0)));
            }
        }
        pb.set_position(t.floor() as u64);
    }
    let _ = tokio::time::timeout(Duration::from_secs(30), producer).await;
    pb.finish_and_clear();
    // B's deliveries already accepted may still arrive.
    let b_accepted = timeline.accepted(B);
    let drain = Instant::now() + DRAIN.min(sizes.duration * 3);
    while Instant::now() < drain && b_ids.distinct() < b_accepted {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (mut a_attempts, mut a_attempt_ms) = (BTreeMap::new(), Vec::new());
    if let Some((_, token)) = &a_tenant {
        for id in &a_endpoints {
            for a in sluice.endpoint_attempts(token, id).await? {
                *a_attempts.entry(attempt_kind(&a)).or_default() += 1;
                a_attempt_ms.extend(a["duration_ms"].as_f64());
            }
        }
    }
    let duplicates = b_ids.duplicates() + a_ids.iter().map(|i| i.duplicates()).sum::<u64>();
    Ok(Outcome {
        spec,
        timeline,
        warmup_s: if seconds >= 10.0 { 2 } else { 0 },
        b_accepted,
        b_made: b_ids.distinct(),
        duplicates,
        a_received: a_ids.iter().map(|i| i.requests()).sum(),
        a_attempts,
        a_attempt_ms,
        token_requests: token_url.as_ref().map(|t| t.record.requests()),
        a_in_flight,
        in_flight,
    })
}
