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

/// Options for the PostgreSQL driver.
#[derive(Debug, Clone, Copy)]
pub struct PostgresOptions {
    /// The bound on ordinary work: the server-side `statement_timeout` of every pooled
    /// connection, the connect timeout, and how long to wait for a pooled connection. `serve`
    /// sets it to `--store-deadline`, so the server stops what the client stopped waiting for.
    /// Migrations run without a statement timeout and retention purges with
    /// [`MAINTENANCE_DEADLINE`](crate::store::deadline::MAINTENANCE_DEADLINE).
    pub deadline: Duration,
}

impl Default for PostgresOptions {
    /// 30 s: for one-off commands (`migrate`, `plan`) and tests, which read more than a request.
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(30),
        }
    }
}

/// Bound every connection: connect timeout (unless the URL sets one), TCP keepalive and user
/// timeout, and server-side statement and idle-in-transaction timeouts. Options already in
/// the URL come after ours, so an operator's explicit `-c statement_timeout=…` wins.
pub(super) fn configure(config: &mut tokio_postgres::Config, options: PostgresOptions) {
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
        IDLE_IN_TRANSACTION_TIMEOUT.as_millis()
    );
    let all = match config.get_options() {
        Some(theirs) if !theirs.trim().is_empty() => format!("{ours} {theirs}"),
        _ => ours,
    };
    config.options(all);
    if config.get_application_name().is_none() {
        config.application_name("sluice");
    }
}
