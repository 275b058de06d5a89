//! Every error a client sees is `application/problem+json`, whoever produced it: the handlers
//! (through [`Problem`]), the router's 404 and 405, axum's extractors and limits, and anything
//! else that answers with a bare or plain-text 4xx or 5xx, which [`as_problem`] rewrites.
//!
//! What hyper answers before a request reaches the router (a malformed request line or header,
//! headers over 64 KiB) is rewritten on the connection (see `listener::connection`).

use axum::body::Body;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::web::problem::Problem;

/// Longest plain-text error body kept as the problem's detail, bytes.
const MAX_DETAIL_BYTES: usize = 1024;

/// The 405 for a route that exists but not with this method (axum adds `Allow`).
pub async fn method_not_allowed(method: Method) -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{method} is not allowed here; the Allow header lists what is"),
    )
}

fn is_problem(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/problem+json"))
}

/// Rewrite an error response that is not problem+json as one with the same status and headers
/// (`Allow`, `Retry-After`, `WWW-Authenticate` survive), its text, if any, as the detail.
pub async fn as_problem(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) || is_problem(response.headers()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_DETAIL_BYTES)
        .await
        .ok()
        .and_then(|b| String::from_utf8(b.to_vec()).ok())
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty());
    let detail = text.unwrap_or_else(|| {
        status
            .canonical_reason()
            .unwrap_or("error")
            .to_ascii_lowercase()
    });
    let problem = Problem::new(status, detail).into_response();
    let (problem_parts, problem_body) = problem.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    for (name, value) in &problem_parts.headers {
        parts.headers.insert(name.clone(), value.clone());
    }
    Response::from_parts(parts, Body::new(problem_body))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn rewritten(response: Response) -> (StatusCode, HeaderMap, serde_json::Value) {
        let response = as_problem(response).await;
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, 64 * 1024).await.expect("body");
        let json = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
        (parts.status, parts.headers, json)
    }

    #[tokio::test]
    async fn bare_and_plain_errors_become_problems_keeping_their_headers() {
        let bare = (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "GET,HEAD")],
        )
            .into_response();
        let (status, headers, json) = rewritten(bare).await;
        assert_eq!(status, 405);
        assert_eq!(headers[header::ALLOW], "GET,HEAD");
        assert_eq!(headers[header::CONTENT_TYPE], "application/problem+json");
        assert_eq!(json["status"], 405);
        assert_eq!(json["detail"], "method not allowed");

        let plain = (StatusCode::BAD_REQUEST, "Invalid URL: bad").into_response();
        let (_, headers, json) = rewritten(plain).await;
        assert_eq!(headers[header::CONTENT_TYPE], "application/problem+json");
        assert_eq!(json["detail"], "Invalid URL: bad");

        let ours = Problem::unprocessable("url", "no").into_response();
        let (_, _, json) = rewritten(ours).await;
        assert_eq!(json["field"], "url", "problems pass through untouched");
        let fine = (StatusCode::OK, "ok").into_response();
        let (status, headers, _) = rewritten(fine).await;
        assert_eq!(status, 200);
        assert_ne!(headers[header::CONTENT_TYPE], "application/problem+json");
    }
}
