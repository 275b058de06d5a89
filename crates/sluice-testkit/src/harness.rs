//! A sluice running in this process on 127.0.0.1:0 (embedded SQLite in a temporary directory
//! unless the settings name a database), with an HTTP client and helpers for the public API.

use crate::http;

/// The admin token every test server uses.
pub const ADMIN: &str = "test-admin-token-0123456789";

/// A sluice running in this process on 127.0.0.1:0, with a client and helpers.
pub struct Sluice {
    /// The server.
    pub running: sluice::serve::Running,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    /// HTTP client.
    pub http: reqwest::Client,
    _dir: Option<tempfile::TempDir>,
}

/// Settings for a test server: loopback allowed, a temp data dir, the test admin token.
pub fn test_settings() -> sluice::config::RawSettings {
    sluice::config::RawSettings {
        listen: Some("127.0.0.1:0".into()),
        allow_network: vec!["127.0.0.0/8".into()],
        admin_token: Some(ADMIN.into()),
        sqlite_synchronous: Some("normal".into()),
        ..Default::default()
    }
}

impl Sluice {
    /// Start with these settings (a temp data dir is added when none is set); panics if it
    /// cannot.
    pub async fn start(raw: sluice::config::RawSettings) -> Sluice {
        Self::try_start(raw).await.expect("start sluice")
    }

    /// Start with these settings (a temp data dir is added when none is set).
    pub async fn try_start(mut raw: sluice::config::RawSettings) -> anyhow::Result<Sluice> {
        use anyhow::Context;
        let dir = if raw.data_dir.is_none() && raw.database_url.is_none() {
            let dir = tempfile::tempdir().context("temporary data directory")?;
            raw.data_dir = Some(dir.path().to_path_buf());
            Some(dir)
        } else {
            None
        };
        let config = raw
            .validate()
            .map_err(|e| anyhow::anyhow!("settings: {e}"))?;
        let running = sluice::serve::start(config).await?;
        let addr = running.addr.context("the sluice has no API listener")?;
        Ok(Sluice {
            base: format!("http://{addr}"),
            running,
            http: http(),
            _dir: dir,
        })
    }

    /// Start with a validated configuration (for settings no flag sets, such as the
    /// dispatcher's idle poll); it must name its database.
    pub async fn from_config(config: sluice::config::Config) -> Sluice {
        let running = sluice::serve::start(config).await.expect("start sluice");
        let addr = running.addr.expect("the sluice has no API listener");
        Sluice {
            base: format!("http://{addr}"),
            running,
            http: http(),
            _dir: None,
        }
    }

    /// Stop it (drain) and remove its temporary data directory.
    pub async fn stop(self) {
        let _ = self.running.stop().await;
    }

    /// POST JSON with a bearer token; returns (status, body).
    pub async fn post(
        &self,
        token: &str,
        path: &str,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .expect("request");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }

    /// GET with a bearer token; returns (status, body).
    pub async fn get(&self, token: &str, path: &str) -> (u16, serde_json::Value) {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(token)
            .send()
            .await
            .expect("request");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }

    /// Create a tenant; returns (id, token).
    pub async fn tenant(&self, name: &str) -> (String, String) {
        let (status, body) = self
            .post(ADMIN, "/v1/tenants", serde_json::json!({ "name": name }))
            .await;
        assert_eq!(status, 201, "{body}");
        (
            body["id"].as_str().expect("id").to_owned(),
            body["token"].as_str().expect("token").to_owned(),
        )
    }

    /// Create an endpoint; `extra` fields are merged in. Returns (id, secret).
    pub async fn endpoint(
        &self,
        token: &str,
        url: &str,
        extra: serde_json::Value,
    ) -> (String, String) {
        let mut body = serde_json::json!({ "url": url });
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        let (status, body) = self.post(token, "/v1/endpoints", body).await;
        assert_eq!(status, 201, "{body}");
        (
            body["id"].as_str().expect("id").to_owned(),
            body["secret"].as_str().expect("secret").to_owned(),
        )
    }

    /// Send a message; returns its id.
    pub async fn send(&self, token: &str, event_type: &str, payload: serde_json::Value) -> String {
        let (status, body) = self
            .post(
                token,
                "/v1/messages",
                serde_json::json!({ "event_type": event_type, "payload": payload }),
            )
            .await;
        assert!(status == 202 || status == 200, "{status} {body}");
        body["id"].as_str().expect("id").to_owned()
    }

    /// A message with its deliveries.
    pub async fn message(&self, token: &str, id: &str) -> serde_json::Value {
        let (status, body) = self.get(token, &format!("/v1/messages/{id}")).await;
        assert_eq!(status, 200, "{body}");
        body
    }
}
