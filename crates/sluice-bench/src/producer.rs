//! The open-loop producer of the fleet scenarios (`fleet`, `soak`): one customer's messages at a
//! steady rate, each POST timed into the [`Timeline`] and each acknowledged message's id kept in
//! [`Acks`] by `(customer, seq)`, so the receivers' arrivals can be matched against it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::load;
use super::timeline::{Timeline, now_us};

/// What the API acknowledged: `(customer, seq)` → message id, and POST counters.
#[derive(Default)]
pub(crate) struct Acks {
    pub(crate) ids: Mutex<HashMap<(u64, u64), String>>,
    /// POSTs retried (any answer but 202/200, or none).
    pub(crate) retries: AtomicU64,
    /// Messages given up on (a 4xx that a retry cannot change, or the retry deadline).
    pub(crate) abandoned: AtomicU64,
    /// Per acknowledged message: how many POSTs it took and when (timeline seconds) the one
    /// acknowledged began, so latency can be read from that POST as well as from the first.
    pub(crate) posts: Mutex<HashMap<(u64, u64), (u32, f64)>>,
    /// Every POST that was not acknowledged: when it began and why (`status 503`, `timeout`,
    /// `connect`, `request`, `body`).
    pub(crate) failures: Mutex<Vec<(f64, String)>>,
}

impl Acks {
    /// The acknowledged ids so far.
    pub(crate) fn ids(&self) -> HashMap<(u64, u64), String> {
        self.ids.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn acknowledged(&self, key: (u64, u64), id: String) {
        self.ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, id);
    }
}

/// How each message is posted.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Posting {
    /// One POST, no `Idempotency-Key`; acknowledged only by a 202 (`fleet`).
    Once,
    /// POSTed with the `Idempotency-Key` `{key_prefix}-{customer}-{seq}` and retried with it
    /// (same body, backoff 100 ms doubling to 1 s) until answered 202 or 200, refused with a 4xx
    /// other than 408/429, or `give_up` passes (`soak`).
    Retried {
        key_prefix: &'static str,
        give_up: Instant,
    },
}

/// Whom a producer sends as, and where.
#[derive(Clone)]
pub(crate) struct Customer {
    pub(crate) http: reqwest::Client,
    /// The messages URL.
    pub(crate) url: Arc<str>,
    pub(crate) token: Arc<str>,
    /// The customer number in each payload (`c`).
    pub(crate) customer: u64,
    /// The timeline group its sends are counted in.
    pub(crate) group: usize,
}

/// Open-loop producer: `rate` messages/s as `who` until `until`, posted as `posting` says,
/// each payload `{"sent_at_us", "c", "seq"}`.
pub(crate) fn produce(
    who: Customer,
    rate: f64,
    until: Instant,
    posting: Posting,
    timeline: Arc<Timeline>,
    acks: Arc<Acks>,
) -> JoinHandle<()> {
    tokio::spawn(load::paced(rate, until, move |seq| {
        let (who, timeline, acks) = (who.clone(), timeline.clone(), acks.clone());
        async move {
            let body = format!(
                r#"{{"event_type":"bench.event","payload":{{"sent_at_us":{},"c":{},"seq":{seq}}}}}"#,
                now_us(),
                who.customer
            );
            match posting {
                Posting::Once => post_once(&who, seq, body, &timeline, &acks).await,
                Posting::Retried {
                    key_prefix,
                    give_up,
                } => {
                    let key = format!("{key_prefix}-{}-{seq}", who.customer);
                    post_retried(&who, seq, body, &key, give_up, &timeline, &acks).await;
                }
            }
        }
    }))
}

async fn post_once(who: &Customer, seq: u64, body: String, timeline: &Timeline, acks: &Acks) {
    let started = std::time::Instant::now();
    let id = match who
        .http
        .post(&*who.url)
        .bearer_auth(&*who.token)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
    {
        Ok(r) if r.status() == reqwest::StatusCode::ACCEPTED => r
            .json::<Value>()
            .await
            .ok()
            .and_then(|v| v["id"].as_str().map(str::to_owned)),
        _ => None,
    };
    timeline.sent(who.group, id.is_some(), started.elapsed());
    if let Some(id) = id {
        acks.acknowledged((who.customer, seq), id);
    }
}

async fn post_retried(
    who: &Customer,
    seq: u64,
    body: String,
    key: &str,
    give_up: Instant,
    timeline: &Timeline,
    acks: &Acks,
) {
    let mut backoff = Duration::from_millis(100);
    let mut tries = 0u32;
    loop {
        tries += 1;
        let started = std::time::Instant::now();
        let started_s = timeline.elapsed();
        let answer = who
            .http
            .post(&*who.url)
            .bearer_auth(&*who.token)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("idempotency-key", key)
            .timeout(Duration::from_secs(10))
            .body(body.clone())
            .send()
            .await;
        let status = answer.as_ref().ok().map(reqwest::Response::status);
        let failed = match &answer {
            Ok(_) => "",
            Err(e) if e.is_timeout() => "timeout",
            Err(e) if e.is_connect() => "connect",
            Err(e) if e.is_request() => "request",
            Err(_) => "other",
        };
        let id = match answer {
            Ok(r) if r.status().is_success() => r
                .json::<Value>()
                .await
                .ok()
                .and_then(|v| v["id"].as_str().map(str::to_owned)),
            _ => None,
        };
        timeline.sent(who.group, id.is_some(), started.elapsed());
        if let Some(id) = id {
            acks.acknowledged((who.customer, seq), id);
            acks.posts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert((who.customer, seq), (tries, started_s));
            return;
        }
        let why = match status {
            // A success whose body did not name the message.
            Some(s) if s.is_success() => "body".to_owned(),
            Some(s) => format!("status {}", s.as_u16()),
            None => failed.to_owned(),
        };
        acks.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((started_s, why));
        // A refusal a retry cannot change (a 4xx other than 408/429) is given up on.
        let hopeless =
            status.is_some_and(|s| s.is_client_error() && s.as_u16() != 408 && s.as_u16() != 429);
        if hopeless || Instant::now() >= give_up {
            acks.abandoned.fetch_add(1, Ordering::Relaxed);
            return;
        }
        acks.retries.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// A fleet scenario's load: healthy endpoints and their rate, one slow endpoint's answer time
/// and rate, and the lanes; each from its flag, or else the scenario's [`Defaults`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sizes {
    pub(crate) healthy: usize,
    pub(crate) healthy_rate: f64,
    pub(crate) slow_ms: u64,
    pub(crate) slow_rate: f64,
    pub(crate) lane: u32,
}

/// A scenario's load when its flags are left out: `(full, smoke)` pairs where the size differs.
pub(crate) struct Defaults {
    pub(crate) healthy: (usize, usize),
    pub(crate) healthy_rate: (f64, f64),
    pub(crate) slow_ms: u64,
    pub(crate) slow_rate: (f64, f64),
}

impl Sizes {
    /// The sizes from the flags, each left out taken from `defaults`.
    pub(crate) fn of(args: &crate::BenchArgs, defaults: Defaults) -> Self {
        let sized = |(full, smoke): (f64, f64)| args.sized(full, smoke);
        Self {
            healthy: args
                .endpoints
                .unwrap_or(args.sized(defaults.healthy.0, defaults.healthy.1)),
            healthy_rate: args.rate.unwrap_or(sized(defaults.healthy_rate)),
            slow_ms: args.slow_ms.unwrap_or(defaults.slow_ms),
            slow_rate: args.bad_rate.unwrap_or(sized(defaults.slow_rate)),
            lane: args.lane.unwrap_or(4),
        }
    }
}
