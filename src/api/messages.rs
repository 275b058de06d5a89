//! Messages: create (idempotent with `Idempotency-Key`, answered after commit), get, list.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;

use super::auth::TenantAuth;
use super::error::{ApiResult, Problem};
use super::page::{Page, PageQuery, Q};
use super::views::{DeliveryOut, check_id};
use super::{AppState, Body};
use crate::ids;
use crate::store::{MessageSummary, NewMessage};

/// `POST /v1/messages`
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateMessage {
    /// Event type, matched against endpoint filters: 1–256 of `A-Z a-z 0-9 . _ - :`.
    pub event_type: String,
    /// Any JSON value; delivered verbatim as the request body.
    #[schema(value_type = serde_json::Value)]
    pub payload: Box<RawValue>,
}

/// The answer to a create.
#[derive(Debug, Serialize, ToSchema)]
pub struct Created {
    /// `msg_…` (the original id when the idempotency key was seen before).
    pub id: String,
    /// Deliveries created (0 for a repeat).
    pub deliveries: u32,
    /// True when this was an idempotent repeat.
    pub duplicate: bool,
}

/// A message with its payload and deliveries.
#[derive(Debug, Serialize, ToSchema)]
pub struct MessageOut {
    /// `msg_…`
    pub id: String,
    /// Event type.
    pub event_type: String,
    /// The payload as stored.
    #[schema(value_type = serde_json::Value)]
    pub payload: Box<RawValue>,
    /// When it was accepted.
    pub created_at_ms: i64,
    /// One per subscribed endpoint: state and attempts.
    pub deliveries: Vec<DeliveryOut>,
}

/// A message in a listing.
#[derive(Debug, Serialize, ToSchema)]
pub struct MessageItem {
    /// `msg_…`
    pub id: String,
    /// Event type.
    pub event_type: String,
    /// When it was accepted.
    pub created_at_ms: i64,
}

impl From<MessageSummary> for MessageItem {
    fn from(m: MessageSummary) -> Self {
        Self {
            id: m.id,
            event_type: m.event_type,
            created_at_ms: m.created_at_ms,
        }
    }
}

/// Validate an event type name.
pub fn check_event_type(t: &str) -> Result<(), Problem> {
    let ok = !t.is_empty()
        && t.len() <= 256
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'));
    if ok {
        Ok(())
    } else {
        Err(Problem::unprocessable(
            "event_type",
            format!("event type {t:?} must be 1–256 of A-Z a-z 0-9 . _ - :"),
        ))
    }
}

/// Accept a message and fan it out to the tenant's subscribed endpoints; answered after commit.
/// A repeated `Idempotency-Key` returns the original message (200, `duplicate: true`).
#[utoipa::path(post, path = "/v1/messages", tag = "messages", security(("tenant" = [])),
    params(("Idempotency-Key" = Option<String>, Header,
        description = "1–256 printable ASCII characters; a repeat returns the original")),
    request_body = CreateMessage,
    responses((status = 202, body = Created), (status = 200, body = Created),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub async fn create(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    headers: HeaderMap,
    Body(req): Body<CreateMessage>,
) -> ApiResult<(StatusCode, Json<Created>)> {
    check_event_type(&req.event_type)?;
    let payload = req.payload.get();
    if payload.len() > state.max_payload_bytes {
        return Err(Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "payload is {} bytes; the limit is {}",
                payload.len(),
                state.max_payload_bytes
            ),
        )
        .field("payload"));
    }
    let idempotency_key = match headers.get("idempotency-key") {
        None => None,
        Some(v) => {
            let key = v.to_str().ok().map(str::trim).filter(|k| {
                !k.is_empty() && k.len() <= 256 && k.bytes().all(|b| b.is_ascii_graphic())
            });
            Some(
                key.ok_or_else(|| {
                    Problem::bad_request(
                        "Idempotency-Key",
                        "Idempotency-Key must be 1–256 printable ASCII characters",
                    )
                })?
                .to_owned(),
            )
        }
    };
    let result = state
        .ingest
        .submit(NewMessage {
            id: ids::new_id("msg"),
            tenant_id: tenant.id,
            event_type: req.event_type,
            payload: payload.to_owned(),
            idempotency_key,
            only_endpoint: None,
        })
        .await?;
    let status = if result.duplicate {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((
        status,
        Json(Created {
            id: result.id,
            deliveries: result.deliveries,
            duplicate: result.duplicate,
        }),
    ))
}

/// One message with its payload and deliveries.
#[utoipa::path(get, path = "/v1/messages/{id}", tag = "messages", security(("tenant" = [])),
    params(("id" = String, Path, description = "`msg_…`")),
    responses((status = 200, body = MessageOut),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub async fn get(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> ApiResult<Json<MessageOut>> {
    check_id("message", &id)?;
    let m = state.store.message(&tenant.id, &id).await?;
    let payload = RawValue::from_string(m.payload).map_err(|_| {
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "stored payload is not JSON",
        )
    })?;
    Ok(Json(MessageOut {
        id: m.id,
        event_type: m.event_type,
        payload,
        created_at_ms: m.created_at_ms,
        deliveries: m.deliveries.into_iter().map(DeliveryOut::from).collect(),
    }))
}

/// The tenant's messages, newest first.
#[utoipa::path(get, path = "/v1/messages", tag = "messages", security(("tenant" = [])),
    params(PageQuery),
    responses((status = 200, body = Page<MessageItem>),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub async fn list(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Q(q): Q<PageQuery>,
) -> ApiResult<Json<Page<MessageItem>>> {
    let limit = q.limit()?;
    let messages = state
        .store
        .list_messages(&tenant.id, q.after_id("msg_")?, limit)
        .await?;
    let data = messages.into_iter().map(MessageItem::from).collect();
    Ok(Json(Page::new(data, limit, |m: &MessageItem| m.id.clone())))
}
