//! Shared helpers for the integration tests: real services, never mocks.
//!
//! PostgreSQL and Redis come from `SLUICE_TEST_DATABASE_URL` and `SLUICE_TEST_REDIS_URL`.
//! When one is missing the test is skipped loudly, unless `SLUICE_REQUIRE_SERVICES=1` (set by
//! `.ci/run`), where a missing service is a failure.

#![allow(dead_code)]

use std::sync::Arc;

use sluice::store::{SharedStore, sqlite::SqliteOptions};

/// Is a missing service a failure here (CI) rather than a skip?
pub fn services_required() -> bool {
    std::env::var("SLUICE_REQUIRE_SERVICES").is_ok_and(|v| v == "1")
}

fn service(var: &str, what: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                !services_required(),
                "{var} is not set but SLUICE_REQUIRE_SERVICES=1: {what} is required"
            );
            eprintln!("SKIPPED: {var} is not set; this {what} test did not run");
            None
        }
    }
}

/// A fresh, empty PostgreSQL database for one test, or None (skip) without a server.
pub async fn fresh_postgres() -> Option<String> {
    let base = service("SLUICE_TEST_DATABASE_URL", "PostgreSQL")?;
    let pid = std::process::id();
    let name = format!("sluice_t_{pid}_{}", sluice::ids::lease_token());
    let (client, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {base}: {e}"));
    tokio::spawn(conn);
    // Databases of test processes that have exited are dropped here, so runs do not pile up.
    if let Ok(rows) = client
        .query(
            "SELECT datname FROM pg_database WHERE datname LIKE 'sluice\\_t\\_%'",
            &[],
        )
        .await
    {
        for row in rows {
            let db: String = row.get(0);
            let owner = db.split('_').nth(2).and_then(|p| p.parse::<u32>().ok());
            if owner
                .is_some_and(|p| p != pid && !std::path::Path::new(&format!("/proc/{p}")).exists())
            {
                let _ = client
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
                    .await;
            }
        }
    }
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create test database");
    let mut config: tokio_postgres::Config = base.parse().expect("database url");
    config.dbname(&name);
    let url = format!(
        "postgres://{}@{}:{}/{name}",
        config.get_user().unwrap_or("postgres"),
        match &config.get_hosts()[0] {
            tokio_postgres::config::Host::Tcp(h) => h.clone(),
            #[allow(unreachable_patterns)]
            _ => "127.0.0.1".to_string(),
        },
        config.get_ports().first().copied().unwrap_or(5432),
    );
    Some(url)
}

/// The Redis URL for tests, or None (skip).
pub fn redis_url() -> Option<String> {
    service("SLUICE_TEST_REDIS_URL", "Redis")
}

/// A fresh embedded store in a temporary directory (kept alive by the returned guard).
pub fn fresh_sqlite() -> (SharedStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = sluice::store::sqlite::SqliteStore::open(
        &dir.path().join("test.db"),
        SqliteOptions {
            synchronous_full: false,
            readers: 2,
        },
    )
    .expect("open sqlite");
    (Arc::new(store), dir)
}

/// A fresh PostgreSQL store, or None (skip).
pub async fn fresh_postgres_store() -> Option<SharedStore> {
    let url = fresh_postgres().await?;
    let store = sluice::store::postgres::PostgresStore::connect(&url)
        .await
        .expect("connect postgres store");
    Some(Arc::new(store))
}

/// The admin token every test server uses.
pub const ADMIN: &str = "test-admin-token-0123456789";

/// A sluice running in this process on 127.0.0.1:0, with a client and helpers.
pub struct Sluice {
    /// The server.
    pub running: sluice::server::Running,
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
    /// Start with these settings (a temp data dir is added when none is set).
    pub async fn start(mut raw: sluice::config::RawSettings) -> Sluice {
        let dir = if raw.data_dir.is_none() && raw.database_url.is_none() {
            let dir = tempfile::tempdir().expect("tempdir");
            raw.data_dir = Some(dir.path().to_path_buf());
            Some(dir)
        } else {
            None
        };
        let config = raw.validate().expect("valid test settings");
        let running = sluice::server::start(config).await.expect("start sluice");
        let base = format!("http://{}", running.addr.expect("api address"));
        Sluice {
            running,
            base,
            http: http(),
            _dir: dir,
        }
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

/// Poll `check` every 50 ms until it holds or `timeout` passes; returns whether it held.
pub async fn eventually<F, Fut>(timeout: std::time::Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = std::time::Instant::now() + timeout;
    loop {
        if check().await {
            return true;
        }
        if std::time::Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The Python interpreter with `standardwebhooks` installed, or None (loud skip outside CI).
pub fn python_verifier() -> Option<String> {
    match std::env::var("SLUICE_PYTHON") {
        Ok(p) if !p.is_empty() => Some(p),
        _ => {
            assert!(
                !services_required(),
                "SLUICE_PYTHON is not set but SLUICE_REQUIRE_SERVICES=1"
            );
            eprintln!("SKIPPED: SLUICE_PYTHON is not set; the independent verifier did not run");
            None
        }
    }
}

/// An HTTP client for tests (installs the TLS provider first).
pub fn http() -> reqwest::Client {
    sluice::delivery::install_tls_provider();
    reqwest::Client::new()
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}
