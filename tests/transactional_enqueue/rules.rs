//! The API's rules as SQL errors, each with its SQLSTATE and the field it names; fan-out's
//! patterns the same as the API's; the role that may only call `send_message`.

use std::time::Duration;

use serde_json::json;
use sluice_testkit::process::Process;

use super::{app, send, sqlstate, support};

/// A call refused: tenant, event type, payload, key; the SQLSTATE and the field named.
type Refusal<'a> = (
    &'a str,
    &'a str,
    serde_json::Value,
    Option<&'a str>,
    &'a str,
    &'a str,
);

/// Each refusal: its SQLSTATE (class SL), a message that starts with the field, the field as
/// the error's column; and a refused call stores nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_carry_a_stable_sqlstate_and_name_the_field() {
    let Some(app) = app(Duration::from_secs(1), Some(64)).await else {
        return;
    };
    let (gone, _) = app.sluice.tenant("gone").await;
    let deleted = app
        .sluice
        .http
        .delete(format!("{}/v1/tenants/{gone}", app.sluice.base))
        .bearer_auth(support::ADMIN)
        .send()
        .await
        .unwrap();
    assert!(deleted.status().is_success(), "{}", deleted.status());

    let t = app.tenant.as_str();
    let long_type = "a".repeat(257);
    let at_limit = json!("x".repeat(62)); // 64 bytes with its quotes
    let over_limit = json!("x".repeat(63));
    let cases: Vec<Refusal> = vec![
        (
            "ten_nobody",
            "order.created",
            json!({}),
            None,
            "SL001",
            "tenant_id",
        ),
        (
            gone.as_str(),
            "order.created",
            json!({}),
            None,
            "SL001",
            "tenant_id",
        ),
        (t, "order created", json!({}), None, "SL002", "event_type"),
        (t, &long_type, json!({}), None, "SL002", "event_type"),
        (t, "", json!({}), None, "SL002", "event_type"),
        (t, "order.created", over_limit, None, "SL004", "payload"),
        (
            t,
            "order.created",
            json!({}),
            Some("a key"),
            "SL005",
            "idempotency_key",
        ),
        (
            t,
            "order.created",
            json!({}),
            Some(""),
            "SL005",
            "idempotency_key",
        ),
    ];
    for (tenant, event_type, payload, key, code, field) in cases {
        let e = send(&app.db, tenant, event_type, payload, key)
            .await
            .expect_err(code);
        let (got, message, column) = sqlstate(&e);
        assert_eq!(got, code, "{message}");
        assert!(message.starts_with(&format!("{field}:")), "{message}");
        assert_eq!(column.as_deref(), Some(field));
    }
    // SQL NULL is not a payload (JSON null is).
    let e = app
        .db
        .query_one(
            "SELECT sluice.send_message($1, 'order.created', NULL)",
            &[&app.tenant],
        )
        .await
        .expect_err("NULL payload");
    assert_eq!(sqlstate(&e).0, "SL003");
    send(&app.db, t, "order.created", json!(null), None)
        .await
        .expect("JSON null");
    send(&app.db, t, "order.created", at_limit, None)
        .await
        .expect("a payload at the limit");
    // Another event type under a used key.
    send(&app.db, t, "order.created", json!(1), Some("k"))
        .await
        .unwrap();
    let e = send(&app.db, t, "order.paid", json!(1), Some("k"))
        .await
        .expect_err("the key for another type");
    let (code, message, _) = sqlstate(&e);
    assert_eq!(code, "SL006");
    assert!(message.starts_with("idempotency_key:"), "{message}");

    let stored: i64 = app
        .db
        .query_one("SELECT count(*) FROM sluice.messages", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 3, "refused calls stored messages");
    app.sluice.stop().await;
}

/// The SQL function's patterns for an event type are the API's fan-out candidates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_patterns_are_the_apis() {
    let Some(url) = support::fresh_postgres().await else {
        return;
    };
    let _store = support::postgres_store(&url).await;
    let db = support::postgres_client(&url).await;
    for t in [
        "ping",
        "order.paid",
        "order.paid.v2",
        "a..b",
        ".x",
        "x.",
        "a:b-c_d.e",
    ] {
        let row = db
            .query_one("SELECT sluice.sluice_event_patterns($1)", &[&t])
            .await
            .unwrap();
        let sql: Vec<String> = row.get(0);
        let api: Vec<String> = sluice::store::subscriptions::candidates(t)
            .map(|c| c.into_owned())
            .collect();
        assert_eq!(sql, api, "{t}");
    }
}

/// `sluice grant-sender ROLE` lets the role call `send_message` and nothing else: it cannot
/// read or write sluice's tables, and a role not granted cannot call it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_role_may_call_the_function_and_read_no_table() {
    let Some(app) = app(Duration::from_secs(1), None).await else {
        return;
    };
    let suffix = format!(
        "{}_{}",
        std::process::id(),
        sluice::ids::lease_token().abs()
    );
    let (sender, stranger) = (format!("sender_{suffix}"), format!("stranger_{suffix}"));
    app.db
        .batch_execute(&format!(
            "CREATE ROLE {sender} LOGIN; CREATE ROLE {stranger} LOGIN"
        ))
        .await
        .unwrap();
    let printed = Process::command("grant-sender")
        .args(&[&sender, "--print"])
        .run();
    assert!(printed.status.success(), "{}", printed.stderr);
    assert_eq!(
        printed.stdout.matches("GRANT ").count(),
        2,
        "{}",
        printed.stdout
    );
    let granted = Process::command("grant-sender")
        .args(&[&sender, "--database-url", &app.url])
        .run();
    assert!(granted.status.success(), "{}", granted.stderr);

    let as_role = |role: &str| {
        app.url
            .replacen("postgres://postgres@", &format!("postgres://{role}@"), 1)
    };
    let db = support::postgres_client(&as_role(&sender)).await;
    let id = send(&db, &app.tenant, "order.created", json!({"ok": true}), None)
        .await
        .expect("the sender calls send_message");
    assert!(app.message(&id).await.is_some());
    for statement in [
        "SELECT count(*) FROM sluice.messages",
        "SELECT count(*) FROM sluice.tenants",
        "SELECT count(*) FROM sluice.deliveries",
        "INSERT INTO sluice.messages (id, tenant_id, event_type, payload, created_at_ms) \
         VALUES ('msg_x', 'ten_x', 'e', '{}', 0)",
        "UPDATE sluice.settings SET value = '1'",
    ] {
        let e = db.batch_execute(statement).await.expect_err(statement);
        assert_eq!(sqlstate(&e).0, "42501", "{statement}");
    }
    let db = support::postgres_client(&as_role(&stranger)).await;
    let e = send(&db, &app.tenant, "order.created", json!({}), None)
        .await
        .expect_err("a role not granted");
    assert_eq!(sqlstate(&e).0, "42501");

    app.db
        .batch_execute(&format!(
            "DROP OWNED BY {sender}, {stranger}; DROP ROLE {sender}; DROP ROLE {stranger}"
        ))
        .await
        .unwrap();
    app.sluice.stop().await;
}
