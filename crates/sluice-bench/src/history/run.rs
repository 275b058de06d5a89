//! `history`'s run: one phase on a fresh store (PostgreSQL or SQLite), its history written, the
//! burst sent, the table sizes read before and after.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::time::Instant;

use super::fill::{postgres_fill, sqlite_fill};
use super::{FILL_CHUNK, Phase, SPAN_DAYS, Sizes, TABLES};
use crate::BenchArgs;
use crate::harness::{FreshDatabase, Sluice, Tuning};
use crate::receiver::{self, Mode};
use crate::scale::{BurstPlan, burst};
use crate::timeline::Timeline;

/// Where a phase's store lives: a fresh PostgreSQL database or a fresh SQLite directory.
pub(super) enum Place {
    Postgres(FreshDatabase),
    Sqlite(tempfile::TempDir),
}

impl Place {
    pub(super) async fn create(args: &BenchArgs) -> anyhow::Result<Self> {
        Ok(match &args.database_url {
            Some(url) => Place::Postgres(FreshDatabase::create(url).await?),
            None => Place::Sqlite(tempfile::tempdir().context("a data directory")?),
        })
    }

    pub(super) fn url(&self) -> Option<String> {
        match self {
            Place::Postgres(db) => Some(db.url.clone()),
            Place::Sqlite(_) => None,
        }
    }

    pub(super) fn data_dir(&self) -> Option<std::path::PathBuf> {
        match self {
            Place::Postgres(_) => None,
            Place::Sqlite(dir) => Some(dir.path().to_path_buf()),
        }
    }

    pub(super) fn sqlite_path(dir: &tempfile::TempDir) -> std::path::PathBuf {
        dir.path().join("sluice.db")
    }

    pub(super) async fn postgres(db: &FreshDatabase) -> anyhow::Result<tokio_postgres::Client> {
        let (client, conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
            .await
            .context("connect to the phase's database")?;
        tokio::spawn(conn);
        Ok(client)
    }

    /// Write `rows` delivered messages of `tenant` over `endpoints`, oldest first, spread over
    /// the last [`SPAN_DAYS`] days.
    pub(super) async fn fill(
        &self,
        tenant: &str,
        endpoints: &[String],
        rows: u64,
    ) -> anyhow::Result<()> {
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

    pub(super) async fn sizes(&self) -> anyhow::Result<Sizes> {
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
    pub(super) async fn deliveries(&self) -> anyhow::Result<u64> {
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

    pub(super) async fn remove(self) {
        if let Place::Postgres(db) = self {
            db.drop_it().await;
        }
    }
}

pub(super) fn sqlite_sizes(path: &std::path::Path) -> anyhow::Result<Sizes> {
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

pub(super) async fn phase(
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
