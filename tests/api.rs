//! The HTTP API end to end: a real sluice on 127.0.0.1:0 (SQLite), real loopback receivers,
//! `reqwest` as the client. Every route's happy path and its errors, tenant isolation,
//! idempotency under concurrency, dead letters and replay, the evidence, metrics, OpenAPI.

#[path = "api/deliveries.rs"]
mod deliveries;
#[path = "api/errors.rs"]
mod errors;
#[path = "api/evidence.rs"]
mod evidence;
#[path = "api/resources.rs"]
mod resources;
mod support;

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use sluice::config::RawSettings;
use sluice::server::Running;

/// The operator token every test server uses.
pub const ADMIN: &str = "admin-token-for-api-tests";

/// A running sluice and a client for it.
pub struct Sluice {
    running: Option<Running>,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    http: reqwest::Client,
    /// The data directory (kept until the test ends).
    pub dir: tempfile::TempDir,
}

/// A response: status, JSON body (Null when empty or not JSON), content type.
pub struct Reply {
    pub status: u16,
    pub body: Value,
    pub content_type: String,
    pub text: String,
}

impl Sluice {
    /// Start on a free port with loopback allowed, after `tweak` adjusts the settings.
    pub async fn start(tweak: impl FnOnce(&mut RawSettings)) -> Self {
        Self::start_in(tempfile::tempdir().expect("tempdir"), tweak).await
    }

    /// Start on a given data directory.
    pub async fn start_in(dir: tempfile::TempDir, tweak: impl FnOnce(&mut RawSettings)) -> Self {
        let mut raw = RawSettings {
            listen: Some("127.0.0.1:0".into()),
            data_dir: Some(dir.path().to_path_buf()),
            allow_network: vec!["127.0.0.0/8".into()],
            admin_token: Some(ADMIN.into()),
            ..Default::default()
        };
        tweak(&mut raw);
        let config = raw.validate().expect("valid settings");
        let running = sluice::server::start(config).await.expect("server starts");
        let base = format!("http://{}", running.addr.expect("api address"));
        Self {
            running: Some(running),
            base,
            http: reqwest::Client::new(),
            dir,
        }
    }

    /// The running server.
    pub fn running(&self) -> &Running {
        self.running.as_ref().expect("running")
    }

    /// Stop it, keeping the data directory.
    pub async fn stop(mut self) -> tempfile::TempDir {
        if let Some(r) = self.running.take() {
            r.stop().await;
        }
        self.dir
    }

    /// A request with an optional bearer token and JSON body.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let body = body.map(|b| serde_json::to_vec(&b).expect("json"));
        self.raw(method, path, token, body, "application/json", &[])
            .await
    }

    /// A request with raw bytes, content type and extra headers.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Vec<u8>>,
        content_type: &str,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if let Some(b) = body {
            req = req.header("content-type", content_type).body(b);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let text = resp.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            body,
            content_type,
            text,
        }
    }

    /// GET with a token, expecting 200.
    pub async fn get_ok(&self, path: &str, token: &str) -> Value {
        let r = self.call(Method::GET, path, Some(token), None).await;
        assert_eq!(r.status, 200, "GET {path}: {}", r.text);
        r.body
    }

    /// Create a tenant; its token.
    pub async fn tenant(&self, name: &str) -> (String, String) {
        let r = self
            .call(
                Method::POST,
                "/v1/tenants",
                Some(ADMIN),
                Some(json!({ "name": name })),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        let id = r.body["id"].as_str().expect("id").to_owned();
        (id, r.body["token"].as_str().expect("token").to_owned())
    }

    /// Create an endpoint with extra fields; its JSON.
    pub async fn endpoint(&self, token: &str, url: &str, extra: Value) -> Value {
        let mut body = json!({ "url": url });
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        let r = self
            .call(Method::POST, "/v1/endpoints", Some(token), Some(body))
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        r.body
    }

    /// Post a message; its id.
    pub async fn message(&self, token: &str, event_type: &str, payload: Value) -> String {
        let body = json!({ "event_type": event_type, "payload": payload });
        let r = self
            .call(Method::POST, "/v1/messages", Some(token), Some(body))
            .await;
        assert_eq!(r.status, 202, "{}", r.text);
        r.body["id"].as_str().expect("id").to_owned()
    }

    /// Poll `path` until `done` holds (generous: 30 s).
    pub async fn wait_for(&self, path: &str, token: &str, done: impl Fn(&Value) -> bool) -> Value {
        for _ in 0..300 {
            let v = self.get_ok(path, token).await;
            if done(&v) {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "{path} never reached the expected state: {}",
            self.get_ok(path, token).await
        );
    }
}

/// The states of a page of deliveries.
pub fn states(page: &Value) -> Vec<String> {
    page["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|d| d["state"].as_str().expect("state").to_owned())
        .collect()
}

/// A problem+json answer with this status, naming this field.
pub fn assert_problem(r: &Reply, status: u16, field: Option<&str>) {
    assert_eq!(r.status, status, "{}", r.text);
    assert_eq!(r.content_type, "application/problem+json", "{}", r.text);
    assert_eq!(r.body["status"], status);
    assert!(r.body["detail"].as_str().is_some_and(|d| !d.is_empty()));
    if let Some(f) = field {
        assert_eq!(r.body["field"], f, "{}", r.text);
    }
}
