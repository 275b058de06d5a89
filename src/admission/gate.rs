//! One admission, in order: enabled → paused → breaker → rate → lane → fleet → the tenant's
//! seat → global permit;
//! and the guard that gives back everything it took when the attempt ends, as a limit's permit
//! does.
//!
//! Nothing here is an attempt: a delivery turned away is [`Held`], and the caller requeues it
//! (a shed or a hold never uses a retry, never feeds the error breaker).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

use super::endpoint::{EndpointPolicy, EndpointRuntime};
use super::fleet::FleetRate;
use super::fleet::count::FleetCount;
use super::fleet::mode::{FleetMode, FleetTransitions};
use super::fleet::{FleetAcquire, FleetLanes, FleetSlot};
use super::held::Held;
use super::lane::LaneSlot;
use super::peers::Peers;
use super::rate::Turns;
use super::seats::Seat;
use crate::model::RateLimit;
use crate::shutdown::Shutdown;

/// How often a delivery waiting for a fleet-wide slot asks again.
const FLEET_RETRY: Duration = Duration::from_millis(20);

/// How long a process without a share of a rate limit (Redis away, or none configured and more
/// dispatchers live than the burst has turns) holds a delivery before asking again.
const NO_SHARE_RETRY: Duration = Duration::from_secs(1);

/// The dispatcher's gates: what every admission goes through.
pub struct Gate<'a> {
    /// How long a delivery may wait for a lane slot (its own, then the fleet's).
    pub lane_deadline: Duration,
    /// Fleet-wide lanes in Redis, when configured.
    pub fleet: Option<&'a Arc<FleetLanes>>,
    /// When Redis went away and came back, as this process saw it.
    pub transitions: &'a Mutex<FleetTransitions>,
    /// The longest an attempt may run (the largest total deadline): how long an admission
    /// made under one fleet rule may outlive it.
    pub longest_attempt: Duration,
    /// Without Redis: this dispatcher's place among the live dispatchers, which sets its part
    /// of each rate limit.
    pub peers: &'a Peers,
    /// The global bound on attempts in flight.
    pub permits: &'a Semaphore,
    /// The process's shutdown: once it stops claiming (drain has begun), nothing is admitted.
    pub shutdown: &'a Shutdown,
    /// The dispatcher's settings endpoints follow, for the concurrency in force.
    pub policy: EndpointPolicy<'a>,
}

/// An admitted delivery: its lane slot, its fleet-wide slot, its global permit; dropping it
/// gives them all back (the Redis slot by a task of its own: it also expires by itself).
pub struct Admitted<'a, C> {
    /// The breaker let it through as its half-open probe.
    pub probe: bool,
    /// The endpoint's parsed configuration as the delivery entered.
    pub parsed: C,
    _permit: SemaphorePermit<'a>,
    _lane: LaneSlot,
    _fleet: Option<FleetHold>,
    _seat: Seat,
}

/// What a fleet admission holds: one count of the endpoint's, and a Redis slot unless it was
/// admitted under the local share.
struct FleetHold {
    count: Arc<FleetCount>,
    slot: Option<(Arc<FleetLanes>, FleetSlot)>,
}

impl Drop for FleetHold {
    fn drop(&mut self) {
        self.count.unreserve();
        if let Some((lanes, slot)) = self.slot.take() {
            tokio::spawn(async move { lanes.release(slot).await });
        }
    }
}

/// Admit a delivery to `endpoint`, in order; `passed_lane` runs once its wait at the lane is
/// over (admitted or about to be shed); its tenant may hold `tenant_ceiling` seats of the
/// pool. Turned away: [`Held`], nothing held.
pub async fn admit<'a, C: Clone>(
    gate: &Gate<'a>,
    endpoint: &EndpointRuntime<C>,
    tenant_ceiling: u32,
    passed_lane: impl FnOnce(),
) -> Result<Admitted<'a, C>, Held> {
    // Without Redis, this process's share of a rate limit is taken as the delivery enters.
    let local_turn = gate.fleet.is_none().then(|| {
        let live = gate.peers.live();
        let rank = gate.peers.rank();
        move |turns: &mut Turns, now: Instant| {
            if live == 1 {
                turns.take(now)
            } else {
                let share = turns.limit().share(live, rank);
                turns.take_share(share, now, NO_SHARE_RETRY)
            }
        }
    });
    let entered = endpoint.enter(Instant::now(), &gate.policy, local_turn)?;
    let probe = entered.probe;
    if let (Some(limit), Some(lanes)) = (&entered.fleet_rate, gate.fleet)
        && let Err(until) = fleet_turn(lanes, endpoint, limit).await
    {
        endpoint.rate_held(probe);
        return Err(Held::RateLimited { until });
    }
    // One acquisition deadline for the lane, the fleet's slot and the global permit together.
    let until = Instant::now() + gate.lane_deadline;
    // The lane in force as the delivery entered, read again only when it has to wait.
    let first = AtomicU32::new(entered.lane);
    let acquired = endpoint
        .lane()
        .acquire(
            || {
                let lane = match first.swap(0, Ordering::Relaxed) {
                    0 => endpoint.lane_in_force(&gate.policy),
                    lane => lane,
                };
                gate.allowance(lane, endpoint.spin())
            },
            gate.lane_deadline,
        )
        .await;
    passed_lane();
    let Ok(lane) = acquired else {
        endpoint.shed(probe);
        return Err(Held::Shed);
    };
    let fleet = match gate.fleet {
        Some(lanes) => match fleet_slot(gate, lanes, endpoint, entered.lane, until).await {
            Some(slot) => Some(FleetHold {
                count: endpoint.fleet_count().clone(),
                slot: slot.map(|s| (lanes.clone(), s)),
            }),
            None => {
                drop(lane);
                endpoint.shed(probe);
                return Err(Held::Shed);
            }
        },
        None => None,
    };
    let Some(seat) = endpoint.seat(tenant_ceiling, probe) else {
        return Err(Held::TenantFull);
    };
    if gate.shutdown.is_draining() {
        return Err(Held::Draining);
    }
    // The leaser claims no more than the pool has room for, so a permit is normally free at
    // once; when it is not (the pool shrank under auto-sizing), the delivery is shed like one
    // at a full lane rather than waiting on whatever holds the pool.
    let permit = match tokio::time::timeout_at(until, gate.permits.acquire()).await {
        Ok(Ok(permit)) => permit,
        Ok(Err(_)) => return Err(Held::Draining),
        Err(_) => {
            endpoint.shed(probe);
            return Err(Held::Shed);
        }
    };
    Ok(Admitted {
        probe,
        parsed: entered.parsed,
        _permit: permit,
        _lane: lane,
        _fleet: fleet,
        _seat: seat,
    })
}

impl Gate<'_> {
    /// What this process may hold of a lane of `lane`: all of it with Redis (the fleet's
    /// slots are held there), its part of it without.
    fn allowance(&self, lane: u32, spin: u32) -> u32 {
        if self.fleet.is_some() {
            lane
        } else {
            self.peers.part(lane, spin)
        }
    }
}

/// Take a turn of the endpoint's rate limit in Redis, with fleet lanes (the local bucket then
/// follows the fleet's, for the claim's cap), or this process's share of it while Redis is
/// away. `Err(until)`: the exact instant of its next turn.
///
/// A turn taken is spent even when the lane or the fleet then sheds the delivery: the limit
/// errs towards fewer deliveries, never more.
async fn fleet_turn<C: Clone>(
    lanes: &FleetLanes,
    endpoint: &EndpointRuntime<C>,
    limit: &RateLimit,
) -> Result<(), Instant> {
    match lanes.try_rate(endpoint.id(), limit).await {
        FleetRate::Taken { ahead } => {
            endpoint.turns(|t| t.follow(Instant::now(), ahead));
            Ok(())
        }
        FleetRate::Held { wait, ahead } => {
            // Redis measured `wait` before the answer travelled back: from now it is late by
            // that trip, never early.
            let now = Instant::now();
            endpoint.turns(|t| t.follow(now, ahead));
            Err(now + wait)
        }
        FleetRate::Unavailable => {
            let share = limit.share(lanes.live_dispatchers(), lanes.rank());
            endpoint
                .turns(|t| t.take_share(share, Instant::now(), NO_SHARE_RETRY))
                .unwrap_or(Ok(()))
        }
    }
}

/// Take a fleet-wide slot by `until` (the lane's acquisition deadline, counted from before
/// the local lane): `Some(Some(slot))` held in Redis,
/// `Some(None)` admitted under this process's local share, `None` shed. `lane` is the lane in
/// force as the delivery entered; a pass after a wait reads it again.
///
/// The allowance holds across the fleet through Redis outages and recoveries: see [`FleetMode`]
/// for the rule in force at each stage. The endpoint's own lane slot is already held; fleet
/// admissions are counted per endpoint in its [`FleetCount`].
async fn fleet_slot<C: Clone>(
    gate: &Gate<'_>,
    lanes: &FleetLanes,
    endpoint: &EndpointRuntime<C>,
    lane: u32,
    until: Instant,
) -> Option<Option<FleetSlot>> {
    let count = endpoint.fleet_count();
    // Read from the endpoint's window once per admission, not on every pass.
    let mut outage_hold = None;
    let mut first = Some(lane);
    loop {
        let allowance = first
            .take()
            .unwrap_or_else(|| endpoint.lane_in_force(&gate.policy));
        let share = lanes.local_share(allowance);
        let mode = gate
            .transitions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .mode(lanes.is_degraded(), Instant::now(), gate.longest_attempt);
        let admitted = match mode {
            // Counted in flight only once Redis granted the slot: a reservation taken before the
            // call would be read as "held at the outage" by a sibling task that sees the outage
            // first, and this process would then admit one more than it really held.
            FleetMode::Redis => redis_slot(lanes, endpoint.id(), allowance)
                .await
                .inspect(|_| count.reserve())
                .map(Some),
            FleetMode::Recovering => {
                if count.try_reserve(share) {
                    let slot = redis_slot(lanes, endpoint.id(), allowance).await;
                    if slot.is_none() {
                        count.unreserve();
                    }
                    slot.map(Some)
                } else {
                    None
                }
            }
            FleetMode::OutageStart(since) => {
                let held = count.held_at_outage(since);
                // Once this endpoint's own attempts from before the outage must have ended, its
                // local share applies, even while other endpoints' may still be running.
                let hold = *outage_hold.get_or_insert_with(|| endpoint.outage_hold());
                let limit = if since.elapsed() >= hold {
                    share
                } else {
                    share.min(held)
                };
                count.try_reserve(limit).then_some(None)
            }
            FleetMode::Local => count.try_reserve(share).then_some(None),
        };
        if admitted.is_some() {
            return admitted;
        }
        if Instant::now() + FLEET_RETRY >= until {
            return None;
        }
        tokio::time::sleep(FLEET_RETRY).await;
    }
}

async fn redis_slot(lanes: &FleetLanes, endpoint: &str, allowance: u32) -> Option<FleetSlot> {
    match lanes.try_acquire(endpoint, allowance).await {
        FleetAcquire::Acquired(slot) => Some(slot),
        // Unavailable flips the fleet to degraded: the next pass applies the outage rule.
        FleetAcquire::Unavailable | FleetAcquire::Full => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::breaker::BreakerSettings;
    use crate::admission::endpoint::{Configuration, Outcome};
    use crate::admission::governor::{GovernorSettings, Observation};
    use crate::admission::seats::Seats;

    fn runtime(limit: Option<RateLimit>, breaker: BreakerSettings) -> EndpointRuntime<()> {
        let config = Configuration {
            enabled: true,
            lane_override: Some(4),
            rate_limit: limit,
            breaker,
            attempt_total: Duration::from_secs(15),
            failing_since_ms: None,
            parsed: (),
        };
        let governor = GovernorSettings {
            initial_limit: 4.0,
            ..GovernorSettings::default()
        };
        EndpointRuntime::new(
            "ep_limited".into(),
            "ten_1".into(),
            Arc::new(Seats::default()),
            config,
            &governor,
            Instant::now(),
            0,
        )
    }

    /// The rate comes before the lane: a delivery past its limit is held until the exact
    /// instant of its next turn, takes no lane slot and is no shed; one within it is admitted.
    #[tokio::test(start_paused = true)]
    async fn the_rate_holds_before_the_lane_until_the_next_turn() {
        let (permits, shutdown) = (Semaphore::new(8), Shutdown::new());
        let transitions = Mutex::new(FleetTransitions::default());
        let governor = GovernorSettings::default();
        let gate = Gate {
            lane_deadline: Duration::from_millis(500),
            fleet: None,
            transitions: &transitions,
            longest_attempt: Duration::from_secs(15),
            peers: &Peers::alone(),
            permits: &permits,
            shutdown: &shutdown,
            policy: EndpointPolicy {
                lane_default: 8,
                lane_ceiling: 16,
                lane_headroom: 1.5,
                lane_deadline: Duration::from_millis(500),
                governor: &governor,
                auto_disable_after: Duration::from_secs(3600),
            },
        };
        let limit = RateLimit::try_new(10.0, 2).unwrap();
        let limited = runtime(Some(limit), BreakerSettings::default());
        let start = Instant::now();
        let first = admit(&gate, &limited, u32::MAX, || {})
            .await
            .expect("a turn");
        let second = admit(&gate, &limited, u32::MAX, || {})
            .await
            .expect("a turn");
        let mut passed = false;
        let third = admit(&gate, &limited, u32::MAX, || passed = true).await;
        assert_eq!(
            third.err(),
            Some(Held::RateLimited {
                until: start + Duration::from_millis(100)
            })
        );
        assert!(
            !passed,
            "a delivery held by the rate never waits at the lane"
        );
        assert_eq!(limited.lane().in_use(), 2);
        let shed = limited
            .reading(Instant::now(), &gate.policy, true)
            .window
            .unwrap()
            .shed_per_s;
        assert_eq!(shed, 0.0);
        drop((first, second));
        tokio::time::advance(Duration::from_millis(100)).await;
        assert!(
            admit(&gate, &limited, u32::MAX, || {}).await.is_ok(),
            "its turn came"
        );

        // A breaker probe held by the rate is given back, so the breaker can send another.
        let trips_at_once = BreakerSettings {
            error_min_samples: 1,
            error_cooldown: Duration::from_secs(1),
            ..BreakerSettings::default()
        };
        let probing = runtime(Some(RateLimit::try_new(1.0, 1).unwrap()), trips_at_once);
        let failed = Outcome {
            observation: Observation::OtherFailure,
            failed: true,
            kind: crate::stats::AttemptKind::Other,
            disables: false,
        };
        let now = Instant::now();
        probing.conclude(&gate.policy, &failed, Duration::from_millis(5), now, 0);
        assert!(probing.held(now).is_some(), "the breaker is open");
        tokio::time::advance(Duration::from_secs(1)).await;
        // The only turn is gone: the probe the breaker hands out is held by the rate.
        assert_eq!(probing.turns(|t| t.take(Instant::now())), Some(Ok(())));
        assert!(matches!(
            admit(&gate, &probing, u32::MAX, || {}).await.err(),
            Some(Held::RateLimited { .. })
        ));
        tokio::time::advance(Duration::from_secs(1)).await;
        let admitted = admit(&gate, &probing, u32::MAX, || {})
            .await
            .expect("the probe was given back and handed out again");
        assert!(admitted.probe);

        // No limit: nothing to hold.
        let free = runtime(None, BreakerSettings::default());
        let mut admitted = Vec::new();
        for _ in 0..4 {
            admitted.push(
                admit(&gate, &free, u32::MAX, || {})
                    .await
                    .expect("no limit"),
            );
        }
    }
}
