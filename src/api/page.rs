//! Cursor pagination shared by every list: `?limit=N&after=CURSOR` in, `{"data", "next"}` out.

use serde::{Deserialize, Serialize};

use super::error::Problem;

/// Largest page.
pub const MAX_LIMIT: u32 = 500;
/// Page size when none is asked for.
pub const DEFAULT_LIMIT: u32 = 50;

/// Query parameters of a list.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// Page size, 1–500.
    pub limit: Option<u32>,
    /// The `next` cursor of the previous page.
    pub after: Option<String>,
    /// Optional state filter (lists of deliveries).
    pub state: Option<String>,
}

impl PageQuery {
    /// The page size, validated.
    pub fn limit(&self) -> Result<u32, Problem> {
        match self.limit {
            None => Ok(DEFAULT_LIMIT),
            Some(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
            Some(n) => Err(Problem::bad_request(
                "limit",
                format!("limit {n} must be 1–{MAX_LIMIT}"),
            )),
        }
    }

    /// The cursor, checked to look like an id of the given prefix.
    pub fn after_id(&self, prefix: &str) -> Result<Option<&str>, Problem> {
        match self.after.as_deref() {
            None => Ok(None),
            Some(c) if c.starts_with(prefix) && c.len() < 64 => Ok(Some(c)),
            Some(c) => Err(Problem::bad_request("after", format!("bad cursor {c:?}"))),
        }
    }

    /// The cursor as a numeric id.
    pub fn after_number(&self) -> Result<Option<i64>, Problem> {
        self.after
            .as_deref()
            .map(|c| {
                c.parse::<i64>()
                    .ok()
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| Problem::bad_request("after", format!("bad cursor {c:?}")))
            })
            .transpose()
    }
}

/// One page of results.
#[derive(Debug, Serialize)]
pub struct Page<T> {
    /// The items.
    pub data: Vec<T>,
    /// Cursor for the next page, or null at the end.
    pub next: Option<String>,
}

impl<T> Page<T> {
    /// A page whose next cursor is derived from its last item when it is full.
    pub fn new(data: Vec<T>, limit: u32, cursor: impl Fn(&T) -> String) -> Self {
        let next = if data.len() as u32 >= limit {
            data.last().map(cursor)
        } else {
            None
        };
        Self { data, next }
    }
}
