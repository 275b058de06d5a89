//! A database that hangs: producers and `/readyz` get a 503 problem+json within the store
//! deadline, PostgreSQL stops the work the client stopped waiting for, migrations are not cut
//! short, nothing acknowledged is lost, and sluice recovers by itself when the database does.

mod support {
    pub(crate) use sluice_testkit::*;
}

use sluice_testkit::freeze_proxy;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_testkit::receiver::{self, Behavior};
use support::{Sluice, eventually};

/// The default `--store-deadline`, and the margin a loaded 2-core machine gets on top of it.
const DEADLINE: Duration = Duration::from_secs(5);
const MARGIN: Duration = Duration::from_secs(10);

/// POST one message; (status, content type, body, how long the answer took).
async fn post_message(
    s: &Sluice,
    token: &str,
    key: &str,
) -> Result<(u16, String, Value, Duration), String> {
    let started = Instant::now();
    let r = s
        .http
        .post(format!("{}/v1/messages", s.base))
        .bearer_auth(token)
        .header("Idempotency-Key", key)
        .json(&json!({ "event_type": "order.created", "payload": { "key": key } }))
        .timeout(DEADLINE + MARGIN + Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| format!("no answer after {:?}: {e}", started.elapsed()))?;
    let status = r.status().as_u16();
    let ct = content_type(&r);
    let body = r.json().await.unwrap_or(Value::Null);
    Ok((status, ct, body, started.elapsed()))
}

async fn readyz(s: &Sluice) -> Result<(u16, String, String, Duration), String> {
    let started = Instant::now();
    let r = s
        .http
        .get(format!("{}/readyz", s.base))
        .timeout(DEADLINE + MARGIN + Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| format!("no answer after {:?}: {e}", started.elapsed()))?;
    let status = r.status().as_u16();
    let ct = content_type(&r);
    Ok((
        status,
        ct,
        r.text().await.unwrap_or_default(),
        started.elapsed(),
    ))
}

fn content_type(r: &reqwest::Response) -> String {
    r.headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_postgres_gets_fast_503s_and_sluice_recovers_when_it_thaws() {
    let Some(db) = support::fresh_postgres().await else {
        return;
    };
    let config: tokio_postgres::Config = db.parse().expect("url");
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        #[allow(unreachable_patterns)]
        _ => "127.0.0.1".into(),
    };
    let upstream = tokio::net::lookup_host((host.as_str(), config.get_ports()[0]))
        .await
        .expect("resolve the database host")
        .next()
        .expect("an address");
    let proxy = freeze_proxy::FreezeProxy::start(upstream)
        .await
        .expect("freeze proxy");
    let through_proxy = format!(
        "postgres://{}@{}/{}",
        config.get_user().unwrap_or("postgres"),
        proxy.addr,
        config.get_dbname().expect("database name")
    );

    let rx = receiver::start(Behavior::Fast, true)
        .await
        .expect("receiver");
    // A claim whose reply is lost in the freeze is given back by the next claim; the short
    // lease bounds the wait should that not happen (the reaper returns it then: delayed, never
    // lost).
    let s = Sluice::start(sluice::config::RawSettings {
        database_url: Some(through_proxy),
        read_timeout: Some("2s".into()),
        total_timeout: Some("3s".into()),
        lease_ttl: Some("10s".into()),
        ..support::test_settings()
    })
    .await;
    let (_, token) = s.tenant("acme").await;
    s.endpoint(&token, &rx.url(), json!({})).await;

    let mut acknowledged = Vec::new();
    for i in 0..5 {
        let key = format!("before-{i}");
        let (status, _, body, _) = post_message(&s, &token, &key).await.expect("answer");
        assert_eq!(status, 202, "{body}");
        acknowledged.push(body["id"].as_str().expect("id").to_owned());
    }

    proxy.set_frozen(true);
    // A producer and a readiness probe, at the same time, while the database hangs.
    let (posted, ready) = tokio::join!(post_message(&s, &token, "during-0"), readyz(&s));
    let (status, ct, body, took) = posted.unwrap_or_else(|e| {
        panic!("POST /v1/messages with the database frozen: {e}");
    });
    assert_eq!(status, 503, "{body}");
    assert_eq!(ct, "application/problem+json");
    assert!(
        took <= DEADLINE + MARGIN,
        "the 503 took {took:?}, more than the deadline {DEADLINE:?} + {MARGIN:?}"
    );
    let detail = body["detail"].as_str().unwrap_or_default();
    // "the database did not answer within 5s", or the pool's own bound on a new connection
    // ("cannot connect to …: no answer within 5s"), whichever fires first.
    assert!(detail.contains("within 5s"), "{body}");
    let (status, ct, text, took) = ready.unwrap_or_else(|e| {
        panic!("GET /readyz with the database frozen: {e}");
    });
    assert_eq!(status, 503, "{text}");
    assert_eq!(ct, "application/problem+json");
    assert!(took <= DEADLINE + MARGIN, "/readyz took {took:?}");
    // Reads are bounded the same way.
    let started = Instant::now();
    let (status, body) = s.get(&token, "/v1/messages").await;
    assert_eq!(status, 503, "{body}");
    assert!(started.elapsed() <= DEADLINE + MARGIN);

    proxy.set_frozen(false);
    let recovered = eventually(Duration::from_secs(60), || async {
        matches!(readyz(&s).await, Ok((200, ..)))
    })
    .await;
    assert!(
        recovered,
        "/readyz never answered 200 after the database thawed"
    );
    let mut n = 0;
    let accepted = eventually(Duration::from_secs(60), || {
        n += 1;
        let key = format!("after-{n}");
        let (s, token) = (&s, &token);
        async move { matches!(post_message(s, token, &key).await, Ok((202, ..))) }
    })
    .await;
    assert!(
        accepted,
        "no message was accepted after the database thawed"
    );
    let (status, _, body, _) = post_message(&s, &token, "after-last")
        .await
        .expect("answer");
    assert_eq!(status, 202, "{body}");
    acknowledged.push(body["id"].as_str().expect("id").to_owned());

    // Nothing acknowledged was lost, and the dispatcher delivers again.
    for id in &acknowledged {
        let m = s.message(&token, id).await;
        assert_eq!(m["id"].as_str(), Some(id.as_str()));
    }
    let delivered = eventually(Duration::from_secs(90), || async {
        let mut all = true;
        for id in &acknowledged {
            let m = s.message(&token, id).await;
            all &= m["deliveries"]
                .as_array()
                .is_some_and(|d| d.iter().all(|d| d["state"] == "delivered"));
        }
        all
    })
    .await;
    assert!(
        delivered,
        "acknowledged messages were not delivered after the thaw"
    );
    s.running.stop().await;
}

/// The server stops work the client stopped waiting for: a statement stuck behind a lock is
/// cancelled by PostgreSQL's statement timeout (the deadline), reported as 57014.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_cancels_a_statement_at_the_deadline() {
    use sluice::store::postgres::{PostgresOptions, PostgresStore};
    use sluice::store::{Store, StoreError};
    let Some(url) = support::fresh_postgres().await else {
        return;
    };
    let store = PostgresStore::connect_with(
        &url,
        PostgresOptions {
            deadline: Duration::from_secs(1),
            ..PostgresOptions::default()
        },
    )
    .await
    .expect("connect");
    let (admin, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect as admin");
    tokio::spawn(conn);
    admin
        .batch_execute("BEGIN; LOCK TABLE settings IN ACCESS EXCLUSIVE MODE")
        .await
        .expect("lock");
    let started = Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(1) + MARGIN, store.setting("k")).await;
    let took = started.elapsed();
    let e = match answer {
        Ok(Err(e)) => e,
        Ok(Ok(v)) => panic!("read {v:?} through an exclusive lock"),
        Err(_) => panic!("the server did not cancel the statement within {took:?}"),
    };
    admin.batch_execute("ROLLBACK").await.expect("unlock");
    assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
    assert!(e.to_string().contains("57014"), "{e}");
    assert!(e.to_string().contains("statement timeout"), "{e}");
    assert!(
        took < Duration::from_secs(1) + MARGIN,
        "cancelled after {took:?}"
    );
    store.setting("k").await.expect("works again");
}

/// Migrations are not cut short by the statement timeout: a process waits for another's
/// migration (here, the migration lock held past the deadline) and then starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_wait_past_the_deadline_for_another_process() {
    use sluice::store::postgres::{PostgresOptions, PostgresStore};
    let Some(url) = support::fresh_postgres().await else {
        return;
    };
    let (admin, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect as admin");
    tokio::spawn(conn);
    // The driver's migration lock (`MIGRATION_LOCK` in src/store/postgres.rs).
    admin
        .batch_execute("SELECT pg_advisory_lock(332238)")
        .await
        .expect("take the migration lock");
    let starting = tokio::spawn({
        let url = url.clone();
        async move {
            PostgresStore::connect_with(
                &url,
                PostgresOptions {
                    deadline: Duration::from_millis(500),
                    ..PostgresOptions::default()
                },
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!starting.is_finished(), "migrated while the lock was held");
    admin
        .batch_execute("SELECT pg_advisory_unlock(332238)")
        .await
        .expect("release the migration lock");
    let store = tokio::time::timeout(Duration::from_secs(30), starting)
        .await
        .expect("started after the lock was released")
        .expect("task");
    if let Err(e) = store {
        panic!("the migration failed instead of waiting: {e}");
    }
}
