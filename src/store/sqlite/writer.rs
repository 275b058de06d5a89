//! The writer thread's group commit: it drains the write jobs waiting, runs each in its own
//! savepoint of one transaction, commits once, and only then answers each job; enqueues and
//! claims first ([`Queues`]).

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

/// Bulk jobs (settlements, reaping, everything but enqueues and claims) one group commit runs
/// at most; the urgent ones waiting run first, and any arriving between two jobs run next.
const BULK_PER_GROUP: usize = 8;

/// The writer's two queues: latency first. A producer's enqueue and a dispatcher's claim are
/// what a waiting tenant's latency is made of; a settle batch can wait a few milliseconds
/// (its slots are free already, its lease has seconds left). So a group commit runs every
/// urgent job waiting, then bulk jobs one at a time up to [`BULK_PER_GROUP`], taking any urgent
/// job that arrived meanwhile before the next, and commits early once one has: an enqueue never
/// waits behind a long run of settle batches, and settles still run in every group (a steady
/// stream of claims cannot starve them).
pub(super) struct Queues {
    pub(super) urgent: Receiver<WriteJob>,
    pub(super) bulk: Receiver<WriteJob>,
}

impl Queues {
    /// The next job to start a group with, urgent first (and whether it is); `None` when both
    /// are closed.
    fn first(&self) -> Option<(WriteJob, bool)> {
        if let Ok(job) = self.urgent.try_recv() {
            return Some((job, true));
        }
        crossbeam_channel::select! {
            recv(self.urgent) -> job => match job {
                Ok(job) => Some((job, true)),
                Err(_) => self.bulk.recv().ok().map(|job| (job, false)),
            },
            recv(self.bulk) -> job => match job {
                Ok(job) => Some((job, false)),
                Err(_) => self.urgent.recv().ok().map(|job| (job, true)),
            },
        }
    }
}

pub(super) fn writer_loop(conn: Connection, queues: Queues) {
    let mut done: Vec<Completion> = Vec::with_capacity(GROUP_COMMIT_MAX);
    while let Some((first, mut urgent_ran)) = queues.first() {
        let mut group = Group {
            conn: &conn,
            open: false,
            done: &mut done,
        };
        group.run(first);
        let mut jobs = 1;
        let mut bulk = usize::from(!urgent_ran);
        while jobs < GROUP_COMMIT_MAX {
            if let Ok(job) = queues.urgent.try_recv() {
                group.run(job);
                urgent_ran = true;
            } else if bulk < BULK_PER_GROUP
                && (bulk == 0 || !urgent_ran)
                && let Ok(job) = queues.bulk.try_recv()
            {
                group.run(job);
                bulk += 1;
            } else {
                break;
            }
            jobs += 1;
        }
        group.commit();
    }
}

/// One group commit: jobs in their savepoints inside one transaction, answered at its end.
struct Group<'a> {
    conn: &'a Connection,
    open: bool,
    done: &'a mut Vec<Completion>,
}

impl Group<'_> {
    fn run(&mut self, job: WriteJob) {
        let conn = self.conn;
        if !self.open {
            if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
                let e = db(e).context("cannot begin a transaction");
                tracing::error!(error = %e, "sqlite: cannot begin a transaction");
                (job(Err(&e)).0)(Ok(()));
                return;
            }
            self.open = true;
        }
        let (completion, failed) = job(Ok(conn));
        self.done.push(completion);
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
            for completion in self.done.drain(..) {
                completion(Err(cause.clone()));
            }
            self.open = false;
        }
    }

    fn commit(self) {
        if !self.open {
            return;
        }
        let conn = self.conn;
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
        for completion in self.done.drain(..) {
            completion(committed.clone());
        }
    }
}
