//! One shutdown for the whole process: a root cancellation token, a child token per phase, and
//! the task tracker every long-lived task is spawned on.
//!
//! The phases run in order, each started by whoever drives the drain (the dispatcher, then the
//! `sluice serve` wiring):
//! 1. [`Shutdown::stop_claiming`]: drain begins. No new claims, `/readyz` answers 503, the
//!    heartbeat says draining, and admission turns deliveries away.
//! 2. [`Shutdown::begin_drain`]: the claim in progress has ended; the upkeep tasks (reaper,
//!    auto-sizer, throttle watch) stop while attempts in flight get their grace period.
//! 3. [`Shutdown::abandon_attempts`]: the grace period is over; attempts still running are
//!    dropped and their deliveries released.
//! 4. [`Shutdown::stop`]: everything else (the settler, the HTTP listeners) stops.
//!
//! Each phase's token is a child of the root, so stopping cancels every phase not yet begun.

use std::future::Future;

use tokio::task::JoinHandle;
use tokio_util::sync::{
    CancellationToken, DropGuard, WaitForCancellationFuture, WaitForCancellationFutureOwned,
};
use tokio_util::task::TaskTracker;

/// A phase of the shutdown: what a task spawned with [`Shutdown::spawn_until`] runs until.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Claiming stops: drain has begun.
    StopClaiming,
    /// The claim in progress has ended; in-flight attempts have their grace period.
    Drain,
    /// The grace period is over: attempts still running are dropped.
    Abandon,
    /// Everything stops.
    Stop,
}

/// The process's shutdown: cheap to clone, every clone the same shutdown.
#[derive(Debug, Clone)]
pub struct Shutdown {
    root: CancellationToken,
    stop_claiming: CancellationToken,
    drain: CancellationToken,
    abandon: CancellationToken,
    tasks: TaskTracker,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// A shutdown not yet begun.
    pub fn new() -> Self {
        let root = CancellationToken::new();
        Self {
            stop_claiming: root.child_token(),
            drain: root.child_token(),
            abandon: root.child_token(),
            root,
            tasks: TaskTracker::new(),
        }
    }

    fn token(&self, phase: Phase) -> &CancellationToken {
        match phase {
            Phase::StopClaiming => &self.stop_claiming,
            Phase::Drain => &self.drain,
            Phase::Abandon => &self.abandon,
            Phase::Stop => &self.root,
        }
    }

    /// Has `phase` begun?
    pub fn reached(&self, phase: Phase) -> bool {
        self.token(phase).is_cancelled()
    }

    /// Resolves once `phase` has begun.
    pub fn until(&self, phase: Phase) -> WaitForCancellationFuture<'_> {
        self.token(phase).cancelled()
    }

    /// Resolves once `phase` has begun; owns what it waits on, so it can be moved into a task.
    pub fn until_owned(&self, phase: Phase) -> WaitForCancellationFutureOwned {
        self.token(phase).clone().cancelled_owned()
    }

    /// Has drain begun (claiming stopped)?
    pub fn is_draining(&self) -> bool {
        self.reached(Phase::StopClaiming)
    }

    /// Begin the drain: stop claiming.
    pub fn stop_claiming(&self) {
        self.stop_claiming.cancel();
    }

    /// The claim in progress has ended: stop the upkeep tasks.
    pub fn begin_drain(&self) {
        self.drain.cancel();
    }

    /// The grace period is over: drop the attempts still running.
    pub fn abandon_attempts(&self) {
        self.abandon.cancel();
    }

    /// Stop everything: every phase not yet begun begins.
    pub fn stop(&self) {
        self.root.cancel();
    }

    /// A guard that begins the drain when dropped (unless disarmed by dropping it through
    /// [`DropGuard::disarm`]).
    pub fn stop_claiming_on_drop(&self) -> DropGuard {
        self.stop_claiming.clone().drop_guard()
    }

    /// Spawn `task` on the tracker, to run until it ends or `phase` begins (then it is dropped
    /// at its next await, as an abort would): `None` when it was stopped.
    pub fn spawn_until<F>(&self, phase: Phase, task: F) -> JoinHandle<Option<F::Output>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let token = self.token(phase).clone();
        self.tasks
            .spawn(async move { token.run_until_cancelled_owned(task).await })
    }

    /// Spawn `task` on the tracker; it stops by itself, told by the phases it watches.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tasks.spawn(task)
    }

    /// Stop everything and wait until every task on the tracker has ended.
    pub async fn stopped(&self) {
        self.stop();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Phases begin one at a time, and stopping begins every one not yet begun.
    #[tokio::test]
    async fn phases_begin_in_turn_and_stop_begins_the_rest() {
        let shutdown = Shutdown::new();
        let upkeep = shutdown.spawn_until(Phase::Drain, std::future::pending::<()>());
        let settler = shutdown.spawn_until(Phase::Stop, std::future::pending::<()>());
        let finishes = shutdown.spawn_until(Phase::Stop, async { 7 });
        assert_eq!(finishes.await.unwrap(), Some(7));
        shutdown.stop_claiming();
        assert!(shutdown.is_draining());
        assert!(!shutdown.reached(Phase::Drain));
        shutdown.begin_drain();
        assert_eq!(upkeep.await.unwrap(), None);
        assert!(!settler.is_finished());
        assert!(!shutdown.reached(Phase::Abandon));
        shutdown.stopped().await;
        assert!(shutdown.reached(Phase::Abandon));
        assert_eq!(settler.await.unwrap(), None);
    }

    /// Dropping the guard begins the drain, as dropping the handle of a running sluice does.
    #[test]
    fn dropping_the_guard_stops_claiming() {
        let shutdown = Shutdown::new();
        drop(shutdown.stop_claiming_on_drop());
        assert!(shutdown.is_draining());
        assert!(!shutdown.reached(Phase::Stop));
    }
}
