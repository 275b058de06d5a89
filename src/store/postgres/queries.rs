//! The PostgreSQL driver's statements, each run on a pooled client or inside the caller's
//! transaction. Batches travel as arrays (`unnest`) so one round trip serves many rows.

use std::collections::HashMap;

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use super::{WORK_CHANNEL, pg};
use crate::store::*;

const ENDPOINT_COLUMNS: &str = "id, tenant_id, url, description, event_types, secret, \
    previous_secret, previous_secret_until_ms, enabled, disabled_reason, operational, lane_size, \
    latency_ceiling_ms, connect_timeout_ms, read_timeout_ms, total_timeout_ms, failing_since_ms, \
    created_at_ms, updated_at_ms";

const DELIVERY_COLUMNS: &str = "id, message_id, endpoint_id, state, attempts, visible_at_ms, \
    last_status, last_error, created_at_ms, updated_at_ms";

/// Fair claim: walk enabled endpoints in id order from the cursor, keep those with due work,
/// take up to k of each through the ready index, lock with SKIP LOCKED, lease, return bodies.
const CLAIM: &str = "WITH eps AS ( \
        SELECT e.id FROM endpoints e \
        WHERE e.enabled AND ((NOT $9 AND e.id > $1) OR ($9 AND e.id <= $1)) \
          AND NOT (e.id = ANY($3)) \
          AND EXISTS (SELECT 1 FROM deliveries d WHERE d.endpoint_id = e.id AND d.state = 0 \
                      AND d.visible_at_ms <= $2) \
        ORDER BY e.id LIMIT $4 \
    ), picked AS ( \
        SELECT c.id FROM eps CROSS JOIN LATERAL ( \
            SELECT d.id FROM deliveries d \
            WHERE d.endpoint_id = eps.id AND d.state = 0 AND d.visible_at_ms <= $2 \
            ORDER BY d.visible_at_ms \
            LIMIT GREATEST(1, LEAST($5, COALESCE((SELECT r.n FROM unnest($10::text[], $11::bigint[]) \
                AS r(id, n) WHERE r.id = eps.id), $5))) \
            FOR UPDATE SKIP LOCKED) c \
        LIMIT $4 \
    ) \
    UPDATE deliveries d SET state = 1, lease_until_ms = $6, lease_token = $7, updated_at_ms = $2 \
    FROM picked, messages m \
    WHERE d.id = picked.id AND m.id = d.message_id \
    RETURNING d.id, d.message_id, d.endpoint_id, d.tenant_id, d.attempts, d.visible_at_ms, \
              m.event_type, m.payload, m.created_at_ms, $8::bigint";

const SETTLE: &str = "WITH v AS ( \
        SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], \
                             $5::bigint[], $6::bool[], $7::bigint[], $8::text[]) \
            AS v(id, token, state, visible, inc, touch, status, error) \
    ), upd AS ( \
        UPDATE deliveries d SET state = v.state, \
            visible_at_ms = COALESCE(v.visible, d.visible_at_ms), \
            attempts = d.attempts + v.inc, lease_until_ms = NULL, lease_token = NULL, \
            last_status = CASE WHEN v.touch THEN v.status ELSE d.last_status END, \
            last_error = CASE WHEN v.touch THEN v.error ELSE d.last_error END, \
            updated_at_ms = $9 \
        FROM v WHERE d.id = v.id AND d.lease_token = v.token AND d.state = 1 \
        RETURNING d.id \
    ), ins AS ( \
        INSERT INTO attempts (delivery_id, started_at_ms, duration_ms, status, error_kind, response) \
        SELECT a.id, a.started, a.duration, a.status, a.kind, a.response \
        FROM unnest($10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[], $14::text[], \
                    $15::text[]) AS a(id, started, duration, status, kind, response) \
        JOIN upd ON upd.id = a.id \
    ) SELECT id FROM upd";

const INSERT_MESSAGES: &str = "INSERT INTO messages \
        (id, tenant_id, event_type, payload, idempotency_key, created_at_ms) \
    SELECT id, tenant_id, event_type, payload, key, $6 \
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) \
        AS m(id, tenant_id, event_type, payload, key) \
    ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING \
    RETURNING id";

const FIND_KEYS: &str = "SELECT m.id, m.tenant_id, m.idempotency_key FROM messages m \
    JOIN unnest($1::text[], $2::text[]) AS k(tenant_id, key) \
      ON m.tenant_id = k.tenant_id AND m.idempotency_key = k.key";

const FAN_OUT: &str = "INSERT INTO deliveries (message_id, endpoint_id, tenant_id, state, \
        attempts, visible_at_ms, created_at_ms, updated_at_ms) \
    SELECT m.id, e.id, m.tenant_id, 0, 0, $4, $4, $4 \
    FROM unnest($1::text[], $2::text[], $3::text[]) AS m(id, tenant_id, event_type) \
    JOIN endpoints e ON e.tenant_id = m.tenant_id AND e.enabled AND NOT e.operational \
      AND (e.event_types = '[]' OR e.event_types::jsonb ? m.event_type) \
    RETURNING message_id";

const FAN_OUT_ONLY: &str = "INSERT INTO deliveries (message_id, endpoint_id, tenant_id, state, \
        attempts, visible_at_ms, created_at_ms, updated_at_ms) \
    SELECT id, endpoint_id, tenant_id, 0, 0, $4, $4, $4 \
    FROM unnest($1::text[], $2::text[], $3::text[]) AS m(id, endpoint_id, tenant_id) \
    RETURNING message_id";

pub async fn notify(c: &impl GenericClient) -> StoreResult<()> {
    c.execute(&format!("NOTIFY {WORK_CHANNEL}"), &[])
        .await
        .map_err(pg)?;
    Ok(())
}

pub async fn setting(c: &impl GenericClient, key: &str) -> StoreResult<Option<String>> {
    let row = c
        .query_opt("SELECT value FROM settings WHERE key = $1", &[&key])
        .await
        .map_err(pg)?;
    Ok(row.map(|r| r.get(0)))
}

pub async fn set_setting(c: &impl GenericClient, key: &str, value: &str) -> StoreResult<()> {
    c.execute(
        "INSERT INTO settings (key, value) VALUES ($1, $2) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        &[&key, &value],
    )
    .await
    .map_err(pg)?;
    Ok(())
}

fn tenant_row(r: &Row) -> Tenant {
    Tenant {
        id: r.get(0),
        name: r.get(1),
        token_hash: r.get(2),
        created_at_ms: r.get(3),
    }
}

pub async fn create_tenant(c: &impl GenericClient, t: &Tenant) -> StoreResult<()> {
    c.execute(
        "INSERT INTO tenants (id, name, token_hash, created_at_ms) VALUES ($1, $2, $3, $4)",
        &[&t.id, &t.name, &t.token_hash, &t.created_at_ms],
    )
    .await
    .map_err(pg)?;
    Ok(())
}

pub async fn tenant(c: &impl GenericClient, id: &str) -> StoreResult<Tenant> {
    let stmt = c
        .prepare_cached("SELECT id, name, token_hash, created_at_ms FROM tenants WHERE id = $1")
        .await
        .map_err(pg)?;
    c.query_opt(&stmt, &[&id])
        .await
        .map_err(pg)?
        .map(|r| tenant_row(&r))
        .ok_or(StoreError::NotFound("tenant"))
}

pub async fn tenant_by_token(c: &impl GenericClient, hash: &str) -> StoreResult<Option<Tenant>> {
    let stmt = c
        .prepare_cached(
            "SELECT id, name, token_hash, created_at_ms FROM tenants WHERE token_hash = $1",
        )
        .await
        .map_err(pg)?;
    let row = c.query_opt(&stmt, &[&hash]).await.map_err(pg)?;
    Ok(row.map(|r| tenant_row(&r)))
}

pub async fn list_tenants(
    c: &impl GenericClient,
    after: &str,
    limit: u32,
) -> StoreResult<Vec<Tenant>> {
    let rows = c
        .query(
            "SELECT id, name, token_hash, created_at_ms FROM tenants WHERE id > $1 \
             ORDER BY id LIMIT $2",
            &[&after, &i64::from(limit)],
        )
        .await
        .map_err(pg)?;
    Ok(rows.iter().map(tenant_row).collect())
}

pub async fn set_tenant_token(c: &impl GenericClient, id: &str, hash: &str) -> StoreResult<()> {
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

pub async fn delete_tenant(c: &impl GenericClient, id: &str) -> StoreResult<()> {
    for sql in [
        "DELETE FROM attempts WHERE delivery_id IN (SELECT id FROM deliveries WHERE tenant_id = $1)",
        "DELETE FROM deliveries WHERE tenant_id = $1",
        "DELETE FROM messages WHERE tenant_id = $1",
        "DELETE FROM endpoint_events WHERE tenant_id = $1",
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
    }
}

fn types_json(e: &Endpoint) -> String {
    serde_json::to_string(&e.event_types).unwrap_or_else(|_| "[]".into())
}

fn big(v: Option<u32>) -> Option<i64> {
    v.map(i64::from)
}

pub async fn create_endpoint(c: &impl GenericClient, e: &Endpoint) -> StoreResult<()> {
    c.execute(
        &format!(
            "INSERT INTO endpoints ({ENDPOINT_COLUMNS}) VALUES \
             ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)"
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
        ],
    )
    .await
    .map_err(pg)?;
    Ok(())
}

pub async fn endpoint(
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

pub async fn list_endpoints(
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

pub async fn update_endpoint(c: &impl GenericClient, e: &Endpoint) -> StoreResult<()> {
    let n = c
        .execute(
            "UPDATE endpoints SET url = $3, description = $4, event_types = $5, secret = $6, \
             previous_secret = $7, previous_secret_until_ms = $8, enabled = $9, \
             disabled_reason = $10, lane_size = $11, latency_ceiling_ms = $12, \
             connect_timeout_ms = $13, read_timeout_ms = $14, total_timeout_ms = $15, \
             updated_at_ms = $16 WHERE id = $1 AND tenant_id = $2",
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
            ],
        )
        .await
        .map_err(pg)?;
    if n == 0 {
        return Err(StoreError::NotFound("endpoint"));
    }
    Ok(())
}

pub async fn delete_endpoint(c: &impl GenericClient, tenant: &str, id: &str) -> StoreResult<()> {
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
    Ok(())
}

pub async fn set_endpoint_enabled(
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
    Ok(())
}

pub async fn set_endpoint_failing(
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

pub async fn enqueue(
    c: &impl GenericClient,
    messages: &[NewMessage],
    now_ms: i64,
) -> StoreResult<Vec<Enqueued>> {
    let ids: Vec<&str> = messages.iter().map(|m| m.id.as_str()).collect();
    let tenants: Vec<&str> = messages.iter().map(|m| m.tenant_id.as_str()).collect();
    let types: Vec<&str> = messages.iter().map(|m| m.event_type.as_str()).collect();
    let payloads: Vec<&str> = messages.iter().map(|m| m.payload.as_str()).collect();
    let keys: Vec<Option<&str>> = messages
        .iter()
        .map(|m| m.idempotency_key.as_deref())
        .collect();
    let stmt = c.prepare_cached(INSERT_MESSAGES).await.map_err(pg)?;
    let inserted: std::collections::HashSet<String> = c
        .query(&stmt, &[&ids, &tenants, &types, &payloads, &keys, &now_ms])
        .await
        .map_err(pg)?
        .iter()
        .map(|r| r.get(0))
        .collect();

    // Messages whose key was already taken resolve to the original id.
    let (dup_tenants, dup_keys): (Vec<&str>, Vec<&str>) = messages
        .iter()
        .filter(|m| !inserted.contains(&m.id))
        .filter_map(|m| Some((m.tenant_id.as_str(), m.idempotency_key.as_deref()?)))
        .unzip();
    let mut originals: HashMap<(String, String), String> = HashMap::new();
    if !dup_keys.is_empty() {
        let stmt = c.prepare_cached(FIND_KEYS).await.map_err(pg)?;
        for r in c
            .query(&stmt, &[&dup_tenants, &dup_keys])
            .await
            .map_err(pg)?
        {
            originals.insert((r.get(1), r.get(2)), r.get(0));
        }
    }

    // Fan out the new ones: filters are matched in SQL, operational targets go direct.
    let fresh: Vec<&NewMessage> = messages
        .iter()
        .filter(|m| inserted.contains(&m.id))
        .collect();
    let mut counts: HashMap<String, u32> = HashMap::new();
    let (routed, direct): (Vec<&NewMessage>, Vec<&NewMessage>) =
        fresh.iter().partition(|m| m.only_endpoint.is_none());
    if !routed.is_empty() {
        let ids: Vec<&str> = routed.iter().map(|m| m.id.as_str()).collect();
        let tenants: Vec<&str> = routed.iter().map(|m| m.tenant_id.as_str()).collect();
        let types: Vec<&str> = routed.iter().map(|m| m.event_type.as_str()).collect();
        let stmt = c.prepare_cached(FAN_OUT).await.map_err(pg)?;
        for r in c
            .query(&stmt, &[&ids, &tenants, &types, &now_ms])
            .await
            .map_err(pg)?
        {
            *counts.entry(r.get(0)).or_default() += 1;
        }
    }
    if !direct.is_empty() {
        let ids: Vec<&str> = direct.iter().map(|m| m.id.as_str()).collect();
        let targets: Vec<&str> = direct
            .iter()
            .filter_map(|m| m.only_endpoint.as_deref())
            .collect();
        let tenants: Vec<&str> = direct.iter().map(|m| m.tenant_id.as_str()).collect();
        let stmt = c.prepare_cached(FAN_OUT_ONLY).await.map_err(pg)?;
        for r in c
            .query(&stmt, &[&ids, &targets, &tenants, &now_ms])
            .await
            .map_err(pg)?
        {
            *counts.entry(r.get(0)).or_default() += 1;
        }
    }

    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        if inserted.contains(&m.id) {
            out.push(Enqueued {
                id: m.id.clone(),
                duplicate: false,
                deliveries: counts.get(&m.id).copied().unwrap_or(0),
            });
        } else {
            let key = (
                m.tenant_id.clone(),
                m.idempotency_key.clone().unwrap_or_default(),
            );
            let id = originals.get(&key).cloned().ok_or_else(|| {
                StoreError::Conflict(format!("message id {} already exists", m.id))
            })?;
            out.push(Enqueued {
                id,
                duplicate: true,
                deliveries: 0,
            });
        }
    }
    Ok(out)
}

pub async fn message(c: &impl GenericClient, tenant: &str, id: &str) -> StoreResult<MessageView> {
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

pub async fn list_messages(
    c: &impl GenericClient,
    tenant: &str,
    before: Option<&str>,
    limit: u32,
) -> StoreResult<Vec<MessageSummary>> {
    let rows = c
        .query(
            "SELECT id, event_type, created_at_ms FROM messages WHERE tenant_id = $1 \
             AND ($2::text IS NULL OR id < $2) ORDER BY id DESC LIMIT $3",
            &[&tenant, &before, &i64::from(limit)],
        )
        .await
        .map_err(pg)?;
    Ok(rows
        .iter()
        .map(|r| MessageSummary {
            id: r.get(0),
            event_type: r.get(1),
            created_at_ms: r.get(2),
        })
        .collect())
}

pub async fn claim(
    c: &impl GenericClient,
    req: &ClaimRequest,
    cursor: &str,
    wrapped: bool,
) -> StoreResult<Vec<Claimed>> {
    if req.limit == 0 {
        return Ok(Vec::new());
    }
    let token = crate::ids::lease_token();
    let room_ids: Vec<&str> = req.room.iter().map(|(e, _)| e.as_str()).collect();
    let room_n: Vec<i64> = req.room.iter().map(|(_, n)| i64::from(*n)).collect();
    let stmt = c.prepare_cached(CLAIM).await.map_err(pg)?;
    let rows = c
        .query(
            &stmt,
            &[
                &cursor,
                &req.now_ms,
                &req.exclude,
                &i64::from(req.limit),
                &i64::from(req.per_endpoint.max(1)),
                &(req.now_ms + req.lease_ms),
                &token,
                &token,
                &wrapped,
                &room_ids,
                &room_n,
            ],
        )
        .await
        .map_err(pg)?;
    Ok(rows
        .iter()
        .map(|r| Claimed {
            delivery_id: r.get(0),
            message_id: r.get(1),
            endpoint_id: r.get(2),
            tenant_id: r.get(3),
            attempts: r.get::<_, i64>(4) as u32,
            visible_at_ms: r.get(5),
            event_type: r.get(6),
            payload: r.get(7),
            message_created_at_ms: r.get(8),
            lease_token: r.get(9),
        })
        .collect())
}

pub async fn settle(
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
        let (state, vis, inc, t, st, err) = settle_values(s, now_ms);
        ids.push(s.delivery_id);
        tokens.push(s.lease_token);
        states.push(state);
        visible.push(vis);
        incs.push(inc);
        touch.push(t);
        status.push(st);
        error.push(err);
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

pub async fn extend_lease(
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

pub async fn purge(c: &impl GenericClient, before_ms: i64, limit: u32) -> StoreResult<u64> {
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

pub async fn reap(
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
    let returned = c
        .execute(
            "UPDATE deliveries SET state = 0, visible_at_ms = $1, lease_until_ms = NULL, \
             lease_token = NULL, expiries = expiries + 1, updated_at_ms = $1 \
             WHERE state = 1 AND lease_until_ms < $1",
            &[&now_ms],
        )
        .await
        .map_err(pg)?;
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

pub async fn list_deliveries(
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

pub async fn attempts(
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

pub async fn endpoint_attempts(
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

pub async fn replay(
    c: &impl GenericClient,
    tenant: &str,
    target: &ReplayTarget,
    now_ms: i64,
) -> StoreResult<u64> {
    const SET: &str = "UPDATE deliveries SET state = 0, attempts = 0, expiries = 0, \
        visible_at_ms = $1, last_error = 'replayed', updated_at_ms = $1";
    match target {
        ReplayTarget::Delivery(id) => {
            let state = c
                .query_opt(
                    "SELECT state FROM deliveries WHERE id = $1 AND tenant_id = $2",
                    &[id, &tenant],
                )
                .await
                .map_err(pg)?
                .map(|r| DeliveryState::from_code(r.get(0)));
            match state {
                None => return Err(StoreError::NotFound("delivery")),
                Some(DeliveryState::Dead) => {}
                Some(other) => {
                    return Err(StoreError::Conflict(format!(
                        "delivery {id} is {}, not dead-lettered",
                        other.name()
                    )));
                }
            }
            c.execute(
                &format!("{SET} WHERE id = $2 AND tenant_id = $3 AND state = 3"),
                &[&now_ms, id, &tenant],
            )
            .await
            .map_err(pg)
        }
        ReplayTarget::Endpoint(endpoint) => {
            endpoint_owned(c, tenant, endpoint).await?;
            c.execute(
                &format!("{SET} WHERE endpoint_id = $2 AND tenant_id = $3 AND state = 3"),
                &[&now_ms, endpoint, &tenant],
            )
            .await
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

pub async fn record_event(c: &impl GenericClient, e: &EndpointEvent) -> StoreResult<()> {
    c.execute(
        "INSERT INTO endpoint_events (tenant_id, endpoint_id, kind, detail, at_ms) \
         VALUES ($1, $2, $3, $4, $5)",
        &[&e.tenant_id, &e.endpoint_id, &e.kind, &e.detail, &e.at_ms],
    )
    .await
    .map_err(pg)?;
    Ok(())
}

pub async fn list_events(
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

pub async fn queue_stats(c: &impl GenericClient, now_ms: i64) -> StoreResult<QueueStats> {
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
