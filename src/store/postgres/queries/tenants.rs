//! Tenants: their rows, tokens, written policy (weight, ceiling) and backlog.

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use crate::store::postgres::pg;
use crate::store::*;

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

pub(in crate::store::postgres) async fn create_tenant(
    c: &impl GenericClient,
    t: &Tenant,
) -> StoreResult<()> {
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

pub(in crate::store::postgres) async fn tenant(
    c: &impl GenericClient,
    id: &str,
) -> StoreResult<Tenant> {
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

pub(in crate::store::postgres) async fn tenant_by_token(
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

pub(in crate::store::postgres) async fn list_tenants(
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

pub(in crate::store::postgres) async fn set_tenant_share(
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

pub(in crate::store::postgres) async fn tenant_backlog(
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
        oldest_ready_age_ms: crate::store::waited_ms(now_ms, oldest),
        tenants_due: row.get::<_, i64>(2) as u64,
    })
}

pub(in crate::store::postgres) async fn set_tenant_token(
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

pub(in crate::store::postgres) async fn delete_tenant(
    c: &impl GenericClient,
    id: &str,
) -> StoreResult<()> {
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
