//! Notices to a tenant's operational webhook: sluice tells the tenant, signed and through the
//! same delivery machinery, when one of its endpoints is disabled, is being throttled (sustained
//! shedding above 20 % of offered), or a message is dead-lettered.
//!
//! The webhook is an endpoint with `operational = true` and a fixed id per tenant (managed by
//! `api::ops_webhooks`); [`notify`] enqueues a message addressed to it alone.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::{Value, json};

use crate::dispatcher::Ctx;
use crate::store::{NewMessage, SharedStore, StoreError};

/// Event type: an endpoint was disabled (410 Gone, failing for too long, …).
pub const ENDPOINT_DISABLED: &str = "sluice.endpoint.disabled";
/// Event type: an endpoint sheds more than [`THROTTLE_SHARE`] of what is offered to it.
pub const ENDPOINT_THROTTLED: &str = "sluice.endpoint.throttled";
/// Event type: a message's delivery to an endpoint was dead-lettered.
pub const MESSAGE_DEAD_LETTERED: &str = "sluice.message.dead_lettered";

/// Shed share of offered above which an endpoint counts as throttled.
pub const THROTTLE_SHARE: f64 = 0.2;
/// Fewest offered deliveries in the window before a shed share means anything.
const THROTTLE_MIN_OFFERED: f64 = 10.0;
/// How often the throttle watch reads the windows.
const THROTTLE_CHECK: Duration = Duration::from_secs(5);
/// At most one throttle notice per endpoint this often.
const THROTTLE_COOLDOWN: Duration = Duration::from_secs(600);

/// What a tenant should do about throttling.
pub const REMEDY: &str = "answer 2xx at once and do the work out of band (queue it on your \
    side), so each delivery holds a lane slot for milliseconds instead of the whole processing \
    time";

/// The fixed id of a tenant's operational endpoint.
pub fn operational_id(tenant_id: &str) -> String {
    format!("ep_op_{}", tenant_id.trim_start_matches("ten_"))
}

/// Notify a tenant's operational webhook, if it has one (and it is enabled), through the normal
/// delivery machinery: a message addressed to that endpoint alone, signed like any other.
///
/// Never fails the caller: a tenant without a webhook is a no-op, a store error is logged.
/// A notice about the operational endpoint itself is dropped (no notification loops).
pub async fn notify(store: &SharedStore, tenant_id: &str, event_type: &str, payload: Value) {
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
    let body = json!({ "type": event_type, "tenant_id": tenant_id, "at_ms": now, "data": payload });
    let message = NewMessage {
        id: crate::ids::new_id("msg"),
        tenant_id: tenant_id.to_owned(),
        event_type: event_type.to_owned(),
        payload: body.to_string(),
        idempotency_key: None,
        only_endpoint: Some(id),
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
    delivery_id: i64,
    reason: &str,
) -> Value {
    json!({
        "endpoint_id": endpoint_id,
        "message_id": message_id,
        "delivery_id": delivery_id,
        "reason": reason,
    })
}

/// Watch this process's dispatcher for endpoints shedding more than [`THROTTLE_SHARE`] of what
/// is offered over their rolling window, and notify their tenants (at most once per cooldown).
/// Ends when the dispatcher is gone.
pub fn spawn_throttle_watch(ctx: Weak<Ctx>, store: SharedStore) {
    tokio::spawn(async move {
        let mut notified: HashMap<String, tokio::time::Instant> = HashMap::new();
        loop {
            tokio::time::sleep(THROTTLE_CHECK).await;
            let Some(ctx) = ctx.upgrade() else { return };
            for (tenant, payload) in throttled(&ctx, &mut notified) {
                notify(&store, &tenant, ENDPOINT_THROTTLED, payload).await;
            }
        }
    });
}

/// The notices due now: (tenant, payload) for each endpoint throttled and not recently told.
fn throttled(
    ctx: &Arc<Ctx>,
    notified: &mut HashMap<String, tokio::time::Instant>,
) -> Vec<(String, Value)> {
    let now = tokio::time::Instant::now();
    notified.retain(|_, at| now.duration_since(*at) < THROTTLE_COOLDOWN);
    let concurrency = ctx.concurrency();
    let mut due = Vec::new();
    for rt in ctx.endpoints.all() {
        if notified.contains_key(&rt.id) {
            continue;
        }
        let (snapshot, lane, effective) = {
            let s = rt.state();
            (
                s.window.snapshot(now),
                s.lane_size(&ctx.settings, concurrency),
                s.effective_lane(&ctx.settings, concurrency),
            )
        };
        let offered = snapshot.offered_per_s * snapshot.span.as_secs_f64();
        if offered < THROTTLE_MIN_OFFERED || snapshot.shed_share <= THROTTLE_SHARE {
            continue;
        }
        let ev = crate::stats::evidence(&snapshot, effective);
        notified.insert(rt.id.clone(), now);
        due.push((
            rt.tenant_id.clone(),
            json!({
                "endpoint_id": rt.id,
                "shed_share": snapshot.shed_share,
                "window_s": snapshot.span.as_secs_f64(),
                "lane_size": lane,
                "effective_lane": effective,
                "p95_s": snapshot.p95.map(|d| d.as_secs_f64()),
                "offered_per_s": snapshot.offered_per_s,
                "effective_rate_per_s": ev.sustainable_per_s,
                "delivered_per_s": snapshot.delivered_per_s,
                "sentence": ev.sentence,
                "remedy": REMEDY,
            }),
        ));
    }
    due
}
