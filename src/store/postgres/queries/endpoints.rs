//! Endpoints: their rows, the fan-out index, the due table's view of them, FIFO heads.

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use super::*;
use crate::store::postgres::pg;
use crate::store::*;

const ENDPOINT_COLUMNS: &str = "id, tenant_id, url, description, event_types, secret, \
    previous_secret, previous_secret_until_ms, enabled, disabled_reason, operational, lane_size, \
    latency_ceiling_ms, connect_timeout_ms, read_timeout_ms, total_timeout_ms, failing_since_ms, \
    created_at_ms, updated_at_ms, headers, tls, oauth2, rate_per_second, rate_burst, ordering, \
    destination, destination_credentials, trace_context";

/// Ready deliveries of one endpoint, due or not (counted on the `deliveries_ready` index).
const ENDPOINT_WAITING: &str =
    "SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND state = 0";

pub(in crate::store::postgres) async fn fifo_head(
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

pub(in crate::store::postgres) async fn endpoint_waiting(
    c: &impl GenericClient,
    id: &str,
) -> StoreResult<u64> {
    let row = c.query_one(ENDPOINT_WAITING, &[&id]).await.map_err(pg)?;
    Ok(row.get::<_, i64>(0).max(0) as u64)
}

fn opt_u32(v: Option<i64>) -> Option<u32> {
    v.and_then(|x| u32::try_from(x).ok())
}

fn endpoint_row(r: &Row) -> Endpoint {
    let types: String = r.get(4);
    let url: String = r.get(2);
    Endpoint {
        id: r.get(0),
        tenant_id: r.get(1),
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
        destination: Destination::from_column(r.get(25), &url),
        destination_credentials: DestinationCredentials::from_column(r.get(26)),
        trace_context: r.get(27),
        url,
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

pub(in crate::store::postgres) async fn create_endpoint(
    c: &impl GenericClient,
    e: &Endpoint,
) -> StoreResult<()> {
    c.execute(
        &format!(
            "INSERT INTO endpoints ({ENDPOINT_COLUMNS}) VALUES \
             ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, \
             $20, $21, $22, $23, $24, $25, $26, $27, $28)"
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
            &e.destination.to_column(),
            &DestinationCredentials::to_column(&e.destination_credentials),
            &e.trace_context,
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

pub(in crate::store::postgres) async fn endpoint(
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

pub(in crate::store::postgres) async fn endpoints_by_id(
    c: &impl GenericClient,
    ids: &[String],
) -> StoreResult<Vec<Endpoint>> {
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {ENDPOINT_COLUMNS} FROM endpoints WHERE id = ANY($1)"
        ))
        .await
        .map_err(pg)?;
    Ok(c.query(&stmt, &[&ids])
        .await
        .map_err(pg)?
        .iter()
        .map(endpoint_row)
        .collect())
}

pub(in crate::store::postgres) async fn list_endpoints(
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

/// The certificate bytes of a tenant's endpoints but one (`octet_length`: bytes, not
/// characters).
const TENANT_CERTIFICATE_BYTES: &str = "SELECT COALESCE(SUM(\
    COALESCE(octet_length(t ->> 'ca_bundle'), 0) \
    + COALESCE(octet_length(t -> 'client' ->> 'certificate'), 0) \
    + COALESCE(octet_length(t -> 'previous_client' ->> 'certificate'), 0)\
    ), 0)::BIGINT FROM (SELECT tls::json AS t FROM endpoints \
    WHERE tenant_id = $1 AND id <> $2 AND tls IS NOT NULL) AS held";

pub(in crate::store::postgres) async fn tenant_certificate_bytes(
    c: &impl GenericClient,
    tenant: &str,
    except: &str,
) -> StoreResult<u64> {
    let stmt = c
        .prepare_cached(TENANT_CERTIFICATE_BYTES)
        .await
        .map_err(pg)?;
    let row = c.query_one(&stmt, &[&tenant, &except]).await.map_err(pg)?;
    Ok(row.get::<_, i64>(0).max(0) as u64)
}

pub(in crate::store::postgres) async fn update_endpoint(
    c: &impl GenericClient,
    e: &Endpoint,
) -> StoreResult<()> {
    let n = c
        .execute(
            "UPDATE endpoints SET url = $3, description = $4, event_types = $5, secret = $6, \
             previous_secret = $7, previous_secret_until_ms = $8, enabled = $9, \
             disabled_reason = $10, lane_size = $11, latency_ceiling_ms = $12, \
             connect_timeout_ms = $13, read_timeout_ms = $14, total_timeout_ms = $15, \
             updated_at_ms = $16, headers = $17, tls = $18, oauth2 = $19, \
             rate_per_second = $20, rate_burst = $21, ordering = $22, destination = $23, \
             destination_credentials = $24, trace_context = $25 \
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
                &e.destination.to_column(),
                &DestinationCredentials::to_column(&e.destination_credentials),
                &e.trace_context,
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

pub(in crate::store::postgres) async fn delete_endpoint(
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

pub(in crate::store::postgres) async fn set_endpoint_enabled(
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

pub(in crate::store::postgres) async fn set_endpoint_failing(
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

pub(super) async fn endpoint_owned(
    c: &impl GenericClient,
    tenant: &str,
    endpoint: &str,
) -> StoreResult<()> {
    c.query_opt(
        "SELECT 1 FROM endpoints WHERE id = $1 AND tenant_id = $2",
        &[&endpoint, &tenant],
    )
    .await
    .map_err(pg)?
    .map(|_| ())
    .ok_or(StoreError::NotFound("endpoint"))
}
