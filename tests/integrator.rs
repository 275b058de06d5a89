//! What a platform team integrating sluice relies on, end to end through the HTTP API against
//! real receivers on loopback: custom headers on every attempt, Ed25519 `v1a` signatures (checked
//! by an independent implementation), wildcard filters, the message log's filters, resend and
//! recover. Where the store is involved the test runs on both drivers (`sluice_testkit::drivers!`).

#[path = "integrator/capture.rs"]
mod capture;
#[path = "integrator/filters.rs"]
mod filters;
#[path = "integrator/headers.rs"]
mod headers;
#[path = "integrator/redelivery.rs"]
mod redelivery;
#[path = "integrator/signatures.rs"]
mod signatures;

use sluice_testkit as support;

use std::time::Duration;

use serde_json::Value;
use support::{Sluice, eventually};

/// Longest wait for something the dispatcher does.
pub const WAIT: Duration = Duration::from_secs(20);

/// GET that must answer 200.
pub async fn get_ok(s: &Sluice, token: &str, path: &str) -> Value {
    let (status, body) = s.get(token, path).await;
    assert_eq!(status, 200, "GET {path}: {body}");
    body
}

/// POST that must answer `want`.
pub async fn post_expect(s: &Sluice, token: &str, path: &str, body: Value, want: u16) -> Value {
    let (status, answer) = s.post(token, path, body).await;
    assert_eq!(status, want, "POST {path}: {answer}");
    answer
}

/// Poll `path` until `check` holds of its body; the last body.
pub async fn wait_for(
    s: &Sluice,
    token: &str,
    path: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let held = eventually(WAIT, || async { check(&get_ok(s, token, path).await) }).await;
    let last = get_ok(s, token, path).await;
    assert!(held, "GET {path} never satisfied the check: {last}");
    last
}

/// The states of a message's deliveries.
pub fn states(message: &Value) -> Vec<String> {
    message["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .map(|d| d["state"].as_str().unwrap().to_owned())
        .collect()
}

/// Run a Python verifier (`tests/…/<script>`) on `input`: Ok when it exits 0, Err with what it
/// printed otherwise; `None` when no interpreter is configured (loud skip outside CI).
pub fn python(script: &str, input: &Value) -> Option<Result<(), String>> {
    use std::io::Write;
    let python = support::python_verifier()?;
    let path = format!("{}/tests/{script}", env!("CARGO_MANIFEST_DIR"));
    let mut child = std::process::Command::new(python)
        .arg(&path)
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run python");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    Some(if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    })
}

/// PATCH JSON; (status, body).
pub async fn patch(s: &Sluice, token: &str, path: &str, body: Value) -> (u16, Value) {
    let r = s
        .http
        .patch(format!("{}{path}", s.base))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .expect("request");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}
