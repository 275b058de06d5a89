//! The soak's fleet under faults: its processes (the API, the dispatchers), its `redis-server`
//! and the database proxy, each fault inflicted and undone, and every exit nobody caused.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use sluice_testkit::RedisServer;
use sluice_testkit::freeze_proxy::FreezeProxy;
use tokio::time::Instant;

use super::POLL;
use super::schedule::{Kind, Planned};
use super::verdicts::{Done, shed_in};
use crate::procs::{Fleet, Proc};
use crate::timeline::Timeline;

/// A process of the fleet and where it listens; `proc` is `None` while a fault keeps it down.
pub(super) struct Slot {
    pub(super) role: &'static str,
    pub(super) name: String,
    pub(super) port: u16,
    pub(super) proc: Option<Proc>,
    pub(super) starts: u32,
}

/// A process that exited without the schedule stopping it.
#[derive(Debug, Clone)]
pub(super) struct Exit {
    pub(super) name: String,
    pub(super) at_s: f64,
    pub(super) status: String,
}

/// The fleet under faults: its processes (slot 0 the API, then the dispatchers), Redis and the
/// proxy, and every exit nobody caused.
pub(super) struct Rig {
    pub(super) fleet: Fleet,
    pub(super) http: reqwest::Client,
    pub(super) slots: Vec<Slot>,
    pub(super) redis: RedisServer,
    pub(super) redis_port: u16,
    pub(super) proxy: FreezeProxy,
    pub(super) timeline: Arc<Timeline>,
    pub(super) exits: Vec<Exit>,
    /// Deliveries shed at a full lane (and requeued), summed over the dispatchers' `/metrics`
    /// read just before each is stopped or killed and at the end: `(slow endpoint, all)`.
    pub(super) shed: (f64, f64),
    /// The slow endpoint's id.
    pub(super) slow_endpoint: String,
}

impl Rig {
    /// Record (and start again) every process that exited by itself.
    pub(super) fn poll_exits(&mut self) -> anyhow::Result<()> {
        let at_s = self.timeline.elapsed();
        for i in 0..self.slots.len() {
            let exited = match self.slots[i].proc.as_mut() {
                Some(p) => p.child.try_wait().ok().flatten(),
                None => None,
            };
            if let Some(status) = exited {
                let slot = &self.slots[i];
                self.exits.push(Exit {
                    name: slot.name.clone(),
                    at_s,
                    status: status.to_string(),
                });
                eprintln!(
                    "soak: {} exited by itself at {at_s:.1} s: {status}",
                    slot.name
                );
                self.slots[i].proc = None;
                self.start(i)?;
            }
        }
        Ok(())
    }

    /// Start slot `i`'s process (again), on its port; a new log file each time.
    pub(super) fn start(&mut self, i: usize) -> anyhow::Result<()> {
        let slot = &mut self.slots[i];
        let name = format!("{}.{}", slot.name, slot.starts);
        slot.starts += 1;
        slot.proc = Some(Proc::spawn_on(&self.fleet, slot.role, &name, slot.port)?);
        Ok(())
    }

    /// Start slot `i` and wait until it is ready, watching the others meanwhile.
    pub(super) async fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.start(i)?;
        let until = Instant::now() + Duration::from_secs(60);
        while Instant::now() < until {
            self.poll_exits()?;
            let url = format!("http://127.0.0.1:{}/readyz", self.slots[i].port);
            let ready = tokio::time::timeout(Duration::from_secs(1), self.http.get(&url).send())
                .await
                .is_ok_and(|r| r.is_ok_and(|r| r.status().is_success()));
            if ready {
                return Ok(());
            }
            tokio::time::sleep(POLL).await;
        }
        let said = self.slots[i].proc.as_ref().map(Proc::said);
        bail!(
            "{} never came back: {}",
            self.slots[i].name,
            said.unwrap_or_default()
        )
    }

    /// Wait until `t`, watching the processes.
    pub(super) async fn idle_until(&mut self, t: Instant) -> anyhow::Result<()> {
        loop {
            self.poll_exits()?;
            let now = Instant::now();
            if now >= t {
                return Ok(());
            }
            tokio::time::sleep((t - now).min(POLL)).await;
        }
    }

    pub(super) async fn idle(&mut self, d: Duration) -> anyhow::Result<()> {
        self.idle_until(Instant::now() + d).await
    }

    /// Add what slot `i`'s dispatcher shed since its start (its `/metrics`) to the total.
    pub(super) async fn count_shed(&mut self, i: usize) {
        let url = format!("http://127.0.0.1:{}/metrics", self.slots[i].port);
        let read = async {
            let text = self
                .http
                .get(&url)
                .bearer_auth(&self.fleet.admin_token)
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            Some(shed_in(&text, &self.slow_endpoint))
        };
        let (slow, all) = read.await.unwrap_or_default();
        self.shed.0 += slow;
        self.shed.1 += all;
    }

    /// Run one fault; returns it without `until_s` (set by the caller).
    pub(super) async fn inflict(&mut self, p: &Planned) -> anyhow::Result<Done> {
        let hold = Duration::from_secs_f64(p.hold_s);
        let start_s = self.timeline.elapsed();
        let mut drain = None;
        match p.kind {
            Kind::DispatcherKill | Kind::ApiKill => {
                let i = if p.kind == Kind::ApiKill {
                    0
                } else {
                    1 + p.target
                };
                if i > 0 {
                    self.count_shed(i).await;
                }
                if let Some(mut proc) = self.slots[i].proc.take() {
                    proc.kill9().await?;
                }
                self.idle(hold).await?;
                self.restart(i).await?;
            }
            Kind::DispatcherTerm => {
                let i = 1 + p.target;
                self.count_shed(i).await;
                if let Some(mut proc) = self.slots[i].proc.take() {
                    proc.sigterm().await?;
                    let deadline = Instant::now() + Duration::from_secs(120);
                    let status = loop {
                        self.poll_exits()?;
                        if let Some(status) = proc.child.try_wait().context("wait")? {
                            break Some(status);
                        }
                        if Instant::now() >= deadline {
                            let _ = proc.kill9().await;
                            break None;
                        }
                        tokio::time::sleep(POLL).await;
                    };
                    let ok = status.is_some_and(|s| s.success());
                    drain = Some((self.timeline.elapsed() - start_s, ok));
                }
                self.idle(hold).await?;
                self.restart(i).await?;
            }
            Kind::DbFreeze => {
                self.proxy.set_frozen(true);
                self.idle(hold).await?;
                self.proxy.set_frozen(false);
            }
            Kind::DbRestart => {
                self.proxy.set_down(true);
                self.idle(hold).await?;
                self.proxy.set_down(false);
            }
            Kind::RedisKill => {
                self.redis.stop();
                self.idle(hold).await?;
                self.redis = RedisServer::start_on(self.redis_port).await?;
            }
        }
        Ok(Done {
            kind: p.kind,
            target: p.target,
            start_s,
            end_s: self.timeline.elapsed(),
            until_s: f64::NAN,
            drain,
        })
    }

    /// SIGTERM every process still running; true when all exited cleanly within 60 s.
    pub(super) async fn stop(mut self) -> bool {
        let mut clean = true;
        for slot in &mut self.slots {
            if let Some(mut p) = slot.proc.take() {
                let stopped = p.sigterm().await.is_ok()
                    && tokio::time::timeout(Duration::from_secs(60), p.child.wait())
                        .await
                        .is_ok_and(|s| s.is_ok_and(|s| s.success()));
                clean &= stopped;
            }
        }
        self.redis.stop();
        clean
    }
}
