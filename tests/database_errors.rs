//! Database errors keep their cause: the SQLSTATE and the server's message from a real
//! PostgreSQL, the host:port and the reason when the pool cannot connect, and "too many
//! connections" as such, so an operator reading a log or a 5xx problem knows what happened.

use sluice_testkit as support;

use sluice::ids::{hash_token, new_id, new_token};
use sluice::model::Tenant;
use sluice::store::StoreError;
use sluice::store::postgres::PostgresStore;

fn tenant() -> Tenant {
    Tenant {
        id: new_id("ten"),
        name: "Acme".into(),
        token_hash: hash_token(&new_token("sk")),
        created_at_ms: sluice::clock::now_ms(),
        share: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_errors_carry_the_sqlstate_and_the_server_message() {
    let Some(store) = support::fresh_postgres_store().await else {
        return;
    };
    // A NUL cannot be stored in a PostgreSQL text column: the server refuses it with 22021.
    let e = store.set_setting("k", "a\0b").await.unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, StoreError::Database(_)), "{e:?}");
    assert!(
        text.contains("22021") && text.contains("character_not_in_repertoire"),
        "{text}"
    );
    assert!(text.contains("invalid byte sequence"), "{text}");

    // A unique violation stays a Conflict (callers branch on it) and says which key.
    let t = tenant();
    store.create_tenant(&t).await.expect("first insert");
    let e = store.create_tenant(&t).await.unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, StoreError::Conflict(_)), "{e:?}");
    assert!(
        text.contains("23505") && text.contains("unique_violation"),
        "{text}"
    );
    assert!(text.contains("duplicate key value"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_that_cannot_connect_names_the_address_and_the_reason() {
    let Some(url) = support::fresh_postgres().await else {
        return;
    };
    let config: tokio_postgres::Config = url.parse().expect("url");

    // Nobody listens on this port.
    let port = support::free_port();
    let refused = format!("postgres://postgres@127.0.0.1:{port}/sluice");
    let e = match PostgresStore::connect(&refused).await {
        Ok(_) => panic!("connected to a port nobody listens on"),
        Err(e) => e,
    };
    let text = e.to_string();
    assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(text.to_lowercase().contains("refused"), "{text}");

    // The server answers, but the database does not exist: SQLSTATE 3D000 and its name.
    let missing = format!(
        "{}/sluice_no_such_database",
        &url[..url.rfind('/').expect("a database name")]
    );
    let e = match PostgresStore::connect(&missing).await {
        Ok(_) => panic!("connected to a database that does not exist"),
        Err(e) => e,
    };
    let text = e.to_string();
    assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
    assert!(text.contains("3D000"), "{text}");
    assert!(text.contains("sluice_no_such_database"), "{text}");
    assert!(text.contains("does not exist"), "{text}");
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        #[allow(unreachable_patterns)]
        _ => "127.0.0.1".into(),
    };
    assert!(text.contains(&host), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_connections_is_reported_as_53300() {
    let Some(url) = support::fresh_postgres().await else {
        return;
    };
    let (admin, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect as admin");
    tokio::spawn(conn);
    let role = format!("sluice_limited_{}", std::process::id());
    admin
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN CONNECTION LIMIT 1"
        ))
        .await
        .expect("create a role allowed one connection");
    let as_role = url.replacen("postgres://postgres@", &format!("postgres://{role}@"), 1);
    assert_ne!(as_role, url, "the test URL names the postgres user");

    // Another client holds the role's only connection.
    let (holder, holder_conn) = tokio_postgres::connect(&as_role, tokio_postgres::NoTls)
        .await
        .expect("the role's one connection");
    let holder_task = tokio::spawn(holder_conn);

    let result = PostgresStore::connect(&as_role).await;
    drop(holder);
    let _ = holder_task.await;
    let e = match result {
        Ok(_) => panic!("a second connection for a role limited to one was accepted"),
        Err(e) => e,
    };
    let _ = admin.batch_execute(&format!("DROP ROLE {role}")).await;
    let text = e.to_string();
    assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
    assert!(text.contains("53300"), "{text}");
    assert!(text.contains("too many connections"), "{text}");
}
