//! Messages: create (idempotent with `Idempotency-Key`, answered after commit), get, and the
//! message log (filtered by event type, arrival time, endpoint and delivery state).

pub(crate) mod deliveries;
pub(crate) mod redelivery;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};

use super::auth::TenantAuth;
use super::event_types::{check_event_type, check_event_types};
use super::page::{Page, PageQuery, Q};
use super::time::{Timestamp, parse_instant};
use super::views::{DeliveryOut, StateParam, check_id};
use super::{AppState, Body};
use crate::ids;
use crate::model::{DeliveryState, Enqueued, MessageSummary, NewMessage};
use crate::store::MessageFilter;
use crate::web::problem::{ApiResult, Problem};

/// `POST /v1/messages`
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateMessage {
    /// Event type, matched against endpoint filters: 1–256 of `A-Z a-z 0-9 . _ - :`.
    pub event_type: String,
    /// Any JSON value; delivered verbatim as the request body.
    #[schema(value_type = serde_json::Value)]
    pub payload: Box<RawValue>,
}

/// The answer to a create.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Created {
    /// `msg_…` (the original id when the idempotency key was seen before).
    pub id: String,
    /// Deliveries created (0 for a repeat).
    pub deliveries: u32,
    /// True when this was an idempotent repeat.
    pub duplicate: bool,
}

/// A message with its payload and deliveries.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct MessageOut {
    /// `msg_…`
    pub id: String,
    /// Event type.
    pub event_type: String,
    /// The payload as stored.
    #[schema(value_type = serde_json::Value)]
    pub payload: Box<RawValue>,
    /// When it was accepted.
    pub created_at: Timestamp,
    /// One per subscribed endpoint: state and attempts.
    pub deliveries: Vec<DeliveryOut>,
}

/// A message in a listing.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct MessageItem {
    /// `msg_…`
    pub id: String,
    /// Event type.
    pub event_type: String,
    /// When it was accepted.
    pub created_at: Timestamp,
}

impl From<MessageSummary> for MessageItem {
    fn from(m: MessageSummary) -> Self {
        Self {
            id: m.id,
            event_type: m.event_type,
            created_at: Timestamp(m.created_at_ms),
        }
    }
}

/// `GET /v1/messages`: a page of the log, newest first, and its filters (all optional, all
/// applied together).
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct MessageQuery {
    /// Page size, 1–500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    /// The `next` cursor of the previous page (a message id).
    pub after: Option<String>,
    /// An event type, or a prefix pattern like `order.*`.
    pub event_type: Option<String>,
    /// Messages accepted at or after this instant (RFC 3339).
    #[param(format = DateTime)]
    pub since: Option<String>,
    /// Messages accepted before this instant (RFC 3339).
    #[param(format = DateTime)]
    pub until: Option<String>,
    /// Only messages with a delivery to this endpoint (`ep_…`).
    pub endpoint_id: Option<String>,
    /// Only messages with a delivery in this state (to `endpoint_id`, when given).
    pub state: Option<StateParam>,
}

/// Check the log's event-type filter (an event type or a prefix pattern like `order.*`): a
/// 400 naming `event_type`. The portal's log uses it too, so both refuse the same filters.
pub(crate) fn check_event_filter(filter: &str) -> Result<(), Problem> {
    check_event_types(std::slice::from_ref(&filter.to_owned()))
        .map_err(|p| Problem::bad_request("event_type", p.detail))
}

/// Read the log's `since` and `until` (RFC 3339; `until` later than `since`), each problem
/// naming its field; shared with the portal's log.
pub(crate) fn check_range(
    since: Option<&str>,
    until: Option<&str>,
) -> Result<(Option<i64>, Option<i64>), Problem> {
    let since_ms = since.map(|t| parse_instant("since", t)).transpose()?;
    let until_ms = until.map(|t| parse_instant("until", t)).transpose()?;
    if let (Some(since), Some(until)) = (since_ms, until_ms)
        && since >= until
    {
        return Err(Problem::bad_request(
            "until",
            "until must be later than since",
        ));
    }
    Ok((since_ms, until_ms))
}

/// The producer's W3C trace context, when its `traceparent` is valid (W3C Trace Context
/// Level 1, see [`crate::model::TraceParent`]); otherwise none: an invalid context is ignored,
/// not refused, as the specification asks of a receiver. Two `traceparent` headers are
/// invalid; several `tracestate` headers are one list.
fn trace_context(headers: &HeaderMap) -> (Option<String>, Option<String>) {
    let mut parents = headers.get_all("traceparent").iter();
    let (Some(first), None) = (parents.next(), parents.next()) else {
        return (None, None);
    };
    let Ok(parent) = first.to_str() else {
        return (None, None);
    };
    let states: Option<Vec<&str>> = headers
        .get_all("tracestate")
        .iter()
        .map(|v| v.to_str().ok())
        .collect();
    let state = states.filter(|s| !s.is_empty()).map(|s| s.join(","));
    trace_context_of(parent, state.as_deref())
}

/// The trace context of one `traceparent` and its `tracestate` (the list as one value), by
/// the same rules, wherever they came from (HTTP headers, a broker message's headers).
pub(crate) fn trace_context_of(
    parent: &str,
    state: Option<&str>,
) -> (Option<String>, Option<String>) {
    let Some(parent) = crate::model::TraceParent::parse(parent.trim()) else {
        return (None, None);
    };
    (
        Some(parent.header()),
        state.and_then(crate::model::tracestate),
    )
}

/// A message as a producer hands it in: by `POST /v1/messages` or from its own queue
/// ([`crate::ingest`]). Both ways in go through [`accept`], so they refuse the same messages.
pub(crate) struct Submission<'a> {
    /// The tenant it is for (known to exist: authenticated, or looked up by the caller).
    pub tenant_id: String,
    /// Its event type, not yet checked.
    pub event_type: String,
    /// Its payload, JSON text as received (delivered byte for byte).
    pub payload: &'a str,
    /// Its idempotency key, not yet checked.
    pub idempotency_key: Option<&'a str>,
    /// The producer's W3C `traceparent`, when it gave a valid one.
    pub traceparent: Option<String>,
    /// The producer's `tracestate`, kept only beside a valid `traceparent`.
    pub tracestate: Option<String>,
}

/// Check a submission by the API's rules (event type, payload limit, idempotency key), store
/// it fanned out, and answer once it is durable: a repeat of a key with the same request is
/// the original (`duplicate`), with a different one a 422 and nothing stored. A 4xx is the
/// message's fault; a 5xx the store's, and a retry with the same key is safe.
pub(crate) async fn accept(state: &AppState, message: Submission<'_>) -> ApiResult<Enqueued> {
    check_event_type(&message.event_type)?;
    let payload = message.payload;
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
    let idempotency_key = match message.idempotency_key.map(str::trim) {
        None => None,
        Some(k) if !k.is_empty() && k.len() <= 256 && k.bytes().all(|b| b.is_ascii_graphic()) => {
            Some(k.to_owned())
        }
        Some(_) => return Err(bad_idempotency_key()),
    };
    let result = state
        .ingest
        .submit(NewMessage {
            id: ids::new_id("msg"),
            tenant_id: message.tenant_id,
            event_type: message.event_type,
            payload: payload.to_owned(),
            idempotency_key,
            only_endpoint: None,
            traceparent: message.traceparent,
            tracestate: message.tracestate,
        })
        .await?;
    if result.mismatch {
        return Err(Problem::unprocessable(
            "Idempotency-Key",
            format!(
                "this Idempotency-Key was used for message {} with a different event type or \
                 payload; nothing was stored: use a new key for a new message",
                result.id
            ),
        ));
    }
    Ok(result)
}

fn bad_idempotency_key() -> Problem {
    Problem::bad_request(
        "Idempotency-Key",
        "Idempotency-Key must be 1–256 printable ASCII characters",
    )
}

/// Accept a message and fan it out to the tenant's subscribed endpoints; answered after commit.
/// A repeated `Idempotency-Key` returns the original message (200, `duplicate: true`) when the
/// request is the same (event type and payload byte for byte); a key reused for a different
/// request is refused with 422 and nothing is stored, as the IETF Idempotency-Key header draft
/// asks (409 there means "the original is still in progress", which a commit-then-answer
/// ingest never is).
#[utoipa::path(post, path = "/v1/messages", tag = "messages", operation_id = "createMessage",
    security(("tenant" = [])),
    params(("Idempotency-Key" = Option<String>, Header,
        description = "1–256 printable ASCII characters; a repeat returns the original"),
        ("traceparent" = Option<String>, Header,
        description = "W3C Trace Context: every attempt of the message is a span in this \
        trace, a child of this span. An invalid one is ignored (the message starts a trace of \
        its own), never refused"),
        ("tracestate" = Option<String>, Header,
        description = "W3C Trace Context: kept beside a valid traceparent and sent on with it \
        to endpoints that ask for trace context; an invalid one, or one over 512 bytes, is \
        dropped")),
    request_body = CreateMessage,
    responses((status = 202, body = Created, description = "Stored and fanned out"),
        (status = 200, body = Created, description = "A repeat of an earlier request"),
        (status = 422, body = Problem, content_type = "application/problem+json",
            description = "Invalid input, or an Idempotency-Key used before for a different \
            request"),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
        (status = 503, description = "The database did not answer within the store deadline \
            or is unreachable; retry with the same Idempotency-Key", body = Problem,
            content_type = "application/problem+json"),
        (status = 507, description = "The database is full; nothing was stored", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(super) async fn create(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    headers: HeaderMap,
    Body(req): Body<CreateMessage>,
) -> ApiResult<(StatusCode, Json<Created>)> {
    let idempotency_key = match headers.get("idempotency-key") {
        None => None,
        Some(v) => Some(v.to_str().map_err(|_| bad_idempotency_key())?),
    };
    let (traceparent, tracestate) = trace_context(&headers);
    let result = accept(
        &state,
        Submission {
            tenant_id: tenant.id,
            event_type: req.event_type,
            payload: req.payload.get(),
            idempotency_key,
            traceparent,
            tracestate,
        },
    )
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
#[utoipa::path(get, path = "/v1/messages/{id}", tag = "messages", operation_id = "getMessage",
    security(("tenant" = [])),
    params(("id" = String, Path, description = "`msg_…`")),
    responses((status = 200, body = MessageOut),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(super) async fn get(
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
        created_at: Timestamp(m.created_at_ms),
        deliveries: m
            .deliveries
            .into_iter()
            .map(|d| DeliveryOut::new(d, state.store.row_ids()))
            .collect(),
    }))
}

/// The message log, newest first: filter by event type (exact or `order.*`), arrival time,
/// endpoint and delivery state; page with `after`.
#[utoipa::path(get, path = "/v1/messages", tag = "messages", operation_id = "listMessages",
    security(("tenant" = [])),
    params(MessageQuery),
    responses((status = 200, body = Page<MessageItem>),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(super) async fn list(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Q(q): Q<MessageQuery>,
) -> ApiResult<Json<Page<MessageItem>>> {
    let page = PageQuery {
        limit: q.limit,
        after: q.after.clone(),
    };
    let limit = page.limit()?;
    let event_type = match q.event_type.as_deref() {
        None => None,
        Some(t) => {
            check_event_filter(t)?;
            Some(t.to_owned())
        }
    };
    let (since_ms, until_ms) = check_range(q.since.as_deref(), q.until.as_deref())?;
    if let Some(ep) = &q.endpoint_id {
        check_id("endpoint", ep).map_err(|p| p.field("endpoint_id"))?;
        state
            .store
            .endpoint(Some(&tenant.id), ep)
            .await
            .map_err(|e| Problem::from(e).field("endpoint_id"))?;
    }
    let filter = MessageFilter {
        tenant_id: tenant.id,
        event_type,
        since_ms,
        until_ms,
        endpoint_id: q.endpoint_id,
        state: q.state.map(DeliveryState::from),
        before: page.after_id("msg_")?.map(str::to_owned),
        limit,
    };
    let messages = state.store.list_messages(&filter).await?;
    let data = messages.into_iter().map(MessageItem::from).collect();
    Ok(Json(Page::new(data, limit, |m: &MessageItem| m.id.clone())))
}
