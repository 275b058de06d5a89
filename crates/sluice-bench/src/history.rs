//! `history`: what months of delivered history cost the queue. The standard burst (`scale`'s:
//! 20,000 messages from 32 producers to 10 endpoints of one tenant, one endpoint each) runs
//! three times, each on a fresh store: **empty**; holding `--history N` delivered messages
//! (10,000,000 by default), each with its delivery and its attempt, spread over the last 30
//! days and written straight to the store (kept: retention 30 days); and the same history
//! with the **retention purge** running through the burst (retention 20 days, so the oldest
//! third is due for deletion when sluice starts and the reaper's first pass deletes it while
//! the burst runs). Per phase: deliveries/s, claim p50/p99, store CPU per delivery, the sizes
//! of the queue tables and their indexes before and after, and what the purge deleted; each
//! history phase's throughput and claim p99 against the empty store's.
//!
//! The history belongs to the burst's own endpoints (their delivered rows are in the same
//! indexes the burst writes), written between two starts of sluice on the same store: the
//! first creates the tenant and endpoints through the API, the second measures.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::time::Instant;

use super::chart::{Line, Panel};
use super::harness::{FreshDatabase, Sluice, Tuning};
use super::receiver::{self, Mode};
use super::report::Report;
use super::scale::{Burst, BurstPlan, burst};
use super::timeline::Timeline;
use super::{BenchArgs, save_chart};

/// Days the history spans, ending now.
const SPAN_DAYS: i64 = 30;
/// Retention of the history phase: everything written is kept.
const KEEP: &str = "31d";
/// Retention of the purge phase: a third of the history is older.
const PURGE: &str = "20d";
/// History rows written per statement.
const FILL_CHUNK: u64 = 250_000;
/// The payload of every history message (about the size of a small webhook body).
const PAYLOAD: &str = r#"{"type":"invoice.paid","data":{"id":"in_000000000000","amount":4200,"currency":"eur","customer":"cus_000000000000","lines":[{"sku":"plan-pro","quantity":1}],"note":"history written by sluice bench history"}}"#;
/// Throughput and claim p99 with history, at most this many times the empty store's.
const HISTORY_TARGET: f64 = 1.2;
/// The same with the purge running.
const PURGE_TARGET: f64 = 1.3;

/// The tables the history lives in.
const TABLES: [&str; 3] = ["messages", "deliveries", "attempts"];

/// One phase's figures.
struct Phase {
    name: &'static str,
    fill_s: f64,
    burst: Burst,
    before: Sizes,
    after: Sizes,
    /// History rows (deliveries) left at the end.
    history_left: u64,
}

/// Bytes of each queue table and of its indexes.
#[derive(Debug, Clone, Default)]
struct Sizes {
    /// (table, heap bytes, index bytes)
    tables: Vec<(&'static str, u64, u64)>,
}

impl Sizes {
    fn total_mib(&self) -> f64 {
        self.tables.iter().map(|(_, h, i)| h + i).sum::<u64>() as f64 / (1024.0 * 1024.0)
    }
}

/// Run and report.
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let history = args.history.unwrap_or(args.sized(10_000_000, 3_000));
    let endpoints = args.endpoints.unwrap_or(10).max(1);
    let messages = args.messages.unwrap_or(args.sized(20_000, 400)).max(1);
    let producers = args.producers.unwrap_or(32).max(1);
    let mut report = Report::new("history", args.describe());
    report.param("history", history);
    report.param("endpoints", endpoints);
    report.param("messages", messages);
    report.param("producers", producers);

    let mut phases = Vec::new();
    for (name, rows, retention) in [
        ("empty", 0, KEEP),
        ("history", history, KEEP),
        ("purge", history, PURGE),
    ] {
        let phase = phase(args, name, rows, retention, endpoints, messages, producers).await?;
        if !args.json {
            eprintln!(
                "history: {name}: {:.0} deliveries/s, claim p99 {:.1} ms, {:.0} MiB of queue tables",
                phase.burst.delivery_per_s,
                phase.burst.claim_p99_ms.unwrap_or(f64::NAN),
                phase.after.total_mib()
            );
        }
        phases.push(phase);
    }

    let empty_rate = phases[0].burst.delivery_per_s;
    let empty_p99 = phases[0].burst.claim_p99_ms;
    for p in &phases {
        let key = |what: &str| format!("{}_{what}", p.name);
        let label = |what: &str| format!("{}: {what}", p.name);
        if p.name != "empty" {
            report.figure(
                &key("fill_s"),
                &label("history written (straight to the store)"),
                Some(p.fill_s),
                "s",
            );
        }
        let b = &p.burst;
        b.figures(&mut report, args, &key, &label);
        for (sizes, when) in [(&p.before, "before"), (&p.after, "after")] {
            for (table, heap, index) in &sizes.tables {
                report.figure(
                    &key(&format!("{table}_{when}_mib")),
                    &label(&format!("{table} {when} the burst, table + indexes")),
                    Some((heap + index) as f64 / (1024.0 * 1024.0)),
                    "MiB",
                );
                report.figure(
                    &key(&format!("{table}_indexes_{when}_mib")),
                    &label(&format!("{table} indexes {when} the burst")),
                    Some(*index as f64 / (1024.0 * 1024.0)),
                    "MiB",
                );
            }
        }
        report.figure(
            &key("history_left"),
            &label("history deliveries left at the end"),
            Some(p.history_left as f64),
            "",
        );
        if p.name != "empty" {
            let rate = empty_rate / b.delivery_per_s.max(f64::MIN_POSITIVE);
            let p99 = b.claim_p99_ms.zip(empty_p99).map(|(h, e)| h / e.max(1e-3));
            report.figure(
                &key("slowdown"),
                &label("empty store's deliveries/s ÷ this phase's"),
                Some(rate),
                "×",
            );
            report.figure(
                &key("claim_p99_vs_empty"),
                &label("claim p99 ÷ the empty store's"),
                p99,
                "×",
            );
            let target = if p.name == "purge" {
                PURGE_TARGET
            } else {
                HISTORY_TARGET
            };
            report.verdict(
                rate <= target && p99.is_some_and(|f| f <= target),
                format!(
                    "{}: throughput and claim p99 within {target}x of the empty store \
                     (deliveries/s: empty ÷ this {rate:.2}x; claim p99: this ÷ empty {})",
                    p.name,
                    p99.map_or("not measured".into(), |f| format!("{f:.2}x"))
                ),
            );
        }
        match p.name {
            "history" => report.invariant(
                p.history_left == history,
                format!(
                    "history: retention {KEEP} kept all {history} history deliveries ({} left)",
                    p.history_left
                ),
            ),
            "purge" => report.invariant(
                p.history_left < history,
                format!(
                    "purge: retention {PURGE} deleted history while the burst ran ({} of {history} left)",
                    p.history_left
                ),
            ),
            _ => {}
        }
        report.invariant(
            b.undelivered == 0,
            format!(
                "{}: every delivery of the burst arrived ({} missing)",
                p.name, b.undelivered
            ),
        );
    }
    if let Some(purge) = phases.iter().find(|p| p.name == "purge") {
        let due = history * 10 / u64::try_from(SPAN_DAYS).unwrap_or(30);
        report.note(format!(
            "purge phase: retention {PURGE}, about {due} of the {history} history deliveries \
             older than it when sluice started; {} deleted by the end of the burst",
            history.saturating_sub(purge.history_left)
        ));
    }
    report.note(
        "history: one message, one delivered delivery and one attempt per row, spread evenly \
         over the last 30 days across the burst's endpoints; PostgreSQL's tables are vacuumed and \
         analyzed after the fill, as autovacuum would have left them; both stores flush the fill \
         to disk before sluice starts (checkpoint, fsync)",
    );

    let x = |i: usize| i as f64;
    let line = |name: &str, f: &dyn Fn(&Phase) -> Option<f64>| {
        Line::new(
            name,
            phases
                .iter()
                .enumerate()
                .filter_map(|(i, p)| f(p).map(|v| (x(i), v)))
                .collect(),
        )
    };
    let axis = "phase: 0 empty, 1 history, 2 history + purge";
    let panels = [
        Panel::linear(
            "deliveries per second",
            "per second",
            vec![line("deliveries/s", &|p| Some(p.burst.delivery_per_s))],
        )
        .over(axis),
        Panel::log(
            "claim time and store CPU",
            "ms (log)",
            vec![
                line("claim p50", &|p| p.burst.claim_p50_ms),
                line("claim p99", &|p| p.burst.claim_p99_ms),
                line("store CPU per delivery", &|p| {
                    p.burst.store_cpu_ms_per_delivery
                }),
            ],
        )
        .over(axis),
        Panel::linear(
            "queue tables with their indexes",
            "MiB",
            vec![
                line("before the burst", &|p| Some(p.before.total_mib())),
                line("after it", &|p| Some(p.after.total_mib())),
            ],
        )
        .over(axis),
    ];
    save_chart(
        args,
        &mut report,
        &format!("history: {history} delivered messages behind a {messages}-message burst"),
        &panels,
    )?;
    Ok(report)
}

/// Where a phase's store lives: a fresh PostgreSQL database or a fresh SQLite directory.
enum Place {
    Postgres(FreshDatabase),
    Sqlite(tempfile::TempDir),
}

impl Place {
    async fn create(args: &BenchArgs) -> anyhow::Result<Self> {
        Ok(match &args.database_url {
            Some(url) => Place::Postgres(FreshDatabase::create(url).await?),
            None => Place::Sqlite(tempfile::tempdir().context("a data directory")?),
        })
    }

    fn url(&self) -> Option<String> {
        match self {
            Place::Postgres(db) => Some(db.url.clone()),
            Place::Sqlite(_) => None,
        }
    }

    fn data_dir(&self) -> Option<std::path::PathBuf> {
        match self {
            Place::Postgres(_) => None,
            Place::Sqlite(dir) => Some(dir.path().to_path_buf()),
        }
    }

    fn sqlite_path(dir: &tempfile::TempDir) -> std::path::PathBuf {
        dir.path().join("sluice.db")
    }

    async fn postgres(db: &FreshDatabase) -> anyhow::Result<tokio_postgres::Client> {
        let (client, conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
            .await
            .context("connect to the phase's database")?;
        tokio::spawn(conn);
        Ok(client)
    }

    /// Write `rows` delivered messages of `tenant` over `endpoints`, oldest first, spread over
    /// the last [`SPAN_DAYS`] days.
    async fn fill(&self, tenant: &str, endpoints: &[String], rows: u64) -> anyhow::Result<()> {
        if rows == 0 {
            return Ok(());
        }
        let end_ms = sluice::clock::now_ms() - 60_000;
        let span_ms = SPAN_DAYS * 86_400_000 - 120_000;
        match self {
            Place::Postgres(db) => {
                let c = Self::postgres(db).await?;
                let mut lo = 0;
                while lo < rows {
                    let hi = (lo + FILL_CHUNK).min(rows);
                    c.execute(
                        &postgres_fill(lo, hi, rows, end_ms, span_ms),
                        &[&tenant, &endpoints],
                    )
                    .await
                    .context("write history")?;
                    lo = hi;
                }
                c.batch_execute("VACUUM ANALYZE messages, deliveries, attempts")
                    .await
                    .context("vacuum the history")?;
                // Written long ago, history is on disk: the burst must not pay for its flush.
                if let Err(e) = c.batch_execute("CHECKPOINT").await {
                    eprintln!(
                        "history: no CHECKPOINT after the fill ({e}): the burst may flush it"
                    );
                }
            }
            Place::Sqlite(dir) => {
                let path = Self::sqlite_path(dir);
                let tenant = tenant.to_owned();
                let endpoints = endpoints.to_vec();
                tokio::task::spawn_blocking(move || {
                    sqlite_fill(&path, &tenant, &endpoints, rows, end_ms, span_ms)
                })
                .await??;
            }
        }
        Ok(())
    }

    async fn sizes(&self) -> anyhow::Result<Sizes> {
        let mut sizes = Sizes::default();
        match self {
            Place::Postgres(db) => {
                let c = Self::postgres(db).await?;
                for table in TABLES {
                    let row = c
                        .query_one(
                            "SELECT pg_table_size($1::text::regclass), pg_indexes_size($1::text::regclass)",
                            &[&table],
                        )
                        .await
                        .context("table sizes")?;
                    let heap: i64 = row.get(0);
                    let index: i64 = row.get(1);
                    sizes.tables.push((table, heap as u64, index as u64));
                }
            }
            Place::Sqlite(dir) => {
                let path = Self::sqlite_path(dir);
                sizes = tokio::task::spawn_blocking(move || sqlite_sizes(&path)).await??;
            }
        }
        Ok(sizes)
    }

    /// Delivery rows in the store.
    async fn deliveries(&self) -> anyhow::Result<u64> {
        let n: i64 = match self {
            Place::Postgres(db) => Self::postgres(db)
                .await?
                .query_one("SELECT count(*) FROM deliveries", &[])
                .await?
                .get(0),
            Place::Sqlite(dir) => {
                let path = Self::sqlite_path(dir);
                tokio::task::spawn_blocking(move || -> anyhow::Result<i64> {
                    let c = rusqlite::Connection::open(&path)?;
                    Ok(c.query_row("SELECT count(*) FROM deliveries", [], |r| r.get(0))?)
                })
                .await??
            }
        };
        Ok(n.max(0) as u64)
    }

    async fn remove(self) {
        if let Place::Postgres(db) = self {
            db.drop_it().await;
        }
    }
}

/// Base32 (sluice's id alphabet) of `expr`'s low `chars × 5` bits, most significant first, as
/// a SQL expression; `int` casts the shifted value for `substr` where the driver needs it.
fn base32_sql(expr: &str, chars: u32, int: &str) -> String {
    let alphabet = std::str::from_utf8(sluice::ids::ALPHABET).unwrap_or_default();
    (0..chars)
        .rev()
        .map(|i| {
            format!(
                "substr('{alphabet}', ((({expr}) >> {}) & 31){int} + 1, 1)",
                i * 5
            )
        })
        .collect::<Vec<_>>()
        .join(" || ")
}

/// A history message's id: `msg_` + its time + a counter, in the form sluice's own ids take
/// (so they sort by time as sluice's do).
fn message_id_sql(int: &str) -> String {
    format!(
        "'msg_' || {} || '00000000000' || {}",
        base32_sql("ms", 10, int),
        base32_sql("n", 5, int)
    )
}

/// One statement writing rows `lo..hi` of `rows`: messages, deliveries and attempts.
fn postgres_fill(lo: u64, hi: u64, rows: u64, end_ms: i64, span_ms: i64) -> String {
    let id = message_id_sql("::int");
    format!(
        "WITH s AS (SELECT n, ms, {id} AS id, ($2::text[])[(n % cardinality($2::text[]))::int + 1] AS ep \
           FROM (SELECT n, {end_ms}::bigint - ({span_ms}::bigint * ({rows} - 1 - n)) / {rows} AS ms \
                 FROM generate_series({lo}::bigint, {hi_1}::bigint) AS n) AS t), \
         m AS (INSERT INTO messages (id, tenant_id, event_type, payload, created_at_ms) \
               SELECT id, $1, 'e.0', '{PAYLOAD}', ms FROM s), \
         d AS (INSERT INTO deliveries (message_id, endpoint_id, tenant_id, state, attempts, \
                 visible_at_ms, expiries, last_status, created_at_ms, updated_at_ms) \
               SELECT id, ep, $1, 2, 1, ms, 0, 200, ms, ms + 45 FROM s \
               RETURNING id, created_at_ms) \
         INSERT INTO attempts (delivery_id, started_at_ms, duration_ms, status, response) \
         SELECT id, created_at_ms + 5, 40, 200, 'ok' FROM d",
        hi_1 = hi - 1,
    )
}

fn sqlite_fill(
    path: &std::path::Path,
    tenant: &str,
    endpoints: &[String],
    rows: u64,
    end_ms: i64,
    span_ms: i64,
) -> anyhow::Result<()> {
    let mut c = rusqlite::Connection::open(path).context("open the phase's SQLite store")?;
    c.execute_batch("PRAGMA synchronous = OFF; PRAGMA cache_size = -262144")?;
    let id = message_id_sql("");
    let mut lo = 0;
    while lo < rows {
        let hi = (lo + FILL_CHUNK).min(rows);
        let tx = c.transaction()?;
        tx.execute_batch(
            "CREATE TEMP TABLE IF NOT EXISTS fill_endpoints (i INTEGER PRIMARY KEY, id TEXT); \
             DELETE FROM fill_endpoints; \
             CREATE TEMP TABLE IF NOT EXISTS fill (n INTEGER PRIMARY KEY, ms INTEGER, id TEXT); \
             DELETE FROM fill;",
        )?;
        for (i, e) in endpoints.iter().enumerate() {
            tx.execute(
                "INSERT INTO fill_endpoints (i, id) VALUES (?1, ?2)",
                rusqlite::params![i as i64, e],
            )?;
        }
        tx.execute(
            &format!(
                "INSERT INTO fill (n, ms, id) \
                 WITH RECURSIVE t(n) AS (SELECT {lo} UNION ALL SELECT n + 1 FROM t WHERE n < {hi_1}), \
                 s AS (SELECT n, {end_ms} - ({span_ms} * ({rows} - 1 - n)) / {rows} AS ms FROM t) \
                 SELECT n, ms, {id} FROM s",
                hi_1 = hi - 1
            ),
            [],
        )?;
        tx.execute(
            &format!(
                "INSERT INTO messages (id, tenant_id, event_type, payload, created_at_ms) \
                 SELECT id, ?1, 'e.0', '{PAYLOAD}', ms FROM fill ORDER BY n"
            ),
            [tenant],
        )?;
        // Delivery ids are the rows' numbers + 1: the store holds no delivery yet.
        tx.execute(
            "INSERT INTO deliveries (id, message_id, endpoint_id, tenant_id, state, attempts, \
               visible_at_ms, expiries, last_status, created_at_ms, updated_at_ms) \
             SELECT f.n + 1, f.id, e.id, ?1, 2, 1, f.ms, 0, 200, f.ms, f.ms + 45 FROM fill f \
             JOIN fill_endpoints e ON e.i = f.n % ?2 ORDER BY f.n",
            rusqlite::params![tenant, endpoints.len() as i64],
        )?;
        tx.execute(
            "INSERT INTO attempts (delivery_id, started_at_ms, duration_ms, status, response) \
             SELECT n + 1, ms + 5, 40, 200, 'ok' FROM fill ORDER BY n",
            [],
        )?;
        tx.commit()?;
        lo = hi;
    }
    c.execute_batch("DROP TABLE IF EXISTS temp.fill; DROP TABLE IF EXISTS temp.fill_endpoints")?;
    // Written long ago, history is on disk: the burst must not pay for its flush.
    c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    drop(c);
    std::fs::File::open(path)?.sync_all()?;
    Ok(())
}

fn sqlite_sizes(path: &std::path::Path) -> anyhow::Result<Sizes> {
    let c = rusqlite::Connection::open(path).context("open the phase's SQLite store")?;
    let mut sizes = Sizes::default();
    for table in TABLES {
        let bytes = |sql: &str| -> anyhow::Result<u64> {
            let n: i64 = c
                .query_row(sql, [table], |r| r.get(0))
                .with_context(|| format!("dbstat of {table}"))?;
            Ok(n.max(0) as u64)
        };
        let heap = bytes("SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name = ?1")?;
        let index = bytes(
            "SELECT coalesce(sum(d.pgsize), 0) FROM dbstat d JOIN sqlite_schema s \
             ON s.name = d.name WHERE s.type = 'index' AND s.tbl_name = ?1",
        )?;
        sizes.tables.push((table, heap, index));
    }
    Ok(sizes)
}

async fn phase(
    args: &BenchArgs,
    name: &'static str,
    history: u64,
    retention: &str,
    endpoints: usize,
    messages: u64,
    producers: usize,
) -> anyhow::Result<Phase> {
    let place = Place::create(args).await?;
    let result = async {
        let mut run_args = args.clone();
        run_args.database_url = place.url();
        let timeline = Arc::new(Timeline::new(&["deliveries"]));
        let rx = receiver::start(Mode::Fast, timeline.clone(), 0).await?;

        // The tenant and its endpoints, through the API.
        let setup = Tuning {
            data_dir: place.data_dir(),
            ..Default::default()
        };
        let sluice = Sluice::start(&run_args, &setup).await?;
        let (tenant, token) = sluice.tenant_with_id("history").await?;
        let mut ids = Vec::with_capacity(endpoints);
        for i in 0..endpoints {
            let url = format!("{}/{i}", rx.url());
            ids.push(sluice.subscriber(&token, &url, &format!("e.{i}")).await?);
        }
        sluice.stop().await;

        let filled = Instant::now();
        place.fill(&tenant, &ids, history).await?;
        let fill_s = filled.elapsed().as_secs_f64();
        let before = place.sizes().await?;

        let measured = Tuning {
            data_dir: place.data_dir(),
            retention: Some(retention.to_owned()),
            ..Default::default()
        };
        let sluice = Sluice::start(&run_args, &measured).await?;
        let result = burst(
            &run_args,
            &sluice,
            BurstPlan {
                token,
                types: endpoints,
                fan_out: 1,
                messages,
                producers,
                timeline,
            },
        )
        .await;
        sluice.stop().await;
        drop(rx);
        let burst = result?;
        // Let a purge still running finish its statement before the sizes are read.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let after = place.sizes().await?;
        let rows = place.deliveries().await?;
        let history_left = rows.saturating_sub(messages);
        anyhow::Ok(Phase {
            name,
            fill_s,
            burst,
            before,
            after,
            history_left,
        })
    }
    .await;
    place.remove().await;
    result
}
