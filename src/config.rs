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
use crate::retry::{RetrySchedule, ShedSettings};

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
    /// Expiries after which a delivery is dead-lettered as a poison message.
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
    /// Default lane size (in-flight slots per endpoint).
    pub lane_size: u32,
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
}

impl DispatchSettings {
    /// The fairness ceiling on any one lane.
    pub fn lane_ceiling(&self, concurrency: u32) -> u32 {
        ((f64::from(concurrency) * self.lane_share).floor() as u32).max(1)
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
        }
    }
}

/// The whole validated configuration of `sluice serve`.
#[derive(Debug, Clone)]
pub struct Config {
    /// API listen address.
    pub listen: SocketAddr,
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
}

/// The raw settings: every field optional, from a TOML file or from flags/environment.
#[derive(Debug, Clone, Default, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct RawSettings {
    /// API listen address [default: 127.0.0.1:8080]
    #[arg(long, env = "SLUICE_LISTEN")]
    pub listen: Option<String>,
    /// Directory of the embedded database [default: ./sluice-data]
    #[arg(long, env = "SLUICE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// postgres://… for a fleet on PostgreSQL (default: embedded SQLite)
    #[arg(long, env = "SLUICE_DATABASE_URL")]
    pub database_url: Option<String>,
    /// redis://… for fleet-wide lanes
    #[arg(long, env = "SLUICE_REDIS_URL")]
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
    pub allow_network: Vec<String>,
    /// Connect timeout per attempt, e.g. 3s [default: 3s]
    #[arg(long, env = "SLUICE_CONNECT_TIMEOUT")]
    pub connect_timeout: Option<String>,
    /// Read timeout per attempt [default: 10s]
    #[arg(long, env = "SLUICE_READ_TIMEOUT")]
    pub read_timeout: Option<String>,
    /// Total deadline per attempt [default: 15s]
    #[arg(long, env = "SLUICE_TOTAL_TIMEOUT")]
    pub total_timeout: Option<String>,
    /// Lease duration; must exceed the total deadline plus the lane deadline [default: 60s]
    #[arg(long, env = "SLUICE_LEASE_TTL")]
    pub lease_ttl: Option<String>,
    /// Default lane size per endpoint [default: 8]
    #[arg(long, env = "SLUICE_LANE_SIZE")]
    pub lane_size: Option<u32>,
    /// Lane acquisition deadline before shedding [default: 500ms]
    #[arg(long, env = "SLUICE_LANE_DEADLINE")]
    pub lane_deadline: Option<String>,
    /// Largest share of the concurrency any one lane may hold, 0–1 [default: 0.25]
    #[arg(long, env = "SLUICE_LANE_SHARE")]
    pub lane_share: Option<f64>,
    /// Shortest shed requeue delay [default: 5s]
    #[arg(long, env = "SLUICE_SHED_MIN_DELAY")]
    pub shed_min_delay: Option<String>,
    /// Longest shed requeue delay [default: 20s]
    #[arg(long, env = "SLUICE_SHED_MAX_DELAY")]
    pub shed_max_delay: Option<String>,
    /// Default latency breaker ceiling (p95) [default: 15s]
    #[arg(long, env = "SLUICE_LATENCY_CEILING")]
    pub latency_ceiling: Option<String>,
    /// Disable an endpoint after failing continuously for this long [default: 5d]
    #[arg(long, env = "SLUICE_AUTO_DISABLE_AFTER")]
    pub auto_disable_after: Option<String>,
    /// How long a rotated-out secret keeps signing [default: 24h]
    #[arg(long, env = "SLUICE_ROTATION_OVERLAP")]
    pub rotation_overlap: Option<String>,
    /// Grace period for in-flight attempts on SIGTERM [default: 20s]
    #[arg(long, env = "SLUICE_DRAIN_GRACE")]
    pub drain_grace: Option<String>,
    /// Keep delivered messages this long, then delete them (at least 1h) [default: 30d]
    #[arg(long, env = "SLUICE_RETENTION")]
    pub retention: Option<String>,
    /// Largest message payload in bytes [default: 262144]
    #[arg(long, env = "SLUICE_MAX_PAYLOAD_BYTES")]
    pub max_payload_bytes: Option<usize>,
    /// Retry delays after the first attempt, comma-separated [default: 5s,5m,30m,2h,5h,10h,10h]
    #[arg(long, env = "SLUICE_RETRY_SCHEDULE")]
    pub retry_schedule: Option<String>,
    /// SQLite durability: full (fsync every commit) or normal [default: full]
    #[arg(long, env = "SLUICE_SQLITE_SYNCHRONOUS")]
    pub sqlite_synchronous: Option<String>,
    /// Log format: text or json [default: text]
    #[arg(long, env = "SLUICE_LOG_FORMAT")]
    pub log_format: Option<String>,
    /// Operator token (otherwise one is generated on first start and printed once)
    #[arg(
        long = "admin-token",
        env = "SLUICE_ADMIN_TOKEN",
        hide_env_values = true
    )]
    #[serde(skip)]
    pub admin_token: Option<String>,
}

impl RawSettings {
    /// Fill every unset field of `self` from `file`.
    pub fn or(mut self, file: RawSettings) -> RawSettings {
        macro_rules! fill {
            ($($f:ident),*) => { $( if self.$f.is_none() { self.$f = file.$f; } )* };
        }
        fill!(
            listen,
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
            log_format
        );
        if self.allow_network.is_empty() {
            self.allow_network = file.allow_network;
        }
        self
    }

    /// Read a TOML settings file.
    pub fn from_toml_file(path: &std::path::Path) -> Result<RawSettings, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(vec![format!("cannot read {}: {e}", path.display())]))?;
        toml::from_str(&text).map_err(|e| ConfigError(vec![format!("{}: {e}", path.display())]))
    }

    /// Validate everything, reporting every bad value at once.
    pub fn validate(self) -> Result<Config, ConfigError> {
        let mut errors = Vec::new();
        let mut d = DispatchSettings::default();
        let mut duration = |name: &str, value: &Option<String>, default: Duration| match value {
            None => default,
            Some(text) => parse_duration(text).unwrap_or_else(|e| {
                errors.push(format!("{name}: {e}"));
                default
            }),
        };
        d.timeouts.connect = duration("connect-timeout", &self.connect_timeout, d.timeouts.connect);
        d.timeouts.read = duration("read-timeout", &self.read_timeout, d.timeouts.read);
        d.timeouts.total = duration("total-timeout", &self.total_timeout, d.timeouts.total);
        d.lease_ttl = duration("lease-ttl", &self.lease_ttl, d.lease_ttl);
        d.lane_deadline = duration("lane-deadline", &self.lane_deadline, d.lane_deadline);
        let shed_min = duration("shed-min-delay", &self.shed_min_delay, d.shed.min_delay);
        let shed_max = duration("shed-max-delay", &self.shed_max_delay, d.shed.max_delay);
        d.breaker.latency_ceiling = duration(
            "latency-ceiling",
            &self.latency_ceiling,
            d.breaker.latency_ceiling,
        );
        d.auto_disable_after = duration(
            "auto-disable-after",
            &self.auto_disable_after,
            d.auto_disable_after,
        );
        d.rotation_overlap = duration(
            "rotation-overlap",
            &self.rotation_overlap,
            d.rotation_overlap,
        );
        d.drain_grace = duration("drain-grace", &self.drain_grace, d.drain_grace);
        d.retention = duration("retention", &self.retention, d.retention);

        let check = |ok: bool, errors: &mut Vec<String>, msg: String| {
            if !ok {
                errors.push(msg);
            }
        };
        for (name, v, cap) in [
            (
                "connect-timeout",
                d.timeouts.connect,
                d.timeout_caps.connect,
            ),
            ("read-timeout", d.timeouts.read, d.timeout_caps.read),
            ("total-timeout", d.timeouts.total, d.timeout_caps.total),
        ] {
            check(
                !v.is_zero() && v <= cap,
                &mut errors,
                format!("{name}: {v:?} must be above zero and at most {cap:?}"),
            );
        }
        check(
            d.lease_ttl > d.timeouts.total + d.lane_deadline + Duration::from_secs(5),
            &mut errors,
            format!(
                "lease-ttl: {:?} must exceed the total deadline plus the lane deadline plus 5s ({:?})",
                d.lease_ttl,
                d.timeouts.total + d.lane_deadline + Duration::from_secs(5)
            ),
        );
        check(
            d.retention >= Duration::from_secs(3600),
            &mut errors,
            format!("retention: {:?} must be at least 1h", d.retention),
        );
        match ShedSettings::try_new(shed_min, shed_max) {
            Ok(s) => d.shed = s,
            Err(e) => errors.push(format!("shed delays: {e}")),
        }
        if let Some(text) = &self.retry_schedule {
            let delays: Result<Vec<Duration>, String> =
                text.split(',').map(|p| parse_duration(p.trim())).collect();
            match delays.map(|v| RetrySchedule::try_new(v, 0.2)) {
                Ok(Ok(s)) => d.retry = s,
                Ok(Err(e)) => errors.push(format!("retry-schedule: {e}")),
                Err(e) => errors.push(format!("retry-schedule: {e}")),
            }
        }
        if let Some(n) = self.lane_size {
            check(
                (1..=10_000).contains(&n),
                &mut errors,
                format!("lane-size: {n} must be 1–10000"),
            );
            d.lane_size = n;
        }
        if let Some(s) = self.lane_share {
            check(
                s > 0.0 && s <= 1.0,
                &mut errors,
                format!("lane-share: {s} must be in (0, 1]"),
            );
            d.lane_share = s;
        }
        if let Some(text) = &self.concurrency {
            match parse_concurrency(text) {
                Ok(c) => d.concurrency = c,
                Err(e) => errors.push(format!("concurrency: {e}")),
            }
        }
        for net in &self.allow_network {
            match net.trim().parse::<IpNet>() {
                Ok(n) => d.allow_networks.push(n),
                Err(_) => match net.trim().parse::<std::net::IpAddr>() {
                    Ok(ip) => d.allow_networks.push(IpNet::from(ip)),
                    Err(_) => errors.push(format!("allow-network: {net:?} is not a CIDR network")),
                },
            }
        }
        let listen = match self.listen.as_deref().unwrap_or("127.0.0.1:8080").parse() {
            Ok(a) => a,
            Err(_) => {
                errors.push(format!(
                    "listen: {:?} is not an address like 127.0.0.1:8080",
                    self.listen.unwrap_or_default()
                ));
                "127.0.0.1:8080".parse().expect("literal address")
            }
        };
        let role = self.role.unwrap_or(Role::All);
        let is_postgres = self
            .database_url
            .as_deref()
            .is_some_and(|u| u.starts_with("postgres://") || u.starts_with("postgresql://"));
        if let Some(url) = &self.database_url {
            check(
                is_postgres || url.starts_with("sqlite:"),
                &mut errors,
                format!("database-url: {url:?} must start with postgres:// or sqlite:"),
            );
        }
        check(
            role == Role::All || is_postgres,
            &mut errors,
            "role: api and dispatcher processes must share a PostgreSQL database (--database-url)"
                .into(),
        );
        if let Some(url) = &self.redis_url {
            check(
                url.starts_with("redis://") || url.starts_with("rediss://"),
                &mut errors,
                format!("redis-url: {url:?} must start with redis://"),
            );
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
        let max_payload_bytes = self.max_payload_bytes.unwrap_or(256 * 1024);
        check(
            (1..=16 * 1024 * 1024).contains(&max_payload_bytes),
            &mut errors,
            format!("max-payload-bytes: {max_payload_bytes} must be 1–16777216"),
        );
        if let Some(t) = &self.admin_token {
            check(
                t.len() >= 16,
                &mut errors,
                "admin-token: must be at least 16 characters".into(),
            );
        }
        if !errors.is_empty() {
            return Err(ConfigError(errors));
        }
        Ok(Config {
            listen,
            data_dir: self
                .data_dir
                .unwrap_or_else(|| PathBuf::from("sluice-data")),
            database_url: self.database_url,
            redis_url: self.redis_url,
            role,
            admin_token: self.admin_token,
            max_payload_bytes,
            sqlite_synchronous_full,
            log_json,
            dispatch: d,
        })
    }
}

/// Every bad setting, one per line.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration:\n  {}", .0.join("\n  "))]
pub struct ConfigError(pub Vec<String>);

/// Parse `500ms`, `3s`, `5m`, `2h`, `5d` (a bare number is refused: units are required).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("{text:?} needs a unit (ms, s, m, h, d)"))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 3s or 500ms"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        "d" => value * 86400.0,
        _ => return Err(format!("{text:?}: unknown unit {unit:?} (ms, s, m, h, d)")),
    };
    if !(0.0..=365.0 * 86400.0).contains(&seconds) {
        return Err(format!("{text:?} is out of range"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Parse `512`, `auto` or `auto:64-2048`.
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
        if min == 0 || min > max || max > 100_000 {
            return Err(format!("{text:?}: need 1 <= MIN <= MAX <= 100000"));
        }
        return Ok(Concurrency::Auto { min, max });
    }
    match text.parse::<u32>() {
        Ok(n) if (1..=100_000).contains(&n) => Ok(Concurrency::Fixed(n)),
        _ => Err(format!("{text:?} must be 1–100000 or auto")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_need_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("3s"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("3").is_err());
        assert!(parse_duration("3 parsecs").is_err());
    }

    #[test]
    fn concurrency_forms() {
        assert_eq!(parse_concurrency("64"), Ok(Concurrency::Fixed(64)));
        assert_eq!(
            parse_concurrency("auto:8-128"),
            Ok(Concurrency::Auto { min: 8, max: 128 })
        );
        assert!(parse_concurrency("0").is_err());
        assert!(parse_concurrency("auto:9-3").is_err());
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
    fn defaults_are_valid() {
        let c = RawSettings::default().validate().expect("defaults");
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.dispatch.lane_ceiling(512), 128);
    }
}
