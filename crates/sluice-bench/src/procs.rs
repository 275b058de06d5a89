//! Processes of a fleet for the scenarios that run one: `sluice serve` processes (the `sluice`
//! binary beside this one, its flags and environment from the testkit's [`Process`] harness), beside a `redis-server` of their own (the testkit's `RedisServer`); or one `sluice serve` on its own,
//! whose memory is its alone (`hostile`'s token answer).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use sluice_testkit::process::{Builder, Process};
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// One `sluice serve` process.
pub(crate) struct Proc {
    pub(crate) name: String,
    pub(crate) child: Child,
    pub(crate) base: String,
    pub(crate) log: PathBuf,
}

impl Proc {
    /// Start `sluice serve --role role` on a free port, its stderr into `log_dir/name.log`.
    pub(crate) fn spawn(fleet: &Fleet, role: &str, name: &str) -> anyhow::Result<Self> {
        Self::spawn_on(fleet, role, name, sluice_testkit::free_port())
    }

    /// [`Proc::spawn`] on `port` (a process restarted where its clients already send).
    pub(crate) fn spawn_on(
        fleet: &Fleet,
        role: &str,
        name: &str,
        port: u16,
    ) -> anyhow::Result<Self> {
        let mut builder = Process::serve_on(port).binary(&fleet.binary).args(&[
            "--role",
            role,
            "--database-url",
            &fleet.database_url,
        ]);
        if let Some(url) = fleet.redis_url.as_deref() {
            builder = builder.args(&["--redis-url", url]);
        }
        for extra in &fleet.extra {
            builder = builder.arg(extra);
        }
        let builder = builder.env("SLUICE_ADMIN_TOKEN", &fleet.admin_token);
        Self::launch(&builder, &fleet.binary, &fleet.log_dir, name, port)
    }

    /// One `sluice serve` on its own (API and dispatcher, the embedded store in `data_dir`, no
    /// Redis) on a free port, with `extra` flags; its stderr into `data_dir/name.log`.
    pub(crate) fn spawn_alone(
        binary: &Path,
        data_dir: &Path,
        admin_token: &str,
        name: &str,
        extra: &[String],
    ) -> anyhow::Result<Self> {
        let port = sluice_testkit::free_port();
        let mut builder = Process::serve_on(port)
            .binary(binary)
            .arg("--data-dir")
            .arg(data_dir);
        for extra in extra {
            builder = builder.arg(extra);
        }
        let builder = builder.env("SLUICE_ADMIN_TOKEN", admin_token);
        Self::launch(&builder, binary, data_dir, name, port)
    }

    /// Start what `builder` says (its arguments and environment, the testkit's), its stderr into
    /// `log_dir/name.log`, killed on drop.
    fn launch(
        builder: &Builder,
        binary: &Path,
        log_dir: &Path,
        name: &str,
        port: u16,
    ) -> anyhow::Result<Self> {
        let log = log_dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).with_context(|| format!("{}", log.display()))?;
        let child = Command::from(builder.command())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("spawn {}", binary.display()))?;
        Ok(Self {
            name: name.to_owned(),
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
        })
    }

    /// Wait until it answers `path` with a success.
    pub(crate) async fn wait_for(
        &mut self,
        http: &reqwest::Client,
        path: &str,
    ) -> anyhow::Result<()> {
        let until = Instant::now() + Duration::from_secs(60);
        while Instant::now() < until {
            if let Ok(Some(status)) = self.child.try_wait() {
                bail!("{} exited with {status}: {}", self.name, self.said());
            }
            let url = format!("{}{path}", self.base);
            if http
                .get(&url)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("{} never answered {path}: {}", self.name, self.said())
    }

    /// `kill -9`.
    pub(crate) async fn kill9(&mut self) -> anyhow::Result<()> {
        self.child.kill().await.context("kill -9")
    }

    /// Send SIGTERM.
    pub(crate) async fn sigterm(&self) -> anyhow::Result<()> {
        let pid = self.child.id().context("already exited")?;
        let status = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await
            .context("kill -TERM")?;
        anyhow::ensure!(status.success(), "kill -TERM {pid}: {status}");
        Ok(())
    }

    /// What it wrote to stderr so far.
    pub(crate) fn said(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Where the fleet's processes find their binary, store, Redis and token.
pub(crate) struct Fleet {
    /// The `sluice` binary.
    pub(crate) binary: PathBuf,
    /// The PostgreSQL database they share.
    pub(crate) database_url: String,
    /// The Redis for fleet-wide lanes (`None`: the fleet runs without Redis).
    pub(crate) redis_url: Option<String>,
    /// The operator token.
    pub(crate) admin_token: String,
    /// Where each process's stderr goes (`name.log`).
    pub(crate) log_dir: PathBuf,
    /// Further `sluice serve` flags for every process.
    pub(crate) extra: Vec<String>,
}

/// The `sluice` binary beside this one (`sluice bench` runs `sluice-bench` from its own
/// directory, so both are built together), or `SLUICE_BIN`.
pub(crate) fn sluice_binary() -> anyhow::Result<PathBuf> {
    sluice_testkit::process::find_sluice_binary().context(
        "the sluice binary was not found beside sluice-bench: the fleet scenarios run it \
         (cargo build --release -p sluice -p sluice-bench)",
    )
}
