//! Helpers for tests that run `sluice serve` as real processes: spawning one with its role,
//! stopping it with SIGTERM and reading what it said, and a small client for its HTTP API.

#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// A `sluice serve` process; killed if the test ends without stopping it.
pub(crate) struct Process {
    child: Option<Child>,
    /// Reads its stderr as it comes (a pipe left unread fills up and blocks the process's
    /// logging, and with it the process); yields everything once the process has exited.
    stderr: Option<std::thread::JoinHandle<Vec<u8>>>,
    /// Its `--listen` address, `http://127.0.0.1:PORT`.
    pub(crate) base: String,
}

impl Process {
    /// Start `sluice serve --listen 127.0.0.1:PORT` with `args` and wait for `/healthz`.
    pub(crate) async fn start(args: &[&str]) -> Process {
        let port = sluice_testkit::free_port();
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--allow-network", "127.0.0.0/8"])
            .args(args)
            .env("SLUICE_ADMIN_TOKEN", sluice_testkit::ADMIN)
            // The binary's own lines (listening, stopped: …) are info; the rest only warnings.
            .env("SLUICE_LOG", "warn,sluice=info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sluice");
        let mut pipe = child.stderr.take().expect("piped stderr");
        let stderr = std::thread::spawn(move || {
            let mut all = Vec::new();
            let _ = std::io::Read::read_to_end(&mut pipe, &mut all);
            all
        });
        let p = Process {
            child: Some(child),
            stderr: Some(stderr),
            base: format!("http://127.0.0.1:{port}"),
        };
        let http = sluice_testkit::http();
        let up = sluice_testkit::eventually(Duration::from_secs(30), || async {
            http.get(format!("{}/healthz", p.base)).send().await.is_ok()
        })
        .await;
        assert!(up, "sluice {args:?} never answered /healthz");
        p
    }

    /// Send SIGTERM and wait for the exit; what it wrote to stderr.
    pub(crate) fn terminate(mut self) -> String {
        let mut child = self.child.take().expect("running");
        let killed = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("kill");
        assert!(killed.success());
        let status = child.wait().expect("exit");
        let stderr = self
            .stderr
            .take()
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default();
        let said = String::from_utf8_lossy(&stderr).into_owned();
        assert!(status.success(), "sluice exited with {status}: {said}");
        said
    }

    /// SIGKILL, no drain.
    pub(crate) fn kill(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
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
pub(crate) struct Client {
    base: String,
    http: reqwest::Client,
}

impl Client {
    /// A client for `base`.
    pub(crate) fn new(base: &str) -> Client {
        Client {
            base: base.to_owned(),
            http: sluice_testkit::http(),
        }
    }

    /// GET `path` with an optional token: (status, body as JSON or Null, body text).
    pub(crate) async fn get(&self, path: &str, token: Option<&str>) -> (u16, Value, String) {
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
    pub(crate) async fn post(&self, token: &str, path: &str, body: Value) -> (u16, Value) {
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
    pub(crate) async fn tenant(&self, name: &str) -> (String, String) {
        let (status, body) = self
            .post(
                sluice_testkit::ADMIN,
                "/v1/tenants",
                json!({ "name": name }),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        (
            body["id"].as_str().expect("id").to_owned(),
            body["token"].as_str().expect("token").to_owned(),
        )
    }

    /// Create an endpoint; its id.
    pub(crate) async fn endpoint(&self, token: &str, url: &str, extra: Value) -> String {
        let mut body = json!({ "url": url });
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        let (status, body) = self.post(token, "/v1/endpoints", body).await;
        assert_eq!(status, 201, "{body}");
        body["id"].as_str().expect("id").to_owned()
    }

    /// Send a message; its id.
    pub(crate) async fn send(&self, token: &str, event_type: &str, payload: Value) -> String {
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
