//! Arbitrary strings in every query parameter and JSON field of the API and in every query
//! parameter and form field of the portal (issue 24): whatever arrives, the answer is a 4xx or
//! a success, never a 5xx and never a dropped connection (a panic). The API's operations,
//! parameters and body fields are read from its own OpenAPI document, so a route added later
//! is fuzzed without a change here. Run on SQLite, and on PostgreSQL when it is there (it
//! refuses NUL in text, a 500 the embedded store never shows).

use sluice_testkit as support;

#[allow(dead_code)]
#[path = "console/client.rs"]
mod client;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use reqwest::Method;
use serde_json::{Map, Value, json};
use sluice_testkit::receiver::{self, Behavior};
use support::{ADMIN, Sluice};

/// Cases per store: each sends every operation once, so a case is ~50 requests.
const CASES: u32 = 32;

/// Strings worth trying more often than chance would: NUL, characters split by a byte slice,
/// patterns, numbers out of range, markup, bidi controls, a long one.
const HOSTILE: &[&str] = &[
    "",
    "\0",
    "%00",
    "2026-01-01T00:00:\u{20ac}Z",
    "2026-01-01T00:00:00Z",
    "o*",
    "order.*",
    "*",
    "ep_",
    "msg_0",
    "dlv_-1",
    "' OR 1=1 --",
    "<script>alert(1)</script>",
    "\u{202e}evil",
    "99999999999999999999999",
    "-1",
    "1e309",
    "\r\nx-injected: 1",
    "\u{1b}[2J",
    "\u{fffd}\u{10ffff}",
    "v1a",
];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => any::<String>(),
        2 => "\\PC{0,40}",
        2 => prop::sample::select(HOSTILE).prop_map(str::to_owned),
        1 => (prop::sample::select(HOSTILE), any::<String>()).prop_map(|(a, b)| format!("{a}{b}")),
        1 => Just("x".repeat(5_000)),
    ]
}

/// One case: a pool of strings the operations draw their values from, and how to shape them.
#[derive(Debug, Clone)]
struct Case {
    pool: Vec<String>,
    shapes: Vec<u8>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(text(), 16),
        prop::collection::vec(0u8..8, 16),
    )
        .prop_map(|(pool, shapes)| Case { pool, shapes })
}

impl Case {
    fn text(&self, i: usize) -> &str {
        &self.pool[i % self.pool.len()]
    }

    /// A JSON value made of strings: mostly a string, sometimes a list or a table of them.
    fn json(&self, i: usize) -> Value {
        let s = self.text(i).to_owned();
        match self.shapes[i % self.shapes.len()] {
            0 => json!([s, self.text(i + 1)]),
            1 => json!({ s: self.text(i + 1) }),
            _ => Value::String(s),
        }
    }
}

/// An operation of the API as its document describes it.
#[derive(Debug)]
struct Operation {
    method: Method,
    path: String,
    query: Vec<String>,
    headers: Vec<String>,
    fields: Vec<String>,
    has_body: bool,
    admin: bool,
}

/// Every operation in `/openapi.json`, with its parameters and body fields.
fn operations(doc: &Value) -> Vec<Operation> {
    let resolve = |schema: &Value| -> Vec<String> {
        let mut refs = vec![schema.clone()];
        if let Some(one_of) = schema["oneOf"].as_array() {
            refs.extend(one_of.iter().cloned());
        }
        let mut fields = Vec::new();
        for s in refs {
            let s = match s["$ref"].as_str() {
                Some(r) => doc["components"]["schemas"][r.rsplit('/').next().unwrap()].clone(),
                None => s,
            };
            if let Some(props) = s["properties"].as_object() {
                fields.extend(props.keys().cloned());
            }
        }
        fields
    };
    let mut out = Vec::new();
    for (path, ops) in doc["paths"].as_object().expect("paths") {
        for (method, op) in ops.as_object().unwrap() {
            let params = op["parameters"].as_array().cloned().unwrap_or_default();
            let named = |place: &str| {
                params
                    .iter()
                    .filter(|p| p["in"] == place)
                    .map(|p| p["name"].as_str().unwrap().to_owned())
                    .collect::<Vec<_>>()
            };
            let body = &op["requestBody"]["content"]["application/json"]["schema"];
            let admin = op["security"]
                .as_array()
                .is_some_and(|s| s.iter().all(|s| s.get("admin").is_some()));
            out.push(Operation {
                method: method.to_uppercase().parse().unwrap(),
                path: path.clone(),
                query: named("query"),
                headers: named("header"),
                fields: if body.is_null() {
                    vec![]
                } else {
                    resolve(body)
                },
                has_body: !body.is_null(),
                admin,
            });
        }
    }
    out
}

/// The ids a tenant owns, for paths that should reach the handlers' checks of the rest.
struct World {
    tenant: String,
    token: String,
    endpoint: String,
    message: String,
    delivery: String,
}

fn encode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// The path with its `{id}` filled: a real id of the right kind three times in four, except
/// for operations that would destroy the world the others need.
fn fill(op: &Operation, w: &World, c: &Case, i: usize) -> String {
    let destroys = (op.method == Method::DELETE && op.path.contains("{id}"))
        || op.path.ends_with("/rotate-token");
    let real = if op.path.starts_with("/v1/tenants") {
        &w.tenant
    } else if op.path.starts_with("/v1/endpoints") {
        &w.endpoint
    } else if op.path.starts_with("/v1/messages") {
        &w.message
    } else {
        &w.delivery
    };
    let id = if !destroys && !c.shapes[i % c.shapes.len()].is_multiple_of(4) {
        real.clone()
    } else {
        encode(c.text(i))
    };
    op.path.replace("{id}", &id)
}

async fn api_case(s: &Sluice, w: &World, ops: &[Operation], c: &Case) -> Result<(), String> {
    for (n, op) in ops.iter().enumerate() {
        let i = n * 5;
        let mut path = fill(op, w, c, i);
        let query: Vec<String> = op
            .query
            .iter()
            .enumerate()
            .map(|(k, name)| format!("{name}={}", encode(c.text(i + k + 1))))
            .collect();
        if !query.is_empty() {
            path = format!("{path}?{}", query.join("&"));
        }
        let token = if op.admin { ADMIN } else { w.token.as_str() };
        let mut req = s
            .http
            .request(op.method.clone(), format!("{}{path}", s.base))
            .bearer_auth(token);
        for (k, name) in op.headers.iter().enumerate() {
            let value = c.text(i + k + 2);
            if reqwest::header::HeaderValue::from_str(value).is_ok() {
                req = req.header(name, value);
            }
        }
        let mut sent = Map::new();
        if op.has_body {
            for (k, field) in op.fields.iter().enumerate() {
                sent.insert(field.clone(), c.json(i + k + 3));
            }
            req = req.json(&sent);
        }
        let what = format!("{} {path} {}", op.method, Value::Object(sent));
        match req.send().await {
            Err(e) => return Err(format!("{what}: no answer ({e})")),
            Ok(r) if r.status().is_server_error() => {
                let status = r.status();
                return Err(format!(
                    "{what}: {status} {}",
                    r.text().await.unwrap_or_default()
                ));
            }
            Ok(_) => {}
        }
    }
    Ok(())
}

/// The portal's query parameters and form fields.
async fn portal_case(portal: &client::Client, w: &World, c: &Case) -> Result<(), String> {
    let q = |names: &[&str], at: usize| {
        names
            .iter()
            .enumerate()
            .map(|(k, n)| format!("{n}={}", encode(c.text(at + k))))
            .collect::<Vec<_>>()
            .join("&")
    };
    let pages = [
        format!("/console/portal/?{}", q(&["after"], 0)),
        format!(
            "/console/portal/messages?{}",
            q(
                &[
                    "endpoint",
                    "state",
                    "after",
                    "before",
                    "event_type",
                    "since",
                    "until"
                ],
                1
            )
        ),
        format!(
            "/console/portal/messages?{}",
            q(&["event_type", "since", "until"], 4)
        ),
        format!(
            "/console/portal/dead-letters?{}",
            q(&["endpoint", "after"], 2)
        ),
        format!("/console/portal/endpoints/{}", encode(c.text(3))),
        format!("/console/portal/endpoints/{}/edit", encode(c.text(5))),
        format!("/console/portal/messages/{}", encode(c.text(6))),
        format!("/console/enter?{}", q(&["token"], 7)),
    ];
    for path in &pages {
        let p = portal.get_checked(path).await?;
        if p.status >= 500 {
            return Err(format!("GET {path}: {} {}", p.status, p.body));
        }
    }
    let csrf = portal
        .get_checked("/console/portal/endpoints/new")
        .await?
        .field("csrf");
    let endpoint_fields = [
        "url",
        "description",
        "event_types",
        "lane_size",
        "latency_ceiling_ms",
        "connect_timeout_ms",
        "read_timeout_ms",
        "total_timeout_ms",
        "headers",
    ];
    let form = |at: usize| -> Vec<(&str, &str)> {
        let mut f = vec![("csrf", csrf.as_str())];
        f.extend(
            endpoint_fields
                .iter()
                .enumerate()
                .map(|(k, n)| (*n, c.text(at + k))),
        );
        f
    };
    let forms = [
        ("/console/portal/endpoints".to_owned(), form(8)),
        (
            format!("/console/portal/endpoints/{}/edit", w.endpoint),
            form(9),
        ),
        (
            format!("/console/portal/deliveries/{}/replay", w.delivery),
            vec![("csrf", csrf.as_str()), ("next", c.text(10))],
        ),
        (
            "/console/enter".to_owned(),
            vec![("csrf", csrf.as_str()), ("token", c.text(11))],
        ),
    ];
    for (path, fields) in &forms {
        let p = portal.post_checked(path, fields).await?;
        if p.status >= 500 {
            return Err(format!("POST {path} {fields:?}: {} {}", p.status, p.body));
        }
    }
    Ok(())
}

async fn world(s: &Sluice) -> World {
    let rx = receiver::start(Behavior::Fast, false).await.unwrap();
    let (tenant, token) = s.tenant("fuzz").await;
    let (endpoint, _) = s.endpoint(&token, &rx.url(), json!({})).await;
    std::mem::forget(rx);
    let message = s.send(&token, "order.created", json!({ "n": 1 })).await;
    let shown = s.message(&token, &message).await;
    let delivery = shown["deliveries"][0]["id"].as_str().unwrap().to_owned();
    World {
        tenant,
        token,
        endpoint,
        message,
        delivery,
    }
}

/// Blocking: the proptest runner calls `block_on` once per case.
fn arbitrary_strings_never_get_a_5xx_or_a_panic(
    rt: &tokio::runtime::Runtime,
    raw: sluice::config::RawSettings,
) {
    let s = rt.block_on(Sluice::start(raw));
    let w = rt.block_on(world(&s));
    let (_, doc) = rt.block_on(s.get(ADMIN, "/openapi.json"));
    let ops = operations(&doc);
    assert!(ops.len() >= 38, "{} operations in the document", ops.len());
    let portal = rt.block_on(client::portal_client(&s, &w.token));
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        max_shrink_iters: 32,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&case(), |c| {
        rt.block_on(async {
            api_case(&s, &w, &ops, &c).await?;
            portal_case(&portal, &w, &c).await
        })
        .map_err(TestCaseError::fail)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    rt.block_on(s.stop());
}

support::drivers!(blocking: arbitrary_strings_never_get_a_5xx_or_a_panic);
