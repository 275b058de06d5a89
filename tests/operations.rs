//! What an operator sees of the real binary: JSON logs that are JSON lines and nothing else
//! (access log and delivery spans included), no colour codes when stderr is not a terminal,
//! start-up errors that say what failed, once, and what to do, a settings file whose admin
//! token is refused with the way to give one, and `sluice migrate` with only its own flags.

use std::time::Duration;

use serde_json::{Value, json};
use sluice_testkit::receiver::{self as receivers, Behavior};
use sluice_testkit::{eventually, free_port, http};

use sluice_testkit::process::{Builder, Process};

const ADMIN: &str = "operations-admin-token-0123456789";

/// `sluice SUBCOMMAND` without the log, colour and database settings of the environment.
fn sluice(subcommand: &str) -> Builder {
    Process::command(subcommand)
        .env_remove("SLUICE_LOG")
        .env_remove("NO_COLOR")
        .env_remove("SLUICE_DATABASE_URL")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_json_lines_with_the_access_log_and_delivery_spans() {
    let dir = tempfile::tempdir().unwrap();
    let child = sluice("serve")
        .args(&["--log-format", "json"])
        .listen()
        .args(&[
            "--allow-network",
            "127.0.0.0/8",
            "--sqlite-synchronous",
            "normal",
        ])
        .arg("--data-dir")
        .arg(dir.path())
        .env("SLUICE_ADMIN_TOKEN", ADMIN)
        .env("SLUICE_LOG", "info,sluice::dispatcher=debug")
        .spawn();
    let base = child.base.clone();
    assert!(child.answers("/healthz").await, "sluice did not come up");
    let rx = receivers::start(Behavior::Fast, false).await.unwrap();
    let client = http();
    let post = |token: &str, path: &str, body: Value| {
        client
            .post(format!("{base}{path}"))
            .bearer_auth(token)
            .json(&body)
            .send()
    };
    let tenant: Value = post(ADMIN, "/v1/tenants", json!({ "name": "ops" }))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = tenant["token"].as_str().unwrap().to_owned();
    let r = post(&token, "/v1/endpoints", json!({ "url": rx.url() }))
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let body = json!({ "event_type": "order.created", "payload": {} });
    let msg: Value = post(&token, "/v1/messages", body)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let msg = msg["id"].as_str().unwrap().to_owned();
    assert!(
        eventually(Duration::from_secs(20), || async {
            rx.record.requests() >= 1
        })
        .await
    );
    // Let the settle be written (and logged) before stopping.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopped = child.sigterm_within();
    let (out, err) = (stopped.stdout, stopped.stderr);

    assert_eq!(out, "", "nothing on stdout");
    assert!(!err.contains('\u{1b}'), "no colour codes in JSON logs");
    let lines: Vec<Value> = err
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("a stray line: {l:?}")))
        .collect();
    let access = lines.iter().find(|l| {
        l["target"] == "sluice::access"
            && l["span"]["path"] == "/v1/messages"
            && l["fields"]["status"] == 202
    });
    assert!(access.is_some(), "an access line for the message: {err}");
    // The delivery's span carries the message and endpoint ids to every event inside it.
    let attempted = lines
        .iter()
        .find(|l| l["fields"]["message"] == "attempted")
        .unwrap_or_else(|| panic!("no attempt event: {err}"));
    let delivery = &attempted["span"];
    assert_eq!(delivery["name"], "delivery", "{attempted}");
    assert_eq!(delivery["message_id"], msg.as_str());
    assert!(delivery["endpoint_id"].as_str().unwrap().starts_with("ep_"));
    for stage in ["claimed", "settle"] {
        assert!(
            lines.iter().any(|l| l["fields"]["message"] == stage
                && l["span"]["message_id"] == msg.as_str()),
            "no {stage} event in the delivery span: {err}"
        );
    }
    assert!(lines.iter().any(|l| {
        l["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("stopped"))
    }));
}

#[test]
fn text_logs_to_a_pipe_have_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let child = sluice("serve")
        .listen()
        .arg("--data-dir")
        .arg(dir.path())
        .env("SLUICE_ADMIN_TOKEN", ADMIN)
        .spawn();
    let rt = tokio::runtime::Runtime::new().unwrap();
    assert!(rt.block_on(child.answers("/healthz")));
    let stopped = child.sigterm_within();
    let (out, err) = (stopped.stdout, stopped.stderr);
    assert_eq!(out, "");
    assert!(err.contains("sluice listening on"), "{err}");
    assert!(
        !err.contains('\u{1b}'),
        "colour codes in a redirected log: {err:?}"
    );
}

#[test]
fn an_address_in_use_is_said_once_with_what_to_do() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = sluice("serve")
        .args(&["--listen", &addr.to_string()])
        .arg("--data-dir")
        .arg(dir.path())
        .env("SLUICE_ADMIN_TOKEN", ADMIN)
        .run();
    assert!(!out.status.success());
    let err = out.stderr;
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
    assert_eq!(err.matches("Address already in use").count(), 1, "{err}");
    assert!(
        err.contains("another process is listening on port"),
        "{err}"
    );
}

#[test]
fn an_unreachable_postgresql_is_named_with_what_to_do() {
    let port = free_port();
    let url = format!("postgres://sluice@127.0.0.1:{port}/sluice");
    let out = sluice("serve")
        .args(&["--listen", "127.0.0.1:0", "--database-url", &url])
        .env("SLUICE_ADMIN_TOKEN", ADMIN)
        .run();
    assert!(!out.status.success());
    let err = out.stderr;
    assert!(
        err.contains(&format!("127.0.0.1:{port}")),
        "names the host: {err}"
    );
    assert_eq!(err.matches("Connection refused").count(), 1, "{err}");
    assert!(err.contains("check that the database is running"), "{err}");
    let out = sluice("migrate").args(&["--database-url", &url]).run();
    let err = out.stderr;
    assert!(
        !out.status.success() && err.contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );
}

#[test]
fn an_admin_token_in_the_settings_file_says_to_use_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sluice.toml");
    std::fs::write(
        &file,
        "lane-size = 4\nadmin_token = \"sk_admin_0123456789abcdef\"\n",
    )
    .unwrap();
    let out = sluice("serve").arg("--config").arg(&file).run();
    assert!(!out.status.success());
    let err = out.stderr;
    assert!(
        err.contains("SLUICE_ADMIN_TOKEN") && err.contains("line 2"),
        "{err}"
    );
    // The example file next to the code starts a sluice as it is.
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/sluice.example.toml");
    let child = sluice("serve")
        .args(&["--config", example])
        .listen()
        .arg("--data-dir")
        .arg(dir.path())
        .env("SLUICE_ADMIN_TOKEN", ADMIN)
        .spawn();
    let rt = tokio::runtime::Runtime::new().unwrap();
    assert!(rt.block_on(child.answers("/healthz")));
    child.sigterm_within();
}

#[test]
fn migrate_documents_only_its_own_flags_and_migrates() {
    let out = sluice("migrate").args(&["--help"]).run();
    let help = out.stdout;
    for own in ["--database-url", "--data-dir", "--config"] {
        assert!(help.contains(own), "{own}: {help}");
    }
    for foreign in [
        "--lane-size",
        "--listen",
        "--retry-schedule",
        "--console-link-ttl",
    ] {
        assert!(!help.contains(foreign), "{foreign} is serve's: {help}");
    }
    let dir = tempfile::tempdir().unwrap();
    let out = sluice("migrate").arg("--data-dir").arg(dir.path()).run();
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.starts_with("store migrated: sqlite "));
    assert!(dir.path().join("sluice.db").exists());
}

/// A PostgreSQL that will not vacuum the queue's big tables is named at start-up: sluice
/// vacuums only its small due tables itself, and without autovacuum the deliveries table keeps
/// every dead row version (two per delivery) and the statistics of its first analysis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgresql_without_autovacuum_for_the_queue_is_named_at_start_up() {
    let Some(db) = sluice_testkit::fresh_postgres().await else {
        return;
    };
    // Started once on the new database: it migrates, then checks.
    let serve = |db: &str| {
        Process::serve()
            .args(&["--database-url", db])
            .env("SLUICE_LOG", "warn")
    };
    let first_log = serve(&db).start().await.sigterm_within().stderr;
    let client = sluice_testkit::postgres_client(&db).await;
    let server_on = client
        .query_one("SELECT current_setting('autovacuum')::bool", &[])
        .await
        .unwrap()
        .get::<_, bool>(0);
    if server_on {
        assert!(!first_log.contains("autovacuum"), "{first_log}");
    }
    client
        .batch_execute("ALTER TABLE deliveries SET (autovacuum_enabled = false)")
        .await
        .unwrap();
    let log = serve(&db).start().await.sigterm_within().stderr;
    let warning = log
        .lines()
        .find(|l| l.contains("autovacuum is off"))
        .unwrap_or_else(|| panic!("no warning: {log}"));
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains("deliveries"), "{warning}");
    if server_on {
        assert!(!warning.contains("messages"), "{warning}");
    }
}
