//! The queue's statements: enqueue, settle, lease extension, reaping, replay, purge, and the
//! queue's figures.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use rusqlite::{Connection, OptionalExtension, params};

use super::*;
use crate::store::sqlite::db;
use crate::store::*;

/// One outcome; a settle ends its lease normally, so it also ends any run of lease expiries.
const SETTLE: &str = "UPDATE deliveries SET state = ?1, visible_at_ms = COALESCE(?2, visible_at_ms), \
     attempts = attempts + ?3, lease_until_ms = NULL, lease_token = NULL, expiries = 0, \
     last_status = CASE WHEN ?7 THEN ?4 ELSE last_status END, \
     last_error = CASE WHEN ?7 THEN ?5 ELSE last_error END, updated_at_ms = ?6 \
     WHERE id = ?8 AND lease_token = ?9 AND state = 1";
/// A FIFO endpoint whose head was just delivered or dead-lettered is due again when anything
/// waits behind it (its row went when the head was claimed; see `claim::reschedule`).
const FIFO_NEXT: &str = "INSERT INTO due_endpoints (endpoint_id, tenant_id, due_ms) \
     SELECT d.endpoint_id, d.tenant_id, ?2 FROM deliveries d \
     WHERE d.id = ?1 AND d.state IN (2, 3) \
       AND (SELECT e.ordering FROM endpoints e WHERE e.id = d.endpoint_id) = 1 \
       AND EXISTS (SELECT 1 FROM deliveries p WHERE p.endpoint_id = d.endpoint_id AND p.state = 0) \
     ON CONFLICT (endpoint_id) DO UPDATE SET due_ms = excluded.due_ms \
         WHERE excluded.due_ms < due_endpoints.due_ms";
const INSERT_ATTEMPT: &str = "INSERT INTO attempts (delivery_id, started_at_ms, duration_ms, \
     status, error_kind, response) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

/// Store a batch; also returns the endpoints given work.
pub(in crate::store::sqlite) fn enqueue(
    c: &Connection,
    messages: &[NewMessage],
    now_ms: i64,
) -> StoreResult<(Vec<Enqueued>, HashSet<String>)> {
    let mut out = Vec::with_capacity(messages.len());
    let mut subscribers: HashMap<(&str, &str), Vec<String>> = HashMap::new();
    let mut find_key = c
        .prepare_cached(
            "SELECT id, event_type = ?3 AND payload = ?4 FROM messages \
             WHERE tenant_id = ?1 AND idempotency_key = ?2",
        )
        .map_err(db)?;
    let mut insert_message = c
        .prepare_cached(
            "INSERT INTO messages (id, tenant_id, event_type, payload, idempotency_key, \
             created_at_ms, traceparent, tracestate) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )
        .map_err(db)?;
    let mut insert_delivery = c
        .prepare_cached(
            "INSERT INTO deliveries (message_id, endpoint_id, tenant_id, state, attempts, \
             visible_at_ms, created_at_ms, updated_at_ms) VALUES (?1, ?2, ?3, 0, 0, ?4, ?4, ?4)",
        )
        .map_err(db)?;
    // Endpoints given work by this batch, each marked due once (see migration 3), with their
    // tenant (the due-tenant row follows by trigger, see migration 6).
    let mut due: HashMap<String, String> = HashMap::new();
    let mut mark_due = |endpoint: &String, tenant: &String| {
        if !due.contains_key(endpoint) {
            due.insert(endpoint.clone(), tenant.clone());
        }
    };
    for m in messages {
        if let Some(key) = &m.idempotency_key {
            let existing: Option<(String, bool)> = find_key
                .query_row([&m.tenant_id, key, &m.event_type, &m.payload], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .optional()
                .map_err(db)?;
            if let Some((id, same)) = existing {
                out.push(Enqueued::repeat(id, same));
                continue;
            }
        }
        insert_message
            .execute(params![
                m.id,
                m.tenant_id,
                m.event_type,
                m.payload,
                m.idempotency_key,
                now_ms,
                m.traceparent,
                m.tracestate
            ])
            .map_err(db)?;
        let mut deliveries = 0;
        if let Some(only) = &m.only_endpoint {
            insert_delivery
                .execute(params![m.id, only, m.tenant_id, now_ms])
                .map_err(db)?;
            mark_due(only, &m.tenant_id);
            deliveries = 1;
        } else {
            let key = (m.tenant_id.as_str(), m.event_type.as_str());
            let targets = match subscribers.entry(key) {
                Entry::Occupied(found) => found.into_mut(),
                Entry::Vacant(slot) => slot.insert(subscribers_of(c, key.0, key.1)?),
            };
            for endpoint in targets.iter() {
                insert_delivery
                    .execute(params![m.id, endpoint, m.tenant_id, now_ms])
                    .map_err(db)?;
                mark_due(endpoint, &m.tenant_id);
                deliveries += 1;
            }
        }
        out.push(Enqueued::created(m.id.clone(), deliveries));
    }
    let mut upsert = c
        .prepare_cached(
            "INSERT INTO due_endpoints (endpoint_id, tenant_id, due_ms) VALUES (?1, ?2, ?3) \
             ON CONFLICT (endpoint_id) DO UPDATE SET due_ms = excluded.due_ms \
                 WHERE excluded.due_ms < due_endpoints.due_ms",
        )
        .map_err(db)?;
    for (endpoint, tenant) in &due {
        upsert
            .execute(params![endpoint, tenant, now_ms])
            .map_err(db)?;
    }
    Ok((out, due.into_keys().collect()))
}

/// The enabled endpoints of `tenant` whose filters match `event_type`, through the fan-out index:
/// one index lookup per candidate pattern, so the cost is the subscribers, not the tenant's
/// endpoints. No endpoint is stored under two patterns that match one type (see
/// [`subscriptions::patterns`]), so nothing is found twice.
fn subscribers_of(c: &Connection, tenant: &str, event_type: &str) -> StoreResult<Vec<String>> {
    let mut s = c
        .prepare_cached(
            "SELECT s.endpoint_id FROM subscriptions s JOIN endpoints e ON e.id = s.endpoint_id \
             WHERE s.tenant_id = ?1 AND s.pattern = ?2 AND e.enabled = 1 AND e.operational = 0",
        )
        .map_err(db)?;
    let mut out = Vec::new();
    for pattern in subscriptions::candidates(event_type) {
        let rows = s
            .query_map(params![tenant, pattern.as_ref()], |r| r.get::<_, String>(0))
            .map_err(db)?;
        for id in rows {
            out.push(id.map_err(db)?);
        }
    }
    Ok(out)
}

pub(in crate::store::sqlite) fn settle(
    c: &Connection,
    settlements: &[Settlement],
    now_ms: i64,
) -> StoreResult<Vec<i64>> {
    let mut update = c.prepare_cached(SETTLE).map_err(db)?;
    let mut insert = c.prepare_cached(INSERT_ATTEMPT).map_err(db)?;
    let mut fifo_next = c.prepare_cached(FIFO_NEXT).map_err(db)?;
    let mut applied = Vec::with_capacity(settlements.len());
    for s in settlements {
        let row = SettleRow::of(s, now_ms);
        let n = update
            .execute(params![
                row.state,
                row.visible_at_ms,
                row.attempts_added,
                row.last_status,
                row.last_error,
                now_ms,
                row.touches_last,
                s.delivery_id,
                s.lease_token
            ])
            .map_err(db)?;
        if n == 0 {
            continue;
        }
        applied.push(s.delivery_id);
        if row.state != DeliveryState::Ready.code() {
            fifo_next
                .execute(params![s.delivery_id, now_ms])
                .map_err(db)?;
        }
        if let Some(a) = &s.attempt {
            insert
                .execute(params![
                    s.delivery_id,
                    a.started_at_ms,
                    a.duration_ms,
                    a.status,
                    a.error_kind,
                    a.response
                ])
                .map_err(db)?;
        }
    }
    Ok(applied)
}

pub(in crate::store::sqlite) fn extend_lease(
    c: &Connection,
    id: i64,
    token: i64,
    until_ms: i64,
) -> StoreResult<bool> {
    let n = c
        .execute(
            "UPDATE deliveries SET lease_until_ms = ?3 WHERE id = ?1 AND lease_token = ?2 \
             AND state = 1",
            params![id, token, until_ms],
        )
        .map_err(db)?;
    Ok(n > 0)
}

/// Most deliveries one retention batch deletes here, whatever the caller asks: a batch holds the
/// one writer every enqueue, claim and settle waits for (250 at a time doubled the claim p99
/// beside a purge of months of history; 64 take about a millisecond).
const PURGE_BATCH_MAX: u32 = 64;

pub(in crate::store::sqlite) fn purge(
    c: &Connection,
    request: &PurgeRequest,
) -> StoreResult<PurgeReport> {
    let limit = i64::from(request.limit.clamp(1, PURGE_BATCH_MAX));
    let rows: Vec<(i64, String)> = {
        let mut s = c
            .prepare_cached(
                "SELECT id, message_id FROM deliveries INDEXED BY deliveries_message \
                 WHERE message_id >= ?1 AND message_id < ?2 AND state = 2 AND updated_at_ms < ?3 \
                 ORDER BY message_id LIMIT ?4",
            )
            .map_err(db)?;
        let rows = s
            .query_map(
                params![
                    request.after,
                    request.id_ceiling(),
                    request.before_ms,
                    limit
                ],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)?
    };
    let next = (rows.len() as i64 >= limit)
        .then(|| rows.last().map(|(_, m)| m.clone()))
        .flatten();
    let mut attempts = c
        .prepare_cached("DELETE FROM attempts WHERE delivery_id = ?1")
        .map_err(db)?;
    let mut deliveries = c
        .prepare_cached("DELETE FROM deliveries WHERE id = ?1")
        .map_err(db)?;
    for (id, _) in &rows {
        attempts.execute([id]).map_err(db)?;
        deliveries.execute([id]).map_err(db)?;
    }
    let messages = c
        .prepare_cached(
            "DELETE FROM messages WHERE id >= ?1 AND id <= ?2 AND created_at_ms < ?3 \
             AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = messages.id)",
        )
        .map_err(db)?
        .execute(params![
            request.after,
            request.messages_up_to(next.as_deref()),
            request.before_ms
        ])
        .map_err(db)?;
    Ok(PurgeReport {
        deliveries: rows.len() as u64,
        messages: messages as u64,
        next,
    })
}

/// FIFO endpoints whose head the reaper just dead-lettered as poison: due again when anything
/// waits behind them (rare, so a walk of the FIFO endpoints is cheap enough).
const FIFO_AFTER_POISON: &str = "INSERT INTO due_endpoints (endpoint_id, tenant_id, due_ms) \
     SELECT e.id, e.tenant_id, ?1 FROM endpoints e WHERE e.ordering = 1 AND e.enabled = 1 \
       AND NOT EXISTS (SELECT 1 FROM deliveries p WHERE p.endpoint_id = e.id AND p.state = 1) \
       AND EXISTS (SELECT 1 FROM deliveries p WHERE p.endpoint_id = e.id AND p.state = 0) \
     ON CONFLICT (endpoint_id) DO NOTHING";

pub(in crate::store::sqlite) fn reap(
    c: &Connection,
    now_ms: i64,
    max_expiries: u32,
) -> StoreResult<ReapReport> {
    let dead = c
        .execute(
            "UPDATE deliveries SET state = 3, lease_until_ms = NULL, lease_token = NULL, \
             expiries = expiries + 1, updated_at_ms = ?1, \
             last_error = 'lease expired ' || (expiries + 1) || ' times (poison message)' \
             WHERE state = 1 AND lease_until_ms < ?1 AND expiries + 1 >= ?2",
            params![now_ms, max_expiries],
        )
        .map_err(db)?;
    if dead > 0 {
        c.prepare_cached(FIFO_AFTER_POISON)
            .and_then(|mut s| s.execute([now_ms]))
            .map_err(db)?;
    }
    let returned = c
        .execute(
            "UPDATE deliveries SET state = 0, visible_at_ms = ?1, lease_until_ms = NULL, \
             lease_token = NULL, expiries = expiries + 1, updated_at_ms = ?1 \
             WHERE state = 1 AND lease_until_ms < ?1",
            [now_ms],
        )
        .map_err(db)?;
    Ok(ReapReport {
        returned: returned as u64,
        dead: dead as u64,
    })
}

/// Ready now, attempts reset; `?1` is the time, `?2` the reason.
const MAKE_READY: &str = "UPDATE deliveries SET state = 0, attempts = 0, expiries = 0, \
    visible_at_ms = ?1, last_error = ?2, updated_at_ms = ?1";

pub(in crate::store::sqlite) fn replay(
    c: &Connection,
    tenant: &str,
    target: &ReplayTarget,
    now_ms: i64,
) -> StoreResult<u64> {
    let reason = target.reason();
    let n = match target {
        ReplayTarget::Delivery(id) | ReplayTarget::Resend(id) => {
            let state: Option<i64> = c
                .query_row(
                    "SELECT state FROM deliveries WHERE id = ?1 AND tenant_id = ?2",
                    params![id, tenant],
                    |r| r.get(0),
                )
                .optional()
                .map_err(db)?;
            let state = state
                .map(DeliveryState::from_code)
                .ok_or(StoreError::NotFound("delivery"))?;
            let allowed = replayable(target, state)?;
            c.execute(
                &format!("{MAKE_READY} WHERE id = ?3 AND tenant_id = ?4 AND state IN ({allowed})"),
                params![now_ms, reason, id, tenant],
            )
        }
        ReplayTarget::Endpoint(endpoint) => {
            endpoint_owned(c, tenant, endpoint)?;
            c.execute(
                &format!("{MAKE_READY} WHERE endpoint_id = ?3 AND tenant_id = ?4 AND state = 3"),
                params![now_ms, reason, endpoint, tenant],
            )
        }
        ReplayTarget::Recover {
            endpoint,
            since_ms,
            until_ms,
        } => {
            endpoint_owned(c, tenant, endpoint)?;
            c.execute(
                &format!(
                    "{MAKE_READY} WHERE endpoint_id = ?3 AND tenant_id = ?4 \
                     AND created_at_ms >= ?5 AND created_at_ms < ?6 \
                     AND (state = 3 OR (state = 0 AND attempts > 0))"
                ),
                params![now_ms, reason, endpoint, tenant, since_ms, until_ms],
            )
        }
    }
    .map_err(db)?;
    Ok(n as u64)
}

pub(in crate::store::sqlite) fn queue_stats(
    c: &Connection,
    now_ms: i64,
) -> StoreResult<QueueStats> {
    let (ready, leased, dead) = c
        .prepare_cached(crate::store::QUEUE_COUNTS)
        .map_err(db)?
        .query_row([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })
        .map_err(db)?;
    let mut stats = QueueStats {
        ready: ready as u64,
        leased: leased as u64,
        dead: dead as u64,
        ..QueueStats::default()
    };
    let mut s = c
        .prepare_cached(crate::store::OLDEST_READY_BY_TENANT)
        .map_err(db)?;
    let rows = s
        .query_map([now_ms], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Option<i64>>(1)?))
        })
        .map_err(db)?;
    for row in rows {
        let (tenant, oldest) = row.map_err(db)?;
        stats
            .oldest_ready_age_ms
            .push((tenant, crate::store::waited_ms(now_ms, oldest)));
    }
    Ok(stats)
}

pub(in crate::store::sqlite) fn delivered_count(c: &Connection) -> StoreResult<u64> {
    c.prepare_cached("SELECT COUNT(*) FROM deliveries WHERE state = 2")
        .map_err(db)?
        .query_row([], |r| r.get::<_, i64>(0))
        .map(|n| n as u64)
        .map_err(db)
}
