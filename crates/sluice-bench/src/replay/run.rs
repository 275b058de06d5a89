//! `replay`'s run: one sluice, the built-in shape offered at each level in turn after a
//! warm-up, sampled as it goes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::verdicts::{Level, measure};
use super::{GROUPS, HEALTHY, Kind, shape};
use crate::BenchArgs;
use crate::harness::{Sluice, Tuning};
use crate::load::Api;
use crate::receiver::{self, Mode};
use crate::timeline::Timeline;
use crate::watch::{self, Watch};

/// Run the levels one after another on one sluice, after a warm-up at the first level's rate:
/// the pool the auto-sizer found and what the governors learnt carry over, as they would in a
/// deployment whose traffic grows.
pub(super) async fn levels(
    args: &BenchArgs,
    factors: &[f64],
    warmup: Duration,
    duration: Duration,
) -> anyhow::Result<Vec<Level>> {
    let timeline = Arc::new(Timeline::new(&GROUPS));
    let tuning = Tuning {
        auto_concurrency: true,
        ..Tuning::default()
    };
    let sluice = Sluice::start(args, &tuning).await?;
    let shape = shape();
    let (mut receivers, mut customers) = (Vec::new(), Vec::new());
    let mut healthy_tenants = Vec::new();
    // The healthy endpoints are watched by name, for their sheds.
    let mut watched = Vec::new();
    for e in &shape {
        let mode = match e.kind {
            Kind::Answers(d) => Mode::Slow(d),
            Kind::Throttles { capacity, service } => Mode::Capped {
                capacity,
                service,
                retry_after_s: 1,
            },
            Kind::Dead => Mode::Blackhole,
        };
        let rx = receiver::start(mode, timeline.clone(), e.group).await?;
        let (tenant, token) = sluice.tenant_with_id(e.name).await?;
        let endpoint = sluice.endpoint(&token, &rx.url(), None).await?;
        if e.group == HEALTHY {
            healthy_tenants.push(tenant);
            watched.push((e.name.to_owned(), endpoint));
        }
        customers.push((token, e.group, e.rate));
        receivers.push(rx);
    }
    let api = Api {
        http: sluice.http.clone(),
        url: sluice.messages_url().into(),
        timeline: timeline.clone(),
        event_types: None,
    };
    let total = warmup + duration * factors.len() as u32;
    let pb = watch::progress(args.json, "replay", total.as_secs_f64());
    let mut watch = Watch::new(sluice.probe(), watched, timeline.clone(), pb);
    timeline.restart();
    let start = Instant::now();
    // The oldest ready age per tenant, once a second (a store read, as the scale signal does).
    let store = sluice.store();
    let end = start + total;
    let ages = tokio::spawn(async move {
        let mut samples: Vec<(f64, HashMap<String, f64>)> = Vec::new();
        let Some(store) = store else { return samples };
        while Instant::now() < end {
            if let Ok(stats) = store.queue_stats(sluice::clock::now_ms()).await {
                let ages = stats
                    .oldest_ready_age_ms
                    .into_iter()
                    .map(|(t, ms)| (t, ms as f64 / 1000.0))
                    .collect();
                samples.push((start.elapsed().as_secs_f64(), ages));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        samples
    });
    let stages =
        std::iter::once((factors[0], warmup)).chain(factors.iter().map(|f| (*f, duration)));
    for (factor, span) in stages {
        let until = Instant::now() + span;
        let producers: Vec<_> = customers
            .iter()
            .map(|(token, group, rate)| api.open_loop(token.clone(), *group, rate * factor, until))
            .collect();
        watch.until(until).await;
        for p in producers {
            let _ = tokio::time::timeout(Duration::from_secs(30), p).await;
        }
    }
    let series = watch.finish();
    let ages = ages.await.unwrap_or_default();
    sluice.stop().await;
    drop(receivers);

    let mut out = Vec::new();
    for (i, factor) in factors.iter().enumerate() {
        let from = (warmup + duration * i as u32).as_secs_f64();
        let to = from + duration.as_secs_f64();
        out.push(measure(
            &timeline,
            &series,
            &ages,
            &healthy_tenants,
            *factor,
            from,
            to,
        ));
    }
    Ok(out)
}
