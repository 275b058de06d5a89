//! Store benchmark: enqueue and claim+settle rates for each driver, median of 3 runs.
//!
//! `cargo bench --bench store`. SQLite runs in a temporary directory with `synchronous = FULL`
//! and `NORMAL`; PostgreSQL runs in a fresh database when `SLUICE_BENCH_DATABASE_URL` (or
//! `SLUICE_TEST_DATABASE_URL`) is set. Each run starts from an empty store with one tenant and
//! 10 subscribed endpoints, so every message fans out to 10 deliveries.
//!
//! Then what a claim costs against the number of tenants with due work: 100,000 due deliveries on
//! 10,000 endpoints (10 each), the endpoints spread over 10, 100, 1,000 or 10,000 tenants, and
//! the time of each of 400 claims of 64 (one delivery per endpoint, so every claim touches 64
//! endpoints whatever the tenants) as a dispatcher makes them (its floor, the previous claim's
//! charges), each followed by a settle (not timed): p50 and p99. With 10 tenants a claim serves
//! at most 10 tenants; from 100 on it serves 64, so 100 against 10,000 is what the number of
//! tenants waiting costs, and 10 against 100 what serving more tenants in one claim costs.
//! `SLUICE_BENCH_CLAIMS_ONLY=1` runs only this part.

use std::sync::Arc;
use std::time::Instant;

use sluice::clock::now_ms;
use sluice::ids::{hash_token, lease_token, new_id, new_token};
use sluice::model::*;
use sluice::store::sqlite::{SqliteOptions, SqliteStore};
use sluice::store::*;

const ENDPOINTS: usize = 10;
const RUNS: usize = 3;
/// Enqueue from concurrent producers, one message per call (one API POST per event).
const PRODUCERS: usize = 32;
const MESSAGES_PER_PRODUCER: usize = 200;
/// Enqueue in batches (the batch route).
const BATCH: usize = 64;
const BATCHES: usize = 200;
/// Claim+settle: backlog size in messages (× 10 deliveries) and the claim batch.
const BACKLOG_MESSAGES: usize = 10_000;
const CLAIM_BATCH: u32 = 256;

#[derive(Clone, Copy)]
enum Driver {
    Sqlite { full: bool },
    Postgres,
}

impl Driver {
    fn name(self) -> &'static str {
        match self {
            Driver::Sqlite { full: true } => "sqlite (synchronous=FULL)",
            Driver::Sqlite { full: false } => "sqlite (synchronous=NORMAL)",
            Driver::Postgres => "postgres",
        }
    }
}

/// A fresh store; the guard keeps the temporary directory or names the database to drop.
struct Fresh {
    store: SharedStore,
    _dir: Option<tempfile::TempDir>,
    database: Option<String>,
}

async fn fresh(driver: Driver, base_url: Option<&str>) -> Fresh {
    match driver {
        Driver::Sqlite { full } => {
            let dir = tempfile::tempdir().expect("tempdir");
            let store = SqliteStore::open(
                &dir.path().join("bench.db"),
                SqliteOptions {
                    synchronous_full: full,
                    readers: 2,
                },
            )
            .expect("open sqlite");
            Fresh {
                store: Arc::new(store),
                _dir: Some(dir),
                database: None,
            }
        }
        Driver::Postgres => {
            let base = base_url.expect("postgres url");
            let name = format!("sluice_bench_{}", lease_token());
            admin(base, &format!("CREATE DATABASE {name}")).await;
            let mut config: tokio_postgres::Config = base.parse().expect("database url");
            config.dbname(&name);
            let store = sluice::store::postgres::PostgresStore::connect(&url_of(&config))
                .await
                .expect("connect postgres");
            Fresh {
                store: Arc::new(store),
                _dir: None,
                database: Some(name),
            }
        }
    }
}

fn url_of(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "127.0.0.1".into(),
    };
    format!(
        "postgres://{}@{host}:{}/{}",
        config.get_user().unwrap_or("postgres"),
        config.get_ports().first().copied().unwrap_or(5432),
        config.get_dbname().unwrap_or("postgres"),
    )
}

async fn admin(base: &str, sql: &str) {
    let (client, conn) = tokio_postgres::connect(base, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {base}: {e}"));
    tokio::spawn(conn);
    client.batch_execute(sql).await.expect(sql);
}

impl Fresh {
    async fn finish(self, base_url: Option<&str>) {
        drop(self.store);
        if let (Some(name), Some(base)) = (self.database, base_url) {
            admin(
                base,
                &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            )
            .await;
        }
    }
}

async fn setup(store: &SharedStore) -> String {
    let now = now_ms();
    let tenant = Tenant {
        id: new_id("ten"),
        name: "bench".into(),
        token_hash: hash_token(&new_token("sk")),
        created_at_ms: now,
        share: Default::default(),
    };
    store.create_tenant(&tenant).await.expect("tenant");
    for _ in 0..ENDPOINTS {
        store
            .create_endpoint(&Endpoint::new(
                new_id("ep"),
                tenant.id.clone(),
                "http://127.0.0.1:9/hook".into(),
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
                now,
            ))
            .await
            .expect("endpoint");
    }
    tenant.id
}

fn message(tenant: &str) -> NewMessage {
    NewMessage {
        id: new_id("msg"),
        tenant_id: tenant.to_owned(),
        event_type: "invoice.paid".into(),
        payload:
            r#"{"type":"invoice.paid","data":{"id":"in_1Nv0","amount":4200,"currency":"eur"}}"#
                .into(),
        idempotency_key: None,
        only_endpoint: None,
        traceparent: None,
        tracestate: None,
    }
}

/// Messages per second from `PRODUCERS` concurrent tasks, one message per call.
async fn enqueue_concurrent(store: &SharedStore, tenant: &str) -> f64 {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..PRODUCERS {
        let (store, tenant) = (store.clone(), tenant.to_owned());
        tasks.push(tokio::spawn(async move {
            for _ in 0..MESSAGES_PER_PRODUCER {
                let out = store
                    .enqueue(&[message(&tenant)], now_ms())
                    .await
                    .expect("enqueue");
                assert_eq!(out[0].deliveries as usize, ENDPOINTS);
            }
        }));
    }
    for task in tasks {
        task.await.expect("producer");
    }
    (PRODUCERS * MESSAGES_PER_PRODUCER) as f64 / start.elapsed().as_secs_f64()
}

/// Messages per second from one task enqueueing batches of `BATCH`.
async fn enqueue_batched(store: &SharedStore, tenant: &str) -> f64 {
    let start = Instant::now();
    for _ in 0..BATCHES {
        let batch: Vec<NewMessage> = (0..BATCH).map(|_| message(tenant)).collect();
        store.enqueue(&batch, now_ms()).await.expect("enqueue");
    }
    (BATCHES * BATCH) as f64 / start.elapsed().as_secs_f64()
}

/// Deliveries per second through claim (batches of `CLAIM_BATCH`) and a delivered settle with
/// an attempt record, from `workers` concurrent claim→settle loops, until the backlog is empty.
async fn claim_settle(store: &SharedStore, tenant: &str, workers: usize) -> f64 {
    let batch: Vec<NewMessage> = (0..BACKLOG_MESSAGES).map(|_| message(tenant)).collect();
    for chunk in batch.chunks(1_000) {
        store.enqueue(chunk, now_ms()).await.expect("fill");
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = 0usize;
            loop {
                let now = now_ms();
                let claimed = store
                    .claim(&ClaimRequest {
                        now_ms: now,
                        limit: CLAIM_BATCH,
                        per_endpoint: CLAIM_BATCH / 4,
                        lease_ms: 60_000,
                        exclude: Vec::new(),
                        room: vec![],
                        ..Default::default()
                    })
                    .await
                    .expect("claim")
                    .claimed;
                if claimed.is_empty() {
                    return done;
                }
                let settlements: Vec<Settlement> = claimed
                    .iter()
                    .map(|c| Settlement {
                        delivery_id: c.delivery_id,
                        lease_token: c.lease_token,
                        outcome: SettleOutcome::Delivered,
                        attempt: Some(AttemptRecord {
                            started_at_ms: now,
                            duration_ms: 3,
                            status: Some(200),
                            error_kind: None,
                            response: Some("ok".into()),
                        }),
                    })
                    .collect();
                let applied = store.settle(&settlements, now_ms()).await.expect("settle");
                assert_eq!(applied.len(), claimed.len());
                done += applied.len();
            }
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.expect("worker");
    }
    let elapsed = start.elapsed().as_secs_f64();
    assert_eq!(total, BACKLOG_MESSAGES * ENDPOINTS, "backlog not drained");
    total as f64 / elapsed
}

/// Due deliveries of the claim benchmark, whatever the number of tenants.
const DUE: usize = 100_000;
/// The endpoints they are due to, whatever the number of tenants.
const DUE_ENDPOINTS: usize = 10_000;
/// Claims timed, and the size of each.
const CLAIMS: usize = 400;
const CLAIM_LIMIT: u32 = 64;

/// `tenants` tenants sharing `DUE_ENDPOINTS` endpoints and `DUE` due deliveries evenly.
async fn due_tenants(store: &SharedStore, tenants: usize) {
    let now = now_ms();
    let mut endpoints = Vec::with_capacity(DUE_ENDPOINTS);
    let mut messages = Vec::with_capacity(DUE / (DUE_ENDPOINTS / tenants));
    for _ in 0..tenants {
        let tenant = Tenant {
            id: new_id("ten"),
            name: "due".into(),
            token_hash: hash_token(&new_token("sk")),
            created_at_ms: now,
            share: Default::default(),
        };
        store.create_tenant(&tenant).await.expect("tenant");
        for _ in 0..DUE_ENDPOINTS / tenants {
            endpoints.push(Endpoint::new(
                new_id("ep"),
                tenant.id.clone(),
                "http://127.0.0.1:9/hook".into(),
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
                now,
            ));
        }
        // Each message fans out to every endpoint of its tenant.
        for _ in 0..DUE / DUE_ENDPOINTS {
            messages.push(message(&tenant.id));
        }
    }
    for chunk in endpoints.chunks(1_000) {
        store.create_endpoints(chunk).await.expect("endpoints");
    }
    // About 10,000 deliveries per enqueue, whatever the fan-out.
    let fan_out = DUE_ENDPOINTS / tenants;
    for chunk in messages.chunks((10_000 / fan_out).max(1)) {
        store.enqueue(chunk, now - 1_000).await.expect("fill");
    }
}

/// The time of each of `CLAIMS` claims, seconds, claimed as a dispatcher claims.
async fn claim_times(store: &SharedStore) -> Vec<f64> {
    let mut floor = None;
    let mut charges: Vec<TenantCharge> = Vec::new();
    let mut times = Vec::with_capacity(CLAIMS);
    for _ in 0..CLAIMS {
        let now = now_ms();
        let request = ClaimRequest {
            now_ms: now,
            limit: CLAIM_LIMIT,
            per_endpoint: 1,
            lease_ms: 60_000,
            fair_floor: floor,
            charges: std::mem::take(&mut charges),
            default_weight: 1,
            ..Default::default()
        };
        let start = Instant::now();
        let batch = store.claim(&request).await.expect("claim");
        times.push(start.elapsed().as_secs_f64());
        assert_eq!(batch.claimed.len(), CLAIM_LIMIT as usize, "a full claim");
        if let Some(f) = batch.floor {
            floor = Some(floor.map_or(f, |v: f64| v.max(f)));
        }
        for c in &batch.claimed {
            match charges.iter_mut().find(|x| x.tenant_id == c.tenant_id) {
                Some(x) => {
                    x.seconds += 0.05;
                    x.deliveries += 1;
                }
                None => charges.push(TenantCharge {
                    tenant_id: c.tenant_id.clone(),
                    start: c.tenant_pass,
                    seconds: 0.05,
                    deliveries: 1,
                }),
            }
        }
        let settlements: Vec<Settlement> = batch
            .claimed
            .iter()
            .map(|c| Settlement {
                delivery_id: c.delivery_id,
                lease_token: c.lease_token,
                outcome: SettleOutcome::Delivered,
                attempt: None,
            })
            .collect();
        store.settle(&settlements, now_ms()).await.expect("settle");
    }
    times
}

fn quantile(mut xs: Vec<f64>, q: f64) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[((xs.len() - 1) as f64 * q).round() as usize]
}

async fn bench_tenants(driver: Driver, base_url: Option<&str>) {
    println!(
        "  claims of {CLAIM_LIMIT} among {DUE} due deliveries ({CLAIMS} claims, each settled):"
    );
    let mut p99s = Vec::new();
    for tenants in [10, 100, 1_000, 10_000] {
        let f = fresh(driver, base_url).await;
        due_tenants(&f.store, tenants).await;
        let times = claim_times(&f.store).await;
        f.finish(base_url).await;
        let (p50, p99) = (quantile(times.clone(), 0.5), quantile(times, 0.99));
        p99s.push(p99);
        println!(
            "    {tenants:>6} tenants due     : p50 {:>6.2} ms, p99 {:>6.2} ms",
            p50 * 1e3,
            p99 * 1e3
        );
    }
    println!(
        "    p99 with 10,000 tenants ÷ with 10: {:.2}; ÷ with 100 (64 tenants served per claim in both): {:.2}",
        p99s[3] / p99s[0],
        p99s[3] / p99s[1]
    );
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn fmt(rate: f64) -> String {
    let n = rate.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

async fn bench(driver: Driver, base_url: Option<&str>) {
    if std::env::var_os("SLUICE_BENCH_CLAIMS_ONLY").is_some() {
        println!("{}", driver.name());
        bench_tenants(driver, base_url).await;
        return;
    }
    let mut concurrent = Vec::new();
    let mut batched = Vec::new();
    let mut settle_1 = Vec::new();
    let mut settle_4 = Vec::new();
    for _ in 0..RUNS {
        // Each measurement starts from an empty store, so earlier runs do not slow later ones.
        let f = fresh(driver, base_url).await;
        let tenant = setup(&f.store).await;
        concurrent.push(enqueue_concurrent(&f.store, &tenant).await);
        f.finish(base_url).await;

        let f = fresh(driver, base_url).await;
        let tenant = setup(&f.store).await;
        batched.push(enqueue_batched(&f.store, &tenant).await);
        f.finish(base_url).await;

        let f = fresh(driver, base_url).await;
        let tenant = setup(&f.store).await;
        settle_1.push(claim_settle(&f.store, &tenant, 1).await);
        f.finish(base_url).await;

        let f = fresh(driver, base_url).await;
        let tenant = setup(&f.store).await;
        settle_4.push(claim_settle(&f.store, &tenant, 4).await);
        f.finish(base_url).await;
    }
    let (c, b) = (median(concurrent), median(batched));
    println!("{}", driver.name());
    println!(
        "  enqueue, {PRODUCERS} tasks x 1 msg/call  : {:>9} msg/s = {:>10} deliveries/s",
        fmt(c),
        fmt(c * ENDPOINTS as f64)
    );
    println!(
        "  enqueue, batches of {BATCH}          : {:>9} msg/s = {:>10} deliveries/s",
        fmt(b),
        fmt(b * ENDPOINTS as f64)
    );
    println!(
        "  claim {CLAIM_BATCH} + settle, 1 worker   : {:>10} deliveries/s",
        fmt(median(settle_1))
    );
    println!(
        "  claim {CLAIM_BATCH} + settle, 4 workers  : {:>10} deliveries/s",
        fmt(median(settle_4))
    );
    bench_tenants(driver, base_url).await;
}

fn main() {
    // `cargo bench` passes `--bench`; a name filter selects drivers ("sqlite", "postgres").
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wanted = |d: Driver| filter.as_deref().is_none_or(|f| d.name().contains(f));
    let base_url = std::env::var("SLUICE_BENCH_DATABASE_URL")
        .or_else(|_| std::env::var("SLUICE_TEST_DATABASE_URL"))
        .ok()
        .filter(|u| !u.is_empty());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        println!(
            "sluice store benchmark: {ENDPOINTS} endpoints per message, median of {RUNS} runs"
        );
        for driver in [
            Driver::Sqlite { full: true },
            Driver::Sqlite { full: false },
            Driver::Postgres,
        ] {
            if !wanted(driver) {
                continue;
            }
            if matches!(driver, Driver::Postgres) && base_url.is_none() {
                println!(
                    "postgres: skipped (set SLUICE_BENCH_DATABASE_URL or SLUICE_TEST_DATABASE_URL)"
                );
                continue;
            }
            bench(driver, base_url.as_deref()).await;
        }
    });
}
