//! The dispatcher's settings: the global concurrency, claims and leases, attempt timeouts and
//! their caps, lanes, and the settings of the parts it runs (shed delays, retries, governor,
//! breakers, egress), each validated by its own `problems`.

use std::time::Duration;

use ipnet::IpNet;

use crate::admission::breaker::BreakerSettings;
use crate::admission::governor::GovernorSettings;
use crate::delivery::AttemptTimeouts;
use crate::destinations::BrokerSettings;
use crate::egress::settings::EgressSettings;
use crate::retry::{RetrySchedule, ShedSettings};
use crate::setting::{Problems, SettingProblem, shown};
use crate::traces::TraceSettings;

/// What a lease keeps past the end of its attempt: time to write the settlement before the
/// reaper may return the delivery.
pub(super) const SETTLE_MARGIN: Duration = Duration::from_secs(5);

/// The global bound on in-flight attempts: fixed, or sized from live load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Concurrency {
    /// A fixed number of in-flight attempts.
    Fixed(u32),
    /// Sized by the Erlang C calculator from live load, within `[min, max]`.
    Auto {
        /// Lower bound.
        min: u32,
        /// Upper bound.
        max: u32,
    },
}

impl Concurrency {
    /// The bound to start with.
    pub fn initial(self) -> u32 {
        match self {
            Concurrency::Fixed(n) => n,
            Concurrency::Auto { min, .. } => min,
        }
    }
    /// The largest bound it may reach.
    pub fn ceiling(self) -> u32 {
        match self {
            Concurrency::Fixed(n) => n,
            Concurrency::Auto { max, .. } => max,
        }
    }
}

/// Everything the dispatcher needs, validated.
#[derive(Debug, Clone)]
pub struct DispatchSettings {
    /// Global bound on in-flight attempts.
    pub concurrency: Concurrency,
    /// Most deliveries one claim may lease.
    pub claim_batch: u32,
    /// Lease duration; always longer than the total attempt deadline plus the lane deadline.
    pub lease_ttl: Duration,
    /// How often the reaper returns expired leases.
    pub reap_interval: Duration,
    /// Consecutive lease expiries (no settle between them: a settle resets the count) after
    /// which a delivery is dead-lettered as a poison message.
    pub max_lease_expiries: u32,
    /// How long an idle dispatcher waits before looking again without a notification.
    pub idle_poll: Duration,
    /// How long in-flight attempts may finish after SIGTERM before they are released.
    pub drain_grace: Duration,
    /// Default attempt timeouts.
    pub timeouts: AttemptTimeouts,
    /// Largest per-endpoint timeouts allowed.
    pub timeout_caps: AttemptTimeouts,
    /// Response bytes kept (and read) per attempt.
    pub max_response_bytes: usize,
    /// Lane size (in-flight slots) of an endpoint not yet measured (fewer than 20 attempts in its
    /// window); measured endpoints get Little's Law × `lane_headroom`, widened until Poisson
    /// bursts rarely wait past `lane_deadline` (an operator's per-endpoint lane overrides both).
    pub lane_size: u32,
    /// Headroom over the measured mean concurrency when lanes are sized by Little's Law, 1–10.
    pub lane_headroom: f64,
    /// How long a delivery may wait for a lane slot before it is shed.
    pub lane_deadline: Duration,
    /// No lane may exceed this share of the global concurrency (0–1].
    pub lane_share: f64,
    /// Shed requeue delay range.
    pub shed: ShedSettings,
    /// Retry schedule.
    pub retry: RetrySchedule,
    /// AIMD governor.
    pub governor: GovernorSettings,
    /// Breakers (latency ceiling default lives here).
    pub breaker: BreakerSettings,
    /// An endpoint failing continuously for this long is disabled.
    pub auto_disable_after: Duration,
    /// How long the previous secret keeps signing after a rotation.
    pub rotation_overlap: Duration,
    /// Which destinations the egress guard lets through despite the deny list.
    pub allow_networks: Vec<IpNet>,
    /// Delivered deliveries (and their attempts and messages) are deleted this long after they
    /// were delivered; ready and dead-lettered ones are kept.
    pub retention: Duration,
    /// How often a dispatcher writes its heartbeat (its load) to the store; a heartbeat older
    /// than three intervals is stale (1s–60s, the same across the fleet).
    pub heartbeat_interval: Duration,
    /// The weight of a tenant without one of its own, 1–1000 (the same across the fleet).
    pub tenant_weight: u32,
    /// The ceiling of a tenant without one of its own: the largest share of the pool it may
    /// hold at any moment, in (0, 1]; 1 is no ceiling.
    pub tenant_max_share: f64,
    /// How deliveries leave the host: extra CAs, an HTTP proxy, OAuth2 token timeouts.
    pub egress: EgressSettings,
    /// OpenTelemetry traces of attempts (off unless a collector is named).
    pub traces: TraceSettings,
    /// Broker connections: how many are held open at once.
    pub brokers: BrokerSettings,
}

impl DispatchSettings {
    /// Heartbeats written within this long are fresh: three intervals.
    pub fn heartbeat_fresh(&self) -> Duration {
        self.heartbeat_interval * 3
    }
}

impl DispatchSettings {
    /// The fairness ceiling on any one lane.
    pub fn lane_ceiling(&self, concurrency: u32) -> u32 {
        ((f64::from(concurrency) * self.lane_share).floor() as u32).max(1)
    }

    /// What an endpoint's state follows at `concurrency`.
    pub fn endpoint_policy(&self, concurrency: u32) -> crate::admission::EndpointPolicy<'_> {
        crate::admission::EndpointPolicy {
            lane_default: self.lane_size,
            lane_ceiling: self.lane_ceiling(concurrency),
            lane_headroom: self.lane_headroom,
            lane_deadline: self.lane_deadline,
            governor: &self.governor,
            auto_disable_after: self.auto_disable_after,
        }
    }

    /// Every value of the dispatcher's own out of range; its parts (`shed`, `retry`,
    /// `governor`, `breaker`) list theirs with their own `problems`.
    ///
    /// The concurrency is 1–100,000 (`auto`: 1 ≤ min ≤ max ≤ 100,000); each attempt timeout
    /// is above zero and at most its cap; the lease outlasts the total deadline plus the lane
    /// deadline plus 5 s; a lane is 1–10,000 slots with 1–10× headroom and a share in (0, 1];
    /// retention is at least 1 h and the heartbeat interval 1 s–60 s.
    pub fn problems(&self) -> Vec<SettingProblem> {
        let mut p = Problems::default();
        match self.concurrency {
            Concurrency::Fixed(n) => p.check(
                (1..=100_000).contains(&n),
                "concurrency",
                n,
                "1–100000 or auto",
            ),
            Concurrency::Auto { min, max } => p.check(
                1 <= min && min <= max && max <= 100_000,
                "concurrency",
                format_args!("auto:{min}-{max}"),
                "auto:MIN-MAX with 1 <= MIN <= MAX <= 100000",
            ),
        }
        let (timeouts, caps) = (self.timeouts, self.timeout_caps);
        for (field, value, cap) in [
            ("timeouts.connect", timeouts.connect, caps.connect),
            ("timeouts.read", timeouts.read, caps.read),
            ("timeouts.total", timeouts.total, caps.total),
        ] {
            p.check(
                !value.is_zero() && value <= cap,
                field,
                shown(value),
                format_args!("above zero and at most {}", shown(cap)),
            );
        }
        let outlast = timeouts.total + self.lane_deadline + SETTLE_MARGIN;
        p.check(
            self.lease_ttl > outlast,
            "lease_ttl",
            shown(self.lease_ttl),
            format_args!(
                "more than the total deadline plus the lane deadline plus 5s ({})",
                shown(outlast)
            ),
        );
        p.check(
            (1..=10_000).contains(&self.lane_size),
            "lane_size",
            self.lane_size,
            "1–10000",
        );
        // `contains` and the comparisons are false for NaN, so NaN is refused too.
        p.check(
            (1.0..=10.0).contains(&self.lane_headroom),
            "lane_headroom",
            self.lane_headroom,
            "1–10",
        );
        p.check(
            self.lane_share > 0.0 && self.lane_share <= 1.0,
            "lane_share",
            self.lane_share,
            "in (0, 1]",
        );
        p.check(
            self.retention >= Duration::from_secs(3600),
            "retention",
            shown(self.retention),
            "at least 1h",
        );
        p.check(
            (Duration::from_secs(1)..=Duration::from_secs(60)).contains(&self.heartbeat_interval),
            "heartbeat_interval",
            shown(self.heartbeat_interval),
            "1s–60s",
        );
        p.check(
            (1..=10_000).contains(&self.brokers.max_connections),
            "broker_max_connections",
            self.brokers.max_connections,
            "1–10000",
        );
        p.check(
            crate::fairness::weight_problem(self.tenant_weight).is_none(),
            "tenant_weight",
            self.tenant_weight,
            "1–1000",
        );
        p.check(
            crate::fairness::max_share_problem(self.tenant_max_share).is_none(),
            "tenant_max_share",
            self.tenant_max_share,
            "in (0, 1]",
        );
        p.into_vec()
    }
}

impl Default for DispatchSettings {
    fn default() -> Self {
        Self {
            concurrency: Concurrency::Fixed(512),
            claim_batch: 256,
            lease_ttl: Duration::from_secs(60),
            reap_interval: Duration::from_secs(5),
            max_lease_expiries: 5,
            idle_poll: Duration::from_secs(1),
            drain_grace: Duration::from_secs(20),
            timeouts: AttemptTimeouts {
                connect: Duration::from_secs(3),
                read: Duration::from_secs(10),
                total: Duration::from_secs(15),
            },
            timeout_caps: AttemptTimeouts {
                connect: Duration::from_secs(10),
                read: Duration::from_secs(30),
                total: Duration::from_secs(45),
            },
            max_response_bytes: 64 * 1024,
            lane_size: 8,
            lane_headroom: 1.5,
            lane_deadline: Duration::from_millis(500),
            lane_share: 0.25,
            shed: ShedSettings::default(),
            retry: RetrySchedule::default(),
            governor: GovernorSettings::default(),
            breaker: BreakerSettings::default(),
            auto_disable_after: Duration::from_secs(5 * 24 * 3600),
            rotation_overlap: Duration::from_secs(24 * 3600),
            allow_networks: Vec::new(),
            retention: Duration::from_secs(30 * 24 * 3600),
            heartbeat_interval: Duration::from_secs(5),
            tenant_weight: 1,
            tenant_max_share: 1.0,
            egress: EgressSettings::default(),
            traces: TraceSettings::default(),
            brokers: BrokerSettings::default(),
        }
    }
}

/// Parse `512`, `auto` (16–4096) or `auto:64-2048`; the range is checked by
/// [`DispatchSettings::problems`].
pub fn parse_concurrency(text: &str) -> Result<Concurrency, String> {
    let text = text.trim();
    if let Some(rest) = text.strip_prefix("auto") {
        let (min, max) = match rest.strip_prefix(':') {
            None if rest.is_empty() => (16, 4096),
            Some(range) => {
                let (a, b) = range
                    .split_once('-')
                    .ok_or_else(|| format!("{text:?}: expected auto:MIN-MAX"))?;
                (
                    a.parse().map_err(|_| format!("{text:?}: bad minimum"))?,
                    b.parse().map_err(|_| format!("{text:?}: bad maximum"))?,
                )
            }
            None => return Err(format!("{text:?}: expected auto or auto:MIN-MAX")),
        };
        return Ok(Concurrency::Auto { min, max });
    }
    text.parse::<u32>()
        .map(Concurrency::Fixed)
        .map_err(|_| format!("{text:?} is not a number, auto or auto:MIN-MAX"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatch_settings_list_every_problem_and_accept_their_edges() {
        assert_eq!(DispatchSettings::default().problems(), []);
        let bad = DispatchSettings {
            concurrency: Concurrency::Fixed(0),
            timeouts: AttemptTimeouts {
                connect: Duration::ZERO,
                read: Duration::from_secs(31),
                total: Duration::from_secs(15),
            },
            lane_size: 0,
            lane_headroom: f64::NAN,
            lane_share: 1.5,
            retention: Duration::from_secs(3599),
            heartbeat_interval: Duration::from_millis(999),
            ..DispatchSettings::default()
        };
        let fields: Vec<_> = bad.problems().into_iter().map(|p| p.field).collect();
        let expected = [
            "concurrency",
            "timeouts.connect",
            "timeouts.read",
            "lane_size",
            "lane_headroom",
            "lane_share",
            "retention",
            "heartbeat_interval",
        ];
        assert_eq!(fields, expected);
        let caps = DispatchSettings::default().timeout_caps;
        let edges = DispatchSettings {
            concurrency: Concurrency::Auto {
                min: 1,
                max: 100_000,
            },
            timeouts: caps,
            // Just over the total cap plus the lane deadline plus 5 s.
            lease_ttl: caps.total
                + Duration::from_millis(500)
                + Duration::from_secs(5)
                + Duration::from_nanos(1),
            lane_size: 10_000,
            lane_headroom: 10.0,
            lane_share: 1.0,
            retention: Duration::from_secs(3600),
            heartbeat_interval: Duration::from_secs(60),
            ..DispatchSettings::default()
        };
        assert_eq!(edges.problems(), []);
        let low = DispatchSettings {
            concurrency: Concurrency::Fixed(1),
            lane_size: 1,
            lane_headroom: 1.0,
            heartbeat_interval: Duration::from_secs(1),
            ..DispatchSettings::default()
        };
        assert_eq!(low.problems(), []);
        let lease = DispatchSettings {
            lease_ttl: Duration::from_millis(20_500),
            ..DispatchSettings::default()
        };
        assert_eq!(
            lease.problems()[0].field,
            "lease_ttl",
            "equal is not enough"
        );
    }
}
