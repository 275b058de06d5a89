//! Event types: the name a message carries (`order.paid`) and the filters that select by it
//! (an endpoint's subscriptions, the message log's filter): an event type, a prefix pattern
//! (`order.*`) or `*`.

use crate::web::problem::Problem;

/// Validate an event type name.
pub(crate) fn check_event_type(t: &str) -> Result<(), Problem> {
    let ok = !t.is_empty()
        && t.len() <= 256
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'));
    if ok {
        Ok(())
    } else {
        Err(Problem::unprocessable(
            "event_type",
            format!("event type {t:?} must be 1–256 of A-Z a-z 0-9 . _ - :"),
        ))
    }
}

/// Endpoint filters: each an event type, a prefix pattern (`order.*`, `order.paid.*`: every
/// type below that dot), or `*` (every type).
pub(crate) fn check_event_types(types: &[String]) -> Result<(), Problem> {
    if types.len() > 100 {
        return Err(Problem::unprocessable(
            "event_types",
            "at most 100 event types",
        ));
    }
    for t in types {
        let exact = match t.strip_suffix(".*") {
            _ if t == "*" => continue,
            Some(prefix) => prefix,
            None => t,
        };
        if exact.contains('*') || check_event_type(exact).is_err() {
            return Err(Problem::unprocessable(
                "event_types",
                format!(
                    "event type filter {t:?} must be an event type (1–256 of A-Z a-z 0-9 . _ - :), \
                     a prefix pattern like order.* or *"
                ),
            ));
        }
    }
    Ok(())
}
