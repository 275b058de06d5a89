//! Google Cloud Pub/Sub: one REST `publish` of one message per attempt
//! (`POST /v1/projects/P/topics/T:publish`) over the HTTP clients HTTP delivery uses, so the
//! egress guard, the proxy, the endpoint's TLS setting and the timeouts are an HTTP attempt's.
//! Delivered means Pub/Sub answered the message's id. `data` is the signed payload (base64 on
//! the wire, the same bytes at the subscriber); the Standard Webhooks headers and the event
//! type are attributes; a FIFO endpoint's messages carry its id as their `orderingKey`, so a
//! subscription with message ordering receives them in order.
//!
//! With a service account's key, each call carries a token of the key's JWT-bearer grant
//! ([`grant`]): the OAuth2 tokens HTTP delivery uses fetch and keep it
//! ([`crate::delivery::oauth2`]), so a `token_uri` that never answers holds no attempt past its
//! deadline and no lane or pool slot past that. Without a key (an emulator), none. A refusal is
//! named by Pub/Sub's status: `RESOURCE_EXHAUSTED` is `throttled`, `NOT_FOUND`
//! `broker_not_found`, `PERMISSION_DENIED` and `UNAUTHENTICATED` `broker_auth`,
//! `INVALID_ARGUMENT` `invalid` (`too_large` when its text says the request is over Pub/Sub's
//! size limit, [`super::refused_for_size`]); a 5xx is kept as its status.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::{Signed, acknowledged};
use crate::delivery::oauth2::Grant;
use crate::delivery::{Clients, ErrorKind, Failure, Phases, Response, Target};

/// The scope a service account's token is asked for.
const SCOPE: &str = "https://www.googleapis.com/auth/pubsub";

/// Where one message goes.
pub(super) struct Topic<'a> {
    pub project_id: &'a str,
    pub topic: &'a str,
}

/// The grant a service account with JSON key `key` publishes by.
pub(super) fn grant(key: &str) -> Grant {
    Grant::jwt_bearer(key, SCOPE)
}

/// Publish `signed` to `to` through `clients`, with a token of `target`'s grant when it has
/// one, answered by `deadline`.
pub(super) async fn publish(
    clients: &Clients,
    target: &Target,
    to: &Topic<'_>,
    signed: &Signed<'_>,
    deadline: Instant,
    phases: &mut Phases,
) -> Result<Response, Failure> {
    let bearer = match &target.grant {
        Some(grant) => Some(clients.token(target, grant, deadline, phases).await?),
        None => None,
    };
    let url = format!(
        "{}/v1/projects/{}/topics/{}:publish",
        target.url.as_str().trim_end_matches('/'),
        to.project_id,
        to.topic
    );
    let url = reqwest::Url::parse(&url).map_err(|e| Failure {
        kind: ErrorKind::Other,
        message: format!("Google Cloud Pub/Sub: {e}"),
    })?;
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(b) = &bearer
        && let Ok(value) = HeaderValue::from_str(&format!("Bearer {}", b.token))
    {
        headers.insert(AUTHORIZATION, value);
    }
    let body = message(target, signed).to_string().into_bytes();
    let response = clients
        .post(target, &url, headers, body, deadline, phases)
        .await?;
    if response.status == 401
        && let (Some(grant), Some(b)) = (&target.grant, &bearer)
    {
        // Revoked or rotated early: the next attempt fetches a new one.
        clients.forget_token(grant, &b.token);
    }
    answer(&response)
}

/// The publish request's body: one message.
fn message(target: &Target, signed: &Signed<'_>) -> Value {
    let mut attributes = Map::new();
    let mut put = |name: &str, value: String| {
        attributes.insert(name.to_owned(), Value::from(value));
    };
    put(crate::signing::WEBHOOK_ID, signed.message_id.to_owned());
    put(
        crate::signing::WEBHOOK_TIMESTAMP,
        signed.timestamp_s.to_string(),
    );
    put(crate::signing::WEBHOOK_SIGNATURE, signed.signature.clone());
    put("webhook-event-type", signed.event_type.to_owned());
    for (name, value) in signed.trace_headers() {
        put(name, value.to_owned());
    }
    for (name, value) in &target.headers {
        // Pub/Sub keeps `goog…` attribute names for itself.
        if let Ok(v) = value.to_str()
            && !name.as_str().starts_with("goog")
            && !attributes.contains_key(name.as_str())
        {
            attributes.insert(name.as_str().to_owned(), Value::from(v));
        }
    }
    let mut m = json!({
        "data": STANDARD.encode(signed.payload.as_bytes()),
        "attributes": attributes,
    });
    if target.fifo {
        m["orderingKey"] = Value::from(target.endpoint_id.as_str());
    }
    json!({ "messages": [m] })
}

/// Accepted: a message id; otherwise the failure Pub/Sub's status names.
fn answer(response: &Response) -> Result<Response, Failure> {
    let v: Value = serde_json::from_slice(&response.body).unwrap_or_default();
    if response.status == 200
        && let Some(id) = v["messageIds"][0].as_str()
    {
        return Ok(acknowledged(&format!(
            "Google Cloud Pub/Sub (message {id})"
        )));
    }
    let status = v["error"]["status"].as_str();
    let detail = v["error"]["message"].as_str().unwrap_or_default();
    let kind = match status {
        Some("INVALID_ARGUMENT") if super::refused_for_size(detail) => ErrorKind::TooLarge,
        Some("RESOURCE_EXHAUSTED") => ErrorKind::Throttled,
        Some("NOT_FOUND") => ErrorKind::BrokerNotFound,
        Some("PERMISSION_DENIED" | "UNAUTHENTICATED") => ErrorKind::BrokerAuth,
        Some("INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "OUT_OF_RANGE") => ErrorKind::Invalid,
        _ => match response.status {
            401 | 403 => ErrorKind::BrokerAuth,
            404 => ErrorKind::BrokerNotFound,
            413 => ErrorKind::TooLarge,
            429 => ErrorKind::Throttled,
            s if s >= 500 => return Ok(response.clone()),
            _ => ErrorKind::Other,
        },
    };
    Err(Failure {
        kind,
        message: format!(
            "Google Cloud Pub/Sub: HTTP {} {}: {detail}",
            response.status,
            status.unwrap_or_default()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: u16, body: &str) -> Response {
        Response {
            status,
            retry_after: None,
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn statuses_name_their_kinds() {
        let err = |status: &str, code: u16| {
            let body =
                format!(r#"{{"error":{{"code":{code},"message":"m","status":"{status}"}}}}"#);
            answer(&response(code, &body)).unwrap_err().kind
        };
        assert_eq!(err("NOT_FOUND", 404), ErrorKind::BrokerNotFound);
        assert_eq!(err("RESOURCE_EXHAUSTED", 429), ErrorKind::Throttled);
        assert_eq!(err("PERMISSION_DENIED", 403), ErrorKind::BrokerAuth);
        assert_eq!(err("INVALID_ARGUMENT", 400), ErrorKind::Invalid);
        let too_large = r#"{"error":{"code":400,"message":"Request payload size exceeds the limit: 10485760 bytes.","status":"INVALID_ARGUMENT"}}"#;
        assert_eq!(
            answer(&response(400, too_large)).unwrap_err().kind,
            ErrorKind::TooLarge
        );
        assert_eq!(answer(&response(503, "")).unwrap().status, 503);
        let ok = answer(&response(200, r#"{"messageIds":["42"]}"#)).unwrap();
        assert_eq!(ok.status, 200);
    }
}
