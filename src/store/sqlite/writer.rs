//! The writer thread's group commit: it drains the write jobs waiting, runs each in its own
//! savepoint of one transaction, commits once, and only then answers each job.

use crossbeam_channel::Receiver;
use rusqlite::Connection;

use super::errors::db;
use crate::store::{StoreError, StoreResult};

/// How many jobs one group commit may carry.
const GROUP_COMMIT_MAX: usize = 512;

/// How a write job is answered once its group has committed (or failed).
pub(super) type Completion = Box<dyn FnOnce(Result<(), StoreError>) + Send>;
/// A write job: runs on the writer's connection, or is told why it cannot run; returns how to
/// answer once the group has committed, and its own error if it failed.
pub(super) type WriteJob =
    Box<dyn FnOnce(Result<&Connection, &StoreError>) -> (Completion, Option<StoreError>) + Send>;

/// Run one job inside a savepoint so that its failure rolls back only its own writes.
pub(super) fn savepoint<T>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> StoreResult<T>,
) -> StoreResult<T> {
    conn.execute_batch("SAVEPOINT job").map_err(db)?;
    let result = f(conn);
    if result.is_err() && conn.is_autocommit() {
        // SQLite already rolled back the whole transaction (see `writer_loop`).
        return result;
    }
    let end = if result.is_ok() {
        conn.execute_batch("RELEASE job")
    } else {
        conn.execute_batch("ROLLBACK TO job; RELEASE job")
    };
    match end {
        Ok(()) => result,
        Err(e) => result.and(Err(db(e))),
    }
}

pub(super) fn writer_loop(conn: Connection, jobs: Receiver<WriteJob>) {
    let mut batch: Vec<WriteJob> = Vec::with_capacity(GROUP_COMMIT_MAX);
    let mut done: Vec<Completion> = Vec::with_capacity(GROUP_COMMIT_MAX);
    while let Ok(first) = jobs.recv() {
        batch.push(first);
        while batch.len() < GROUP_COMMIT_MAX {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let mut open = false;
        for job in batch.drain(..) {
            if !open {
                if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
                    let e = db(e).context("cannot begin a transaction");
                    tracing::error!(error = %e, "sqlite: cannot begin a transaction");
                    (job(Err(&e)).0)(Ok(()));
                    continue;
                }
                open = true;
            }
            let (completion, failed) = job(Ok(&conn));
            done.push(completion);
            if conn.is_autocommit() {
                // Some errors (SQLITE_FULL, SQLITE_IOERR, SQLITE_BUSY, SQLITE_NOMEM) make SQLite
                // roll back the whole transaction, not just the failing job's savepoint: the
                // jobs before it in this group are undone and are told so, with its cause; the
                // jobs after it start a new transaction rather than run outside one.
                let cause = failed
                    .unwrap_or_else(|| {
                        StoreError::Unavailable("sqlite rolled the transaction back".into())
                    })
                    .context("rolled back with its group commit");
                for completion in done.drain(..) {
                    completion(Err(cause.clone()));
                }
                open = false;
            }
        }
        if !open {
            continue;
        }
        // A failed COMMIT keeps its cause: a full disk (the WAL cannot grow) is `Full`.
        let committed = conn.execute_batch("COMMIT").map_err(|e| {
            let _ = conn.execute_batch("ROLLBACK");
            match db(e) {
                StoreError::Database(m) | StoreError::Conflict(m) => {
                    StoreError::Unavailable(format!("commit failed: {m}"))
                }
                other => other.context("commit failed"),
            }
        });
        for completion in done.drain(..) {
            completion(committed.clone());
        }
    }
}
