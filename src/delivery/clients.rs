//! The shared HTTP clients and one attempt through them: a client per distinct (timeouts, TLS
//! setting), each with a keep-alive pool; the egress guard before every request; the OAuth2
//! token; the client certificate in its rotation overlap; phases timed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER, USER_AGENT};
use rustls::RootCertStore;
use tokio::time::Instant;

use super::oauth2::{Bearer, Fetcher, Grant, Tokens};
use super::timing::{ConnectClock, TimedConnectLayer};
use super::{
    ErrorKind, Failure, Phases, Report, Response, Target, TlsProfile, TraceHeaders, classify, tls,
};
use crate::egress::settings::{EgressSettings, ProxySettings, TokenTimeouts};
use crate::egress::{EgressPolicy, GuardedResolver};
use crate::signing;

/// Idle keep-alive connections are closed after this long.
const POOL_IDLE: Duration = Duration::from_secs(90);
/// A destination checked for a proxied request is trusted this long before it is looked up again.
const PROXIED_CHECK_TTL: Duration = Duration::from_secs(10);
/// Past this many clients, those unused longer than [`POOL_IDLE`] (their pools are empty) go.
const MAX_CLIENTS: usize = 256;

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct ClientKey {
    connect: Duration,
    read: Duration,
    tls: Option<[u8; 32]>,
}

/// The shared HTTP clients: one per distinct (connect, read) timeout pair and TLS setting, each
/// with a keep-alive pool sized to the concurrency. Nearly every endpoint uses the default pair
/// and the process-wide trust.
pub struct Clients {
    policy: Arc<EgressPolicy>,
    roots: Arc<RootCertStore>,
    proxy: Option<ProxySettings>,
    token_timeouts: TokenTimeouts,
    pool_size: usize,
    clients: Mutex<HashMap<ClientKey, (reqwest::Client, Instant)>>,
    proxied_checks: Mutex<HashMap<(String, u16), Instant>>,
    tokens: Tokens,
    max_body_bytes: usize,
}

impl Clients {
    /// Clients that resolve through `policy`, keep up to `pool_size` idle connections per host,
    /// and keep at most `max_body_bytes` of each response; direct, trusting the system's CAs.
    pub fn new(policy: Arc<EgressPolicy>, pool_size: usize, max_body_bytes: usize) -> Self {
        Self::with_egress(
            policy,
            &EgressSettings::default(),
            pool_size,
            max_body_bytes,
        )
    }

    /// The same, leaving the host as `egress` says (extra CAs, proxy, token timeouts).
    pub fn with_egress(
        policy: Arc<EgressPolicy>,
        egress: &EgressSettings,
        pool_size: usize,
        max_body_bytes: usize,
    ) -> Self {
        super::install_tls_provider();
        Self {
            policy,
            roots: tls::base_roots(&egress.extra_roots),
            proxy: egress.proxy.clone(),
            token_timeouts: egress.token,
            pool_size,
            clients: Mutex::new(HashMap::new()),
            proxied_checks: Mutex::new(HashMap::new()),
            tokens: Tokens::default(),
            max_body_bytes,
        }
    }

    /// The egress policy in force.
    pub fn policy(&self) -> &EgressPolicy {
        &self.policy
    }

    fn client(
        &self,
        connect: Duration,
        read: Duration,
        profile: Option<&TlsProfile>,
    ) -> Result<reqwest::Client, Failure> {
        let key = ClientKey {
            connect,
            read,
            tls: profile.map(TlsProfile::fingerprint),
        };
        let now = Instant::now();
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((c, used)) = clients.get_mut(&key) {
            *used = now;
            return Ok(c.clone());
        }
        let client = self
            .build(connect, read, profile)
            .map_err(|message| Failure {
                kind: ErrorKind::Other,
                message: format!("cannot build the HTTP client: {message}"),
            })?;
        if clients.len() >= MAX_CLIENTS {
            clients.retain(|_, (_, used)| now.saturating_duration_since(*used) < POOL_IDLE);
        }
        clients.insert(key, (client.clone(), now));
        Ok(client)
    }

    fn build(
        &self,
        connect: Duration,
        read: Duration,
        profile: Option<&TlsProfile>,
    ) -> Result<reqwest::Client, String> {
        let tls = tls::client_config(&self.roots, profile)?;
        let proxy_host = self
            .proxy
            .as_ref()
            .and_then(|p| p.url.host_str().map(str::to_owned));
        let builder = reqwest::Client::builder()
            .connect_timeout(connect)
            .read_timeout(read)
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(GuardedResolver::trusting(
                self.policy.clone(),
                proxy_host,
            )))
            .pool_max_idle_per_host(self.pool_size)
            .pool_idle_timeout(POOL_IDLE)
            .tcp_nodelay(true)
            .tls_backend_preconfigured(tls)
            .connector_layer(TimedConnectLayer);
        let builder = match &self.proxy {
            None => builder.no_proxy(),
            Some(p) => {
                let no_proxy = reqwest::NoProxy::from_string(&p.no_proxy.join(","));
                let proxy = reqwest::Proxy::all(p.url.as_str())
                    .map_err(|e| format!("the egress proxy: {e}"))?
                    .no_proxy(no_proxy);
                builder.proxy(proxy)
            }
        };
        builder.build().map_err(|e| e.to_string())
    }

    /// With a proxy, the proxy resolves names, so the guard cannot pick the address connected
    /// to: the destination is looked up here and refused when any of its addresses is refused
    /// (a name checked in the last few seconds is not looked up again).
    async fn check_proxied(&self, url: &reqwest::Url) -> Result<(), Failure> {
        let (Some(_), Some(url::Host::Domain(host))) = (&self.proxy, url.host()) else {
            return Ok(());
        };
        let key = (host.to_owned(), url.port_or_known_default().unwrap_or(443));
        let now = Instant::now();
        {
            let checks = self
                .proxied_checks
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if checks
                .get(&key)
                .is_some_and(|at| now.saturating_duration_since(*at) < PROXIED_CHECK_TTL)
            {
                return Ok(());
            }
        }
        self.policy
            .resolve_all_allowed(&key.0, key.1)
            .await
            .map_err(|e| Failure {
                kind: if e.is_refused() {
                    ErrorKind::Refused
                } else {
                    ErrorKind::Dns
                },
                message: e.to_string(),
            })?;
        let mut checks = self
            .proxied_checks
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if checks.len() > 10_000 {
            checks.retain(|_, at| now.saturating_duration_since(*at) < PROXIED_CHECK_TTL);
        }
        checks.insert(key, now);
        Ok(())
    }

    /// Make one signed attempt of `payload` as message `message_id` to `target`, all of it
    /// (the egress checks, the token, every exchange, the body) by `deadline`.
    pub async fn attempt(
        &self,
        target: &Target,
        message_id: &str,
        payload: &str,
        trace: Option<&TraceHeaders>,
        deadline: Instant,
    ) -> Report {
        let started_at_ms = crate::clock::now_ms();
        let started = Instant::now();
        let mut phases = Phases::default();
        let sent = self.send(
            target,
            message_id,
            payload,
            trace,
            started_at_ms,
            deadline,
            &mut phases,
        );
        // Each step has the deadline already; this bounds whatever has none of its own (a
        // name lookup, the egress check of a proxied destination).
        let result = tokio::time::timeout_at(deadline, sent)
            .await
            .unwrap_or_else(|_| {
                Err(Failure {
                    kind: ErrorKind::TotalTimeout,
                    message: format!(
                        "the attempt passed its deadline ({} ms)",
                        started.elapsed().as_millis()
                    ),
                })
            });
        Report {
            started_at_ms,
            duration: started.elapsed(),
            result,
            phases,
        }
    }

    /// One POST of `body` with `headers` (and nothing of sluice's own) to `url`, through the
    /// same guard, clients and TLS setting as `target`'s HTTP attempts, answered by `deadline`:
    /// a cloud service's API call (the AWS destinations sign it themselves). The exchange and
    /// the body read are the `publish` phase.
    pub async fn post(
        &self,
        target: &Target,
        url: &reqwest::Url,
        headers: reqwest::header::HeaderMap,
        body: Vec<u8>,
        deadline: Instant,
        phases: &mut Phases,
    ) -> Result<Response, Failure> {
        self.policy.check_url(url.as_str()).map_err(|e| Failure {
            kind: ErrorKind::Refused,
            message: e.to_string(),
        })?;
        self.check_proxied(url).await?;
        let mut t = target.timeouts;
        let client = self.client(t.connect, t.read, target.tls.as_ref())?;
        t.total = t
            .total
            .min(deadline.saturating_duration_since(Instant::now()));
        let request = client
            .post(url.clone())
            .headers(headers)
            .timeout(t.total)
            .body(body);
        let connect = Arc::new(ConnectClock::default());
        let clock = Instant::now();
        let sent = connect.around(request.send()).await;
        let took = clock.elapsed();
        let times = connect.times().unwrap_or_default();
        if connect.times().is_some() {
            phases.connected = true;
            phases.connect += times.connect;
            phases.tls += times.tls;
        }
        let mut response =
            sent.map_err(|e| classify(&e, took, &t, connect.handshake_unfinished()))?;
        let status = response.status().as_u16();
        let body = self.read_body(&mut response).await;
        phases.publish = clock.elapsed().saturating_sub(times.connect + times.tls);
        phases.published = true;
        Ok(Response {
            status,
            retry_after: None,
            body,
        })
    }

    /// The body, cut at the cap (a broken body after a status line keeps what arrived).
    async fn read_body(&self, response: &mut reqwest::Response) -> Vec<u8> {
        let mut body = Vec::new();
        while let Ok(Some(chunk)) = response.chunk().await {
            let room = self.max_body_bytes - body.len();
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= self.max_body_bytes {
                break; // the rest is dropped with the connection
            }
        }
        body
    }

    /// A token for `target`'s HTTP attempt, if it uses OAuth2. The egress guard refusing the
    /// token URL is a `token_endpoint` failure here, like any other reason for no token.
    async fn bearer(
        &self,
        target: &Target,
        deadline: Instant,
        phases: &mut Phases,
    ) -> Result<Option<Bearer>, Failure> {
        let Some(grant) = &target.grant else {
            return Ok(None);
        };
        match self.token(target, grant, deadline, phases).await {
            Ok(bearer) => Ok(Some(bearer)),
            Err(f) if f.kind == ErrorKind::Refused => Err(Failure {
                kind: ErrorKind::TokenEndpoint,
                ..f
            }),
            Err(f) => Err(f),
        }
    }

    /// A token of `grant` for an attempt to `target` by `deadline` ([`Tokens::bearer`]): the
    /// cached one or a fresh one, fetched through the egress guard, the proxy, `target`'s TLS
    /// setting and the token timeouts. The time spent fetching one is a phase. A token URL the
    /// guard refuses is `destination_refused`; no token otherwise is `token_endpoint` (or
    /// `token_too_large`).
    pub async fn token(
        &self,
        target: &Target,
        grant: &Grant,
        deadline: Instant,
        phases: &mut Phases,
    ) -> Result<Bearer, Failure> {
        let clock = Instant::now();
        let failure = |kind: ErrorKind, why: &dyn std::fmt::Display| Failure {
            kind,
            message: format!("token endpoint {}: {why}", grant.token_url()),
        };
        let token_url = reqwest::Url::parse(grant.token_url())
            .map_err(|e| failure(ErrorKind::TokenEndpoint, &e))?;
        self.policy
            .check_url(token_url.as_str())
            .map_err(|e| failure(ErrorKind::Refused, &e))?;
        self.check_proxied(&token_url).await.map_err(|f| {
            let kind = match f.kind {
                ErrorKind::Refused => ErrorKind::Refused,
                _ => ErrorKind::TokenEndpoint,
            };
            failure(kind, &f.message)
        })?;
        let t = self.token_timeouts;
        let client = self.client(t.connect, t.total, target.tls.as_ref())?;
        let fetcher = Fetcher {
            client: &client,
            total: t.total,
        };
        let bearer = self.tokens.bearer(fetcher, grant, deadline).await;
        if bearer.as_ref().map_or(true, |b| b.fetched) {
            phases.token = clock.elapsed();
            phases.fetched_token = true;
        }
        bearer
    }

    /// Forget `grant`'s `token`: the receiver refused it (answered 401), so it may have been
    /// revoked or rotated early. A newer token is kept.
    pub fn forget_token(&self, grant: &Grant, token: &str) {
        self.tokens.invalidate(grant, token);
    }

    // What one attempt sends and how long it may take, each its own plain argument.
    #[allow(clippy::too_many_arguments)]
    async fn send(
        &self,
        target: &Target,
        message_id: &str,
        payload: &str,
        trace: Option<&TraceHeaders>,
        started_at_ms: i64,
        deadline: Instant,
        phases: &mut Phases,
    ) -> Result<Response, Failure> {
        // IP-literal hosts never reach the resolver: check them here, on every attempt.
        self.policy
            .check_url(target.url.as_str())
            .map_err(|e| Failure {
                kind: ErrorKind::Refused,
                message: e.to_string(),
            })?;
        self.check_proxied(&target.url).await?;
        let mut bearer = self.bearer(target, deadline, phases).await?;
        let t = &target.timeouts;
        let client = self.client(t.connect, t.read, target.tls.as_ref())?;
        let clock = Instant::now();
        let timestamp_s = started_at_ms / 1000;
        let signature =
            signing::signature_header(&target.secrets, message_id, timestamp_s, payload.as_bytes());
        phases.sign = clock.elapsed();

        let request = Request {
            target,
            message_id,
            timestamp_s,
            signature: &signature,
            payload,
            trace,
            deadline,
        };
        let mut response = self
            .exchange(&client, &request, bearer.as_ref(), phases)
            .await;
        // The receiver refused the client certificate: during a rotation's overlap the one it
        // replaced may still be the one the receiver trusts.
        if let (Err(f), Some(previous)) = (&response, &target.previous_tls)
            && f.kind == ErrorKind::TlsClientCertificate
        {
            let client = self.client(t.connect, t.read, Some(previous))?;
            response = self
                .exchange(&client, &request, bearer.as_ref(), phases)
                .await;
        }
        // A 401 to a cached token: it may have been revoked or rotated early. Once, with a
        // fresh one.
        if let (Ok(r), Some(b), Some(grant)) = (&response, &bearer, &target.grant)
            && r.status().as_u16() == 401
            && !b.fetched
        {
            self.tokens.invalidate(grant, &b.token);
            bearer = self.bearer(target, deadline, phases).await?;
            response = self
                .exchange(&client, &request, bearer.as_ref(), phases)
                .await;
        }
        let mut response = response?;

        let clock = Instant::now();
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| crate::retry::parse_retry_after(v, std::time::SystemTime::now()));
        let body = self.read_body(&mut response).await;
        phases.body = clock.elapsed();
        Ok(Response {
            status,
            retry_after,
            body,
        })
    }

    /// Send the request once and wait for the response headers, timing a new connection's
    /// connect and TLS apart from the exchange itself.
    async fn exchange(
        &self,
        client: &reqwest::Client,
        r: &Request<'_>,
        bearer: Option<&Bearer>,
        phases: &mut Phases,
    ) -> Result<reqwest::Response, Failure> {
        // What is left of the attempt, at most the total deadline: a second exchange (the
        // previous client certificate, a fresh token after a 401) gets only what is left.
        let mut t = r.target.timeouts;
        t.total = t
            .total
            .min(r.deadline.saturating_duration_since(Instant::now()));
        if t.total.is_zero() {
            return Err(Failure {
                kind: ErrorKind::TotalTimeout,
                message: "the attempt's deadline passed before the request was sent".into(),
            });
        }
        let mut request = client.post(r.target.url.clone());
        // The endpoint's headers first: sluice's own come after and cannot be overridden (the
        // API refuses the names anyway), except `User-Agent`, which the endpoint's replaces so
        // that one goes out, not two.
        for (name, value) in &r.target.headers {
            request = request.header(name, value);
        }
        if !r.target.headers.iter().any(|(name, _)| name == USER_AGENT) {
            request = request.header(USER_AGENT, HeaderValue::from_static("sluice/0.1"));
        }
        if let Some(b) = bearer {
            request = request.header(AUTHORIZATION, format!("Bearer {}", b.token));
        }
        if let Some(t) = r.trace {
            request = request.header("traceparent", t.traceparent.clone());
            if let Some(state) = &t.tracestate {
                request = request.header("tracestate", state.clone());
            }
        }
        let request = request
            .timeout(t.total)
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header(signing::WEBHOOK_ID, r.message_id)
            .header(signing::WEBHOOK_TIMESTAMP, r.timestamp_s.to_string())
            .header(signing::WEBHOOK_SIGNATURE, r.signature)
            .body(r.payload.to_owned());
        let connect = Arc::new(ConnectClock::default());
        let clock = Instant::now();
        let sent = connect.around(request.send()).await;
        let took = clock.elapsed();
        let times = connect.times().unwrap_or_default();
        if connect.times().is_some() {
            phases.connected = true;
            phases.connect += times.connect;
            phases.tls += times.tls;
        }
        phases.http += took.saturating_sub(times.connect + times.tls);
        sent.map_err(|e| classify(&e, took, &t, connect.handshake_unfinished()))
    }
}

/// What is sent, whichever client and token send it.
struct Request<'a> {
    target: &'a Target,
    message_id: &'a str,
    timestamp_s: i64,
    signature: &'a str,
    payload: &'a str,
    /// W3C trace context, for an endpoint that asked for it.
    trace: Option<&'a TraceHeaders>,
    /// The attempt's deadline: every exchange ends by it.
    deadline: Instant,
}
