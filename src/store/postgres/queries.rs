//! The PostgreSQL driver's statements, each run on a pooled client or inside the caller's
//! transaction. Batches travel as arrays (`unnest`) so one round trip serves many rows.

use std::collections::{HashMap, HashSet};

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use super::{WORK_CHANNEL, pg};
use crate::store::*;

const ENDPOINT_COLUMNS: &str = "id, tenant_id, url, description, event_types, secret, \
    previous_secret, previous_secret_until_ms, enabled, disabled_reason, operational, lane_size, \
    latency_ceiling_ms, connect_timeout_ms, read_timeout_ms, total_timeout_ms, failing_since_ms, \
    created_at_ms, updated_at_ms, headers, tls, oauth2, rate_per_second, rate_burst, ordering";

const DELIVERY_COLUMNS: &str = "id, message_id, endpoint_id, state, attempts, visible_at_ms, \
    last_status, last_error, created_at_ms, updated_at_ms";

/// Apply a batch of outcomes in one statement (so a refused batch changes nothing). A settle
/// ends its lease normally, so it also ends any run of lease expiries (`expiries = 0`). A lease
/// token is set only while a delivery is leased (every way out of the lease clears it), so the
/// token alone fences; rows are found by primary key (`id = ANY($1)`), whatever the statistics.
/// Rows made ready again (retries, sheds, releases) mark their endpoints due in the same
/// statement (`due`, one row whatever it marks, so it always runs).
const SETTLE: &str = "WITH v AS ( \
        SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], \
                             $5::bigint[], $6::bool[], $7::bigint[], $8::text[]) \
            AS v(id, token, state, visible, inc, touch, status, error) \
    ), upd AS ( \
        UPDATE deliveries d SET state = v.state, \
            visible_at_ms = COALESCE(v.visible, d.visible_at_ms), \
            attempts = d.attempts + v.inc, lease_until_ms = NULL, lease_token = NULL, expiries = 0, \
            last_status = CASE WHEN v.touch THEN v.status ELSE d.last_status END, \
            last_error = CASE WHEN v.touch THEN v.error ELSE d.last_error END, \
            updated_at_ms = $9 \
        FROM v WHERE d.id = ANY($1) AND d.id = v.id AND d.lease_token = v.token \
        RETURNING d.id, d.endpoint_id, d.tenant_id, d.state, d.visible_at_ms \
    ), ins AS ( \
        INSERT INTO attempts (delivery_id, started_at_ms, duration_ms, status, error_kind, response) \
        SELECT a.id, a.started, a.duration, a.status, a.kind, a.response \
        FROM unnest($10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[], $14::text[], \
                    $15::text[]) AS a(id, started, duration, status, kind, response) \
        JOIN upd ON upd.id = a.id \
    ), due AS ( \
        SELECT sluice_mark_work_due(array_agg(endpoint_id), array_agg(tenant_id), \
            array_agg(CASE WHEN state = 0 THEN visible_at_ms ELSE $9 END)) \
        FROM upd WHERE state = 0 OR (state IN (2, 3) \
            AND (SELECT e.ordering FROM endpoints e WHERE e.id = upd.endpoint_id) = 1 \
            AND EXISTS (SELECT 1 FROM deliveries p \
                WHERE p.endpoint_id = upd.endpoint_id AND p.state = 0)) \
    ) SELECT upd.id FROM upd, due";

/// An enqueue batch in one statement, committed on its own: the messages (a repeated
/// idempotency key keeps the original and inserts nothing), then one delivery per (new message,
/// subscribed enabled endpoint) through the fan-out index (one row per message and candidate
/// pattern in; no endpoint has two patterns matching one type, see [`subscriptions::patterns`],
/// so nothing is de-duplicated), and one per message addressed to a single endpoint. Returns
/// each new message's id (endpoint NULL), then each delivery's message and endpoint.
const ENQUEUE: &str = "WITH m AS ( \
        INSERT INTO messages (id, tenant_id, event_type, payload, idempotency_key, created_at_ms) \
        SELECT id, tenant_id, event_type, payload, key, $6 \
        FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) \
            AS m(id, tenant_id, event_type, payload, key) \
        ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING \
        RETURNING id \
    ), routed AS ( \
        INSERT INTO deliveries (message_id, endpoint_id, tenant_id, state, attempts, \
            visible_at_ms, created_at_ms, updated_at_ms) \
        SELECT c.id, s.endpoint_id, c.tenant_id, 0, 0, $6, $6, $6 \
        FROM unnest($7::text[], $8::text[], $9::text[]) AS c(id, tenant_id, pattern) \
        JOIN m ON m.id = c.id \
        JOIN subscriptions s ON s.tenant_id = c.tenant_id AND s.pattern = c.pattern \
        JOIN endpoints e ON e.id = s.endpoint_id AND e.enabled AND NOT e.operational \
        RETURNING message_id, endpoint_id \
    ), direct AS ( \
        INSERT INTO deliveries (message_id, endpoint_id, tenant_id, state, attempts, \
            visible_at_ms, created_at_ms, updated_at_ms) \
        SELECT x.id, x.endpoint_id, x.tenant_id, 0, 0, $6, $6, $6 \
        FROM unnest($10::text[], $11::text[], $12::text[]) AS x(id, endpoint_id, tenant_id) \
        JOIN m ON m.id = x.id \
        RETURNING message_id, endpoint_id \
    ) \
    SELECT id, NULL FROM m \
    UNION ALL SELECT message_id, endpoint_id FROM routed \
    UNION ALL SELECT message_id, endpoint_id FROM direct";

/// The originals of repeated idempotency keys, by the id the repeat was given, and whether each
/// repeat asks for the same thing (event type and payload byte for byte).
const FIND_KEYS: &str = "SELECT k.repeat, m.id, \
        m.event_type = k.event_type AND m.payload = k.payload FROM messages m \
    JOIN unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) \
        AS k(repeat, tenant_id, key, event_type, payload) \
      ON m.tenant_id = k.tenant_id AND m.idempotency_key = k.key";

/// Announce new work to every listening process; the payload names this one, whose own
/// listener ignores it (it was woken directly).
pub(super) async fn notify(c: &impl GenericClient, instance: &str) -> StoreResult<()> {
    c.execute("SELECT pg_notify($1, $2)", &[&WORK_CHANNEL, &instance])
        .await
        .map_err(pg)?;
    Ok(())
}

pub(super) async fn setting(c: &impl GenericClient, key: &str) -> StoreResult<Option<String>> {
    let row = c
        .query_opt("SELECT value FROM settings WHERE key = $1", &[&key])
        .await
        .map_err(pg)?;
    Ok(row.map(|r| r.get(0)))
}

pub(super) async fn set_setting(c: &impl GenericClient, key: &str, value: &str) -> StoreResult<()> {
    c.execute(
        "INSERT INTO settings (key, value) VALUES ($1, $2) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        &[&key, &value],
    )
    .await
    .map_err(pg)?;
    Ok(())
}

pub(super) async fn delete_setting(c: &impl GenericClient, key: &str) -> StoreResult<bool> {
    let n = c
        .execute("DELETE FROM settings WHERE key = $1", &[&key])
        .await
        .map_err(pg)?;
    Ok(n > 0)
}

pub(super) async fn delete_settings_between(
    c: &impl GenericClient,
    from: &str,
    to: &str,
) -> StoreResult<u64> {
    // COLLATE "C": bytewise, as on SQLite, whatever the database's locale.
    c.execute(
        "DELETE FROM settings WHERE key COLLATE \"C\" >= $1 AND key COLLATE \"C\" < $2",
        &[&from, &to],
    )
    .await
    .map_err(pg)
}

/// Insert `value` under `key` unless one is there, then read back whichever is stored. Two
/// statements on purpose: a single statement's snapshot would not see a row that a concurrent
/// insert committed while this one waited on it.
pub(super) async fn init_setting(
    c: &impl GenericClient,
    key: &str,
    value: &str,
) -> StoreResult<String> {
    c.execute(
        "INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
        &[&key, &value],
    )
    .await
    .map_err(pg)?;
    let row = c
        .query_one("SELECT value FROM settings WHERE key = $1", &[&key])
        .await
        .map_err(pg)?;
    Ok(row.get(0))
}

/// The write probe's room check: about `PROBE_ROOM_BYTES` of incompressible text (md5 hex), so
/// TOAST has to store it rather than compress it away. The caller rolls it back.
const PROBE_ROOM: &str = "INSERT INTO settings (key, value) \
    SELECT 'write_probe_room', string_agg(md5(random()::text || g::text), '') \
    FROM generate_series(1, $1::int) AS g";

/// Write (in the caller's transaction, to be rolled back) a row of `PROBE_ROOM_BYTES`.
pub(super) async fn probe_room(c: &impl GenericClient) -> StoreResult<()> {
    let md5s = (PROBE_ROOM_BYTES / 32) as i32;
    c.execute(PROBE_ROOM, &[&md5s]).await.map_err(pg)?;
    Ok(())
}

const TENANT_COLUMNS: &str = "id, name, token_hash, created_at_ms, weight, max_share";

fn tenant_row(r: &Row) -> Tenant {
    Tenant {
        id: r.get(0),
        name: r.get(1),
        token_hash: r.get(2),
        created_at_ms: r.get(3),
        share: SharePolicy {
            weight: r.get::<_, Option<i32>>(4).map(|w| w.max(0) as u32),
            max_share: r.get(5),
        },
    }
}

pub(super) async fn create_tenant(c: &impl GenericClient, t: &Tenant) -> StoreResult<()> {
    let weight = t.share.weight.map(|w| w.min(i32::MAX as u32) as i32);
    c.execute(
        "INSERT INTO tenants (id, name, token_hash, created_at_ms, weight, max_share) \
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[
            &t.id,
            &t.name,
            &t.token_hash,
            &t.created_at_ms,
            &weight,
            &t.share.max_share,
        ],
    )
    .await
    .map_err(pg)?;
    Ok(())
}

pub(super) async fn tenant(c: &impl GenericClient, id: &str) -> StoreResult<Tenant> {
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {TENANT_COLUMNS} FROM tenants WHERE id = $1"
        ))
        .await
        .map_err(pg)?;
    c.query_opt(&stmt, &[&id])
        .await
        .map_err(pg)?
        .map(|r| tenant_row(&r))
        .ok_or(StoreError::NotFound("tenant"))
}

pub(super) async fn tenant_by_token(
    c: &impl GenericClient,
    hash: &str,
) -> StoreResult<Option<Tenant>> {
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {TENANT_COLUMNS} FROM tenants WHERE token_hash = $1"
        ))
        .await
        .map_err(pg)?;
    let row = c.query_opt(&stmt, &[&hash]).await.map_err(pg)?;
    Ok(row.map(|r| tenant_row(&r)))
}

pub(super) async fn list_tenants(
    c: &impl GenericClient,
    after: &str,
    limit: u32,
) -> StoreResult<Vec<Tenant>> {
    let rows = c
        .query(
            &format!("SELECT {TENANT_COLUMNS} FROM tenants WHERE id > $1 ORDER BY id LIMIT $2"),
            &[&after, &i64::from(limit)],
        )
        .await
        .map_err(pg)?;
    Ok(rows.iter().map(tenant_row).collect())
}

pub(super) async fn set_tenant_share(
    c: &impl GenericClient,
    id: &str,
    share: &SharePolicy,
) -> StoreResult<()> {
    let weight = share.weight.map(|w| w.min(i32::MAX as u32) as i32);
    let n = c
        .execute(
            "UPDATE tenants SET weight = $2, max_share = $3 WHERE id = $1",
            &[&id, &weight, &share.max_share],
        )
        .await
        .map_err(pg)?;
    if n == 0 {
        return Err(StoreError::NotFound("tenant"));
    }
    Ok(())
}

/// Ready deliveries of one endpoint, due or not (counted on the `deliveries_ready` index).
const ENDPOINT_WAITING: &str =
    "SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND state = 0";

pub(super) async fn fifo_head(
    c: &impl GenericClient,
    id: &str,
) -> StoreResult<Option<DeliveryView>> {
    let row = c
        .query_opt(
            &format!(
                "SELECT {DELIVERY_COLUMNS} FROM deliveries \
                 WHERE endpoint_id = $1 AND state IN (0, 1) ORDER BY id LIMIT 1"
            ),
            &[&id],
        )
        .await
        .map_err(pg)?;
    Ok(row.as_ref().map(delivery_row))
}

pub(super) async fn endpoint_waiting(c: &impl GenericClient, id: &str) -> StoreResult<u64> {
    let row = c.query_one(ENDPOINT_WAITING, &[&id]).await.map_err(pg)?;
    Ok(row.get::<_, i64>(0).max(0) as u64)
}

pub(super) async fn tenant_backlog(
    c: &impl GenericClient,
    id: &str,
    now_ms: i64,
) -> StoreResult<TenantBacklog> {
    let row = c
        .query_one(
            "SELECT (SELECT count(*) FROM due_endpoints q WHERE q.tenant_id = $1 AND q.due_ms <= $2), \
                (SELECT min((SELECT min(d.visible_at_ms) FROM deliveries d \
                    WHERE d.state = 0 AND d.endpoint_id = q.endpoint_id AND d.visible_at_ms <= $2)) \
                 FROM due_endpoints q WHERE q.tenant_id = $1 AND q.due_ms <= $2), \
                (SELECT count(*) FROM due_tenants WHERE due_ms <= $2)",
            &[&id, &now_ms],
        )
        .await
        .map_err(pg)?;
    let oldest: Option<i64> = row.get(1);
    Ok(TenantBacklog {
        due_endpoints: row.get::<_, i64>(0) as u64,
        oldest_ready_age_ms: oldest.map_or(0, |t| (now_ms - t).max(0)),
        tenants_due: row.get::<_, i64>(2) as u64,
    })
}

pub(super) async fn set_tenant_token(
    c: &impl GenericClient,
    id: &str,
    hash: &str,
) -> StoreResult<()> {
    let n = c
        .execute(
            "UPDATE tenants SET token_hash = $2 WHERE id = $1",
            &[&id, &hash],
        )
        .await
        .map_err(pg)?;
    if n == 0 {
        return Err(StoreError::NotFound("tenant"));
    }
    Ok(())
}

pub(super) async fn delete_tenant(c: &impl GenericClient, id: &str) -> StoreResult<()> {
    for sql in [
        "DELETE FROM attempts WHERE delivery_id IN (SELECT id FROM deliveries WHERE tenant_id = $1)",
        "DELETE FROM deliveries WHERE tenant_id = $1",
        "DELETE FROM messages WHERE tenant_id = $1",
        "DELETE FROM endpoint_events WHERE tenant_id = $1",
        "DELETE FROM due_endpoints WHERE tenant_id = $1",
        "DELETE FROM due_tenants WHERE tenant_id = $1",
        "DELETE FROM endpoints WHERE tenant_id = $1",
    ] {
        c.execute(sql, &[&id]).await.map_err(pg)?;
    }
    let n = c
        .execute("DELETE FROM tenants WHERE id = $1", &[&id])
        .await
        .map_err(pg)?;
    if n == 0 {
        return Err(StoreError::NotFound("tenant"));
    }
    Ok(())
}

fn opt_u32(v: Option<i64>) -> Option<u32> {
    v.and_then(|x| u32::try_from(x).ok())
}

fn endpoint_row(r: &Row) -> Endpoint {
    let types: String = r.get(4);
    Endpoint {
        id: r.get(0),
        tenant_id: r.get(1),
        url: r.get(2),
        description: r.get(3),
        event_types: serde_json::from_str(&types).unwrap_or_default(),
        secret: r.get(5),
        previous_secret: r.get(6),
        previous_secret_until_ms: r.get(7),
        enabled: r.get(8),
        disabled_reason: r.get(9),
        operational: r.get(10),
        lane_size: opt_u32(r.get(11)),
        latency_ceiling_ms: opt_u32(r.get(12)),
        connect_timeout_ms: opt_u32(r.get(13)),
        read_timeout_ms: opt_u32(r.get(14)),
        total_timeout_ms: opt_u32(r.get(15)),
        failing_since_ms: r.get(16),
        created_at_ms: r.get(17),
        updated_at_ms: r.get(18),
        headers: serde_json::from_str(r.get::<_, &str>(19)).unwrap_or_default(),
        tls: EndpointTls::from_column(r.get(20)),
        oauth2: oauth2_from_column(r.get(21)),
        rate_limit: rate_limit_from_columns(r.get(22), r.get(23)),
        ordering: DeliveryOrder::from_code(i64::from(r.get::<_, i16>(24))),
    }
}

fn types_json(e: &Endpoint) -> String {
    serde_json::to_string(&e.event_types).unwrap_or_else(|_| "[]".into())
}

fn headers_json(e: &Endpoint) -> String {
    serde_json::to_string(&e.headers).unwrap_or_else(|_| "{}".into())
}

fn big(v: Option<u32>) -> Option<i64> {
    v.map(i64::from)
}

pub(super) async fn create_endpoint(c: &impl GenericClient, e: &Endpoint) -> StoreResult<()> {
    c.execute(
        &format!(
            "INSERT INTO endpoints ({ENDPOINT_COLUMNS}) VALUES \
             ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, \
             $20, $21, $22, $23, $24, $25)"
        ),
        &[
            &e.id,
            &e.tenant_id,
            &e.url,
            &e.description,
            &types_json(e),
            &e.secret,
            &e.previous_secret,
            &e.previous_secret_until_ms,
            &e.enabled,
            &e.disabled_reason,
            &e.operational,
            &big(e.lane_size),
            &big(e.latency_ceiling_ms),
            &big(e.connect_timeout_ms),
            &big(e.read_timeout_ms),
            &big(e.total_timeout_ms),
            &e.failing_since_ms,
            &e.created_at_ms,
            &e.updated_at_ms,
            &headers_json(e),
            &e.tls.to_column(),
            &oauth2_column(&e.oauth2),
            &e.rate_limit.map(|l| l.per_second()),
            &e.rate_limit.map(|l| i64::from(l.burst())),
            &(e.ordering.code() as i16),
        ],
    )
    .await
    .map_err(pg)?;
    subscribe(c, e).await
}

/// Write the endpoint's rows of the fan-out index (see [`crate::store::subscriptions`]).
async fn subscribe(c: &impl GenericClient, e: &Endpoint) -> StoreResult<()> {
    let patterns = if e.operational {
        Vec::new()
    } else {
        subscriptions::patterns(&e.event_types)
    };
    // Two statements: within one, an INSERT still sees the rows a DELETE beside it removes.
    c.execute("DELETE FROM subscriptions WHERE endpoint_id = $1", &[&e.id])
        .await
        .map_err(pg)?;
    c.execute(
        "INSERT INTO subscriptions (tenant_id, pattern, endpoint_id) \
         SELECT $2, p, $1 FROM unnest($3::text[]) AS p",
        &[&e.id, &e.tenant_id, &patterns],
    )
    .await
    .map_err(pg)?;
    Ok(())
}

pub(super) async fn endpoint(
    c: &impl GenericClient,
    tenant: Option<&str>,
    id: &str,
) -> StoreResult<Endpoint> {
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {ENDPOINT_COLUMNS} FROM endpoints WHERE id = $1"
        ))
        .await
        .map_err(pg)?;
    match c.query_opt(&stmt, &[&id]).await.map_err(pg)? {
        Some(r) => {
            let e = endpoint_row(&r);
            if tenant.is_none_or(|t| t == e.tenant_id) {
                Ok(e)
            } else {
                Err(StoreError::NotFound("endpoint"))
            }
        }
        None => Err(StoreError::NotFound("endpoint")),
    }
}

pub(super) async fn list_endpoints(
    c: &impl GenericClient,
    tenant: &str,
    after: &str,
    limit: u32,
) -> StoreResult<Vec<Endpoint>> {
    let rows = c
        .query(
            &format!(
                "SELECT {ENDPOINT_COLUMNS} FROM endpoints WHERE tenant_id = $1 AND id > $2 \
                 ORDER BY id LIMIT $3"
            ),
            &[&tenant, &after, &i64::from(limit)],
        )
        .await
        .map_err(pg)?;
    Ok(rows.iter().map(endpoint_row).collect())
}

pub(super) async fn update_endpoint(c: &impl GenericClient, e: &Endpoint) -> StoreResult<()> {
    let n = c
        .execute(
            "UPDATE endpoints SET url = $3, description = $4, event_types = $5, secret = $6, \
             previous_secret = $7, previous_secret_until_ms = $8, enabled = $9, \
             disabled_reason = $10, lane_size = $11, latency_ceiling_ms = $12, \
             connect_timeout_ms = $13, read_timeout_ms = $14, total_timeout_ms = $15, \
             updated_at_ms = $16, headers = $17, tls = $18, oauth2 = $19, \
             rate_per_second = $20, rate_burst = $21, ordering = $22 \
             WHERE id = $1 AND tenant_id = $2",
            &[
                &e.id,
                &e.tenant_id,
                &e.url,
                &e.description,
                &types_json(e),
                &e.secret,
                &e.previous_secret,
                &e.previous_secret_until_ms,
                &e.enabled,
                &e.disabled_reason,
                &big(e.lane_size),
                &big(e.latency_ceiling_ms),
                &big(e.connect_timeout_ms),
                &big(e.read_timeout_ms),
                &big(e.total_timeout_ms),
                &e.updated_at_ms,
                &headers_json(e),
                &e.tls.to_column(),
                &oauth2_column(&e.oauth2),
                &e.rate_limit.map(|l| l.per_second()),
                &e.rate_limit.map(|l| i64::from(l.burst())),
                &(e.ordering.code() as i16),
            ],
        )
        .await
        .map_err(pg)?;
    if n == 0 {
        return Err(StoreError::NotFound("endpoint"));
    }
    refresh_due(c, &e.id, e.enabled).await?;
    subscribe(c, e).await
}

pub(super) async fn delete_endpoint(
    c: &impl GenericClient,
    tenant: &str,
    id: &str,
) -> StoreResult<()> {
    let n = c
        .execute(
            "DELETE FROM endpoints WHERE id = $1 AND tenant_id = $2",
            &[&id, &tenant],
        )
        .await
        .map_err(pg)?;
    if n == 0 {
        return Err(StoreError::NotFound("endpoint"));
    }
    c.execute(
        "DELETE FROM attempts WHERE delivery_id IN (SELECT id FROM deliveries WHERE endpoint_id = $1)",
        &[&id],
    )
    .await
    .map_err(pg)?;
    c.execute("DELETE FROM deliveries WHERE endpoint_id = $1", &[&id])
        .await
        .map_err(pg)?;
    c.execute("DELETE FROM endpoint_events WHERE endpoint_id = $1", &[&id])
        .await
        .map_err(pg)?;
    c.execute("DELETE FROM due_endpoints WHERE endpoint_id = $1", &[&id])
        .await
        .map_err(pg)?;
    Ok(())
}

pub(super) async fn set_endpoint_enabled(
    c: &impl GenericClient,
    id: &str,
    enabled: bool,
    reason: Option<&str>,
    now_ms: i64,
) -> StoreResult<()> {
    let reason = if enabled { None } else { reason };
    let n = c
        .execute(
            "UPDATE endpoints SET enabled = $2, disabled_reason = $3, updated_at_ms = $4, \
             failing_since_ms = CASE WHEN $2 THEN NULL ELSE failing_since_ms END WHERE id = $1",
            &[&id, &enabled, &reason, &now_ms],
        )
        .await
        .map_err(pg)?;
    if n == 0 {
        return Err(StoreError::NotFound("endpoint"));
    }
    refresh_due(c, id, enabled).await
}

/// A disabled endpoint leaves the due table (claims would only skip it); an enabled one is due
/// again from its earliest ready delivery.
async fn refresh_due(c: &impl GenericClient, id: &str, enabled: bool) -> StoreResult<()> {
    let sql = if enabled {
        "SELECT sluice_mark_work_due(ARRAY[$1], ARRAY[min(tenant_id)], ARRAY[min(visible_at_ms)]) \
         FROM deliveries WHERE endpoint_id = $1 AND state = 0 HAVING count(*) > 0"
    } else {
        "DELETE FROM due_endpoints WHERE endpoint_id = $1"
    };
    c.execute(sql, &[&id]).await.map_err(pg)?;
    Ok(())
}

pub(super) async fn set_endpoint_failing(
    c: &impl GenericClient,
    id: &str,
    since_ms: Option<i64>,
) -> StoreResult<()> {
    c.execute(
        "UPDATE endpoints SET failing_since_ms = $2 WHERE id = $1",
        &[&id, &since_ms],
    )
    .await
    .map_err(pg)?;
    Ok(())
}

/// Enqueue a batch in one statement (see [`ENQUEUE`]); a message whose key was already used
/// then resolves to the original, read after the commit. Also returns the endpoints given work.
pub(super) async fn enqueue(
    c: &impl GenericClient,
    messages: &[NewMessage],
    now_ms: i64,
) -> StoreResult<(Vec<Enqueued>, HashSet<String>)> {
    let ids: Vec<&str> = messages.iter().map(|m| m.id.as_str()).collect();
    let tenants: Vec<&str> = messages.iter().map(|m| m.tenant_id.as_str()).collect();
    let types: Vec<&str> = messages.iter().map(|m| m.event_type.as_str()).collect();
    let payloads: Vec<&str> = messages.iter().map(|m| m.payload.as_str()).collect();
    let keys: Vec<Option<&str>> = messages
        .iter()
        .map(|m| m.idempotency_key.as_deref())
        .collect();
    // Routed messages: one row per candidate pattern; direct ones: their one endpoint.
    let (mut r_ids, mut r_tenants, mut r_patterns) = (Vec::new(), Vec::new(), Vec::new());
    let (mut d_ids, mut d_targets, mut d_tenants) = (Vec::new(), Vec::new(), Vec::new());
    for m in messages {
        match &m.only_endpoint {
            Some(target) => {
                d_ids.push(m.id.as_str());
                d_targets.push(target.as_str());
                d_tenants.push(m.tenant_id.as_str());
            }
            None => {
                for pattern in subscriptions::candidates(&m.event_type) {
                    r_ids.push(m.id.as_str());
                    r_tenants.push(m.tenant_id.as_str());
                    r_patterns.push(pattern);
                }
            }
        }
    }
    let stmt = c.prepare_cached(ENQUEUE).await.map_err(pg)?;
    let rows = c
        .query(
            &stmt,
            &[
                &ids,
                &tenants,
                &types,
                &payloads,
                &keys,
                &now_ms,
                &r_ids,
                &r_tenants,
                &r_patterns,
                &d_ids,
                &d_targets,
                &d_tenants,
            ],
        )
        .await
        .map_err(pg)?;
    let mut inserted: HashSet<String> = HashSet::new();
    let mut given_work: HashSet<String> = HashSet::new();
    let mut counts: HashMap<String, u32> = HashMap::new();
    for r in &rows {
        let id: String = r.get(0);
        match r.get::<_, Option<String>>(1) {
            Some(endpoint) => {
                *counts.entry(id).or_default() += 1;
                given_work.insert(endpoint);
            }
            None => {
                inserted.insert(id);
            }
        }
    }

    // Messages whose key was already taken resolve to the original id.
    let repeats: Vec<&NewMessage> = messages
        .iter()
        .filter(|m| !inserted.contains(&m.id) && m.idempotency_key.is_some())
        .collect();
    // Keyed by the repeating message's own id: two repeats of one key in a batch may differ.
    let mut originals: HashMap<String, (String, bool)> = HashMap::new();
    if !repeats.is_empty() {
        let column = |f: fn(&NewMessage) -> &str| repeats.iter().map(|m| f(m)).collect::<Vec<_>>();
        let stmt = c.prepare_cached(FIND_KEYS).await.map_err(pg)?;
        let params = [
            column(|m| &m.id),
            column(|m| &m.tenant_id),
            column(|m| m.idempotency_key.as_deref().unwrap_or_default()),
            column(|m| &m.event_type),
            column(|m| &m.payload),
        ];
        let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            params.iter().map(|p| p as _).collect();
        for r in c.query(&stmt, &params).await.map_err(pg)? {
            originals.insert(r.get(0), (r.get(1), r.get(2)));
        }
    }

    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        if inserted.contains(&m.id) {
            let deliveries = counts.get(&m.id).copied().unwrap_or(0);
            out.push(Enqueued::created(m.id.clone(), deliveries));
        } else {
            let (id, same) = originals.get(&m.id).cloned().ok_or_else(|| {
                StoreError::Conflict(format!("message id {} already exists", m.id))
            })?;
            out.push(Enqueued::repeat(id, same));
        }
    }
    Ok((out, given_work))
}

pub(super) async fn message(
    c: &impl GenericClient,
    tenant: &str,
    id: &str,
) -> StoreResult<MessageView> {
    let row = c
        .query_opt(
            "SELECT id, event_type, payload, created_at_ms FROM messages \
             WHERE id = $1 AND tenant_id = $2",
            &[&id, &tenant],
        )
        .await
        .map_err(pg)?
        .ok_or(StoreError::NotFound("message"))?;
    let deliveries = list_deliveries(
        c,
        &DeliveryFilter {
            tenant_id: tenant.to_owned(),
            message_id: Some(id.to_owned()),
            limit: 10_000,
            ..Default::default()
        },
    )
    .await?;
    Ok(MessageView {
        id: row.get(0),
        event_type: row.get(1),
        payload: row.get(2),
        created_at_ms: row.get(3),
        deliveries,
    })
}

pub(super) async fn list_messages(
    c: &impl GenericClient,
    f: &MessageFilter,
) -> StoreResult<Vec<MessageSummary>> {
    let (sql, params) = f.statement(|n| format!("${n}"));
    let values: Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>> = params
        .into_iter()
        .map(|p| -> Box<dyn tokio_postgres::types::ToSql + Sync + Send> {
            match p {
                message_log::Param::Text(t) => Box::new(t),
                message_log::Param::Int(n) => Box::new(n),
            }
        })
        .collect();
    let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
        values.iter().map(|v| v.as_ref() as _).collect();
    // One statement per combination of filters given (a few dozen at most): cached like any.
    let stmt = c.prepare_cached(&sql).await.map_err(pg)?;
    let rows = c.query(&stmt, &refs).await.map_err(pg)?;
    Ok(rows
        .iter()
        .map(|r| MessageSummary {
            id: r.get(0),
            event_type: r.get(1),
            created_at_ms: r.get(2),
        })
        .collect())
}

pub(super) async fn settle(
    c: &impl GenericClient,
    settlements: &[Settlement],
    now_ms: i64,
) -> StoreResult<Vec<i64>> {
    let n = settlements.len();
    let (mut ids, mut tokens, mut states, mut visible, mut incs, mut touch, mut status, mut error) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut a_ids, mut a_started, mut a_duration, mut a_status, mut a_kind, mut a_response) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for s in settlements {
        let row = SettleRow::of(s, now_ms);
        ids.push(s.delivery_id);
        tokens.push(s.lease_token);
        states.push(row.state);
        visible.push(row.visible_at_ms);
        incs.push(row.attempts_added);
        touch.push(row.touches_last);
        status.push(row.last_status);
        error.push(row.last_error);
        if let Some(a) = &s.attempt {
            a_ids.push(s.delivery_id);
            a_started.push(a.started_at_ms);
            a_duration.push(i64::from(a.duration_ms));
            a_status.push(a.status.map(i64::from));
            a_kind.push(a.error_kind.as_deref());
            a_response.push(a.response.as_deref());
        }
    }
    let stmt = c.prepare_cached(SETTLE).await.map_err(pg)?;
    let rows = c
        .query(
            &stmt,
            &[
                &ids,
                &tokens,
                &states,
                &visible,
                &incs,
                &touch,
                &status,
                &error,
                &now_ms,
                &a_ids,
                &a_started,
                &a_duration,
                &a_status,
                &a_kind,
                &a_response,
            ],
        )
        .await
        .map_err(pg)?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

pub(super) async fn extend_lease(
    c: &impl GenericClient,
    id: i64,
    token: i64,
    until_ms: i64,
) -> StoreResult<bool> {
    let n = c
        .execute(
            "UPDATE deliveries SET lease_until_ms = $3 WHERE id = $1 AND lease_token = $2 \
             AND state = 1",
            &[&id, &token, &until_ms],
        )
        .await
        .map_err(pg)?;
    Ok(n > 0)
}

pub(super) async fn purge(c: &impl GenericClient, before_ms: i64, limit: u32) -> StoreResult<u64> {
    let ids: Vec<i64> = c
        .query(
            "SELECT id FROM deliveries WHERE state = 2 AND updated_at_ms < $1 LIMIT $2 \
             FOR UPDATE SKIP LOCKED",
            &[&before_ms, &i64::from(limit)],
        )
        .await
        .map_err(pg)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if !ids.is_empty() {
        c.execute("DELETE FROM attempts WHERE delivery_id = ANY($1)", &[&ids])
            .await
            .map_err(pg)?;
        c.execute("DELETE FROM deliveries WHERE id = ANY($1)", &[&ids])
            .await
            .map_err(pg)?;
    }
    c.execute(
        "DELETE FROM messages m WHERE m.created_at_ms < $1 \
         AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = m.id)",
        &[&before_ms],
    )
    .await
    .map_err(pg)?;
    Ok(ids.len() as u64)
}

/// FIFO endpoints whose head the reaper just dead-lettered as poison: due again when anything
/// waits behind them (rare, so a walk of the FIFO endpoints is cheap enough).
const FIFO_AFTER_POISON: &str = "SELECT sluice_mark_work_due(array_agg(e.id), array_agg(e.tenant_id), \
         array_agg($1::bigint)) FROM endpoints e WHERE e.ordering = 1 AND e.enabled \
       AND NOT EXISTS (SELECT 1 FROM deliveries p WHERE p.endpoint_id = e.id AND p.state = 1) \
       AND EXISTS (SELECT 1 FROM deliveries p WHERE p.endpoint_id = e.id AND p.state = 0)";

pub(super) async fn reap(
    c: &impl GenericClient,
    now_ms: i64,
    max_expiries: u32,
) -> StoreResult<ReapReport> {
    let max = i64::from(max_expiries);
    let dead = c
        .execute(
            "UPDATE deliveries SET state = 3, lease_until_ms = NULL, lease_token = NULL, \
             expiries = expiries + 1, updated_at_ms = $1, \
             last_error = 'lease expired ' || (expiries + 1) || ' times (poison message)' \
             WHERE state = 1 AND lease_until_ms < $1 AND expiries + 1 >= $2",
            &[&now_ms, &max],
        )
        .await
        .map_err(pg)?;
    if dead > 0 {
        c.execute(FIFO_AFTER_POISON, &[&now_ms]).await.map_err(pg)?;
    }
    let returned = c
        .query_one(
            "WITH r AS (UPDATE deliveries SET state = 0, visible_at_ms = $1, \
             lease_until_ms = NULL, lease_token = NULL, expiries = expiries + 1, updated_at_ms = $1 \
             WHERE state = 1 AND lease_until_ms < $1 \
             RETURNING endpoint_id, tenant_id, visible_at_ms) \
             SELECT count(*), sluice_mark_work_due(array_agg(endpoint_id), array_agg(tenant_id), \
                 array_agg(visible_at_ms)) FROM r",
            &[&now_ms],
        )
        .await
        .map_err(pg)?
        .get::<_, i64>(0) as u64;
    Ok(ReapReport { returned, dead })
}

/// Columns: id, delivery_id, started_at_ms, duration_ms, status, error_kind, response.
fn attempt_row(r: &Row) -> AttemptView {
    AttemptView {
        id: r.get(0),
        delivery_id: r.get(1),
        started_at_ms: r.get(2),
        duration_ms: r.get::<_, i64>(3) as u32,
        status: r.get::<_, Option<i64>>(4).map(|s| s as u16),
        error_kind: r.get(5),
        response: r.get(6),
    }
}

fn delivery_row(r: &Row) -> DeliveryView {
    DeliveryView {
        id: r.get(0),
        message_id: r.get(1),
        endpoint_id: r.get(2),
        state: DeliveryState::from_code(r.get(3)),
        attempts: r.get::<_, i64>(4) as u32,
        visible_at_ms: r.get(5),
        last_status: r.get::<_, Option<i64>>(6).map(|s| s as u16),
        last_error: r.get(7),
        created_at_ms: r.get(8),
        updated_at_ms: r.get(9),
    }
}

pub(super) async fn list_deliveries(
    c: &impl GenericClient,
    f: &DeliveryFilter,
) -> StoreResult<Vec<DeliveryView>> {
    let scope = match (&f.message_id, &f.endpoint_id) {
        (Some(_), _) => "message_id = $1 AND ($2::text IS NULL OR endpoint_id = $2)",
        (None, Some(_)) => "endpoint_id = $2 AND $1::text IS NULL",
        (None, None) => "$1::text IS NULL AND $2::text IS NULL",
    };
    let sql = format!(
        "SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE {scope} AND tenant_id = $3 \
         AND ($4::bigint IS NULL OR state = $4) AND id > $5 ORDER BY id LIMIT $6"
    );
    let rows = c
        .query(
            &sql,
            &[
                &f.message_id,
                &f.endpoint_id,
                &f.tenant_id,
                &f.state.map(DeliveryState::code),
                &f.after.unwrap_or(0),
                &i64::from(f.limit),
            ],
        )
        .await
        .map_err(pg)?;
    Ok(rows.iter().map(delivery_row).collect())
}

pub(super) async fn attempts(
    c: &impl GenericClient,
    tenant: &str,
    delivery_id: i64,
) -> StoreResult<Vec<AttemptView>> {
    let owned = c
        .query_opt(
            "SELECT 1 FROM deliveries WHERE id = $1 AND tenant_id = $2",
            &[&delivery_id, &tenant],
        )
        .await
        .map_err(pg)?;
    if owned.is_none() {
        return Err(StoreError::NotFound("delivery"));
    }
    let rows = c
        .query(
            "SELECT id, delivery_id, started_at_ms, duration_ms, status, error_kind, response \
             FROM attempts WHERE delivery_id = $1 ORDER BY id",
            &[&delivery_id],
        )
        .await
        .map_err(pg)?;
    Ok(rows.iter().map(attempt_row).collect())
}

/// An endpoint's recent attempts, newest first (the status fallback and the attempts list).
const ENDPOINT_ATTEMPTS: &str = "SELECT a.id, a.delivery_id, a.started_at_ms, a.duration_ms, \
    a.status, a.error_kind, a.response FROM attempts a JOIN deliveries d ON d.id = a.delivery_id \
    WHERE d.endpoint_id = $1 AND d.tenant_id = $2 AND a.started_at_ms >= $3 AND a.id < $4 \
    ORDER BY a.id DESC LIMIT $5";

pub(super) async fn endpoint_attempts(
    c: &impl GenericClient,
    tenant: &str,
    endpoint: &str,
    since_ms: i64,
    before: Option<i64>,
    limit: u32,
) -> StoreResult<Vec<AttemptView>> {
    let before = before.unwrap_or(i64::MAX);
    let rows = c
        .query(
            ENDPOINT_ATTEMPTS,
            &[&endpoint, &tenant, &since_ms, &before, &i64::from(limit)],
        )
        .await
        .map_err(pg)?;
    Ok(rows.iter().map(attempt_row).collect())
}

/// Ready now, attempts reset; `$1` is the time, `$2` the reason. Followed by a `WHERE` and
/// [`MARK`], which marks the endpoints of the rows made ready due in the same statement and
/// counts them.
const MAKE_READY: &str = "WITH r AS (UPDATE deliveries SET state = 0, attempts = 0, \
    expiries = 0, visible_at_ms = $1, last_error = $2, updated_at_ms = $1";
const MARK: &str = "RETURNING endpoint_id, tenant_id, visible_at_ms) SELECT count(*), \
    sluice_mark_work_due(array_agg(endpoint_id), array_agg(tenant_id), array_agg(visible_at_ms)) \
    FROM r";

pub(super) async fn replay(
    c: &impl GenericClient,
    tenant: &str,
    target: &ReplayTarget,
    now_ms: i64,
) -> StoreResult<u64> {
    let reason = target.reason();
    match target {
        ReplayTarget::Delivery(id) | ReplayTarget::Resend(id) => {
            let state = c
                .query_opt(
                    "SELECT state FROM deliveries WHERE id = $1 AND tenant_id = $2",
                    &[id, &tenant],
                )
                .await
                .map_err(pg)?
                .map(|r| DeliveryState::from_code(r.get(0)))
                .ok_or(StoreError::NotFound("delivery"))?;
            let allowed = replayable(target, *id, state)?;
            c.query_one(
                &format!(
                    "{MAKE_READY} WHERE id = $3 AND tenant_id = $4 AND state IN ({allowed}) {MARK}"
                ),
                &[&now_ms, &reason, id, &tenant],
            )
            .await
            .map(|r| r.get::<_, i64>(0) as u64)
            .map_err(pg)
        }
        ReplayTarget::Endpoint(endpoint) => {
            endpoint_owned(c, tenant, endpoint).await?;
            c.query_one(
                &format!(
                    "{MAKE_READY} WHERE endpoint_id = $3 AND tenant_id = $4 AND state = 3 {MARK}"
                ),
                &[&now_ms, &reason, endpoint, &tenant],
            )
            .await
            .map(|r| r.get::<_, i64>(0) as u64)
            .map_err(pg)
        }
        ReplayTarget::Recover {
            endpoint,
            since_ms,
            until_ms,
        } => {
            endpoint_owned(c, tenant, endpoint).await?;
            c.query_one(
                &format!(
                    "{MAKE_READY} WHERE endpoint_id = $3 AND tenant_id = $4 \
                     AND created_at_ms >= $5 AND created_at_ms < $6 \
                     AND (state = 3 OR (state = 0 AND attempts > 0)) {MARK}"
                ),
                &[&now_ms, &reason, endpoint, &tenant, since_ms, until_ms],
            )
            .await
            .map(|r| r.get::<_, i64>(0) as u64)
            .map_err(pg)
        }
    }
}

async fn endpoint_owned(c: &impl GenericClient, tenant: &str, endpoint: &str) -> StoreResult<()> {
    c.query_opt(
        "SELECT 1 FROM endpoints WHERE id = $1 AND tenant_id = $2",
        &[&endpoint, &tenant],
    )
    .await
    .map_err(pg)?
    .map(|_| ())
    .ok_or(StoreError::NotFound("endpoint"))
}

pub(super) async fn record_event(c: &impl GenericClient, e: &EndpointEvent) -> StoreResult<()> {
    c.execute(
        "INSERT INTO endpoint_events (tenant_id, endpoint_id, kind, detail, at_ms) \
         VALUES ($1, $2, $3, $4, $5)",
        &[&e.tenant_id, &e.endpoint_id, &e.kind, &e.detail, &e.at_ms],
    )
    .await
    .map_err(pg)?;
    Ok(())
}

pub(super) async fn list_events(
    c: &impl GenericClient,
    tenant: &str,
    endpoint: &str,
    limit: u32,
) -> StoreResult<Vec<EndpointEvent>> {
    endpoint_owned(c, tenant, endpoint).await?;
    let rows = c
        .query(
            "SELECT tenant_id, endpoint_id, kind, detail, at_ms FROM endpoint_events \
             WHERE endpoint_id = $1 ORDER BY id DESC LIMIT $2",
            &[&endpoint, &i64::from(limit)],
        )
        .await
        .map_err(pg)?;
    Ok(rows
        .iter()
        .map(|r| EndpointEvent {
            tenant_id: r.get(0),
            endpoint_id: r.get(1),
            kind: r.get(2),
            detail: r.get(3),
            at_ms: r.get(4),
        })
        .collect())
}

pub(super) async fn queue_stats(c: &impl GenericClient, now_ms: i64) -> StoreResult<QueueStats> {
    let mut stats = QueueStats::default();
    for r in c
        .query("SELECT state, count(*) FROM deliveries GROUP BY state", &[])
        .await
        .map_err(pg)?
    {
        let n = r.get::<_, i64>(1) as u64;
        match DeliveryState::from_code(r.get(0)) {
            DeliveryState::Ready => stats.ready = n,
            DeliveryState::Leased => stats.leased = n,
            DeliveryState::Delivered => stats.delivered = n,
            DeliveryState::Dead => stats.dead = n,
        }
    }
    for r in c
        .query(
            "SELECT e.tenant_id, MIN((SELECT MIN(d.visible_at_ms) FROM deliveries d \
             WHERE d.state = 0 AND d.endpoint_id = e.id AND d.visible_at_ms <= $1)) \
             FROM endpoints e WHERE e.enabled GROUP BY e.tenant_id",
            &[&now_ms],
        )
        .await
        .map_err(pg)?
    {
        let oldest: Option<i64> = r.get(1);
        stats
            .oldest_ready_age_ms
            .push((r.get(0), oldest.map_or(0, |t| (now_ms - t).max(0))));
    }
    Ok(stats)
}
