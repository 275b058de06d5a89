//! The settings table: process-wide values (the signing key, defaults) and the write probe.

use rusqlite::{Connection, OptionalExtension};

use crate::store::sqlite::db;
use crate::store::*;

pub(in crate::store::sqlite) fn setting(c: &Connection, key: &str) -> StoreResult<Option<String>> {
    c.prepare_cached("SELECT value FROM settings WHERE key = ?1")
        .and_then(|mut s| s.query_row([key], |r| r.get(0)).optional())
        .map_err(db)
}

pub(in crate::store::sqlite) fn set_setting(
    c: &Connection,
    key: &str,
    value: &str,
) -> StoreResult<()> {
    c.execute(
        "INSERT INTO settings (key, value) VALUES (?1, ?2) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [key, value],
    )
    .map_err(db)?;
    Ok(())
}

pub(in crate::store::sqlite) fn delete_setting(c: &Connection, key: &str) -> StoreResult<bool> {
    let n = c
        .execute("DELETE FROM settings WHERE key = ?1", [key])
        .map_err(db)?;
    Ok(n > 0)
}

pub(in crate::store::sqlite) fn delete_settings_between(
    c: &Connection,
    from: &str,
    to: &str,
) -> StoreResult<u64> {
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
pub(in crate::store::sqlite) fn init_setting(
    c: &Connection,
    key: &str,
    value: &str,
) -> StoreResult<String> {
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
pub(in crate::store::sqlite) fn probe_room(c: &Connection) -> StoreResult<()> {
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
