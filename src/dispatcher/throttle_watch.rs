//! The throttle watch: every few seconds, endpoints that shed more than a fifth of what is
//! offered to them over their rolling window are reported to their tenant's operational
//! webhook (at most once per cooldown), with the evidence and what to do about it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::Ctx;
use super::view::{EndpointView, Look};
use crate::operational_webhooks::{self, ENDPOINT_THROTTLED};

/// Shed share of offered above which an endpoint counts as throttled.
const THROTTLE_SHARE: f64 = 0.2;
/// Fewest offered deliveries in the window before a shed share means anything.
const THROTTLE_MIN_OFFERED: f64 = 10.0;
/// How often the watch reads the windows.
const THROTTLE_CHECK: Duration = Duration::from_secs(5);
/// At most one throttle notice per endpoint this often.
const THROTTLE_COOLDOWN: Duration = Duration::from_secs(600);

/// What a tenant should do about throttling.
const REMEDY: &str = "answer 2xx at once and do the work out of band (queue it on your \
    side), so each delivery holds a lane slot for milliseconds instead of the whole processing \
    time";

/// Watch `ctx`'s endpoints until the drain stops it.
pub(super) async fn watch(ctx: Arc<Ctx>) {
    let mut notified: HashMap<String, Instant> = HashMap::new();
    loop {
        tokio::time::sleep(THROTTLE_CHECK).await;
        let view = ctx.view(Look::Endpoints { windows: true });
        for (tenant, payload) in due(&view.endpoints, &mut notified, Instant::now()) {
            operational_webhooks::send(&ctx.store, &tenant, ENDPOINT_THROTTLED, payload).await;
        }
    }
}

/// The notices due now: (tenant, payload) for each endpoint throttled and not told within the
/// cooldown; `notified` remembers who was told when.
fn due(
    endpoints: &[EndpointView],
    notified: &mut HashMap<String, Instant>,
    now: Instant,
) -> Vec<(String, Value)> {
    notified.retain(|_, at| now.duration_since(*at) < THROTTLE_COOLDOWN);
    let mut due = Vec::new();
    for e in endpoints {
        let Some(window) = &e.window else { continue };
        if notified.contains_key(&e.id) {
            continue;
        }
        let offered = window.offered_per_s * window.span.as_secs_f64();
        if offered < THROTTLE_MIN_OFFERED || window.shed_share <= THROTTLE_SHARE {
            continue;
        }
        let standing = crate::stats::Standing {
            disabled: (!e.enabled).then_some("disabled"),
            breaker_open: e.breaker_holding,
            paused: e.paused,
            ..Default::default()
        };
        let ev = crate::stats::evidence(window, e.effective_lane, standing);
        notified.insert(e.id.clone(), now);
        due.push((
            e.tenant_id.clone(),
            json!({
                "endpoint_id": e.id,
                "shed_share": window.shed_share,
                "window_s": window.span.as_secs_f64(),
                "lane_size": e.lane_size,
                "effective_lane": e.effective_lane,
                "p95_s": window.p95.map(|d| d.as_secs_f64()),
                "offered_per_s": window.offered_per_s,
                "effective_rate_per_s": ev.sustainable_per_s,
                "delivered_per_s": window.delivered_per_s,
                "sentence": ev.sentence,
                "remedy": REMEDY,
            }),
        ));
    }
    due
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::WindowSnapshot;

    fn endpoint(id: &str, offered: f64, shed: f64) -> EndpointView {
        let span = Duration::from_secs(100);
        EndpointView {
            id: id.into(),
            tenant_id: "ten_1".into(),
            host: "example.com".into(),
            enabled: true,
            lane_size: 8,
            lane_basis: super::super::view::LaneBasis::Default,
            effective_lane: 8,
            lane_in_use: 8,
            pending: 0,
            governor_limit: 8.0,
            paused: false,
            breaker: "closed",
            breaker_holding: false,
            service_ewma: None,
            window: Some(WindowSnapshot {
                span,
                offered_per_s: offered / span.as_secs_f64(),
                shed_per_s: shed / span.as_secs_f64(),
                shed_share: shed / offered,
                ..WindowSnapshot::default()
            }),
        }
    }

    #[test]
    fn an_endpoint_shedding_over_a_fifth_is_reported_once_per_cooldown() {
        let mut notified = HashMap::new();
        let now = Instant::now();
        let endpoints = [
            endpoint("ep_shedding", 100.0, 30.0),
            endpoint("ep_fine", 100.0, 20.0),
            endpoint("ep_quiet", 5.0, 5.0),
        ];
        let first = due(&endpoints, &mut notified, now);
        let told: Vec<_> = first
            .iter()
            .map(|(_, p)| p["endpoint_id"].clone())
            .collect();
        // 20 % exactly is not over the line; 5 offered is too few to mean anything.
        assert_eq!(told, [json!("ep_shedding")]);
        assert_eq!(first[0].1["remedy"], REMEDY);
        // Within the cooldown: not again.
        assert!(due(&endpoints, &mut notified, now + Duration::from_secs(60)).is_empty());
        // After it: again.
        let later = now + THROTTLE_COOLDOWN + Duration::from_secs(1);
        assert_eq!(due(&endpoints, &mut notified, later).len(), 1);
    }
}
