//! `tls`: HTTPS the way customers run it, and what keep-alive saves. Endpoints with fast HTTPS
//! receivers (certificates from a test CA made for the run, trusted through each endpoint's
//! CA bundle) take a closed loop of producers, three times: plain HTTP with keep-alive, HTTPS
//! with keep-alive, and HTTPS whose receivers close every connection after answering (a
//! handshake per delivery). From `webhook_phase_seconds` each phase reports how many
//! deliveries opened a connection and what connect and the TLS handshake cost them, beside
//! deliveries per second and CPU per delivery.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sluice_testkit::receiver::Options;
use sluice_testkit::tls::{TestCa, Validity, server_config};
use tokio::time::Instant;

use super::chart::{Line, Panel};
use super::harness::{Sluice, Tuning};
use super::load::Api;
use super::receiver::{self, Mode};
use super::report::{Report, ratio};
use super::timeline::Timeline;
use super::watch::{self, Watch};
use super::{BenchArgs, save_chart, sys};

/// How the receivers of one phase serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Serving {
    PlainKeepAlive,
    TlsKeepAlive,
    TlsClose,
}

impl Serving {
    fn key(self) -> &'static str {
        match self {
            Serving::PlainKeepAlive => "http",
            Serving::TlsKeepAlive => "https",
            Serving::TlsClose => "https_close",
        }
    }

    fn words(self) -> &'static str {
        match self {
            Serving::PlainKeepAlive => "HTTP, keep-alive",
            Serving::TlsKeepAlive => "HTTPS, keep-alive",
            Serving::TlsClose => "HTTPS, a new connection per delivery",
        }
    }
}

/// What one phase measured.
struct Measured {
    serving: Serving,
    delivered: u64,
    per_s: f64,
    cpu_ms_per_delivery: Option<f64>,
    connections_per_delivery: Option<f64>,
    connect_ms: Option<f64>,
    tls_ms: Option<f64>,
    http_ms: Option<f64>,
    /// Connect and TLS time spent per delivery, over every delivery (reused connections add 0).
    setup_ms_per_delivery: Option<f64>,
    handshakes: u64,
    series: Vec<(f64, f64)>,
}

/// Run the three phases and report them side by side.
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let duration = args.duration(20.0);
    let mut phases = Vec::new();
    for serving in [
        Serving::PlainKeepAlive,
        Serving::TlsKeepAlive,
        Serving::TlsClose,
    ] {
        phases.push(phase(args, serving, duration).await?);
    }
    let mut report = Report::new("tls", args.describe());
    report.param("duration_s", duration.as_secs_f64());
    report.param("endpoints", args.endpoints.unwrap_or(10).max(1));
    report.param("producers", args.producers.unwrap_or(16).max(1));
    for m in &phases {
        let k = m.serving.key();
        let w = m.serving.words();
        report.figure(
            &format!("{k}_delivered"),
            &format!("{w}: deliveries"),
            Some(m.delivered as f64),
            "",
        );
        report.figure(
            &format!("{k}_delivery_per_s"),
            &format!("{w}: deliveries per second"),
            Some(m.per_s),
            "/s",
        );
        report.figure(
            &format!("{k}_cpu_ms_per_delivery"),
            &format!("{w}: process CPU per delivery"),
            m.cpu_ms_per_delivery,
            "ms",
        );
        report.figure(
            &format!("{k}_connections_per_delivery"),
            &format!("{w}: new connections per delivery"),
            m.connections_per_delivery,
            "",
        );
        report.figure(
            &format!("{k}_connect_ms"),
            &format!("{w}: connect (lookup + TCP), mean per new connection"),
            m.connect_ms,
            "ms",
        );
        report.figure(
            &format!("{k}_tls_ms"),
            &format!("{w}: TLS handshake, mean per new connection"),
            m.tls_ms,
            "ms",
        );
        report.figure(
            &format!("{k}_http_ms"),
            &format!("{w}: request → response headers, mean"),
            m.http_ms,
            "ms",
        );
        report.figure(
            &format!("{k}_setup_ms_per_delivery"),
            &format!("{w}: connect + TLS per delivery, over all deliveries"),
            m.setup_ms_per_delivery,
            "ms",
        );
        report.figure(
            &format!("{k}_handshakes"),
            &format!("{w}: TLS handshakes the receivers completed"),
            Some(m.handshakes as f64),
            "",
        );
        report.series(&format!("{k}_deliveries_per_s"), m.series.clone());
    }
    if let [_, alive, close] = &phases[..] {
        report.figure(
            "keep_alive_cpu_saved_ms_per_delivery",
            "CPU per delivery keep-alive saves over a handshake per delivery",
            alive
                .cpu_ms_per_delivery
                .zip(close.cpu_ms_per_delivery)
                .map(|(a, c)| c - a),
            "ms",
        );
        report.figure(
            "keep_alive_setup_saved_ms_per_delivery",
            "connect + TLS time per delivery keep-alive saves",
            alive
                .setup_ms_per_delivery
                .zip(close.setup_ms_per_delivery)
                .map(|(a, c)| c - a),
            "ms",
        );
    }
    report.note(
        "producers, receivers (their TLS side too) and sluice share this process: CPU per \
         delivery includes the receivers' handshakes",
    );
    report.note(
        "connect and tls are observed only for attempts that opened a connection; http is the \
         request and its answer without them",
    );
    let panels = [Panel::linear(
        "deliveries per second",
        "per second",
        phases
            .iter()
            .map(|m| Line::new(m.serving.words(), m.series.clone()))
            .collect(),
    )];
    save_chart(args, &mut report, "tls: what keep-alive saves", &panels)?;
    Ok(report)
}

async fn phase(args: &BenchArgs, serving: Serving, duration: Duration) -> anyhow::Result<Measured> {
    let endpoints = args.endpoints.unwrap_or(10).max(1);
    let producers = args.producers.unwrap_or(16).max(1);
    let timeline = Arc::new(Timeline::new(&["deliveries"]));
    let sluice = Sluice::start(args, &Tuning::default()).await?;
    let token = sluice.tenant(serving.key()).await?;
    let ca = TestCa::new("sluice bench CA");
    let server = ca.server(&["127.0.0.1"], Validity::Current);
    let config = server_config(&server, &[]);
    let mut receivers = Vec::with_capacity(endpoints);
    for _ in 0..endpoints {
        let options = Options {
            tls: (serving != Serving::PlainKeepAlive).then(|| config.clone()),
            close: serving == Serving::TlsClose,
            ..Options::default()
        };
        let r = receiver::start_with(Mode::Fast, timeline.clone(), 0, options).await?;
        let mut body = json!({ "url": r.url() });
        if serving != Serving::PlainKeepAlive {
            body["tls_ca_bundle"] = json!(ca.certificate);
        }
        sluice.endpoint_with(&token, body).await?;
        receivers.push(r);
    }
    let api = Api {
        http: sluice.http.clone(),
        url: sluice.messages_url().into(),
        timeline: timeline.clone(),
        event_types: None,
    };
    let pb = watch::progress(args.json, serving.key(), duration.as_secs_f64());
    let mut watch = Watch::new(sluice.probe(), Vec::new(), timeline.clone(), pb);
    let before = sluice.scrape().await?;
    let cpu0 = sys::process_cpu_s();
    timeline.restart();
    let until = Instant::now() + duration;
    let load = api.closed_loop(vec![token], 0, producers, until, None);
    watch.until(until).await;
    let _ = tokio::time::timeout(Duration::from_secs(30), load).await;
    let expected = timeline.accepted(0) * endpoints as u64;
    let drain_limit = Instant::now() + duration.min(Duration::from_secs(30));
    watch
        .until_done(drain_limit, |t| t.delivered_total(0) >= expected)
        .await;
    let cpu1 = sys::process_cpu_s();
    let elapsed = timeline.elapsed();
    let after = sluice.scrape().await?;
    watch.finish();
    sluice.stop().await;
    let handshakes = receivers.iter().map(|r| r.record.handshakes()).sum();
    drop(receivers);

    let phases =
        |s: &sluice::plan::prom::Scrape| s.histograms("webhook_phase_seconds", Some("phase"));
    let (b, a) = (phases(&before), phases(&after));
    let delta = |name: &str| {
        a.get(name)
            .map(|h| h.delta(b.get(name).unwrap_or(&Default::default())))
    };
    let (connect, tls, http) = (delta("connect"), delta("tls"), delta("http"));
    let delivered = timeline.delivered_total(0);
    let mean_ms = |h: &Option<sluice::plan::prom::HistogramSnapshot>| {
        h.as_ref().and_then(|h| h.mean()).map(|s| s * 1000.0)
    };
    let attempts = http.as_ref().map_or(0.0, |h| h.count);
    let setup_s = connect.as_ref().map_or(0.0, |h| h.sum) + tls.as_ref().map_or(0.0, |h| h.sum);
    Ok(Measured {
        serving,
        delivered,
        per_s: delivered as f64 / elapsed.max(1e-9),
        cpu_ms_per_delivery: ratio(
            cpu1.zip(cpu0).map(|(b, a)| (b - a) * 1000.0),
            Some(delivered as f64),
        ),
        connections_per_delivery: ratio(connect.as_ref().map(|h| h.count), Some(attempts)),
        connect_ms: mean_ms(&connect),
        tls_ms: mean_ms(&tls),
        http_ms: mean_ms(&http),
        setup_ms_per_delivery: ratio(Some(setup_s * 1000.0), Some(attempts)),
        handshakes,
        series: timeline.count_series(0, false),
    })
}
