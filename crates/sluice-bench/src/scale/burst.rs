//! The standard burst, `scale`'s and `history`'s: closed-loop producers send it to a running
//! sluice, and it is measured until every delivery it asks for has arrived.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::DRAIN_LIMIT;
use crate::harness::Sluice;
use crate::load::Api;
use crate::report::Report;
use crate::store_cpu::StoreCpu;
use crate::timeline::{Timeline, ms};
use crate::{BenchArgs, sys};

/// What one burst measured, from its first POST to its last delivery.
pub(crate) struct Burst {
    pub ingest_per_s: f64,
    pub delivery_per_s: f64,
    pub cpu_ms_per_delivery: Option<f64>,
    pub store_cpu_ms_per_delivery: Option<f64>,
    pub claim_p50_ms: Option<f64>,
    pub claim_p99_ms: Option<f64>,
    pub claims: f64,
    pub e2e_p50_ms: Option<f64>,
    pub e2e_p99_ms: Option<f64>,
    pub rss_start_mib: Option<f64>,
    pub rss_peak_mib: Option<f64>,
    pub undelivered: u64,
    /// How long a `/metrics` scrape took once the burst was delivered: what the gauges that
    /// read the store cost per scrape with this store's endpoints and history.
    pub scrape_ms: f64,
}

impl Burst {
    /// Report the figures every burst has, under `key` and `label`.
    pub(crate) fn figures(
        &self,
        report: &mut Report,
        args: &BenchArgs,
        key: &dyn Fn(&str) -> String,
        label: &dyn Fn(&str) -> String,
    ) {
        let store_cpu = if args.database_url.is_some() {
            "PostgreSQL server CPU per delivery"
        } else {
            "store CPU per delivery (SQLite driver threads)"
        };
        let figures: [(&str, &str, Option<f64>, &'static str); 13] = [
            (
                "ingest_per_s",
                "ingest, messages/s",
                Some(self.ingest_per_s),
                "/s",
            ),
            (
                "delivery_per_s",
                "deliveries/s, first POST to last delivery",
                Some(self.delivery_per_s),
                "/s",
            ),
            (
                "cpu_ms_per_delivery",
                "process CPU per delivery",
                self.cpu_ms_per_delivery,
                "ms",
            ),
            (
                "store_cpu_ms_per_delivery",
                store_cpu,
                self.store_cpu_ms_per_delivery,
                "ms",
            ),
            ("claims", "claims made", Some(self.claims), ""),
            ("claim_p50_ms", "claim p50", self.claim_p50_ms, "ms"),
            ("claim_p99_ms", "claim p99", self.claim_p99_ms, "ms"),
            ("e2e_p50_ms", "enqueue→delivery p50", self.e2e_p50_ms, "ms"),
            ("e2e_p99_ms", "enqueue→delivery p99", self.e2e_p99_ms, "ms"),
            (
                "rss_start_mib",
                "RSS before the burst",
                self.rss_start_mib,
                "MiB",
            ),
            (
                "rss_peak_mib",
                "RSS, highest sample during the burst",
                self.rss_peak_mib,
                "MiB",
            ),
            (
                "undelivered",
                "deliveries missing at the end",
                Some(self.undelivered as f64),
                "",
            ),
            (
                "scrape_ms",
                "a /metrics scrape after the burst",
                Some(self.scrape_ms),
                "ms",
            ),
        ];
        for (k, l, value, unit) in figures {
            report.figure(&key(k), &label(l), value, unit);
        }
    }
}

/// A burst to send: `messages` from `producers` closed-loop producers of the tenant `token`,
/// cycling through event types `e.0` … `e.{types - 1}`, each reaching `fan_out` endpoints on
/// the receiver that times into `timeline`.
pub(crate) struct BurstPlan {
    pub token: String,
    pub types: usize,
    pub fan_out: usize,
    pub messages: u64,
    pub producers: usize,
    pub timeline: Arc<Timeline>,
}

/// Send one burst to a running sluice and measure it until every delivery it asks for has
/// arrived (or [`DRAIN_LIMIT`] has passed).
pub(crate) async fn burst(
    args: &BenchArgs,
    sluice: &Sluice,
    plan: BurstPlan,
) -> anyhow::Result<Burst> {
    let (messages, fan_out, timeline) = (plan.messages, plan.fan_out, plan.timeline);
    let expected = messages * fan_out as u64;
    let api = Api {
        http: sluice.http.clone(),
        url: sluice.messages_url().into(),
        timeline: timeline.clone(),
        event_types: Some(plan.types),
    };
    let claims_before = sluice.scrape().await?;
    let store_cpu = StoreCpu::locate(args.database_url.as_deref(), sluice.embedded()).await;
    let rss_start_mib = sys::rss_mib();
    let cpu0 = sys::process_cpu_s();
    let store0 = store_cpu.seconds();
    timeline.restart();
    let started = Instant::now();
    let load = api.closed_loop(
        vec![plan.token],
        0,
        plan.producers,
        started + DRAIN_LIMIT,
        Some(messages),
    );
    let mut rss_peak_mib = rss_start_mib;
    let mut ingest_s = None;
    let deadline = started + DRAIN_LIMIT;
    while Instant::now() < deadline {
        if ingest_s.is_none() && load.is_finished() {
            ingest_s = Some(started.elapsed().as_secs_f64());
        }
        if ingest_s.is_some() && timeline.delivered_total(0) >= expected {
            break;
        }
        if let Some(now) = sys::rss_mib() {
            rss_peak_mib = Some(rss_peak_mib.map_or(now, |peak| peak.max(now)));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let total_s = started.elapsed().as_secs_f64();
    let cpu = sys::process_cpu_s().zip(cpu0).map(|(b, a)| b - a);
    let store_cpu_s = store_cpu.seconds().zip(store0).map(|(b, a)| b - a);
    let _ = load.await;
    let ingest_s = ingest_s.unwrap_or(total_s);
    let scrape_started = Instant::now();
    let claims_after = sluice.scrape().await?;
    let scrape_ms = ms(scrape_started.elapsed());

    let claim = claims_after
        .histogram("sluice_claim_duration_seconds")
        .zip(claims_before.histogram("sluice_claim_duration_seconds"))
        .map(|(after, before)| after.delta(&before));
    let delivered = timeline.delivered_total(0);
    let latency = timeline.latency_from(0, 0);
    Ok(Burst {
        ingest_per_s: timeline.accepted(0) as f64 / ingest_s,
        delivery_per_s: delivered as f64 / total_s,
        cpu_ms_per_delivery: cpu.map(|c| c * 1000.0 / delivered.max(1) as f64),
        store_cpu_ms_per_delivery: store_cpu_s.map(|c| c * 1000.0 / delivered.max(1) as f64),
        claim_p50_ms: claim
            .as_ref()
            .and_then(|h| h.quantile(0.5))
            .map(|s| s * 1e3),
        claim_p99_ms: claim
            .as_ref()
            .and_then(|h| h.quantile(0.99))
            .map(|s| s * 1e3),
        claims: claim.as_ref().map_or(0.0, |h| h.count),
        e2e_p50_ms: latency.quantile(0.5).map(ms),
        e2e_p99_ms: latency.quantile(0.99).map(ms),
        rss_start_mib,
        rss_peak_mib,
        undelivered: expected.saturating_sub(delivered),
        scrape_ms,
    })
}
