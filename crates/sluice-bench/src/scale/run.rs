//! `scale`'s run: one endpoint count on a fresh sluice, its endpoints created (and idle ones
//! registered beside them), the burst sent.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Context;
use futures_util::StreamExt;
use tokio::time::Instant;

use super::burst::{BurstPlan, burst};
use super::{REGISTER_BATCH, Row, SETUP_CONCURRENCY};
use crate::BenchArgs;
use crate::harness::{Sluice, Tuning};
use crate::receiver::{self, Mode};
use crate::timeline::Timeline;

/// One endpoint count on a fresh sluice: its endpoints (and idle ones), the burst.
pub(super) async fn one(
    args: &BenchArgs,
    endpoints: usize,
    fan_out: usize,
    messages: u64,
    producers: usize,
) -> anyhow::Result<Row> {
    let timeline = Arc::new(Timeline::new(&["deliveries"]));
    let sluice = Sluice::start(args, &Tuning::default()).await?;
    let token = sluice.tenant("scale").await?;
    let rx = receiver::start(Mode::Fast, timeline.clone(), 0).await?;
    let types = endpoints.div_ceil(fan_out);
    let register_s = match args.registered {
        Some(n) if n > 0 => Some(register(&sluice, n).await?),
        _ => None,
    };

    let setup = Instant::now();
    let next = AtomicUsize::new(0);
    let created: Vec<anyhow::Result<()>> = futures_util::stream::iter(0..endpoints)
        .map(|_| async {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let url = format!("{}/{i}", rx.url());
            sluice
                .subscriber(&token, &url, &format!("e.{}", i / fan_out))
                .await
                .map(drop)
        })
        .buffer_unordered(SETUP_CONCURRENCY)
        .collect()
        .await;
    created
        .into_iter()
        .collect::<anyhow::Result<()>>()
        .context("create endpoints")?;
    let setup_s = setup.elapsed().as_secs_f64();

    let burst = burst(
        args,
        &sluice,
        BurstPlan {
            token,
            types,
            fan_out,
            messages,
            producers,
            timeline,
        },
    )
    .await;
    sluice.stop().await;
    drop(rx);
    Ok(Row {
        endpoints,
        setup_s,
        register_s,
        burst: burst?,
    })
}

/// Register `n` endpoints of another tenant straight into the store, subscribed to an event type
/// nobody sends; returns the seconds it took.
pub(super) async fn register(sluice: &Sluice, n: u64) -> anyhow::Result<f64> {
    use sluice::model::{Endpoint, Tenant};
    let store = sluice
        .store()
        .context("--registered needs the sluice in this process (not --target)")?;
    let started = Instant::now();
    let now = sluice::clock::now_ms();
    let tenant = Tenant {
        id: sluice::ids::new_id("ten"),
        name: "registered".into(),
        token_hash: sluice::ids::hash_token(&sluice::ids::new_token("sk")),
        created_at_ms: now,
        share: Default::default(),
    };
    store.create_tenant(&tenant).await?;
    let secret = sluice::signing::Secret::generate().to_string();
    let mut done = 0;
    while done < n {
        let batch: Vec<Endpoint> = (done..n.min(done + REGISTER_BATCH))
            .map(|i| Endpoint {
                event_types: vec!["never.sent".into()],
                ..Endpoint::new(
                    sluice::ids::new_id("ep"),
                    tenant.id.clone(),
                    format!("https://idle-{i}.example.com/hook"),
                    secret.clone(),
                    now,
                )
            })
            .collect();
        store.create_endpoints(&batch).await?;
        done += batch.len() as u64;
    }
    Ok(started.elapsed().as_secs_f64())
}
