//! The dispatchers' heartbeats on PostgreSQL.

use deadpool_postgres::GenericClient;

use super::pg;
use crate::model::{Heartbeat, HostSeconds, Tally};
use crate::store::StoreResult;

const UPSERT: &str = "INSERT INTO dispatchers (id, started_at_ms, beat_at_ms, in_flight, \
     concurrency, capacity, arrivals_per_s, mean_service_s, draining, backend_pid, \
     delivered, failed, shed, host, host_seconds, lease_tag) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) \
     ON CONFLICT (id) DO UPDATE SET beat_at_ms = excluded.beat_at_ms, \
     in_flight = excluded.in_flight, concurrency = excluded.concurrency, \
     capacity = excluded.capacity, arrivals_per_s = excluded.arrivals_per_s, \
     mean_service_s = excluded.mean_service_s, draining = excluded.draining, \
     backend_pid = excluded.backend_pid, delivered = excluded.delivered, \
     failed = excluded.failed, shed = excluded.shed, host = excluded.host, \
     host_seconds = excluded.host_seconds, lease_tag = excluded.lease_tag";

/// Fresh heartbeats of processes still alive: a heartbeat naming a backend that PostgreSQL no
/// longer has (its process died, closing its connections) is not counted, however young.
const SINCE: &str = "SELECT id, started_at_ms, beat_at_ms, in_flight, concurrency, capacity, \
     arrivals_per_s, mean_service_s, draining, delivered, failed, shed, host, host_seconds \
     FROM dispatchers WHERE beat_at_ms >= $1 \
     AND (backend_pid IS NULL OR backend_pid IN (SELECT pid FROM pg_stat_activity)) \
     ORDER BY id";

/// The lease tags of dispatchers known dead (`$1` now, `$2` the age that makes a heartbeat
/// old, `$3` the asking process's listener backend): a row naming a backend PostgreSQL no
/// longer has and not written for `$2`, judged only while the asker's own backend has been
/// connected for `$2`, so a dispatcher that lost its connection in an outage the asker also
/// saw has had that long to beat again with its new backend. A tag another row also names is
/// never taken (two processes drew the same one).
const DEAD_TAGS: &str = "SELECT d.lease_tag FROM dispatchers d \
     WHERE d.lease_tag IS NOT NULL AND d.backend_pid IS NOT NULL \
       AND d.beat_at_ms < $1::bigint - $2::bigint \
       AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = d.backend_pid) \
       AND NOT EXISTS (SELECT 1 FROM dispatchers o WHERE o.lease_tag = d.lease_tag AND o.id <> d.id) \
       AND EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = $3::int \
           AND a.backend_start <= now() - $2::bigint * interval '1 millisecond')";

/// Write `h`; `backend` is the pid of the process's long-lived listener connection, `lease_tag`
/// the high half of its claims' lease tokens.
pub(super) async fn beat(
    c: &impl GenericClient,
    h: &Heartbeat,
    backend: Option<i32>,
    lease_tag: i32,
) -> StoreResult<()> {
    c.execute(
        UPSERT,
        &[
            &h.id,
            &h.started_at_ms,
            &h.beat_at_ms,
            &i64::from(h.in_flight),
            &i64::from(h.concurrency),
            &i64::from(h.capacity),
            &finite(h.arrivals_per_s),
            &finite(h.mean_service_s),
            &h.draining,
            &backend,
            &count(h.tally.delivered),
            &count(h.tally.failed),
            &count(h.tally.shed),
            &h.host,
            &h.host_seconds.to_json(),
            &lease_tag,
        ],
    )
    .await
    .map_err(pg)?;
    Ok(())
}

pub(super) async fn since(c: &impl GenericClient, since_ms: i64) -> StoreResult<Vec<Heartbeat>> {
    let rows = c.query(SINCE, &[&since_ms]).await.map_err(pg)?;
    let count = |v: i64| u32::try_from(v.max(0)).unwrap_or(u32::MAX);
    let tally = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(rows
        .iter()
        .map(|r| Heartbeat {
            id: r.get(0),
            started_at_ms: r.get(1),
            beat_at_ms: r.get(2),
            in_flight: count(r.get(3)),
            concurrency: count(r.get(4)),
            capacity: count(r.get(5)),
            arrivals_per_s: r.get(6),
            mean_service_s: r.get(7),
            draining: r.get(8),
            tally: Tally {
                delivered: tally(r.get(9)),
                failed: tally(r.get(10)),
                shed: tally(r.get(11)),
            },
            host: r.get(12),
            host_seconds: HostSeconds::from_json(r.get(13)),
        })
        .collect())
}

/// The lease tags of dispatchers known dead (see [`DEAD_TAGS`]); `own` is the asking
/// process's listener backend.
pub(super) async fn dead_tags(
    c: &impl GenericClient,
    now_ms: i64,
    dead_after_ms: i64,
    own: i32,
) -> StoreResult<Vec<i32>> {
    let rows = c
        .query(DEAD_TAGS, &[&now_ms, &dead_after_ms, &own])
        .await
        .map_err(pg)?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

pub(super) async fn forget(
    c: &impl GenericClient,
    id: Option<&str>,
    before_ms: i64,
) -> StoreResult<u64> {
    c.execute(
        "DELETE FROM dispatchers WHERE id = $1 OR beat_at_ms < $2",
        &[&id, &before_ms],
    )
    .await
    .map_err(pg)
}

/// A count as PostgreSQL stores it (`BIGINT`; no process counts past it).
fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A rate or a mean that is not a number is stored as 0 (no reading).
pub(super) fn finite(v: f64) -> f64 {
    if v.is_finite() { v.max(0.0) } else { 0.0 }
}
