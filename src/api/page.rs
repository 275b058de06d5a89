//! Cursor pagination shared by every list (`?limit=N&after=CURSOR` in, `{"data", "next"}` out),
//! and the query-string extractor that names the parameter at fault.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::views::StateParam;
use crate::web::problem::Problem;

/// Largest page.
pub(super) const MAX_LIMIT: u32 = 500;
/// Page size when none is asked for.
pub(super) const DEFAULT_LIMIT: u32 = 50;

/// Query parameters of a list.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct PageQuery {
    /// Page size, 1–500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    /// The `next` cursor of the previous page.
    pub after: Option<String>,
}

/// Query parameters of a list of deliveries: a page and an optional state filter.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct DeliveryQuery {
    /// Page size, 1–500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    /// The `next` cursor of the previous page (a delivery id, `dlv_…`).
    pub after: Option<String>,
    /// Only deliveries in this state.
    pub state: Option<StateParam>,
}

impl DeliveryQuery {
    /// The page part.
    pub(crate) fn page(&self) -> PageQuery {
        PageQuery {
            limit: self.limit,
            after: self.after.clone(),
        }
    }
}

impl PageQuery {
    /// The page size, validated.
    pub(crate) fn limit(&self) -> Result<u32, Problem> {
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
    pub(crate) fn after_id(&self, prefix: &str) -> Result<Option<&str>, Problem> {
        match self.after.as_deref() {
            None => Ok(None),
            Some(c) if c.starts_with(prefix) && super::views::looks_like_id(c) => Ok(Some(c)),
            Some(c) => Err(Problem::bad_request("after", format!("bad cursor {c:?}"))),
        }
    }

    /// The cursor as the row number behind a public row id (`dlv_…` for `prefix` `dlv`).
    pub(crate) fn after_number(
        &self,
        row_ids: &crate::ids::RowIds,
        prefix: &str,
    ) -> Result<Option<i64>, Problem> {
        self.after
            .as_deref()
            .map(|c| {
                row_ids
                    .parse(prefix, c)
                    .ok_or_else(|| Problem::bad_request("after", format!("bad cursor {c:?}")))
            })
            .transpose()
    }
}

/// One page of results.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Page<T> {
    /// The items.
    pub data: Vec<T>,
    /// Cursor for the next page (pass it as `after`), or null at the end.
    pub next: Option<String>,
}

impl<T> Page<T> {
    /// A page whose next cursor is derived from its last item when it is full.
    pub(crate) fn new(data: Vec<T>, limit: u32, cursor: impl Fn(&T) -> String) -> Self {
        let next = if data.len() as u32 >= limit {
            data.last().map(cursor)
        } else {
            None
        };
        Self { data, next }
    }
}

/// A query string of type `T`; a bad one is a 400 problem naming the parameter.
pub(crate) struct Q<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Q<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Problem> {
        let query = parts.uri.query().unwrap_or("");
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(de).map(Q).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner().to_string();
            // An unknown parameter has no path of its own: the message names it.
            let field = if path == "." {
                "query".to_owned()
            } else {
                path
            };
            Problem::bad_request(&field, format!("bad query string: {inner}"))
        })
    }
}
