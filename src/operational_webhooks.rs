//! Notices to a tenant's operational webhook: sluice tells the tenant, signed and through the
//! same delivery machinery, when one of its endpoints is disabled, is being throttled (sustained
//! shedding above 20 % of offered), or a message is dead-lettered.
//!
//! The webhook is an endpoint with `operational = true` and a fixed id per tenant (managed by
//! `api::ops_webhooks`); [`send`] enqueues a message addressed to it alone.

use serde_json::{Value, json};

use crate::model::NewMessage;
use crate::store::{SharedStore, StoreError};

/// Event type: an endpoint was disabled (410 Gone, failing for too long, …).
pub const ENDPOINT_DISABLED: &str = "sluice.endpoint.disabled";
/// Event type: an endpoint sheds more than a fifth of what is offered to it (the dispatcher's
/// throttle watch sends it).
pub const ENDPOINT_THROTTLED: &str = "sluice.endpoint.throttled";
/// Event type: a message's delivery to an endpoint was dead-lettered.
pub const MESSAGE_DEAD_LETTERED: &str = "sluice.message.dead_lettered";

/// The fixed id of a tenant's operational endpoint.
pub fn operational_id(tenant_id: &str) -> String {
    format!("ep_op_{}", tenant_id.trim_start_matches("ten_"))
}

/// Send to a tenant's operational webhook, if it has one (and it is enabled), through the normal
/// delivery machinery: a message addressed to that endpoint alone, signed like any other.
///
/// Never fails the caller: a tenant without a webhook is a no-op, a store error is logged.
/// A notice about the operational endpoint itself is dropped (no notification loops).
pub async fn send(store: &SharedStore, tenant_id: &str, event_type: &str, payload: Value) {
    let id = operational_id(tenant_id);
    if payload.get("endpoint_id").and_then(Value::as_str) == Some(id.as_str()) {
        return;
    }
    match store.endpoint(Some(tenant_id), &id).await {
        Ok(e) if e.enabled => {}
        Ok(_) | Err(StoreError::NotFound(_)) => return,
        Err(e) => {
            tracing::warn!(error = %e, tenant = tenant_id, "cannot look up operational webhook");
            return;
        }
    }
    let now = crate::clock::now_ms();
    let body = json!({
        "type": event_type,
        "tenant_id": tenant_id,
        "timestamp": crate::clock::rfc3339(now),
        "data": payload,
    });
    let message = NewMessage {
        id: crate::ids::new_id("msg"),
        tenant_id: tenant_id.to_owned(),
        event_type: event_type.to_owned(),
        payload: body.to_string(),
        idempotency_key: None,
        only_endpoint: Some(id),
        traceparent: None,
        tracestate: None,
    };
    if let Err(e) = store.enqueue(std::slice::from_ref(&message), now).await {
        tracing::warn!(error = %e, tenant = tenant_id, event_type, "cannot enqueue notice");
    }
}

/// The payload of an [`ENDPOINT_DISABLED`] notice.
pub fn disabled_payload(endpoint_id: &str, reason: &str) -> Value {
    json!({ "endpoint_id": endpoint_id, "reason": reason })
}

/// The payload of a [`MESSAGE_DEAD_LETTERED`] notice.
pub fn dead_letter_payload(
    endpoint_id: &str,
    message_id: &str,
    delivery_id: &str,
    reason: &str,
) -> Value {
    json!({
        "endpoint_id": endpoint_id,
        "message_id": message_id,
        "delivery_id": delivery_id,
        "reason": reason,
    })
}
