//! One phase driven on its stage: receivers, customers, the load and the sampling; then the FIFO
//! endpoints' order read back from the store.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sluice_testkit::receiver::Receiver;
use tokio::time::Instant;

use super::{BAD, Bad, FifoOrder, HEALTHY, Phase, PhaseSpec, Throttling};
use crate::BenchArgs;
use crate::backlog;
use crate::cloud_sink::CloudSink;
use crate::destinations::consumers;
use crate::load::Api;
use crate::receiver::{self, Mode};
use crate::stage::Stage;
use crate::store_cpu::StoreCpu;
use crate::sys;
use crate::timeline::Timeline;
use crate::watch::{self, Watch};

/// Drive one phase on `stage`: the receivers, the customers and their load, sampled.
pub(super) async fn run_on(
    args: &BenchArgs,
    spec: &PhaseSpec,
    stage: &Stage,
) -> anyhow::Result<Phase> {
    let timeline = Arc::new(Timeline::new(&["healthy", spec.bad_name]));
    let sluice = &stage.sluice;
    let mut receivers = Vec::with_capacity(spec.healthy);
    let mut healthy = Vec::with_capacity(spec.healthy);
    for i in 0..spec.healthy {
        let r = receiver::start(Mode::Fast, timeline.clone(), HEALTHY).await?;
        healthy.push(
            sluice
                .customer(&format!("healthy-{i}"), &r.url(), None)
                .await?,
        );
        receivers.push(r);
    }
    let bad_receiver = match spec.bad {
        Bad::None => None,
        Bad::Slow { delay, .. } => Some(Mode::Slow(delay)),
        Bad::Blackhole { .. } => Some(Mode::Blackhole),
        Bad::Capped {
            capacity,
            service,
            throttling: Throttling::TooManyRequests { retry_after_s },
            ..
        } => Some(Mode::Capped {
            capacity,
            service,
            retry_after_s,
        }),
        Bad::Flood { service, .. } => Some(Mode::Slow(service)),
        Bad::Backlog { .. } | Bad::RateLimited { .. } | Bad::Fifo { .. } => Some(Mode::Fast),
        Bad::BlockedBroker { .. } => None,
        Bad::Capped {
            throttling: Throttling::Service(_),
            ..
        } => None,
    };
    let bad_receiver: Option<Receiver> = match bad_receiver {
        Some(mode) => Some(receiver::start(mode, timeline.clone(), BAD).await?),
        None => None,
    };
    // A throttling cloud destination: the service stood in for by the sink.
    let bad_sink = match spec.bad {
        Bad::Capped {
            capacity,
            service,
            throttling: Throttling::Service(_),
            ..
        } => Some(CloudSink::capped(timeline.clone(), BAD, capacity, service).await?),
        _ => None,
    };
    let lane = match spec.bad {
        Bad::Capped { lane, .. } => Some(lane),
        _ => None,
    };
    let mut backlog_setup_s = None;
    // A blocked-broker phase: the queue's consumer, and the alarm while the load runs.
    let mut broker: Option<consumers::Consumer> = None;
    // FIFO phases: the tenant's id, and each further endpoint with its own receiver.
    let mut fifo: Option<(String, Vec<String>)> = None;
    let mut fifo_receivers: Vec<Receiver> = Vec::new();
    let bad = match (&bad_receiver, spec.bad) {
        (
            Some(r),
            Bad::Fifo {
                endpoints, ordered, ..
            },
        ) => {
            let (tenant, token) = sluice.tenant_with_id(spec.bad_name).await?;
            let mut ids = Vec::with_capacity(endpoints);
            for i in 0..endpoints.max(1) {
                let url = if i == 0 {
                    r.url()
                } else {
                    let extra = receiver::start(Mode::Fast, timeline.clone(), BAD).await?;
                    let url = extra.url();
                    fifo_receivers.push(extra);
                    url
                };
                let ordering = if ordered { "fifo" } else { "unordered" };
                let body = serde_json::json!({ "url": url, "ordering": ordering });
                ids.push(sluice.endpoint_with(&token, body).await?);
            }
            let first = ids[0].clone();
            fifo = Some((tenant, ids));
            Some((token, first))
        }
        (
            Some(r),
            Bad::Backlog {
                deliveries,
                endpoints,
            },
        ) => {
            let store = sluice
                .store()
                .context("a backlog needs the sluice in this process (not --target)")?;
            let b = backlog::fill(&store, &r.url(), deliveries, endpoints, &timeline, BAD).await?;
            backlog_setup_s = Some(b.setup_s);
            Some((String::new(), b.first_endpoint))
        }
        (
            Some(r),
            Bad::RateLimited {
                per_second, burst, ..
            },
        ) => {
            let token = sluice.tenant(spec.bad_name).await?;
            let body = serde_json::json!({
                "url": r.url(),
                "rate_limit": { "per_second": per_second, "burst": burst },
            });
            let id = sluice.endpoint_with(&token, body).await?;
            Some((token, id))
        }
        (Some(r), _) => Some(sluice.customer(spec.bad_name, &r.url(), lane).await?),
        (
            None,
            Bad::Capped {
                lane,
                throttling: Throttling::Service(service),
                ..
            },
        ) => {
            let sink = bad_sink.as_ref().context("the cloud sink")?;
            let token = sluice.tenant(spec.bad_name).await?;
            let body = serde_json::json!({
                "destination": sink.destination(service),
                "lane_size": lane,
            });
            let id = sluice.endpoint_with(&token, body).await?;
            Some((token, id))
        }
        (None, Bad::BlockedBroker { .. }) => {
            let consumer = consumers::rabbitmq(timeline.clone(), BAD).await?;
            let token = sluice.tenant(spec.bad_name).await?;
            let body = serde_json::json!({ "destination": consumer.destination });
            let id = sluice.endpoint_with(&token, body).await?;
            broker = Some(consumer);
            Some((token, id))
        }
        (None, _) => None,
    };

    let mut watched = vec![("healthy".to_owned(), healthy[0].1.clone())];
    if let Some((_, id)) = &bad {
        watched.push(("bad".to_owned(), id.clone()));
    }
    let seconds = spec.duration.as_secs_f64();
    let pb = watch::progress(args.json, spec.label, seconds);
    let store_cpu = StoreCpu::locate(stage.database_url(), sluice.embedded()).await;
    let postgres = store_cpu.is_postgres();
    let mut watch =
        Watch::new(sluice.probe(), watched, timeline.clone(), pb).with_store_cpu(store_cpu.clone());
    if matches!(spec.bad, Bad::Backlog { .. } | Bad::Fifo { .. }) {
        watch = watch.with_claims();
    }
    let api = Api {
        http: sluice.http.clone(),
        url: sluice.messages_url().into(),
        timeline: timeline.clone(),
        event_types: None,
    };

    let alarm = match spec.bad {
        Bad::BlockedBroker { .. } => Some(consumers::MemoryAlarm::raise()?),
        _ => None,
    };
    timeline.restart();
    let store_cpu0 = store_cpu.seconds();
    let until = Instant::now() + spec.duration;
    let mut producers: Vec<_> = healthy
        .iter()
        .map(|(token, _)| api.open_loop(token.clone(), HEALTHY, spec.healthy_rate, until))
        .collect();
    if let Some((token, _)) = &bad {
        producers.push(match spec.bad {
            Bad::Slow { rate, .. }
            | Bad::Blackhole { rate }
            | Bad::Capped { rate, .. }
            | Bad::RateLimited { rate, .. }
            | Bad::Fifo { rate, .. }
            | Bad::BlockedBroker { rate } => api.open_loop(token.clone(), BAD, rate, until),
            Bad::Flood {
                backlog, producers, ..
            } => api.closed_loop(vec![token.clone()], BAD, producers, until, Some(backlog)),
            // Already in the store.
            Bad::Backlog { .. } => tokio::spawn(async {}),
            Bad::None => unreachable!("no bad customer has no token"),
        });
    }
    if let Bad::Capped {
        drop_to: Some((after, capacity)),
        ..
    } = spec.bad
    {
        watch
            .until((until - spec.duration + after).min(until))
            .await;
        if let Some(r) = &bad_receiver {
            r.set_capacity(capacity);
        }
        if let Some(s) = &bad_sink {
            s.set_capacity(capacity);
        }
    }
    watch.until(until).await;
    let bad_delivered_during_load = timeline.delivered_total(BAD);
    drop(alarm);
    let store_cpu_s = store_cpu.seconds().zip(store_cpu0).map(|(b, a)| b - a);
    for p in producers {
        let _ = tokio::time::timeout(Duration::from_secs(30), p).await;
    }
    // Let the healthy messages already accepted arrive, so late ones are not left out.
    let drain = Instant::now() + spec.duration.min(Duration::from_secs(10));
    watch
        .until_done(drain, |t| t.delivered_total(HEALTHY) >= t.accepted(HEALTHY))
        .await;
    let claim_samples = std::mem::take(&mut watch.claim_samples);
    let series = watch.finish();
    let healthy_undelivered = timeline
        .accepted(HEALTHY)
        .saturating_sub(timeline.delivered_total(HEALTHY));
    let bad_peak_concurrency = bad_receiver
        .iter()
        .chain(&fifo_receivers)
        .map(|r| r.record.peak_concurrency())
        .chain(bad_sink.as_ref().map(CloudSink::peak_concurrency))
        .max();
    let fifo_order = match (&fifo, spec.bad) {
        (Some((tenant, ids)), Bad::Fifo { ordered: true, .. }) => {
            Some(fifo_order(stage, tenant, ids).await?)
        }
        _ => None,
    };
    drop(fifo_receivers);
    drop(receivers);
    drop(bad_receiver);
    drop(bad_sink);
    if let Some(c) = broker {
        c.finish().await;
    }
    Ok(Phase {
        timeline,
        series,
        duration_s: seconds,
        warmup_s: if seconds >= 10.0 { 2 } else { 0 },
        healthy_undelivered,
        peak_rss_mib: sys::peak_rss_mib(),
        bad_peak_concurrency,
        store_cpu_s,
        postgres,
        claim_samples,
        backlog_setup_s,
        fifo_order,
        bad_delivered_during_load,
    })
}

/// Read the FIFO endpoints' attempts back from the store (this process's, or the fleet's
/// PostgreSQL) and count those out of order: started before the attempt ahead had ended, or for
/// a delivery accepted after one attempted later.
pub(super) async fn fifo_order(
    stage: &Stage,
    tenant: &str,
    endpoints: &[String],
) -> anyhow::Result<FifoOrder> {
    let store: sluice::store::SharedStore = match (stage.sluice.store(), stage.database_url()) {
        (Some(store), _) => store,
        (None, Some(url)) => std::sync::Arc::new(
            sluice::store::postgres::PostgresStore::connect(url)
                .await
                .context("the fleet's database")?,
        ),
        (None, None) => anyhow::bail!("no store to read the FIFO endpoints' attempts from"),
    };
    let mut out = FifoOrder::default();
    for id in endpoints {
        let mut attempts = Vec::new();
        let mut before = None;
        loop {
            let page = store
                .endpoint_attempts(tenant, id, 0, before, 10_000)
                .await
                .context("reading attempts")?;
            let Some(last) = page.last() else { break };
            before = Some(last.id);
            attempts.extend(page);
        }
        attempts.sort_by_key(|a| (a.started_at_ms, a.id));
        out.attempts += attempts.len() as u64;
        for pair in attempts.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            let overlapped = b.started_at_ms < a.started_at_ms + i64::from(a.duration_ms);
            if b.delivery_id < a.delivery_id || (overlapped && b.delivery_id != a.delivery_id) {
                out.violations += 1;
            }
        }
    }
    Ok(out)
}
