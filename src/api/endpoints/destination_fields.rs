//! The text checks of a broker destination's fields: its URL (a scheme, no credentials, a host
//! the egress guard lets through), a NATS subject, an AMQP short string, a credential.

use crate::api::AppState;
use crate::api::views::check_text;
use crate::model::broker_default_port;
use crate::web::problem::Problem;

/// A subject to publish to: dot-separated tokens of printable characters, no wildcards.
pub(super) fn check_subject(subject: &str) -> Result<(), Problem> {
    const FIELD: &str = "destination.subject";
    let ok = !subject.is_empty()
        && subject.len() <= 255
        && subject
            .split('.')
            .all(|t| !t.is_empty() && t != "*" && t != ">")
        && !subject.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok {
        Ok(())
    } else {
        Err(Problem::unprocessable(
            FIELD,
            format!(
                "{FIELD} must be 1 to 255 bytes of dot-separated tokens, without spaces or the \
                 wildcards * and >"
            ),
        ))
    }
}

/// An AMQP short string (an exchange name, a routing key): at most 255 bytes, printable.
pub(super) fn check_short(field: &str, value: &str) -> Result<(), Problem> {
    let field = format!("destination.{field}");
    check_text(&field, value, 255)?;
    if value.len() > 255 {
        return Err(Problem::unprocessable(
            &field,
            format!("{field} must be at most 255 bytes"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(Problem::unprocessable(
            &field,
            format!("{field} must not contain control characters"),
        ));
    }
    Ok(())
}

pub(super) fn check_credential(name: &str, value: Option<&str>) -> Result<(), Problem> {
    let field = format!("destination.credentials.{name}");
    match value {
        Some(v) if v.is_empty() || v.len() > 1024 || v.chars().any(char::is_control) => {
            Err(Problem::unprocessable(
                &field,
                format!("{field} must be 1 to 1024 bytes without control characters"),
            ))
        }
        _ => Ok(()),
    }
}

/// A broker URL: one of `schemes`, a host, no credentials (they go in
/// `destination.credentials`), and a host the egress guard lets through, resolved.
pub(super) async fn check_broker_url(
    state: &AppState,
    url: &str,
    schemes: &[&str],
) -> Result<String, Problem> {
    const FIELD: &str = "destination.url";
    let unprocessable = |why: String| Problem::unprocessable(FIELD, why);
    if url.len() > 2048 || url.chars().any(|c| c.is_control() || c == ' ') {
        return Err(unprocessable(format!(
            "{FIELD} must be at most 2048 bytes, without control characters or spaces"
        )));
    }
    let parsed =
        url::Url::parse(url).map_err(|e| unprocessable(format!("{FIELD} is not a URL: {e}")))?;
    if !schemes.contains(&parsed.scheme()) {
        return Err(unprocessable(format!(
            "{FIELD} must use {} (not {:?})",
            schemes.join(" or "),
            parsed.scheme()
        )));
    }
    if parsed.password().is_some() || !parsed.username().is_empty() {
        // Never echo the URL: it holds the password.
        return Err(unprocessable(format!(
            "{FIELD} must not hold a user name or password: put them in destination.credentials, \
             which is never shown"
        )));
    }
    let checked = state
        .egress
        .check_url_of(url, schemes)
        .map_err(|e| unprocessable(e.to_string()))?;
    if let Some(url::Host::Domain(host)) = checked.host() {
        let port = checked
            .port()
            .or_else(|| broker_default_port(checked.scheme()))
            .unwrap_or(5672);
        state
            .egress
            .resolve_checked(host, port)
            .await
            .map_err(|e| unprocessable(e.to_string()))?;
    }
    Ok(checked.into())
}
