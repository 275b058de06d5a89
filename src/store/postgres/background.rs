//! The driver's work in the background: announcing new work to other processes (`NOTIFY`),
//! relaying their announcements to the local dispatcher (`LISTEN`), and keeping the due table's
//! dead rows few.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio_postgres::{AsyncMessage, NoTls};

use super::{PoolTimeouts, WORK_CHANNEL, errors, queries};

/// Due-table rows written since they were last vacuumed, and whether a vacuum is running.
///
/// Claims read the due tables from their oldest end, which is where the dead versions of the
/// rows they rotate and drop gather; autovacuum looks at a database once a minute, by which time
/// a busy dispatcher has left hundreds of thousands there and every claim wades through them (a
/// drain slowed down as it went), and a server may run without it at all. The tenants' table is
/// rewritten by every claim (each charge moves a tenant's pass): a 1,000 s soak on a PostgreSQL
/// without autovacuum left 150,000 dead versions of its 6 rows. So the store vacuums both tables
/// itself once enough rows changed, at most once a second, one vacuum at a time per process
/// (`SKIP_LOCKED`: never waiting on another process's).
#[derive(Default)]
pub(super) struct DueVacuum {
    pub(super) written: std::sync::atomic::AtomicU64,
    pub(super) running: std::sync::atomic::AtomicBool,
    last: std::sync::Mutex<Option<std::time::Instant>>,
}

/// Due-table rows written before a vacuum is worth it.
const DUE_VACUUM_AFTER: u64 = 2_000;

impl DueVacuum {
    /// Count `rows` written; true when a vacuum should start now (and it is then marked running).
    pub(super) fn wrote(&self, rows: u64) -> bool {
        use std::sync::atomic::Ordering;
        let total = self.written.fetch_add(rows, Ordering::Relaxed) + rows;
        if total < DUE_VACUUM_AFTER || self.running.load(Ordering::Relaxed) {
            return false;
        }
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|at| at.elapsed() < Duration::from_secs(1)) {
            return false;
        }
        if self.running.swap(true, Ordering::AcqRel) {
            return false;
        }
        *last = Some(std::time::Instant::now());
        self.written.store(0, Ordering::Relaxed);
        true
    }
}

/// The queue tables' first statistics, taken by this process once it has written enough.
///
/// The hot statements run generic plans (see `options::configure`), which PostgreSQL builds per
/// connection from what it knows of each table when the statement is first run. On a queue that
/// was empty then (a new install, a restored schema, a bench's fresh database) it knows "10
/// pages": a settle's generic plan reads `deliveries` from end to end rather than by key, and
/// keeps doing so while the table grows to hundreds of thousands of rows, until autovacuum's first
/// ANALYZE (a minute or more later) invalidates the plans: every settle is then a sequential
/// scan, and the backlog grows behind it (BENCHMARKS.md, the PostgreSQL section, has the
/// figures). So once this process has written [`FIRST_ANALYZE_AFTER`] deliveries it analyzes
/// the queue tables once itself: the new statistics, and the invalidation that comes with them,
/// make every connection plan its statements again, by key. Later statistics are autovacuum's,
/// and a process that starts on a grown queue (statistics of at least that many deliveries)
/// takes none: analyzing months of history costs server CPU in the middle of whatever the
/// process does first.
#[derive(Default)]
pub(super) struct FirstAnalyze {
    written: std::sync::atomic::AtomicU64,
}

/// Deliveries written by this process before it analyzes the queue tables.
pub(super) const FIRST_ANALYZE_AFTER: u64 = 5_000;

impl FirstAnalyze {
    /// Count `deliveries` written; true exactly once: for the write that crosses
    /// [`FIRST_ANALYZE_AFTER`].
    pub(super) fn wrote(&self, deliveries: u64) -> bool {
        let before = self
            .written
            .fetch_add(deliveries, std::sync::atomic::Ordering::Relaxed);
        before < FIRST_ANALYZE_AFTER && before + deliveries >= FIRST_ANALYZE_AFTER
    }

    /// The queue already has the statistics of a grown table: no first analysis.
    pub(super) fn skip(&self) {
        self.written
            .fetch_max(FIRST_ANALYZE_AFTER, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Do `deliveries`' statistics already count at least [`FIRST_ANALYZE_AFTER`] rows (an
/// ANALYZE or VACUUM saw a grown queue)? A failed read answers no: the first analysis runs.
pub(super) async fn grown(pool: &Pool) -> bool {
    let Ok(client) = pool.get().await else {
        return false;
    };
    client
        .query_opt(
            "SELECT c.reltuples FROM pg_class c WHERE c.relname = 'deliveries' \
             AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())",
            &[],
        )
        .await
        .ok()
        .flatten()
        .is_some_and(|r| f64::from(r.get::<_, f32>(0)) >= FIRST_ANALYZE_AFTER as f64)
}

/// Run one maintenance statement (a vacuum, an analysis) on a pooled connection, off the path
/// of whatever wrote the rows it maintains; a failure is logged, never raised (the next one
/// comes, or autovacuum does the work).
pub(super) async fn maintain(pool: Pool, statement: &'static str) {
    if let Ok(client) = pool.get().await
        && let Err(e) = client.batch_execute(statement).await
    {
        tracing::warn!(error = %errors::cause(&e), statement, "postgres: maintenance not done");
    }
}

/// The tables autovacuum leaves alone: all of them when the server runs with `autovacuum = off`,
/// or those with `autovacuum_enabled = false` of their own.
const UNVACUUMED: &str = "SELECT c.relname FROM pg_class c \
     WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema()) \
     AND c.relname IN ('deliveries', 'messages', 'attempts') \
     AND (NOT current_setting('autovacuum')::bool \
          OR 'autovacuum_enabled=false' = ANY(coalesce(c.reloptions, '{}'))) \
     ORDER BY c.relname";

/// Warn when autovacuum will not look after the queue's big tables. sluice vacuums only its
/// small due tables itself ([`DueVacuum`]); without autovacuum the deliveries, messages and
/// attempts tables keep every dead row version (each delivery is rewritten twice, the purge
/// deletes rows) and their statistics stay those of [`FirstAnalyze`]: a soak of 1,000 s on a
/// server without it ended with twice as many dead deliveries as live ones, and grows without
/// bound. Not refused: a server may have its own vacuum schedule.
pub(super) async fn warn_without_autovacuum(pool: &Pool) {
    let Ok(client) = pool.get().await else {
        return;
    };
    match client.query(UNVACUUMED, &[]).await {
        Ok(rows) if !rows.is_empty() => {
            let tables: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
            tracing::warn!(
                tables = %tables.join(", "),
                "postgres: autovacuum is off for these tables (the server's `autovacuum` or the \
                 tables' `autovacuum_enabled`): they will keep every dead row version and stale \
                 planner statistics unless they are vacuumed and analyzed on a schedule"
            );
        }
        Ok(_) => {}
        Err(e) => tracing::debug!(error = %errors::cause(&e), "postgres: autovacuum not checked"),
    }
}

/// Send `NOTIFY` for enqueues that have committed, one at a time, coalescing requests that
/// arrive meanwhile (the channel holds one pending request).
///
/// Not inside the enqueue transaction: PostgreSQL serialises the commits of all transactions
/// that notify (a global lock held through the commit's WAL flush), which would turn concurrent
/// enqueues into one fsync each in turn. Each NOTIFY is bounded
/// by the deadline, so a hung database cannot park this task. Ends when the store is dropped.
pub(super) async fn announce(
    pool: Pool,
    mut requests: tokio::sync::mpsc::Receiver<()>,
    deadline: Duration,
    target: Arc<str>,
    timeouts: PoolTimeouts,
    instance: Arc<str>,
) {
    while requests.recv().await.is_some() {
        let sent = super::deadline::within(deadline, async {
            match pool.get().await {
                Ok(client) => queries::notify(&client, &instance).await,
                Err(e) => Err(errors::pool(e, &target, &timeouts)),
            }
        })
        .await;
        if let Err(e) = sent {
            tracing::debug!(error = %e, "postgres: cannot announce new work");
        }
        // At most one announcement per interval: requests meanwhile wait as one (the channel
        // holds one), so a stream of small enqueue batches costs the server one NOTIFY per
        // interval, not one per batch; other processes hear of new work that much later at most.
        tokio::time::sleep(ANNOUNCE_INTERVAL).await;
    }
}

/// The shortest time between two announcements of new work.
const ANNOUNCE_INTERVAL: Duration = Duration::from_millis(10);

/// Keep a LISTEN connection open and wake the local dispatcher on every notification from
/// another process (this one's own woke it directly); reconnect after a failure (a missed
/// notification only costs one idle poll).
pub(super) async fn listen(
    config: tokio_postgres::Config,
    signal: Arc<Notify>,
    instance: Arc<str>,
    pid: tokio::sync::watch::Sender<i32>,
) {
    loop {
        match config.connect(NoTls).await {
            Ok((client, mut connection)) => {
                let mut messages =
                    futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
                // The pid first: LISTEN stays the connection's last statement, which is how
                // pg_stat_activity shows a listener.
                let listening = async {
                    let row = client.query_one("SELECT pg_backend_pid()", &[]).await?;
                    client
                        .batch_execute(&format!("LISTEN {WORK_CHANNEL}"))
                        .await?;
                    Ok::<i32, tokio_postgres::Error>(row.get(0))
                };
                // The connection must be polled for the LISTEN to complete.
                let mut listening = std::pin::pin!(listening);
                let mut ready = false;
                loop {
                    tokio::select! {
                        r = &mut listening, if !ready => {
                            let Ok(backend) = r else { break };
                            pid.send_replace(backend);
                            ready = true;
                        }
                        m = messages.next() => match m {
                            Some(Ok(AsyncMessage::Notification(n))) => {
                                if n.payload() != &*instance {
                                    signal.notify_one();
                                }
                            }
                            Some(Ok(_)) => {}
                            Some(Err(_)) | None => break,
                        }
                    }
                }
            }
            Err(e) => {
                tracing::debug!(error = %errors::cause(&e), "postgres listener cannot connect")
            }
        }
        pid.send_replace(0);
        // Work may have arrived while we were not listening.
        signal.notify_one();
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_analysis_starts_once_enough_deliveries_are_written() {
        let first = FirstAnalyze::default();
        assert!(!first.wrote(FIRST_ANALYZE_AFTER - 1));
        assert!(!first.wrote(0));
        assert!(first.wrote(1));
        assert!(!first.wrote(FIRST_ANALYZE_AFTER));
    }
}
