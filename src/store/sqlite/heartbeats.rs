//! The dispatchers' heartbeats on SQLite (one process, so at most one row is fresh; kept the
//! same as PostgreSQL's so the scale signal reads one way).

use rusqlite::{Connection, params};

use super::db;
use crate::model::{Heartbeat, HostSeconds, Tally};
use crate::store::StoreResult;

const UPSERT: &str = "INSERT INTO dispatchers (id, started_at_ms, beat_at_ms, in_flight, \
     concurrency, capacity, arrivals_per_s, mean_service_s, draining, delivered, failed, shed, \
     host, host_seconds) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) \
     ON CONFLICT (id) DO UPDATE SET beat_at_ms = excluded.beat_at_ms, \
     in_flight = excluded.in_flight, concurrency = excluded.concurrency, \
     capacity = excluded.capacity, arrivals_per_s = excluded.arrivals_per_s, \
     mean_service_s = excluded.mean_service_s, draining = excluded.draining, \
     delivered = excluded.delivered, failed = excluded.failed, shed = excluded.shed, \
     host = excluded.host, host_seconds = excluded.host_seconds";

const SINCE: &str = "SELECT id, started_at_ms, beat_at_ms, in_flight, concurrency, capacity, \
     arrivals_per_s, mean_service_s, draining, delivered, failed, shed, host, host_seconds \
     FROM dispatchers WHERE beat_at_ms >= ?1 ORDER BY id";

fn finite(v: f64) -> f64 {
    if v.is_finite() { v.max(0.0) } else { 0.0 }
}

/// A count as SQLite stores it (a signed 64-bit integer; no process counts past it).
fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn tally(stored: i64) -> u64 {
    u64::try_from(stored).unwrap_or(0)
}

pub(super) fn beat(c: &Connection, h: &Heartbeat) -> StoreResult<()> {
    c.execute(
        UPSERT,
        params![
            h.id,
            h.started_at_ms,
            h.beat_at_ms,
            h.in_flight,
            h.concurrency,
            h.capacity,
            finite(h.arrivals_per_s),
            finite(h.mean_service_s),
            h.draining,
            count(h.tally.delivered),
            count(h.tally.failed),
            count(h.tally.shed),
            h.host,
            h.host_seconds.to_json(),
        ],
    )
    .map_err(db)?;
    Ok(())
}

pub(super) fn since(c: &Connection, since_ms: i64) -> StoreResult<Vec<Heartbeat>> {
    let mut stmt = c.prepare_cached(SINCE).map_err(db)?;
    let rows = stmt
        .query_map([since_ms], |r| {
            Ok(Heartbeat {
                id: r.get(0)?,
                started_at_ms: r.get(1)?,
                beat_at_ms: r.get(2)?,
                in_flight: r.get(3)?,
                concurrency: r.get(4)?,
                capacity: r.get(5)?,
                arrivals_per_s: r.get(6)?,
                mean_service_s: r.get(7)?,
                draining: r.get(8)?,
                tally: Tally {
                    delivered: tally(r.get(9)?),
                    failed: tally(r.get(10)?),
                    shed: tally(r.get(11)?),
                },
                host: r.get(12)?,
                host_seconds: HostSeconds::from_json(&r.get::<_, String>(13)?),
            })
        })
        .map_err(db)?;
    rows.collect::<Result<_, _>>().map_err(db)
}

pub(super) fn forget(c: &Connection, id: Option<&str>, before_ms: i64) -> StoreResult<u64> {
    let n = c
        .execute(
            "DELETE FROM dispatchers WHERE id = ?1 OR beat_at_ms < ?2",
            params![id, before_ms],
        )
        .map_err(db)?;
    Ok(n as u64)
}
