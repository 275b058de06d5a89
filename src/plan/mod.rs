//! `sluice plan`: the sizing arithmetic of [`crate::sizing`] applied to live measurements of a
//! running sluice, from its `/metrics` (two scrapes, diffed) and/or its store (recent attempts).
//!
//! # Layout
//! - [`prom`]: a small Prometheus / OpenMetrics text parser and histogram arithmetic.
//! - [`analyse`]: measurements → Erlang C concurrency, layout, lanes and warnings.
//! - [`store`](mod@store): measurements read through the public [`crate::store::Store`] trait.
//! - `table`: the text rendering of a [`PlanReport`].

pub mod analyse;
pub mod prom;
pub mod store;
mod table;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

pub use analyse::{
    EndpointLoad, HostLoad, LaneRecommendation, Measurements, PlanOptions, PlanReport,
    SKEW_WARNING_RATIO, from_scrapes, plan,
};
pub use prom::{HistogramSnapshot, PromError, Sample, Scrape, counter_delta};
pub use store::{StoreReading, read_store};

use crate::sizing::WaitTarget;

/// `sluice plan`.
#[derive(Debug, Clone, clap::Args)]
pub struct PlanArgs {
    /// A running sluice's metrics, e.g. http://127.0.0.1:8080/metrics (scraped twice); on the
    /// API listener they need --admin-token, on an --operator-listen address they do not.
    #[arg(long = "metrics-url")]
    pub metrics_url: Option<String>,
    /// The admin token, sent as a Bearer token with each scrape.
    #[arg(
        long = "admin-token",
        env = "SLUICE_ADMIN_TOKEN",
        hide_env_values = true
    )]
    pub admin_token: Option<String>,
    /// Seconds between the two scrapes.
    #[arg(long, default_value_t = 10.0)]
    pub interval: f64,
    /// Read the store at this URL (postgres://… or sqlite:PATH); read-only use.
    #[arg(long = "database-url")]
    pub database_url: Option<String>,
    /// Read the embedded store in this directory (its sluice.db).
    #[arg(long = "data-dir")]
    pub data_dir: Option<PathBuf>,
    /// How far back the store's attempts are read, seconds.
    #[arg(long, default_value_t = 300.0)]
    pub window: f64,
    /// Most delivery rows to scan in the store.
    #[arg(long = "max-deliveries", default_value_t = 100_000)]
    pub max_deliveries: u32,
    /// Queue-wait target, seconds: the mean, or with --percentile that percentile.
    #[arg(long = "target-wait", default_value_t = 0.5)]
    pub target_wait: f64,
    /// Make the target a percentile of the wait (e.g. 95), not the mean.
    #[arg(long)]
    pub percentile: Option<f64>,
    /// Largest share of the recommended concurrency one endpoint's lane may hold, 0–1.
    #[arg(long = "lane-share", default_value_t = 0.25)]
    pub lane_share: f64,
    /// Concurrent tasks per process.
    #[arg(long = "tasks-per-process", default_value_t = 160)]
    pub tasks_per_process: u32,
    /// Processes per pod.
    #[arg(long = "processes-per-pod", default_value_t = 4)]
    pub processes_per_pod: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

impl PlanArgs {
    /// Arguments for reading only `metrics_url`, with every other value at its default.
    pub fn for_metrics(metrics_url: impl Into<String>, interval_s: f64) -> Self {
        Self {
            metrics_url: Some(metrics_url.into()),
            admin_token: None,
            interval: interval_s,
            database_url: None,
            data_dir: None,
            window: 300.0,
            max_deliveries: 100_000,
            target_wait: 0.5,
            percentile: None,
            lane_share: 0.25,
            tasks_per_process: 160,
            processes_per_pod: 4,
            json: false,
        }
    }

    /// The sizing options these arguments describe.
    pub fn options(&self) -> anyhow::Result<PlanOptions> {
        let target = match self.percentile {
            Some(p) if p > 0.0 && p < 100.0 => WaitTarget::Percentile {
                quantile: p / 100.0,
                wait_s: self.target_wait,
            },
            Some(p) => bail!("--percentile must be between 0 and 100, got {p}"),
            None => WaitTarget::Mean {
                wait_s: self.target_wait,
            },
        };
        if !(self.lane_share > 0.0 && self.lane_share <= 1.0) {
            bail!("--lane-share must be in (0, 1], got {}", self.lane_share);
        }
        Ok(PlanOptions {
            target,
            lane_share: self.lane_share,
            tasks_per_process: self.tasks_per_process,
            processes_per_pod: self.processes_per_pod,
        })
    }
}

/// Fetches and parses one scrape of `url`, with `admin_token` as a Bearer token when given.
pub async fn scrape(
    client: &reqwest::Client,
    url: &str,
    admin_token: Option<&str>,
) -> anyhow::Result<Scrape> {
    let mut request = client.get(url);
    if let Some(token) = admin_token {
        request = request.bearer_auth(token);
    }
    let text = request
        .send()
        .await
        .with_context(|| format!("cannot reach {url}"))?
        .error_for_status()
        .with_context(|| format!("{url} answered with an error"))?
        .text()
        .await
        .with_context(|| format!("cannot read {url}"))?;
    Ok(Scrape::parse(&text)?)
}

/// Measures as `args` says (scrape twice `interval` apart and/or read the store) and plans.
pub async fn measure(args: &PlanArgs) -> anyhow::Result<PlanReport> {
    let options = args.options()?;
    let store_wanted = args.database_url.is_some() || args.data_dir.is_some();
    if args.metrics_url.is_none() && !store_wanted {
        bail!("give --metrics-url and/or --database-url / --data-dir");
    }
    let mut warnings = Vec::new();
    let from_metrics = match &args.metrics_url {
        Some(url) => {
            if !(args.interval.is_finite() && args.interval > 0.0) {
                bail!("--interval must be > 0 seconds, got {}", args.interval);
            }
            let _ = rustls::crypto::ring::default_provider().install_default();
            let client = reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .context("cannot build an HTTP client")?;
            let token = args.admin_token.as_deref();
            let before = scrape(&client, url, token).await?;
            let started = Instant::now();
            tokio::time::sleep(Duration::from_secs_f64(args.interval)).await;
            let after = scrape(&client, url, token).await?;
            Some(from_scrapes(
                &before,
                &after,
                started.elapsed().as_secs_f64(),
            ))
        }
        None => None,
    };
    let from_store = if store_wanted {
        Some(read_from_store(args).await?)
    } else {
        None
    };
    let measured = match (from_metrics, from_store) {
        (Some(mut m), Some(s)) => {
            store::merge(&mut m, &s);
            warnings.extend(s.warnings);
            m
        }
        (Some(m), None) => m,
        (None, Some(s)) => {
            warnings.extend(s.warnings);
            s.measurements
        }
        (None, None) => unreachable!("checked above"),
    };
    let mut report = plan(&measured, &options)?;
    report.warnings.extend(warnings);
    Ok(report)
}

async fn read_from_store(args: &PlanArgs) -> anyhow::Result<StoreReading> {
    if !(args.window.is_finite() && args.window > 0.0) {
        bail!("--window must be > 0 seconds, got {}", args.window);
    }
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| "sluice-data".into());
    if args.database_url.is_none() && !data_dir.join("sluice.db").is_file() {
        bail!("no sluice.db in {}", data_dir.display());
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let store = crate::store::open(args.database_url.as_deref(), &data_dir, Default::default())
        .await
        .context("cannot open the store")?;
    let reading = read_store(
        store.as_ref(),
        Duration::from_secs_f64(args.window),
        args.max_deliveries.max(1),
        crate::clock::now_ms(),
    )
    .await
    .context("cannot read the store")?;
    Ok(reading)
}

/// `sluice plan`: measure, plan, print a table (or JSON with `--json`).
pub async fn run(args: PlanArgs) -> anyhow::Result<()> {
    if let Some(url) = &args.metrics_url {
        eprintln!("scraping {url} twice, {} s apart…", args.interval);
    }
    let report = measure(&args).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{report}");
    }
    Ok(())
}
