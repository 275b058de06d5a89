//! The autoscaling signal: `GET /v1/scale` (operator) and the `sluice_desired_replicas` gauge,
//! from the age of the oldest ready delivery (a store read) and the live fleet's load and
//! replica count (the dispatchers' heartbeats): replicas grow when work waits
//! longer than the target age and shrink slowly, never below the floor.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use utoipa::IntoParams;

use super::AppState;
use super::auth::Admin;
use super::page::Q;
use crate::model::QueueStats;
use crate::sizing::ScalingPolicy;
use crate::sizing::heartbeats::FleetLoad;
use crate::sizing::signal::{ScaleSignal, max_oldest_ready_age_s, scale_signal};
use crate::web::problem::{ApiResult, Problem};

/// Query of `GET /v1/scale`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ScaleQuery {
    /// Dispatcher replicas running now, 0–100000 (default: the dispatchers with a fresh
    /// heartbeat).
    #[param(minimum = 0, maximum = 100000)]
    pub current_replicas: Option<u32>,
}

/// The most replicas `current_replicas` may name: far past any fleet, and what keeps the
/// controller's arithmetic (`current × 2 + 1`) and the answer's integers in range.
const MAX_CURRENT_REPLICAS: u32 = 100_000;

impl ScaleQuery {
    /// `current_replicas`, checked against its range.
    fn current(&self) -> Result<Option<u32>, Problem> {
        match self.current_replicas {
            Some(n) if n > MAX_CURRENT_REPLICAS => Err(Problem::bad_request(
                "current_replicas",
                format!("current_replicas {n} must be 0–{MAX_CURRENT_REPLICAS}"),
            )),
            n => Ok(n),
        }
    }
}

/// The live fleet, from the heartbeats in the store (fresh: within three intervals).
pub(crate) async fn fleet(state: &AppState) -> crate::store::StoreResult<FleetLoad> {
    let since = crate::clock::now_ms() - state.settings.heartbeat_fresh().as_millis() as i64;
    let beats = state.store.heartbeats(since).await?;
    Ok(FleetLoad::from_heartbeats(&beats, since))
}

/// The signal from current figures.
pub(crate) async fn signal(state: &AppState, current: Option<u32>) -> ApiResult<ScaleSignal> {
    let stats = state.store.queue_stats(crate::clock::now_ms()).await?;
    let fleet = fleet(state).await?;
    Ok(signal_from(state, &stats, &fleet, current))
}

/// The signal from figures already read: the age from the store, the load and the current
/// replicas from the live fleet (whichever process computes it, an API-only one included).
pub(crate) fn signal_from(
    state: &AppState,
    stats: &QueueStats,
    fleet: &FleetLoad,
    current: Option<u32>,
) -> ScaleSignal {
    let oldest = max_oldest_ready_age_s(&stats.oldest_ready_age_ms);
    let tasks = fleet.tasks_per_replica(state.settings.concurrency.ceiling());
    scale_signal(
        current.unwrap_or(fleet.dispatchers),
        oldest,
        fleet.arrivals_per_s,
        fleet.mean_service_s,
        tasks,
        &ScalingPolicy::default(),
    )
}

/// `GET /v1/scale`: how many dispatcher replicas the controller wants, and why.
#[utoipa::path(get, path = "/v1/scale", operation_id = "getScaleSignal", tag = "operations", params(ScaleQuery),
    security(("admin" = [])),
    responses((status = 200, body = ScaleSignal, description = "the scaling signal"),
        (status = "4XX", body = crate::web::problem::Problem,
            content_type = "application/problem+json"),
        (status = 503, body = crate::web::problem::Problem,
            content_type = "application/problem+json",
            description = "The database did not answer within the store deadline")))]
pub(crate) async fn get(
    State(state): State<AppState>,
    _: Admin,
    Q(q): Q<ScaleQuery>,
) -> ApiResult<Json<ScaleSignal>> {
    Ok(Json(signal(&state, q.current()?).await?))
}
