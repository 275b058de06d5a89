//! How every PostgreSQL connection is bounded: the options `serve` passes (the store
//! deadline), and what they set on each connection so that no wait on the database is endless.

use std::time::Duration;

/// TCP keepalive: an idle connection to a peer that vanished (a partition, a failover to a new
/// address) is found dead after about idle + interval x retries = 60 s, not the kernel's 2 h.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_RETRIES: u32 = 3;
/// Data sent and not acknowledged for this long closes the connection (keepalive only probes
/// idle connections; a busy one would otherwise retransmit for about 15 minutes).
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);
/// The server ends a transaction left idle this long (a client frozen mid-transaction would
/// otherwise hold its row locks, and its leases' rows, indefinitely).
const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// The schema sluice's tables live in unless `--database-schema` names another: not `public`,
/// so sluice can share an application's database without its `tenants`, `messages` or
/// `settings` meeting the application's.
pub const DEFAULT_SCHEMA: &str = "sluice";

/// Options for the PostgreSQL driver.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// The bound on ordinary work: the server-side `statement_timeout` of every pooled
    /// connection, the connect timeout, and how long to wait for a pooled connection. `serve`
    /// sets it to `--store-deadline`, so the server stops what the client stopped waiting for.
    /// Migrations run without a statement timeout and retention purges with
    /// [`MAINTENANCE_DEADLINE`](crate::store::deadline::MAINTENANCE_DEADLINE).
    pub deadline: Duration,
    /// The schema of sluice's tables and functions (see [`schema_problem`] for what is
    /// accepted): created when missing, and every connection's `search_path`, so the statements
    /// stay unqualified.
    pub schema: String,
}

impl Default for PostgresOptions {
    /// 30 s: for one-off commands (`migrate`, `plan`) and tests, which read more than a request;
    /// the schema [`DEFAULT_SCHEMA`].
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(30),
            schema: DEFAULT_SCHEMA.to_owned(),
        }
    }
}

/// Why `schema` cannot name sluice's schema, if it cannot: a lower-case SQL identifier
/// (`a-z`, `0-9`, `_`, not starting with a digit, at most 63 bytes), so it is written into
/// statements and connection options without quoting, and is never a system schema.
pub fn schema_problem(schema: &str) -> Option<&'static str> {
    let identifier = !schema.is_empty()
        && schema.len() <= 63
        && !schema.starts_with(|c: char| c.is_ascii_digit())
        && schema
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !identifier {
        Some("a lower-case identifier of a-z, 0-9 and _ (not starting with a digit), 1–63 long")
    } else if schema.starts_with("pg_") || schema == "information_schema" {
        Some("a schema of its own, not a system schema (pg_*, information_schema)")
    } else {
        None
    }
}

/// Bound every connection, and put it in sluice's schema: connect timeout (unless the URL sets
/// one), TCP keepalive and user timeout, server-side statement and idle-in-transaction
/// timeouts, the search path. Options already in the URL come after ours, so an operator's
/// explicit `-c statement_timeout=…` wins (all but the search path: `--database-schema`'s).
pub(super) fn configure(config: &mut tokio_postgres::Config, options: &PostgresOptions) {
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(options.deadline);
    }
    config
        .keepalives(true)
        .keepalives_idle(KEEPALIVE_IDLE)
        .keepalives_interval(KEEPALIVE_INTERVAL)
        .keepalives_retries(KEEPALIVE_RETRIES)
        .tcp_user_timeout(TCP_USER_TIMEOUT);
    // Generic plans: the hot statements reach every row by key (see `queries`), so planning
    // them again for each execution's parameters (a custom plan, what PostgreSQL does first)
    // only costs CPU: about a tenth of the server's, measured with perf. A generic plan made
    // while the queue is young would keep a sequential scan as it grows: the store analyzes a
    // young queue once (see `background::FirstAnalyze`).
    let ours = format!(
        "-c statement_timeout={} -c idle_in_transaction_session_timeout={} \
         -c plan_cache_mode=force_generic_plan",
        options.deadline.as_millis().max(1),
        IDLE_IN_TRANSACTION_TIMEOUT.as_millis(),
    );
    // The search path comes last, so `--database-schema` wins over a `search_path` in the URL:
    // sluice's schema, then `pg_temp` named explicitly (last), so a temporary table can never
    // stand in for one of sluice's (`send_message`, a `SECURITY DEFINER` function, takes this
    // path as its own: see migration 19).
    let path = format!("-c search_path={},pg_temp", options.schema);
    let all = match config.get_options() {
        Some(theirs) if !theirs.trim().is_empty() => format!("{ours} {theirs} {path}"),
        _ => format!("{ours} {path}"),
    };
    config.options(all);
    if config.get_application_name().is_none() {
        config.application_name("sluice");
    }
}
