//! `sluice receive` (issue 24, finding 10): a webhook whose signature is missing or wrong is
//! refused (401), so sluice records a failed attempt instead of a delivery, and what it prints
//! cannot drive the terminal (control characters are shown escaped).

use std::time::Duration;

use sluice::signing::{Secret, SigningKey, signature_header};

use sluice_testkit::process::Process;

/// `sluice receive` on a free port with `secret`.
fn start(secret: &str) -> Process {
    Process::command("receive")
        .listen()
        .args(&["--secret", secret])
        .spawn()
}

#[tokio::test]
async fn a_bad_signature_is_refused_and_bodies_print_escaped() {
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let rx = start(secret);
    let http = sluice_testkit::http();
    let url = format!("{}/hook", rx.base);
    assert!(
        sluice_testkit::eventually(Duration::from_secs(20), || async {
            http.get(&url).send().await.is_ok()
        })
        .await
    );
    let key = SigningKey::V1(Secret::parse(secret).expect("secret"));
    let body = "{\"evil\":\"\u{1b}[2J\u{1b}]0;owned\u{7}\"}";
    let ts = sluice::clock::now_ms() / 1000;
    let good = signature_header(std::slice::from_ref(&key), "msg_1", ts, body.as_bytes());
    let post = |sig: Option<String>| {
        let mut req = http
            .post(&url)
            .header("webhook-id", "msg_1")
            .header("webhook-timestamp", ts.to_string())
            .body(body);
        if let Some(sig) = sig {
            req = req.header("webhook-signature", sig);
        }
        req.send()
    };
    assert_eq!(post(Some(good)).await.unwrap().status(), 204);
    assert_eq!(post(Some("v1,AAAA".into())).await.unwrap().status(), 401);
    assert_eq!(post(None).await.unwrap().status(), 401);
    let stale = http
        .post(&url)
        .header("webhook-id", "msg_1")
        .header("webhook-timestamp", (ts - 3600).to_string())
        .header("webhook-signature", "v1,AAAA")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(stale.status(), 401);

    let out = rx.kill().stdout;
    assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out:?}");
    assert!(out.contains("msg_1 signature verified"), "{out}");
    assert!(out.contains("\\u{1b}[2J"), "{out}");
}
