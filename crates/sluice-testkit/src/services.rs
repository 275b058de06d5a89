//! The real services tests run against, never mocks: a fresh PostgreSQL database or SQLite
//! file per test, the Redis URL, the independent signature verifier.
//!
//! PostgreSQL and Redis come from `SLUICE_TEST_DATABASE_URL` and `SLUICE_TEST_REDIS_URL`.
//! When one is missing the test is skipped loudly, unless `SLUICE_REQUIRE_SERVICES=1` (set by
//! `.ci/run`), where a missing service is a failure.

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
    // A linguistic default collation (ICU's en-US), as managed services and most installations
    // create databases, so a statement that works only where text compares byte by byte fails
    // here; a server built without ICU gets its own default.
    let icu =
        format!("CREATE DATABASE {name} TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'");
    if client.batch_execute(&icu).await.is_err() {
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create test database");
    }
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
    // sluice keeps its tables in a schema of its own (`--database-schema`, default `sluice`,
    // every store connection's search path). A test's own clients find them there too: the
    // database's default search path names it first, and it exists from the start, so a test
    // that writes an older version's tables by hand writes them where sluice looks.
    client
        .batch_execute(&format!(
            "ALTER DATABASE {name} SET search_path = {schema}, public",
            schema = sluice::store::postgres::DEFAULT_SCHEMA
        ))
        .await
        .expect("set the test database's search path");
    let (inside, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
    tokio::spawn(conn);
    inside
        .batch_execute(&format!(
            "CREATE SCHEMA {}",
            sluice::store::postgres::DEFAULT_SCHEMA
        ))
        .await
        .expect("create sluice's schema");
    Some(url)
}

/// A fresh, empty PostgreSQL database as an operator's would be: no schema of sluice's, the
/// server's default search path; or None (skip) without a server.
pub async fn bare_postgres() -> Option<String> {
    let url = fresh_postgres().await?;
    let client = postgres_client(&url).await;
    let db = url.rsplit('/').next().unwrap_or_default().to_owned();
    client
        .batch_execute(&format!(
            "DROP SCHEMA {} ; ALTER DATABASE {db} RESET search_path",
            sluice::store::postgres::DEFAULT_SCHEMA
        ))
        .await
        .expect("undo the test schema");
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
    Some(postgres_store(&fresh_postgres().await?).await)
}

/// A store on the database at `url` (one of [`fresh_postgres`]'s), for tests that also reach
/// that database by hand.
pub async fn postgres_store(url: &str) -> SharedStore {
    let store = sluice::store::postgres::PostgresStore::connect(url)
        .await
        .expect("connect postgres store");
    Arc::new(store)
}

/// A plain client of the database at `url`, its connection driven in the background: what a
/// test uses to hold locks, read plans or write rows behind the store's back.
pub async fn postgres_client(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
    tokio::spawn(conn);
    client
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
