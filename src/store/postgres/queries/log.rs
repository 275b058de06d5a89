//! What happened: messages, deliveries and attempts as the API lists them, and endpoint events.

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use super::*;
use crate::store::postgres::pg;
use crate::store::*;

pub(super) const DELIVERY_COLUMNS: &str = "id, message_id, endpoint_id, state, attempts, visible_at_ms, \
    last_status, last_error, created_at_ms, updated_at_ms";

pub(in crate::store::postgres) async fn message(
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

pub(in crate::store::postgres) async fn list_messages(
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

/// Columns: id, delivery_id, started_at_ms, duration_ms, status, error_kind, response,
/// message_id, traceparent.
fn attempt_row(r: &Row) -> AttemptView {
    AttemptView {
        id: r.get(0),
        delivery_id: r.get(1),
        started_at_ms: r.get(2),
        duration_ms: r.get::<_, i64>(3) as u32,
        status: r.get::<_, Option<i64>>(4).map(|s| s as u16),
        error_kind: r.get(5),
        response: r.get(6),
        trace_id: crate::model::hex(&crate::model::trace_id_of(r.get(8), r.get(7))),
    }
}

pub(super) fn delivery_row(r: &Row) -> DeliveryView {
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

pub(in crate::store::postgres) async fn list_deliveries(
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

pub(in crate::store::postgres) async fn attempts(
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
            "SELECT a.id, a.delivery_id, a.started_at_ms, a.duration_ms, a.status, a.error_kind, \
             a.response, d.message_id, m.traceparent FROM attempts a \
             JOIN deliveries d ON d.id = a.delivery_id \
             LEFT JOIN messages m ON m.id = d.message_id \
             WHERE a.delivery_id = $1 ORDER BY a.id",
            &[&delivery_id],
        )
        .await
        .map_err(pg)?;
    Ok(rows.iter().map(attempt_row).collect())
}

/// An endpoint's recent attempts, newest first (the status fallback and the attempts list).
const ENDPOINT_ATTEMPTS: &str = "SELECT a.id, a.delivery_id, a.started_at_ms, a.duration_ms, \
    a.status, a.error_kind, a.response, d.message_id, m.traceparent FROM attempts a \
    JOIN deliveries d ON d.id = a.delivery_id LEFT JOIN messages m ON m.id = d.message_id \
    WHERE d.endpoint_id = $1 AND d.tenant_id = $2 AND a.started_at_ms >= $3 AND a.id < $4 \
    ORDER BY a.id DESC LIMIT $5";

pub(in crate::store::postgres) async fn endpoint_attempts(
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

pub(in crate::store::postgres) async fn record_event(
    c: &impl GenericClient,
    e: &EndpointEvent,
) -> StoreResult<()> {
    c.execute(
        "INSERT INTO endpoint_events (tenant_id, endpoint_id, kind, detail, at_ms) \
         VALUES ($1, $2, $3, $4, $5)",
        &[&e.tenant_id, &e.endpoint_id, &e.kind, &e.detail, &e.at_ms],
    )
    .await
    .map_err(pg)?;
    Ok(())
}

pub(in crate::store::postgres) async fn list_events(
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
