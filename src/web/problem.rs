//! API errors as RFC 9457 problem details (`application/problem+json`) with a clear message and,
//! for bad input, the field at fault.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// A problem to report to the client.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Problem {
    /// Always `about:blank`: the title says what kind of problem it is.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Short, stable summary (the HTTP reason).
    pub title: String,
    /// HTTP status.
    pub status: u16,
    /// What went wrong, for a human.
    pub detail: String,
    /// The request field at fault, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl Problem {
    /// A problem with a status and a message.
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        Self {
            kind: "about:blank",
            title: status.canonical_reason().unwrap_or("Error").to_owned(),
            status: status.as_u16(),
            detail: detail.into(),
            field: None,
        }
    }

    /// Name the field at fault.
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// 400 with a field.
    pub fn bad_request(field: &str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, detail).field(field)
    }

    /// 422 with a field.
    pub fn unprocessable(field: &str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, detail).field(field)
    }

    /// 404 for a resource (also for another tenant's ids: never a leak).
    pub fn not_found(what: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, format!("{what} not found"))
    }

    /// 401.
    pub fn unauthorized(detail: &str) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, detail)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut response = (status, body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/problem+json"),
        );
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

/// Result alias for handlers.
pub type ApiResult<T> = Result<T, Problem>;
