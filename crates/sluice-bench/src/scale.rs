//! `scale`: one burst (20,000 messages from 32 producers) into a tenant with 10, 1,000, 10,000
//! and 100,000 endpoints, each message reaching `--fan-out` of them (one by default; endpoint
//! `i` subscribes to `e.{i / fan-out}` and messages cycle through the types), all endpoints on
//! one fast loopback receiver. Per count: ingest and delivery rates, CPU per delivery, claim
//! time, enqueue→delivery latency and memory, from a fresh store each (a fresh PostgreSQL
//! database per count with `--database-url`): what sluice's cost per delivery owes to the
//! number of endpoints. `--registered N` adds N idle endpoints of another tenant, written straight
//! to the store: registered-but-idle endpoints should cost nothing but disk.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use futures_util::StreamExt;
use tokio::time::Instant;

use super::chart::{Line, Panel};
use super::harness::{Sluice, Tuning};
use super::load::Api;
use super::receiver::{self, Mode};
use super::report::Report;
use super::store_cpu::StoreCpu;
use super::timeline::{Timeline, ms};
use super::{BenchArgs, save_chart, sys};

/// Endpoints created through the API at once.
const SETUP_CONCURRENCY: usize = 32;
/// Registered endpoints written to the store per transaction.
const REGISTER_BATCH: u64 = 2_000;
/// Longest wait for the burst to be delivered.
const DRAIN_LIMIT: Duration = Duration::from_secs(300);

/// What one endpoint count measured.
struct Row {
    endpoints: usize,
    setup_s: f64,
    register_s: Option<f64>,
    burst: Burst,
}

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

/// Run and report.
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let counts: Vec<usize> = match args.endpoints {
        Some(n) => vec![n.max(1)],
        None => args.sized(vec![10, 1_000, 10_000, 100_000], vec![10, 200]),
    };
    let fan_out = args.fan_out.unwrap_or(1).max(1);
    let messages = args.messages.unwrap_or(args.sized(20_000, 400)).max(1);
    let producers = args.producers.unwrap_or(32).max(1);
    let mut report = Report::new("scale", args.describe());
    report.param("endpoints", serde_json::json!(counts));
    report.param("fan_out", fan_out);
    report.param("messages", messages);
    report.param("producers", producers);
    report.param("registered", args.registered.unwrap_or(0));

    let mut rows = Vec::with_capacity(counts.len());
    for &n in &counts {
        let row = match &args.database_url {
            Some(url) => {
                let db = super::harness::FreshDatabase::create(url).await?;
                let mut run_args = args.clone();
                run_args.database_url = Some(db.url.clone());
                let row = one(&run_args, n, fan_out, messages, producers).await;
                db.drop_it().await;
                row?
            }
            None => one(args, n, fan_out, messages, producers).await?,
        };
        if !args.json {
            eprintln!(
                "scale: {n} endpoints: {:.0} deliveries/s, {:.0} messages/s ingested",
                row.burst.delivery_per_s, row.burst.ingest_per_s
            );
        }
        rows.push(row);
    }

    let base = &rows[0];
    for row in &rows {
        let n = row.endpoints;
        let key = |what: &str| format!("n{n}_{what}");
        let label = |what: &str| format!("{n} endpoints: {what}");
        report.figure(
            &key("setup_s"),
            &label("endpoints created (API)"),
            Some(row.setup_s),
            "s",
        );
        if let Some(s) = row.register_s {
            report.figure(
                &key("register_s"),
                &label("idle endpoints registered (store)"),
                Some(s),
                "s",
            );
        }
        row.burst.figures(&mut report, args, &key, &label);
        report.figure(
            &key("delivery_vs_first"),
            &label(&format!("deliveries/s ÷ {}'s", base.endpoints)),
            Some(row.burst.delivery_per_s / base.burst.delivery_per_s),
            "×",
        );
        report.figure(
            &key("ingest_vs_first"),
            &label(&format!("ingest/s ÷ {}'s", base.endpoints)),
            Some(row.burst.ingest_per_s / base.burst.ingest_per_s),
            "×",
        );
    }
    report.note(
        "producers, the receiver and sluice share this process: CPU and memory include the \
         producers' POSTs and the receiver's handling; RSS is the whole process",
    );

    let x = |r: &Row| (r.endpoints as f64).log10();
    let line = |name: &str, f: &dyn Fn(&Row) -> Option<f64>| {
        Line::new(
            name,
            rows.iter()
                .filter_map(|r| f(r).map(|v| (x(r), v)))
                .collect(),
        )
    };
    let axis = "log10(endpoints)";
    let panels = [
        Panel::linear(
            "rates",
            "per second",
            vec![
                line("deliveries/s", &|r| Some(r.burst.delivery_per_s)),
                line("messages ingested/s", &|r| Some(r.burst.ingest_per_s)),
            ],
        )
        .over(axis),
        Panel::log(
            "cost per delivery and per claim",
            "ms (log)",
            vec![
                line("CPU per delivery", &|r| r.burst.cpu_ms_per_delivery),
                line("claim p50", &|r| r.burst.claim_p50_ms),
                line("claim p99", &|r| r.burst.claim_p99_ms),
            ],
        )
        .over(axis),
        Panel::linear(
            "resident memory",
            "MiB",
            vec![
                line("before the burst", &|r| r.burst.rss_start_mib),
                line("peak during it", &|r| r.burst.rss_peak_mib),
            ],
        )
        .over(axis),
    ];
    save_chart(
        args,
        &mut report,
        &format!("scale: {messages} messages, fan-out {fan_out}, {producers} producers"),
        &panels,
    )?;
    Ok(report)
}

async fn one(
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

/// Register `n` endpoints of another tenant straight into the store, subscribed to an event type
/// nobody sends; returns the seconds it took.
async fn register(sluice: &Sluice, n: u64) -> anyhow::Result<f64> {
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
