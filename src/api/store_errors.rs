//! A store error as the problem the API answers with: its cause kept, so a producer's 5xx and the
//! operator's log say the same thing.

use axum::http::StatusCode;

use crate::store::StoreError;
use crate::web::problem::Problem;

/// Store errors carry their cause into the problem (the SQLSTATE and server message, the
/// address that did not answer, the deadline that passed: never a password), so a producer's
/// 5xx and the operator's log say the same thing.
impl From<StoreError> for Problem {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => Problem::not_found(what),
            StoreError::Conflict(msg) => Problem::new(StatusCode::CONFLICT, msg),
            StoreError::Unavailable(msg) => {
                tracing::warn!(error = %msg, "store unavailable");
                Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "the database is unavailable ({msg}); retry later, with the same \
                         Idempotency-Key for messages"
                    ),
                )
            }
            // 507, not 503: the cause is not transient and needs an operator. It is still a
            // 5xx, so producers that retry on server errors keep retrying, and nothing was
            // stored (the write rolled back).
            StoreError::Full(msg) => {
                tracing::error!(error = %msg, "store full");
                Problem::new(
                    StatusCode::INSUFFICIENT_STORAGE,
                    format!(
                        "the database is full ({msg}); nothing was stored, retry once room \
                         has been made"
                    ),
                )
            }
            StoreError::Database(msg) => {
                tracing::error!(error = %msg, "store error");
                Problem::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("database error: {msg}"),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_errors_carry_their_cause() {
        let p = Problem::from(StoreError::Database(
            "database error 22021 (character_not_in_repertoire): invalid byte sequence".into(),
        ));
        assert_eq!(p.status, 500);
        assert!(p.detail.contains("22021"), "{}", p.detail);
        let p = Problem::from(StoreError::Full(
            "sqlite error 13 (SQLITE_FULL): database or disk is full".into(),
        ));
        assert_eq!(p.status, 507);
        assert!(p.detail.contains("full"), "{}", p.detail);
        let p = Problem::from(StoreError::Unavailable(
            "the database did not answer within 5s".into(),
        ));
        assert_eq!(p.status, 503);
        assert!(p.detail.contains("within 5s"), "{}", p.detail);
    }
}
