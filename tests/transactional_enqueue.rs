//! Transactional enqueue on a real PostgreSQL: `sluice.send_message` called inside the
//! application's own transaction, delivered by a real dispatcher to loopback receivers when the
//! transaction commits and never when it rolls back; its rules and SQLSTATEs, the role that may
//! only call it, a dispatcher killed meanwhile, and sluice's schema itself (made, found in
//! `public` from before, moved).

#[path = "transactional_enqueue/commit.rs"]
mod commit;
#[path = "transactional_enqueue/crash.rs"]
mod crash;
#[path = "transactional_enqueue/rules.rs"]
mod rules;
#[path = "transactional_enqueue/schema.rs"]
mod schema;

use sluice_testkit as support;

use std::time::Duration;

use serde_json::json;
use support::Sluice;

/// Long enough for a delivery on a busy 2-core machine.
pub const WAIT: Duration = Duration::from_secs(30);

/// A sluice (API and dispatcher) on a fresh PostgreSQL database, one tenant, and a client of
/// that database as the application would hold.
pub struct App {
    /// The server, in this process.
    pub sluice: Sluice,
    /// The database's URL.
    pub url: String,
    /// The tenant's id (`ten_…`).
    pub tenant: String,
    /// The tenant's API token.
    pub token: String,
    /// The application's connection.
    pub db: tokio_postgres::Client,
}

/// [`App`] with the dispatcher's idle poll at `idle_poll` and the API's payload limit at
/// `max_payload_bytes` (when given); None without PostgreSQL (skip).
pub async fn app(idle_poll: Duration, max_payload_bytes: Option<usize>) -> Option<App> {
    let url = support::fresh_postgres().await?;
    let mut raw = support::test_settings();
    raw.database_url = Some(url.clone());
    raw.max_payload_bytes = max_payload_bytes;
    let mut config = raw.validate().expect("settings");
    config.dispatch.idle_poll = idle_poll;
    let sluice = Sluice::from_config(config).await;
    let (tenant, token) = sluice.tenant("shop").await;
    let db = support::postgres_client(&url).await;
    Some(App {
        sluice,
        url,
        tenant,
        token,
        db,
    })
}

impl App {
    /// An endpoint to `url` subscribed to `event_types` (all when empty); its id.
    pub async fn endpoint(&self, url: &str, event_types: &[&str]) -> String {
        let extra = match event_types {
            [] => json!({}),
            types => json!({ "event_types": types }),
        };
        self.sluice.endpoint(&self.token, url, extra).await.0
    }

    /// The message as the API shows it, or None (404).
    pub async fn message(&self, id: &str) -> Option<serde_json::Value> {
        let (status, body) = self
            .sluice
            .get(&self.token, &format!("/v1/messages/{id}"))
            .await;
        match status {
            200 => Some(body),
            404 => None,
            other => panic!("GET message: {other} {body}"),
        }
    }

    /// The endpoints a message has deliveries to, sorted.
    pub async fn delivered_to(&self, id: &str) -> Vec<String> {
        let m = self.message(id).await.expect("the message exists");
        let mut out: Vec<String> = m["deliveries"]
            .as_array()
            .expect("deliveries")
            .iter()
            .map(|d| d["endpoint_id"].as_str().expect("endpoint_id").to_owned())
            .collect();
        out.sort();
        out
    }
}

/// `SELECT sluice.send_message(…)` on `c` (inside whatever transaction it is in).
pub async fn send(
    c: &impl tokio_postgres::GenericClient,
    tenant: &str,
    event_type: &str,
    payload: serde_json::Value,
    key: Option<&str>,
) -> Result<String, tokio_postgres::Error> {
    let payload = payload.to_string();
    let row = c
        .query_one(
            "SELECT sluice.send_message($1, $2, $3::text::jsonb, $4)",
            &[&tenant, &event_type, &payload, &key],
        )
        .await?;
    Ok(row.get(0))
}

/// A statement's SQLSTATE and message, for an error that must come from the server.
pub fn sqlstate(e: &tokio_postgres::Error) -> (String, String, Option<String>) {
    let db = e
        .as_db_error()
        .unwrap_or_else(|| panic!("not a server error: {e}"));
    (
        db.code().code().to_owned(),
        db.message().to_owned(),
        db.column().map(str::to_owned),
    )
}
