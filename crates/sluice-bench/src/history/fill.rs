//! The history written straight to a phase's store: delivered messages, each with its delivery
//! and its attempt, spread over the last [`super::SPAN_DAYS`] days, as SQL for PostgreSQL and SQLite.

use anyhow::Context;

use super::{FILL_CHUNK, PAYLOAD};

/// Base32 (sluice's id alphabet) of `expr`'s low `chars × 5` bits, most significant first, as
/// a SQL expression; `int` casts the shifted value for `substr` where the driver needs it.
pub(super) fn base32_sql(expr: &str, chars: u32, int: &str) -> String {
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
pub(super) fn message_id_sql(int: &str) -> String {
    format!(
        "'msg_' || {} || '00000000000' || {}",
        base32_sql("ms", 10, int),
        base32_sql("n", 5, int)
    )
}

/// One statement writing rows `lo..hi` of `rows`: messages, deliveries and attempts.
pub(super) fn postgres_fill(lo: u64, hi: u64, rows: u64, end_ms: i64, span_ms: i64) -> String {
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

pub(super) fn sqlite_fill(
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
