//! The sluice under test: started in this process on 127.0.0.1 (embedded SQLite in a fresh
//! directory by default, or the given PostgreSQL/Redis), or an already running one at `--target`.
//! Tenants and endpoints are created through the public API either way.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::BenchArgs;
use crate::config::RawSettings;
use crate::dispatcher::Ctx;
use crate::metrics::Metrics;
use crate::server::Running;

/// A sluice to drive.
pub struct Sluice {
    /// `http://host:port`
    pub base: String,
    /// Bearer token of the operator.
    admin_token: String,
    /// The HTTP client producers share.
    pub http: reqwest::Client,
    running: Option<Running>,
    data_dir: Option<PathBuf>,
}

/// Per-phase settings that differ from sluice's defaults.
#[derive(Debug, Clone, Default)]
pub struct Tuning {
    /// Global concurrency (the pool).
    pub concurrency: Option<u32>,
}

impl Sluice {
    /// Start one in-process (or connect to `--target`).
    pub async fn start(args: &BenchArgs, tuning: &Tuning) -> anyhow::Result<Self> {
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
            return Ok(Self {
                base: target.trim_end_matches('/').to_owned(),
                admin_token,
                http,
                running: None,
                data_dir: None,
            });
        }
        let data_dir = std::env::temp_dir().join(format!(
            "sluice-bench-{}-{}",
            std::process::id(),
            crate::ids::lease_token()
        ));
        std::fs::create_dir_all(&data_dir)
            .with_context(|| format!("create {}", data_dir.display()))?;
        let admin_token = crate::ids::new_token("sk_admin");
        let concurrency = args.concurrency.or(tuning.concurrency);
        let config = RawSettings {
            listen: Some("127.0.0.1:0".into()),
            data_dir: Some(data_dir.clone()),
            database_url: args.database_url.clone(),
            redis_url: args.redis_url.clone(),
            concurrency: concurrency.map(|c| c.to_string()),
            allow_network: vec!["127.0.0.0/8".into()],
            admin_token: Some(admin_token.clone()),
            // A bench phase ends with attempts still hanging on a blackhole: do not wait 20 s.
            drain_grace: Some("1s".into()),
            ..Default::default()
        }
        .validate()
        .map_err(|e| anyhow::anyhow!("bench settings: {e}"))?;
        let running = crate::server::start(config).await?;
        let addr = running.addr.context("the embedded sluice has no API")?;
        Ok(Self {
            base: format!("http://{addr}"),
            admin_token,
            http,
            running: Some(running),
            data_dir: Some(data_dir),
        })
    }

    /// The URL of `POST /v1/messages`.
    pub fn messages_url(&self) -> String {
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
    pub async fn tenant(&self, name: &str) -> anyhow::Result<String> {
        let out = self
            .post("/v1/tenants", &self.admin_token, json!({ "name": name }))
            .await?;
        Ok(out["token"].as_str().context("tenant token")?.to_owned())
    }

    /// Create an endpoint of the tenant `token` delivering to `url`; returns its id.
    pub async fn endpoint(
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

    /// A tenant with one endpoint at `url`: `(token, endpoint id)`.
    pub async fn customer(
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
    pub fn probe(&self) -> Probe {
        match &self.running {
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
                url: format!("{}/metrics", self.base),
            },
        }
    }

    /// Is sluice running inside this process (so process CPU and RSS include it)?
    pub fn embedded(&self) -> bool {
        self.running.is_some()
    }

    /// Stop the embedded sluice and remove its data directory.
    pub async fn stop(self) {
        if let Some(running) = self.running {
            let _ = running.stop().await;
        }
        if let Some(dir) = self.data_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Reads live dispatcher state: directly in-process, or by scraping `/metrics` of a target.
pub enum Probe {
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
        /// Its `/metrics` URL.
        url: String,
    },
}
