//! The settings table: process-wide values (the signing key, defaults) and the write probe.

use deadpool_postgres::GenericClient;

use crate::store::postgres::pg;
use crate::store::*;

pub(in crate::store::postgres) async fn setting(
    c: &impl GenericClient,
    key: &str,
) -> StoreResult<Option<String>> {
    let row = c
        .query_opt("SELECT value FROM settings WHERE key = $1", &[&key])
        .await
        .map_err(pg)?;
    Ok(row.map(|r| r.get(0)))
}

pub(in crate::store::postgres) async fn set_setting(
    c: &impl GenericClient,
    key: &str,
    value: &str,
) -> StoreResult<()> {
    c.execute(
        "INSERT INTO settings (key, value) VALUES ($1, $2) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        &[&key, &value],
    )
    .await
    .map_err(pg)?;
    Ok(())
}

pub(in crate::store::postgres) async fn delete_setting(
    c: &impl GenericClient,
    key: &str,
) -> StoreResult<bool> {
    let n = c
        .execute("DELETE FROM settings WHERE key = $1", &[&key])
        .await
        .map_err(pg)?;
    Ok(n > 0)
}

pub(in crate::store::postgres) async fn delete_settings_between(
    c: &impl GenericClient,
    from: &str,
    to: &str,
) -> StoreResult<u64> {
    // `key` compares bytewise (`COLLATE "C"`, schema v17), as on SQLite, whatever the
    // database's locale; the range walks its primary key.
    c.execute(
        "DELETE FROM settings WHERE key >= $1 AND key < $2",
        &[&from, &to],
    )
    .await
    .map_err(pg)
}

/// Insert `value` under `key` unless one is there, then read back whichever is stored. Two
/// statements on purpose: a single statement's snapshot would not see a row that a concurrent
/// insert committed while this one waited on it.
pub(in crate::store::postgres) async fn init_setting(
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
pub(in crate::store::postgres) async fn probe_room(c: &impl GenericClient) -> StoreResult<()> {
    let md5s = (PROBE_ROOM_BYTES / 32) as i32;
    c.execute(PROBE_ROOM, &[&md5s]).await.map_err(pg)?;
    Ok(())
}
