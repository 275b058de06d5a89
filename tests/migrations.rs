//! A database written by an earlier schema opens under this one with nothing lost: endpoints
//! created before the fan-out index existed are found through it after the upgrade, and take
//! the TLS and OAuth2 settings added later (SQLite v7, PostgreSQL v9) and a rate limit (SQLite
//! v8, PostgreSQL v10) and FIFO ordering (SQLite v10, PostgreSQL v12); a backlog from before
//! tenant shares is served fairly beside a delivered history that stays readable and is purged
//! by retention after the upgrade, and a heartbeat from before heartbeats carried a tally
//! (SQLite v9, PostgreSQL v11) reads with a tally of 0.

use sluice_testkit as support;

use std::collections::BTreeSet;

use sluice::clock::now_ms;
use sluice::ids::new_id;
use sluice::model::*;
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
        traceparent: None,
        tracestate: None,
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
    e.tls.client = Some(sluice::model::ClientIdentity {
        certificate: "cert".into(),
        key: "key".into(),
    });
    e.oauth2 = Some(sluice::model::Credentials {
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

    // The rate limit columns: none before them; one set round-trips, fractions included, and
    // clearing it leaves none.
    let mut e = store.endpoint(Some("ten_v1"), "ep_paid").await.unwrap();
    assert_eq!(e.rate_limit, None);
    e.rate_limit = Some(sluice::model::RateLimit::try_new(2.5, 7).unwrap());
    store.update_endpoint(&e).await.unwrap();
    let read = store.endpoint(Some("ten_v1"), "ep_paid").await.unwrap();
    assert_eq!(read.rate_limit, e.rate_limit);
    e.rate_limit = None;
    store.update_endpoint(&e).await.unwrap();
    let read = store.endpoint(Some("ten_v1"), "ep_paid").await.unwrap();
    assert_eq!(read.rate_limit, None);
    assert_eq!(store.endpoint_waiting("ep_paid").await.unwrap(), 1);

    // The destination columns: an endpoint from before them is an HTTP endpoint at its url; a
    // broker destination and its credentials round-trip, and back to HTTP drops both.
    let mut e = store.endpoint(Some("ten_v1"), "ep_paid").await.unwrap();
    assert_eq!(
        e.destination,
        sluice::model::Destination::Http { url: e.url.clone() }
    );
    assert_eq!(e.destination_credentials, None);
    let http = e.destination.clone();
    e.set_destination(sluice::model::Destination::Rabbitmq {
        url: "amqp://rabbit.example.com:5672/%2f".into(),
        exchange: "events".into(),
        routing_key: "orders".into(),
    });
    e.destination_credentials = Some(sluice::model::DestinationCredentials {
        username: Some("u".into()),
        password: Some("p".into()),
        ..Default::default()
    });
    store.update_endpoint(&e).await.unwrap();
    let read = store.endpoint(Some("ten_v1"), "ep_paid").await.unwrap();
    assert_eq!(read.url, "amqp://rabbit.example.com:5672/%2f");
    assert_eq!(
        (&read.destination, &read.destination_credentials),
        (&e.destination, &e.destination_credentials)
    );
    e.set_destination(http.clone());
    e.destination_credentials = None;
    store.update_endpoint(&e).await.unwrap();
    let read = store.endpoint(Some("ten_v1"), "ep_paid").await.unwrap();
    assert_eq!(
        (read.destination, read.destination_credentials),
        (http, None)
    );

    // The ordering column: an endpoint from before it is unordered; set to FIFO, its waiting
    // deliveries go one at a time, the earliest accepted first.
    let mut e = store.endpoint(Some("ten_v1"), "ep_all").await.unwrap();
    assert_eq!(e.ordering, DeliveryOrder::Unordered);
    e.ordering = DeliveryOrder::Fifo;
    store.update_endpoint(&e).await.unwrap();
    let read = store.endpoint(Some("ten_v1"), "ep_all").await.unwrap();
    assert_eq!(read.ordering, DeliveryOrder::Fifo);
    let waiting = store.fifo_head("ep_all").await.unwrap().expect("a head");
    let claimed = store
        .claim(&ClaimRequest {
            now_ms: now_ms(),
            limit: 50,
            per_endpoint: 50,
            lease_ms: 60_000,
            default_weight: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .claimed;
    let on_all: Vec<i64> = claimed
        .iter()
        .filter(|c| c.endpoint_id == "ep_all")
        .map(|c| c.delivery_id)
        .collect();
    assert_eq!(on_all, [waiting.id], "the head alone");
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

/// What the version before tenant shares held: two tenants, one endpoint each (then a backlog of
/// 200 ready deliveries for one and 20 for the other, see [`backlog_rows`]), and a dispatcher's
/// heartbeat from before heartbeats carried a tally.
const BACKLOG: &[&str] = &[
    "INSERT INTO dispatchers (id, started_at_ms, beat_at_ms, in_flight, concurrency, capacity, \
     arrivals_per_s, mean_service_s, draining) VALUES ('dsp_old', 0, 1, 2, 64, 128, 1.5, 0.25, false)",
    "INSERT INTO tenants (id, name, token_hash, created_at_ms) VALUES \
     ('ten_busy', 'busy', 'hash_busy', 0), ('ten_quiet', 'quiet', 'hash_quiet', 0)",
    "INSERT INTO endpoints (id, tenant_id, url, secret, created_at_ms, updated_at_ms) VALUES \
     ('ep_busy', 'ten_busy', 'https://example.com/b', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 0, 0), \
     ('ep_quiet', 'ten_quiet', 'https://example.com/q', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 0, 0)",
];

/// Delivered history written before the upgrade: messages of the busy tenant, each delivered
/// once with one attempt, long ago.
const HISTORY: i64 = 30;

/// A history message's id as sluice made it at `ms`.
fn history_id(ms: i64) -> String {
    format!("{}0000000000000001", sluice::ids::time_floor("msg", ms))
}

fn backlog_rows() -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..HISTORY {
        let (ms, id) = (1_000 + i, history_id(1_000 + i));
        out.push(format!(
            "INSERT INTO messages (id, tenant_id, event_type, payload, created_at_ms) \
             VALUES ('{id}', 'ten_busy', 'a', '{{\"old\":{i}}}', {ms})"
        ));
        out.push(format!(
            "INSERT INTO deliveries (message_id, endpoint_id, tenant_id, state, attempts, \
             visible_at_ms, last_status, created_at_ms, updated_at_ms) \
             VALUES ('{id}', 'ep_busy', 'ten_busy', 2, 1, {ms}, 200, {ms}, {})",
            ms + 50
        ));
        out.push(format!(
            "INSERT INTO attempts (delivery_id, started_at_ms, duration_ms, status, response) \
             SELECT id, {}, 40, 200, 'ok' FROM deliveries WHERE message_id = '{id}'",
            ms + 10
        ));
    }
    for (tenant, endpoint, n) in [("ten_busy", "ep_busy", 200), ("ten_quiet", "ep_quiet", 20)] {
        for i in 0..n {
            out.push(format!(
                "INSERT INTO messages (id, tenant_id, event_type, payload, created_at_ms) \
                 VALUES ('msg_{endpoint}_{i}', '{tenant}', 'a', '{{}}', 1)"
            ));
            out.push(format!(
                "INSERT INTO deliveries (message_id, endpoint_id, tenant_id, state, attempts, \
                 visible_at_ms, created_at_ms, updated_at_ms) \
                 VALUES ('msg_{endpoint}_{i}', '{endpoint}', '{tenant}', 0, 0, 1, 1, 1)"
            ));
        }
    }
    out
}

/// After the upgrade the backlog is served fairly at once (the quiet tenant in the first
/// claim, beside the busy one) and every delivery of it is claimed, none twice.
async fn check_backlog_served_fairly(store: SharedStore) {
    let now = now_ms();
    let request = |limit| ClaimRequest {
        now_ms: now,
        limit,
        per_endpoint: 100,
        lease_ms: 60_000,
        default_weight: 1,
        ..Default::default()
    };
    let first = store.claim(&request(20)).await.unwrap().claimed;
    let quiet = first.iter().filter(|c| c.tenant_id == "ten_quiet").count();
    assert!(
        (8..=12).contains(&quiet),
        "{quiet} of 20 for the quiet tenant"
    );
    let mut seen: BTreeSet<i64> = first.iter().map(|c| c.delivery_id).collect();
    loop {
        let batch = store.claim(&request(50)).await.unwrap().claimed;
        if batch.is_empty() {
            break;
        }
        for c in batch {
            assert!(seen.insert(c.delivery_id), "claimed twice");
        }
    }
    assert_eq!(seen.len(), 220, "the whole backlog is claimed");

    // The history came through: counted, each delivery with its attempt, its payload readable.
    assert_eq!(store.delivered_count().await.unwrap(), HISTORY as u64);
    let delivered = store
        .list_deliveries(&DeliveryFilter {
            tenant_id: "ten_busy".into(),
            state: Some(DeliveryState::Delivered),
            limit: 1_000,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(delivered.len(), HISTORY as usize);
    for d in &delivered {
        let attempts = store.attempts("ten_busy", d.id).await.unwrap();
        assert_eq!(attempts.len(), 1, "{d:?}");
        assert_eq!(attempts[0].status, Some(200));
    }
    let oldest = store.message("ten_busy", &history_id(1_000)).await.unwrap();
    assert_eq!(oldest.payload, r#"{"old":0}"#);
    // Retention reaches it: batches walk it all, and only it.
    let mut request = PurgeRequest {
        before_ms: now,
        limit: 7,
        after: String::new(),
    };
    let (mut deliveries, mut messages) = (0, 0);
    loop {
        let report = store.purge(&request).await.unwrap();
        deliveries += report.deliveries;
        messages += report.messages;
        match report.next {
            Some(next) => request.after = next,
            None => break,
        }
    }
    assert_eq!((deliveries, messages), (HISTORY as u64, HISTORY as u64));
    assert_eq!(store.delivered_count().await.unwrap(), 0);
    assert!(store.message("ten_busy", &history_id(1_000)).await.is_err());
    let backlog = store
        .list_deliveries(&DeliveryFilter {
            tenant_id: "ten_busy".into(),
            limit: 1_000,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        backlog.len(),
        200,
        "the busy tenant's backlog is left whole"
    );

    // A heartbeat from before the tally reads as a dispatcher that has counted nothing yet.
    let old = store.heartbeats(0).await.unwrap();
    assert_eq!(old.len(), 1, "{old:?}");
    assert_eq!((old[0].id.as_str(), old[0].in_flight), ("dsp_old", 2));
    assert_eq!((old[0].tally, old[0].host.as_str()), (Tally::default(), ""));
    // Nor any worker-seconds per host (the column came later still).
    assert_eq!(old[0].host_seconds, HostSeconds::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_backlog_before_tenant_shares_is_served_fairly_after_the_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v5.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at_ms INTEGER NOT NULL)",
        )
        .unwrap();
        for (version, sql) in [
            (1, include_str!("../src/store/sql/sqlite_001_init.sql")),
            (
                2,
                include_str!("../src/store/sql/sqlite_002_subscriptions.sql"),
            ),
            (
                3,
                include_str!("../src/store/sql/sqlite_003_due_endpoints.sql"),
            ),
            (
                4,
                include_str!("../src/store/sql/sqlite_004_endpoint_headers.sql"),
            ),
            (
                5,
                include_str!("../src/store/sql/sqlite_005_dispatchers.sql"),
            ),
        ] {
            c.execute_batch(sql).unwrap();
            c.execute("INSERT INTO schema_migrations VALUES (?1, 0)", [version])
                .unwrap();
        }
        for sql in BACKLOG.iter().map(|s| s.to_string()).chain(backlog_rows()) {
            c.execute_batch(&sql).unwrap();
        }
        // Version 5 marked endpoints due from the enqueue code, not a trigger.
        c.execute_batch(
            "INSERT INTO due_endpoints (endpoint_id, due_ms) VALUES ('ep_busy', 1), ('ep_quiet', 1)",
        )
        .unwrap();
    }
    let store = sluice::store::sqlite::SqliteStore::open(
        &path,
        sluice::store::sqlite::SqliteOptions {
            synchronous_full: false,
            readers: 1,
        },
    )
    .unwrap();
    check_backlog_served_fairly(std::sync::Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_backlog_before_tenant_shares_is_served_fairly_after_the_upgrade() {
    let Some(url) = support::fresh_postgres().await else {
        return;
    };
    {
        let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        c.batch_execute(
            "CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, applied_at_ms BIGINT NOT NULL)",
        )
        .await
        .unwrap();
        for (version, sql) in [
            (1i64, include_str!("../src/store/sql/postgres_001_init.sql")),
            (
                2,
                include_str!("../src/store/sql/postgres_002_subscriptions.sql"),
            ),
            (
                3,
                include_str!("../src/store/sql/postgres_003_due_endpoints.sql"),
            ),
            (
                4,
                include_str!("../src/store/sql/postgres_004_endpoint_headers.sql"),
            ),
            (
                5,
                include_str!("../src/store/sql/postgres_005_dispatchers.sql"),
            ),
            (
                6,
                include_str!("../src/store/sql/postgres_006_write_path.sql"),
            ),
            (
                7,
                include_str!("../src/store/sql/postgres_007_dispatcher_liveness.sql"),
            ),
        ] {
            c.batch_execute(sql).await.unwrap();
            c.execute("INSERT INTO schema_migrations VALUES ($1, 0)", &[&version])
                .await
                .unwrap();
        }
        // Version 7's insert trigger marks the endpoints due.
        for sql in BACKLOG.iter().map(|s| s.to_string()).chain(backlog_rows()) {
            c.batch_execute(&sql).await.unwrap();
        }
        let due: i64 = c
            .query_one("SELECT count(*) FROM due_endpoints", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(due, 2, "both endpoints due before the upgrade");
    }
    let store = sluice::store::postgres::PostgresStore::connect(&url)
        .await
        .expect("the upgrade");
    check_backlog_served_fairly(std::sync::Arc::new(store)).await;
}
