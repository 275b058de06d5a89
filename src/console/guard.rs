//! What protects every console response and form: a strict Content-Security-Policy (only this
//! origin's stylesheet and script, no inline code), framing denied unless the operator allows
//! origins, no referrer (a portal link never leaks through one), no caching of pages; and forms
//! accepted only from this origin with a CSRF token bound to the browser's cookie.

use axum::body::Body;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use serde::de::DeserializeOwned;

use super::Console;
use super::page::ConsoleError;
use super::session;
use crate::web::deadline::BodyTimedOut;

/// Largest form body accepted, bytes.
const MAX_FORM_BYTES: usize = 64 * 1024;

/// The Content-Security-Policy of every console response.
pub fn content_security_policy(frame_ancestors: &str) -> String {
    format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
         connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors {frame_ancestors}"
    )
}

/// Middleware: the security headers on every console response.
pub async fn security_headers(
    State(console): State<Console>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = next.run(request).await;
    let frame_ancestors = &console.settings().frame_ancestors;
    let h = response.headers_mut();
    let csp = content_security_policy(frame_ancestors);
    if let Ok(v) = HeaderValue::from_str(&csp) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    // X-Frame-Options cannot name origins: it is sent only where it agrees with the CSP.
    match frame_ancestors.as_str() {
        "'none'" => {
            h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        }
        "'self'" => {
            h.insert(
                header::X_FRAME_OPTIONS,
                HeaderValue::from_static("SAMEORIGIN"),
            );
        }
        _ => {}
    }
    for (name, value) in [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (
            HeaderName::from_static("cross-origin-opener-policy"),
            "same-origin",
        ),
        (
            HeaderName::from_static("cross-origin-resource-policy"),
            "same-origin",
        ),
        (
            HeaderName::from_static("permissions-policy"),
            "camera=(), microphone=(), geolocation=(), payment=()",
        ),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// Refuse a form that a browser says comes from another site (Fetch Metadata), or whose
/// `Origin` is not this console's: the configured public URL's origin, or this request's Host
/// under the scheme it arrived with (`X-Forwarded-Proto` from a proxy, else `http`). Scheme and
/// authority both count: a page of `http://host` is not `https://host`. Clients that send
/// neither header are not browsers, and still need the CSRF token.
fn same_origin(headers: &HeaderMap, public_url: Option<&str>) -> Result<(), ConsoleError> {
    let refused =
        || ConsoleError::forbidden("forms are accepted only from the console's own pages");
    if let Some(site) = headers.get("sec-fetch-site") {
        return if site == "same-origin" {
            Ok(())
        } else {
            Err(refused())
        };
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().map_err(|_| refused())?;
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .map_or("http", |p| p.split(',').next().unwrap_or("").trim());
    let this_request = host.map(|h| format!("{scheme}://{h}"));
    let configured = public_url
        .and_then(|u| url::Url::parse(u).ok())
        .map(|u| u.origin().ascii_serialization());
    let matches = |expected: &Option<String>| {
        expected
            .as_deref()
            .is_some_and(|e| e.eq_ignore_ascii_case(origin))
    };
    if matches(&this_request) || matches(&configured) {
        Ok(())
    } else {
        Err(refused())
    }
}

/// The form's bytes: 413 past [`MAX_FORM_BYTES`], 408 when they stop arriving in time.
async fn read_form(body: Body) -> Result<Vec<u8>, ConsoleError> {
    use futures_util::StreamExt;
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| match BodyTimedOut::find_in(&e) {
            Some(late) => {
                ConsoleError::new(StatusCode::REQUEST_TIMEOUT, "Too slow", late.to_string())
            }
            None => ConsoleError::bad_request(format!("the form did not arrive whole: {e}")),
        })?;
        if bytes.len() + chunk.len() > MAX_FORM_BYTES {
            return Err(ConsoleError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "Too large",
                format!("a form may carry at most {} KiB", MAX_FORM_BYTES / 1024),
            ));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// A URL-encoded form whose CSRF token (field `csrf`) holds; the other fields become `T`.
pub struct CsrfForm<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Console> for CsrfForm<T> {
    type Rejection = ConsoleError;

    async fn from_request(request: Request<Body>, console: &Console) -> Result<Self, ConsoleError> {
        let (parts, body) = request.into_parts();
        same_origin(&parts.headers, console.settings().public_url.as_deref())?;
        let is_form = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        if !is_form {
            return Err(ConsoleError::bad_request("expected a form submission"));
        }
        let bytes = read_form(body).await?;
        let submitted = form_urlencoded::parse(&bytes)
            .find(|(k, _)| k == "csrf")
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default();
        if !session::csrf_ok(console, &parts.headers, &submitted).await? {
            return Err(ConsoleError::forbidden(
                "this form's security token is missing or stale: reload the page and try again",
            ));
        }
        serde_urlencoded::from_bytes(&bytes)
            .map(CsrfForm)
            .map_err(|e| ConsoleError::bad_request(format!("malformed form: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn cross_site_forms_are_refused() {
        assert!(same_origin(&headers(&[("sec-fetch-site", "same-origin")]), None).is_ok());
        assert!(same_origin(&headers(&[("sec-fetch-site", "cross-site")]), None).is_err());
        assert!(same_origin(&headers(&[("sec-fetch-site", "same-site")]), None).is_err());
        let ok = [("origin", "http://h:1"), ("host", "h:1")];
        assert!(same_origin(&headers(&ok), None).is_ok());
        let bad = [("origin", "http://evil:1"), ("host", "h:1")];
        assert!(same_origin(&headers(&bad), None).is_err());
        assert!(same_origin(&headers(&[("origin", "null"), ("host", "h")]), None).is_err());
        assert!(same_origin(&headers(&[]), None).is_ok());
        // The scheme counts: over plain HTTP an https page is another origin, and the reverse
        // behind a proxy that says the request came over https.
        let https = [("origin", "https://h:1"), ("host", "h:1")];
        assert!(same_origin(&headers(&https), None).is_err());
        let proxied = [
            ("origin", "https://h"),
            ("host", "h"),
            ("x-forwarded-proto", "https"),
        ];
        assert!(same_origin(&headers(&proxied), None).is_ok());
        let downgraded = [
            ("origin", "http://h"),
            ("host", "h"),
            ("x-forwarded-proto", "https"),
        ];
        assert!(same_origin(&headers(&downgraded), None).is_err());
        // The configured public URL is the console's origin whatever the Host says.
        let public = [
            ("origin", "https://hooks.example.com"),
            ("host", "internal:8080"),
        ];
        let configured = Some("https://hooks.example.com");
        assert!(same_origin(&headers(&public), configured).is_ok());
        assert!(same_origin(&headers(&https), configured).is_err());
    }

    #[test]
    fn the_policy_allows_only_this_origin() {
        let csp = content_security_policy("'none'");
        assert!(csp.contains("script-src 'self';") && !csp.contains("unsafe"));
        assert!(csp.ends_with("frame-ancestors 'none'"));
    }
}
