//! `throughput`: one tenant with many endpoints (10 by default, each its own fast loopback
//! receiver), 32 producers POSTing one event each as fast as the API answers; every event fans
//! out to every endpoint. Reports ingest and delivery rates, CPU per 1,000 deliveries and peak
//! memory.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::chart::{Line, Panel};
use super::harness::{Sluice, Tuning};
use super::load::Api;
use super::receiver::{self, Mode};
use super::report::{Report, ratio};
use super::store_cpu::StoreCpu;
use super::timeline::{Timeline, ms};
use super::watch::{self, Watch};
use super::{BenchArgs, save_chart, sys};

/// Run and report (on PostgreSQL in a fresh database beside the one named, dropped after).
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let Some(url) = &args.database_url else {
        return run_on(args).await;
    };
    let db = super::harness::FreshDatabase::create(url).await?;
    let mut own = args.clone();
    own.database_url = Some(db.url.clone());
    let report = run_on(&own).await;
    db.drop_it().await;
    report
}

async fn run_on(args: &BenchArgs) -> anyhow::Result<Report> {
    let endpoints = args.endpoints.unwrap_or(10).max(1);
    let producers = args.producers.unwrap_or(32).max(1);
    let duration = args.duration(30.0);
    let timeline = Arc::new(Timeline::new(&["deliveries"]));
    let sluice = Sluice::start(args, &Tuning::default()).await?;
    let token = sluice.tenant("throughput").await?;
    let mut receivers = Vec::with_capacity(endpoints);
    let mut ids = Vec::with_capacity(endpoints);
    for _ in 0..endpoints {
        let r = receiver::start(Mode::Fast, timeline.clone(), 0).await?;
        ids.push(sluice.endpoint(&token, &r.url(), None).await?);
        receivers.push(r);
    }
    let embedded = sluice.embedded();
    let pb = watch::progress(args.json, "throughput", duration.as_secs_f64());
    let watched = vec![("ep0".to_owned(), ids[0].clone())];
    let mut watch = Watch::new(sluice.probe(), watched, timeline.clone(), pb);
    let api = Api {
        http: sluice.http.clone(),
        url: sluice.messages_url().into(),
        timeline: timeline.clone(),
        event_types: None,
    };

    let store_cpu = StoreCpu::locate(args.database_url.as_deref(), embedded).await;
    let cpu0 = sys::process_cpu_s();
    let machine0 = sys::machine_busy_cpu_s();
    let store0 = store_cpu.seconds();
    timeline.restart();
    let until = Instant::now() + duration;
    let load = api.closed_loop(vec![token], 0, producers, until, None);
    watch.until(until).await;
    let _ = tokio::time::timeout(Duration::from_secs(30), load).await;
    let load_s = duration.as_secs_f64();
    let cpu_load = sys::process_cpu_s();
    let in_window = timeline.delivered_between(0, 0, load_s.ceil() as usize);
    let expected = timeline.accepted(0) * endpoints as u64;
    let drain_started = Instant::now();
    let drain_limit = drain_started + duration.min(Duration::from_secs(30));
    let drained = watch
        .until_done(drain_limit, |t| t.delivered_total(0) >= expected)
        .await;
    let drain_s = drain_started.elapsed().as_secs_f64();
    let cpu1 = sys::process_cpu_s();
    let machine1 = sys::machine_busy_cpu_s();
    let store1 = store_cpu.seconds();
    let series = watch.finish();
    // Let the last batch of spans go out before counting them.
    let spans = match sluice.spans() {
        Some(_) => {
            tokio::time::sleep(Duration::from_secs(6)).await;
            sluice.spans()
        }
        None => None,
    };
    sluice.stop().await;
    drop(receivers);

    let accepted = timeline.accepted(0);
    let delivered = timeline.delivered_total(0);
    let latency = timeline.latency_from(0, 0);
    let cpu = cpu1.zip(cpu0).map(|(b, a)| b - a);
    let machine_cpu = machine1.zip(machine0).map(|(b, a)| b - a);
    let store_cpu_s = store1.zip(store0).map(|(b, a)| b - a);
    let per_1000 = |c: Option<f64>| ratio(c.map(|c| c * 1000.0), Some(delivered as f64));

    let mut report = Report::new("throughput", args.describe());
    report.param("duration_s", load_s);
    report.param("endpoints", endpoints);
    report.param("producers", producers);
    report.param("fan_out", endpoints);
    report.figure(
        "ingest_per_s",
        "ingest: messages accepted (one POST each)",
        Some(accepted as f64 / load_s),
        "/s",
    );
    report.figure(
        "offered_deliveries_per_s",
        "deliveries those messages ask for (× fan-out)",
        Some((accepted * endpoints as u64) as f64 / load_s),
        "/s",
    );
    report.figure(
        "delivery_per_s",
        "delivery rate during the load",
        Some(in_window as f64 / load_s),
        "/s",
    );
    report.figure(
        "delivery_per_s_overall",
        "delivery rate, load + drain",
        Some(delivered as f64 / (load_s + drain_s)),
        "/s",
    );
    report.figure(
        "drain_s",
        "drain after the load stopped",
        Some(drain_s),
        "s",
    );
    report.figure(
        "undelivered",
        "deliveries still pending at the end",
        Some(expected.saturating_sub(delivered) as f64),
        "",
    );
    if let Some((exported, dropped, requests, bytes)) = spans {
        report.figure(
            "spans_exported",
            "attempt spans the collector took",
            Some(exported as f64),
            "",
        );
        report.figure(
            "spans_dropped",
            "attempt spans dropped (export queue full or collector failed)",
            Some(dropped as f64),
            "",
        );
        if requests > 0 {
            report.figure(
                "span_bytes_per_span",
                "OTLP protobuf bytes per span exported",
                ratio(Some(bytes as f64), Some(exported as f64)),
                "B",
            );
        }
    }
    report.figure(
        "process_cpu_s_per_1000",
        "process CPU per 1,000 deliveries",
        per_1000(cpu),
        "s",
    );
    report.figure(
        "machine_cpu_ms_per_delivery",
        "whole-machine busy CPU per delivery",
        per_1000(machine_cpu),
        "ms",
    );
    report.figure(
        "store_cpu_ms_per_delivery",
        if store_cpu.is_postgres() {
            "PostgreSQL server CPU per delivery (postmaster and children)"
        } else {
            "store CPU per delivery (the SQLite driver's threads)"
        },
        per_1000(store_cpu_s),
        "ms",
    );
    report.figure(
        "process_cpu_utilisation",
        "process CPU during the load (cores busy)",
        cpu_load.zip(cpu0).map(|(b, a)| (b - a) / load_s),
        "cores",
    );
    report.figure(
        "peak_rss_mib",
        "peak RSS (VmHWM)",
        sys::peak_rss_mib(),
        "MiB",
    );
    for (q, name) in [(0.5, "p50"), (0.99, "p99")] {
        report.figure(
            &format!("e2e_{name}_ms"),
            &format!("enqueue→delivery {name} (includes the backlog's wait)"),
            latency.quantile(q).map(ms),
            "ms",
        );
    }
    let ingest = timeline.ingest_latency(0);
    for (q, name) in [(0.5, "p50"), (0.99, "p99")] {
        report.figure(
            &format!("ingest_{name}_ms"),
            &format!("POST→202 {name} (group commit)"),
            ingest.quantile(q).map(ms),
            "ms",
        );
    }
    report.note(if embedded {
        "producers, receivers and sluice share this process and its 2 cores: the CPU per \
         delivery includes the producers' POSTs and the receivers' handling"
    } else {
        "CPU and memory are this bench process (producers and receivers), not the target"
    });
    if !drained {
        report.note("the backlog did not drain within the drain limit");
    }

    let delivered_s = timeline.count_series(0, false);
    let ingest_s = watch::per_second(&series, "deliveries.accepted");
    let rss = series.get("rss_mib").cloned().unwrap_or_default();
    report.series("deliveries_per_s", delivered_s.clone());
    report.series("ingest_per_s", ingest_s.clone());
    report.series("rss_mib", rss.clone());
    let panels = [
        Panel::linear(
            "rates",
            "per second",
            vec![
                Line::new("deliveries/s", delivered_s),
                Line::new("messages accepted/s", ingest_s),
            ],
        ),
        Panel::log(
            "enqueue→delivery latency per second",
            "ms (log)",
            vec![
                Line::new("p50", timeline.quantile_series(0, 0.5)),
                Line::new("p99", timeline.quantile_series(0, 0.99)),
            ],
        ),
        Panel::linear("resident memory", "MiB", vec![Line::new("RSS", rss)]),
    ];
    save_chart(
        args,
        &mut report,
        &format!("throughput: {producers} producers, {endpoints} endpoints (fan-out {endpoints})"),
        &panels,
    )?;
    Ok(report)
}
