//! A full database (SQLite capped with `max_page_count`, so the engine itself answers
//! SQLITE_FULL): producers get a 507 naming the cause, `/readyz` fails, every writer is told
//! the truth, nothing acknowledged is lost, and writes work again once there is room.

use sluice_testkit as support;

use serde_json::{Value, json};
use sluice_testkit::receiver::{self, Behavior};
use support::ADMIN;

/// The store deadline of these tests' API.
const DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

fn content_type(r: &reqwest::Response) -> String {
    r.headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

/// The API over an embedded store this test holds (so it can cap the database's size),
/// served on 127.0.0.1:0 with the test admin token.
async fn api_over(
    store: std::sync::Arc<sluice::store::sqlite::SqliteStore>,
) -> (String, tokio::task::JoinHandle<()>) {
    let settings = sluice::dispatcher::DispatchSettings {
        allow_networks: vec!["127.0.0.0/8".parse().expect("network")],
        ..Default::default()
    };
    let state = sluice::api::AppState::new(
        sluice::store::deadline::Bounded::wrap(store, DEADLINE),
        std::sync::Arc::new(sluice::metrics::Metrics::new()),
        None,
        std::sync::Arc::new(settings),
        sluice::ids::hash_token(ADMIN),
        256 * 1024,
        DEADLINE,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    let app = sluice::api::router(state, sluice::api::MetricsOn::ApiWithAdminToken);
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (base, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_sqlite_database_answers_507_fails_readyz_and_recovers_when_room_is_made() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = std::sync::Arc::new(
        sluice::store::sqlite::SqliteStore::open(
            &dir.path().join("sluice.db"),
            sluice::store::sqlite::SqliteOptions {
                synchronous_full: false,
                readers: 2,
            },
        )
        .expect("open sqlite"),
    );
    let (base, server) = api_over(store.clone()).await;
    let http = support::http();
    let call = |method: reqwest::Method, path: &str, token: &str, body: Option<Value>| {
        let mut req = http
            .request(method, format!("{base}{path}"))
            .bearer_auth(token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        async move {
            let r = req.send().await.expect("request");
            let status = r.status().as_u16();
            let ct = content_type(&r);
            let text = r.text().await.unwrap_or_default();
            let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            (status, ct, body, text)
        }
    };
    let (status, _, tenant, text) = call(
        reqwest::Method::POST,
        "/v1/tenants",
        ADMIN,
        Some(json!({ "name": "acme" })),
    )
    .await;
    assert_eq!(status, 201, "{text}");
    let token = tenant["token"].as_str().expect("token").to_owned();
    let rx = receiver::start(Behavior::Fast, false)
        .await
        .expect("receiver");
    let (status, _, _, text) = call(
        reqwest::Method::POST,
        "/v1/endpoints",
        &token,
        Some(json!({ "url": rx.url() })),
    )
    .await;
    assert_eq!(status, 201, "{text}");

    // Room for a few dozen 2 KB messages, then the engine itself says SQLITE_FULL.
    let (size, _) = store.limit_size(None).await.expect("size");
    store
        .limit_size(Some(size + 128 * 1024))
        .await
        .expect("cap");
    let filler = "x".repeat(2048);
    let post = |key: String| {
        let req = http
            .post(format!("{base}/v1/messages"))
            .bearer_auth(&token)
            .header("Idempotency-Key", key.clone())
            .json(&json!({ "event_type": "order.created", "payload": { "key": key, "filler": filler } }));
        async move {
            let r = req.send().await.expect("request");
            let status = r.status().as_u16();
            let ct = content_type(&r);
            let body: Value = r.json().await.unwrap_or(Value::Null);
            (status, ct, body)
        }
    };
    let mut acknowledged = Vec::new();
    let mut refused = None;
    for i in 0..2000 {
        let (status, ct, body) = post(format!("m-{i}")).await;
        if status == 202 {
            acknowledged.push(body["id"].as_str().expect("id").to_owned());
        } else {
            refused = Some((i, status, ct, body));
            break;
        }
    }
    let (i, status, ct, body) = refused.expect("the capped database never filled up");
    assert!(!acknowledged.is_empty(), "nothing fitted under the cap");
    assert!(
        status == 507 || status == 503,
        "a full database answered {status}: {body}"
    );
    assert_eq!(ct, "application/problem+json");
    let detail = body["detail"].as_str().unwrap_or_default().to_lowercase();
    let (ready, ct, _, text) = call(reqwest::Method::GET, "/readyz", "", None).await;
    assert!(
        detail.contains("full") && ready == 503,
        "with the database full, a producer got {status} {body} and /readyz answered {ready} {text}"
    );
    assert_eq!(ct, "application/problem+json");
    assert!(text.to_lowercase().contains("full"), "{text}");
    // Reads still work, and everything acknowledged is there.
    for id in &acknowledged {
        let (status, _, _, text) = call(
            reqwest::Method::GET,
            &format!("/v1/messages/{id}"),
            &token,
            None,
        )
        .await;
        assert_eq!(status, 200, "acknowledged message {id} is missing: {text}");
    }

    // Room again: the refused message goes in under its key, and /readyz is 200.
    store.limit_size(None).await.expect("lift the cap");
    let (status, _, body) = post(format!("m-{i}")).await;
    assert_eq!(status, 202, "after making room: {body}");
    acknowledged.push(body["id"].as_str().expect("id").to_owned());
    let (status, _, _, text) = call(reqwest::Method::GET, "/readyz", "", None).await;
    assert_eq!(status, 200, "/readyz after making room: {text}");
    for id in &acknowledged {
        let (status, _, _, text) = call(
            reqwest::Method::GET,
            &format!("/v1/messages/{id}"),
            &token,
            None,
        )
        .await;
        assert_eq!(status, 200, "acknowledged message {id} is missing: {text}");
    }
    server.abort();
}

/// A database with room for the write probe but not for producers' messages (as on a full
/// filesystem, where a small commit still fits in WAL space SQLite already has): the failed
/// producers' writes keep `/readyz` failing until one succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_writes_that_find_the_database_full_fail_readyz_even_if_the_probe_fits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = std::sync::Arc::new(
        sluice::store::sqlite::SqliteStore::open(&dir.path().join("sluice.db"), Default::default())
            .expect("open sqlite"),
    );
    let (base, server) = api_over(store.clone()).await;
    let http = support::http();
    let r = http
        .post(format!("{base}/v1/tenants"))
        .bearer_auth(ADMIN)
        .json(&json!({ "name": "acme" }))
        .send()
        .await
        .expect("create tenant");
    let token = r.json::<Value>().await.expect("json")["token"]
        .as_str()
        .expect("token")
        .to_owned();
    let post = |bytes: usize| {
        http.post(format!("{base}/v1/messages"))
            .bearer_auth(&token)
            .json(&json!({ "event_type": "a.b", "payload": { "p": "x".repeat(bytes) } }))
            .send()
    };
    let readyz = || http.get(format!("{base}/readyz")).send();

    // Room for the probe's 64 KiB, not for a 200 KB message.
    let (size, _) = store.limit_size(None).await.expect("size");
    store
        .limit_size(Some(size + 128 * 1024))
        .await
        .expect("cap");
    assert_eq!(readyz().await.expect("readyz").status(), 200);
    let r = post(200_000).await.expect("post");
    assert_eq!(r.status(), 507, "{}", r.text().await.unwrap_or_default());
    let r = readyz().await.expect("readyz");
    assert_eq!(r.status(), 503);
    assert!(r.text().await.unwrap_or_default().contains("full"));

    // A message that fits goes in, and the process is ready again.
    let r = post(100).await.expect("post");
    assert_eq!(r.status(), 202, "{}", r.text().await.unwrap_or_default());
    assert_eq!(readyz().await.expect("readyz").status(), 200);
    server.abort();
}

/// SQLite rolls back a whole transaction on SQLITE_FULL, not just the failing statement: every
/// write in a group commit that hits it must be told the truth (Ok only if it is stored).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_sqlite_group_commit_tells_every_writer_the_truth() {
    use sluice::store::{Store, StoreError};
    let dir = tempfile::tempdir().expect("tempdir");
    let store = std::sync::Arc::new(
        sluice::store::sqlite::SqliteStore::open(&dir.path().join("sluice.db"), Default::default())
            .expect("open sqlite"),
    );
    let (size, _) = store.limit_size(None).await.expect("size");
    store.limit_size(Some(size + 64 * 1024)).await.expect("cap");
    // Big values overflow into new pages and hit the cap; small ones still fit in pages that
    // have room, so a group holds both failures and writes that succeed after them.
    // Polled together, they queue up while the writer works, so groups hold many of them.
    let outcomes = futures_util::future::join_all((0..300).map(|i| {
        let store = store.clone();
        let value = if i % 2 == 0 {
            "v".repeat(10_000)
        } else {
            "v".into()
        };
        async move { (i, store.set_setting(&format!("k{i}"), &value).await) }
    }))
    .await;
    assert!(
        outcomes
            .iter()
            .any(|(_, r)| matches!(r, Err(StoreError::Full(_)))),
        "nothing hit the cap: {:?}",
        outcomes.iter().filter(|(_, r)| r.is_err()).count()
    );
    assert!(outcomes.iter().any(|(_, r)| r.is_ok()), "nothing fitted");
    let e = store.probe_write().await.unwrap_err();
    assert!(matches!(e, StoreError::Full(_)), "{e:?}");
    store.limit_size(None).await.expect("lift the cap");
    for (i, r) in &outcomes {
        let stored = store.setting(&format!("k{i}")).await.expect("read");
        match r {
            Ok(()) => assert!(stored.is_some(), "k{i} was acknowledged but is not stored"),
            Err(e) => assert!(stored.is_none(), "k{i} was refused ({e}) but is stored"),
        }
    }
    store.probe_write().await.expect("room again");
}
