//! The real `sluice` binary run as a child process, for tests and the bench: [`Process::serve`] (a
//! `sluice serve` as tests usually want it) or [`Process::command`] (any subcommand, nothing
//! added) build one, with env vars set or removed; [`Builder::start`] waits for it to answer,
//! [`Builder::run`] runs a command that must end by itself to completion. A running process can be
//! stopped with SIGTERM (its drain) or SIGKILL, and what it wrote to stdout and stderr is
//! collected as it comes (a pipe left unread fills up and blocks the process's logging, and with
//! it the process). A small client for its HTTP API.
//!
//! The binary is [`sluice_binary`]: `SLUICE_BIN`, else the `sluice` that cargo built beside
//! the running test or bench executable.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long a process is given to answer, or to exit once it must.
const PATIENCE: Duration = Duration::from_secs(30);

/// The `sluice` binary: `SLUICE_BIN`, else `sluice` in the directory of the running executable
/// or the one above it (cargo puts integration tests in `target/<profile>/deps/`, binaries in
/// `target/<profile>/`); `None` when there is none.
pub fn find_sluice_binary() -> Option<PathBuf> {
    if let Some(named) = std::env::var_os("SLUICE_BIN") {
        return Some(PathBuf::from(named));
    }
    let exe = std::env::current_exe().ok()?;
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join("sluice"))
        .find(|candidate| candidate.is_file())
}

/// [`find_sluice_binary`], which must find it.
pub fn sluice_binary() -> PathBuf {
    find_sluice_binary()
        .expect("the sluice binary beside this executable (cargo build -p sluice), or SLUICE_BIN")
}

/// A `sluice` process being built: its subcommand, arguments and environment.
pub struct Builder {
    binary: Option<PathBuf>,
    args: Vec<OsString>,
    env: Vec<(String, Option<String>)>,
    port: Option<u16>,
}

/// A running `sluice` process; killed if the test ends without stopping it.
pub struct Process {
    child: Option<Child>,
    stdout: Collected,
    stderr: Collected,
    /// Its `--listen` port, when the builder gave one.
    pub port: u16,
    /// `http://127.0.0.1:PORT` of its `--listen` address (empty without one).
    pub base: String,
}

/// A process that has exited: how, and everything it wrote.
#[derive(Debug)]
pub struct Finished {
    /// How it exited.
    pub status: ExitStatus,
    /// Everything it wrote to stdout.
    pub stdout: String,
    /// Everything it wrote to stderr.
    pub stderr: String,
}

/// One output stream, read on a thread as it comes, line by line.
struct Collected {
    text: Arc<Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Collected {
    /// Collect `stream` a whole line at a time (so what is read so far never ends mid-line).
    fn read(stream: impl std::io::Read + Send + 'static) -> Collected {
        let text = Arc::new(Mutex::new(Vec::new()));
        let sink = text.clone();
        let reader = std::thread::spawn(move || {
            let mut stream = std::io::BufReader::new(stream);
            let mut line = Vec::new();
            while std::io::BufRead::read_until(&mut stream, b'\n', &mut line).is_ok_and(|n| n > 0) {
                sink.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .append(&mut line);
            }
        });
        Collected {
            text,
            reader: Some(reader),
        }
    }

    fn so_far(&self) -> String {
        String::from_utf8_lossy(&self.text.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }

    /// Everything, once the stream has closed (the process has exited).
    fn all(&mut self) -> String {
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.so_far()
    }
}

impl Builder {
    /// One more argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Builder {
        self.args.push(arg.into());
        self
    }

    /// More arguments.
    pub fn args(mut self, args: &[&str]) -> Builder {
        self.args.extend(args.iter().map(OsString::from));
        self
    }

    /// Set an environment variable.
    pub fn env(mut self, key: &str, value: &str) -> Builder {
        self.env.push((key.to_owned(), Some(value.to_owned())));
        self
    }

    /// Remove an environment variable (one this test process has would otherwise pass on).
    pub fn env_remove(mut self, key: &str) -> Builder {
        self.env.push((key.to_owned(), None));
        self
    }

    /// `--listen 127.0.0.1:PORT` on a free loopback port.
    pub fn listen(self) -> Builder {
        self.listen_on(crate::free_port())
    }

    /// `--listen 127.0.0.1:PORT` on this port (a restart on the same address).
    pub fn listen_on(mut self, port: u16) -> Builder {
        self.port = Some(port);
        self.args(&["--listen", &format!("127.0.0.1:{port}")])
    }

    /// Run this binary instead of [`sluice_binary`].
    pub fn binary(mut self, binary: impl Into<PathBuf>) -> Builder {
        self.binary = Some(binary.into());
        self
    }

    /// The command it runs (binary, arguments, environment), its stdio not set: for a caller
    /// that runs it its own way (the bench, as a `tokio::process::Command` logging to a file).
    pub fn command(&self) -> Command {
        let mut command = Command::new(self.binary.clone().unwrap_or_else(sluice_binary));
        command.args(&self.args);
        for (key, value) in &self.env {
            match value {
                Some(v) => command.env(key, v),
                None => command.env_remove(key),
            };
        }
        command
    }

    /// Start it and return at once.
    pub fn spawn(self) -> Process {
        let mut command = self.command();
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn sluice");
        let stdout = Collected::read(child.stdout.take().expect("piped stdout"));
        let stderr = Collected::read(child.stderr.take().expect("piped stderr"));
        let port = self.port.unwrap_or_default();
        Process {
            child: Some(child),
            stdout,
            stderr,
            port,
            base: self
                .port
                .map(|p| format!("http://127.0.0.1:{p}"))
                .unwrap_or_default(),
        }
    }

    /// Start it and wait until `/healthz` answers at all.
    pub async fn start(self) -> Process {
        let shown = format!("{:?}", self.args);
        let p = self.spawn();
        let http = crate::http();
        let up = crate::eventually(PATIENCE, || async {
            http.get(format!("{}/healthz", p.base)).send().await.is_ok()
        })
        .await;
        assert!(up, "sluice {shown} never answered /healthz");
        p
    }

    /// Run it to completion (for commands that must end by themselves, such as one that must
    /// fail at start); panics if it has not exited within 30 s.
    pub fn run(self) -> Finished {
        let mut p = self.spawn();
        p.exit_within(PATIENCE, "sluice did not exit")
    }
}

impl Process {
    /// `sluice serve` as tests usually want it: `--listen` on a free loopback port, loopback
    /// receivers allowed, the test admin token, its own lines at info and the rest at warn.
    pub fn serve() -> Builder {
        Process::serve_on(crate::free_port())
    }

    /// [`Process::serve`] listening on `port` (a restart where its clients already send).
    pub fn serve_on(port: u16) -> Builder {
        Process::command("serve")
            .listen_on(port)
            .args(&["--allow-network", "127.0.0.0/8"])
            .env("SLUICE_ADMIN_TOKEN", crate::ADMIN)
            // The binary's own lines (listening, stopped: …) are info; the rest only warnings.
            .env("SLUICE_LOG", "warn,sluice=info")
    }

    /// `sluice SUBCOMMAND` and nothing else: no flag or environment variable added.
    pub fn command(subcommand: &str) -> Builder {
        Builder {
            binary: None,
            args: vec![subcommand.into()],
            env: Vec::new(),
            port: None,
        }
    }

    /// Start `sluice serve --listen 127.0.0.1:PORT` with `args` and wait for `/healthz`.
    pub async fn start(args: &[&str]) -> Process {
        Process::serve().args(args).start().await
    }

    /// Wait until `path` answers 200; whether it did within 30 s.
    pub async fn answers(&self, path: &str) -> bool {
        let http = crate::http();
        let url = format!("{}{path}", self.base);
        crate::eventually(PATIENCE, || async {
            http.get(&url).send().await.is_ok_and(|r| r.status() == 200)
        })
        .await
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// How it exited, if it has.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().expect("try_wait"))
    }

    /// What it has written to stdout so far.
    pub fn stdout_so_far(&self) -> String {
        self.stdout.so_far()
    }

    /// What it has written to stderr so far.
    pub fn stderr_so_far(&self) -> String {
        self.stderr.so_far()
    }

    /// Send SIGTERM and wait for the exit; what it wrote to stderr. Panics unless it exited 0.
    pub fn terminate(self) -> String {
        let done = self.sigterm_and_wait();
        assert!(
            done.status.success(),
            "sluice exited with {}: {}",
            done.status,
            done.stderr
        );
        done.stderr
    }

    /// Send SIGTERM (the way an orchestrator stops it) and wait for the exit, however it went.
    pub fn sigterm_and_wait(mut self) -> Finished {
        self.sigterm();
        let mut child = self.child.take().expect("running");
        let status = child.wait().expect("exit");
        self.finished(status)
    }

    /// Send SIGTERM, then wait at most 30 s for the exit, however it went.
    pub fn sigterm_within(mut self) -> Finished {
        self.sigterm();
        self.exit_within(PATIENCE, "sluice did not stop on SIGTERM")
    }

    /// SIGKILL, no drain; everything it wrote.
    pub fn kill(mut self) -> Finished {
        let mut child = self.child.take().expect("running");
        child.kill().expect("SIGKILL");
        let status = child.wait().expect("exit");
        self.finished(status)
    }

    fn sigterm(&self) {
        let pid = self.pid().to_string();
        let killed = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(killed.is_ok_and(|s| s.success()), "kill -TERM {pid}");
    }

    fn exit_within(&mut self, within: Duration, failure: &str) -> Finished {
        let until = Instant::now() + within;
        let status = loop {
            if let Some(status) = self.exited() {
                break status;
            }
            assert!(Instant::now() < until, "{failure}");
            std::thread::sleep(Duration::from_millis(50));
        };
        self.child = None;
        self.finished(status)
    }

    fn finished(&mut self, status: ExitStatus) -> Finished {
        Finished {
            status,
            stdout: self.stdout.all(),
            stderr: self.stderr.all(),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A client for a sluice's HTTP API at `base`.
pub struct Client {
    base: String,
    http: reqwest::Client,
}

impl Client {
    /// A client for `base`.
    pub fn new(base: &str) -> Client {
        Client {
            base: base.to_owned(),
            http: crate::http(),
        }
    }

    /// GET `path` with an optional token: (status, body as JSON or Null, body text).
    pub async fn get(&self, path: &str, token: Option<&str>) -> (u16, Value, String) {
        let mut req = self.http.get(format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req.send().await.expect("request");
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::Null),
            text,
        )
    }

    /// POST JSON: (status, body).
    pub async fn post(&self, token: &str, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .expect("request");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Create a tenant: (id, token).
    pub async fn tenant(&self, name: &str) -> (String, String) {
        let (status, body) = self
            .post(crate::ADMIN, "/v1/tenants", json!({ "name": name }))
            .await;
        assert_eq!(status, 201, "{body}");
        (
            body["id"].as_str().expect("id").to_owned(),
            body["token"].as_str().expect("token").to_owned(),
        )
    }

    /// Create an endpoint; its id.
    pub async fn endpoint(&self, token: &str, url: &str, extra: Value) -> String {
        let mut body = json!({ "url": url });
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        let (status, body) = self.post(token, "/v1/endpoints", body).await;
        assert_eq!(status, 201, "{body}");
        body["id"].as_str().expect("id").to_owned()
    }

    /// Send a message; its id.
    pub async fn send(&self, token: &str, event_type: &str, payload: Value) -> String {
        let (status, body) = self
            .post(
                token,
                "/v1/messages",
                json!({ "event_type": event_type, "payload": payload }),
            )
            .await;
        assert!(status == 202 || status == 200, "{status} {body}");
        body["id"].as_str().expect("id").to_owned()
    }
}
