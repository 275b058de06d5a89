//! Requests to a test sluice's HTTP API with every part of the answer kept (status, JSON body,
//! content type, text), and the assertions API tests share.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::{Sluice, test_settings};

/// An answer: status, JSON body (Null when empty or not JSON), content type, text.
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// The body as JSON (Null when empty or not JSON).
    pub body: Value,
    /// `Content-Type`.
    pub content_type: String,
    /// The body as text.
    pub text: String,
}

impl Sluice {
    /// Start with the test settings after `tweak` adjusts them; panics if it cannot.
    pub async fn start_with(tweak: impl FnOnce(&mut sluice::config::RawSettings)) -> Sluice {
        let mut raw = test_settings();
        tweak(&mut raw);
        Sluice::start(raw).await
    }

    /// A request with an optional bearer token and JSON body.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let body = body.map(|b| serde_json::to_vec(&b).expect("json"));
        self.raw(method, path, token, body, "application/json", &[])
            .await
    }

    /// A request with raw bytes, content type and extra headers.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Vec<u8>>,
        content_type: &str,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if let Some(b) = body {
            req = req.header("content-type", content_type).body(b);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let text = resp.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            body,
            content_type,
            text,
        }
    }

    /// GET with a token, expecting 200.
    pub async fn get_ok(&self, path: &str, token: &str) -> Value {
        let r = self.call(Method::GET, path, Some(token), None).await;
        assert_eq!(r.status, 200, "GET {path}: {}", r.text);
        r.body
    }

    /// Create an endpoint with extra fields; its JSON (secret included).
    pub async fn create_endpoint(&self, token: &str, url: &str, extra: Value) -> Value {
        let mut body = json!({ "url": url });
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        let r = self
            .call(Method::POST, "/v1/endpoints", Some(token), Some(body))
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        r.body
    }

    /// Poll `path` until `done` holds (generous: 30 s).
    pub async fn wait_for(&self, path: &str, token: &str, done: impl Fn(&Value) -> bool) -> Value {
        for _ in 0..300 {
            let v = self.get_ok(path, token).await;
            if done(&v) {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "{path} never reached the expected state: {}",
            self.get_ok(path, token).await
        );
    }
}

/// The states of a page of deliveries.
pub fn states(page: &Value) -> Vec<String> {
    page["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|d| d["state"].as_str().expect("state").to_owned())
        .collect()
}

/// A problem+json answer with this status, naming this field.
pub fn assert_problem(r: &Reply, status: u16, field: Option<&str>) {
    assert_eq!(r.status, status, "{}", r.text);
    assert_eq!(r.content_type, "application/problem+json", "{}", r.text);
    assert_eq!(r.body["status"], status);
    assert!(r.body["detail"].as_str().is_some_and(|d| !d.is_empty()));
    if let Some(f) = field {
        assert_eq!(r.body["field"], f, "{}", r.text);
    }
}
