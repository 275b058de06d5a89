//! Settings for `sluice serve`: from flags, `SLUICE_*` environment variables and an optional
//! TOML file, validated once at start-up with every bad value reported together.
//!
//! Precedence: flag or environment variable, then the TOML file, then the default.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;

use crate::admission::breaker::BreakerSettings;
use crate::admission::governor::GovernorSettings;
use crate::metrics::MetricsSettings;
use crate::retry::{RetrySchedule, ShedSettings};
use crate::server::listener::ListenerSettings;
use problem::{Problems, shown};

pub mod file;
pub mod problem;

pub use problem::SettingProblem;

/// Which parts of sluice this process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// API and dispatcher in one process (the default).
    All,
    /// Only the HTTP API.
    Api,
    /// Only the dispatcher (claims and delivers).
    Dispatcher,
}

impl Role {
    /// Does this role run the API?
    pub fn runs_api(self) -> bool {
        matches!(self, Role::All | Role::Api)
    }
    /// Does this role run the dispatcher?
    pub fn runs_dispatcher(self) -> bool {
        matches!(self, Role::All | Role::Dispatcher)
    }
    /// The role as `--role` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Role::All => "all",
            Role::Api => "api",
            Role::Dispatcher => "dispatcher",
        }
    }
}

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

/// Timeouts of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptTimeouts {
    /// TCP (and TLS) connect.
    pub connect: Duration,
    /// Longest silence while reading the response.
    pub read: Duration,
    /// The whole attempt, from connect to the last byte read.
    pub total: Duration,
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
    /// hold while another tenant waits, in (0, 1]; 1 is no ceiling.
    pub tenant_max_share: f64,
    /// How deliveries leave the host: extra CAs, an HTTP proxy, OAuth2 token timeouts.
    pub egress: crate::egress::settings::EgressSettings,
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
        let outlast = timeouts.total + self.lane_deadline + Duration::from_secs(5);
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
            egress: crate::egress::settings::EgressSettings::default(),
        }
    }
}

/// The whole validated configuration of `sluice serve`.
#[derive(Debug, Clone)]
pub struct Config {
    /// API listen address (for `--role dispatcher`: where the operator routes are served).
    pub listen: SocketAddr,
    /// A separate listener for `/metrics`, `/healthz` and `/readyz`; when set, `/metrics` is
    /// not served on the API listener.
    pub operator_listen: Option<SocketAddr>,
    /// Header, body and idle timeouts and the connection limit of the HTTP listeners.
    pub http: ListenerSettings,
    /// Where the embedded database lives.
    pub data_dir: PathBuf,
    /// PostgreSQL (or `sqlite:PATH`) instead of the embedded default.
    pub database_url: Option<String>,
    /// Redis for fleet-wide lanes.
    pub redis_url: Option<String>,
    /// What this process runs.
    pub role: Role,
    /// Operator token from the environment (instead of a generated one).
    pub admin_token: Option<String>,
    /// Largest accepted message payload, bytes.
    pub max_payload_bytes: usize,
    /// SQLite `synchronous = FULL` (default) or NORMAL.
    pub sqlite_synchronous_full: bool,
    /// Log as JSON lines.
    pub log_json: bool,
    /// The dispatcher's settings.
    pub dispatch: DispatchSettings,
    /// The console's settings (`/console/`).
    pub console: ConsoleSettings,
    /// Longest any one store operation may take (100ms–60s): past it a request answers 503,
    /// `/readyz` fails and dispatcher loops back off; PostgreSQL's statement timeout.
    pub store_deadline: Duration,
    /// How many endpoints and tenants the metrics may name.
    pub metrics: MetricsSettings,
}

impl Config {
    /// Every value out of range anywhere in the configuration, each named by the flag that
    /// sets it (`lease-ttl: 10s must be …`). The rules are the settings types' own
    /// (`problems()` on each); this only collects them and names them.
    pub fn problems(&self) -> Vec<String> {
        let d = &self.dispatch;
        let mut all = Vec::new();
        let mut name = |problems: Vec<SettingProblem>, flag: &dyn Fn(&str) -> String| {
            all.extend(problems.iter().map(|p| p.named(&flag(p.field))));
        };
        name(self.own_problems(), &flag);
        name(d.problems(), &|field| match field {
            "timeouts.connect" => "connect-timeout".into(),
            "timeouts.read" => "read-timeout".into(),
            "timeouts.total" => "total-timeout".into(),
            other => flag(other),
        });
        name(d.shed.problems(), &|field| format!("shed-{}", flag(field)));
        name(d.retry.problems(), &|field| match field {
            "delays" => "retry-schedule".into(),
            other => format!("retry {other}"),
        });
        name(d.breaker.problems(), &|field| match field {
            "latency_ceiling" => "latency-ceiling".into(),
            other => format!("breaker {other}"),
        });
        // No flag sets the governor: its defaults are checked all the same.
        name(d.governor.problems(), &|field| format!("governor {field}"));
        name(self.http.problems(), &|field| match field {
            "header_read_timeout" => "http-header-timeout".into(),
            "body_read_timeout" => "http-body-timeout".into(),
            other => format!("http-{}", flag(other)),
        });
        name(self.metrics.problems(), &|field| {
            format!("metrics-{}", flag(field))
        });
        name(self.console.problems(), &|field| {
            format!("console-{}", flag(field))
        });
        name(d.egress.problems(), &|field| {
            format!("egress-{}", flag(field))
        });
        all
    }

    /// The problems of the settings kept on `Config` itself: the store deadline is
    /// 100 ms–60 s, a payload 1 byte–16 MiB, an admin token at least 16 characters, and
    /// split roles need PostgreSQL.
    fn own_problems(&self) -> Vec<SettingProblem> {
        let mut p = Problems::default();
        p.check(
            (Duration::from_millis(100)..=Duration::from_secs(60)).contains(&self.store_deadline),
            "store_deadline",
            shown(self.store_deadline),
            "100ms–60s",
        );
        p.check(
            (1..=16 * 1024 * 1024).contains(&self.max_payload_bytes),
            "max_payload_bytes",
            self.max_payload_bytes,
            "1–16777216",
        );
        if let Some(token) = &self.admin_token {
            let length = token.len();
            p.check(
                length >= 16,
                "admin_token",
                format_args!("a {length}-character token"),
                "at least 16 characters long",
            );
        }
        p.check(
            self.role == Role::All || self.database_url.as_deref().is_some_and(is_postgres),
            "role",
            self.role.name(),
            "all unless --database-url is PostgreSQL: api and dispatcher processes share one database",
        );
        p.into_vec()
    }
}

/// The flag that sets a settings field: `lane_share` is `lane-share`.
fn flag(field: &str) -> String {
    field.replace('_', "-")
}

/// Is this a PostgreSQL URL (rather than `sqlite:`)?
fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// Default `--store-deadline`: well above a healthy commit (milliseconds, a checkpoint stall
/// included) and well below the 10–30 s producers' clients and load balancers give up after.
pub const DEFAULT_STORE_DEADLINE: Duration = Duration::from_secs(5);

/// The raw settings: every field optional, from a TOML file or from flags/environment. The
/// file's keys are the flags' names (`lane-size`); the snake_case spelling (`lane_size`) that
/// earlier files used is read too.
#[derive(Debug, Clone, Default, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RawSettings {
    /// API listen address [default: 127.0.0.1:8080]
    #[arg(long, env = "SLUICE_LISTEN")]
    pub listen: Option<String>,
    /// Serve /metrics, /healthz and /readyz here too, and /metrics no longer on --listen
    #[arg(long, env = "SLUICE_OPERATOR_LISTEN")]
    #[serde(alias = "operator_listen")]
    pub operator_listen: Option<String>,
    /// Longest wait for a request's headers, 100ms–5m [default: 10s]
    #[arg(long, env = "SLUICE_HTTP_HEADER_TIMEOUT")]
    #[serde(alias = "http_header_timeout")]
    pub http_header_timeout: Option<String>,
    /// Longest wait for a request's body after its headers, 100ms–10m [default: 30s]
    #[arg(long, env = "SLUICE_HTTP_BODY_TIMEOUT")]
    #[serde(alias = "http_body_timeout")]
    pub http_body_timeout: Option<String>,
    /// Close keep-alive connections idle (or not reading their response) this long, 100ms–1h [default: 60s]
    #[arg(long, env = "SLUICE_HTTP_IDLE_TIMEOUT")]
    #[serde(alias = "http_idle_timeout")]
    pub http_idle_timeout: Option<String>,
    /// Most connections the API serves at once; at the limit the idle longest is closed for a new one, and only busy ones mean a 503, 1–1000000 [default: 1024]
    #[arg(long, env = "SLUICE_HTTP_MAX_CONNECTIONS")]
    #[serde(alias = "http_max_connections")]
    pub http_max_connections: Option<u32>,
    /// Most connections one client address may hold; at the limit its idle ones make room, 1–1000000 [default: half of --http-max-connections]
    #[arg(long, env = "SLUICE_HTTP_MAX_CONNECTIONS_PER_PEER")]
    #[serde(alias = "http_max_connections_per_peer")]
    pub http_max_connections_per_peer: Option<u32>,
    /// Directory of the embedded database [default: ./sluice-data]
    #[arg(long, env = "SLUICE_DATA_DIR")]
    #[serde(alias = "data_dir")]
    pub data_dir: Option<PathBuf>,
    /// postgres://… for a fleet on PostgreSQL (default: embedded SQLite)
    #[arg(long, env = "SLUICE_DATABASE_URL")]
    #[serde(alias = "database_url")]
    pub database_url: Option<String>,
    /// redis://… for fleet-wide lanes
    #[arg(long, env = "SLUICE_REDIS_URL")]
    #[serde(alias = "redis_url")]
    pub redis_url: Option<String>,
    /// all | api | dispatcher [default: all]
    #[arg(long, env = "SLUICE_ROLE")]
    pub role: Option<Role>,
    /// Global bound on in-flight attempts, or `auto` / `auto:MIN-MAX` [default: 512]
    #[arg(long, env = "SLUICE_CONCURRENCY")]
    pub concurrency: Option<String>,
    /// A network (CIDR) the SSRF guard lets through; repeatable or comma-separated
    #[arg(
        long = "allow-network",
        env = "SLUICE_ALLOW_NETWORK",
        value_delimiter = ','
    )]
    #[serde(default)]
    #[serde(alias = "allow_network")]
    pub allow_network: Vec<String>,
    /// Connect timeout per attempt, e.g. 3s [default: 3s]
    #[arg(long, env = "SLUICE_CONNECT_TIMEOUT")]
    #[serde(alias = "connect_timeout")]
    pub connect_timeout: Option<String>,
    /// Read timeout per attempt [default: 10s]
    #[arg(long, env = "SLUICE_READ_TIMEOUT")]
    #[serde(alias = "read_timeout")]
    pub read_timeout: Option<String>,
    /// Total deadline per attempt [default: 15s]
    #[arg(long, env = "SLUICE_TOTAL_TIMEOUT")]
    #[serde(alias = "total_timeout")]
    pub total_timeout: Option<String>,
    /// Lease duration; must exceed the total deadline plus the lane deadline [default: 60s]
    #[arg(long, env = "SLUICE_LEASE_TTL")]
    #[serde(alias = "lease_ttl")]
    pub lease_ttl: Option<String>,
    /// Lane size of an endpoint before it is measured; measured ones are sized by Little's Law
    /// [default: 8]
    #[arg(long, env = "SLUICE_LANE_SIZE")]
    #[serde(alias = "lane_size")]
    pub lane_size: Option<u32>,
    /// Headroom over the measured mean concurrency (arrivals × mean service time) when lanes
    /// are sized by Little's Law, 1–10 [default: 1.5]
    #[arg(long, env = "SLUICE_LANE_HEADROOM")]
    #[serde(alias = "lane_headroom")]
    pub lane_headroom: Option<f64>,
    /// Lane acquisition deadline before shedding [default: 500ms]
    #[arg(long, env = "SLUICE_LANE_DEADLINE")]
    #[serde(alias = "lane_deadline")]
    pub lane_deadline: Option<String>,
    /// Largest share of the concurrency any one lane may hold, 0–1 [default: 0.25]
    #[arg(long, env = "SLUICE_LANE_SHARE")]
    #[serde(alias = "lane_share")]
    pub lane_share: Option<f64>,
    /// Shortest shed requeue delay [default: 5s]
    #[arg(long, env = "SLUICE_SHED_MIN_DELAY")]
    #[serde(alias = "shed_min_delay")]
    pub shed_min_delay: Option<String>,
    /// Longest shed requeue delay [default: 20s]
    #[arg(long, env = "SLUICE_SHED_MAX_DELAY")]
    #[serde(alias = "shed_max_delay")]
    pub shed_max_delay: Option<String>,
    /// Default latency breaker ceiling (p95) [default: 15s]
    #[arg(long, env = "SLUICE_LATENCY_CEILING")]
    #[serde(alias = "latency_ceiling")]
    pub latency_ceiling: Option<String>,
    /// Disable an endpoint after failing continuously for this long [default: 5d]
    #[arg(long, env = "SLUICE_AUTO_DISABLE_AFTER")]
    #[serde(alias = "auto_disable_after")]
    pub auto_disable_after: Option<String>,
    /// How long a rotated-out secret keeps signing [default: 24h]
    #[arg(long, env = "SLUICE_ROTATION_OVERLAP")]
    #[serde(alias = "rotation_overlap")]
    pub rotation_overlap: Option<String>,
    /// Grace period for in-flight attempts on SIGTERM [default: 20s]
    #[arg(long, env = "SLUICE_DRAIN_GRACE")]
    #[serde(alias = "drain_grace")]
    pub drain_grace: Option<String>,
    /// Keep delivered messages this long, then delete them (at least 1h) [default: 30d]
    #[arg(long, env = "SLUICE_RETENTION")]
    pub retention: Option<String>,
    /// Largest message payload in bytes [default: 262144]
    #[arg(long, env = "SLUICE_MAX_PAYLOAD_BYTES")]
    #[serde(alias = "max_payload_bytes")]
    pub max_payload_bytes: Option<usize>,
    /// Retry delays after the first attempt, comma-separated [default: 5s,5m,30m,2h,5h,10h,10h]
    #[arg(long, env = "SLUICE_RETRY_SCHEDULE")]
    #[serde(alias = "retry_schedule")]
    pub retry_schedule: Option<String>,
    /// SQLite durability: full (fsync every commit) or normal [default: full]
    #[arg(long, env = "SLUICE_SQLITE_SYNCHRONOUS")]
    #[serde(alias = "sqlite_synchronous")]
    pub sqlite_synchronous: Option<String>,
    /// Log format: text or json [default: text]
    #[arg(long, env = "SLUICE_LOG_FORMAT")]
    #[serde(alias = "log_format")]
    pub log_format: Option<String>,
    /// Bound on each database operation before a request answers 503, 100ms–60s [default: 5s]
    #[arg(long, env = "SLUICE_STORE_DEADLINE")]
    #[serde(alias = "store_deadline")]
    pub store_deadline: Option<String>,
    /// Endpoints with metric series of their own (the busiest by occupancy; the rest add up
    /// in endpoint="other"), 0–1000 [default: 20]
    #[arg(long, env = "SLUICE_METRICS_TOP_ENDPOINTS")]
    #[serde(alias = "metrics_top_endpoints")]
    pub metrics_top_endpoints: Option<u32>,
    /// Tenants with an oldest-ready-age series (the longest waiting), 0–1000 [default: 20]
    #[arg(long, env = "SLUICE_METRICS_TOP_TENANTS")]
    #[serde(alias = "metrics_top_tenants")]
    pub metrics_top_tenants: Option<u32>,
    /// How often a dispatcher writes its heartbeat (load) to the store; a heartbeat older
    /// than three intervals is stale. Keep it the same across the fleet, 1s–60s [default: 5s]
    #[arg(long, env = "SLUICE_HEARTBEAT_INTERVAL")]
    #[serde(alias = "heartbeat_interval")]
    pub heartbeat_interval: Option<String>,
    /// Weight of a tenant without one of its own: tenants competing for the pool share it in
    /// proportion to their weights, 1–1000 [default: 1]
    #[arg(long, env = "SLUICE_TENANT_WEIGHT")]
    #[serde(alias = "tenant_weight")]
    pub tenant_weight: Option<u32>,
    /// Largest share of the pool a tenant without a ceiling of its own may hold while another
    /// tenant waits, in (0, 1]; 1 is no ceiling [default: 1]
    #[arg(long, env = "SLUICE_TENANT_MAX_SHARE")]
    #[serde(alias = "tenant_max_share")]
    pub tenant_max_share: Option<f64>,
    /// Operator token (otherwise one is generated on first start and printed once)
    #[arg(
        long = "admin-token",
        env = "SLUICE_ADMIN_TOKEN",
        hide_env_values = true
    )]
    #[serde(skip)]
    pub admin_token: Option<String>,
    /// An `admin-token` key in the file, refused with a message saying where the token goes.
    #[arg(skip)]
    #[serde(
        default,
        rename = "admin-token",
        alias = "admin_token",
        deserialize_with = "file::refuse_admin_token"
    )]
    pub admin_token_in_file: (),
    /// The console (`/console/`); a `[console]` table in the TOML file.
    #[command(flatten)]
    #[serde(default)]
    pub console: RawConsoleSettings,
    /// How deliveries leave the host (CAs, proxy, token timeouts); an `[egress]` table.
    #[command(flatten)]
    #[serde(default)]
    pub egress: crate::egress::settings::RawEgressSettings,
}

impl RawSettings {
    /// Fill every unset field of `self` from `file`.
    pub fn or(mut self, file: RawSettings) -> RawSettings {
        macro_rules! fill {
            ($($f:ident),*) => { $( if self.$f.is_none() { self.$f = file.$f; } )* };
        }
        fill!(
            listen,
            operator_listen,
            http_header_timeout,
            http_body_timeout,
            http_idle_timeout,
            http_max_connections,
            http_max_connections_per_peer,
            data_dir,
            database_url,
            redis_url,
            role,
            concurrency,
            connect_timeout,
            read_timeout,
            total_timeout,
            lease_ttl,
            lane_size,
            lane_deadline,
            lane_share,
            lane_headroom,
            shed_min_delay,
            shed_max_delay,
            latency_ceiling,
            auto_disable_after,
            rotation_overlap,
            drain_grace,
            retention,
            max_payload_bytes,
            retry_schedule,
            sqlite_synchronous,
            log_format,
            store_deadline,
            metrics_top_endpoints,
            metrics_top_tenants,
            heartbeat_interval,
            tenant_weight,
            tenant_max_share
        );
        if self.allow_network.is_empty() {
            self.allow_network = file.allow_network;
        }
        self.console = self.console.or(file.console);
        self.egress = self.egress.or(file.egress);
        self
    }

    /// Read a TOML settings file (see [`file`]).
    pub fn from_toml_file(path: &std::path::Path) -> Result<RawSettings, ConfigError> {
        file::read(path)
    }

    /// Validate everything, reporting every bad value at once: parse every text value (a
    /// value that does not parse is reported and its default kept), fill the settings, then
    /// collect what each settings type finds out of range ([`Config::problems`]).
    pub fn validate(self) -> Result<Config, ConfigError> {
        let mut errors = Vec::new();
        let mut d = DispatchSettings::default();
        let mut http = ListenerSettings::default();
        let mut store_deadline = DEFAULT_STORE_DEADLINE;
        for (name, text, into) in [
            (
                "connect-timeout",
                &self.connect_timeout,
                &mut d.timeouts.connect,
            ),
            ("read-timeout", &self.read_timeout, &mut d.timeouts.read),
            ("total-timeout", &self.total_timeout, &mut d.timeouts.total),
            ("lease-ttl", &self.lease_ttl, &mut d.lease_ttl),
            ("lane-deadline", &self.lane_deadline, &mut d.lane_deadline),
            (
                "shed-min-delay",
                &self.shed_min_delay,
                &mut d.shed.min_delay,
            ),
            (
                "shed-max-delay",
                &self.shed_max_delay,
                &mut d.shed.max_delay,
            ),
            (
                "latency-ceiling",
                &self.latency_ceiling,
                &mut d.breaker.latency_ceiling,
            ),
            (
                "auto-disable-after",
                &self.auto_disable_after,
                &mut d.auto_disable_after,
            ),
            (
                "rotation-overlap",
                &self.rotation_overlap,
                &mut d.rotation_overlap,
            ),
            ("drain-grace", &self.drain_grace, &mut d.drain_grace),
            ("retention", &self.retention, &mut d.retention),
            (
                "heartbeat-interval",
                &self.heartbeat_interval,
                &mut d.heartbeat_interval,
            ),
            (
                "http-header-timeout",
                &self.http_header_timeout,
                &mut http.header_read_timeout,
            ),
            (
                "http-body-timeout",
                &self.http_body_timeout,
                &mut http.body_read_timeout,
            ),
            (
                "http-idle-timeout",
                &self.http_idle_timeout,
                &mut http.idle_timeout,
            ),
            ("store-deadline", &self.store_deadline, &mut store_deadline),
        ] {
            match text.as_deref().map(parse_duration) {
                None => {}
                Some(Ok(duration)) => *into = duration,
                Some(Err(e)) => errors.push(format!("{name}: {e}")),
            }
        }
        if let Some(text) = &self.retry_schedule {
            match text.split(',').map(parse_duration).collect() {
                Ok(delays) => d.retry.delays = delays,
                Err(e) => errors.push(format!("retry-schedule: {e}")),
            }
        }
        if let Some(text) = &self.concurrency {
            match parse_concurrency(text) {
                Ok(c) => d.concurrency = c,
                Err(e) => errors.push(format!("concurrency: {e}")),
            }
        }
        d.lane_size = self.lane_size.unwrap_or(d.lane_size);
        d.lane_headroom = self.lane_headroom.unwrap_or(d.lane_headroom);
        d.lane_share = self.lane_share.unwrap_or(d.lane_share);
        d.tenant_weight = self.tenant_weight.unwrap_or(d.tenant_weight);
        d.tenant_max_share = self.tenant_max_share.unwrap_or(d.tenant_max_share);
        http.max_connections = self.http_max_connections.unwrap_or(http.max_connections);
        http.max_connections_per_peer = self
            .http_max_connections_per_peer
            .unwrap_or((http.max_connections / 2).max(1));
        let mut metrics = MetricsSettings::default();
        let count = |n: u32| usize::try_from(n).unwrap_or(usize::MAX);
        metrics.top_endpoints = self
            .metrics_top_endpoints
            .map_or(metrics.top_endpoints, count);
        metrics.top_tenants = self.metrics_top_tenants.map_or(metrics.top_tenants, count);
        for net in &self.allow_network {
            match net.trim().parse::<IpNet>() {
                Ok(n) => d.allow_networks.push(n),
                Err(_) => match net.trim().parse::<std::net::IpAddr>() {
                    Ok(ip) => d.allow_networks.push(IpNet::from(ip)),
                    Err(_) => errors.push(format!("allow-network: {net:?} is not a CIDR network")),
                },
            }
        }
        let default_listen = SocketAddr::from(([127, 0, 0, 1], 8080));
        let listen = match self.listen.as_deref().map(str::parse) {
            None => default_listen,
            Some(Ok(a)) => a,
            Some(Err(_)) => {
                errors.push(format!(
                    "listen: {:?} is not an address like 127.0.0.1:8080",
                    self.listen.clone().unwrap_or_default()
                ));
                default_listen
            }
        };
        let operator_listen = match self.operator_listen.as_deref().map(str::parse) {
            None => None,
            Some(Ok(a)) => Some(a),
            Some(Err(_)) => {
                errors.push(format!(
                    "operator-listen: {:?} is not an address like 127.0.0.1:9090",
                    self.operator_listen.clone().unwrap_or_default()
                ));
                None
            }
        };
        if let Some(url) = &self.database_url
            && !(is_postgres(url) || url.starts_with("sqlite:"))
        {
            errors.push(format!(
                "database-url: {url:?} must start with postgres:// or sqlite:"
            ));
        }
        if let Some(url) = &self.redis_url
            && !(url.starts_with("redis://") || url.starts_with("rediss://"))
        {
            errors.push(format!("redis-url: {url:?} must start with redis://"));
        }
        let sqlite_synchronous_full = match self.sqlite_synchronous.as_deref() {
            None | Some("full") => true,
            Some("normal") => false,
            Some(other) => {
                errors.push(format!(
                    "sqlite-synchronous: {other:?} must be full or normal"
                ));
                true
            }
        };
        let log_json = match self.log_format.as_deref() {
            None | Some("text") => false,
            Some("json") => true,
            Some(other) => {
                errors.push(format!("log-format: {other:?} must be text or json"));
                false
            }
        };
        let console = self.console.parse(&mut errors);
        d.egress = self.egress.parse(&mut errors);
        let config = Config {
            listen,
            operator_listen,
            http,
            data_dir: self
                .data_dir
                .unwrap_or_else(|| PathBuf::from("sluice-data")),
            database_url: self.database_url,
            redis_url: self.redis_url,
            role: self.role.unwrap_or(Role::All),
            admin_token: self.admin_token,
            max_payload_bytes: self.max_payload_bytes.unwrap_or(256 * 1024),
            sqlite_synchronous_full,
            log_json,
            dispatch: d,
            console,
            store_deadline,
            metrics,
        };
        errors.extend(config.problems());
        match errors.is_empty() {
            true => Ok(config),
            false => Err(ConfigError(errors)),
        }
    }
}

/// Every bad setting, one per line.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration:\n  {}", .0.join("\n  "))]
pub struct ConfigError(pub Vec<String>);

/// Parse a duration with units: `500ms`, `3s`, `5m`, `2h`, `5d`, `1h30m` (humantime's syntax; a
/// bare number is refused: units are required), at most a year.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let duration =
        humantime::parse_duration(text).map_err(|e| format!("{text:?} is not a duration: {e}"))?;
    if duration > Duration::from_secs(365 * 86_400) {
        return Err(format!("{text:?} is out of range (at most a year)"));
    }
    Ok(duration)
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

// ---- the console (`/console/`): portal links, sessions, framing ------------------------------

/// The console's settings, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSettings {
    /// How long a portal link can be opened (it also works only once); 1m–7d.
    pub link_ttl: Duration,
    /// How long a console session lasts after sign-in; 5m–30d.
    pub session_ttl: Duration,
    /// The CSP `frame-ancestors` value: `'none'` (the default; also `X-Frame-Options: DENY`),
    /// `'self'`, or space-separated origins allowed to embed the portal.
    pub frame_ancestors: String,
    /// Mark the console's cookies `Secure` (and `__Host-`); browsers keep Secure cookies from
    /// `http://localhost` and `http://127.0.0.1`, so only plain HTTP elsewhere needs `false`.
    pub secure_cookies: bool,
    /// Key signing the session cookies (at least 32 characters); without it one is generated
    /// and kept in the store's settings, shared by every process on that store.
    pub cookie_key: Option<String>,
    /// Public base URL of the console's host for portal links (`https://hooks.example.com`);
    /// without it links use the Host of the request that created them.
    pub public_url: Option<String>,
}

impl Default for ConsoleSettings {
    fn default() -> Self {
        Self {
            link_ttl: Duration::from_secs(15 * 60),
            session_ttl: Duration::from_secs(8 * 3600),
            frame_ancestors: "'none'".to_owned(),
            secure_cookies: true,
            cookie_key: None,
            public_url: None,
        }
    }
}

impl ConsoleSettings {
    /// Every value out of range: a link lasts 1m–7d, a session 5m–30d, and a cookie key has
    /// at least 32 characters (its length is shown, never the key).
    pub fn problems(&self) -> Vec<SettingProblem> {
        let mut p = Problems::default();
        let minute = Duration::from_secs(60);
        let day = Duration::from_secs(86_400);
        for (field, value, min, max, valid) in [
            ("link_ttl", self.link_ttl, minute, 7 * day, "1m–7d"),
            (
                "session_ttl",
                self.session_ttl,
                5 * minute,
                30 * day,
                "5m–30d",
            ),
        ] {
            p.check((min..=max).contains(&value), field, shown(value), valid);
        }
        if let Some(key) = &self.cookie_key {
            p.check(
                key.len() >= 32,
                "cookie_key",
                format_args!("a {}-character key", key.len()),
                "at least 32 characters long",
            );
        }
        p.into_vec()
    }
}

/// The console's raw settings (flags `--console-…`, variables `SLUICE_CONSOLE_…`; in the file,
/// keys of a `[console]` table without the prefix: `link-ttl`).
#[derive(Debug, Clone, Default, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RawConsoleSettings {
    /// How long a portal link can be opened, once [default: 15m]
    #[arg(long = "console-link-ttl", env = "SLUICE_CONSOLE_LINK_TTL")]
    #[serde(alias = "link_ttl")]
    pub link_ttl: Option<String>,
    /// How long a console session lasts [default: 8h]
    #[arg(long = "console-session-ttl", env = "SLUICE_CONSOLE_SESSION_TTL")]
    #[serde(alias = "session_ttl")]
    pub session_ttl: Option<String>,
    /// Who may frame the portal: 'none', 'self' or origins like https://app.example.com [default: 'none']
    #[arg(
        long = "console-frame-ancestors",
        env = "SLUICE_CONSOLE_FRAME_ANCESTORS"
    )]
    #[serde(alias = "frame_ancestors")]
    pub frame_ancestors: Option<String>,
    /// Secure (HTTPS-only) console cookies: true or false [default: true]
    #[arg(long = "console-secure-cookies", env = "SLUICE_CONSOLE_SECURE_COOKIES")]
    #[serde(alias = "secure_cookies")]
    pub secure_cookies: Option<bool>,
    /// Key signing console session cookies, at least 32 characters [default: generated, kept in the store]
    #[arg(
        long = "console-cookie-key",
        env = "SLUICE_CONSOLE_COOKIE_KEY",
        hide_env_values = true
    )]
    #[serde(alias = "cookie_key")]
    pub cookie_key: Option<String>,
    /// Public base URL for portal links, e.g. https://hooks.example.com [default: the request's Host]
    #[arg(long = "console-public-url", env = "SLUICE_CONSOLE_PUBLIC_URL")]
    #[serde(alias = "public_url")]
    pub public_url: Option<String>,
}

impl RawConsoleSettings {
    /// Fill every unset field of `self` from `file`.
    pub fn or(self, file: RawConsoleSettings) -> RawConsoleSettings {
        RawConsoleSettings {
            link_ttl: self.link_ttl.or(file.link_ttl),
            session_ttl: self.session_ttl.or(file.session_ttl),
            frame_ancestors: self.frame_ancestors.or(file.frame_ancestors),
            secure_cookies: self.secure_cookies.or(file.secure_cookies),
            cookie_key: self.cookie_key.or(file.cookie_key),
            public_url: self.public_url.or(file.public_url),
        }
    }

    /// Parse every text value, adding each that does not parse to `errors` (its default is
    /// kept); the ranges are checked by [`ConsoleSettings::problems`].
    pub fn parse(self, errors: &mut Vec<String>) -> ConsoleSettings {
        let mut c = ConsoleSettings::default();
        for (name, text, into) in [
            ("console-link-ttl", &self.link_ttl, &mut c.link_ttl),
            ("console-session-ttl", &self.session_ttl, &mut c.session_ttl),
        ] {
            match text.as_deref().map(parse_duration) {
                None => {}
                Some(Ok(duration)) => *into = duration,
                Some(Err(e)) => errors.push(format!("{name}: {e}")),
            }
        }
        if let Some(text) = &self.frame_ancestors {
            match parse_frame_ancestors(text) {
                Ok(v) => c.frame_ancestors = v,
                Err(e) => errors.push(format!("console-frame-ancestors: {e}")),
            }
        }
        c.secure_cookies = self.secure_cookies.unwrap_or(true);
        c.cookie_key = self.cookie_key;
        if let Some(u) = self.public_url {
            let trimmed = u.trim_end_matches('/');
            match url::Url::parse(trimmed) {
                Ok(p) if matches!(p.scheme(), "http" | "https")
                    && p.host().is_some()
                    && p.query().is_none()
                    && p.fragment().is_none() => c.public_url = Some(trimmed.to_owned()),
                _ => errors.push(format!(
                    "console-public-url: {u:?} must be an http(s) URL like https://hooks.example.com"
                )),
            }
        }
        c
    }
}

/// Check a `frame-ancestors` value: `'none'`, `'self'`, or sources like `https://app.example.com`
/// or `https://*.example.com` (no paths, quotes or separators that could break the header).
pub fn parse_frame_ancestors(text: &str) -> Result<String, String> {
    let sources: Vec<&str> = text.split_whitespace().collect();
    if sources.is_empty() {
        return Err("empty: use 'none', 'self' or origins".into());
    }
    if sources.len() == 1 && sources[0] == "'none'" {
        return Ok("'none'".into());
    }
    for s in &sources {
        if *s == "'self'" {
            continue;
        }
        let rest = s
            .strip_prefix("https://")
            .or_else(|| s.strip_prefix("http://"))
            .ok_or_else(|| format!("{s:?}: expected 'none', 'self' or an http(s) origin"))?;
        let host = rest.strip_prefix("*.").unwrap_or(rest);
        let ok = !host.is_empty()
            && host.bytes().all(|b| {
                b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']')
            });
        if !ok {
            return Err(format!(
                "{s:?}: an origin is scheme://host[:port], nothing more"
            ));
        }
    }
    Ok(sources.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_need_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("3s"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("3").is_err());
        assert!(parse_duration("400d").is_err());
        assert!(parse_duration("3 parsecs").is_err());
    }

    #[test]
    fn concurrency_forms() {
        assert_eq!(parse_concurrency("64"), Ok(Concurrency::Fixed(64)));
        assert_eq!(
            parse_concurrency("auto:8-128"),
            Ok(Concurrency::Auto { min: 8, max: 128 })
        );
        assert_eq!(
            parse_concurrency(" auto "),
            Ok(Concurrency::Auto { min: 16, max: 4096 })
        );
        assert!(parse_concurrency("lots").is_err());
        assert!(parse_concurrency("auto:9").is_err());
        // The range is the dispatcher's rule, not the parser's.
        for (text, refused) in [
            ("0", "concurrency: 0 must be 1–100000 or auto"),
            ("100001", "concurrency: 100001 must be 1–100000 or auto"),
            (
                "auto:9-3",
                "concurrency: auto:9-3 must be auto:MIN-MAX with 1 <= MIN <= MAX",
            ),
            ("auto:0-3", "concurrency: auto:0-3 must be auto:MIN-MAX"),
        ] {
            let raw = RawSettings {
                concurrency: Some(text.into()),
                ..Default::default()
            };
            let err = raw.validate().expect_err(text);
            assert!(err.0.len() == 1 && err.0[0].starts_with(refused), "{err}");
        }
        for text in ["1", "100000", "auto:1-1", "auto:100000-100000"] {
            let raw = RawSettings {
                concurrency: Some(text.into()),
                ..Default::default()
            };
            assert!(raw.validate().is_ok(), "{text}");
        }
    }

    #[test]
    fn the_breaker_decides_its_own_ranges() {
        let raw = |ceiling: &str| RawSettings {
            latency_ceiling: Some(ceiling.into()),
            ..Default::default()
        };
        let refused = raw("5h").validate().unwrap_err();
        assert_eq!(
            refused.0,
            ["latency-ceiling: 18000s must be 1ms–1h"],
            "{refused}"
        );
        assert!(raw("1h").validate().is_ok());
        assert!(raw("1ms").validate().is_ok());
        assert!(raw("1h1ms").validate().is_err());
    }

    #[test]
    fn every_bad_value_is_reported_together() {
        let raw = RawSettings {
            listen: Some("nowhere".into()),
            connect_timeout: Some("3".into()),
            lane_share: Some(2.0),
            concurrency: Some("lots".into()),
            allow_network: vec!["10.0.0.0/33".into()],
            role: Some(Role::Api),
            ..Default::default()
        };
        let err = raw.validate().unwrap_err();
        assert_eq!(err.0.len(), 6, "{err}");
        for needle in [
            "listen",
            "connect-timeout",
            "lane-share",
            "concurrency",
            "allow-network",
            "role",
        ] {
            assert!(
                err.0.iter().any(|e| e.starts_with(needle)),
                "{needle}: {err}"
            );
        }
    }

    #[test]
    fn lease_must_outlast_the_attempt() {
        let raw = RawSettings {
            lease_ttl: Some("10s".into()),
            ..Default::default()
        };
        let err = raw.validate().unwrap_err();
        assert!(err.0[0].starts_with("lease-ttl"), "{err}");
    }

    #[test]
    fn console_settings_are_checked() {
        let mut errors = Vec::new();
        let raw = RawConsoleSettings {
            link_ttl: Some("5s".into()),
            frame_ancestors: Some("https://app.example.com/path; script-src *".into()),
            cookie_key: Some("short".into()),
            public_url: Some("ftp://x".into()),
            ..Default::default()
        };
        let parsed = raw.parse(&mut errors);
        assert_eq!(errors.len(), 2, "{errors:?}");
        let fields: Vec<_> = parsed.problems().into_iter().map(|p| p.field).collect();
        assert_eq!(fields, ["link_ttl", "cookie_key"]);
        assert_eq!(
            parse_frame_ancestors("'self'  https://*.example.com").as_deref(),
            Ok("'self' https://*.example.com")
        );
        assert!(parse_frame_ancestors("'none' https://a.example").is_err());
        let ok = RawConsoleSettings::default().parse(&mut errors);
        assert_eq!(ok, ConsoleSettings::default());
        assert_eq!(ok.problems(), []);
        let file: RawSettings = toml::from_str("[console]\nlink_ttl = \"5m\"\n").expect("toml");
        let c = RawSettings::default().or(file).validate().expect("valid");
        assert_eq!(c.console.link_ttl, Duration::from_secs(300));
    }

    #[test]
    fn http_listener_settings_are_checked_together() {
        let raw = RawSettings {
            http_header_timeout: Some("50ms".into()),
            http_body_timeout: Some("11m".into()),
            http_idle_timeout: Some("2".into()),
            http_max_connections: Some(0),
            operator_listen: Some("nowhere".into()),
            ..Default::default()
        };
        let err = raw.validate().unwrap_err();
        for needle in [
            "http-header-timeout",
            "http-body-timeout",
            "http-idle-timeout",
            "http-max-connections",
            "operator-listen",
        ] {
            assert!(
                err.0.iter().any(|e| e.starts_with(needle)),
                "{needle}: {err}"
            );
        }
        let c = RawSettings {
            http_header_timeout: Some("1s".into()),
            http_max_connections: Some(20),
            operator_listen: Some("127.0.0.1:9090".into()),
            ..Default::default()
        }
        .validate()
        .expect("valid");
        assert_eq!(c.http.header_read_timeout, Duration::from_secs(1));
        assert_eq!(c.http.max_connections, 20);
        assert_eq!(c.http.idle_timeout, Duration::from_secs(60));
        assert_eq!(c.operator_listen, Some("127.0.0.1:9090".parse().unwrap()));
    }

    #[test]
    fn store_deadline_has_a_range() {
        for (text, ok) in [
            ("5s", true),
            ("100ms", true),
            ("60s", true),
            ("50ms", false),
        ] {
            let raw = RawSettings {
                store_deadline: Some(text.into()),
                ..Default::default()
            };
            match raw.validate() {
                Ok(c) => assert!(ok, "{text} accepted as {:?}", c.store_deadline),
                Err(e) => assert!(!ok && e.0[0].starts_with("store-deadline"), "{text}: {e}"),
            }
        }
        let raw = RawSettings {
            store_deadline: Some("2m".into()),
            ..Default::default()
        };
        assert!(raw.validate().is_err());
    }

    #[test]
    fn three_unrelated_bad_flags_are_reported_in_one_error() {
        let raw = RawSettings {
            latency_ceiling: Some("5h".into()),
            http_max_connections: Some(0),
            metrics_top_tenants: Some(1001),
            ..Default::default()
        };
        let err = raw.validate().unwrap_err();
        assert_eq!(
            err.0,
            [
                "latency-ceiling: 18000s must be 1ms–1h",
                "http-max-connections: 0 must be 1–1000000",
                "metrics-top-tenants: 1001 must be 0–1000",
            ],
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.starts_with("invalid configuration:\n  latency-ceiling"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 4, "{text}");
    }

    #[test]
    fn every_range_problem_is_named_by_its_flag() {
        let raw = RawSettings {
            connect_timeout: Some("11s".into()),
            read_timeout: Some("31s".into()),
            total_timeout: Some("46s".into()),
            lease_ttl: Some("50s".into()),
            lane_size: Some(10_001),
            lane_headroom: Some(0.5),
            lane_share: Some(0.0),
            retention: Some("59m".into()),
            heartbeat_interval: Some("61s".into()),
            shed_min_delay: Some("30s".into()),
            retry_schedule: Some("5s,0s".into()),
            http_header_timeout: Some("6m".into()),
            store_deadline: Some("61s".into()),
            max_payload_bytes: Some(0),
            metrics_top_endpoints: Some(2000),
            admin_token: Some("short".into()),
            console: RawConsoleSettings {
                session_ttl: Some("31d".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let err = raw.validate().unwrap_err();
        let flags: Vec<_> = err
            .0
            .iter()
            .map(|e| e.split(':').next().unwrap_or_default())
            .collect();
        let expected = [
            "store-deadline",
            "max-payload-bytes",
            "admin-token",
            "connect-timeout",
            "read-timeout",
            "total-timeout",
            "lease-ttl",
            "lane-size",
            "lane-headroom",
            "lane-share",
            "retention",
            "heartbeat-interval",
            "shed-min-delay",
            "retry-schedule",
            "http-header-timeout",
            "metrics-top-endpoints",
            "console-session-ttl",
        ];
        assert_eq!(flags, expected, "{err}");
        for message in [
            "connect-timeout: 11s must be above zero and at most 10s",
            "lease-ttl: 50s must be more than the total deadline plus the lane deadline plus 5s (51.5s)",
            "retry-schedule: 0ns (delay 2) must be above zero and at most 30 days",
            "shed-min-delay: 30s must be above zero and at most the longest delay (20s)",
            "admin-token: a 5-character token must be at least 16 characters long",
        ] {
            assert!(err.0.iter().any(|e| e == message), "{message}: {err}");
        }
        assert!(
            !err.to_string().contains("short"),
            "the token is never shown: {err}"
        );
    }

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

    #[test]
    fn console_settings_accept_their_edges() {
        let edge = |link: u64, session: u64| ConsoleSettings {
            link_ttl: Duration::from_secs(link),
            session_ttl: Duration::from_secs(session),
            cookie_key: Some("k".repeat(32)),
            ..ConsoleSettings::default()
        };
        assert_eq!(edge(60, 300).problems(), []);
        assert_eq!(edge(7 * 86_400, 30 * 86_400).problems(), []);
        let fields: Vec<_> = edge(59, 30 * 86_400 + 1)
            .problems()
            .into_iter()
            .map(|p| p.field)
            .collect();
        assert_eq!(fields, ["link_ttl", "session_ttl"]);
    }

    #[test]
    fn defaults_are_valid() {
        let c = RawSettings::default().validate().expect("defaults");
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.dispatch.lane_ceiling(512), 128);
    }
}
