//! Settings for `sluice serve`: from flags, `SLUICE_*` environment variables and an optional
//! TOML file, validated once at start-up with every bad value reported together.
//!
//! Precedence: flag or environment variable, then the TOML file, then the default.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;

use crate::console::settings::{ConsoleSettings, RawConsoleSettings};
use crate::dispatcher::{DispatchSettings, parse_concurrency};
use crate::ingest::settings::Source;
use crate::listener::ListenerSettings;
use crate::metrics::MetricsSettings;
use crate::setting::{Problems, SettingProblem, parse_duration, shown};

pub mod file;

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
    /// PostgreSQL: the schema of sluice's tables and of `send_message`.
    pub database_schema: String,
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
    /// Producers' queues events are taken from (`--ingest-from`), by the API's processes.
    pub ingest: Vec<Source>,
}

impl Config {
    /// Every value out of range anywhere in the configuration, each named by the flag that
    /// sets it (`lease-ttl: 10s must be …`). The rules are the settings types' own
    /// (`problems()` on each); this only collects them and names them.
    pub fn problems(&self) -> Vec<String> {
        let d = &self.dispatch;
        let mut all = Vec::new();
        // A problem is named by the flag whose value it is (from `DURATION_FLAGS`, where the
        // flag's name and the setting's differ), else by the component's own rule.
        let mut name = |problems: Vec<SettingProblem>, at: &str, rule: &dyn Fn(&str) -> String| {
            all.extend(problems.iter().map(|p| {
                let path = format!("{at}{}", p.field);
                p.named(&duration_flag(&path).unwrap_or_else(|| rule(p.field)))
            }));
        };
        name(self.own_problems(), "", &flag);
        name(d.problems(), "dispatch.", &flag);
        name(d.shed.problems(), "dispatch.shed.", &|field| {
            format!("shed-{}", flag(field))
        });
        name(
            d.retry.problems(),
            "dispatch.retry.",
            &|field| match field {
                "delays" => "retry-schedule".into(),
                other => format!("retry {other}"),
            },
        );
        name(d.breaker.problems(), "dispatch.breaker.", &|field| {
            format!("breaker {field}")
        });
        // No flag sets the governor: its defaults are checked all the same.
        name(d.governor.problems(), "dispatch.governor.", &|field| {
            format!("governor {field}")
        });
        name(self.http.problems(), "http.", &|field| {
            format!("http-{}", flag(field))
        });
        name(self.metrics.problems(), "metrics.", &|field| {
            format!("metrics-{}", flag(field))
        });
        name(self.console.problems(), "console.", &|field| {
            format!("console-{}", flag(field))
        });
        name(d.egress.problems(), "dispatch.egress.", &|field| {
            format!("egress-{}", flag(field))
        });
        name(
            d.traces.problems(),
            "dispatch.traces.",
            &|field| match field {
                "export_timeout" => "otlp-timeout".into(),
                other => format!("traces-{}", flag(other)),
            },
        );
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
        p.check(
            self.ingest.is_empty() || self.role.runs_api(),
            "ingest_from",
            format_args!(
                "{} source(s) with --role {}",
                self.ingest.len(),
                self.role.name()
            ),
            "given only to processes that run the API (--role all or api), which store what \
             they take as the API does",
        );
        p.into_vec()
    }
}

/// The flag that sets a settings field: `lane_share` is `lane-share`.
fn flag(field: &str) -> String {
    field.replace('_', "-")
}

/// The settings `sluice serve` reads as durations, each written once: the raw field (its name
/// with dashes is the flag) and where its value goes. [`RawSettings::validate`] parses them
/// from this list, and [`Config::problems`] names a problem with one of these settings by the
/// flag (`timeouts.connect` of the dispatcher is `connect-timeout`).
macro_rules! duration_flags {
    ($($field:ident => $($path:ident).+),* $(,)?) => {
        /// `(where the value goes, the raw field)` of every duration flag.
        const DURATION_FLAGS: &[(&str, &str)] = &[$((stringify!($($path).+), stringify!($field))),*];

        /// Parse every duration flag that is set into `into`; a value that does not parse
        /// keeps the default and is reported by its flag.
        fn parse_durations(raw: &RawSettings, into: &mut Timed, errors: &mut Vec<String>) {
            $(
                if let Some(text) = raw.$field.as_deref() {
                    match parse_duration(text) {
                        Ok(duration) => into.$($path).+ = duration,
                        Err(e) => errors.push(format!("{}: {e}", flag(stringify!($field)))),
                    }
                }
            )*
        }
    };
}

duration_flags! {
    connect_timeout => dispatch.timeouts.connect,
    read_timeout => dispatch.timeouts.read,
    total_timeout => dispatch.timeouts.total,
    lease_ttl => dispatch.lease_ttl,
    lane_deadline => dispatch.lane_deadline,
    shed_min_delay => dispatch.shed.min_delay,
    shed_max_delay => dispatch.shed.max_delay,
    latency_ceiling => dispatch.breaker.latency_ceiling,
    auto_disable_after => dispatch.auto_disable_after,
    rotation_overlap => dispatch.rotation_overlap,
    drain_grace => dispatch.drain_grace,
    retention => dispatch.retention,
    heartbeat_interval => dispatch.heartbeat_interval,
    http_header_timeout => http.header_read_timeout,
    http_body_timeout => http.body_read_timeout,
    http_idle_timeout => http.idle_timeout,
    store_deadline => store_deadline,
}

/// The settings the duration flags fill, before the rest of [`Config`] is assembled.
struct Timed {
    dispatch: DispatchSettings,
    http: ListenerSettings,
    store_deadline: Duration,
}

/// The flag of the duration setting at `path` (`dispatch.timeouts.connect`), if a flag sets it.
fn duration_flag(path: &str) -> Option<String> {
    DURATION_FLAGS
        .iter()
        .find(|(at, _)| at.replace(' ', "") == path)
        .map(|(_, field)| flag(field))
}

/// Is this a PostgreSQL URL (rather than `sqlite:`)?
fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// Default `--store-deadline`: well above a healthy commit (milliseconds, a checkpoint stall
/// included) and well below the 10–30 s producers' clients and load balancers give up after.
pub const DEFAULT_STORE_DEADLINE: Duration = Duration::from_secs(5);

crate::setting::raw_settings! {
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
        /// Most connections the API serves at once; at the limit the idle longest, else the longest in a request head, is closed for a new one, and only busy ones mean a 503, 1–1000000 [default: 1024]
        #[arg(long, env = "SLUICE_HTTP_MAX_CONNECTIONS")]
        #[serde(alias = "http_max_connections")]
        pub http_max_connections: Option<u32>,
        /// Most connections one client address (an IPv6 /64) may hold; at the limit its idle ones, then its stalled heads, make room, 1–1000000 [default: half of --http-max-connections]
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
        /// PostgreSQL schema of sluice's tables and of its send_message function, created when missing; `public` keeps an installation from before this setting where it is [default: sluice]
        #[arg(long, env = "SLUICE_DATABASE_SCHEMA")]
        #[serde(alias = "database_schema")]
        pub database_schema: Option<String>,
        /// redis://… to hold lanes and rate limits exactly across the fleet (without it each dispatcher holds its share) [default: none]
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
        /// Shortest shed requeue delay (a lane that serves what is ahead faster scales the
        /// range down, never under the lane deadline) [default: 5s]
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
        /// than three intervals is stale, and on PostgreSQL a killed dispatcher's leases return
        /// after two. Keep it the same across the fleet, 1s–60s [default: 5s]
        #[arg(long, env = "SLUICE_HEARTBEAT_INTERVAL")]
        #[serde(alias = "heartbeat_interval")]
        pub heartbeat_interval: Option<String>,
        /// Weight of a tenant without one of its own: tenants competing for the pool share it in
        /// proportion to their weights, 1–1000 [default: 1]
        #[arg(long, env = "SLUICE_TENANT_WEIGHT")]
        #[serde(alias = "tenant_weight")]
        pub tenant_weight: Option<u32>,
        /// Largest share of the pool a tenant without a ceiling of its own may hold at any moment,
        /// in (0, 1]; 1 is no ceiling (all but the reserve kept for tenants holding none) [default: 1]
        #[arg(long, env = "SLUICE_TENANT_MAX_SHARE")]
        #[serde(alias = "tenant_max_share")]
        pub tenant_max_share: Option<f64>,
        /// Most broker connections of each kind (RabbitMQ, NATS, Redis) a dispatcher holds
        /// open at once, shared by the endpoints of one broker address and credentials; the
        /// least recently used is closed to make room (the cloud destinations, HTTPS calls, use
        /// the HTTP clients instead), 1–10000 [default: 64]
        #[arg(long, env = "SLUICE_BROKER_MAX_CONNECTIONS")]
        #[serde(alias = "broker_max_connections")]
        pub broker_max_connections: Option<u32>,
        /// Take events from a producer's queue, stored as POST /v1/messages stores them:
        /// amqp://…?queue=Q, nats://…?stream=S[&consumer=C], redis://…?stream=S[&group=G]
        /// (README, "Ingest from a queue"); repeatable, or space-separated [default: none]
        #[arg(
            long = "ingest-from",
            env = "SLUICE_INGEST_FROM",
            value_delimiter = ' ',
            hide_env_values = true
        )]
        #[serde(default)]
        #[serde(alias = "ingest_from")]
        pub ingest_from: Vec<String>,
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
        /// OpenTelemetry traces (OTLP export, sampler); a `[traces]` table.
        #[command(flatten)]
        #[serde(default)]
        pub traces: crate::traces::RawTraceSettings,
    }
}

impl RawSettings {
    /// Read a TOML settings file (see [`file`]).
    pub fn from_toml_file(path: &std::path::Path) -> Result<RawSettings, ConfigError> {
        file::read(path)
    }

    /// Validate everything, reporting every bad value at once: parse every text value (a
    /// value that does not parse is reported and its default kept), fill the settings, then
    /// collect what each settings type finds out of range ([`Config::problems`]).
    pub fn validate(self) -> Result<Config, ConfigError> {
        let mut errors = Vec::new();
        let mut timed = Timed {
            dispatch: DispatchSettings::default(),
            http: ListenerSettings::default(),
            store_deadline: DEFAULT_STORE_DEADLINE,
        };
        parse_durations(&self, &mut timed, &mut errors);
        let Timed {
            dispatch: mut d,
            mut http,
            store_deadline,
        } = timed;
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
        if let Some(n) = self.broker_max_connections {
            d.brokers.max_connections = usize::try_from(n).unwrap_or(usize::MAX);
        }
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
        if let Some(schema) = &self.database_schema
            && let Some(valid) = crate::store::postgres::schema_problem(schema)
        {
            errors.push(format!("database-schema: {schema:?} must be {valid}"));
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
        let ingest = crate::ingest::settings::parse_all(&self.ingest_from, &mut errors);
        d.egress = self.egress.parse(&mut errors);
        d.traces = self.traces.parse(&mut errors);
        let config = Config {
            listen,
            operator_listen,
            http,
            data_dir: self
                .data_dir
                .unwrap_or_else(|| PathBuf::from("sluice-data")),
            database_url: self.database_url,
            database_schema: self
                .database_schema
                .unwrap_or_else(|| crate::store::postgres::DEFAULT_SCHEMA.to_owned()),
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
            ingest,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::settings::parse_frame_ancestors;
    use crate::dispatcher::Concurrency;

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
    fn ingest_sources_are_read_checked_and_only_for_the_api() {
        let c = RawSettings {
            ingest_from: vec![
                "amqp://guest:guest@127.0.0.1:5672/%2f?queue=events".into(),
                "redis://127.0.0.1:6379/0?stream=events".into(),
            ],
            ..Default::default()
        }
        .validate()
        .expect("valid");
        let names: Vec<_> = c.ingest.iter().map(|s| s.name()).collect();
        assert_eq!(names, ["rabbitmq:events", "redis:events/sluice"]);
        let err = RawSettings {
            ingest_from: vec![
                "amqp://u:secret@h/%2f".into(),
                "nats://h:4222?stream=S".into(),
            ],
            database_url: Some("postgres://db/sluice".into()),
            role: Some(Role::Dispatcher),
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(err.0.len(), 2, "{err}");
        assert!(
            err.0[0].starts_with("ingest-from: ") && err.0[0].contains("?queue="),
            "{err}"
        );
        assert!(
            err.0[1].starts_with("ingest-from: 1 source(s) with --role dispatcher"),
            "{err}"
        );
        assert!(!err.to_string().contains("secret"), "{err}");
    }

    #[test]
    fn defaults_are_valid() {
        let c = RawSettings::default().validate().expect("defaults");
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.dispatch.lane_ceiling(512), 128);
    }
}
