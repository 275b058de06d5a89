//! SQLite errors as `StoreError`s that keep their cause: the extended result code, SQLite's
//! name for it and the engine's message; a full disk or database is `Full`.

use crate::store::StoreError;

/// A SQLite error as a `StoreError` that keeps the extended result code and the message:
/// "sqlite error 13 (SQLITE_FULL): database or disk is full".
pub(crate) fn db(e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode as C;
    match e {
        rusqlite::Error::QueryReturnedNoRows => StoreError::NotFound("row"),
        rusqlite::Error::SqliteFailure(f, msg) => {
            let text = format!(
                "sqlite error {} ({}): {}",
                f.extended_code,
                primary_name(f.extended_code),
                msg.unwrap_or_else(|| f.to_string())
            );
            match f.code {
                C::ConstraintViolation => StoreError::Conflict(text),
                C::DiskFull => StoreError::Full(text),
                C::CannotOpen
                | C::SystemIoFailure
                | C::DatabaseBusy
                | C::DatabaseLocked
                | C::OutOfMemory => StoreError::Unavailable(text),
                _ => StoreError::Database(text),
            }
        }
        other => StoreError::Database(format!("sqlite: {other}")),
    }
}

/// SQLite's name for the primary result code inside an extended one (`1555` is a
/// `SQLITE_CONSTRAINT`).
fn primary_name(extended: i32) -> &'static str {
    const NAMES: [&str; 29] = [
        "SQLITE_OK",
        "SQLITE_ERROR",
        "SQLITE_INTERNAL",
        "SQLITE_PERM",
        "SQLITE_ABORT",
        "SQLITE_BUSY",
        "SQLITE_LOCKED",
        "SQLITE_NOMEM",
        "SQLITE_READONLY",
        "SQLITE_INTERRUPT",
        "SQLITE_IOERR",
        "SQLITE_CORRUPT",
        "SQLITE_NOTFOUND",
        "SQLITE_FULL",
        "SQLITE_CANTOPEN",
        "SQLITE_PROTOCOL",
        "SQLITE_EMPTY",
        "SQLITE_SCHEMA",
        "SQLITE_TOOBIG",
        "SQLITE_CONSTRAINT",
        "SQLITE_MISMATCH",
        "SQLITE_MISUSE",
        "SQLITE_NOLFS",
        "SQLITE_AUTH",
        "SQLITE_FORMAT",
        "SQLITE_RANGE",
        "SQLITE_NOTADB",
        "SQLITE_NOTICE",
        "SQLITE_WARNING",
    ];
    NAMES
        .get((extended & 0xff) as usize)
        .copied()
        .unwrap_or("SQLITE_UNKNOWN")
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::*;

    #[test]
    fn engine_errors_keep_their_extended_code_and_message() {
        let c = Connection::open_in_memory().unwrap();
        let e = db(c.execute_batch("SELECT * FROM no_such_table").unwrap_err());
        assert!(matches!(e, StoreError::Database(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "store error: sqlite error 1 (SQLITE_ERROR): no such table: no_such_table"
        );
        c.execute_batch("CREATE TABLE t (k TEXT PRIMARY KEY); INSERT INTO t VALUES ('a')")
            .unwrap();
        let e = db(c.execute_batch("INSERT INTO t VALUES ('a')").unwrap_err());
        assert!(matches!(e, StoreError::Conflict(_)), "{e:?}");
        assert!(
            e.to_string()
                .contains("sqlite error 1555 (SQLITE_CONSTRAINT)"),
            "{e}"
        );
        assert!(
            e.to_string().contains("UNIQUE constraint failed: t.k"),
            "{e}"
        );
    }
}
