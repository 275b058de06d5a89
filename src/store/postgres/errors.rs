//! PostgreSQL and pool errors as `StoreError`s that keep their cause: the SQLSTATE with its
//! condition name, the server's message, detail and hint, or the chain of I/O causes, and the
//! address a pool could not reach (never the connection string, so never a password).

use deadpool_postgres::{PoolError, TimeoutType};

use crate::store::StoreError;
use crate::store::deadline::human;

/// Longest cause kept; a detail can quote a whole key.
const MAX_CAUSE: usize = 1000;

/// A statement's error, classified by its SQLSTATE.
pub(crate) fn pg(e: tokio_postgres::Error) -> StoreError {
    let text = cause(&e);
    let Some(code) = e.code().map(|c| c.code()) else {
        // No SQLSTATE: the connection broke, timed out or could not be used.
        return StoreError::Unavailable(text);
    };
    match code {
        "23505" | "23503" => StoreError::Conflict(text),
        "53100" => StoreError::Full(text),
        // Transient: the connection or server went away, the server is overloaded or shutting
        // down, a statement or idle-transaction timeout fired, a lock could not be had, the
        // transaction lost a race, or a failover left us on a read-only standby.
        c if c.starts_with("08")
            || c.starts_with("57")
            || c.starts_with("53")
            || c.starts_with("40")
            || matches!(c, "25006" | "25P03" | "55P03") =>
        {
            StoreError::Unavailable(text)
        }
        _ => StoreError::Database(text),
    }
}

/// A pool that could not hand out a connection: always `Unavailable` (nothing ran), naming
/// `target` (host:port) and the cause.
pub(crate) fn pool(e: PoolError, target: &str, timeouts: &super::PoolTimeouts) -> StoreError {
    StoreError::Unavailable(match e {
        PoolError::Backend(e) => format!("cannot connect to {target}: {}", cause(&e)),
        PoolError::Timeout(TimeoutType::Wait) => format!(
            "no connection to {target} came free within {} (all {} in use)",
            human(timeouts.wait),
            timeouts.max_size
        ),
        PoolError::Timeout(TimeoutType::Create) => format!(
            "cannot connect to {target}: no answer within {}",
            human(timeouts.create)
        ),
        PoolError::Timeout(TimeoutType::Recycle) => format!(
            "a connection to {target} did not pass its check within {}",
            human(timeouts.create)
        ),
        PoolError::Closed => format!("the connection pool for {target} is closed"),
        other => format!("cannot connect to {target}: {other}"),
    })
}

/// `host:port` for each host in `config` (a Unix socket directory for socket hosts).
pub(crate) fn target(config: &tokio_postgres::Config) -> String {
    let ports = config.get_ports();
    config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = ports
                .get(i)
                .or_else(|| ports.first())
                .copied()
                .unwrap_or(5432);
            match host {
                tokio_postgres::config::Host::Tcp(h) => format!("{h}:{port}"),
                #[cfg(unix)]
                tokio_postgres::config::Host::Unix(p) => format!("{}:{port}", p.display()),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The cause of `e` as one line: "database error 22021 (character_not_in_repertoire): invalid
/// byte sequence …; detail: …; hint: …" for a server error, the chain of causes otherwise.
pub(crate) fn cause(e: &tokio_postgres::Error) -> String {
    let mut text = match e.as_db_error() {
        Some(db) => {
            let code = db.code().code();
            let mut t = format!(
                "database error {code} ({}): {}",
                condition(code),
                db.message()
            );
            // "Failing row contains (…)" quotes a whole row, secrets included: leave it out.
            if let Some(detail) = db.detail().filter(|d| !d.starts_with("Failing row")) {
                t.push_str("; detail: ");
                t.push_str(detail);
            }
            if let Some(hint) = db.hint() {
                t.push_str("; hint: ");
                t.push_str(hint);
            }
            t
        }
        None => {
            let mut t = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                t.push_str(": ");
                t.push_str(&s.to_string());
                source = s.source();
            }
            t
        }
    };
    if text.len() > MAX_CAUSE {
        let mut end = MAX_CAUSE;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// The condition name of a SQLSTATE (PostgreSQL's Appendix A): the codes sluice can meet by
/// name, any other by its class.
pub(crate) fn condition(code: &str) -> &'static str {
    match code {
        "08000" => "connection_exception",
        "08001" => "sqlclient_unable_to_establish_sqlconnection",
        "08003" => "connection_does_not_exist",
        "08004" => "sqlserver_rejected_establishment_of_sqlconnection",
        "08006" => "connection_failure",
        "08P01" => "protocol_violation",
        "22001" => "string_data_right_truncation",
        "22003" => "numeric_value_out_of_range",
        "22007" => "invalid_datetime_format",
        "22012" => "division_by_zero",
        "22021" => "character_not_in_repertoire",
        "22P02" => "invalid_text_representation",
        "22P05" => "untranslatable_character",
        "23502" => "not_null_violation",
        "23503" => "foreign_key_violation",
        "23505" => "unique_violation",
        "23514" => "check_violation",
        "23P01" => "exclusion_violation",
        "25001" => "active_sql_transaction",
        "25006" => "read_only_sql_transaction",
        "25P02" => "in_failed_sql_transaction",
        "25P03" => "idle_in_transaction_session_timeout",
        "28000" => "invalid_authorization_specification",
        "28P01" => "invalid_password",
        "3D000" => "invalid_catalog_name",
        "3F000" => "invalid_schema_name",
        "40001" => "serialization_failure",
        "40P01" => "deadlock_detected",
        "42501" => "insufficient_privilege",
        "42601" => "syntax_error",
        "42703" => "undefined_column",
        "42883" => "undefined_function",
        "42P01" => "undefined_table",
        "42P07" => "duplicate_table",
        "53000" => "insufficient_resources",
        "53100" => "disk_full",
        "53200" => "out_of_memory",
        "53300" => "too_many_connections",
        "53400" => "configuration_limit_exceeded",
        "54000" => "program_limit_exceeded",
        "55000" => "object_not_in_prerequisite_state",
        "55006" => "object_in_use",
        "55P03" => "lock_not_available",
        "57000" => "operator_intervention",
        "57014" => "query_canceled",
        "57P01" => "admin_shutdown",
        "57P02" => "crash_shutdown",
        "57P03" => "cannot_connect_now",
        "57P04" => "database_dropped",
        "57P05" => "idle_session_timeout",
        "58000" => "system_error",
        "58030" => "io_error",
        "XX000" => "internal_error",
        "XX001" => "data_corrupted",
        "XX002" => "index_corrupted",
        _ => match code.get(..2).unwrap_or("") {
            "08" => "connection_exception",
            "0A" => "feature_not_supported",
            "21" => "cardinality_violation",
            "22" => "data_exception",
            "23" => "integrity_constraint_violation",
            "25" => "invalid_transaction_state",
            "28" => "invalid_authorization_specification",
            "40" => "transaction_rollback",
            "42" => "syntax_error_or_access_rule_violation",
            "53" => "insufficient_resources",
            "54" => "program_limit_exceeded",
            "55" => "object_not_in_prerequisite_state",
            "57" => "operator_intervention",
            "58" => "system_error",
            "XX" => "internal_error",
            _ => "unnamed condition",
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_by_code_then_by_class() {
        assert_eq!(condition("22021"), "character_not_in_repertoire");
        assert_eq!(condition("53300"), "too_many_connections");
        assert_eq!(condition("22999"), "data_exception");
        assert_eq!(condition("ZZ999"), "unnamed condition");
    }

    #[test]
    fn targets_name_every_host_and_port() {
        let c: tokio_postgres::Config = "postgres://u:secret@db1:5433,db2/x".parse().unwrap();
        let t = target(&c);
        assert!(t.starts_with("db1:5433,db2:"), "{t}");
        assert!(!t.contains("secret"));
    }
}
