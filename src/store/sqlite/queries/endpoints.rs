//! Endpoints: their rows, the fan-out index, the due table's view of them, FIFO heads.

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::*;
use crate::store::sqlite::db;
use crate::store::*;

const ENDPOINT_COLUMNS: &str = "id, tenant_id, url, description, event_types, secret, \
    previous_secret, previous_secret_until_ms, enabled, disabled_reason, operational, lane_size, \
    latency_ceiling_ms, connect_timeout_ms, read_timeout_ms, total_timeout_ms, failing_since_ms, \
    created_at_ms, updated_at_ms, headers, tls, oauth2, rate_per_second, rate_burst, ordering, \
    destination, destination_credentials, trace_context";

fn endpoint_row(r: &Row) -> rusqlite::Result<Endpoint> {
    let types: String = r.get(4)?;
    let url: String = r.get(2)?;
    Ok(Endpoint {
        id: r.get(0)?,
        tenant_id: r.get(1)?,
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
        destination: Destination::from_column(r.get::<_, Option<String>>(25)?.as_deref(), &url),
        destination_credentials: DestinationCredentials::from_column(
            r.get::<_, Option<String>>(26)?.as_deref(),
        ),
        trace_context: r.get(27)?,
        url,
    })
}

fn event_types_json(e: &Endpoint) -> String {
    serde_json::to_string(&e.event_types).unwrap_or_else(|_| "[]".into())
}

fn headers_json(e: &Endpoint) -> String {
    serde_json::to_string(&e.headers).unwrap_or_else(|_| "{}".into())
}

pub(in crate::store::sqlite) fn create_endpoint(c: &Connection, e: &Endpoint) -> StoreResult<()> {
    c.execute(
        &format!(
            "INSERT INTO endpoints ({ENDPOINT_COLUMNS}) VALUES \
             (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, \
             ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28)"
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
            e.ordering.code(),
            e.destination.to_column(),
            DestinationCredentials::to_column(&e.destination_credentials),
            e.trace_context
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

pub(in crate::store::sqlite) fn endpoint(
    c: &Connection,
    tenant: Option<&str>,
    id: &str,
) -> StoreResult<Endpoint> {
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

pub(in crate::store::sqlite) fn endpoints_by_id(
    c: &Connection,
    ids: &[String],
) -> StoreResult<Vec<Endpoint>> {
    let mut s = c
        .prepare_cached(&format!(
            "SELECT {ENDPOINT_COLUMNS} FROM endpoints WHERE id = ?1"
        ))
        .map_err(db)?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(e) = s.query_row([id], endpoint_row).optional().map_err(db)? {
            out.push(e);
        }
    }
    Ok(out)
}

pub(in crate::store::sqlite) fn list_endpoints(
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

/// The certificate bytes of a tenant's endpoints but one (`CAST … AS BLOB`: bytes, not
/// characters).
const TENANT_CERTIFICATE_BYTES: &str = "SELECT COALESCE(SUM(\
    COALESCE(length(CAST(json_extract(tls, '$.ca_bundle') AS BLOB)), 0) \
    + COALESCE(length(CAST(json_extract(tls, '$.client.certificate') AS BLOB)), 0) \
    + COALESCE(length(CAST(json_extract(tls, '$.previous_client.certificate') AS BLOB)), 0)\
    ), 0) FROM endpoints WHERE tenant_id = ?1 AND id <> ?2 AND tls IS NOT NULL";

pub(in crate::store::sqlite) fn tenant_certificate_bytes(
    c: &Connection,
    tenant: &str,
    except: &str,
) -> StoreResult<u64> {
    let mut s = c.prepare_cached(TENANT_CERTIFICATE_BYTES).map_err(db)?;
    let bytes: i64 = s
        .query_row(params![tenant, except], |r| r.get(0))
        .map_err(db)?;
    Ok(bytes.max(0) as u64)
}

pub(in crate::store::sqlite) fn update_endpoint(c: &Connection, e: &Endpoint) -> StoreResult<()> {
    let n = c
        .execute(
            "UPDATE endpoints SET url = ?3, description = ?4, event_types = ?5, secret = ?6, \
             previous_secret = ?7, previous_secret_until_ms = ?8, enabled = ?9, \
             disabled_reason = ?10, lane_size = ?11, latency_ceiling_ms = ?12, \
             connect_timeout_ms = ?13, read_timeout_ms = ?14, total_timeout_ms = ?15, \
             updated_at_ms = ?16, headers = ?17, tls = ?18, oauth2 = ?19, \
             rate_per_second = ?20, rate_burst = ?21, ordering = ?22, destination = ?23, \
             destination_credentials = ?24, trace_context = ?25 \
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
                e.ordering.code(),
                e.destination.to_column(),
                DestinationCredentials::to_column(&e.destination_credentials),
                e.trace_context
            ],
        )
        .map_err(db)?;
    if n == 0 {
        return Err(StoreError::NotFound("endpoint"));
    }
    refresh_due(c, &e.id, e.enabled)?;
    subscribe(c, e)
}

pub(in crate::store::sqlite) fn delete_endpoint(
    c: &Connection,
    tenant: &str,
    id: &str,
) -> StoreResult<()> {
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

pub(in crate::store::sqlite) fn set_endpoint_enabled(
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

pub(in crate::store::sqlite) fn set_endpoint_failing(
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

pub(super) fn endpoint_owned(c: &Connection, tenant: &str, endpoint: &str) -> StoreResult<()> {
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

/// Ready deliveries of one endpoint, due or not (counted on the `deliveries_ready` index).
const ENDPOINT_WAITING: &str =
    "SELECT count(*) FROM deliveries WHERE endpoint_id = ?1 AND state = 0";

pub(in crate::store::sqlite) fn fifo_head(
    c: &Connection,
    id: &str,
) -> StoreResult<Option<DeliveryView>> {
    c.prepare_cached(&format!(
        "SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE endpoint_id = ?1 AND state IN (0, 1) \
         ORDER BY id LIMIT 1"
    ))
    .and_then(|mut s| s.query_row([id], delivery_row).optional())
    .map_err(db)
}

pub(in crate::store::sqlite) fn endpoint_waiting(c: &Connection, id: &str) -> StoreResult<u64> {
    let n: i64 = c
        .prepare_cached(ENDPOINT_WAITING)
        .and_then(|mut s| s.query_row([id], |r| r.get(0)))
        .map_err(db)?;
    Ok(n.max(0) as u64)
}
