//! The sluice under test: started in this process on 127.0.0.1 (embedded SQLite in a fresh
//! directory by default, or the given PostgreSQL/Redis), or an already running one at `--target`.
//! Tenants and endpoints are created through the public API either way.

use std::sync::Arc;

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::BenchArgs;
use sluice::config::RawSettings;
use sluice::dispatcher::Ctx;
use sluice::metrics::Metrics;
use sluice::serve::Running;
use sluice_testkit::Sluice as Embedded;

/// A sluice to drive.
pub(crate) struct Sluice {
    /// `http://host:port`
    pub base: String,
    /// Bearer token of the operator.
    admin_token: String,
    /// Where its `/metrics` are.
    metrics_url: String,
    /// The HTTP client producers share.
    pub http: reqwest::Client,
    /// The sluice in this process (none with `--target`).
    embedded: Option<Embedded>,
    /// The OTLP stub its spans go to (`--otlp-endpoint sink`).
    otlp_sink: Option<super::otlp_sink::Sink>,
}

/// Per-phase settings that differ from sluice's defaults.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tuning {
    /// Global concurrency (the pool).
    pub concurrency: Option<u32>,
    /// Let the dispatcher size its pool from live load (`--concurrency auto`) unless the
    /// command line fixes it.
    pub auto_concurrency: bool,
    /// The embedded database's directory (default: a fresh one, removed at stop); a store
    /// written before the start, kept after the stop.
    pub data_dir: Option<std::path::PathBuf>,
    /// How long delivered history is kept (`--retention`; default sluice's).
    pub retention: Option<String>,
}

impl Sluice {
    /// Start one in-process (or connect to `--target`).
    pub(crate) async fn start(args: &BenchArgs, tuning: &Tuning) -> anyhow::Result<Self> {
        // reqwest is built without a default TLS provider; sluice itself installs ring too.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(256)
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .context("http client")?;
        if let Some(target) = &args.target {
            let admin_token = args
                .admin_token
                .clone()
                .context("--target needs --admin-token")?;
            let base = target.trim_end_matches('/').to_owned();
            return Ok(Self {
                metrics_url: args
                    .metrics_url
                    .clone()
                    .unwrap_or_else(|| format!("{base}/metrics")),
                base,
                admin_token,
                http,
                embedded: None,
                otlp_sink: None,
            });
        }
        let admin_token = sluice::ids::new_token("sk_admin");
        let concurrency = args.concurrency.or(tuning.concurrency);
        let otlp_sink = match args.otlp_endpoint.as_deref() {
            Some("sink") => Some(
                super::otlp_sink::Sink::start()
                    .await
                    .context("the OTLP stub")?,
            ),
            _ => None,
        };
        let traces = match (&otlp_sink, &args.otlp_endpoint) {
            (Some(sink), _) => Some(sink.url.clone()),
            (None, endpoint) => endpoint.clone(),
        };
        let settings = RawSettings {
            listen: Some("127.0.0.1:0".into()),
            database_url: args.database_url.clone(),
            redis_url: args.redis_url.clone(),
            concurrency: concurrency
                .map(|c| c.to_string())
                .or(tuning.auto_concurrency.then(|| "auto".to_owned())),
            allow_network: vec!["127.0.0.0/8".into()],
            admin_token: Some(admin_token.clone()),
            // A bench phase ends with attempts still hanging on a blackhole: do not wait 20 s.
            drain_grace: Some("1s".into()),
            data_dir: tuning.data_dir.clone(),
            retention: tuning.retention.clone(),
            // Full sampling: every attempt a span.
            traces: sluice::traces::RawTraceSettings {
                sampler: traces.as_ref().map(|_| "always_on".to_owned()),
                endpoint: traces,
                ..Default::default()
            },
            ..Default::default()
        };
        let embedded = Embedded::try_start(settings)
            .await
            .context("the embedded sluice")?;
        Ok(Self {
            base: embedded.base.clone(),
            metrics_url: format!("{}/metrics", embedded.base),
            admin_token,
            http,
            embedded: Some(embedded),
            otlp_sink,
        })
    }

    /// The URL of `POST /v1/messages`.
    pub(crate) fn messages_url(&self) -> String {
        format!("{}/v1/messages", self.base)
    }

    async fn post(&self, path: &str, token: &str, body: Value) -> anyhow::Result<Value> {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(token)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
            .with_context(|| format!("POST {path}"))?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        if !status.is_success() {
            bail!("POST {path}: {status}: {text}");
        }
        serde_json::from_str(&text).with_context(|| format!("POST {path}: not JSON: {text}"))
    }

    /// Create a tenant; returns its token.
    pub(crate) async fn tenant(&self, name: &str) -> anyhow::Result<String> {
        Ok(self.tenant_with_id(name).await?.1)
    }

    /// Create a tenant; returns `(id, token)`.
    pub(crate) async fn tenant_with_id(&self, name: &str) -> anyhow::Result<(String, String)> {
        let out = self
            .post("/v1/tenants", &self.admin_token, json!({ "name": name }))
            .await?;
        Ok((
            out["id"].as_str().context("tenant id")?.to_owned(),
            out["token"].as_str().context("tenant token")?.to_owned(),
        ))
    }

    /// Set a tenant's weight (`PATCH /v1/tenants/{id}`).
    pub(crate) async fn tenant_weight(&self, id: &str, weight: u32) -> anyhow::Result<()> {
        self.patch_tenant(id, json!({ "weight": weight })).await
    }

    /// Set a tenant's ceiling, the largest share of the pool it may hold
    /// (`PATCH /v1/tenants/{id}`).
    pub(crate) async fn tenant_max_share(&self, id: &str, max_share: f64) -> anyhow::Result<()> {
        self.patch_tenant(id, json!({ "max_share": max_share }))
            .await
    }

    async fn patch_tenant(&self, id: &str, body: Value) -> anyhow::Result<()> {
        let response = self
            .http
            .patch(format!("{}/v1/tenants/{id}", self.base))
            .bearer_auth(&self.admin_token)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
            .context("PATCH /v1/tenants/{id}")?;
        let status = response.status();
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            bail!("PATCH /v1/tenants/{id}: {status}: {text}");
        }
        Ok(())
    }

    /// Every attempt recorded for the endpoint `id` of the tenant `token`
    /// (`GET /v1/endpoints/{id}/attempts`, every page), newest first.
    pub(crate) async fn endpoint_attempts(
        &self,
        token: &str,
        id: &str,
    ) -> anyhow::Result<Vec<Value>> {
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let mut url = format!("{}/v1/endpoints/{id}/attempts?limit=500", self.base);
            if let Some(cursor) = &after {
                url.push_str(&format!("&after={cursor}"));
            }
            let text = self
                .http
                .get(&url)
                .bearer_auth(token)
                .send()
                .await
                .context("GET /v1/endpoints/{id}/attempts")?
                .error_for_status()
                .context("GET /v1/endpoints/{id}/attempts")?
                .text()
                .await
                .context("GET /v1/endpoints/{id}/attempts")?;
            let page: Value = serde_json::from_str(&text)
                .with_context(|| format!("GET /v1/endpoints/{id}/attempts: not JSON: {text}"))?;
            if let Some(data) = page["data"].as_array() {
                out.extend(data.iter().cloned());
            }
            match page["next"].as_str() {
                Some(next) => after = Some(next.to_owned()),
                None => return Ok(out),
            }
        }
    }

    /// Create an endpoint of the tenant `token` delivering to `url`; returns its id.
    pub(crate) async fn endpoint(
        &self,
        token: &str,
        url: &str,
        lane_size: Option<u32>,
    ) -> anyhow::Result<String> {
        let mut body = json!({ "url": url });
        if let Some(lane) = lane_size {
            body["lane_size"] = json!(lane);
        }
        let out = self.post("/v1/endpoints", token, body).await?;
        Ok(out["id"].as_str().context("endpoint id")?.to_owned())
    }

    /// Create an endpoint of the tenant `token` from a full request `body`; returns its id.
    pub(crate) async fn endpoint_with(&self, token: &str, body: Value) -> anyhow::Result<String> {
        let out = self.post("/v1/endpoints", token, body).await?;
        Ok(out["id"].as_str().context("endpoint id")?.to_owned())
    }

    /// Create an endpoint of the tenant `token` delivering to `url` the events of `event_type`
    /// only; returns its id.
    pub(crate) async fn subscriber(
        &self,
        token: &str,
        url: &str,
        event_type: &str,
    ) -> anyhow::Result<String> {
        let body = json!({ "url": url, "event_types": [event_type] });
        let out = self.post("/v1/endpoints", token, body).await?;
        Ok(out["id"].as_str().context("endpoint id")?.to_owned())
    }

    /// Its `/metrics`, parsed.
    pub(crate) async fn scrape(&self) -> anyhow::Result<sluice::plan::prom::Scrape> {
        let text = self
            .http
            .get(&self.metrics_url)
            .bearer_auth(&self.admin_token)
            .send()
            .await
            .context("GET /metrics")?
            .error_for_status()
            .context("GET /metrics")?
            .text()
            .await
            .context("GET /metrics")?;
        sluice::plan::prom::Scrape::parse(&text).map_err(|e| anyhow::anyhow!("/metrics: {e}"))
    }

    /// A tenant with one endpoint at `url`: `(token, endpoint id)`.
    pub(crate) async fn customer(
        &self,
        name: &str,
        url: &str,
        lane_size: Option<u32>,
    ) -> anyhow::Result<(String, String)> {
        let token = self.tenant(name).await?;
        let id = self.endpoint(&token, url, lane_size).await?;
        Ok((token, id))
    }

    /// How to read live dispatcher state.
    pub(crate) fn probe(&self) -> Probe {
        match self.embedded.as_ref().map(|e| &e.running) {
            Some(Running {
                dispatcher: Some(ctx),
                metrics,
                ..
            }) => Probe::Embedded {
                ctx: ctx.clone(),
                metrics: metrics.clone(),
            },
            _ => Probe::Remote {
                http: self.http.clone(),
                url: self.metrics_url.clone(),
                admin_token: self.admin_token.clone(),
            },
        }
    }

    /// The store of the sluice in this process (none with `--target`).
    pub(crate) fn store(&self) -> Option<sluice::store::SharedStore> {
        self.embedded.as_ref().map(|e| e.running.store.clone())
    }

    /// Is sluice running inside this process (so process CPU and RSS include it)?
    pub(crate) fn embedded(&self) -> bool {
        self.embedded.is_some()
    }

    /// With tracing on in the embedded sluice: spans exported and dropped so far, and the
    /// export requests and bytes the in-process stub took (zero against another collector).
    pub(crate) fn spans(&self) -> Option<(u64, u64, u64, u64)> {
        let m = &self.embedded.as_ref()?.running.metrics;
        let (requests, bytes) = self.otlp_sink.as_ref().map_or((0, 0), |s| s.taken());
        let exported = m.trace_spans_exported.get();
        let dropped = m.trace_spans_dropped.get();
        (exported + dropped > 0 || self.otlp_sink.is_some())
            .then_some((exported, dropped, requests, bytes))
    }

    /// Stop the embedded sluice and remove its data directory.
    pub(crate) async fn stop(self) {
        if let Some(embedded) = self.embedded {
            embedded.stop().await;
        }
    }
}

/// Reads live dispatcher state: directly in-process, or by scraping `/metrics` of a target.
pub(crate) enum Probe {
    /// The dispatcher in this process.
    Embedded {
        /// Its shared state.
        ctx: Arc<Ctx>,
        /// Its metrics.
        metrics: Arc<Metrics>,
    },
    /// A sluice elsewhere.
    Remote {
        /// Client.
        http: reqwest::Client,
        /// Its `/metrics` URL (the admin token goes with it; an operator listener ignores it).
        url: String,
        /// The operator token.
        admin_token: String,
    },
}

/// An empty PostgreSQL database beside the one `--database-url` names, so every endpoint count
/// starts from an empty store; dropped after its run.
pub(crate) struct FreshDatabase {
    /// Its URL.
    pub url: String,
    admin: tokio_postgres::Client,
    name: String,
}

impl FreshDatabase {
    /// Create it.
    pub(crate) async fn create(url: &str) -> anyhow::Result<Self> {
        let (admin, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .with_context(|| format!("connect {url}"))?;
        tokio::spawn(conn);
        let name = format!(
            "sluice_bench_{}_{}",
            std::process::id(),
            sluice::ids::lease_token()
        );
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .with_context(|| format!("create database {name}"))?;
        // The bench's own statements (counts, leases, table sizes, the history's fill) name
        // sluice's tables unqualified: they find them in sluice's schema.
        admin
            .batch_execute(&format!(
                "ALTER DATABASE {name} SET search_path = {}, public",
                sluice::store::postgres::DEFAULT_SCHEMA
            ))
            .await
            .with_context(|| format!("set the search path of {name}"))?;
        let mut parsed = url::Url::parse(url).context("--database-url")?;
        parsed.set_path(&format!("/{name}"));
        Ok(Self {
            url: parsed.to_string(),
            admin,
            name,
        })
    }

    /// Drop it.
    pub(crate) async fn drop_it(self) {
        let _ = self
            .admin
            .batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .await;
    }
}
