//! OAuth2 client credentials against a real authorization server (tests/oauth2_server.py, built
//! on Authlib from PyPI) whose receiver accepts only the bearer tokens it issued: tokens are
//! fetched, cached, refreshed before they expire and once after a 401; a token endpoint that
//! refuses sluice is a failure of its own in the attempt log and the evidence.

use sluice_testkit as support;

use std::io::BufRead;
use std::time::Duration;

use serde_json::{Value, json};
use support::{Sluice, eventually, test_settings};

const WAIT: Duration = Duration::from_secs(20);
const SECRET: &str = "client-secret-0123456789";

/// The authorization server, stopped when dropped.
struct AuthServer {
    child: std::process::Child,
    base: String,
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl AuthServer {
    /// Start it with tokens that live `expires_in` seconds, or None (skip) without Python.
    fn start(expires_in: u32) -> Option<AuthServer> {
        let python = support::python_verifier()?;
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/oauth2_server.py");
        let mut child = std::process::Command::new(python)
            .args([script, "--client-secret", SECRET, "--expires-in"])
            .arg(expires_in.to_string())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the OAuth2 server (Authlib and Flask installed by .ci/run)");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the server's port");
        let port = serde_json::from_str::<Value>(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
            ["port"]
            .as_u64()
            .expect("port");
        Some(AuthServer {
            child,
            base: format!("http://127.0.0.1:{port}"),
        })
    }

    async fn stats(&self) -> Value {
        let r = support::http()
            .get(format!("{}/admin/stats", self.base))
            .send()
            .await
            .unwrap();
        r.json().await.unwrap()
    }

    async fn received(&self) -> usize {
        self.stats().await["received"]
            .as_array()
            .map_or(0, Vec::len)
    }

    fn credentials(&self, secret: &str) -> Value {
        json!({
            "token_url": format!("{}/token", self.base),
            "client_id": "sluice",
            "client_secret": secret,
            "scope": "webhooks",
            "audience": "https://hooks.example.com",
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_fetched_cached_and_refreshed_once_after_a_401() {
    let Some(auth) = AuthServer::start(3600) else {
        return;
    };
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let (id, _) = s
        .endpoint(
            &token,
            &format!("{}/hook", auth.base),
            json!({ "oauth2": auth.credentials(SECRET) }),
        )
        .await;
    for n in 1..=3 {
        s.send(&token, "order.created", json!({ "n": n })).await;
        assert!(eventually(WAIT, || async { auth.received().await >= n }).await);
    }
    let stats = auth.stats().await;
    assert_eq!(
        stats["issued"], 1,
        "one token serves every delivery: {stats}"
    );
    let asked = &stats["token_requests"][0];
    assert_eq!(asked["scope"], "webhooks");
    assert_eq!(asked["audience"], "https://hooks.example.com");

    // The secret is write-only.
    let (_, shown) = s.get(&token, &format!("/v1/endpoints/{id}")).await;
    assert_eq!(shown["oauth2"]["client_id"], "sluice");
    assert!(!shown.to_string().contains(SECRET), "{shown}");

    // Revoked at the server: the receiver answers 401, and the same attempt fetches a new
    // token and delivers.
    support::http()
        .post(format!("{}/admin/revoke", auth.base))
        .send()
        .await
        .unwrap();
    s.send(&token, "order.created", json!({ "n": 4 })).await;
    assert!(eventually(WAIT, || async { auth.received().await >= 4 }).await);
    let stats = auth.stats().await;
    assert_eq!(stats["issued"], 2, "{stats}");
    assert_eq!(stats["refused"], 1, "{stats}");
    let (_, log) = s.get(&token, &format!("/v1/endpoints/{id}/attempts")).await;
    let statuses: Vec<&Value> = log["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["status"])
        .collect();
    assert!(
        statuses.iter().all(|s| **s == 204),
        "one attempt each: {statuses:?}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_refreshed_before_it_expires() {
    // Two-second tokens are refreshed after one second: the second delivery never meets a 401.
    let Some(auth) = AuthServer::start(2) else {
        return;
    };
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    s.endpoint(
        &token,
        &format!("{}/hook", auth.base),
        json!({ "oauth2": auth.credentials(SECRET) }),
    )
    .await;
    s.send(&token, "order.created", json!({ "n": 1 })).await;
    assert!(eventually(WAIT, || async { auth.received().await >= 1 }).await);
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    s.send(&token, "order.created", json!({ "n": 2 })).await;
    assert!(eventually(WAIT, || async { auth.received().await >= 2 }).await);
    let stats = auth.stats().await;
    assert_eq!(stats["issued"], 2, "{stats}");
    assert_eq!(stats["refused"], 0, "{stats}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_endpoint_that_refuses_us_is_named_in_the_evidence() {
    let Some(auth) = AuthServer::start(3600) else {
        return;
    };
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let wrong = "not-the-secret-at-all";
    let (id, _) = s
        .endpoint(
            &token,
            &format!("{}/hook", auth.base),
            json!({ "oauth2": auth.credentials(wrong) }),
        )
        .await;
    s.send(&token, "order.created", json!({})).await;
    let attempts = format!("/v1/endpoints/{id}/attempts");
    assert!(
        eventually(WAIT, || async {
            !s.get(&token, &attempts).await.1["data"][0].is_null()
        })
        .await
    );
    let attempt = s.get(&token, &attempts).await.1["data"][0].clone();
    assert_eq!(attempt["error_kind"], "token_endpoint", "{attempt}");
    let why = attempt["response"].as_str().unwrap_or_default();
    assert!(why.contains("invalid_client"), "{why}");
    assert!(
        !why.contains(wrong),
        "the secret never reaches the log: {why}"
    );
    assert_eq!(auth.received().await, 0);
    let (_, status) = s.get(&token, &format!("/v1/endpoints/{id}/status")).await;
    let sentence = status["sentence"].as_str().unwrap_or_default();
    assert!(sentence.contains("got no OAuth2 token"), "{sentence}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth2_settings_are_checked_naming_the_field() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let good = json!({
        "token_url": "http://127.0.0.1:9/token", "client_id": "sluice", "client_secret": "s"
    });
    let mut private = good.clone();
    private["token_url"] = json!("http://10.1.2.3/token");
    let mut no_secret = good.clone();
    no_secret.as_object_mut().unwrap().remove("client_secret");
    let mut bad_id = good.clone();
    bad_id["client_id"] = json!("");
    for (oauth2, field) in [
        (private, "oauth2.token_url"),
        (no_secret, "oauth2.client_secret"),
        (bad_id, "oauth2.client_id"),
    ] {
        let body = json!({ "url": "http://127.0.0.1:9/hook", "oauth2": oauth2 });
        let (status, problem) = s.post(&token, "/v1/endpoints", body).await;
        assert_eq!(status, 422, "{problem}");
        assert_eq!(problem["field"], field, "{problem}");
    }
    // On an update the stored secret is kept when the secret is left out.
    let (id, _) = s
        .endpoint(&token, "http://127.0.0.1:9/hook", json!({ "oauth2": good }))
        .await;
    let mut keep = good.clone();
    keep.as_object_mut().unwrap().remove("client_secret");
    keep["scope"] = json!("webhooks");
    let r = s
        .http
        .patch(format!("{}/v1/endpoints/{id}", s.base))
        .bearer_auth(&token)
        .json(&json!({ "oauth2": keep }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let e = s.running.store.endpoint(None, &id).await.unwrap();
    let creds = e.oauth2.expect("kept");
    assert_eq!(
        (creds.client_secret.as_str(), creds.scope.as_deref()),
        ("s", Some("webhooks"))
    );
    s.stop().await;
}

/// Token endpoints that misbehave, on loopback receivers from the testkit (no Python needed).
mod hostile {
    use super::*;
    use support::receiver::{self, Behavior};

    /// Credentials naming `token_url`.
    fn credentials(token_url: &str) -> Value {
        json!({ "token_url": token_url, "client_id": "sluice", "client_secret": SECRET })
    }

    /// The attempts logged for endpoint `id`, once at least `n` are.
    async fn attempts(s: &Sluice, token: &str, id: &str, n: usize) -> Vec<Value> {
        let path = format!("/v1/endpoints/{id}/attempts?limit=100");
        let logged = || async {
            s.get(token, &path).await.1["data"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        };
        let enough = eventually(WAIT, || async { logged().await.len() >= n }).await;
        let log = logged().await;
        assert!(enough, "{n} attempts logged: {log:?}");
        log
    }

    /// A token URL that accepts and never answers: each attempt waits for the one fetch under
    /// way only until its own deadline (the total timeout, 1 s here, though a token request may
    /// take 5 s), fails as `token_endpoint`, and there is one request to the token URL, not one
    /// per attempt in turn (which held attempts 5 s, 10 s, 15 s … and let the reaper hand them
    /// out twice).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_token_url_that_never_answers_holds_no_attempt_past_its_deadline() {
        let hanging = receiver::start(Behavior::Blackhole, false).await.unwrap();
        let hook = receiver::start(Behavior::Fast, false).await.unwrap();
        let mut settings = test_settings();
        settings.total_timeout = Some("1s".into());
        settings.egress.token_timeout = Some("5s".into());
        let s = Sluice::start(settings).await;
        let (_, token) = s.tenant("acme").await;
        let (id, _) = s
            .endpoint(
                &token,
                &hook.url(),
                json!({ "oauth2": credentials(&hanging.url()) }),
            )
            .await;
        for n in 0..6 {
            s.send(&token, "order.created", json!({ "n": n })).await;
        }
        let log = attempts(&s, &token, &id, 6).await;
        for a in &log {
            assert_eq!(a["error_kind"], "token_endpoint", "{a}");
            // The deadline is 1 s; the bound is loose so a loaded machine cannot fail it, and
            // far below the 5 s a queued fetch took each waiter before.
            let took = a["duration_ms"].as_u64().unwrap_or(u64::MAX);
            assert!(took < 3_000, "an attempt outlived its deadline: {a}");
        }
        assert_eq!(
            hanging.record.requests(),
            1,
            "one fetch for every attempt waiting"
        );
        assert_eq!(hook.record.requests(), 0);
        s.stop().await;
    }

    /// A token answer longer than 64 KiB is not read, and a token longer than 8 KiB is not
    /// kept or sent: both fail as `token_too_large` and nothing reaches the receiver.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn token_answers_and_tokens_past_their_bounds_are_refused() {
        let hook = receiver::start(Behavior::Fast, false).await.unwrap();
        let s = Sluice::start(test_settings()).await;
        let (_, token) = s.tenant("acme").await;
        let answer = |token_len: usize, padding: usize| {
            let body = format!(
                r#"{{"access_token":"{}","token_type":"Bearer","expires_in":3600,"pad":"{}"}}"#,
                "t".repeat(token_len),
                " ".repeat(padding)
            );
            Behavior::Body {
                status: 200,
                body: body.into(),
            }
        };
        let huge = receiver::start(answer(16, 4 << 20), false).await.unwrap();
        let long = receiver::start(answer(10 << 10, 0), false).await.unwrap();
        for idp in [&huge, &long] {
            let (id, _) = s
                .endpoint(
                    &token,
                    &hook.url(),
                    json!({ "oauth2": credentials(&idp.url()) }),
                )
                .await;
            s.send(&token, "order.created", json!({})).await;
            let log = attempts(&s, &token, &id, 1).await;
            assert_eq!(log[0]["error_kind"], "token_too_large", "{}", log[0]);
            let gone = s
                .http
                .delete(format!("{}/v1/endpoints/{id}", s.base))
                .bearer_auth(&token)
                .send()
                .await
                .unwrap();
            assert!(gone.status().is_success());
        }
        assert_eq!(hook.record.requests(), 0, "no token, no delivery");
        s.stop().await;
    }

    /// `"expires_in":"3599"`, as some identity providers send it, is a lifetime like 3599.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lifetime_sent_as_a_numeric_string_is_understood() {
        let hook = receiver::start(Behavior::Fast, false).await.unwrap();
        let idp = receiver::start(
            Behavior::Body {
                status: 200,
                body: r#"{"access_token":"tok","token_type":"bearer","expires_in":"3599"}"#.into(),
            },
            false,
        )
        .await
        .unwrap();
        let s = Sluice::start(test_settings()).await;
        let (_, token) = s.tenant("acme").await;
        let (id, _) = s
            .endpoint(
                &token,
                &hook.url(),
                json!({ "oauth2": credentials(&idp.url()) }),
            )
            .await;
        for n in 0..3 {
            s.send(&token, "order.created", json!({ "n": n })).await;
        }
        let log = attempts(&s, &token, &id, 3).await;
        assert!(log.iter().all(|a| a["status"] == 200), "{log:?}");
        assert_eq!(idp.record.requests(), 1, "the token is cached");
        s.stop().await;
    }
}
