//! `tenants`' run: one phase on a fresh sluice (or fleet), its tenants created and loaded.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures_util::{StreamExt, TryStreamExt};
use sluice::plan::prom::HistogramSnapshot;
use tokio::time::Instant;

use super::verdicts::Outcome;
use super::{BUSY, Cast, DRAIN, GROUPS, QUIET, SETUP_CONCURRENCY, Sizes, TRICKLE, WEIGHTED};
use crate::BenchArgs;
use crate::harness::{Sluice, Tuning};
use crate::load::Api;
use crate::receiver::{self, Mode};
use crate::stage::Stage;
use crate::timeline::Timeline;
use crate::watch;

/// Run one phase on a fresh sluice.
pub(super) async fn phase(
    args: &BenchArgs,
    sizes: Sizes,
    label: &'static str,
    cast: Cast,
) -> anyhow::Result<Outcome> {
    let timeline = Arc::new(Timeline::new(&GROUPS));
    let stage = Stage::start(args, &Tuning::default()).await?;
    let sluice = &stage.sluice;
    let api = Api {
        http: sluice.http.clone(),
        url: sluice.messages_url().into(),
        timeline: timeline.clone(),
        event_types: None,
    };
    let mut receivers = Vec::new();
    let mut producers: Vec<(String, usize, f64)> = Vec::new();
    let mut quiet_fan_out = 0;
    if cast.busy {
        let r = receiver::start(Mode::Slow(sizes.busy_service), timeline.clone(), BUSY).await?;
        let tenant = Tenant::create(sluice, "busy", &r.url(), sizes.busy_endpoints, None).await?;
        tenant.fill(&api, BUSY, sizes.busy_messages).await?;
        receivers.push(r);
    }
    if cast.weighted {
        // All three tenants first, then their backlogs written at once: none starts ahead.
        let mut fills = Vec::new();
        for &(group, weight) in &WEIGHTED {
            let mode = Mode::Slow(sizes.weighted_service);
            let r = receiver::start(mode, timeline.clone(), group).await?;
            let name = format!("weight-{weight}");
            let endpoints = sizes.weighted_endpoints;
            let tenant = Tenant::create(sluice, &name, &r.url(), endpoints, Some(16)).await?;
            sluice.tenant_weight(&tenant.id, weight).await?;
            // Backlogs in proportion to the weights, so none runs dry while the others wait.
            fills.push((tenant, group, sizes.weighted_messages * u64::from(weight)));
            receivers.push(r);
        }
        futures_util::future::try_join_all(
            fills
                .iter()
                .map(|(tenant, group, messages)| tenant.fill(&api, *group, *messages)),
        )
        .await?;
    }
    if cast.quiet {
        let r = receiver::start(Mode::Fast, timeline.clone(), QUIET).await?;
        let tenant = Tenant::create(sluice, "quiet", &r.url(), sizes.quiet_endpoints, None).await?;
        quiet_fan_out = sizes.quiet_endpoints as u64;
        producers.push((tenant.token, QUIET, sizes.quiet_rate));
        receivers.push(r);
    }
    if cast.trickle {
        let r = receiver::start(Mode::Fast, timeline.clone(), TRICKLE).await?;
        let tenant = Tenant::create(sluice, "trickle", &r.url(), 1, None).await?;
        producers.push((tenant.token, TRICKLE, 1.0));
        receivers.push(r);
    }

    let seconds = sizes.duration.as_secs_f64();
    let pb = watch::progress(args.json, label, seconds);
    timeline.restart();
    let claims_before = claims(sluice).await;
    let until = Instant::now() + sizes.duration;
    let load: Vec<_> = producers
        .into_iter()
        .map(|(token, group, rate)| api.open_loop(token, group, rate, until))
        .collect();
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(1).min(until - Instant::now())).await;
        pb.set_position(timeline.elapsed().floor() as u64);
    }
    for p in load {
        let _ = tokio::time::timeout(Duration::from_secs(30), p).await;
    }
    pb.finish_and_clear();
    let claims = match (claims_before, self::claims(sluice).await) {
        (Some(before), Some(after)) => Some(after.delta(&before)),
        _ => None,
    };
    // The quiet and trickle deliveries already accepted may still arrive.
    let quiet_expected = timeline.accepted(QUIET) * quiet_fan_out;
    let trickle_expected = timeline.accepted(TRICKLE);
    let drain = Instant::now() + DRAIN.min(sizes.duration * 3);
    while Instant::now() < drain
        && (timeline.delivered_total(QUIET) < quiet_expected
            || timeline.delivered_total(TRICKLE) < trickle_expected)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stage.stop().await;
    drop(receivers);
    Ok(Outcome {
        timeline,
        duration_s: seconds,
        warmup_s: if seconds >= 10.0 { 2 } else { 0 },
        quiet_expected,
        trickle_expected,
        claims,
    })
}

/// The sluice's claim durations so far, when it claims (not a fleet's API process).
pub(super) async fn claims(sluice: &Sluice) -> Option<HistogramSnapshot> {
    let scrape = sluice.scrape().await.ok()?;
    scrape.histogram("sluice_claim_duration_seconds")
}

/// A tenant of the scenario, its endpoints created.
pub(super) struct Tenant {
    pub(super) id: String,
    pub(super) token: String,
}

impl Tenant {
    /// A tenant with `endpoints` endpoints at `url` (each on a path of its own, with `lane` as
    /// its lane size when given).
    pub(super) async fn create(
        sluice: &Sluice,
        name: &str,
        url: &str,
        endpoints: usize,
        lane: Option<u32>,
    ) -> anyhow::Result<Self> {
        let (id, token) = sluice.tenant_with_id(name).await?;
        futures_util::stream::iter(0..endpoints)
            .map(|i| {
                let (token, url) = (&token, format!("{}/{name}/{i}", url.trim_end_matches('/')));
                async move { sluice.endpoint(token, &url, lane).await }
            })
            .buffer_unordered(SETUP_CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await
            .with_context(|| format!("{name}: endpoints"))?;
        Ok(Self { id, token })
    }

    /// Post `messages` messages (each to all its endpoints) before the load starts.
    pub(super) async fn fill(&self, api: &Api, group: usize, messages: u64) -> anyhow::Result<()> {
        let accepted = futures_util::stream::iter(0..messages)
            .map(|seq| api.send(&self.token, group, seq))
            .buffer_unordered(SETUP_CONCURRENCY)
            .filter(|ok| std::future::ready(*ok))
            .count()
            .await;
        anyhow::ensure!(
            accepted as u64 == messages,
            "only {accepted} of {messages} backlog messages accepted"
        );
        Ok(())
    }
}
