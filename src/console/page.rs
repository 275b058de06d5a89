//! The HTML frame every console page shares, errors rendered as pages, and the formatting of
//! times, durations, rates and shares. Everything goes through maud, which escapes what it
//! interpolates: response bodies and payloads are hostile input and are only ever text here.

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{DOCTYPE, Markup, html};

use crate::stats::{format_duration, format_rate};
use crate::store::StoreError;
use crate::web::problem::Problem;

/// Which navigation a page carries.
pub enum Nav<'a> {
    /// No session: only the brand.
    Bare,
    /// A tenant's portal.
    Portal {
        /// Tenant display name.
        tenant: &'a str,
        /// CSRF token for the sign-out form.
        csrf: &'a str,
    },
    /// The operator's dashboard.
    Admin {
        /// CSRF token for the sign-out form.
        csrf: &'a str,
    },
}

/// A whole page: head, header with navigation, and `body`.
pub fn layout(title: &str, nav: &Nav, body: Markup) -> Markup {
    let links: &[(&str, &str)] = match nav {
        Nav::Bare => &[],
        Nav::Portal { .. } => &[
            ("/console/portal/", "Endpoints"),
            ("/console/portal/messages", "Messages"),
            ("/console/portal/dead-letters", "Dead letters"),
        ],
        Nav::Admin { .. } => &[
            ("/console/admin/", "Fleet"),
            ("/console/admin/tenants", "Tenants"),
            ("/console/admin/plan", "Plan"),
        ],
    };
    let (who, csrf) = match nav {
        Nav::Bare => (None, None),
        Nav::Portal { tenant, csrf } => (Some(*tenant), Some(*csrf)),
        Nav::Admin { csrf } => (Some("operator"), Some(*csrf)),
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · sluice" }
                link rel="icon" type="image/svg+xml" href="/console/assets/icon.svg";
                link rel="stylesheet" href="/console/assets/console.css";
                script src="/console/assets/console.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/console/" { "sluice" }
                    @if !links.is_empty() {
                        nav aria-label="main" {
                            @for (href, label) in links { a href=(href) { (label) } }
                        }
                    }
                    @if let (Some(who), Some(csrf)) = (who, csrf) {
                        form.signout method="post" action="/console/logout" {
                            span.who { (who) }
                            input type="hidden" name="csrf" value=(csrf);
                            button.link type="submit" { "Sign out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// A hidden CSRF field.
pub fn csrf_field(token: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(token); }
}

/// A button that POSTs to `action` with the CSRF token (works without JavaScript).
pub fn post_button(action: &str, csrf: &str, label: &str, class: &str) -> Markup {
    html! {
        form.inline method="post" action=(action) {
            (csrf_field(csrf))
            button type="submit" class=(class) { (label) }
        }
    }
}

/// A failure shown as a page (or, for a missing operator sign-in, a redirect).
#[derive(Debug, Clone)]
pub struct ConsoleError {
    /// HTTP status.
    pub status: StatusCode,
    /// Heading.
    pub title: String,
    /// What happened and what to do.
    pub detail: String,
    /// Redirect here instead of rendering.
    pub location: Option<&'static str>,
}

impl ConsoleError {
    /// A page with a status.
    pub fn new(status: StatusCode, title: &str, detail: impl Into<String>) -> Self {
        Self {
            status,
            title: title.to_owned(),
            detail: detail.into(),
            location: None,
        }
    }

    /// 404 for a resource (also another tenant's ids).
    pub fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "Not found",
            format!("{what} not found"),
        )
    }

    /// 400.
    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "Bad request", detail)
    }

    /// 403 (CSRF, cross-site form).
    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "Refused", detail)
    }

    /// A redirect to the operator's sign-in.
    pub fn sign_in() -> Self {
        Self {
            location: Some("/console/login"),
            ..Self::new(StatusCode::SEE_OTHER, "Sign in", "")
        }
    }
}

impl From<Problem> for ConsoleError {
    fn from(p: Problem) -> Self {
        let status = StatusCode::from_u16(p.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        // A page has no field to point at, so the detail names it.
        let detail = match &p.field {
            Some(field) if !p.detail.starts_with(field.as_str()) => {
                format!("{field}: {}", p.detail)
            }
            _ => p.detail,
        };
        Self::new(status, &p.title, detail)
    }
}

impl From<StoreError> for ConsoleError {
    fn from(e: StoreError) -> Self {
        Problem::from(e).into()
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        if let Some(to) = self.location {
            return Redirect::to(to).into_response();
        }
        let body = html! {
            section.error {
                h1 { (self.title) }
                p { (self.detail) }
                p { a href="/console/" { "Console home" } }
            }
        };
        (self.status, layout(&self.title, &Nav::Bare, body)).into_response()
    }
}

/// Longest text of a router's own error kept as a page's detail, bytes.
const MAX_DETAIL_BYTES: usize = 1024;

/// Every console error is a page: what axum's extractors answer by themselves (bad bytes in a
/// path, a repeated query field) as plain text is rendered like the console's own errors,
/// with the same status and headers (`Allow` survives).
pub async fn as_page(response: Response) -> Response {
    let status = response.status();
    let html = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/html"));
    if html || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_DETAIL_BYTES)
        .await
        .ok()
        .and_then(|b| String::from_utf8(b.to_vec()).ok())
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty());
    let title = status.canonical_reason().unwrap_or("Error");
    let detail = text.unwrap_or_else(|| title.to_owned());
    let page = ConsoleError::new(status, title, detail).into_response();
    let (page_parts, page_body) = page.into_parts();
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    for (name, value) in &page_parts.headers {
        parts.headers.insert(name.clone(), value.clone());
    }
    Response::from_parts(parts, page_body)
}

/// Unknown console routes.
pub async fn not_found() -> ConsoleError {
    ConsoleError::not_found("page")
}

/// A console route asked with the wrong method (a form's action opened as a link, say).
pub async fn method_not_allowed() -> ConsoleError {
    ConsoleError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "Not here",
        "This address takes a form submission: go back and use the page's button.",
    )
}

/// Epoch ms as `2026-11-30 14:05:09 UTC`.
pub fn time(ms: i64) -> String {
    crate::clock::human(ms)
}

/// How long ago (or how far ahead) `ms` is from `now_ms`: `12 s ago`, `in 5.0 min`.
pub fn ago(ms: i64, now_ms: i64) -> String {
    let d = Duration::from_millis(now_ms.abs_diff(ms));
    if ms <= now_ms {
        format!("{} ago", format_duration(d))
    } else {
        format!("in {}", format_duration(d))
    }
}

/// Seconds as a person writes them, or `—`.
pub fn secs(s: Option<f64>) -> String {
    if s == Some(0.0) {
        return "0 s".to_owned();
    }
    s.and_then(|s| Duration::try_from_secs_f64(s).ok())
        .map_or_else(|| "—".to_owned(), format_duration)
}

/// A rate per second.
pub fn rate(per_s: f64) -> String {
    format!("{}/s", format_rate(per_s))
}

/// A share 0–1 as a percentage.
pub fn pct(share: f64) -> String {
    if share.is_finite() {
        format!("{:.1} %", share * 100.0)
    } else {
        "—".to_owned()
    }
}

/// At most `max` characters of `text`, and whether it was cut.
pub fn truncate(text: &str, max: usize) -> (&str, bool) {
    match text.char_indices().nth(max) {
        Some((at, _)) => (&text[..at], true),
        None => (text, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_civil_utc() {
        assert_eq!(time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(time(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(time(1_796_079_946_238), "2026-11-30 23:05:46 UTC");
    }

    #[test]
    fn relative_times_and_cuts() {
        assert_eq!(ago(1_000, 13_000), "12 s ago");
        assert_eq!(ago(301_000, 1_000), "in 5 min");
        assert_eq!(truncate("héllo", 2), ("hé", true));
        assert_eq!(truncate("hé", 2), ("hé", false));
        assert_eq!(pct(0.125), "12.5 %");
        assert_eq!(secs(None), "—");
        assert_eq!(secs(Some(0.0)), "0 s");
    }
}
