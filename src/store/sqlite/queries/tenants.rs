//! Tenants: their rows, tokens, written policy (weight, ceiling) and backlog.

use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::store::sqlite::db;
use crate::store::*;

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

pub(in crate::store::sqlite) fn create_tenant(c: &Connection, t: &Tenant) -> StoreResult<()> {
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

pub(in crate::store::sqlite) fn tenant(c: &Connection, id: &str) -> StoreResult<Tenant> {
    c.prepare_cached(&format!(
        "SELECT {TENANT_COLUMNS} FROM tenants WHERE id = ?1"
    ))
    .and_then(|mut s| s.query_row([id], tenant_row).optional())
    .map_err(db)?
    .ok_or(StoreError::NotFound("tenant"))
}

pub(in crate::store::sqlite) fn tenant_by_token(
    c: &Connection,
    hash: &str,
) -> StoreResult<Option<Tenant>> {
    c.prepare_cached(&format!(
        "SELECT {TENANT_COLUMNS} FROM tenants WHERE token_hash = ?1"
    ))
    .and_then(|mut s| s.query_row([hash], tenant_row).optional())
    .map_err(db)
}

pub(in crate::store::sqlite) fn set_tenant_share(
    c: &Connection,
    id: &str,
    share: &SharePolicy,
) -> StoreResult<()> {
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

pub(in crate::store::sqlite) fn list_tenants(
    c: &Connection,
    after: &str,
    limit: u32,
) -> StoreResult<Vec<Tenant>> {
    let mut s = c
        .prepare_cached(&format!(
            "SELECT {TENANT_COLUMNS} FROM tenants WHERE id > ?1 ORDER BY id LIMIT ?2"
        ))
        .map_err(db)?;
    let rows = s.query_map(params![after, limit], tenant_row).map_err(db)?;
    rows.collect::<Result<_, _>>().map_err(db)
}

pub(in crate::store::sqlite) fn set_tenant_token(
    c: &Connection,
    id: &str,
    hash: &str,
) -> StoreResult<()> {
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

pub(in crate::store::sqlite) fn delete_tenant(c: &Connection, id: &str) -> StoreResult<()> {
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

pub(in crate::store::sqlite) fn tenant_backlog(
    c: &Connection,
    id: &str,
    now_ms: i64,
) -> StoreResult<TenantBacklog> {
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
        oldest_ready_age_ms: crate::store::waited_ms(now_ms, oldest),
        tenants_due: tenants_due as u64,
    })
}
