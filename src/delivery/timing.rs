//! Where a new connection's time goes: connect (name lookup, TCP, a proxy's tunnel) and the TLS
//! handshake, timed apart so the operator sees what keep-alive saves.
//!
//! The HTTP client gives no hook between TCP and TLS, so two marks are taken from inside it:
//! a connector layer marks when a new connection starts and when it is ready, and the TLS
//! session store marks when the handshake starts (rustls consults it to build the ClientHello,
//! right after TCP connects). Both write to the [`ConnectClock`] of the attempt whose task
//! polls them (a task-local set around the request); a connection made in the background for
//! another request writes nowhere. A reused keep-alive connection leaves the clock untouched.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::client::{ClientSessionMemoryCache, ClientSessionStore};
use rustls::pki_types::ServerName;
use tokio::time::Instant;

tokio::task_local! {
    static CLOCK: Arc<ConnectClock>;
}

/// The marks of one attempt's new connection, if it made one.
#[derive(Debug, Default)]
pub struct ConnectClock {
    marks: Mutex<Marks>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Marks {
    started: Option<Instant>,
    tls_started: Option<Instant>,
    ready: Option<Instant>,
}

/// How a new connection's setup divided, once it is over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectTimes {
    /// Name lookup, TCP and a proxy's tunnel.
    pub connect: Duration,
    /// The TLS handshake (zero for plain HTTP).
    pub tls: Duration,
}

impl ConnectClock {
    fn mark(&self, f: impl FnOnce(&mut Marks)) {
        f(&mut self.marks.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// The connection's phases, if this attempt opened one that became ready.
    pub fn times(&self) -> Option<ConnectTimes> {
        let m = *self.marks.lock().unwrap_or_else(|p| p.into_inner());
        let (started, ready) = (m.started?, m.ready?);
        let tls_started = m.tls_started.unwrap_or(ready).clamp(started, ready);
        Some(ConnectTimes {
            connect: tls_started - started,
            tls: ready - tls_started,
        })
    }

    /// Did a TLS handshake start and never finish (what a connect timeout interrupted)?
    pub fn handshake_unfinished(&self) -> bool {
        let m = *self.marks.lock().unwrap_or_else(|p| p.into_inner());
        m.tls_started.is_some() && m.ready.is_none()
    }

    /// Run `request` with this clock receiving its connection's marks.
    pub async fn around<F: Future>(self: &Arc<Self>, request: F) -> F::Output {
        CLOCK.scope(self.clone(), request).await
    }
}

fn with_clock(f: impl FnOnce(&ConnectClock)) {
    let _ = CLOCK.try_with(|c| f(c));
}

/// The connector layer that marks a new connection's start and its readiness.
#[derive(Debug, Clone, Copy, Default)]
pub struct TimedConnectLayer;

impl<S> tower::Layer<S> for TimedConnectLayer {
    type Service = TimedConnect<S>;
    fn layer(&self, inner: S) -> Self::Service {
        TimedConnect(inner)
    }
}

/// A connector that marks its connections in the attempt's clock.
#[derive(Debug, Clone)]
pub struct TimedConnect<S>(S);

impl<S, R> tower::Service<R> for TimedConnect<S>
where
    S: tower::Service<R>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let clock = CLOCK.try_with(Arc::clone).ok();
        if let Some(c) = &clock {
            c.mark(|m| {
                *m = Marks {
                    started: Some(Instant::now()),
                    ..Marks::default()
                }
            });
        }
        let connecting = self.0.call(request);
        Box::pin(async move {
            let result = connecting.await;
            if let (Some(c), Ok(_)) = (&clock, &result) {
                c.mark(|m| m.ready = Some(Instant::now()));
            }
            result
        })
    }
}

/// rustls's session cache, marking the start of each handshake: rustls asks it for a key
/// exchange hint and a resumption ticket while it builds the ClientHello.
#[derive(Debug)]
pub struct TimedSessionStore(ClientSessionMemoryCache);

impl TimedSessionStore {
    /// A cache of 256 sessions, as rustls keeps by default.
    pub fn new() -> Self {
        Self(ClientSessionMemoryCache::new(256))
    }
}

impl Default for TimedSessionStore {
    fn default() -> Self {
        Self::new()
    }
}

fn handshake_starts() {
    with_clock(|c| {
        c.mark(|m| {
            if m.started.is_some() && m.tls_started.is_none() {
                m.tls_started = Some(Instant::now());
            }
        })
    });
}

impl ClientSessionStore for TimedSessionStore {
    fn set_kx_hint(&self, server_name: ServerName<'static>, group: rustls::NamedGroup) {
        self.0.set_kx_hint(server_name, group)
    }

    fn kx_hint(&self, server_name: &ServerName<'_>) -> Option<rustls::NamedGroup> {
        handshake_starts();
        self.0.kx_hint(server_name)
    }

    fn set_tls12_session(
        &self,
        server_name: ServerName<'static>,
        value: rustls::client::Tls12ClientSessionValue,
    ) {
        self.0.set_tls12_session(server_name, value)
    }

    fn tls12_session(
        &self,
        server_name: &ServerName<'_>,
    ) -> Option<rustls::client::Tls12ClientSessionValue> {
        handshake_starts();
        self.0.tls12_session(server_name)
    }

    fn remove_tls12_session(&self, server_name: &ServerName<'static>) {
        self.0.remove_tls12_session(server_name)
    }

    fn insert_tls13_ticket(
        &self,
        server_name: ServerName<'static>,
        value: rustls::client::Tls13ClientSessionValue,
    ) {
        self.0.insert_tls13_ticket(server_name, value)
    }

    fn take_tls13_ticket(
        &self,
        server_name: &ServerName<'static>,
    ) -> Option<rustls::client::Tls13ClientSessionValue> {
        handshake_starts();
        self.0.take_tls13_ticket(server_name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn marks_divide_a_connection_into_connect_and_tls() {
        let clock = Arc::new(ConnectClock::default());
        clock
            .around(async {
                with_clock(|c| c.mark(|m| m.started = Some(Instant::now())));
                tokio::time::sleep(Duration::from_millis(3)).await;
                handshake_starts();
                tokio::time::sleep(Duration::from_millis(5)).await;
                assert!(CLOCK.try_with(|c| c.handshake_unfinished()).unwrap());
                with_clock(|c| c.mark(|m| m.ready = Some(Instant::now())));
            })
            .await;
        let times = clock.times().expect("a connection");
        assert_eq!(times.connect, Duration::from_millis(3));
        assert_eq!(times.tls, Duration::from_millis(5));
        // Outside an attempt nothing is marked, and nothing fails.
        handshake_starts();
        assert!(ConnectClock::default().times().is_none());
    }
}
