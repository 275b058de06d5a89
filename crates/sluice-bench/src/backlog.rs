//! A backlog already in the store when a phase starts: one tenant's endpoints, each with its
//! share of ready deliveries, written straight into the store (not through the API: a million
//! POSTs would take longer than draining them), then enabled at once, so the drain starts from
//! the whole backlog.

use anyhow::Context;
use futures_util::StreamExt;
use tokio::time::Instant;

use super::timeline::{Timeline, now_us};
use sluice::model::{Endpoint, NewMessage, Tenant};
use sluice::store::SharedStore;

/// Endpoints and messages written per transaction.
const BATCH: usize = 2_000;
/// Transactions in flight at once.
const CONCURRENCY: usize = 4;

/// What was written.
pub(crate) struct Backlog {
    /// The first endpoint (watched).
    pub first_endpoint: String,
    /// Seconds it took to write and enable it.
    pub setup_s: f64,
}

/// Write `deliveries` messages, each for one of `endpoints` new endpoints of a new tenant (all
/// delivering to `url`/i), counted as accepted for `group`. The endpoints are written disabled,
/// so nothing is claimed while the backlog is written, and enabled together at the end.
pub(crate) async fn fill(
    store: &SharedStore,
    url: &str,
    deliveries: u64,
    endpoints: usize,
    timeline: &Timeline,
    group: usize,
) -> anyhow::Result<Backlog> {
    let started = Instant::now();
    let now = sluice::clock::now_ms();
    let tenant = Tenant {
        id: sluice::ids::new_id("ten"),
        name: "backlog".into(),
        token_hash: sluice::ids::hash_token(&sluice::ids::new_token("sk")),
        created_at_ms: now,
        share: Default::default(),
    };
    store.create_tenant(&tenant).await?;
    let secret = sluice::signing::Secret::generate().to_string();
    let ids: Vec<String> = (0..endpoints.max(1))
        .map(|_| sluice::ids::new_id("ep"))
        .collect();
    for (chunk_no, chunk) in ids.chunks(BATCH).enumerate() {
        let batch: Vec<Endpoint> = chunk
            .iter()
            .enumerate()
            .map(|(i, id)| Endpoint {
                enabled: false,
                ..Endpoint::new(
                    id.clone(),
                    tenant.id.clone(),
                    format!("{url}/{}", chunk_no * BATCH + i),
                    secret.clone(),
                    now,
                )
            })
            .collect();
        store.create_endpoints(&batch).await?;
    }
    let written: Vec<anyhow::Result<()>> =
        futures_util::stream::iter(0..deliveries.div_ceil(BATCH as u64))
            .map(|b| {
                let (store, ids, tenant) = (store.clone(), &ids, &tenant.id);
                async move {
                    let from = b * BATCH as u64;
                    let to = (from + BATCH as u64).min(deliveries);
                    let messages: Vec<NewMessage> = (from..to)
                        .map(|seq| NewMessage {
                            id: sluice::ids::new_id("msg"),
                            tenant_id: tenant.clone(),
                            event_type: "bench.backlog".into(),
                            payload: format!(r#"{{"sent_at_us":{},"seq":{seq}}}"#, now_us()),
                            idempotency_key: None,
                            only_endpoint: Some(ids[(seq % ids.len() as u64) as usize].clone()),
                            traceparent: None,
                            tracestate: None,
                        })
                        .collect();
                    store
                        .enqueue(&messages, sluice::clock::now_ms())
                        .await
                        .context("write the backlog")?;
                    timeline.stored(group, to - from);
                    Ok(())
                }
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
    written.into_iter().collect::<anyhow::Result<()>>()?;
    let enabled: Vec<anyhow::Result<()>> = futures_util::stream::iter(ids.iter())
        .map(|id| async move {
            store
                .set_endpoint_enabled(id, true, None, sluice::clock::now_ms())
                .await
                .context("enable a backlog endpoint")
        })
        .buffer_unordered(32)
        .collect()
        .await;
    enabled.into_iter().collect::<anyhow::Result<()>>()?;
    Ok(Backlog {
        first_endpoint: ids[0].clone(),
        setup_s: started.elapsed().as_secs_f64(),
    })
}

/// The drain of a backlog, from the deliveries per second of its group: the rate over the first
/// and the last `window` whole seconds of the drain (from second `from` to the last second with
/// a delivery, that second left out as partial), and those windows' bounds.
pub(crate) fn drain_windows(
    per_second: &[(f64, f64)],
    from: usize,
    window: usize,
) -> Option<((usize, usize), (usize, usize))> {
    let last = per_second
        .iter()
        .rev()
        .find(|(_, n)| *n > 0.0)
        .map(|(t, _)| *t as usize)?;
    let end = last.max(from + 1);
    let first = (from, (from + window).min(end));
    let final_ = (end.saturating_sub(window).max(from), end);
    (first.1 > first.0 && final_.1 > final_.0).then_some((first, final_))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cover_the_start_and_the_end_of_the_drain() {
        let series: Vec<(f64, f64)> = (0..40)
            .map(|s| (s as f64, if s < 30 { 5.0 } else { 0.0 }))
            .collect();
        assert_eq!(drain_windows(&series, 2, 10), Some(((2, 12), (19, 29))));
        let empty: Vec<(f64, f64)> = vec![(0.0, 0.0)];
        assert_eq!(drain_windows(&empty, 0, 10), None);
    }
}
