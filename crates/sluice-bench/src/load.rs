//! Producers: one API POST per event, the enqueue time stamped into the payload.
//!
//! Open-loop producers send at a set rate whatever the latency (a customer's traffic does not
//! wait for sluice); closed-loop producers send back to back, as fast as the API answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::timeline::{Timeline, now_us};

/// Most POSTs one open-loop producer keeps outstanding; beyond it, it waits (and says so by
/// falling behind its rate, which the summary reports as the achieved rate).
const OPEN_LOOP_IN_FLIGHT: usize = 256;

/// Open-loop pacing: call `send(seq)` for events 0, 1, 2 … at `rate` per second until `until`,
/// each on a task of its own, at most [`OPEN_LOOP_IN_FLIGHT`] outstanding; returns once the last
/// has finished, so counts taken after it are final.
pub(crate) async fn paced<F, Fut>(rate: f64, until: Instant, send: F)
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(OPEN_LOOP_IN_FLIGHT));
    let start = Instant::now();
    let mut sent = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while Instant::now() < until {
        tick.tick().await;
        let due = (start.elapsed().as_secs_f64() * rate) as u64;
        while sent < due && Instant::now() < until {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            let sending = send(sent);
            tokio::spawn(async move {
                sending.await;
                drop(permit);
            });
            sent += 1;
        }
    }
    let _ = permits.acquire_many(OPEN_LOOP_IN_FLIGHT as u32).await;
}

/// Where producers send.
#[derive(Clone)]
pub(crate) struct Api {
    /// Shared client.
    pub http: reqwest::Client,
    /// `…/v1/messages`
    pub url: Arc<str>,
    /// Where outcomes are counted.
    pub timeline: Arc<Timeline>,
    /// Event types `e.0` … `e.{n-1}`, one per event in turn (`seq % n`); `None`: every event is
    /// `bench.event`.
    pub event_types: Option<usize>,
}

impl Api {
    /// POST one event for `group` as the tenant `token`; true when accepted.
    pub(crate) async fn send(&self, token: &str, group: usize, seq: u64) -> bool {
        let body = match self.event_types {
            Some(n) => format!(
                r#"{{"event_type":"e.{}","payload":{{"sent_at_us":{},"seq":{seq}}}}}"#,
                seq % n.max(1) as u64,
                now_us()
            ),
            None => format!(
                r#"{{"event_type":"bench.event","payload":{{"sent_at_us":{},"seq":{seq}}}}}"#,
                now_us()
            ),
        };
        let started = std::time::Instant::now();
        let ok = self
            .http
            .post(&*self.url)
            .bearer_auth(token)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        self.timeline.sent(group, ok, started.elapsed());
        ok
    }

    /// Send `rate` events per second for `group` as `token` until `until`.
    pub(crate) fn open_loop(
        &self,
        token: String,
        group: usize,
        rate: f64,
        until: Instant,
    ) -> JoinHandle<()> {
        let api = self.clone();
        let token: Arc<str> = token.into();
        tokio::spawn(paced(rate, until, move |seq| {
            let (api, token) = (api.clone(), token.clone());
            async move {
                api.send(&token, group, seq).await;
            }
        }))
    }

    /// `producers` tasks POSTing back to back for `group`, spread over `tokens`, until `until`
    /// or until `limit` events were sent in all.
    pub(crate) fn closed_loop(
        &self,
        tokens: Vec<String>,
        group: usize,
        producers: usize,
        until: Instant,
        limit: Option<u64>,
    ) -> JoinHandle<()> {
        let api = self.clone();
        let tokens = Arc::new(tokens);
        let issued = Arc::new(AtomicU64::new(0));
        tokio::spawn(async move {
            let mut tasks = Vec::with_capacity(producers);
            for p in 0..producers {
                let (api, tokens, issued) = (api.clone(), tokens.clone(), issued.clone());
                tasks.push(tokio::spawn(async move {
                    let token = &tokens[p % tokens.len()];
                    while Instant::now() < until {
                        let seq = issued.fetch_add(1, Ordering::Relaxed);
                        if limit.is_some_and(|l| seq >= l) {
                            break;
                        }
                        if !api.send(token, group, seq).await {
                            // Do not spin on a failing API.
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    }
                }));
            }
            for t in tasks {
                let _ = t.await;
            }
        })
    }
}
