//! One admission, in order: enabled → paused → breaker → rate → lane → fleet → the tenant's
//! seat → global permit;
//! and the guard that gives back everything it took when the attempt ends, as a limit's permit
//! does.
//!
//! Nothing here is an attempt: a delivery turned away is [`Held`], and the caller requeues it
//! (a shed or a hold never uses a retry, never feeds the error breaker).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

use super::fleet::FleetRate;
use super::fleet::mode::{FleetMode, FleetTransitions};
use super::fleet::{FleetAcquire, FleetLanes, FleetSlot};
use super::lane::{Lane, LaneSlot};
use super::peers::Peers;
use super::rate::Turns;
use super::seats::Seat;

/// How often a delivery waiting for a fleet-wide slot asks again.
const FLEET_RETRY: Duration = Duration::from_millis(20);

/// How long a process without a share of a rate limit (Redis away, or none configured and more
/// dispatchers live than the burst has turns) holds a delivery before asking again.
const NO_SHARE_RETRY: Duration = Duration::from_secs(1);

/// Why a claimed delivery is not attempted now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// The endpoint is disabled.
    Disabled,
    /// A Retry-After pause runs until then (or for a moment, when it has no end).
    Paused {
        /// When the pause ends.
        until: Option<Instant>,
    },
    /// The breaker is open until then.
    BreakerOpen {
        /// When it lets a probe through.
        until: Instant,
    },
    /// The endpoint's rate limit has no turn before then.
    RateLimited {
        /// The exact instant its next turn is free.
        until: Instant,
    },
    /// No lane slot (this process's, or the fleet's) within the acquisition deadline.
    Shed,
    /// The tenant holds all the pool its ceiling allows.
    TenantFull,
    /// Drain began before the attempt.
    Draining,
}

/// What admission asks of the endpoint a delivery is for (the dispatcher's runtime answers).
pub trait Candidate: Send + Sync {
    /// Enabled, not paused, breaker letting it through, as of `now`: `Ok(probe)`, where `probe`
    /// says the breaker let it through as its half-open probe.
    fn check(&self, now: Instant) -> Result<bool, Held>;
    /// Its lane.
    fn lane(&self) -> &Arc<Lane>;
    /// The lane limit in force now (the lane, narrowed by the governor).
    fn limit(&self) -> u32;
    /// This process's fleet-wide admissions to it.
    fn fleet_count(&self) -> &Arc<FleetCount>;
    /// How long, from the start of a Redis outage, attempts admitted to it through Redis may
    /// still run ([`super::fleet::mode::endpoint_hold`]).
    fn outage_hold(&self) -> Duration;
    /// Its id (the fleet's lane key).
    fn id(&self) -> &str;
    /// A delivery to it was shed: count it, and give back the breaker probe it carried.
    fn shed(&self, probe: bool);
    /// Run `f` on its rate limit's buckets in this process; `None` when it has no rate limit.
    fn turns<R>(&self, f: impl FnOnce(&mut Turns) -> R) -> Option<R>;
    /// A delivery to it was held by its rate limit: count it, and give back the breaker probe.
    fn rate_held(&self, probe: bool);
    /// Take a seat of its tenant's under the tenant's ceiling; `None` (the breaker probe given
    /// back) when the tenant holds all its ceiling allows.
    fn seat(&self, probe: bool) -> Option<Seat>;
}

/// This process's fleet-wide admissions to one endpoint: how many it has in flight, and how
/// many it held when the current Redis outage began.
#[derive(Debug, Default)]
pub struct FleetCount {
    in_flight: AtomicU32,
    at_outage: Mutex<Option<(Instant, u32)>>,
}

impl FleetCount {
    /// Attempts in flight under fleet admission.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Count one more if fewer than `limit` are in flight; atomically.
    fn try_reserve(&self, limit: u32) -> bool {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok()
    }

    fn reserve(&self) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
    }

    fn unreserve(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }

    /// How many were in flight when the outage that began at `since` was first seen here.
    fn held_at_outage(&self, since: Instant) -> u32 {
        let mut at = self.at_outage.lock().unwrap_or_else(|p| p.into_inner());
        match *at {
            Some((seen, n)) if seen == since => n,
            _ => {
                let n = self.in_flight();
                *at = Some((since, n));
                n
            }
        }
    }
}

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
    /// Set when drain begins.
    pub draining: &'a AtomicBool,
}

/// An admitted delivery: its lane slot, its fleet-wide slot, its global permit; dropping it
/// gives them all back (the Redis slot by a task of its own: it also expires by itself).
pub struct Admitted<'a> {
    /// The breaker let it through as its half-open probe.
    pub probe: bool,
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
/// over (admitted or about to be shed). Turned away: [`Held`], nothing held.
pub async fn admit<'a, C: Candidate>(
    gate: &Gate<'a>,
    endpoint: &C,
    passed_lane: impl FnOnce(),
) -> Result<Admitted<'a>, Held> {
    let probe = endpoint.check(Instant::now())?;
    if let Err(until) = take_turn(gate, endpoint).await {
        endpoint.rate_held(probe);
        return Err(Held::RateLimited { until });
    }
    // One acquisition deadline for the lane, the fleet's slot and the global permit together.
    let until = Instant::now() + gate.lane_deadline;
    let acquired = endpoint
        .lane()
        .acquire(|| endpoint.limit(), gate.lane_deadline)
        .await;
    passed_lane();
    let Ok(lane) = acquired else {
        endpoint.shed(probe);
        return Err(Held::Shed);
    };
    let fleet = match gate.fleet {
        Some(lanes) => match fleet_slot(gate, lanes, endpoint, until).await {
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
    let Some(seat) = endpoint.seat(probe) else {
        return Err(Held::TenantFull);
    };
    if gate.draining.load(Ordering::Acquire) {
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
        _permit: permit,
        _lane: lane,
        _fleet: fleet,
        _seat: seat,
    })
}

/// Take a turn of the endpoint's rate limit: in Redis with fleet lanes (the local bucket then
/// follows the fleet's, for the claim's cap), this process's share of it while Redis is away,
/// and without Redis, its share among the live dispatchers its heartbeats count (the whole
/// bucket when it is alone). `Err(until)`: the exact instant of its next turn.
///
/// A turn taken is spent even when the lane or the fleet then sheds the delivery: the limit
/// errs towards fewer deliveries, never more.
async fn take_turn<C: Candidate>(gate: &Gate<'_>, endpoint: &C) -> Result<(), Instant> {
    let Some(limit) = endpoint.turns(|t| t.limit()) else {
        return Ok(());
    };
    let Some(lanes) = gate.fleet else {
        let live = gate.peers.live();
        return endpoint
            .turns(|t| {
                if live == 1 {
                    t.take(Instant::now())
                } else {
                    let share = limit.share(live, gate.peers.rank());
                    t.take_share(share, Instant::now(), NO_SHARE_RETRY)
                }
            })
            .unwrap_or(Ok(()));
    };
    match lanes.try_rate(endpoint.id(), &limit).await {
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
/// `Some(None)` admitted under this process's local share, `None` shed.
///
/// The allowance holds across the fleet through Redis outages and recoveries: see [`FleetMode`]
/// for the rule in force at each stage. The endpoint's own lane slot is already held; fleet
/// admissions are counted per endpoint in its [`FleetCount`].
async fn fleet_slot<C: Candidate>(
    gate: &Gate<'_>,
    lanes: &FleetLanes,
    endpoint: &C,
    until: Instant,
) -> Option<Option<FleetSlot>> {
    let count = endpoint.fleet_count();
    // Read from the endpoint's window once per admission, not on every pass.
    let mut outage_hold = None;
    loop {
        let allowance = endpoint.limit();
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
            FleetMode::Redis => redis_slot(lanes, endpoint, allowance)
                .await
                .inspect(|_| count.reserve())
                .map(Some),
            FleetMode::Recovering => {
                if count.try_reserve(share) {
                    let slot = redis_slot(lanes, endpoint, allowance).await;
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

async fn redis_slot<C: Candidate>(
    lanes: &FleetLanes,
    endpoint: &C,
    allowance: u32,
) -> Option<FleetSlot> {
    match lanes.try_acquire(endpoint.id(), allowance).await {
        FleetAcquire::Acquired(slot) => Some(slot),
        // Unavailable flips the fleet to degraded: the next pass applies the outage rule.
        FleetAcquire::Unavailable | FleetAcquire::Full => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::seats::Seats;
    use crate::model::RateLimit;

    /// An endpoint whose checks pass (as a breaker probe, when `probe`), with a rate limit.
    struct Limited {
        lane: Arc<Lane>,
        fleet: Arc<FleetCount>,
        turns: Mutex<Option<Turns>>,
        probe: bool,
        probes_returned: AtomicU32,
        sheds: AtomicU32,
        seats: Arc<Seats>,
    }

    impl Limited {
        fn new(limit: Option<RateLimit>, probe: bool) -> Self {
            Self {
                lane: Lane::new(),
                fleet: Arc::default(),
                turns: Mutex::new(limit.map(|l| Turns::new(l, Instant::now()))),
                probe,
                probes_returned: AtomicU32::new(0),
                sheds: AtomicU32::new(0),
                seats: Arc::default(),
            }
        }
    }

    impl Candidate for Limited {
        fn check(&self, _now: Instant) -> Result<bool, Held> {
            Ok(self.probe)
        }
        fn lane(&self) -> &Arc<Lane> {
            &self.lane
        }
        fn limit(&self) -> u32 {
            4
        }
        fn fleet_count(&self) -> &Arc<FleetCount> {
            &self.fleet
        }
        fn outage_hold(&self) -> Duration {
            Duration::ZERO
        }
        fn id(&self) -> &str {
            "ep_limited"
        }
        fn shed(&self, _probe: bool) {
            self.sheds.fetch_add(1, Ordering::AcqRel);
        }
        fn turns<R>(&self, f: impl FnOnce(&mut Turns) -> R) -> Option<R> {
            self.turns.lock().unwrap().as_mut().map(f)
        }
        fn rate_held(&self, probe: bool) {
            if probe {
                self.probes_returned.fetch_add(1, Ordering::AcqRel);
            }
        }
        fn seat(&self, _probe: bool) -> Option<Seat> {
            self.seats.try_take(u32::MAX)
        }
    }

    /// The rate comes before the lane: a delivery past its limit is held until the exact
    /// instant of its next turn, takes no lane slot and is no shed; one within it is admitted.
    #[tokio::test(start_paused = true)]
    async fn the_rate_holds_before_the_lane_until_the_next_turn() {
        let (permits, draining) = (Semaphore::new(8), AtomicBool::new(false));
        let transitions = Mutex::new(FleetTransitions::default());
        let gate = Gate {
            lane_deadline: Duration::from_millis(500),
            fleet: None,
            transitions: &transitions,
            longest_attempt: Duration::from_secs(15),
            peers: &Peers::alone(),
            permits: &permits,
            draining: &draining,
        };
        let limit = RateLimit::try_new(10.0, 2).unwrap();
        let endpoint = Limited::new(Some(limit), false);
        let start = Instant::now();
        let first = admit(&gate, &endpoint, || {}).await.expect("a turn");
        let second = admit(&gate, &endpoint, || {}).await.expect("a turn");
        let mut passed = false;
        let third = admit(&gate, &endpoint, || passed = true).await;
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
        assert_eq!(endpoint.lane.in_use(), 2);
        assert_eq!(endpoint.sheds.load(Ordering::Acquire), 0);
        drop((first, second));
        tokio::time::advance(Duration::from_millis(100)).await;
        assert!(
            admit(&gate, &endpoint, || {}).await.is_ok(),
            "its turn came"
        );

        // A breaker probe held by the rate is given back, so the breaker can send another.
        let probing = Limited::new(Some(RateLimit::try_new(1.0, 1).unwrap()), true);
        drop(admit(&gate, &probing, || {}).await.expect("a turn"));
        assert!(admit(&gate, &probing, || {}).await.is_err());
        assert_eq!(probing.probes_returned.load(Ordering::Acquire), 1);

        // No limit: nothing to hold.
        let free = Limited::new(None, false);
        let mut admitted = Vec::new();
        for _ in 0..4 {
            admitted.push(admit(&gate, &free, || {}).await.expect("no limit"));
        }
    }
}
