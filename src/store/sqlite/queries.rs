//! The SQLite driver's statements. Each function runs inside the caller's savepoint (writes) or
//! on a reader connection (reads); none of them opens or commits a transaction itself.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::db;
use crate::store::*;

const ENDPOINT_COLUMNS: &str = "id, tenant_id, url, description, event_types, secret, \
    previous_secret, previous_secret_until_ms, enabled, disabled_reason, operational, lane_size, \
    latency_ceiling_ms, connect_timeout_ms, read_timeout_ms, total_timeout_ms, failing_since_ms, \
    created_at_ms, updated_at_ms, headers, tls, oauth2, rate_per_second, rate_burst, ordering";

const DELIVERY_COLUMNS: &str = "id, message_id, endpoint_id, state, attempts, visible_at_ms, \
    last_status, last_error, created_at_ms, updated_at_ms";

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

pub(super) fn setting(c: &Connection, key: &str) -> StoreResult<Option<String>> {
    c.prepare_cached("SELECT value FROM settings WHERE key = ?1")
        .and_then(|mut s| s.query_row([key], |r| r.get(0)).optional())
        .map_err(db)
}

pub(super) fn set_setting(c: &Connection, key: &str, value: &str) -> StoreResult<()> {
    c.execute(
        "INSERT INTO settings (key, value) VALUES (?1, ?2) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [key, value],
    )
    .map_err(db)?;
    Ok(())
}

pub(super) fn delete_setting(c: &Connection, key: &str) -> StoreResult<bool> {
    let n = c
        .execute("DELETE FROM settings WHERE key = ?1", [key])
        .map_err(db)?;
    Ok(n > 0)
}

pub(super) fn delete_settings_between(c: &Connection, from: &str, to: &str) -> StoreResult<u64> {
    // TEXT keys compare with SQLite's default BINARY collation: bytewise.
    let n = c
        .execute(
            "DELETE FROM settings WHERE key >= ?1 AND key < ?2",
            [from, to],
        )
        .map_err(db)?;
    Ok(n as u64)
}

/// Insert `value` under `key` unless one is there; return whichever is stored.
pub(super) fn init_setting(c: &Connection, key: &str, value: &str) -> StoreResult<String> {
    c.execute(
        "INSERT INTO settings (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO NOTHING",
        [key, value],
    )
    .map_err(db)?;
    setting(c, key)?.ok_or(StoreError::NotFound("setting"))
}

/// Check there is room for `PROBE_ROOM_BYTES` more: pages for the blob come from the free list
/// or grow the file, which is where `max_page_count` or a full disk shows. Rolled back, so it
/// leaves nothing behind.
pub(super) fn probe_room(c: &Connection) -> StoreResult<()> {
    c.execute_batch("SAVEPOINT probe_room").map_err(db)?;
    let room = c
        .execute(
            "INSERT INTO settings (key, value) VALUES ('write_probe_room', zeroblob(?1))",
            [PROBE_ROOM_BYTES as i64],
        )
        .map_err(db);
    if room.is_err() && c.is_autocommit() {
        // SQLite rolled the whole transaction back (it does on SQLITE_FULL): nothing to undo.
        return room.map(|_| ());
    }
    c.execute_batch("ROLLBACK TO probe_room; RELEASE probe_room")
        .map_err(db)?;
    room.map(|_| ())
}

const TENANT_COLUMNS: &str = "id, name, token_hash, created_at_ms, weight, max_share";

fn tenant_row(r: &Row) -> rusqlite::Result<Tenant> {
    Ok(Tenant {
        id: r.get(0)?,
        name: r.get(1)?,
        token_hash: r.get(2)?,
        created_at_ms: r.get(3)?,
        share: SharePolicy {
            weight: r.get(4)?,
            max_share: r.get(5)?,
        },
    })
}

pub(super) fn create_tenant(c: &Connection, t: &Tenant) -> StoreResult<()> {
    c.execute(
        "INSERT INTO tenants (id, name, token_hash, created_at_ms, weight, max_share) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            t.id,
            t.name,
            t.token_hash,
            t.created_at_ms,
            t.share.weight,
            t.share.max_share
        ],
    )
    .map_err(db)?;
    Ok(())
}

pub(super) fn tenant(c: &Connection, id: &str) -> StoreResult<Tenant> {
    c.prepare_cached(&format!(
        "SELECT {TENANT_COLUMNS} FROM tenants WHERE id = ?1"
    ))
    .and_then(|mut s| s.query_row([id], tenant_row).optional())
    .map_err(db)?
    .ok_or(StoreError::NotFound("tenant"))
}

pub(super) fn tenant_by_token(c: &Connection, hash: &str) -> StoreResult<Option<Tenant>> {
    c.prepare_cached(&format!(
        "SELECT {TENANT_COLUMNS} FROM tenants WHERE token_hash = ?1"
    ))
    .and_then(|mut s| s.query_row([hash], tenant_row).optional())
    .map_err(db)
}

pub(super) fn set_tenant_share(c: &Connection, id: &str, share: &SharePolicy) -> StoreResult<()> {
    let n = c
        .execute(
            "UPDATE tenants SET weight = ?2, max_share = ?3 WHERE id = ?1",
            params![id, share.weight, share.max_share],
        )
        .map_err(db)?;
    if n == 0 {
        return Err(StoreError::NotFound("tenant"));
    }
    Ok(())
}

pub(super) fn list_tenants(c: &Connection, after: &str, limit: u32) -> StoreResult<Vec<Tenant>> {
    let mut s = c
        .prepare_cached(&format!(
            "SELECT {TENANT_COLUMNS} FROM tenants WHERE id > ?1 ORDER BY id LIMIT ?2"
        ))
        .map_err(db)?;
    let rows = s.query_map(params![after, limit], tenant_row).map_err(db)?;
    rows.collect::<Result<_, _>>().map_err(db)
}

pub(super) fn set_tenant_token(c: &Connection, id: &str, hash: &str) -> StoreResult<()> {
    let n = c
        .execute(
            "UPDATE tenants SET token_hash = ?2 WHERE id = ?1",
            [id, hash],
        )
        .map_err(db)?;
    if n == 0 {
        return Err(StoreError::NotFound("tenant"));
    }
    Ok(())
}

pub(super) fn delete_tenant(c: &Connection, id: &str) -> StoreResult<()> {
    c.execute(
        "DELETE FROM attempts WHERE delivery_id IN (SELECT id FROM deliveries WHERE tenant_id = ?1)",
        [id],
    )
    .map_err(db)?;
    for sql in [
        "DELETE FROM deliveries WHERE tenant_id = ?1",
        "DELETE FROM messages WHERE tenant_id = ?1",
        "DELETE FROM endpoint_events WHERE tenant_id = ?1",
        "DELETE FROM endpoints WHERE tenant_id = ?1",
        "DELETE FROM due_tenants WHERE tenant_id = ?1",
    ] {
        c.execute(sql, [id]).map_err(db)?;
    }
    let n = c
        .execute("DELETE FROM tenants WHERE id = ?1", [id])
        .map_err(db)?;
    if n == 0 {
        return Err(StoreError::NotFound("tenant"));
    }
    Ok(())
}

fn endpoint_row(r: &Row) -> rusqlite::Result<Endpoint> {
    let types: String = r.get(4)?;
    Ok(Endpoint {
        id: r.get(0)?,
        tenant_id: r.get(1)?,
        url: r.get(2)?,
        description: r.get(3)?,
        event_types: serde_json::from_str(&types).unwrap_or_default(),
        secret: r.get(5)?,
        previous_secret: r.get(6)?,
        previous_secret_until_ms: r.get(7)?,
        enabled: r.get(8)?,
        disabled_reason: r.get(9)?,
        operational: r.get(10)?,
        lane_size: r.get(11)?,
        latency_ceiling_ms: r.get(12)?,
        connect_timeout_ms: r.get(13)?,
        read_timeout_ms: r.get(14)?,
        total_timeout_ms: r.get(15)?,
        failing_since_ms: r.get(16)?,
        created_at_ms: r.get(17)?,
        updated_at_ms: r.get(18)?,
        headers: serde_json::from_str(&r.get::<_, String>(19)?).unwrap_or_default(),
        tls: EndpointTls::from_column(r.get::<_, Option<String>>(20)?.as_deref()),
        oauth2: oauth2_from_column(r.get::<_, Option<String>>(21)?.as_deref()),
        rate_limit: rate_limit_from_columns(r.get(22)?, r.get(23)?),
        ordering: DeliveryOrder::from_code(r.get(24)?),
    })
}

fn event_types_json(e: &Endpoint) -> String {
    serde_json::to_string(&e.event_types).unwrap_or_else(|_| "[]".into())
}

fn headers_json(e: &Endpoint) -> String {
    serde_json::to_string(&e.headers).unwrap_or_else(|_| "{}".into())
}

pub(super) fn create_endpoint(c: &Connection, e: &Endpoint) -> StoreResult<()> {
    c.execute(
        &format!(
            "INSERT INTO endpoints ({ENDPOINT_COLUMNS}) VALUES \
             (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, \
             ?20, ?21, ?22, ?23, ?24, ?25)"
        ),
        params![
            e.id,
            e.tenant_id,
            e.url,
            e.description,
            event_types_json(e),
            e.secret,
            e.previous_secret,
            e.previous_secret_until_ms,
            e.enabled,
            e.disabled_reason,
            e.operational,
            e.lane_size,
            e.latency_ceiling_ms,
            e.connect_timeout_ms,
            e.read_timeout_ms,
            e.total_timeout_ms,
            e.failing_since_ms,
            e.created_at_ms,
            e.updated_at_ms,
            headers_json(e),
            e.tls.to_column(),
            oauth2_column(&e.oauth2),
            e.rate_limit.map(|l| l.per_second()),
            e.rate_limit.map(|l| l.burst()),
            e.ordering.code()
        ],
    )
    .map_err(db)?;
    subscribe(c, e)
}

/// Write the endpoint's rows of the fan-out index (see [`crate::store::subscriptions`]).
fn subscribe(c: &Connection, e: &Endpoint) -> StoreResult<()> {
    c.prepare_cached("DELETE FROM subscriptions WHERE endpoint_id = ?1")
        .and_then(|mut s| s.execute([&e.id]))
        .map_err(db)?;
    if e.operational {
        return Ok(());
    }
    let mut insert = c
        .prepare_cached(
            "INSERT INTO subscriptions (tenant_id, pattern, endpoint_id) VALUES (?1, ?2, ?3)",
        )
        .map_err(db)?;
    for pattern in subscriptions::patterns(&e.event_types) {
        insert
            .execute(params![e.tenant_id, pattern, e.id])
            .map_err(db)?;
    }
    Ok(())
}

pub(super) fn endpoint(c: &Connection, tenant: Option<&str>, id: &str) -> StoreResult<Endpoint> {
    let found = c
        .prepare_cached(&format!(
            "SELECT {ENDPOINT_COLUMNS} FROM endpoints WHERE id = ?1"
        ))
        .and_then(|mut s| s.query_row([id], endpoint_row).optional())
        .map_err(db)?;
    match found {
        Some(e) if tenant.is_none_or(|t| t == e.tenant_id) => Ok(e),
        _ => Err(StoreError::NotFound("endpoint")),
    }
}

pub(super) fn list_endpoints(
    c: &Connection,
    tenant: &str,
    after: &str,
    limit: u32,
) -> StoreResult<Vec<Endpoint>> {
    let mut s = c
        .prepare_cached(&format!(
            "SELECT {ENDPOINT_COLUMNS} FROM endpoints WHERE tenant_id = ?1 AND id > ?2 \
             ORDER BY id LIMIT ?3"
        ))
        .map_err(db)?;
    let rows = s
        .query_map(params![tenant, after, limit], endpoint_row)
        .map_err(db)?;
    rows.collect::<Result<_, _>>().map_err(db)
}

pub(super) fn update_endpoint(c: &Connection, e: &Endpoint) -> StoreResult<()> {
    let n = c
        .execute(
            "UPDATE endpoints SET url = ?3, description = ?4, event_types = ?5, secret = ?6, \
             previous_secret = ?7, previous_secret_until_ms = ?8, enabled = ?9, \
             disabled_reason = ?10, lane_size = ?11, latency_ceiling_ms = ?12, \
             connect_timeout_ms = ?13, read_timeout_ms = ?14, total_timeout_ms = ?15, \
             updated_at_ms = ?16, headers = ?17, tls = ?18, oauth2 = ?19, \
             rate_per_second = ?20, rate_burst = ?21, ordering = ?22 \
             WHERE id = ?1 AND tenant_id = ?2",
            params![
                e.id,
                e.tenant_id,
                e.url,
                e.description,
                event_types_json(e),
                e.secret,
                e.previous_secret,
                e.previous_secret_until_ms,
                e.enabled,
                e.disabled_reason,
                e.lane_size,
                e.latency_ceiling_ms,
                e.connect_timeout_ms,
                e.read_timeout_ms,
                e.total_timeout_ms,
                e.updated_at_ms,
                headers_json(e),
                e.tls.to_column(),
                oauth2_column(&e.oauth2),
                e.rate_limit.map(|l| l.per_second()),
                e.rate_limit.map(|l| l.burst()),
                e.ordering.code()
            ],
        )
        .map_err(db)?;
    if n == 0 {
        return Err(StoreError::NotFound("endpoint"));
    }
    refresh_due(c, &e.id, e.enabled)?;
    subscribe(c, e)
}

pub(super) fn delete_endpoint(c: &Connection, tenant: &str, id: &str) -> StoreResult<()> {
    let n = c
        .execute(
            "DELETE FROM endpoints WHERE id = ?1 AND tenant_id = ?2",
            [id, tenant],
        )
        .map_err(db)?;
    if n == 0 {
        return Err(StoreError::NotFound("endpoint"));
    }
    c.execute(
        "DELETE FROM attempts WHERE delivery_id IN (SELECT id FROM deliveries WHERE endpoint_id = ?1)",
        [id],
    )
    .map_err(db)?;
    c.execute("DELETE FROM deliveries WHERE endpoint_id = ?1", [id])
        .map_err(db)?;
    c.execute("DELETE FROM endpoint_events WHERE endpoint_id = ?1", [id])
        .map_err(db)?;
    Ok(())
}

pub(super) fn set_endpoint_enabled(
    c: &Connection,
    id: &str,
    enabled: bool,
    reason: Option<&str>,
    now_ms: i64,
) -> StoreResult<()> {
    let n = c
        .execute(
            "UPDATE endpoints SET enabled = ?2, disabled_reason = ?3, updated_at_ms = ?4, \
             failing_since_ms = CASE WHEN ?2 THEN NULL ELSE failing_since_ms END WHERE id = ?1",
            params![id, enabled, if enabled { None } else { reason }, now_ms],
        )
        .map_err(db)?;
    if n == 0 {
        return Err(StoreError::NotFound("endpoint"));
    }
    refresh_due(c, id, enabled)
}

/// A disabled endpoint leaves the due table (claims would only skip it); an enabled one is due
/// again from its earliest ready delivery.
fn refresh_due(c: &Connection, id: &str, enabled: bool) -> StoreResult<()> {
    let sql = if enabled {
        "INSERT INTO due_endpoints (endpoint_id, tenant_id, due_ms) \
         SELECT ?1, min(tenant_id), min(visible_at_ms) FROM deliveries \
         WHERE endpoint_id = ?1 AND state = 0 GROUP BY endpoint_id \
         ON CONFLICT (endpoint_id) DO UPDATE SET due_ms = excluded.due_ms \
             WHERE excluded.due_ms < due_endpoints.due_ms"
    } else {
        "DELETE FROM due_endpoints WHERE endpoint_id = ?1"
    };
    c.prepare_cached(sql)
        .and_then(|mut s| s.execute([id]))
        .map_err(db)?;
    Ok(())
}

pub(super) fn set_endpoint_failing(
    c: &Connection,
    id: &str,
    since_ms: Option<i64>,
) -> StoreResult<()> {
    c.execute(
        "UPDATE endpoints SET failing_since_ms = ?2 WHERE id = ?1",
        params![id, since_ms],
    )
    .map_err(db)?;
    Ok(())
}

/// Store a batch; also returns the endpoints given work.
pub(super) fn enqueue(
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
             created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
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
                now_ms
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

pub(super) fn message(c: &Connection, tenant: &str, id: &str) -> StoreResult<MessageView> {
    let found = c
        .prepare_cached(
            "SELECT id, event_type, payload, created_at_ms FROM messages \
             WHERE id = ?1 AND tenant_id = ?2",
        )
        .and_then(|mut s| {
            s.query_row([id, tenant], |r| {
                Ok(MessageView {
                    id: r.get(0)?,
                    event_type: r.get(1)?,
                    payload: r.get(2)?,
                    created_at_ms: r.get(3)?,
                    deliveries: Vec::new(),
                })
            })
            .optional()
        })
        .map_err(db)?;
    let mut view = found.ok_or(StoreError::NotFound("message"))?;
    view.deliveries = list_deliveries(
        c,
        &DeliveryFilter {
            tenant_id: tenant.to_owned(),
            message_id: Some(id.to_owned()),
            limit: 10_000,
            ..Default::default()
        },
    )?;
    Ok(view)
}

pub(super) fn list_messages(c: &Connection, f: &MessageFilter) -> StoreResult<Vec<MessageSummary>> {
    let (sql, params) = f.statement(|n| format!("?{n}"));
    let values: Vec<rusqlite::types::Value> = params
        .into_iter()
        .map(|p| match p {
            message_log::Param::Text(t) => rusqlite::types::Value::Text(t),
            message_log::Param::Int(n) => rusqlite::types::Value::Integer(n),
        })
        .collect();
    let mut s = c.prepare_cached(&sql).map_err(db)?;
    let rows = s
        .query_map(rusqlite::params_from_iter(values), |r| {
            Ok(MessageSummary {
                id: r.get(0)?,
                event_type: r.get(1)?,
                created_at_ms: r.get(2)?,
            })
        })
        .map_err(db)?;
    rows.collect::<Result<_, _>>().map_err(db)
}

pub(super) fn settle(
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

pub(super) fn extend_lease(
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

pub(super) fn purge(c: &Connection, before_ms: i64, limit: u32) -> StoreResult<u64> {
    let ids: Vec<i64> = {
        let mut s = c
            .prepare_cached(
                "SELECT id FROM deliveries WHERE state = 2 AND updated_at_ms < ?1 LIMIT ?2",
            )
            .map_err(db)?;
        let rows = s
            .query_map(params![before_ms, limit], |r| r.get(0))
            .map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)?
    };
    let mut attempts = c
        .prepare_cached("DELETE FROM attempts WHERE delivery_id = ?1")
        .map_err(db)?;
    let mut deliveries = c
        .prepare_cached("DELETE FROM deliveries WHERE id = ?1")
        .map_err(db)?;
    for id in &ids {
        attempts.execute([id]).map_err(db)?;
        deliveries.execute([id]).map_err(db)?;
    }
    c.execute(
        "DELETE FROM messages WHERE created_at_ms < ?1 \
         AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = messages.id)",
        [before_ms],
    )
    .map_err(db)?;
    Ok(ids.len() as u64)
}

/// FIFO endpoints whose head the reaper just dead-lettered as poison: due again when anything
/// waits behind them (rare, so a walk of the FIFO endpoints is cheap enough).
const FIFO_AFTER_POISON: &str = "INSERT INTO due_endpoints (endpoint_id, tenant_id, due_ms) \
     SELECT e.id, e.tenant_id, ?1 FROM endpoints e WHERE e.ordering = 1 AND e.enabled = 1 \
       AND NOT EXISTS (SELECT 1 FROM deliveries p WHERE p.endpoint_id = e.id AND p.state = 1) \
       AND EXISTS (SELECT 1 FROM deliveries p WHERE p.endpoint_id = e.id AND p.state = 0) \
     ON CONFLICT (endpoint_id) DO NOTHING";

pub(super) fn reap(c: &Connection, now_ms: i64, max_expiries: u32) -> StoreResult<ReapReport> {
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

/// Columns: id, delivery_id, started_at_ms, duration_ms, status, error_kind, response.
fn attempt_row(r: &Row) -> rusqlite::Result<AttemptView> {
    Ok(AttemptView {
        id: r.get(0)?,
        delivery_id: r.get(1)?,
        started_at_ms: r.get(2)?,
        duration_ms: r.get(3)?,
        status: r.get(4)?,
        error_kind: r.get(5)?,
        response: r.get(6)?,
    })
}

fn delivery_row(r: &Row) -> rusqlite::Result<DeliveryView> {
    Ok(DeliveryView {
        id: r.get(0)?,
        message_id: r.get(1)?,
        endpoint_id: r.get(2)?,
        state: DeliveryState::from_code(r.get(3)?),
        attempts: r.get(4)?,
        visible_at_ms: r.get(5)?,
        last_status: r.get(6)?,
        last_error: r.get(7)?,
        created_at_ms: r.get(8)?,
        updated_at_ms: r.get(9)?,
    })
}

pub(super) fn list_deliveries(
    c: &Connection,
    f: &DeliveryFilter,
) -> StoreResult<Vec<DeliveryView>> {
    let scope = match (&f.message_id, &f.endpoint_id) {
        (Some(_), _) => "message_id = ?1 AND (?2 IS NULL OR endpoint_id = ?2)",
        (None, Some(_)) => "endpoint_id = ?2 AND ?1 IS NULL",
        (None, None) => "?1 IS NULL AND ?2 IS NULL",
    };
    let sql = format!(
        "SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE {scope} AND tenant_id = ?3 \
         AND (?4 IS NULL OR state = ?4) AND id > ?5 ORDER BY id LIMIT ?6"
    );
    let mut s = c.prepare_cached(&sql).map_err(db)?;
    let rows = s
        .query_map(
            params![
                f.message_id,
                f.endpoint_id,
                f.tenant_id,
                f.state.map(DeliveryState::code),
                f.after.unwrap_or(0),
                f.limit
            ],
            delivery_row,
        )
        .map_err(db)?;
    rows.collect::<Result<_, _>>().map_err(db)
}

pub(super) fn attempts(
    c: &Connection,
    tenant: &str,
    delivery_id: i64,
) -> StoreResult<Vec<AttemptView>> {
    let owned: Option<i64> = c
        .prepare_cached("SELECT id FROM deliveries WHERE id = ?1 AND tenant_id = ?2")
        .and_then(|mut s| {
            s.query_row(params![delivery_id, tenant], |r| r.get(0))
                .optional()
        })
        .map_err(db)?;
    if owned.is_none() {
        return Err(StoreError::NotFound("delivery"));
    }
    let mut s = c
        .prepare_cached(
            "SELECT id, delivery_id, started_at_ms, duration_ms, status, error_kind, response \
             FROM attempts WHERE delivery_id = ?1 ORDER BY id",
        )
        .map_err(db)?;
    let rows = s.query_map([delivery_id], attempt_row).map_err(db)?;
    rows.collect::<Result<_, _>>().map_err(db)
}

/// An endpoint's recent attempts, newest first (the status fallback and the attempts list).
const ENDPOINT_ATTEMPTS: &str = "SELECT a.id, a.delivery_id, a.started_at_ms, a.duration_ms, \
    a.status, a.error_kind, a.response FROM attempts a JOIN deliveries d ON d.id = a.delivery_id \
    WHERE d.endpoint_id = ?1 AND d.tenant_id = ?2 AND a.started_at_ms >= ?3 AND a.id < ?4 \
    ORDER BY a.id DESC LIMIT ?5";

pub(super) fn endpoint_attempts(
    c: &Connection,
    tenant: &str,
    endpoint: &str,
    since_ms: i64,
    before: Option<i64>,
    limit: u32,
) -> StoreResult<Vec<AttemptView>> {
    let mut s = c.prepare_cached(ENDPOINT_ATTEMPTS).map_err(db)?;
    let before = before.unwrap_or(i64::MAX);
    let rows = s
        .query_map(
            params![endpoint, tenant, since_ms, before, limit],
            attempt_row,
        )
        .map_err(db)?;
    rows.collect::<Result<_, _>>().map_err(db)
}

/// Ready now, attempts reset; `?1` is the time, `?2` the reason.
const MAKE_READY: &str = "UPDATE deliveries SET state = 0, attempts = 0, expiries = 0, \
    visible_at_ms = ?1, last_error = ?2, updated_at_ms = ?1";

pub(super) fn replay(
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
            let allowed = replayable(target, *id, state)?;
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

fn endpoint_owned(c: &Connection, tenant: &str, endpoint: &str) -> StoreResult<()> {
    let owned: Option<i64> = c
        .query_row(
            "SELECT 1 FROM endpoints WHERE id = ?1 AND tenant_id = ?2",
            [endpoint, tenant],
            |r| r.get(0),
        )
        .optional()
        .map_err(db)?;
    owned.map(|_| ()).ok_or(StoreError::NotFound("endpoint"))
}

pub(super) fn record_event(c: &Connection, e: &EndpointEvent) -> StoreResult<()> {
    c.execute(
        "INSERT INTO endpoint_events (tenant_id, endpoint_id, kind, detail, at_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![e.tenant_id, e.endpoint_id, e.kind, e.detail, e.at_ms],
    )
    .map_err(db)?;
    Ok(())
}

pub(super) fn list_events(
    c: &Connection,
    tenant: &str,
    endpoint: &str,
    limit: u32,
) -> StoreResult<Vec<EndpointEvent>> {
    endpoint_owned(c, tenant, endpoint)?;
    let mut s = c
        .prepare_cached(
            "SELECT tenant_id, endpoint_id, kind, detail, at_ms FROM endpoint_events \
             WHERE endpoint_id = ?1 ORDER BY id DESC LIMIT ?2",
        )
        .map_err(db)?;
    let rows = s
        .query_map(params![endpoint, limit], |r| {
            Ok(EndpointEvent {
                tenant_id: r.get(0)?,
                endpoint_id: r.get(1)?,
                kind: r.get(2)?,
                detail: r.get(3)?,
                at_ms: r.get(4)?,
            })
        })
        .map_err(db)?;
    rows.collect::<Result<_, _>>().map_err(db)
}

pub(super) fn queue_stats(c: &Connection, now_ms: i64) -> StoreResult<QueueStats> {
    let mut stats = QueueStats::default();
    let mut s = c
        .prepare_cached("SELECT state, COUNT(*) FROM deliveries GROUP BY state")
        .map_err(db)?;
    let mut rows = s.query([]).map_err(db)?;
    while let Some(r) = rows.next().map_err(db)? {
        let n: i64 = r.get(1).map_err(db)?;
        match DeliveryState::from_code(r.get(0).map_err(db)?) {
            DeliveryState::Ready => stats.ready = n as u64,
            DeliveryState::Leased => stats.leased = n as u64,
            DeliveryState::Delivered => stats.delivered = n as u64,
            DeliveryState::Dead => stats.dead = n as u64,
        }
    }
    // One index probe per enabled endpoint: cost grows with endpoints, not with the backlog.
    let mut s = c
        .prepare_cached(
            "SELECT e.tenant_id, MIN((SELECT MIN(d.visible_at_ms) FROM deliveries d \
             WHERE d.state = 0 AND d.endpoint_id = e.id AND d.visible_at_ms <= ?1)) \
             FROM endpoints e WHERE e.enabled = 1 GROUP BY e.tenant_id",
        )
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
            .push((tenant, oldest.map_or(0, |t| (now_ms - t).max(0))));
    }
    Ok(stats)
}

/// Ready deliveries of one endpoint, due or not (counted on the `deliveries_ready` index).
const ENDPOINT_WAITING: &str =
    "SELECT count(*) FROM deliveries WHERE endpoint_id = ?1 AND state = 0";

pub(super) fn fifo_head(c: &Connection, id: &str) -> StoreResult<Option<DeliveryView>> {
    c.prepare_cached(&format!(
        "SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE endpoint_id = ?1 AND state IN (0, 1) \
         ORDER BY id LIMIT 1"
    ))
    .and_then(|mut s| s.query_row([id], delivery_row).optional())
    .map_err(db)
}

pub(super) fn endpoint_waiting(c: &Connection, id: &str) -> StoreResult<u64> {
    let n: i64 = c
        .prepare_cached(ENDPOINT_WAITING)
        .and_then(|mut s| s.query_row([id], |r| r.get(0)))
        .map_err(db)?;
    Ok(n.max(0) as u64)
}

pub(super) fn tenant_backlog(c: &Connection, id: &str, now_ms: i64) -> StoreResult<TenantBacklog> {
    let (due_endpoints, oldest): (i64, Option<i64>) = c
        .prepare_cached(
            "SELECT count(*), min((SELECT min(d.visible_at_ms) FROM deliveries d \
             WHERE d.state = 0 AND d.endpoint_id = q.endpoint_id AND d.visible_at_ms <= ?2)) \
             FROM due_endpoints q WHERE q.tenant_id = ?1 AND q.due_ms <= ?2",
        )
        .and_then(|mut s| s.query_row(params![id, now_ms], |r| Ok((r.get(0)?, r.get(1)?))))
        .map_err(db)?;
    let tenants_due: i64 = c
        .prepare_cached("SELECT count(*) FROM due_tenants WHERE due_ms <= ?1")
        .and_then(|mut s| s.query_row([now_ms], |r| r.get(0)))
        .map_err(db)?;
    Ok(TenantBacklog {
        due_endpoints: due_endpoints as u64,
        oldest_ready_age_ms: oldest.map_or(0, |t| (now_ms - t).max(0)),
        tenants_due: tenants_due as u64,
    })
}
