//! `enqueue`: the two ways in on PostgreSQL, side by side: 32 HTTP producers POSTing to
//! `/v1/messages`, then 32 database connections calling `sluice.send_message` (each call its own
//! transaction, committed), against the same tenant and endpoints (10 fast loopback receivers,
//! every message fanned out to all), in alternating rounds. Reports each way's messages/s
//! (median of the rounds) and that every message was delivered to every endpoint.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use tokio::time::Instant;

use super::harness::{FreshDatabase, Sluice, Tuning};
use super::load::Api;
use super::receiver::{self, Mode};
use super::report::{Report, percentile, ratio};
use super::timeline::{Timeline, now_us};
use super::{BenchArgs, sys};

/// The database when neither `--database-url` nor `SLUICE_TEST_DATABASE_URL` names one.
const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// The one statement of a SQL producer: one message, its own transaction.
const SEND: &str = "SELECT sluice.send_message($1, 'bench.event', $2::text::jsonb)";

/// Run and report, in a fresh database beside the one named (dropped after).
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let url = args
        .database_url
        .clone()
        .or_else(|| std::env::var("SLUICE_TEST_DATABASE_URL").ok())
        .unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned());
    let db = FreshDatabase::create(&url).await?;
    let mut own = args.clone();
    own.database_url = Some(db.url.clone());
    let report = run_on(&own, &db.url).await;
    db.drop_it().await;
    report
}

/// One round's figures of one way in.
#[derive(Debug, Default, Clone, Copy)]
struct Phase {
    messages_per_s: f64,
    /// Producer-side time of one accepted message, median, ms.
    median_ms: f64,
    errors: u64,
}

async fn run_on(args: &BenchArgs, url: &str) -> anyhow::Result<Report> {
    let endpoints = args.endpoints.unwrap_or(10).max(1);
    let producers = args.producers.unwrap_or(32).max(1);
    let duration = args.duration(10.0);
    let rounds = args.sized(3, 1);
    let timeline = Arc::new(Timeline::new(&["deliveries"]));
    let sluice = Sluice::start(args, &Tuning::default()).await?;
    let (tenant, token) = sluice.tenant_with_id("enqueue").await?;
    let mut receivers = Vec::with_capacity(endpoints);
    for _ in 0..endpoints {
        let r = receiver::start(Mode::Fast, timeline.clone(), 0).await?;
        sluice.endpoint(&token, &r.url(), None).await?;
        receivers.push(r);
    }
    let api = Api {
        http: sluice.http.clone(),
        url: sluice.messages_url().into(),
        timeline: timeline.clone(),
        event_types: None,
    };
    let mut connections = Vec::with_capacity(producers);
    for _ in 0..producers {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .context("a producer's connection")?;
        tokio::spawn(conn);
        connections.push(Arc::new(client));
    }

    let machine0 = sys::machine_busy_cpu_s();
    timeline.restart();
    let (mut over_http, mut over_sql) = (Vec::new(), Vec::new());
    let mut drained = true;
    for _ in 0..rounds {
        over_http.push(http_phase(&api, &token, producers, duration).await);
        drained &= drain(&timeline, endpoints, duration).await;
        over_sql.push(sql_phase(&connections, &tenant, &timeline, duration).await?);
        drained &= drain(&timeline, endpoints, duration).await;
    }
    let machine1 = sys::machine_busy_cpu_s();
    sluice.stop().await;
    drop(receivers);

    let accepted = timeline.accepted(0);
    let delivered = timeline.delivered_total(0);
    let expected = accepted * endpoints as u64;
    let median = |phases: &[Phase], f: fn(&Phase) -> f64| {
        percentile(&phases.iter().map(f).collect::<Vec<_>>(), 0.5)
    };
    let mut report = Report::new("enqueue", args.describe());
    report.param("duration_s", duration.as_secs_f64());
    report.param("rounds", rounds);
    report.param("endpoints", endpoints);
    report.param("producers", producers);
    report.param("fan_out", endpoints);
    let http_rate = median(&over_http, |p| p.messages_per_s);
    let sql_rate = median(&over_sql, |p| p.messages_per_s);
    report.figure(
        "http_messages_per_s",
        "POST /v1/messages from the HTTP producers, median of the rounds",
        http_rate,
        "/s",
    );
    report.figure(
        "sql_messages_per_s",
        "sluice.send_message from the connections (a transaction each), median",
        sql_rate,
        "/s",
    );
    report.figure(
        "sql_over_http",
        "send_message's rate over the API's",
        ratio(sql_rate, http_rate),
        "x",
    );
    report.figure(
        "http_median_ms",
        "one POST, producer's view, median of the rounds' medians",
        median(&over_http, |p| p.median_ms),
        "ms",
    );
    report.figure(
        "sql_median_ms",
        "one send_message with its commit, median of the rounds' medians",
        median(&over_sql, |p| p.median_ms),
        "ms",
    );
    report.figure(
        "errors",
        "refused or failed sends, both ways",
        Some(
            over_http
                .iter()
                .chain(&over_sql)
                .map(|p| p.errors)
                .sum::<u64>() as f64,
        ),
        "",
    );
    report.figure(
        "machine_cpu_s",
        "whole-machine busy CPU over the run",
        machine1.zip(machine0).map(|(b, a)| b - a),
        "s",
    );
    for (way, phases) in [("http", &over_http), ("sql", &over_sql)] {
        let rates: Vec<String> = phases
            .iter()
            .map(|p| format!("{:.0}", p.messages_per_s))
            .collect();
        report.note(format!("{way} rounds, messages/s: {}", rates.join(", ")));
    }
    report.invariant(
        drained && delivered >= expected,
        format!("every message delivered to every endpoint: {delivered} of {expected} deliveries"),
    );
    Ok(report)
}

/// The API's way: `producers` HTTP producers POSTing back to back for `duration`.
async fn http_phase(api: &Api, token: &str, producers: usize, duration: Duration) -> Phase {
    let until = Instant::now() + duration;
    let issued = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(producers);
    for _ in 0..producers {
        let (api, token, issued) = (api.clone(), token.to_owned(), issued.clone());
        tasks.push(tokio::spawn(async move {
            let (mut sent, mut errors, mut times) = (0u64, 0u64, Vec::new());
            while Instant::now() < until {
                let seq = issued.fetch_add(1, Ordering::Relaxed);
                let at = std::time::Instant::now();
                if api.send(&token, 0, seq).await {
                    sent += 1;
                    times.push(at.elapsed().as_secs_f64() * 1000.0);
                } else {
                    errors += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            (sent, errors, times)
        }));
    }
    let (mut sent, mut errors, mut times) = (0, 0, Vec::new());
    for t in tasks {
        if let Ok((s, e, ts)) = t.await {
            sent += s;
            errors += e;
            times.extend(ts);
        }
    }
    Phase {
        messages_per_s: sent as f64 / started.elapsed().as_secs_f64(),
        median_ms: percentile(&times, 0.5).unwrap_or_default(),
        errors,
    }
}

/// The database's way: every connection calls `send_message` back to back for `duration`,
/// each call a transaction of its own.
async fn sql_phase(
    connections: &[Arc<tokio_postgres::Client>],
    tenant: &str,
    timeline: &Arc<Timeline>,
    duration: Duration,
) -> anyhow::Result<Phase> {
    let until = Instant::now() + duration;
    let mut tasks = Vec::with_capacity(connections.len());
    let started = Instant::now();
    for c in connections {
        let (c, tenant, timeline) = (c.clone(), tenant.to_owned(), timeline.clone());
        tasks.push(tokio::spawn(async move {
            let statement = c.prepare(SEND).await?;
            let (mut sent, mut errors, mut times) = (0u64, 0u64, Vec::new());
            while Instant::now() < until {
                let payload = format!(r#"{{"sent_at_us":{},"seq":{sent}}}"#, now_us());
                let at = std::time::Instant::now();
                let ok = c.query_one(&statement, &[&tenant, &payload]).await.is_ok();
                let took = at.elapsed();
                timeline.sent(0, ok, took);
                if ok {
                    sent += 1;
                    times.push(took.as_secs_f64() * 1000.0);
                } else {
                    errors += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            Ok::<_, tokio_postgres::Error>((sent, errors, times))
        }));
    }
    let (mut sent, mut errors, mut times) = (0, 0, Vec::new());
    for t in tasks {
        let (s, e, ts) = t.await.context("a SQL producer")??;
        sent += s;
        errors += e;
        times.extend(ts);
    }
    let elapsed = started.elapsed().as_secs_f64();
    Ok(Phase {
        messages_per_s: sent as f64 / elapsed,
        median_ms: percentile(&times, 0.5).unwrap_or_default(),
        errors,
    })
}

/// Wait until everything accepted so far has reached every endpoint (at most `limit`, and at
/// least 30 s); whether it did.
async fn drain(timeline: &Timeline, endpoints: usize, limit: Duration) -> bool {
    let until = Instant::now() + limit.max(Duration::from_secs(30));
    loop {
        let expected = timeline.accepted(0) * endpoints as u64;
        if timeline.delivered_total(0) >= expected {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
