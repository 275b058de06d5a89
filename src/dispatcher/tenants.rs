//! The dispatcher's side of fair shares across tenants ([`crate::fairness`]): its virtual time,
//! what it owes the store for the claims it made (charged with its next claim), each tenant's
//! written policy as its latest claim read it, and each tenant's use of this dispatcher's pool.
//!
//! A claim is charged at the expected attempt time of each delivery it took: the endpoint's
//! measured service time (exponentially weighted), or [`UNMEASURED_COST`] before its first
//! attempt here. So a tenant whose endpoints answer in 2 s uses up its share forty times faster
//! per delivery than one whose endpoints answer in 50 ms: shares are of the pool's time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::fairness;
use crate::model::{Claimed, SharePolicy, TenantCharge};

/// What a delivery to an endpoint never attempted here is charged, seconds.
pub(super) const UNMEASURED_COST: f64 = 0.1;

/// How fast a tenant's use of the pool is forgotten: its half-life.
const OCCUPANCY_HALF_LIFE: Duration = Duration::from_secs(60);

/// A tenant neither claimed nor attempted for this long is forgotten.
const FORGET_AFTER: Duration = Duration::from_secs(600);

/// One tenant as this dispatcher knows it.
#[derive(Debug, Clone)]
struct Known {
    /// Its written policy, as the latest claim that served it read it.
    policy: SharePolicy,
    /// Attempt-seconds, decayed with [`OCCUPANCY_HALF_LIFE`].
    score: f64,
    scored_at: Instant,
    seen: Instant,
}

impl Known {
    fn new(now: Instant) -> Self {
        Self {
            policy: SharePolicy::default(),
            score: 0.0,
            scored_at: now,
            seen: now,
        }
    }

    /// The decayed score as of `now`.
    fn score_at(&self, now: Instant) -> f64 {
        let dt = now.saturating_duration_since(self.scored_at).as_secs_f64();
        self.score * 0.5f64.powf(dt / OCCUPANCY_HALF_LIFE.as_secs_f64())
    }
}

#[derive(Debug, Default)]
struct State {
    /// The highest floor a claim has returned (`None` before the first).
    floor: Option<f64>,
    /// Charges for the next claim, by tenant.
    charges: HashMap<String, TenantCharge>,
    known: HashMap<String, Known>,
}

/// A tenant's figures as this dispatcher sees them.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(super) struct TenantUse {
    /// The tenant.
    pub(super) tenant_id: String,
    /// Its written policy as last read.
    pub(super) policy: SharePolicy,
    /// Attempt-seconds per second over about the last minute.
    pub(super) busy: f64,
}

/// The dispatcher's fair-share state.
#[derive(Debug, Default)]
pub(super) struct Tenants {
    state: Mutex<State>,
}

impl Tenants {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the next claim carries: the virtual time, and the charges owed (taken).
    pub(super) fn for_claim(&self) -> (Option<f64>, Vec<TenantCharge>) {
        let mut s = self.state();
        let charges = s.charges.drain().map(|(_, c)| c).collect();
        (s.floor, charges)
    }

    /// Give back charges a failed claim did not apply.
    pub(super) fn unapplied(&self, charges: Vec<TenantCharge>) {
        let mut s = self.state();
        for c in charges {
            match s.charges.get_mut(&c.tenant_id) {
                Some(owed) => {
                    owed.seconds += c.seconds;
                    owed.deliveries += c.deliveries;
                }
                None => {
                    s.charges.insert(c.tenant_id.clone(), c);
                }
            }
        }
    }

    /// Record a claim: its floor, and a charge of `cost(delivery)` seconds for each delivery
    /// it took.
    pub(super) fn claimed(
        &self,
        floor: Option<f64>,
        claimed: &[Claimed],
        cost: impl Fn(&Claimed) -> f64,
    ) {
        let now = Instant::now();
        let mut s = self.state();
        if let Some(f) = floor {
            s.floor = Some(s.floor.map_or(f, |v| v.max(f)));
        }
        for d in claimed {
            let seconds = cost(d);
            match s.charges.get_mut(d.tenant_id.as_str()) {
                Some(owed) => {
                    owed.seconds += seconds;
                    owed.deliveries += 1;
                }
                None => {
                    s.charges.insert(
                        d.tenant_id.clone(),
                        TenantCharge {
                            tenant_id: d.tenant_id.clone(),
                            start: d.tenant_pass,
                            seconds,
                            deliveries: 1,
                        },
                    );
                }
            }
            let k = match s.known.get_mut(d.tenant_id.as_str()) {
                Some(k) => k,
                None => s
                    .known
                    .entry(d.tenant_id.clone())
                    .or_insert_with(|| Known::new(now)),
            };
            k.seen = now;
            k.policy = d.tenant_share;
        }
    }

    /// Add one attempt's duration to `tenant`'s use of the pool.
    pub(super) fn occupied(&self, tenant: &str, took: Duration) {
        let now = Instant::now();
        let mut s = self.state();
        let k = match s.known.get_mut(tenant) {
            Some(k) => k,
            None => s
                .known
                .entry(tenant.to_owned())
                .or_insert_with(|| Known::new(now)),
        };
        k.score = k.score_at(now) + took.as_secs_f64();
        k.scored_at = now;
        k.seen = now;
    }

    /// A tenant's policy as last read (the defaults until it is).
    pub(super) fn policy(&self, tenant: &str) -> SharePolicy {
        self.state()
            .known
            .get(tenant)
            .map(|k| k.policy)
            .unwrap_or_default()
    }

    /// Forget tenants neither claimed nor attempted for long.
    pub(super) fn forget_idle(&self) {
        let now = Instant::now();
        self.state()
            .known
            .retain(|_, k| now.saturating_duration_since(k.seen) < FORGET_AFTER);
    }

    /// Each known tenant's policy and use of the pool, busiest first.
    pub(super) fn uses(&self) -> Vec<TenantUse> {
        let now = Instant::now();
        let s = self.state();
        // A steady rate r of attempt-seconds per second holds the score at r × h / ln 2.
        let per_second = std::f64::consts::LN_2 / OCCUPANCY_HALF_LIFE.as_secs_f64();
        let mut uses: Vec<TenantUse> = s
            .known
            .iter()
            .map(|(id, k)| TenantUse {
                tenant_id: id.clone(),
                policy: k.policy,
                busy: k.score_at(now) * per_second,
            })
            .collect();
        uses.sort_by(|a, b| {
            b.busy
                .total_cmp(&a.busy)
                .then_with(|| a.tenant_id.cmp(&b.tenant_id))
        });
        uses
    }
}

/// The weight and ceiling in force for `policy` under the process defaults.
pub(crate) fn in_force(
    policy: SharePolicy,
    default_weight: u32,
    default_max_share: f64,
) -> (u32, f64) {
    (
        policy.weight.unwrap_or(default_weight).max(1),
        policy.max_share.unwrap_or(default_max_share),
    )
}

/// Each tenant's room in a pool of `pool`, given what it holds now (`(tenant, holds, ceiling)`):
/// under its ceiling, and none at all for a tenant holding slots when the claim may only use
/// the pool's reserve (`reserve_only`: the free slots are down to the reserve kept for tenants
/// holding none). Only the tenants whose room is less than `limit` (the others cannot be held
/// back by this claim).
pub(super) fn rooms<'a>(
    held: impl IntoIterator<Item = (&'a str, u32, f64)>,
    pool: u32,
    limit: u32,
    reserve_only: bool,
) -> Vec<(String, u32)> {
    held.into_iter()
        .filter_map(|(tenant, holds, share)| {
            let room = if reserve_only && holds > 0 {
                0
            } else if share < 1.0 {
                fairness::ceiling_slots(share, pool).saturating_sub(holds)
            } else {
                return None;
            };
            (room < limit).then(|| (tenant.to_owned(), room))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claimed(tenant: &str, pass: f64) -> Claimed {
        Claimed {
            delivery_id: 1,
            lease_token: 1,
            message_id: "msg".into(),
            endpoint_id: "ep".into(),
            tenant_id: tenant.into(),
            attempts: 0,
            event_type: "a".into(),
            payload: "{}".into(),
            message_created_at_ms: 0,
            traceparent: None,
            tracestate: None,
            visible_at_ms: 0,
            tenant_pass: pass,
            tenant_share: SharePolicy::default(),
        }
    }

    #[test]
    fn claims_are_charged_once_per_tenant_with_the_next_claim() {
        let t = Tenants::default();
        let batch = [claimed("a", 3.0), claimed("a", 3.0), claimed("b", 3.5)];
        t.claimed(Some(3.0), &batch, |d| {
            if d.tenant_id == "a" { 0.2 } else { 1.0 }
        });
        let (floor, mut charges) = t.for_claim();
        assert_eq!(floor, Some(3.0));
        charges.sort_by(|x, y| x.tenant_id.cmp(&y.tenant_id));
        assert_eq!(charges.len(), 2);
        assert_eq!((charges[0].start, charges[0].seconds), (3.0, 0.4));
        assert_eq!((charges[1].start, charges[1].seconds), (3.5, 1.0));
        // Taken: the claim after owes nothing.
        assert!(t.for_claim().1.is_empty());
        // A failed claim gives its charges back.
        t.unapplied(charges);
        assert_eq!(t.for_claim().1.len(), 2);
        // The floor only moves up.
        t.claimed(Some(2.0), &[], |_| 0.0);
        assert_eq!(t.for_claim().0, Some(3.0));
    }

    #[test]
    fn a_ceiling_leaves_room_only_below_it() {
        let held = [("a", 100, 0.25), ("b", 120, 0.25), ("c", 500, 1.0)];
        // 25 % of 512 is 128: a has 28 left, b 8; c has no ceiling.
        assert_eq!(
            rooms(held, 512, 64, false),
            [("a".to_owned(), 28), ("b".to_owned(), 8)]
        );
        assert_eq!(rooms(held, 512, 16, false), [("b".to_owned(), 8)]);
        assert_eq!(
            rooms([("a", 200, 0.25)], 512, 64, false),
            [("a".to_owned(), 0)]
        );
    }

    #[test]
    fn down_to_the_reserve_no_tenant_holding_slots_has_room() {
        let held = [("a", 100, 0.25), ("c", 500, 1.0), ("new", 0, 0.5)];
        assert_eq!(
            rooms(held, 512, 16, true),
            [("a".to_owned(), 0), ("c".to_owned(), 0)],
            "a tenant holding none keeps its room (under its ceiling)"
        );
    }

    #[test]
    fn use_of_the_pool_is_a_rate_that_fades() {
        let t = Tenants::default();
        t.occupied("a", Duration::from_secs(6));
        let uses = t.uses();
        assert_eq!(uses[0].tenant_id, "a");
        let expected = 6.0 * std::f64::consts::LN_2 / 60.0;
        assert!((uses[0].busy - expected).abs() < 1e-3, "{uses:?}");
    }
}
