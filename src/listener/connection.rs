//! One HTTP connection under watch: how long its client may take to send a request's headers,
//! how long it may sit idle (or leave its response unread), and what it sees when hyper itself
//! refuses a request before the router could.
//!
//! hyper's own header timer starts whenever it waits for a head, idle keep-alive time
//! included, so it cannot give a short header timeout and a longer idle one; and it answers
//! malformed requests with bare, bodiless errors. So the connection's bytes pass through
//! [`WatchedIo`], which records progress and rewrites those bare errors as problem+json, and
//! [`watch`] closes the connection when a deadline derived from that progress passes.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use hyper_util::server::graceful::GracefulConnection;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::ListenerSettings;
use crate::web::problem::Problem;

/// No header clock running.
const NONE: u64 = u64::MAX;

/// What one connection is doing, as far as its deadlines are concerned.
pub struct Activity {
    opened: Instant,
    /// Requests handed to the service and not yet answered (hyper's HTTP/1 serves one at a time).
    busy: AtomicU32,
    /// Milliseconds since `opened` of the last byte read or written.
    last_progress_ms: AtomicU64,
    /// Milliseconds since `opened` when the current request's head began (or [`NONE`]).
    head_started_ms: AtomicU64,
    /// Whether any byte has arrived yet.
    heard: AtomicBool,
    wake: Notify,
}

impl Activity {
    /// A connection just accepted: its first request's headers are due within the header
    /// timeout from now.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            opened: Instant::now(),
            busy: AtomicU32::new(0),
            last_progress_ms: AtomicU64::new(0),
            head_started_ms: AtomicU64::new(0),
            heard: AtomicBool::new(false),
            wake: Notify::new(),
        })
    }

    fn now_ms(&self) -> u64 {
        self.opened.elapsed().as_millis() as u64
    }

    /// `n` bytes arrived from the client.
    pub(super) fn read(&self, n: usize) {
        if n == 0 {
            return;
        }
        let now = self.now_ms();
        self.last_progress_ms.store(now, Ordering::Relaxed);
        self.heard.store(true, Ordering::Release);
        // The first bytes after an exchange start the next request's header clock.
        if self.busy.load(Ordering::Acquire) == 0
            && self
                .head_started_ms
                .compare_exchange(NONE, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            self.wake.notify_one();
        }
    }

    fn wrote(&self, n: usize) {
        if n > 0 {
            self.last_progress_ms
                .store(self.now_ms(), Ordering::Relaxed);
        }
    }

    /// A request's head has been read and handed to the service: no deadline of ours applies
    /// until it is answered (its body has its own, see [`crate::web::deadline`]).
    pub fn begin_request(self: &Arc<Self>) -> InService {
        self.busy.fetch_add(1, Ordering::AcqRel);
        self.head_started_ms.store(NONE, Ordering::Release);
        InService(Arc::clone(self))
    }

    /// What the connection is waiting for from its client, and since when; `None` while a
    /// request is in the service.
    pub fn stall(&self) -> Option<Stall> {
        if self.busy.load(Ordering::Acquire) > 0 {
            return None;
        }
        let at = |ms: u64| self.opened + std::time::Duration::from_millis(ms);
        let started = self.head_started_ms.load(Ordering::Acquire);
        if started == NONE || !self.heard.load(Ordering::Acquire) {
            let last = self.last_progress_ms.load(Ordering::Relaxed);
            Some(Stall::Idle(at(last)))
        } else {
            Some(Stall::Head(at(started)))
        }
    }

    /// When the connection must be closed if nothing changes, or `None` while a request is in
    /// the service.
    fn deadline(&self, limits: &ListenerSettings) -> Option<Instant> {
        if self.busy.load(Ordering::Acquire) > 0 {
            return None;
        }
        let at = |ms: u64, timeout| self.opened + std::time::Duration::from_millis(ms) + timeout;
        match self.head_started_ms.load(Ordering::Acquire) {
            NONE => Some(at(
                self.last_progress_ms.load(Ordering::Relaxed),
                limits.idle_timeout,
            )),
            started => Some(at(started, limits.header_read_timeout)),
        }
    }
}

/// What a connection with no request in the service is waiting for from its client, in the
/// order connections give their slot up to a new one (see [`super::slots`]): an idle one loses
/// nothing by closing, a stalled head loses a request its client has not finished sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stall {
    /// Between keep-alive requests (or not reading its response) since its last byte, or
    /// silent since it was accepted.
    Idle(Instant),
    /// In the middle of a request head begun then (at accept for a first request), however
    /// recent its last byte: a head trickled a byte at a time is as stalled as one that stopped.
    Head(Instant),
}

/// A request in the service; dropping it (answered, or abandoned) restarts the idle clock.
pub struct InService(Arc<Activity>);

impl Drop for InService {
    fn drop(&mut self) {
        let a = &self.0;
        a.last_progress_ms.store(a.now_ms(), Ordering::Relaxed);
        a.busy.fetch_sub(1, Ordering::AcqRel);
        a.wake.notify_one();
    }
}

/// What a connection task is told when the listener stops.
#[derive(Clone, Default)]
pub struct Stop {
    /// Finish the request in progress, then close (idle connections close at once).
    pub drain: CancellationToken,
    /// Close now, whatever is in progress.
    pub now: CancellationToken,
}

/// Serve `conn` until it ends, its header or idle deadline passes, or the listener stops;
/// when `evict` is cancelled (its slot was given to a new connection) it closes at once if
/// idle or in the middle of a request head, after the request in progress otherwise.
pub async fn watch<C: GracefulConnection>(
    conn: C,
    activity: Arc<Activity>,
    limits: ListenerSettings,
    stop: Stop,
    evict: CancellationToken,
) {
    tokio::pin!(conn);
    let sleep = tokio::time::sleep_until(Instant::now());
    tokio::pin!(sleep);
    let mut draining = false;
    loop {
        let deadline = activity.deadline(&limits);
        if let Some(at) = deadline {
            sleep.as_mut().reset(at);
        }
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = activity.wake.notified() => {}
            _ = &mut sleep, if deadline.is_some() => {
                // Closing drops the connection: an idle one loses nothing, a slow one is cut off.
                if activity.deadline(&limits).is_some_and(|at| at <= Instant::now()) {
                    return;
                }
            }
            _ = stop.drain.cancelled(), if !draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = evict.cancelled(), if !draining => {
                // hyper would keep reading a first request's unfinished head (and answer it)
                // after a graceful shutdown, holding the socket its slot no longer counts until
                // the header deadline; no request has reached the service, so drop it now.
                if matches!(activity.stall(), Some(Stall::Head(_))) {
                    return;
                }
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = stop.now.cancelled() => return,
        }
    }
}

/// The socket as hyper sees it: progress is recorded, and hyper's own bodiless 4xx answers to
/// requests it could not parse are rewritten as problem+json.
pub struct WatchedIo<T> {
    inner: T,
    activity: Arc<Activity>,
    /// A rewritten answer still to be written, and how much of it is out.
    pending: Option<(Vec<u8>, usize)>,
}

impl<T> WatchedIo<T> {
    /// Watch `inner` on behalf of `activity`.
    pub fn new(inner: T, activity: Arc<Activity>) -> Self {
        Self {
            inner,
            activity,
            pending: None,
        }
    }
}

impl<T: AsyncWrite + Unpin> WatchedIo<T> {
    /// Write out a rewritten answer before anything else.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, sent)) = &mut self.pending {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.activity.wrote(n);
            *sent += n;
            if *sent == bytes.len() {
                self.pending = None;
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WatchedIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        this.activity.read(buf.filled().len() - before);
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WatchedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        if let Some(answer) = problem_for_bare_error(buf) {
            // hyper counts its bare answer as written; ours goes out in its place.
            this.pending = Some((answer, 0));
            let _ = this.poll_pending(cx)?;
            return Poll::Ready(Ok(buf.len()));
        }
        let n = ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?;
        this.activity.wrote(n);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        let first = bufs.iter().find(|b| !b.is_empty());
        if let Some(answer) = first.and_then(|b| problem_for_bare_error(b)) {
            this.pending = Some((answer, 0));
            let _ = this.poll_pending(cx)?;
            return Poll::Ready(Ok(first.map_or(0, |b| b.len())));
        }
        let n = ready!(Pin::new(&mut this.inner).poll_write_vectored(cx, bufs))?;
        this.activity.wrote(n);
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

/// If `head` is one of hyper's own answers to a request it could not parse (a 4xx status line
/// and a head without a content type, all in this write), the problem+json answer to send
/// instead.
///
/// sluice's own 4xx answers always carry a content type (see `api::problems`), and its bodies
/// (JSON, Prometheus text) cannot contain a CRLF CRLF after an `HTTP/1.x 4` at a write
/// boundary, so nothing else matches.
fn problem_for_bare_error(head: &[u8]) -> Option<Vec<u8>> {
    let status_line = head
        .strip_prefix(b"HTTP/1.1 4")
        .or(head.strip_prefix(b"HTTP/1.0 4"))?;
    let end = head.windows(4).position(|w| w == b"\r\n\r\n")?;
    let text = std::str::from_utf8(&head[..end]).ok()?;
    if text.to_ascii_lowercase().contains("\r\ncontent-type:") {
        return None;
    }
    let code = std::str::from_utf8(status_line.get(..2)?).ok()?;
    let status = hyper::StatusCode::from_u16(400 + code.parse::<u16>().ok()?).ok()?;
    let detail = match status.as_u16() {
        431 => "the request headers are too large (at most 64 KiB and 100 headers)",
        414 => "the request URI is too long",
        _ => "the request line or headers are malformed",
    };
    let body = serde_json::to_vec(&Problem::new(status, detail)).ok()?;
    let mut answer = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("Error"),
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    Some(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hypers_bare_errors_become_problems_and_nothing_else_does() {
        let bare = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\
                     date: Sun, 30 Nov 2025 10:00:00 GMT\r\n\r\n";
        let answer = String::from_utf8(problem_for_bare_error(bare).expect("rewritten")).unwrap();
        assert!(answer.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
        assert!(answer.contains("content-type: application/problem+json\r\n"));
        let body = answer.split_once("\r\n\r\n").unwrap().1;
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["status"], 431);
        assert!(
            problem_for_bare_error(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                .is_some()
        );
        for ours in [
            &b"HTTP/1.1 404 Not Found\r\ncontent-type: application/problem+json\r\n\r\n{}"[..],
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n",
            b"{\"detail\":\"HTTP/1.1 400 Bad Request\"}",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n",
        ] {
            assert!(problem_for_bare_error(ours).is_none());
        }
    }
}
