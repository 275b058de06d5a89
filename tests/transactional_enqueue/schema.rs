//! sluice's schema: made on a bare database beside an application's own `messages` and
//! `tenants`; an installation from before it, found in `public`, refused until the operator
//! keeps it there (`--database-schema public`) or moves it (`sluice migrate --move-to-schema`).

use sluice::store::StoreError;
use sluice::store::postgres::{PostgresOptions, PostgresStore, schema::TABLES};
use sluice_testkit::process::Process;

use super::support;

async fn tables_in(db: &tokio_postgres::Client, schema: &str) -> Vec<String> {
    db.query(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = $1 ORDER BY 1",
        &[&schema],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

fn in_schema(schema: &str) -> PostgresOptions {
    PostgresOptions {
        schema: schema.into(),
        ..PostgresOptions::default()
    }
}

/// On a database with no schema of sluice's, whose application already has `public.messages`
/// and `public.tenants`: sluice makes its schema, puts all of its tables there, and leaves the
/// application's alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_database_gets_a_schema_of_its_own_beside_the_applications_tables() {
    let Some(url) = support::bare_postgres().await else {
        return;
    };
    let db = support::postgres_client(&url).await;
    db.batch_execute(
        "CREATE TABLE public.messages (id int PRIMARY KEY, body text); \
         CREATE TABLE public.tenants (id int PRIMARY KEY); \
         INSERT INTO public.messages VALUES (1, 'the application''s')",
    )
    .await
    .unwrap();
    let _store = PostgresStore::connect(&url).await.expect("connect");
    let mut expected: Vec<String> = TABLES.iter().map(|t| (*t).to_owned()).collect();
    expected.sort();
    assert_eq!(tables_in(&db, "sluice").await, expected);
    assert_eq!(tables_in(&db, "public").await, ["messages", "tenants"]);
    let body: String = db
        .query_one("SELECT body FROM public.messages WHERE id = 1", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(body, "the application's");
    // A second process finds the schema made and migrated.
    let _again = PostgresStore::connect(&url).await.expect("connect again");
}

/// Make an installation as sluice made them before `--database-schema`: everything in
/// `public`, no `send_message`; with one tenant in it.
async fn old_installation(url: &str, db: &tokio_postgres::Client) {
    drop(
        PostgresStore::connect_with(url, in_schema("public"))
            .await
            .expect("install in public"),
    );
    db.batch_execute(
        "DROP FUNCTION public.send_message(text, text, jsonb, text); \
         DROP FUNCTION public.sluice_new_message_id(bigint); \
         DROP FUNCTION public.sluice_event_patterns(text); \
         DELETE FROM public.schema_migrations WHERE version = 19; \
         INSERT INTO public.tenants (id, name, token_hash, created_at_ms) \
             VALUES ('ten_old', 'old', 'hash', 0)",
    )
    .await
    .unwrap();
}

/// An installation in `public` is refused with both ways on named; kept in `public` it keeps
/// working; `sluice migrate --move-to-schema` moves it, its rows with it, and `send_message`
/// then works from a client whose own search path is `public`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_installation_in_public_is_refused_kept_or_moved() {
    let Some(url) = support::bare_postgres().await else {
        return;
    };
    let db = support::postgres_client(&url).await;
    old_installation(&url, &db).await;

    let refused = match PostgresStore::connect(&url).await {
        Ok(_) => panic!("started on an empty schema beside sluice's tables in public"),
        Err(e) => e,
    };
    let text = refused.to_string();
    assert!(matches!(refused, StoreError::Database(_)), "{refused:?}");
    assert!(text.contains("--database-schema public"), "{text}");
    assert!(text.contains("sluice migrate --move-to-schema"), "{text}");
    assert_eq!(
        tables_in(&db, "sluice").await,
        Vec::<String>::new(),
        "a refusal left tables behind"
    );

    // Kept in public: upgraded there, send_message included.
    drop(
        PostgresStore::connect_with(&url, in_schema("public"))
            .await
            .expect("kept in public"),
    );
    let id: String = db
        .query_one(
            "SELECT public.send_message('ten_old', 'order.created', '{}')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(id.starts_with("msg_"));

    let moved = Process::command("migrate")
        .args(&["--move-to-schema", "--database-url", &url])
        .run();
    assert!(moved.status.success(), "{}", moved.stderr);
    assert!(
        moved.stdout.contains("moved into schema sluice"),
        "{}",
        moved.stdout
    );
    assert_eq!(tables_in(&db, "public").await, Vec::<String>::new());
    assert_eq!(tables_in(&db, "sluice").await.len(), TABLES.len());
    let again = Process::command("migrate")
        .args(&["--move-to-schema", "--database-url", &url])
        .run();
    assert!(!again.status.success(), "moved twice");

    let _store = PostgresStore::connect(&url)
        .await
        .expect("connect after the move");
    db.batch_execute("SET search_path = public").await.unwrap();
    let tenants: i64 = db
        .query_one(
            "SELECT count(*) FROM sluice.tenants WHERE id = 'ten_old'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tenants, 1, "the tenant did not move");
    let second: String = db
        .query_one(
            "SELECT sluice.send_message('ten_old', 'order.created', '{}')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let messages: i64 = db
        .query_one(
            "SELECT count(*) FROM sluice.messages WHERE id IN ($1, $2)",
            &[&id, &second],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(messages, 2);
    let path: Vec<String> = db
        .query_one(
            "SELECT proconfig FROM pg_proc WHERE oid = 'sluice.send_message(text, text, jsonb, text)'::regprocedure",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(path, ["search_path=sluice, pg_temp"]);
}
