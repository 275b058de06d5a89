//! `GET /v1/tenants/{id}/status`: a tenant's share of the pool, as the operator reads it — its
//! weight and ceiling, its fair share beside the tenants competing now, what it holds, what it
//! has waiting, and whether it is being held to its share — in figures and one sentence. The
//! tenant reads the same sentence (it names no other tenant) in its endpoints' evidence.

use axum::Json;
use axum::extract::{Path, State};
use serde::Serialize;
use utoipa::ToSchema;

use crate::api::AppState;
use crate::api::auth::Admin;
use crate::api::views::check_id;
use crate::dispatcher::TenantView;
use crate::fairness;
use crate::model::{SharePolicy, TenantBacklog};
use crate::web::problem::{ApiResult, Problem};

/// Work that has waited less than this is not "waiting".
const WAIT_MS: i64 = 1_000;

/// Where a tenant stands against its share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ShareCondition {
    /// Nothing due.
    Idle,
    /// Work is due, none of it waiting a second or more.
    Within,
    /// Work waits while the tenant holds its fair share (or its ceiling) and other tenants
    /// have work too: it is being held to its share.
    Held,
    /// Work waits although the tenant holds less than its share: the pool is short for
    /// everyone (see `GET /v1/scale`), or its endpoints' lanes are what binds.
    Waiting,
}

/// A tenant's share of the pool.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ShareStatus {
    /// `ten_…`
    pub tenant_id: String,
    /// Where it stands; the sentence leads with it.
    pub condition: ShareCondition,
    /// Its weight in force (its own, else `--tenant-weight`).
    pub weight: u32,
    /// Its ceiling in force (its own, else `--tenant-max-share`; 1: none).
    pub max_share: f64,
    /// Its fair share of the pool beside the tenants competing now (weights, with ceilings
    /// applied), 0 to 1; null in a process without a dispatcher.
    pub fair_share: Option<f64>,
    /// Its share of this process's pool's time over about the last minute, 0 to 1; null in a
    /// process without a dispatcher.
    pub occupancy: Option<f64>,
    /// Its deliveries in flight or waiting at a lane in this process; null without a
    /// dispatcher.
    pub in_flight: Option<u32>,
    /// Its endpoints with deliveries due now (fleet-wide: read from the store).
    pub due_endpoints: u64,
    /// How long its oldest due delivery has waited, ms (fleet-wide).
    pub oldest_ready_age_ms: i64,
    /// Tenants with due work now, this one included (fleet-wide).
    pub tenants_due: u64,
    /// The figures in one sentence (it names no other tenant).
    pub sentence: String,
}

/// One tenant's share of the pool (the operator's route).
#[utoipa::path(get, path = "/v1/tenants/{id}/status", operation_id = "getTenantStatus", tag = "tenants",
    security(("admin" = [])),
    params(("id" = String, Path, description = "`ten_…`")),
    responses((status = 200, body = ShareStatus),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(in crate::api) async fn status(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> ApiResult<Json<ShareStatus>> {
    check_id("tenant", &id)?;
    let tenant = state.store.tenant(&id).await?;
    share_status(&state, &tenant.id, tenant.share)
        .await
        .map(Json)
}

/// The share status of `tenant` (whose written policy is `policy`): the store's backlog and, in
/// a process with a dispatcher, its view of the tenants it serves.
pub(crate) async fn share_status(
    state: &AppState,
    tenant: &str,
    policy: SharePolicy,
) -> ApiResult<ShareStatus> {
    let backlog = state
        .store
        .tenant_backlog(tenant, crate::clock::now_ms())
        .await?;
    let views = state.dispatcher.as_ref().map(|ctx| ctx.tenants());
    let (weight, max_share) = crate::dispatcher::in_force(
        policy,
        state.settings.tenant_weight,
        state.settings.tenant_max_share,
    );
    Ok(judge(tenant, weight, max_share, &backlog, views.as_deref()))
}

/// Where `tenant` stands, from its backlog and (with a dispatcher) the tenants it serves.
pub(crate) fn judge(
    tenant: &str,
    weight: u32,
    max_share: f64,
    backlog: &TenantBacklog,
    views: Option<&[TenantView]>,
) -> ShareStatus {
    let mine = views.and_then(|v| v.iter().find(|t| t.tenant_id == tenant));
    // Competing now: tenants holding any of the pool, and this one when it has work due.
    let fair_share = views.map(|views| {
        let mut competing: Vec<(u32, f64)> = Vec::new();
        let mut index = None;
        for t in views {
            let mine = t.tenant_id == tenant;
            let holds = t.in_flight > 0 || t.occupancy > 0.005;
            if holds || (mine && backlog.due_endpoints > 0) {
                if mine {
                    index = Some(competing.len());
                }
                competing.push((t.weight, t.max_share));
            }
        }
        let index = index.unwrap_or_else(|| {
            competing.push((weight, max_share));
            competing.len() - 1
        });
        fairness::fair_shares(&competing)[index]
    });
    let occupancy = views.map(|_| mine.map_or(0.0, |t| t.occupancy));
    let in_flight = views.map(|_| mine.map_or(0, |t| t.in_flight));
    let waiting = backlog.due_endpoints > 0 && backlog.oldest_ready_age_ms >= WAIT_MS;
    let others = backlog.tenants_due.saturating_sub(1);
    let pct = |x: f64| format!("{:.0} %", x * 100.0);
    let holding = match (occupancy, fair_share) {
        (Some(o), Some(f)) => format!(
            "it holds {} of the pool's time against a fair share of {} (weight {weight})",
            pct(o),
            pct(f)
        ),
        _ => format!("weight {weight}"),
    };
    let at_ceiling = max_share < 1.0 && occupancy.is_some_and(|o| o >= max_share * 0.9);
    let at_share = match (occupancy, fair_share) {
        (Some(o), Some(f)) => o >= f * 0.8,
        // Without a dispatcher's view, work waiting beside others' is taken as held.
        _ => true,
    };
    let waits = format!(
        "{} endpoints due, the oldest delivery waiting {:.1} s",
        backlog.due_endpoints,
        backlog.oldest_ready_age_ms as f64 / 1000.0
    );
    let (condition, sentence) = if backlog.due_endpoints == 0 {
        (
            ShareCondition::Idle,
            format!("idle: nothing due; {holding}"),
        )
    } else if !waiting {
        (
            ShareCondition::Within,
            format!("within its share: {holding}; nothing has waited a second"),
        )
    } else if at_ceiling {
        (
            ShareCondition::Held,
            format!(
                "held at its ceiling: it may hold {} of the pool, and {others} other tenants \
                 have due work; {holding}; {waits}",
                pct(max_share)
            ),
        )
    } else if others > 0 && at_share {
        (
            ShareCondition::Held,
            format!(
                "held to its share: {others} other tenants have due work too; {holding}; {waits}"
            ),
        )
    } else {
        (
            ShareCondition::Waiting,
            format!(
                "waiting below its share: {holding}; {waits}: the pool is short or its \
                 endpoints' lanes bind"
            ),
        )
    };
    ShareStatus {
        tenant_id: tenant.to_owned(),
        condition,
        weight,
        max_share,
        fair_share,
        occupancy,
        in_flight,
        due_endpoints: backlog.due_endpoints,
        oldest_ready_age_ms: backlog.oldest_ready_age_ms,
        tenants_due: backlog.tenants_due,
        sentence,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(tenant: &str, weight: u32, in_flight: u32, occupancy: f64) -> TenantView {
        TenantView {
            tenant_id: tenant.into(),
            weight,
            max_share: 1.0,
            in_flight,
            occupancy,
        }
    }

    fn backlog(due_endpoints: u64, age_ms: i64, tenants_due: u64) -> TenantBacklog {
        TenantBacklog {
            due_endpoints,
            oldest_ready_age_ms: age_ms,
            tenants_due,
        }
    }

    /// A busy tenant holding half the pool beside one other of equal weight, with a backlog:
    /// held to its share, and the sentence says so with the figures.
    #[test]
    fn a_tenant_at_its_share_with_work_waiting_is_held() {
        let views = [view("busy", 1, 250, 0.49), view("quiet", 1, 2, 0.01)];
        let s = judge("busy", 1, 1.0, &backlog(1_200, 3_200, 2), Some(&views));
        assert_eq!(s.condition, ShareCondition::Held);
        assert!((s.fair_share.unwrap() - 0.5).abs() < 1e-9);
        assert!(
            s.sentence
                .starts_with("held to its share: 1 other tenants have due work too"),
            "{}",
            s.sentence
        );
        assert!(
            s.sentence.contains("49 %") && s.sentence.contains("50 %"),
            "{}",
            s.sentence
        );
        assert!(!s.sentence.contains("quiet"), "names no other tenant");
    }

    #[test]
    fn a_quiet_tenant_is_within_and_an_idle_one_idle() {
        let views = [view("busy", 1, 500, 0.97), view("quiet", 1, 2, 0.01)];
        let s = judge("quiet", 1, 1.0, &backlog(3, 4, 2), Some(&views));
        assert_eq!(s.condition, ShareCondition::Within);
        let s = judge("other", 1, 1.0, &backlog(0, 0, 1), Some(&views));
        assert_eq!(s.condition, ShareCondition::Idle);
        assert_eq!(s.occupancy, Some(0.0));
    }

    /// Work waits, the tenant holds far less than its share: not held, the pool is short.
    #[test]
    fn waiting_below_the_share_is_not_held() {
        let views = [view("a", 1, 10, 0.1), view("b", 1, 10, 0.1)];
        let s = judge("a", 1, 1.0, &backlog(5, 10_000, 2), Some(&views));
        assert_eq!(s.condition, ShareCondition::Waiting);
    }

    #[test]
    fn a_ceiling_is_named_when_it_binds() {
        let views = [TenantView {
            max_share: 0.25,
            ..view("busy", 1, 128, 0.25)
        }];
        let s = judge("busy", 1, 0.25, &backlog(100, 5_000, 3), Some(&views));
        assert_eq!(s.condition, ShareCondition::Held);
        assert!(
            s.sentence
                .starts_with("held at its ceiling: it may hold 25 %"),
            "{}",
            s.sentence
        );
    }
}
