//! What an endpoint's settings must be before they are stored: a destination the egress guard
//! lets through, limits within their ranges and the operator's caps, and headers that cannot
//! break or impersonate the delivery (its event-type filters: [`crate::api::event_types`]).

use std::collections::BTreeMap;

use axum::http::{HeaderName, HeaderValue};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::api::AppState;
use crate::model::{Endpoint, RateLimit};
use crate::web::problem::Problem;

/// Most headers an endpoint may add.
pub(crate) const MAX_HEADERS: usize = 32;
/// Longest header value, bytes.
const MAX_HEADER_VALUE: usize = 4096;
/// Most bytes of names and values together.
const MAX_HEADER_BYTES: usize = 16 * 1024;

/// Headers an endpoint may not set: hop-by-hop headers (they describe one connection, not the
/// request), the ones that frame or describe the body sluice sends (setting them would corrupt
/// the request or lie about it), and `Host`.
pub(crate) const REFUSED_HEADERS: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "content-type",
    "content-encoding",
    "expect",
];

/// Check a destination URL (scheme, host, every address it resolves to) and return the form to
/// store: the parsed URL's serialization, which is what the dispatcher will connect to.
///
/// Control characters and spaces are refused rather than left to the parser, which strips
/// tabs, newlines and surrounding spaces silently and percent-encodes the rest: the tenant would
/// not get what they wrote, and PostgreSQL refuses NUL in text.
pub(crate) async fn check_destination(state: &AppState, url: &str) -> Result<String, Problem> {
    check_destination_of(state, "url", url).await
}

/// [`check_destination`] for a URL in `field` (an OAuth2 token endpoint is a destination too).
/// With an egress proxy, every address of the name must pass, as on every attempt.
pub(crate) async fn check_destination_of(
    state: &AppState,
    field: &str,
    url: &str,
) -> Result<String, Problem> {
    if url.len() > 2048 {
        return Err(Problem::unprocessable(
            field,
            format!("{field} must be at most 2048 bytes"),
        ));
    }
    if let Some(c) = url.chars().find(|c| c.is_control() || *c == ' ') {
        return Err(Problem::unprocessable(
            field,
            format!("{field} must not contain control characters or spaces (found {c:?})"),
        ));
    }
    let parsed = state
        .egress
        .check_url(url)
        .map_err(|e| Problem::unprocessable(field, e.to_string()))?;
    if let Some(url::Host::Domain(host)) = parsed.host() {
        let port = parsed.port_or_known_default().unwrap_or(443);
        let checked = match state.settings.egress.proxy {
            None => state.egress.resolve_checked(host, port).await,
            Some(_) => state.egress.resolve_all_allowed(host, port).await,
        };
        checked.map_err(|e| Problem::unprocessable(field, e.to_string()))?;
    }
    let normal: String = parsed.into();
    if normal.len() > 2048 {
        return Err(Problem::unprocessable(
            field,
            format!("{field} must be at most 2048 bytes once normalised"),
        ));
    }
    Ok(normal)
}

/// Check an endpoint's headers and return them with lower-case names; a problem names the
/// header at fault as `headers.NAME`.
pub(crate) fn check_headers(
    headers: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, Problem> {
    if headers.len() > MAX_HEADERS {
        return Err(Problem::unprocessable(
            "headers",
            format!("at most {MAX_HEADERS} headers"),
        ));
    }
    let mut out = BTreeMap::new();
    let mut bytes = 0;
    for (given, value) in headers {
        let field = format!("headers.{given}");
        let refuse = |why: String| Err(Problem::unprocessable(&field, why));
        let Ok(name) = HeaderName::from_bytes(given.as_bytes()) else {
            return refuse(format!("{given:?} is not a valid header name"));
        };
        let lower = name.as_str();
        if lower.starts_with("webhook-") {
            return refuse(format!(
                "{given} is refused: webhook-* headers are sluice's own (id, timestamp, signature)"
            ));
        }
        if REFUSED_HEADERS.contains(&lower) {
            return refuse(format!(
                "{given} is refused: hop-by-hop and body-framing headers are set by sluice"
            ));
        }
        // Visible ASCII, spaces and tabs only: `HeaderValue` would also take bytes past 0x7f
        // (obsolete text), which receivers read in as many ways as there are parsers.
        let visible = value
            .bytes()
            .all(|b| b == b'\t' || (b' '..=b'~').contains(&b));
        if value.len() > MAX_HEADER_VALUE || !visible || HeaderValue::from_str(value).is_err() {
            return refuse(format!(
                "the value of {given} must be at most {MAX_HEADER_VALUE} bytes of visible ASCII, \
                 spaces and tabs"
            ));
        }
        bytes += lower.len() + value.len();
        if out.insert(lower.to_owned(), value.clone()).is_some() {
            return refuse(format!(
                "{given} is given twice (names are case-insensitive)"
            ));
        }
    }
    if bytes > MAX_HEADER_BYTES {
        return Err(Problem::unprocessable(
            "headers",
            format!("headers must be at most {MAX_HEADER_BYTES} bytes in all"),
        ));
    }
    Ok(out)
}

/// An endpoint with OAuth2 credentials sends the bearer token as its `Authorization`: a header of
/// its own by that name would make two, which receivers read in as many ways as there are
/// parsers. Checked on the endpoint as it will be stored, whichever of the two the request sets.
pub(crate) fn check_one_authorization(e: &Endpoint) -> Result<(), Problem> {
    match e
        .headers
        .keys()
        .find(|name| name.as_str() == "authorization")
    {
        Some(name) if e.oauth2.is_some() => Err(Problem::unprocessable(
            &format!("headers.{name}"),
            "an Authorization header cannot be set beside OAuth2 credentials, which send their \
             own bearer token: remove one of the two",
        )),
        _ => Ok(()),
    }
}

/// Lane, ceiling and timeouts, each within its range (timeouts within the operator's caps).
pub(crate) fn check_limits(
    state: &AppState,
    lane: Option<u32>,
    ceiling: Option<u32>,
    timeouts: [Option<u32>; 3],
) -> Result<(), Problem> {
    if let Some(n) = lane
        && !(1..=10_000).contains(&n)
    {
        return Err(Problem::unprocessable(
            "lane_size",
            "lane_size must be 1–10000",
        ));
    }
    if let Some(ms) = ceiling
        && !(100..=3_600_000).contains(&ms)
    {
        return Err(Problem::unprocessable(
            "latency_ceiling_ms",
            "latency_ceiling_ms must be 100–3600000",
        ));
    }
    let caps = state.settings.timeout_caps;
    let named = [
        ("connect_timeout_ms", caps.connect),
        ("read_timeout_ms", caps.read),
        ("total_timeout_ms", caps.total),
    ];
    for ((field, cap), value) in named.into_iter().zip(timeouts) {
        if let Some(ms) = value
            && (ms == 0 || u128::from(ms) > cap.as_millis())
        {
            return Err(Problem::unprocessable(
                field,
                format!("{field} must be 1–{} (the operator's cap)", cap.as_millis()),
            ));
        }
    }
    Ok(())
}

/// An endpoint's rate limit as given: events per second, with a burst.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimitIn {
    /// Events per second on average, fleet-wide: 0.01–100000 (fractions allowed: 0.5 is one
    /// every two seconds).
    pub per_second: f64,
    /// Events that may go at once after a quiet spell: 1–100000. Omitted: one second's worth
    /// (`per_second` rounded up).
    #[serde(default, deserialize_with = "crate::api::whole::option")]
    pub burst: Option<u32>,
}

/// A rate limit within its ranges; a problem names `rate_limit.per_second` or
/// `rate_limit.burst`. A burst left out is one second's worth of the rate.
pub(crate) fn check_rate_limit(given: RateLimitIn) -> Result<RateLimit, Problem> {
    let burst = given.burst.unwrap_or_else(|| {
        // Rounded up, at least one; a rate out of range is refused below, on its own field.
        let second = given.per_second.ceil();
        if second.is_finite() && second >= 1.0 {
            second.min(f64::from(crate::model::MAX_BURST)) as u32
        } else {
            1
        }
    });
    RateLimit::try_new(given.per_second, burst).map_err(|e| {
        let field = format!("rate_limit.{}", e.field);
        Problem::unprocessable(&field, format!("{field} must be {}", e.expected))
    })
}
