//! The command line: `serve`, `migrate`, `grant-sender`, `size` (and `plan`, `bench`). Thin:
//! parsing only; the work lives in the library.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::RawSettings;

/// sluice: a webhook dispatcher where one slow, dead or hostile endpoint never takes delivery
/// away from the others.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the API and the dispatcher (embedded SQLite unless --database-url names PostgreSQL).
    Serve(Box<ServeArgs>),
    /// Create or upgrade the database schema, then exit (`serve` migrates on start as well).
    Migrate(MigrateArgs),
    /// PostgreSQL: let a role call `send_message` (transactional enqueue) and nothing else.
    GrantSender(GrantSenderArgs),
    /// Run a receiver that prints each webhook and verifies its signature (for trying sluice).
    Receive(ReceiveArgs),
    /// Size a worker pool: Little's Law, square-root staffing, Erlang C, process layout.
    Size(SizeArgs),
    /// Plan the pool from live measurements of a running sluice (its /metrics and/or its store).
    Plan(crate::plan::PlanArgs),
    /// Run a benchmark scenario (the separate `sluice-bench` binary; `sluice bench --help`
    /// lists the scenarios).
    #[command(disable_help_flag = true)]
    Bench(BenchArgs),
}

/// `sluice bench …`: everything after `bench` goes to `sluice-bench` as it is.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The scenario and its options.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<std::ffi::OsString>,
}

/// `sluice serve` and `sluice migrate`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// A TOML file of settings (flags and SLUICE_* variables override it).
    #[arg(long, env = "SLUICE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Settings.
    #[command(flatten)]
    pub settings: RawSettings,
}

/// `sluice migrate`: only what names the store.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// A TOML file of settings; only `database-url`, `database-schema` and `data-dir` are read
    /// from it.
    #[arg(long, env = "SLUICE_CONFIG")]
    pub config: Option<PathBuf>,
    /// postgres://… to migrate a PostgreSQL database (default: the embedded SQLite file)
    #[arg(long, env = "SLUICE_DATABASE_URL")]
    pub database_url: Option<String>,
    /// PostgreSQL schema of sluice's tables [default: sluice]
    #[arg(long, env = "SLUICE_DATABASE_SCHEMA")]
    pub database_schema: Option<String>,
    /// Directory of the embedded database [default: ./sluice-data]
    #[arg(long, env = "SLUICE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// First move an installation from before --database-schema out of `public` into
    /// --database-schema (sluice's own tables and functions, in one transaction); stop every
    /// sluice process first
    #[arg(long)]
    pub move_to_schema: bool,
}

/// `sluice grant-sender`: the grants of a role that may only call `send_message`.
#[derive(Debug, Args)]
pub struct GrantSenderArgs {
    /// The role (it must exist) that may call send_message.
    pub role: String,
    /// A TOML file of settings; only `database-url` and `database-schema` are read from it.
    #[arg(long, env = "SLUICE_CONFIG")]
    pub config: Option<PathBuf>,
    /// postgres://… of the database (as a role allowed to grant on sluice's schema)
    #[arg(long, env = "SLUICE_DATABASE_URL")]
    pub database_url: Option<String>,
    /// PostgreSQL schema of sluice's tables [default: sluice]
    #[arg(long, env = "SLUICE_DATABASE_SCHEMA")]
    pub database_schema: Option<String>,
    /// Print the statements instead of running them
    #[arg(long)]
    pub print: bool,
}

/// `sluice size`.
#[derive(Debug, Args)]
pub struct SizeArgs {
    /// Peak arrival rate including retries, deliveries per second.
    #[arg(long)]
    pub rate: f64,
    /// Mean service time (lease to settle), seconds.
    #[arg(long = "service-time")]
    pub service_time: f64,
    /// Queue-wait target, seconds: the mean, or with --percentile that percentile.
    #[arg(long = "target-wait")]
    pub target_wait: f64,
    /// Make the target a percentile of the wait (e.g. 95), not the mean.
    #[arg(long)]
    pub percentile: Option<f64>,
    /// Square-root staffing β, 1–2.
    #[arg(long, default_value_t = 1.5)]
    pub beta: f64,
    /// Outage-surge arrival rate, per second.
    #[arg(long = "surge-rate", requires = "surge_service_time")]
    pub surge_rate: Option<f64>,
    /// Outage-surge mean service time, seconds.
    #[arg(long = "surge-service-time", requires = "surge_rate")]
    pub surge_service_time: Option<f64>,
    /// Concurrent tasks per process.
    #[arg(long = "tasks-per-process", default_value_t = 160)]
    pub tasks_per_process: u32,
    /// Processes per pod.
    #[arg(long = "processes-per-pod", default_value_t = 4)]
    pub processes_per_pod: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `sluice receive`.
#[derive(Debug, Args)]
pub struct ReceiveArgs {
    /// Address to listen on (HTTP, when not reading --from a broker).
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub listen: std::net::SocketAddr,
    /// The endpoint's signing secret (`whsec_…`) to verify `v1` signatures with.
    #[arg(long, env = "SLUICE_RECEIVE_SECRET", conflicts_with = "public_key")]
    pub secret: Option<String>,
    /// The endpoint's public key (`whpk_…`) to verify `v1a` (Ed25519) signatures with.
    #[arg(long, env = "SLUICE_RECEIVE_PUBLIC_KEY")]
    pub public_key: Option<String>,
    /// Consume from a broker instead of listening for HTTP: `amqp://user:password@host:5672/%2f`
    /// (with --queue), `nats://host:4222` (with --subject) or `redis://host:6379/0` (with
    /// --stream). What to read is made if missing; a message is acknowledged once it verifies.
    #[arg(long, value_name = "URL")]
    pub from: Option<String>,
    /// The RabbitMQ queue to consume (a destination's routing key on the default exchange).
    #[arg(long, requires = "from", conflicts_with_all = ["subject", "stream"])]
    pub queue: Option<String>,
    /// The NATS JetStream subject to consume.
    #[arg(long, requires = "from", conflicts_with = "stream")]
    pub subject: Option<String>,
    /// The Redis stream to consume (as consumer group `sluice-receive`).
    #[arg(long, requires = "from")]
    pub stream: Option<String>,
}
