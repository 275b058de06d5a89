//! A database written by an earlier schema opens under this one with nothing lost: endpoints
//! created before the fan-out index existed are found through it after the upgrade, and take
//! the TLS and OAuth2 settings added later (SQLite v7, PostgreSQL v9).

use sluice_testkit as support;

use std::collections::BTreeSet;

use sluice::clock::now_ms;
use sluice::ids::new_id;
use sluice::store::*;

/// Endpoints as schema v1 stored them: (id, event_types JSON, operational).
const V1_ENDPOINTS: &[(&str, &str, bool)] = &[
    ("ep_all", "[]", false),
    ("ep_paid", r#"["order.paid","order.paid"]"#, false),
    ("ep_sent", r#"["invoice.sent"]"#, false),
    ("ep_ops", "[]", true),
];

async fn fan_out_of(store: &SharedStore, event_type: &str) -> BTreeSet<String> {
    let m = NewMessage {
        id: new_id("msg"),
        tenant_id: "ten_v1".into(),
        event_type: event_type.into(),
        payload: "{}".into(),
        idempotency_key: None,
        only_endpoint: None,
    };
    store
        .enqueue(std::slice::from_ref(&m), now_ms())
        .await
        .unwrap();
    let view = store.message("ten_v1", &m.id).await.unwrap();
    view.deliveries.into_iter().map(|d| d.endpoint_id).collect()
}

async fn check_upgraded(store: SharedStore) {
    let set = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(
        fan_out_of(&store, "order.paid").await,
        set(&["ep_all", "ep_paid"])
    );
    assert_eq!(
        fan_out_of(&store, "invoice.sent").await,
        set(&["ep_all", "ep_sent"])
    );
    assert_eq!(fan_out_of(&store, "other").await, set(&["ep_all"]));

    // The TLS and OAuth2 columns: an endpoint from before them has no TLS or OAuth2 setting, and takes both.
    let mut e = store.endpoint(Some("ten_v1"), "ep_paid").await.unwrap();
    assert!(e.tls.is_empty());
    assert!(e.oauth2.is_none());
    assert_eq!(e.event_types, ["order.paid", "order.paid"]);
    e.tls.ca_bundle = Some("-----BEGIN CERTIFICATE-----\n...".into());
    e.tls.client = Some(sluice::delivery::ClientIdentity {
        certificate: "cert".into(),
        key: "key".into(),
    });
    e.oauth2 = Some(sluice::delivery::oauth2::Credentials {
        token_url: "https://idp.example.com/token".into(),
        client_id: "sluice".into(),
        client_secret: "secret".into(),
        scope: Some("webhooks".into()),
        audience: None,
        auth: Default::default(),
    });
    store.update_endpoint(&e).await.unwrap();
    let read = store.endpoint(Some("ten_v1"), "ep_paid").await.unwrap();
    assert_eq!((read.tls, read.oauth2), (e.tls, e.oauth2));
}

fn v1_inserts(placeholder: impl Fn(usize) -> String) -> String {
    let p: Vec<String> = (1..=4).map(placeholder).collect();
    format!(
        "INSERT INTO endpoints (id, tenant_id, url, event_types, secret, operational, \
         created_at_ms, updated_at_ms) VALUES ({}, 'ten_v1', 'https://example.com/', {}, \
         'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', {}, {}, {})",
        p[0], p[1], p[2], p[3], p[3]
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_v1_database_upgrades_with_its_endpoints_subscribed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(include_str!("../src/store/sql/sqlite_001_init.sql"))
            .unwrap();
        c.execute_batch(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at_ms INTEGER NOT NULL); \
             INSERT INTO schema_migrations VALUES (1, 0); \
             INSERT INTO tenants VALUES ('ten_v1', 'v1', 'hash', 0);",
        )
        .unwrap();
        let mut insert = c.prepare(&v1_inserts(|i| format!("?{i}"))).unwrap();
        for (id, types, ops) in V1_ENDPOINTS {
            insert
                .execute(rusqlite::params![id, types, ops, now_ms()])
                .unwrap();
        }
    }
    let store = sluice::store::sqlite::SqliteStore::open(
        &path,
        sluice::store::sqlite::SqliteOptions {
            synchronous_full: false,
            readers: 1,
        },
    )
    .unwrap();
    check_upgraded(std::sync::Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_v1_database_upgrades_with_its_endpoints_subscribed() {
    let Some(url) = support::fresh_postgres().await else {
        return;
    };
    {
        let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        c.batch_execute(include_str!("../src/store/sql/postgres_001_init.sql"))
            .await
            .unwrap();
        c.batch_execute(
            "CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, applied_at_ms BIGINT NOT NULL); \
             INSERT INTO schema_migrations VALUES (1, 0); \
             INSERT INTO tenants VALUES ('ten_v1', 'v1', 'hash', 0);",
        )
        .await
        .unwrap();
        let insert = v1_inserts(|i| format!("${i}"));
        for (id, types, ops) in V1_ENDPOINTS {
            c.execute(&insert, &[id, types, ops, &now_ms()])
                .await
                .unwrap();
        }
    }
    let store = sluice::store::postgres::PostgresStore::connect(&url)
        .await
        .unwrap();
    check_upgraded(std::sync::Arc::new(store)).await;
}
