//! The `token answer` phase of `hostile`: a `sluice serve` process of its own
//! (the binary beside this one, embedded SQLite in a fresh directory, no Redis), whose endpoints
//! share one set of OAuth2 client credentials with a token URL answering `200` with a huge body:
//! one JSON object whose `access_token` fills it, sent chunked with no `Content-Length`, so only
//! a bounded read keeps it out of the process. What it costs is that process's peak resident
//! memory (`VmHWM`), read from `/proc`; the answer is generated as it is sent, so the bench holds
//! none of it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::Response;
use axum::routing::any;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::verdicts::attempt_kind;
use crate::BenchArgs;
use crate::harness::{Sluice, Tuning};
use crate::load::Api;
use crate::procs::{Proc, sluice_binary};
use crate::receiver::{self, Mode, WebhookIds};
use crate::sys;
use crate::timeline::Timeline;

/// Before the `access_token` string's characters.
const PREFIX: &[u8] = br#"{"access_token":""#;
/// After them: a well-formed answer but for its size.
const SUFFIX: &[u8] = br#"","token_type":"Bearer","expires_in":3600}"#;
/// The token's characters are sent in pieces of this many bytes.
const CHUNK: usize = 64 * 1024;
/// One chunk of the token's characters.
static FILLER: [u8; CHUNK] = [b'a'; CHUNK];

/// A token answer of `size` bytes in the pieces it is sent in: [`PREFIX`], the token's
/// characters in chunks of at most [`CHUNK`], [`SUFFIX`].
#[derive(Debug, Clone)]
pub(super) struct TokenAnswer {
    /// Bytes of the token's characters still to come.
    filler_left: u64,
    prefix_sent: bool,
    suffix_sent: bool,
}

impl TokenAnswer {
    /// An answer of `size` bytes in all (at least the prefix and suffix: an empty token).
    pub(super) fn new(size: u64) -> Self {
        let frame = (PREFIX.len() + SUFFIX.len()) as u64;
        Self {
            filler_left: size.saturating_sub(frame),
            prefix_sent: false,
            suffix_sent: false,
        }
    }
}

impl Iterator for TokenAnswer {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        if !self.prefix_sent {
            self.prefix_sent = true;
            return Some(Bytes::from_static(PREFIX));
        }
        if self.filler_left > 0 {
            let n = self.filler_left.min(CHUNK as u64) as usize;
            self.filler_left -= n as u64;
            return Some(Bytes::from_static(&FILLER[..n]));
        }
        if !self.suffix_sent {
            self.suffix_sent = true;
            return Some(Bytes::from_static(SUFFIX));
        }
        None
    }
}

/// A token endpoint on loopback answering every request with a [`TokenAnswer`] of `size`.
pub(super) struct TokenServer {
    /// `http://127.0.0.1:PORT/token`
    pub(super) url: String,
    /// Requests it was sent.
    pub(super) requests: Arc<AtomicU64>,
    /// Bytes of answers handed to the connection (what the client read, plus what the socket
    /// buffers held when it hung up).
    pub(super) bytes: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl TokenServer {
    /// Start it on a free port.
    pub(super) async fn start(size: u64) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("bind the token server")?;
        let url = format!("http://{}/token", listener.local_addr()?);
        let requests = Arc::new(AtomicU64::new(0));
        let bytes = Arc::new(AtomicU64::new(0));
        let (r, b) = (requests.clone(), bytes.clone());
        let app = Router::new().fallback(any(move || {
            r.fetch_add(1, Ordering::Relaxed);
            let b = b.clone();
            let pieces = TokenAnswer::new(size).map(move |piece| {
                b.fetch_add(piece.len() as u64, Ordering::Relaxed);
                Ok::<_, std::io::Error>(piece)
            });
            std::future::ready(
                Response::builder()
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(Body::from_stream(futures_util::stream::iter(pieces)))
                    .unwrap_or_default(),
            )
        }));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            url,
            requests,
            bytes,
            task,
        })
    }
}

impl Drop for TokenServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The sizes of the phase.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sizes {
    /// Bytes of the token answer.
    pub(super) answer_bytes: u64,
    /// Endpoints sharing the credentials.
    pub(super) endpoints: usize,
    /// Messages, each to every endpoint.
    pub(super) messages: u64,
    /// How long the process is watched after the messages are sent.
    pub(super) window: Duration,
    /// Its pool.
    pub(super) concurrency: u32,
}

/// What the phase measured.
#[derive(Debug, Clone, Default)]
pub(super) struct Outcome {
    /// The process's peak RSS once it was ready and its tenant and endpoints made, MiB.
    pub(super) at_rest_mib: Option<f64>,
    /// Its peak RSS at the end, MiB.
    pub(super) peak_mib: Option<f64>,
    /// Requests the token URL was sent.
    pub(super) token_requests: u64,
    /// Bytes of token answers handed to the connections.
    pub(super) answer_bytes_sent: u64,
    /// The endpoints' attempts, by kind.
    pub(super) attempts: BTreeMap<String, u64>,
    /// Requests the endpoints' receiver got.
    pub(super) received: u64,
}

/// Run the phase: start the process, the token server and a receiver, send the messages, watch
/// for `sizes.window`, read the process's peak RSS and the attempts, stop it.
pub(super) async fn run(args: &BenchArgs, sizes: Sizes) -> anyhow::Result<Outcome> {
    let binary = sluice_binary()?;
    let dir = tempfile::tempdir().context("a data directory for the token-answer phase")?;
    let admin_token = sluice::ids::new_token("sk_admin");
    let extra = vec!["--concurrency".to_owned(), sizes.concurrency.to_string()];
    let mut process = Proc::spawn_alone(&binary, dir.path(), &admin_token, "sluice", &extra)?;
    let outcome = watch(args, sizes, &mut process, &admin_token).await;
    let _ = process.kill9().await;
    outcome.with_context(|| format!("the sluice process said: {}", process.said()))
}

async fn watch(
    args: &BenchArgs,
    sizes: Sizes,
    process: &mut Proc,
    admin_token: &str,
) -> anyhow::Result<Outcome> {
    let pid = process
        .child
        .id()
        .context("the sluice process exited")?
        .to_string();
    process.wait_for(&reqwest::Client::new(), "/readyz").await?;
    let remote = BenchArgs {
        target: Some(process.base.clone()),
        admin_token: Some(admin_token.to_owned()),
        database_url: None,
        redis_url: None,
        dispatchers: None,
        ..args.clone()
    };
    let sluice = Sluice::start(&remote, &Tuning::default()).await?;
    let token = TokenServer::start(sizes.answer_bytes).await?;
    let timeline = Arc::new(Timeline::new(&["hostile"]));
    let ids = Arc::new(WebhookIds::default());
    let r = receiver::start_counted(Mode::Fast, timeline.clone(), 0, ids.clone()).await?;
    let tenant = sluice.tenant("hostile").await?;
    let mut endpoints = Vec::with_capacity(sizes.endpoints);
    for i in 0..sizes.endpoints {
        let body = serde_json::json!({
            "url": format!("{}/{i}", r.url()),
            "oauth2": {
                "token_url": token.url,
                "client_id": "hostile",
                "client_secret": "hostile-secret",
            },
        });
        endpoints.push(sluice.endpoint_with(&tenant, body).await?);
    }
    let at_rest_mib = sys::peak_rss_mib_of(&pid);
    let api = Api {
        http: sluice.http.clone(),
        url: sluice.messages_url().into(),
        timeline: timeline.clone(),
        event_types: None,
    };
    for seq in 0..sizes.messages {
        api.send(&tenant, 0, seq).await;
    }
    let pb = crate::watch::progress(args.json, "token answer", sizes.window.as_secs_f64());
    let until = Instant::now() + sizes.window;
    let started = Instant::now();
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(250)).await;
        pb.set_position(started.elapsed().as_secs());
    }
    pb.finish_and_clear();
    let peak_mib = sys::peak_rss_mib_of(&pid);
    let mut attempts = BTreeMap::new();
    for id in &endpoints {
        for a in sluice.endpoint_attempts(&tenant, id).await? {
            *attempts.entry(attempt_kind(&a)).or_default() += 1;
        }
    }
    Ok(Outcome {
        at_rest_mib,
        peak_mib,
        token_requests: token.requests.load(Ordering::Relaxed),
        answer_bytes_sent: token.bytes.load(Ordering::Relaxed),
        attempts,
        received: ids.requests(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_answer_is_one_json_object_of_the_size_asked_for() {
        for size in [0, 10, 100, CHUNK as u64 * 3 + 17] {
            let body: Vec<u8> = TokenAnswer::new(size).flat_map(|b| b.to_vec()).collect();
            let frame = PREFIX.len() + SUFFIX.len();
            assert_eq!(body.len() as u64, size.max(frame as u64), "size {size}");
            let v: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
            let token = v["access_token"].as_str().expect("a token");
            assert_eq!(token.len(), body.len() - frame);
            assert!(token.bytes().all(|c| c == b'a'));
            assert_eq!(v["expires_in"], 3600);
        }
    }

    #[test]
    fn a_token_answer_is_sent_in_bounded_pieces() {
        let size = 200_000_000;
        let (mut pieces, mut largest, mut total) = (0u64, 0, 0u64);
        for piece in TokenAnswer::new(size) {
            pieces += 1;
            largest = largest.max(piece.len());
            total += piece.len() as u64;
        }
        assert_eq!(total, size);
        assert!(largest <= CHUNK);
        let frame = (PREFIX.len() + SUFFIX.len()) as u64;
        assert_eq!(pieces, 2 + (size - frame).div_ceil(CHUNK as u64));
    }
}
