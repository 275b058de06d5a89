//! The sluice a phase drives: one in this process (embedded SQLite, or PostgreSQL in a fresh
//! database), or with `--dispatchers N` a fleet of one API process and N dispatcher processes
//! (`sluice serve`) on a fresh PostgreSQL database and a `redis-server` of their own, driven
//! through the API process as a client would.

use anyhow::Context;

use super::BenchArgs;
use super::harness::{FreshDatabase, Sluice, Tuning};
use super::procs::{Fleet, Proc, sluice_binary};
use sluice_testkit::RedisServer;

/// The sluice of one phase.
pub(crate) struct Stage {
    /// The sluice to drive: in this process, or the fleet's API process.
    pub(crate) sluice: Sluice,
    /// What else runs for it, stopped with it.
    around: Around,
}

/// What a phase's sluice runs beside.
enum Around {
    /// Nothing: it runs in this process (on PostgreSQL, in a fresh database).
    Embedded(Option<FreshDatabase>),
    /// It is one API process and N dispatcher processes on a fresh database and a Redis of
    /// their own.
    Fleet(Box<FleetParts>),
}

/// The processes, Redis and database of a fleet phase.
struct FleetParts {
    processes: Vec<Proc>,
    redis: Option<RedisServer>,
    db: FreshDatabase,
    log_dir: std::path::PathBuf,
}

impl Stage {
    /// Start the phase's sluice: a fleet with `--dispatchers N`, else one in this process (on
    /// PostgreSQL with `--database-url`, in a fresh database beside the one it names).
    pub(crate) async fn start(args: &BenchArgs, tuning: &Tuning) -> anyhow::Result<Self> {
        if let Some(n) = args.dispatchers.filter(|n| *n > 0) {
            return Self::fleet(args, tuning, n).await;
        }
        let Some(url) = &args.database_url else {
            let sluice = Sluice::start(args, tuning).await?;
            let around = Around::Embedded(None);
            return Ok(Self { sluice, around });
        };
        let db = FreshDatabase::create(url).await?;
        let own = BenchArgs {
            database_url: Some(db.url.clone()),
            ..args.clone()
        };
        let sluice = Sluice::start(&own, tuning).await?;
        Ok(Self {
            sluice,
            around: Around::Embedded(Some(db)),
        })
    }

    async fn fleet(args: &BenchArgs, tuning: &Tuning, dispatchers: u32) -> anyhow::Result<Self> {
        let server = args
            .database_url
            .clone()
            .or_else(|| std::env::var("SLUICE_TEST_DATABASE_URL").ok())
            .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
        let _ = rustls::crypto::ring::default_provider().install_default();
        let db = FreshDatabase::create(&server).await?;
        let redis = if args.no_redis {
            None
        } else {
            let port = sluice_testkit::free_port();
            Some((RedisServer::start_on(port).await?, port))
        };
        let log_dir = std::env::temp_dir().join(format!(
            "sluice-bench-fleet-{}-{}",
            std::process::id(),
            sluice::ids::lease_token()
        ));
        std::fs::create_dir_all(&log_dir).with_context(|| format!("{}", log_dir.display()))?;
        let fleet = Fleet {
            binary: sluice_binary()?,
            database_url: db.url.clone(),
            redis_url: redis
                .as_ref()
                .map(|(_, port)| format!("redis://127.0.0.1:{port}")),
            admin_token: sluice::ids::new_token("sk_admin"),
            log_dir: log_dir.clone(),
            extra: dispatcher_flags(args, tuning),
        };
        let http = reqwest::Client::new();
        let mut api = Proc::spawn(&fleet, "api", "api")?;
        api.wait_for(&http, "/readyz").await?;
        let mut processes = vec![];
        for i in 0..dispatchers {
            let mut d = Proc::spawn(&fleet, "dispatcher", &format!("dispatcher-{i}"))?;
            d.wait_for(&http, "/readyz").await?;
            processes.push(d);
        }
        let remote = BenchArgs {
            target: Some(api.base.clone()),
            admin_token: Some(fleet.admin_token.clone()),
            database_url: None,
            ..args.clone()
        };
        processes.push(api);
        let sluice = Sluice::start(&remote, &Tuning::default()).await?;
        let parts = FleetParts {
            processes,
            redis: redis.map(|(r, _)| r),
            db,
            log_dir,
        };
        Ok(Self {
            sluice,
            around: Around::Fleet(Box::new(parts)),
        })
    }

    /// The fresh PostgreSQL database it runs on, if any.
    pub(crate) fn database_url(&self) -> Option<&str> {
        match &self.around {
            Around::Embedded(db) => db.as_ref().map(|db| db.url.as_str()),
            Around::Fleet(parts) => Some(parts.db.url.as_str()),
        }
    }

    /// Stop the sluice and everything it ran beside, and drop its database.
    pub(crate) async fn stop(self) {
        self.sluice.stop().await;
        match self.around {
            Around::Embedded(db) => {
                if let Some(db) = db {
                    db.drop_it().await;
                }
            }
            Around::Fleet(parts) => {
                let FleetParts {
                    processes,
                    redis,
                    db,
                    log_dir,
                } = *parts;
                for mut p in processes {
                    let _ = p.kill9().await;
                }
                if let Some(mut redis) = redis {
                    redis.stop();
                }
                db.drop_it().await;
                let _ = std::fs::remove_dir_all(&log_dir);
            }
        }
    }
}

/// The flags a fleet's processes take from the phase's tuning (the pool size), as an embedded
/// sluice takes them from its settings.
fn dispatcher_flags(args: &BenchArgs, tuning: &Tuning) -> Vec<String> {
    match args.concurrency.or(tuning.concurrency) {
        Some(c) => vec!["--concurrency".into(), c.to_string()],
        None if tuning.auto_concurrency => vec!["--concurrency".into(), "auto".into()],
        None => Vec::new(),
    }
}
