//! Instants as the API shows and reads them: RFC 3339 in UTC with milliseconds
//! (`2026-11-30T14:05:09.123Z`), from the store's epoch milliseconds.
//!
//! Durations keep their unit in their name instead (`duration_ms`, `read_timeout_ms`,
//! `p95_s`): a duration is a number, and a name that carries its unit cannot be misread.

use serde::{Serialize, Serializer};
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use crate::web::problem::Problem;

/// An instant, serialised as an RFC 3339 date-time string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// The instant `ms` milliseconds after the Unix epoch.
    pub fn from_ms(ms: i64) -> Self {
        Self(ms)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&crate::clock::rfc3339(self.0))
    }
}

impl PartialSchema for Timestamp {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
            .description(Some("RFC 3339 date-time, UTC"))
            .examples([serde_json::json!("2026-11-30T14:05:09.123Z")])
            .into()
    }
}

impl ToSchema for Timestamp {}

/// Read an RFC 3339 instant given as `field`; anything else is a problem naming the field.
pub fn parse_instant(field: &str, text: &str) -> Result<i64, Problem> {
    crate::clock::parse_rfc3339(text.trim()).map_err(|e| Problem::bad_request(field, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialises_as_rfc_3339() {
        let json = serde_json::to_value(Timestamp(1_649_367_553_123)).unwrap();
        assert_eq!(json, "2022-04-07T21:39:13.123Z");
        let p = parse_instant("since", "yesterday").unwrap_err();
        assert_eq!(p.field.as_deref(), Some("since"));
        assert_eq!(p.status, 400);
        assert_eq!(
            parse_instant("since", " 2022-04-07T21:39:13.123Z ").ok(),
            Some(1_649_367_553_123)
        );
    }
}
