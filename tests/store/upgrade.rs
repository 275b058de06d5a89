//! A PostgreSQL database written by an earlier version upgrades in place: migrations 1 to 3
//! applied and data in them (a ready delivery, a settled one with its attempt), then the store
//! of this version opens it, migrates, and serves what was there.

use super::*;

const EARLIER: &[(i64, &str)] = &[
    (1, include_str!("../../src/store/sql/postgres_001_init.sql")),
    (
        2,
        include_str!("../../src/store/sql/postgres_002_subscriptions.sql"),
    ),
    (
        3,
        include_str!("../../src/store/sql/postgres_003_due_endpoints.sql"),
    ),
];

/// Index keys of type text (`index.column`) whose index compares them other than byte by byte.
const INDEXED_TEXT_NOT_C: &str = "SELECT DISTINCT i.indexrelid::regclass::text || '.' || a.attname \
    FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid \
    JOIN pg_namespace n ON n.oid = c.relnamespace \
    CROSS JOIN LATERAL unnest(i.indkey::int2[], i.indcollation::oid[]) AS k(attnum, coll) \
    JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
    WHERE n.nspname = current_schema() AND a.atttypid = 'text'::regtype \
      AND k.coll <> 'pg_catalog.\"C\"'::regcollation";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_3_database_upgrades_and_keeps_its_work() {
    let Some(url) = support::fresh_postgres().await else {
        return;
    };
    let client = support::postgres_client(&url).await;
    client
        .batch_execute(
            "CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, applied_at_ms BIGINT NOT NULL)",
        )
        .await
        .unwrap();
    for (version, sql) in EARLIER {
        client.batch_execute(sql).await.expect("earlier migration");
        client
            .execute("INSERT INTO schema_migrations VALUES ($1, 0)", &[version])
            .await
            .unwrap();
    }
    // What version 3 wrote: a tenant, an endpoint, two messages; one delivery ready (its
    // endpoint due, by the version 3 trigger), one delivered with an attempt.
    client
        .batch_execute(
            "INSERT INTO tenants VALUES ('ten_old', 'Old', 'hash_old', 1);
             INSERT INTO endpoints (id, tenant_id, url, secret, created_at_ms, updated_at_ms)
                 VALUES ('ep_old', 'ten_old', 'https://example.com/hook', 'whsec_x', 1, 1);
             INSERT INTO subscriptions VALUES ('ten_old', '*', 'ep_old');
             INSERT INTO messages VALUES ('msg_ready', 'ten_old', 'a', '{}', NULL, 1),
                                         ('msg_done', 'ten_old', 'a', '{}', NULL, 1);
             INSERT INTO deliveries (message_id, endpoint_id, tenant_id, state, visible_at_ms,
                 created_at_ms, updated_at_ms)
                 VALUES ('msg_ready', 'ep_old', 'ten_old', 0, 1, 1, 1),
                        ('msg_done', 'ep_old', 'ten_old', 2, 1, 1, 1);
             INSERT INTO attempts (delivery_id, started_at_ms, duration_ms, status)
                 SELECT id, 1, 5, 200 FROM deliveries WHERE message_id = 'msg_done';",
        )
        .await
        .unwrap();

    let store: SharedStore = Arc::new(
        sluice::store::postgres::PostgresStore::connect(&url)
            .await
            .expect("the upgrade"),
    );
    let version: i64 = client
        .query_one("SELECT max(version) FROM schema_migrations", &[])
        .await
        .unwrap()
        .get(0);
    assert!(version >= 4, "migrated to {version}");
    // Every indexed text column compares byte by byte (migration 17), whatever the database's
    // default collation (a test database's is ICU's en-US where the server has ICU).
    let linguistic: Vec<String> = client
        .query(INDEXED_TEXT_NOT_C, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        linguistic.is_empty(),
        "indexed text columns that compare by a linguistic collation: {linguistic:?}"
    );
    let done = deliveries(
        &store,
        DeliveryFilter {
            message_id: Some("msg_done".into()),
            ..all_of_id("ten_old")
        },
    )
    .await;
    let attempts = store.attempts("ten_old", done[0].id).await.unwrap();
    assert_eq!(attempts.len(), 1, "attempts kept");
    assert_eq!(attempts[0].status, Some(200));
    let claimed = store.claim(&req(now_ms(), 10, 10)).await.unwrap().claimed;
    assert_eq!(
        claimed.len(),
        1,
        "the ready delivery is claimed after the upgrade"
    );
    assert_eq!(claimed[0].message_id, "msg_ready");
    // Retried: the endpoint is due again through the new path (no update trigger any more).
    let retry = SettleOutcome::Retry { at_ms: now_ms() };
    store
        .settle(
            &[settlement(
                &claimed[0],
                retry,
                Some(attempt(Some(500), None)),
            )],
            now_ms(),
        )
        .await
        .unwrap();
    let again = store
        .claim(&req(now_ms() + 1_000, 10, 10))
        .await
        .unwrap()
        .claimed;
    assert_eq!(again.len(), 1, "a retried delivery is claimed again");
    // Deleting the endpoint takes its due row and its work with it.
    store.delete_endpoint("ten_old", "ep_old").await.unwrap();
    assert!(
        store
            .claim(&req(now_ms() + 2_000, 10, 10))
            .await
            .unwrap()
            .claimed
            .is_empty()
    );
}

fn all_of_id(tenant: &str) -> DeliveryFilter {
    DeliveryFilter {
        tenant_id: tenant.to_owned(),
        limit: 100,
        ..Default::default()
    }
}
