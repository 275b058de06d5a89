//! Prometheus metrics, with the names operators grep for from the seeds
//! (`webhook_deliveries_ok_total`, `webhook_deliveries_shed_total`, `webhook_service_seconds`,
//! `webhook_phase_seconds`, `delivery_duration_seconds`) and a `sluice_` family for the rest.
//! Label cardinality is bounded: one label value per endpoint, host, tenant or phase, never per
//! message.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// `{endpoint="ep_…"}`
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabel {
    /// Endpoint id.
    pub endpoint: String,
}

/// `{phase="sign"}`
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    /// sign, http, body, settle.
    pub phase: &'static str,
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
    /// Delivery state.
    pub state: &'static str,
}

/// `{endpoint="…", reason="paused"}`
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HeldLabel {
    /// Endpoint id.
    pub endpoint: String,
    /// paused, breaker_open, disabled.
    pub reason: &'static str,
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

/// Every metric sluice exports, in one registry.
pub struct Metrics {
    registry: Registry,
    /// Delivered (2xx) per endpoint.
    pub deliveries_ok: Family<EndpointLabel, Counter>,
    /// Shed at the lane per endpoint (not attempts).
    pub deliveries_shed: Family<EndpointLabel, Counter>,
    /// Failed attempts per endpoint.
    pub deliveries_failed: Family<EndpointLabel, Counter>,
    /// Held (paused by Retry-After, breaker open, endpoint disabled) per endpoint.
    pub deliveries_held: Family<HeldLabel, Counter>,
    /// Dead-lettered per endpoint.
    pub dead_letters: Family<EndpointLabel, Counter>,
    /// Lease → settle per delivery.
    pub service_seconds: Histogram,
    /// One phase of an attempt.
    pub phase_seconds: Family<PhaseLabel, Histogram>,
    /// Attempt duration per destination host (for the occupancy-share query).
    pub delivery_duration: Family<HostLabel, Histogram>,
    /// Message accepted → delivered.
    pub end_to_end_seconds: Histogram,
    /// Messages accepted by the API.
    pub messages_accepted: Counter,
    /// Attempts in flight now.
    pub in_flight: Gauge,
    /// The global concurrency bound now.
    pub concurrency_limit: Gauge,
    /// Lane size per endpoint.
    pub lane_size: Family<EndpointLabel, Gauge>,
    /// Lane slots held per endpoint.
    pub lane_in_flight: Family<EndpointLabel, Gauge>,
    /// Governor limit per endpoint.
    pub governor_limit: Family<EndpointLabel, FloatGauge>,
    /// Breaker state per endpoint: 0 closed, 1 open, 2 half-open.
    pub breaker_state: Family<EndpointLabel, Gauge>,
    /// Age of the oldest due ready delivery per tenant.
    pub oldest_ready_age: Family<TenantLabel, FloatGauge>,
    /// Deliveries by state.
    pub queue_depth: Family<StateLabel, Gauge>,
    /// The autoscaling signal: dispatcher replicas wanted.
    pub desired_replicas: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every metric registered.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let deliveries_ok = Family::<EndpointLabel, Counter>::default();
        let deliveries_shed = Family::<EndpointLabel, Counter>::default();
        let deliveries_failed = Family::<EndpointLabel, Counter>::default();
        let deliveries_held = Family::<HeldLabel, Counter>::default();
        let dead_letters = Family::<EndpointLabel, Counter>::default();
        let service_seconds = latency_histogram();
        let phase_seconds = Family::<PhaseLabel, Histogram>::new_with_constructor(
            phase_histogram as fn() -> Histogram,
        );
        let delivery_duration = Family::<HostLabel, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let end_to_end_seconds = latency_histogram();
        let messages_accepted = Counter::default();
        let in_flight = Gauge::default();
        let concurrency_limit = Gauge::default();
        let lane_size = Family::<EndpointLabel, Gauge>::default();
        let lane_in_flight = Family::<EndpointLabel, Gauge>::default();
        let governor_limit = Family::<EndpointLabel, FloatGauge>::default();
        let breaker_state = Family::<EndpointLabel, Gauge>::default();
        let oldest_ready_age = Family::<TenantLabel, FloatGauge>::default();
        let queue_depth = Family::<StateLabel, Gauge>::default();
        let desired_replicas = Gauge::default();

        registry.register(
            "webhook_deliveries_ok",
            "Deliveries answered 2xx",
            deliveries_ok.clone(),
        );
        registry.register(
            "webhook_deliveries_shed",
            "Deliveries rejected at the lane (requeued, not attempts)",
            deliveries_shed.clone(),
        );
        registry.register(
            "sluice_deliveries_failed",
            "Attempts that failed",
            deliveries_failed.clone(),
        );
        registry.register(
            "sluice_deliveries_held",
            "Deliveries held without an attempt (paused, breaker open, disabled)",
            deliveries_held.clone(),
        );
        registry.register(
            "sluice_dead_letters",
            "Deliveries dead-lettered",
            dead_letters.clone(),
        );
        registry.register(
            "webhook_service_seconds",
            "Lease-to-settle duration per delivery",
            service_seconds.clone(),
        );
        registry.register(
            "webhook_phase_seconds",
            "Duration of one phase of a delivery attempt",
            phase_seconds.clone(),
        );
        registry.register(
            "delivery_duration_seconds",
            "Attempt duration per destination host",
            delivery_duration.clone(),
        );
        registry.register(
            "sluice_end_to_end_seconds",
            "Message accepted to delivered",
            end_to_end_seconds.clone(),
        );
        registry.register(
            "sluice_messages_accepted",
            "Messages accepted by the API",
            messages_accepted.clone(),
        );
        registry.register("sluice_in_flight", "Attempts in flight", in_flight.clone());
        registry.register(
            "sluice_concurrency_limit",
            "Global bound on in-flight attempts",
            concurrency_limit.clone(),
        );
        registry.register(
            "sluice_lane_size",
            "Lane size per endpoint",
            lane_size.clone(),
        );
        registry.register(
            "sluice_lane_in_flight",
            "Lane slots held per endpoint",
            lane_in_flight.clone(),
        );
        registry.register(
            "sluice_governor_limit",
            "AIMD concurrency limit per endpoint",
            governor_limit.clone(),
        );
        registry.register(
            "sluice_breaker_state",
            "Breaker state per endpoint (0 closed, 1 open, 2 half-open)",
            breaker_state.clone(),
        );
        registry.register(
            "sluice_oldest_ready_age_seconds",
            "Age of the oldest due ready delivery per tenant",
            oldest_ready_age.clone(),
        );
        registry.register(
            "sluice_queue_depth",
            "Deliveries by state",
            queue_depth.clone(),
        );
        registry.register(
            "sluice_desired_replicas",
            "Dispatcher replicas the autoscaling controller wants",
            desired_replicas.clone(),
        );
        Self {
            registry,
            deliveries_ok,
            deliveries_shed,
            deliveries_failed,
            deliveries_held,
            dead_letters,
            service_seconds,
            phase_seconds,
            delivery_duration,
            end_to_end_seconds,
            messages_accepted,
            in_flight,
            concurrency_limit,
            lane_size,
            lane_in_flight,
            governor_limit,
            breaker_state,
            oldest_ready_age,
            queue_depth,
            desired_replicas,
        }
    }

    /// The Prometheus text exposition of everything.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Label for an endpoint.
    pub fn endpoint(id: &str) -> EndpointLabel {
        EndpointLabel {
            endpoint: id.to_owned(),
        }
    }
}
