//! The autoscaling signal: `GET /v1/scale` (operator) and the `sluice_desired_replicas` gauge,
//! from the age of the oldest ready delivery and the live load (seed 004, step 4).

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use utoipa::IntoParams;

use super::AppState;
use super::auth::Admin;
use super::error::ApiResult;
use super::page::Q;
use crate::sizing::ScalingPolicy;
use crate::sizing::signal::{ScaleSignal, max_oldest_ready_age_s, scale_signal};
use crate::store::QueueStats;

/// Query of `GET /v1/scale`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ScaleQuery {
    /// Dispatcher replicas running now (default: the live dispatchers Redis knows of, else 1).
    pub current_replicas: Option<u32>,
}

/// The signal from current figures.
pub async fn signal(state: &AppState, current: Option<u32>) -> ApiResult<ScaleSignal> {
    let stats = state.store.queue_stats(crate::clock::now_ms()).await?;
    Ok(signal_from(state, &stats, current))
}

/// The signal from queue figures already read.
pub fn signal_from(state: &AppState, stats: &QueueStats, current: Option<u32>) -> ScaleSignal {
    let oldest = max_oldest_ready_age_s(&stats.oldest_ready_age_ms);
    let (rate, mean, tasks, live) = match &state.dispatcher {
        Some(ctx) => {
            let (rate, mean) = crate::lease::live_load(ctx);
            let live = ctx.fleet.0.as_ref().map(|f| f.live_dispatchers());
            (rate, mean, ctx.concurrency(), live)
        }
        None => (0.0, 0.0, state.settings.concurrency.ceiling(), None),
    };
    let current = current.or(live).unwrap_or(1).max(1);
    scale_signal(
        current,
        oldest,
        rate,
        mean,
        tasks.max(1),
        &ScalingPolicy::default(),
    )
}

/// `GET /v1/scale`: how many dispatcher replicas the controller wants, and why.
#[utoipa::path(get, path = "/v1/scale", tag = "operations", params(ScaleQuery),
    security(("admin" = [])),
    responses((status = 200, body = Object, description = "the scaling signal"),
        (status = 401, body = super::error::Problem, content_type = "application/problem+json")))]
pub async fn get(
    State(state): State<AppState>,
    _: Admin,
    Q(q): Q<ScaleQuery>,
) -> ApiResult<Json<ScaleSignal>> {
    Ok(Json(signal(&state, q.current_replicas).await?))
}
