//! The message log's filters: event type (exact or `order.*`), arrival time, endpoint and
//! delivery state, newest first with an id cursor, as one statement both drivers run.
//!
//! Message ids embed their creation time ([`crate::ids::new_id`]), so a time range is also an
//! id range: the statement bounds `id` as well as `created_at_ms`, and reads the
//! `(tenant_id, id)` index from the right place instead of walking every newer message. The
//! id is made a little before the message is stored (its request waits for a group commit of
//! at most the store deadline), so the lower id bound keeps [`ID_SLACK_MS`] in hand.

use super::DeliveryState;

/// Longest time between a message id being made and its row being stored: above the longest
/// store deadline (60 s) a request can wait for its commit.
pub const ID_SLACK_MS: i64 = 5 * 60 * 1000;

/// Which messages to list.
#[derive(Debug, Clone, Default)]
pub struct MessageFilter {
    /// The tenant (always set by the API).
    pub tenant_id: String,
    /// An event type, or a prefix pattern `order.*` (matches `order.paid`, not `order`).
    pub event_type: Option<String>,
    /// Arrived at or after this (epoch ms).
    pub since_ms: Option<i64>,
    /// Arrived before this (epoch ms).
    pub until_ms: Option<i64>,
    /// Only messages with a delivery to this endpoint.
    pub endpoint_id: Option<String>,
    /// Only messages with a delivery in this state (to `endpoint_id`, when given).
    pub state: Option<DeliveryState>,
    /// Cursor: ids below this one (the last id of the previous page).
    pub before: Option<String>,
    /// Page size.
    pub limit: u32,
}

/// One bound value of a filter statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    /// A text value.
    Text(String),
    /// An integer value.
    Int(i64),
}

/// Columns every message listing returns.
const COLUMNS: &str = "SELECT m.id, m.event_type, m.created_at_ms FROM messages m";

impl MessageFilter {
    /// The statement and its parameters, placeholders written by `placeholder(n)` (1-based):
    /// `?n` for SQLite, `$n` for PostgreSQL. Only the filters given appear, so each query has a
    /// plan of its own shape (no `? IS NULL OR …` that hides the index from the planner).
    pub fn statement(&self, placeholder: impl Fn(usize) -> String) -> (String, Vec<Param>) {
        let mut params = vec![Param::Text(self.tenant_id.clone())];
        let mut sql = format!("{COLUMNS} WHERE m.tenant_id = {}", placeholder(1));
        let mut bind = |sql: &mut String, fragment: &str, value: Param| {
            params.push(value);
            let p = placeholder(params.len());
            sql.push_str(" AND ");
            sql.push_str(&fragment.replace('#', &p));
        };
        let (low, high) = self.id_bounds();
        if let Some(high) = high {
            bind(&mut sql, "m.id < #", Param::Text(high));
        }
        if let Some(low) = low {
            bind(&mut sql, "m.id >= #", Param::Text(low));
        }
        if let Some(since) = self.since_ms {
            bind(&mut sql, "m.created_at_ms >= #", Param::Int(since));
        }
        if let Some(until) = self.until_ms {
            bind(&mut sql, "m.created_at_ms < #", Param::Int(until));
        }
        match self.event_type.as_deref() {
            None | Some("*") => {}
            Some(pattern) => match pattern.strip_suffix('*') {
                // A prefix pattern: below the dot only (`order.*` is not `order`).
                Some(prefix) => bind(
                    &mut sql,
                    "substr(m.event_type, 1, length(#)) = # AND length(m.event_type) > length(#)",
                    Param::Text(prefix.to_owned()),
                ),
                None => bind(
                    &mut sql,
                    "m.event_type = #",
                    Param::Text(pattern.to_owned()),
                ),
            },
        }
        if self.endpoint_id.is_some() || self.state.is_some() {
            let mut inner =
                String::from("EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = m.id");
            if let Some(e) = &self.endpoint_id {
                params.push(Param::Text(e.clone()));
                inner.push_str(&format!(
                    " AND d.endpoint_id = {}",
                    placeholder(params.len())
                ));
            }
            if let Some(state) = self.state {
                params.push(Param::Int(state.code()));
                inner.push_str(&format!(" AND d.state = {}", placeholder(params.len())));
            }
            inner.push(')');
            sql.push_str(" AND ");
            sql.push_str(&inner);
        }
        params.push(Param::Int(i64::from(self.limit)));
        sql.push_str(&format!(
            " ORDER BY m.id DESC LIMIT {}",
            placeholder(params.len())
        ));
        (sql, params)
    }

    /// The id range the time range and the cursor allow: (at or above, below).
    fn id_bounds(&self) -> (Option<String>, Option<String>) {
        let low = self
            .since_ms
            .map(|ms| crate::ids::time_floor("msg", ms - ID_SLACK_MS));
        // An id is made before its message is stored, so one stored before `until` was made
        // before it too.
        let until = self.until_ms.map(|ms| crate::ids::time_floor("msg", ms));
        let high = match (self.before.clone(), until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        (low, high)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pg(n: usize) -> String {
        format!("${n}")
    }

    #[test]
    fn only_the_filters_given_appear() {
        let f = MessageFilter {
            tenant_id: "ten_1".into(),
            limit: 10,
            ..Default::default()
        };
        let (sql, params) = f.statement(pg);
        assert_eq!(
            sql,
            "SELECT m.id, m.event_type, m.created_at_ms FROM messages m WHERE m.tenant_id = $1 \
             ORDER BY m.id DESC LIMIT $2"
        );
        assert_eq!(params, [Param::Text("ten_1".into()), Param::Int(10)]);
    }

    #[test]
    fn every_filter_binds_its_own_placeholder() {
        let f = MessageFilter {
            tenant_id: "ten_1".into(),
            event_type: Some("order.*".into()),
            since_ms: Some(1_000_000),
            until_ms: Some(2_000_000),
            endpoint_id: Some("ep_1".into()),
            state: Some(DeliveryState::Dead),
            before: Some("msg_zzz".into()),
            limit: 5,
        };
        let (sql, params) = f.statement(pg);
        assert!(sql.contains("m.id < $2 AND m.id >= $3"), "{sql}");
        assert!(
            sql.contains("substr(m.event_type, 1, length($6)) = $6"),
            "{sql}"
        );
        assert!(sql.contains("d.endpoint_id = $7 AND d.state = $8"), "{sql}");
        assert!(sql.ends_with("LIMIT $9"), "{sql}");
        assert_eq!(params.len(), 9);
        assert_eq!(params[5], Param::Text("order.".into()));
        let (sqlite, _) = f.statement(|n| format!("?{n}"));
        assert!(sqlite.contains("length(?6)) = ?6"), "{sqlite}");
    }

    #[test]
    fn the_cursor_and_the_time_range_bound_the_ids_together() {
        let until = 1_700_000_000_000;
        let f = MessageFilter {
            until_ms: Some(until),
            before: Some("msg_zzzz".into()),
            ..Default::default()
        };
        let floor = crate::ids::time_floor("msg", until);
        assert_eq!(f.id_bounds(), (None, Some(floor.clone())));
        let f = MessageFilter {
            before: Some("msg_0".into()),
            ..f
        };
        assert_eq!(f.id_bounds().1.as_deref(), Some("msg_0"));
    }
}
