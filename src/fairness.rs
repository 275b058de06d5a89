//! Fair shares across tenants: the written policy (a weight, a ceiling) and the start-time fair
//! queuing that a claim applies over the tenants with due work.
//!
//! Round robin over due endpoints is fair per endpoint, so a tenant with 2,000 due endpoints
//! would get 2,000 turns for every one of a tenant with ten. A claim therefore shares by tenant
//! first, then by endpoint:
//!
//! - Every tenant with due work has a virtual **pass**: the worker-seconds it has been given,
//!   divided by its weight. A claim serves the tenants with the lowest passes, and a dispatcher
//!   then **charges** each tenant it served what it took (the expected attempt seconds of each
//!   delivery, from the endpoint's measured service time) ÷ its weight. Tenants that use the
//!   pool's time alike get it alike, whether their endpoints answer in 5 ms or in 2 s.
//! - Within one claim each tenant's deliveries are interleaved by their start tags (`pass + k ×
//!   cost ÷ weight` for its `k`-th, the cost being the tenant's expected seconds per delivery,
//!   see [`choose`]), so one claim already splits its limit by weight, and what one tenant cannot
//!   use goes to the next: **work-conserving**, a tenant alone gets the whole pool. A claim reads
//!   no more of each tenant than its [`quotas`]: its batch, not the backlog.
//! - A tenant that becomes due again (its row is new, or was idle) starts at the claim's
//!   **floor**, the lowest pass among the tenants being served (the system's virtual time): no
//!   credit hoarded while idle, and no penalty either. A pass left behind while a tenant's
//!   endpoints were all held (breaker open, paused) is lifted to the floor in the same way.
//! - The **ceiling** (`max_share`) bounds the share of a dispatcher's pool one tenant may hold,
//!   at every moment: the dispatcher passes the tenant's remaining room with each claim, and
//!   admission refuses a slot past it. Each dispatcher bounds its own pool, so a fleet holds the
//!   same fraction of its whole pool.
//! - The **reserve**: without a ceiling a tenant may fill the pool, all but a few slots
//!   ([`reserve_slots`]) kept for tenants that hold none, so a tenant that becomes due starts at
//!   once instead of waiting for another tenant's attempt to end. Beyond the reserve the pool is
//!   work-conserving.
//!
//! The arithmetic lives here, pure; the drivers apply it (SQLite through [`quotas`] and
//! [`choose`], PostgreSQL by the same rules inside its claim statement), and both pass one
//! conformance suite.

use std::ops::RangeInclusive;

/// Valid tenant weights.
pub const WEIGHTS: RangeInclusive<u32> = 1..=1000;

/// Why a weight is refused, or `None` when it is valid.
pub fn weight_problem(weight: u32) -> Option<String> {
    (!WEIGHTS.contains(&weight)).then(|| {
        format!(
            "weight must be an integer from {} to {}",
            WEIGHTS.start(),
            WEIGHTS.end()
        )
    })
}

/// Why a ceiling is refused, or `None` when it is valid.
pub fn max_share_problem(max_share: f64) -> Option<String> {
    // `!(0 < x <= 1)` rather than `x <= 0 || x > 1`: a NaN is refused too.
    (!(max_share > 0.0 && max_share <= 1.0))
        .then(|| "max_share must be a fraction above 0 and at most 1 (1: no ceiling)".to_owned())
}

/// The number of attempts a tenant may hold in a pool of `pool` at `max_share` (at least one).
pub fn ceiling_slots(max_share: f64, pool: u32) -> u32 {
    ((max_share * f64::from(pool)).floor() as u32).max(1)
}

/// The slots of a pool of `pool` kept free for tenants that hold none: a thirty-second of it,
/// at least one (none in a pool of one). A tenant already holding slots is not claimed for
/// once the pool's free slots are down to these.
pub fn reserve_slots(pool: u32) -> u32 {
    if pool <= 1 { 0 } else { pool.div_ceil(32) }
}

/// A tenant's pass as a claim uses it: its stored pass lifted to the floor, or the floor for a
/// tenant that has none (newly due).
pub fn effective_pass(stored: Option<f64>, floor: f64) -> f64 {
    stored.map_or(floor, |p| p.max(floor))
}

/// A tenant's pass after a charge of `seconds`, served at `start` (its effective pass in the
/// claim). Charges of concurrent claims add up: each starts from the larger of the stored pass
/// and its own start.
pub fn charged(stored: Option<f64>, start: f64, seconds: f64, weight: u32) -> f64 {
    effective_pass(stored, start) + seconds / f64::from(weight.max(1))
}

/// What a delivery of a tenant whose cost is not yet known is taken to hold of the pool, seconds.
pub const DEFAULT_COST: f64 = 0.1;

/// One tenant's part in a claim.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn<'a> {
    /// The tenant (ties of start tags break on it).
    pub tenant: &'a str,
    /// Its effective pass ([`effective_pass`]).
    pub pass: f64,
    /// Its weight (at least 1).
    pub weight: u32,
    /// What one of its deliveries is expected to hold of the pool, seconds (above zero).
    pub cost: f64,
    /// The most the claim may take of it (its room under the ceiling).
    pub room: u32,
}

impl Turn<'_> {
    /// Deliveries per unit of pass: `weight ÷ cost`.
    fn rate(&self) -> f64 {
        f64::from(self.weight.max(1)) / self.cost.max(1e-6)
    }

    /// The start tag of its `k`-th delivery in a claim (from 0).
    fn tag(&self, k: u32) -> f64 {
        self.pass + f64::from(k) / self.rate()
    }
}

/// How many deliveries of each tenant a claim of `limit` reads at most: what start-time fair
/// queuing would give each if every tenant had unlimited due work, plus an even part of the
/// limit to take up what the others cannot use. The level θ solves
/// `Σ max(0, θ − pass) × weight ÷ cost = limit`, and is the smallest of the levels the
/// tenants in pass order would reach alone with those before them; each tenant's quota is
/// `⌈(θ − pass) × weight ÷ cost⌉ + ⌈limit ÷ tenants⌉`, at most the limit and its room.
///
/// The even part is what keeps a claim **work-conserving** when a tenant has less due work
/// than its fair quota: without it, a tenant whose pass ran ahead (a slow endpoint's, charged
/// its seconds) got no quota at all while another tenant with a lower pass was due, however
/// little that one had, so a trickle of one delivery per claim left the rest of every claim
/// empty and the slow tenant's backlog unserved. [`choose`] still takes the lowest start tags
/// of what was read, so tenants that all have work share exactly as before. Reading the
/// quotas costs at most twice the batch (plus one per tenant), never the backlog.
pub fn quotas(turns: &[Turn<'_>], limit: u32) -> Vec<u32> {
    let mut order: Vec<usize> = (0..turns.len()).collect();
    order.sort_by(|&a, &b| turns[a].pass.total_cmp(&turns[b].pass).then(a.cmp(&b)));
    let (mut rates, mut weighted) = (0.0, 0.0);
    let mut level = f64::INFINITY;
    for &i in &order {
        rates += turns[i].rate();
        weighted += turns[i].pass * turns[i].rate();
        level = level.min((f64::from(limit) + weighted) / rates);
    }
    let even = limit.div_ceil(u32::try_from(turns.len()).unwrap_or(u32::MAX).max(1));
    turns
        .iter()
        .map(|t| {
            let q = ((level - t.pass) * t.rate()).ceil();
            let fair = if q.is_nan() || q <= 0.0 {
                0
            } else {
                q.min(f64::from(u32::MAX)) as u32
            };
            fair.saturating_add(even).min(limit).min(t.room)
        })
        .collect()
}

/// How many of each tenant's read deliveries (`supplies`, in the order read) a claim of
/// `limit` takes: the `limit` lowest start tags (`pass + k × cost ÷ weight` for its `k`-th
/// delivery; ties by tenant, then `k`). A tenant always gives its first ones, so what a tenant
/// cannot use goes to the next: **work-conserving**.
pub fn choose(turns: &[Turn<'_>], supplies: &[u32], limit: u32) -> Vec<u32> {
    let mut tags: Vec<(f64, usize, u32)> = Vec::new();
    for (i, (t, &supply)) in turns.iter().zip(supplies).enumerate() {
        for k in 0..supply.min(t.room) {
            tags.push((t.tag(k), i, k));
        }
    }
    tags.sort_by(|a, b| {
        a.0.total_cmp(&b.0)
            .then_with(|| turns[a.1].tenant.cmp(turns[b.1].tenant))
            .then(a.2.cmp(&b.2))
    });
    let mut taken = vec![0; turns.len()];
    for &(_, i, _) in tags.iter().take(limit as usize) {
        taken[i] += 1;
    }
    taken
}

/// Each tenant's fair share of the pool: its weight over the weights of the tenants competing,
/// with every ceiling applied and what a ceiling leaves over shared by the others' weights
/// (water filling). `tenants` are `(weight, max_share)`; an empty input gives an empty output.
pub fn fair_shares(tenants: &[(u32, f64)]) -> Vec<f64> {
    let mut share = vec![0.0; tenants.len()];
    let mut open: Vec<usize> = (0..tenants.len()).collect();
    let mut left = 1.0_f64;
    while !open.is_empty() && left > 1e-12 {
        let weights: f64 = open.iter().map(|&i| f64::from(tenants[i].0.max(1))).sum();
        let capped: Vec<usize> = open
            .iter()
            .copied()
            .filter(|&i| left * f64::from(tenants[i].0.max(1)) / weights >= tenants[i].1)
            .collect();
        if capped.is_empty() {
            for &i in &open {
                share[i] = left * f64::from(tenants[i].0.max(1)) / weights;
            }
            break;
        }
        for &i in &capped {
            share[i] = tenants[i].1;
            left -= tenants[i].1;
        }
        open.retain(|i| !capped.contains(i));
    }
    // Every tenant at its ceiling: the rest stays free (a ceiling binds at every moment).
    share
}

#[cfg(test)]
mod tests;
