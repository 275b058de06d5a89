//! The fleet's baseline: the same customers and load on one `sluice serve` process (API and
//! dispatcher), for as long as the fleet's steady phase, on a fresh database of its own.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::run::{Layout, Started, start};
use super::verdicts::steady_window;
use super::{HEALTHY, Plan, Sizes};
use crate::BenchArgs;
use crate::harness::FreshDatabase;
use crate::producer::{Acks, Customer, Posting, produce};
use crate::timeline::ms;
use crate::watch;

/// The healthy endpoints' figures in one `sluice serve` process under the fleet's steady load.
pub(super) struct OneProcess {
    pub(super) p50_ms: Option<f64>,
    pub(super) p99_ms: Option<f64>,
    pub(super) per_s: Option<f64>,
}

/// The baseline: the same customers and load, for as long as the fleet's steady phase, on one
/// `sluice serve` process (API and dispatcher) on a fresh database beside the fleet's.
pub(super) async fn one_process(
    args: &BenchArgs,
    sizes: Sizes,
    plan: Plan,
    binary: &Path,
    server: &str,
    log_dir: &Path,
) -> anyhow::Result<OneProcess> {
    let db = FreshDatabase::create(server).await?;
    let measured = async {
        let layout = Layout::OneProcess;
        let started = start(args, sizes, layout, binary.to_owned(), &db.url, log_dir).await?;
        let timeline = started.timeline.clone();
        let pb = watch::progress(args.json, "fleet: one process", plan.kill_s);
        let acks = Arc::new(Acks::default());
        timeline.restart();
        let until = Instant::now() + Duration::from_secs_f64(plan.kill_s);
        let url: Arc<str> = started.sluice.messages_url().into();
        let producers: Vec<_> = started
            .customers
            .iter()
            .map(|(token, c, group, rate)| {
                let (http, url, timeline) = (started.http.clone(), url.clone(), timeline.clone());
                let who = Customer {
                    http,
                    url,
                    token: token.as_str().into(),
                    customer: *c,
                    group: *group,
                };
                produce(who, *rate, until, Posting::Once, timeline, acks.clone())
            })
            .collect();
        for p in producers {
            let _ = p.await;
        }
        pb.finish_and_clear();
        // The last second's deliveries land before the window is read.
        tokio::time::sleep(Duration::from_millis(sizes.slow_ms + 1000)).await;
        let (from, to) = steady_window(plan);
        let h = timeline.latency_between(HEALTHY, from, to);
        let span = (to - from) as f64;
        let delivered = timeline.delivered_between(HEALTHY, from, to) as f64;
        let Started {
            mut redis,
            mut api,
            sluice,
            ..
        } = started;
        if api.sigterm().await.is_ok() {
            let _ = tokio::time::timeout(Duration::from_secs(30), api.child.wait()).await;
        }
        redis.stop();
        sluice.stop().await;
        anyhow::Ok(OneProcess {
            p50_ms: h.quantile(0.5).map(ms),
            p99_ms: h.quantile(0.99).map(ms),
            per_s: (span > 0.0).then(|| delivered / span),
        })
    }
    .await;
    db.drop_it().await;
    measured
}
