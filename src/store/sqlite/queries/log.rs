//! What happened: messages, deliveries and attempts as the API lists them, and endpoint events.

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::*;
use crate::store::sqlite::db;
use crate::store::*;

pub(super) const DELIVERY_COLUMNS: &str = "id, message_id, endpoint_id, state, attempts, visible_at_ms, \
    last_status, last_error, created_at_ms, updated_at_ms";

pub(in crate::store::sqlite) fn message(
    c: &Connection,
    tenant: &str,
    id: &str,
) -> StoreResult<MessageView> {
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

pub(in crate::store::sqlite) fn list_messages(
    c: &Connection,
    f: &MessageFilter,
) -> StoreResult<Vec<MessageSummary>> {
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

/// Columns: id, delivery_id, started_at_ms, duration_ms, status, error_kind, response,
/// message_id, traceparent.
fn attempt_row(r: &Row) -> rusqlite::Result<AttemptView> {
    Ok(AttemptView {
        id: r.get(0)?,
        delivery_id: r.get(1)?,
        started_at_ms: r.get(2)?,
        duration_ms: r.get(3)?,
        status: r.get(4)?,
        error_kind: r.get(5)?,
        response: r.get(6)?,
        trace_id: crate::model::hex(&crate::model::trace_id_of(
            r.get::<_, Option<String>>(8)?.as_deref(),
            &r.get::<_, String>(7)?,
        )),
    })
}

pub(super) fn delivery_row(r: &Row) -> rusqlite::Result<DeliveryView> {
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

pub(in crate::store::sqlite) fn list_deliveries(
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

pub(in crate::store::sqlite) fn attempts(
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
            "SELECT a.id, a.delivery_id, a.started_at_ms, a.duration_ms, a.status, a.error_kind, \
             a.response, d.message_id, m.traceparent FROM attempts a \
             JOIN deliveries d ON d.id = a.delivery_id \
             LEFT JOIN messages m ON m.id = d.message_id \
             WHERE a.delivery_id = ?1 ORDER BY a.id",
        )
        .map_err(db)?;
    let rows = s.query_map([delivery_id], attempt_row).map_err(db)?;
    rows.collect::<Result<_, _>>().map_err(db)
}

/// An endpoint's recent attempts, newest first (the status fallback and the attempts list).
const ENDPOINT_ATTEMPTS: &str = "SELECT a.id, a.delivery_id, a.started_at_ms, a.duration_ms, \
    a.status, a.error_kind, a.response, d.message_id, m.traceparent FROM attempts a \
    JOIN deliveries d ON d.id = a.delivery_id LEFT JOIN messages m ON m.id = d.message_id \
    WHERE d.endpoint_id = ?1 AND d.tenant_id = ?2 AND a.started_at_ms >= ?3 AND a.id < ?4 \
    ORDER BY a.id DESC LIMIT ?5";

pub(in crate::store::sqlite) fn endpoint_attempts(
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

pub(in crate::store::sqlite) fn record_event(c: &Connection, e: &EndpointEvent) -> StoreResult<()> {
    c.execute(
        "INSERT INTO endpoint_events (tenant_id, endpoint_id, kind, detail, at_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![e.tenant_id, e.endpoint_id, e.kind, e.detail, e.at_ms],
    )
    .map_err(db)?;
    Ok(())
}

pub(in crate::store::sqlite) fn list_events(
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
