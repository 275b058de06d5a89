//! Prometheus metrics, with the names operators grep for (`webhook_deliveries_ok_total`,
//! `webhook_deliveries_shed_total`, `webhook_service_seconds`, `webhook_phase_seconds{phase}`,
//! `delivery_duration_seconds{host}`) and one `sluice_` family for everything else, plus the
//! standard `process_*` metrics.
//!
//! # Cardinality
//! No label takes one value per message, and none one value per registered endpoint or tenant:
//! - `host` (destination host) on `delivery_duration_seconds`, for the occupancy-share query;
//! - `endpoint` only for the top-N endpoints by occupancy (`--metrics-top-endpoints`, default
//!   20), with everything else in `endpoint="other"` (see [`endpoints`]);
//! - `tenant` only on `sluice_oldest_ready_age_seconds`, for the N tenants whose oldest ready
//!   delivery has waited longest (`--metrics-top-tenants`, default 20);
//! - `source` on `sluice_ingest_messages_total`: one value per `--ingest-from` source;
//! - small fixed sets: `phase`, `state`, `reason`, `listener`, `kind` (an attempt's error kind),
//!   `outcome`.
//!
//! Every counter exists from the start at 0, failure counters included, so `rate()` and
//! `increase()` see the first failure.
//!
//! # Layout
//! - [`endpoints`]: the per-endpoint counters and gauges and the top-N rule.
//! - [`hosts`]: each destination host's attempt time since the start, for the heartbeat.
//! - [`process`]: `process_*` from `/proc/self`.

pub mod endpoints;
pub mod hosts;
pub mod process;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use crate::setting::{Problems, SettingProblem};

pub use endpoints::{Count, EndpointGauges, EndpointSeries};

/// `{phase="sign"}`
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    /// token, sign, connect, tls, http, body, publish, settle.
    pub phase: &'static str,
}

/// The phases of one attempt, and the settle that follows. `connect` (name lookup, TCP, a
/// proxy's tunnel) and `tls` (the handshake) are observed only for attempts that opened a new
/// connection, `token` only for attempts that fetched an OAuth2 token: their counts are how
/// many did, `http` is the request and its answer without them, and `publish` a broker
/// attempt's publish until the broker acknowledges it.
pub const PHASES: [&str; 8] = [
    "token", "sign", "connect", "tls", "http", "body", "publish", "settle",
];

/// `{kind="tls_certificate_unknown"}`
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorKindLabel {
    /// An attempt's error kind (the attempt log's `error_kind`).
    pub kind: &'static str,
}

/// `{host="example.com"}`
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostLabel {
    /// Destination host.
    pub host: String,
}

/// `{tenant="ten_…"}`
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantLabel {
    /// Tenant id.
    pub tenant: String,
}

/// `{state="ready"}`
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    /// A delivery state, or a breaker state.
    pub state: &'static str,
}

/// How often `sluice_queue_depth{state="delivered"}` is counted again (a count over the history).
pub const DELIVERED_RECOUNT: std::time::Duration = std::time::Duration::from_secs(300);

/// The delivery states counted by `sluice_queue_depth`.
pub const QUEUE_STATES: [&str; 4] = ["ready", "leased", "delivered", "dead"];

/// `{reason="paused"}`
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// Why a delivery was held without an attempt.
    pub reason: &'static str,
}

/// Why a delivery is held without an attempt: a Retry-After pause, an open breaker, a
/// disabled endpoint, a store that could not be read, or a tenant holding all its ceiling
/// allows.
pub const HELD_REASONS: [&str; 5] = [
    "paused",
    "breaker_open",
    "disabled",
    "store_unavailable",
    "tenant_ceiling",
];

/// `{source="rabbitmq:orders",outcome="stored"}`
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IngestLabel {
    /// The source, as `--ingest-from` configured it (`rabbitmq:orders`): one per source.
    pub source: String,
    /// `stored`, `duplicate`, `refused` or `retried`.
    pub outcome: &'static str,
}

/// `{listener="api"}`
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabel {
    /// api or operator.
    pub listener: &'static str,
}

/// `{version="0.1.0"}`
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabel {
    version: &'static str,
}

type FloatGauge = Gauge<f64, AtomicU64>;

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
    ])
}

fn phase_histogram() -> Histogram {
    Histogram::new([
        0.00001, 0.0001, 0.001, 0.005, 0.02, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0,
    ])
}

/// How many endpoint and tenant label values the metrics may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsSettings {
    /// Endpoints with series of their own (the busiest by occupancy), 0–1000.
    pub top_endpoints: usize,
    /// Tenants with an oldest-ready-age series (the longest waiting), 0–1000.
    pub top_tenants: usize,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        Self {
            top_endpoints: 20,
            top_tenants: 20,
        }
    }
}

impl MetricsSettings {
    /// Every value out of range: each top-N is 0–1000.
    pub fn problems(&self) -> Vec<SettingProblem> {
        let mut p = Problems::default();
        for (field, n) in [
            ("top_endpoints", self.top_endpoints),
            ("top_tenants", self.top_tenants),
        ] {
            p.check(n <= 1000, field, n, "0–1000");
        }
        p.into_vec()
    }
}

/// The fleet as the dispatchers' heartbeats describe it.
#[derive(Debug)]
pub struct FleetGauges {
    /// Dispatchers with a fresh heartbeat (current replicas).
    pub dispatchers: Gauge,
    /// Attempts in flight across them.
    pub in_flight: Gauge,
    /// Their global concurrency bounds, added up.
    pub concurrency: Gauge,
    /// Offered attempts per second across them.
    pub arrivals_per_s: FloatGauge,
    /// Mean attempt duration across them, weighted by arrivals.
    pub mean_service_s: FloatGauge,
}

/// Each tenant's share of this dispatcher's pool, for the top-N tenants by occupancy; the rest
/// add up in `tenant="other"` (occupancy and in-flight).
#[derive(Debug, Default)]
pub struct TenantGauges {
    /// Its share of the pool's time over about the last minute, 0–1.
    pub occupancy_share: Family<TenantLabel, FloatGauge>,
    /// Its fair share beside the tenants competing now (weights, ceilings applied), 0–1.
    pub fair_share: Family<TenantLabel, FloatGauge>,
    /// Deliveries in flight or waiting at a lane.
    pub in_flight: Family<TenantLabel, Gauge>,
    /// Its weight in force.
    pub weight: Family<TenantLabel, Gauge>,
    /// Its ceiling in force (1: none).
    pub max_share: Family<TenantLabel, FloatGauge>,
}

impl TenantGauges {
    /// Drop every series (before the gauges are set again: a tenant that left the top-N
    /// leaves no stale series behind).
    pub fn clear(&self) {
        self.occupancy_share.clear();
        self.fair_share.clear();
        self.in_flight.clear();
        self.weight.clear();
        self.max_share.clear();
    }
}

/// Every metric sluice exports, in one registry.
pub struct Metrics {
    registry: Registry,
    settings: MetricsSettings,
    /// Per-endpoint counters and gauges (top-N by occupancy, the rest as `other`).
    pub endpoints: Arc<EndpointSeries>,
    /// Held without an attempt, by reason.
    pub deliveries_held: Family<ReasonLabel, Counter>,
    /// Lease → settle per delivery.
    pub service_seconds: Histogram,
    /// One phase of an attempt.
    pub phase_seconds: Family<PhaseLabel, Histogram>,
    /// Attempts that failed without a response, by error kind.
    pub attempt_errors: Family<ErrorKindLabel, Counter>,
    /// Attempt duration per destination host (for the occupancy-share query).
    pub delivery_duration: Family<HostLabel, Histogram>,
    /// The same durations added up per host since the start (not exported: the heartbeat
    /// carries them).
    pub host_time: hosts::HostTime,
    /// Message accepted → delivered.
    pub end_to_end_seconds: Histogram,
    /// One claim: the store call that leases a batch, from request to answer.
    pub claim_seconds: Histogram,
    /// Messages accepted by the API.
    pub messages_accepted: Counter,
    /// Messages taken from producers' queues (`--ingest-from`), by source and outcome.
    pub ingest_messages: Family<IngestLabel, Counter>,
    /// Attempts in flight now.
    pub in_flight: Gauge,
    /// Leases an attempt extended before it started (it would have outlived its lease).
    pub leases_extended: Counter,
    /// The global concurrency bound now.
    pub concurrency_limit: Gauge,
    /// Endpoints this dispatcher knows, by breaker state.
    pub breakers: Family<StateLabel, Gauge>,
    /// Age of the oldest due ready delivery, for the longest-waiting tenants.
    pub oldest_ready_age: Family<TenantLabel, FloatGauge>,
    /// Tenants' shares of this dispatcher's pool.
    pub tenants: TenantGauges,
    /// Deliveries by state.
    pub queue_depth: Family<StateLabel, Gauge>,
    /// When `queue_depth{state="delivered"}` was last counted (see [`Metrics::delivered_due`]).
    delivered_counted: std::sync::Mutex<Option<std::time::Instant>>,
    /// The autoscaling signal: dispatcher replicas wanted.
    pub desired_replicas: Gauge,
    /// The live fleet, from the heartbeats in the store.
    pub fleet: FleetGauges,
    /// Seconds since this dispatcher's heartbeat was last written (0 without a dispatcher).
    pub heartbeat_age_seconds: FloatGauge,
    /// HTTP connections open per listener.
    pub http_connections: Family<ListenerLabel, Gauge>,
    /// HTTP connections refused (over the connection limit) per listener.
    pub http_connections_refused: Family<ListenerLabel, Counter>,
    /// Idle or stalled-head HTTP connections closed to make room for a new one, per listener.
    pub http_connections_evicted: Family<ListenerLabel, Counter>,
    /// Requests whose handler panicked (answered 500).
    pub http_panics: Counter,
    /// Attempt spans the OTLP exporter delivered to the collector.
    pub trace_spans_exported: Counter,
    /// Attempt spans dropped: the export queue was full, or the collector failed or was too
    /// slow to take a batch.
    pub trace_spans_dropped: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every metric registered, at the default cardinality bounds.
    pub fn new() -> Self {
        Self::with_settings(MetricsSettings::default())
    }

    /// A registry with every metric registered, within `settings`' bounds.
    pub fn with_settings(settings: MetricsSettings) -> Self {
        let mut registry = Registry::default();
        let endpoints = Arc::new(EndpointSeries::new(settings.top_endpoints));
        registry.register_collector(Box::new(endpoints.clone()));
        registry.register_collector(Box::new(process::ProcessCollector));
        registry.register(
            "sluice_build",
            "The running build: its version as a label, value 1",
            Info::new(BuildLabel {
                version: env!("CARGO_PKG_VERSION"),
            }),
        );

        let deliveries_held = Family::<ReasonLabel, Counter>::default();
        for reason in HELD_REASONS {
            let _ = deliveries_held.get_or_create(&ReasonLabel { reason });
        }
        let phase_seconds = Family::<PhaseLabel, Histogram>::new_with_constructor(
            phase_histogram as fn() -> Histogram,
        );
        for phase in PHASES {
            let _ = phase_seconds.get_or_create(&PhaseLabel { phase });
        }
        let attempt_errors = Family::<ErrorKindLabel, Counter>::default();
        for kind in crate::delivery::ErrorKind::ALL {
            let _ = attempt_errors.get_or_create(&ErrorKindLabel {
                kind: kind.as_str(),
            });
        }
        let delivery_duration = Family::<HostLabel, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let queue_depth = Family::<StateLabel, Gauge>::default();
        for state in QUEUE_STATES {
            let _ = queue_depth.get_or_create(&StateLabel { state });
        }
        let breakers = Family::<StateLabel, Gauge>::default();
        for state in endpoints::BREAKER_STATES {
            let _ = breakers.get_or_create(&StateLabel { state });
        }
        let http_connections = Family::<ListenerLabel, Gauge>::default();
        let http_connections_refused = Family::<ListenerLabel, Counter>::default();
        let http_connections_evicted = Family::<ListenerLabel, Counter>::default();
        for listener in ["api", "operator"] {
            let label = ListenerLabel { listener };
            let _ = http_connections.get_or_create(&label);
            let _ = http_connections_refused.get_or_create(&label);
            let _ = http_connections_evicted.get_or_create(&label);
        }
        let m = Self {
            settings,
            endpoints,
            deliveries_held,
            service_seconds: latency_histogram(),
            phase_seconds,
            attempt_errors,
            delivery_duration,
            host_time: hosts::HostTime::default(),
            end_to_end_seconds: latency_histogram(),
            // 0.1 ms to 6.5 s, doubling: fine enough to tell a claim's p99 from its p50.
            claim_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 17)),
            messages_accepted: Counter::default(),
            ingest_messages: Family::default(),
            in_flight: Gauge::default(),
            leases_extended: Counter::default(),
            concurrency_limit: Gauge::default(),
            breakers,
            oldest_ready_age: Family::default(),
            tenants: TenantGauges::default(),
            queue_depth,
            delivered_counted: std::sync::Mutex::new(None),
            desired_replicas: Gauge::default(),
            fleet: FleetGauges {
                dispatchers: Gauge::default(),
                in_flight: Gauge::default(),
                concurrency: Gauge::default(),
                arrivals_per_s: FloatGauge::default(),
                mean_service_s: FloatGauge::default(),
            },
            heartbeat_age_seconds: FloatGauge::default(),
            http_connections,
            http_connections_refused,
            http_connections_evicted,
            http_panics: Counter::default(),
            trace_spans_exported: Counter::default(),
            trace_spans_dropped: Counter::default(),
            registry,
        };
        m.register_all()
    }

    fn register_all(mut self) -> Self {
        let r = &mut self.registry;
        r.register(
            "sluice_deliveries_held",
            "Deliveries held without an attempt, by reason (paused, breaker open, disabled, \
             store unavailable)",
            self.deliveries_held.clone(),
        );
        r.register(
            "webhook_service_seconds",
            "Lease-to-settle duration per delivery",
            self.service_seconds.clone(),
        );
        r.register(
            "sluice_claim_duration_seconds",
            "Duration of one claim (the store call that leases a batch)",
            self.claim_seconds.clone(),
        );
        r.register(
            "webhook_phase_seconds",
            "Duration of one phase of a delivery attempt",
            self.phase_seconds.clone(),
        );
        r.register(
            "sluice_attempt_errors",
            "Attempts that failed without a response, by error kind (timeouts, refused, DNS, \
             TLS certificate and handshake failures, OAuth2 token endpoint failures)",
            self.attempt_errors.clone(),
        );
        r.register(
            "delivery_duration_seconds",
            "Attempt duration per destination host",
            self.delivery_duration.clone(),
        );
        r.register(
            "sluice_end_to_end_seconds",
            "Message accepted to delivered",
            self.end_to_end_seconds.clone(),
        );
        r.register(
            "sluice_messages_accepted",
            "Messages accepted by the API",
            self.messages_accepted.clone(),
        );
        r.register(
            "sluice_ingest_messages",
            "Messages taken from producers' queues (--ingest-from), by source and outcome: \
             stored, duplicate (a redelivery), refused (to the broker's dead-letter place) and \
             retried (the store could not take it yet)",
            self.ingest_messages.clone(),
        );
        r.register(
            "sluice_in_flight",
            "Attempts in flight in this process",
            self.in_flight.clone(),
        );
        r.register(
            "sluice_leases_extended",
            "Leases extended before an attempt that would have outlived its lease",
            self.leases_extended.clone(),
        );
        r.register(
            "sluice_concurrency_limit",
            "Bound on in-flight attempts in this process",
            self.concurrency_limit.clone(),
        );
        r.register(
            "sluice_breakers",
            "Endpoints this dispatcher knows, by breaker state",
            self.breakers.clone(),
        );
        r.register(
            "sluice_oldest_ready_age_seconds",
            "Age of the oldest due ready delivery, for the longest-waiting tenants",
            self.oldest_ready_age.clone(),
        );
        let t = &self.tenants;
        r.register(
            "sluice_tenant_occupancy_share",
            "Share of this dispatcher's pool's time a tenant used over about the last minute, \
             0-1 (top-N tenants by it, the rest as other)",
            t.occupancy_share.clone(),
        );
        r.register(
            "sluice_tenant_fair_share",
            "A tenant's fair share of the pool beside the tenants competing now (weights, \
             ceilings applied), 0-1",
            t.fair_share.clone(),
        );
        r.register(
            "sluice_tenant_in_flight",
            "A tenant's deliveries in flight or waiting at a lane in this dispatcher",
            t.in_flight.clone(),
        );
        r.register(
            "sluice_tenant_weight",
            "A tenant's weight in force",
            t.weight.clone(),
        );
        r.register(
            "sluice_tenant_max_share",
            "A tenant's ceiling in force: the share of the pool it may hold while another \
             tenant waits (1: none)",
            t.max_share.clone(),
        );
        r.register(
            "sluice_queue_depth",
            "Deliveries by state",
            self.queue_depth.clone(),
        );
        r.register(
            "sluice_desired_replicas",
            "Dispatcher replicas the autoscaling controller wants",
            self.desired_replicas.clone(),
        );
        r.register(
            "sluice_fleet_dispatchers",
            "Dispatchers with a fresh heartbeat in the store (current replicas)",
            self.fleet.dispatchers.clone(),
        );
        r.register(
            "sluice_fleet_in_flight",
            "Attempts in flight across the fleet's dispatchers",
            self.fleet.in_flight.clone(),
        );
        r.register(
            "sluice_fleet_concurrency_limit",
            "The fleet's dispatchers' bounds on in-flight attempts, added up",
            self.fleet.concurrency.clone(),
        );
        r.register(
            "sluice_fleet_arrivals_per_second",
            "Offered attempts per second across the fleet's dispatchers",
            self.fleet.arrivals_per_s.clone(),
        );
        r.register(
            "sluice_fleet_mean_service_seconds",
            "Mean attempt duration across the fleet's dispatchers",
            self.fleet.mean_service_s.clone(),
        );
        r.register(
            "sluice_heartbeat_age_seconds",
            "Seconds since this dispatcher last wrote its heartbeat (0 without a dispatcher)",
            self.heartbeat_age_seconds.clone(),
        );
        r.register(
            "sluice_http_connections",
            "HTTP connections open per listener",
            self.http_connections.clone(),
        );
        r.register(
            "sluice_http_connections_refused",
            "HTTP connections answered 503 and closed over the connection limit",
            self.http_connections_refused.clone(),
        );
        r.register(
            "sluice_http_connections_evicted",
            "Idle or stalled-head HTTP connections closed to make room for a new one, per listener",
            self.http_connections_evicted.clone(),
        );
        r.register(
            "sluice_http_panics",
            "Requests whose handler panicked, answered 500 and logged",
            self.http_panics.clone(),
        );
        r.register(
            "sluice_trace_spans_exported",
            "Spans the OTLP exporter delivered to the collector (0 with tracing off)",
            self.trace_spans_exported.clone(),
        );
        r.register(
            "sluice_trace_spans_dropped",
            "Spans dropped: the export queue was full, or the collector failed or was too slow",
            self.trace_spans_dropped.clone(),
        );
        self
    }

    /// The cardinality bounds in force.
    pub fn settings(&self) -> MetricsSettings {
        self.settings
    }

    /// Whether the delivered deliveries are to be counted again: until a count succeeds, then
    /// once per [`DELIVERED_RECOUNT`]. The count reads the whole retained history (tens of
    /// millions of rows at a high rate), which every scrape of every process would otherwise
    /// pay; the other states read partial indexes and are counted on every scrape.
    pub fn delivered_due(&self) -> bool {
        let last = self
            .delivered_counted
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        !last.is_some_and(|at| at.elapsed() < DELIVERED_RECOUNT)
    }

    /// Set `queue_depth{state="delivered"}` to a fresh count.
    pub fn delivered_counted(&self, n: u64) {
        self.queue_depth
            .get_or_create(&StateLabel { state: "delivered" })
            .set(n as i64);
        *self
            .delivered_counted
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(std::time::Instant::now());
    }

    /// The OpenMetrics text exposition of everything.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// The Prometheus text exposition (format 0.0.4) of everything, for scrapers that do not
    /// ask for OpenMetrics (`promtool check metrics`, curl).
    pub fn encode_prometheus_text(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        out
    }

    /// Count one event for `endpoint`.
    pub fn count(&self, endpoint: &str, what: Count) {
        self.endpoints.count(endpoint, what);
    }

    /// Count a delivery held without an attempt, by one of [`HELD_REASONS`].
    pub fn held(&self, reason: &'static str) {
        self.deliveries_held
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }
}

#[cfg(test)]
mod settings_tests {
    use super::*;

    #[test]
    fn both_top_ns_are_checked_and_their_edges_accepted() {
        let bad = MetricsSettings {
            top_endpoints: 1001,
            top_tenants: 5000,
        };
        let fields: Vec<_> = bad.problems().into_iter().map(|p| p.field).collect();
        assert_eq!(fields, ["top_endpoints", "top_tenants"]);
        assert_eq!(MetricsSettings::default().problems(), []);
        for n in [0, 1000] {
            let edge = MetricsSettings {
                top_endpoints: n,
                top_tenants: n,
            };
            assert_eq!(edge.problems(), []);
        }
    }
}

#[cfg(test)]
mod delivered_tests {
    use super::*;

    #[test]
    fn delivered_is_counted_until_a_count_lands_then_once_per_recount() {
        let m = Metrics::new();
        // Asked twice before any count landed (the first failed): still due.
        assert!(m.delivered_due());
        assert!(m.delivered_due());
        m.delivered_counted(7);
        assert!(!m.delivered_due());
        assert!(
            m.encode()
                .contains("sluice_queue_depth{state=\"delivered\"} 7")
        );
        *m.delivered_counted.lock().unwrap() =
            Some(std::time::Instant::now() - DELIVERED_RECOUNT - std::time::Duration::from_secs(1));
        assert!(m.delivered_due());
    }
}
