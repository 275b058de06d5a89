//! Hostile input to the console (issue 24): a portal link minted before a token rotation, a
//! CSRF token of the pre-login cookie on a signed-in form, an Origin of another scheme, the
//! message log's filters, a payload whose JSON a parser would change, and requests the
//! router itself refuses (bad bytes in a path, a repeated query field, an oversized form).

use reqwest::Method;
use serde_json::json;
use sluice::config::RawSettings;

use crate::client::{Client, SESSION, portal_client, portal_link};
use crate::support::{ADMIN, Sluice, test_settings};

#[tokio::test]
async fn a_link_minted_before_a_token_rotation_opens_nothing() {
    let s = Sluice::start(test_settings()).await;
    let (tenant, token) = s.tenant("acme").await;
    let (_, link) = portal_link(&s, &token, json!({})).await;
    let url = link["url"].as_str().unwrap().to_owned();
    let link_token = url.split("token=").nth(1).unwrap().to_owned();
    let path = format!("/v1/tenants/{tenant}/rotate-token");
    let (status, rotated) = s.post(ADMIN, &path, json!({})).await;
    assert_eq!(status, 200, "{rotated}");

    let c = Client::new(&s.base);
    assert_eq!(c.get(&url).await.status, 410, "the link's page");
    let login = c.get("/console/login").await;
    let done = c
        .submit("/console/enter", &login, &[("token", &link_token)])
        .await;
    assert_eq!(done.status, 410, "{}", done.body);
    assert!(c.cookie(SESSION).is_none(), "no session was opened");
    assert_eq!(c.get("/console/portal/").await.status, 401);
    // A link minted with the new token works.
    let new_token = rotated["token"].as_str().unwrap();
    portal_client(&s, new_token).await;
}

#[tokio::test]
async fn a_signed_in_form_takes_only_the_sessions_csrf_token() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let c = portal_client(&s, &token).await;
    // A token bound to a pre-login cookie (here the attacker's, planted beside the session).
    let attacker = Client::new(&s.base);
    let login = attacker.get("/console/login").await;
    let pre_token = login.field("csrf");
    let pre = "__Host-sluice_console_pre";
    c.set_cookie(pre, &attacker.cookie(pre).expect("a pre-login cookie"));
    let fields = [
        ("csrf", pre_token.as_str()),
        ("url", "http://127.0.0.1:9/a"),
    ];
    let refused = c.post("/console/portal/endpoints", &fields).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let (_, list) = s.get(&token, "/v1/endpoints").await;
    assert_eq!(
        list["data"].as_array().unwrap().len(),
        0,
        "nothing was created"
    );
}

#[tokio::test]
async fn a_form_from_another_scheme_is_refused() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let c = portal_client(&s, &token).await;
    let csrf = c.get("/console/portal/endpoints/new").await.field("csrf");
    let fields = [("csrf", csrf.as_str()), ("url", "http://127.0.0.1:9/a")];
    let host = s.base.trim_start_matches("http://");
    let other = format!("https://{host}");
    let refused = c
        .post_with("/console/portal/endpoints", &fields, &[("origin", &other)])
        .await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let same = c
        .post_with("/console/portal/endpoints", &fields, &[("origin", &s.base)])
        .await;
    assert_eq!(same.status, 200, "{}", same.body);
}

/// The message log's filters are checked like the API's.
async fn the_message_log_filters_are_checked_like_the_apis(raw: RawSettings) {
    let s = &Sluice::start(raw).await;
    let (_, token) = s.tenant("acme").await;
    s.send(&token, "order.created", json!({ "n": 1 })).await;
    let c = portal_client(s, &token).await;
    for query in [
        "event_type=o*",
        "event_type=%00",
        "event_type=order.%00",
        "event_type=a%20b",
        "since=2026-01-01T00:00:%E2%82%ACZ",
        "until=2026-01-01T00:00:0%E2%82%ACZ",
        "since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z",
    ] {
        let p = c.get(&format!("/console/portal/messages?{query}")).await;
        assert_eq!(p.status, 400, "{query}: {}", p.body);
        assert!(p.body.contains("<h1>"), "{query}: a page, {}", p.body);
    }
    for query in [
        "event_type=order.*",
        "event_type=order.created",
        "event_type=*",
    ] {
        let p = c.get(&format!("/console/portal/messages?{query}")).await;
        assert_eq!(p.status, 200, "{query}: {}", p.body);
    }
}

crate::support::drivers!(the_message_log_filters_are_checked_like_the_apis);

#[tokio::test]
async fn a_message_shows_its_payload_as_stored() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let payload = r#"{"b":12345678901234567890123,"a":1,"a":2,"s":"\u00e9\n"}"#;
    let body = format!(r#"{{"event_type":"order.created","payload":{payload}}}"#);
    let r = s
        .raw(
            Method::POST,
            "/v1/messages",
            Some(&token),
            Some(body.into_bytes()),
            "application/json",
            &[],
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    let id = r.body["id"].as_str().unwrap();
    let c = portal_client(&s, &token).await;
    let page = c.get(&format!("/console/portal/messages/{id}")).await;
    assert_eq!(page.status, 200);
    let shown = &page.body[page.body.find("id=\"payload\"").expect("payload")..];
    let shown = &shown[..shown.find("</pre>").unwrap()];
    assert!(shown.contains("12345678901234567890123"), "{shown}");
    let key = |k: &str| format!("&quot;{k}&quot;");
    assert_eq!(shown.matches(&key("a")).count(), 2, "{shown}");
    let (b, a) = (
        shown.find(&key("b")).unwrap(),
        shown.find(&key("a")).unwrap(),
    );
    assert!(b < a, "the keys keep their order: {shown}");
    assert!(shown.contains(r"\u00e9\n"), "escapes are kept: {shown}");
}

#[tokio::test]
async fn what_the_router_refuses_is_a_page_and_an_oversized_form_is_413() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let c = portal_client(&s, &token).await;
    for path in [
        "/console/portal/messages/%FF",
        "/console/portal/endpoints/%C3%28",
        "/console/portal/messages?state=ready&state=dead",
        "/console/portal/dead-letters?after=a&after=b",
    ] {
        let p = c.get(path).await;
        assert!(p.status >= 400 && p.status < 500, "{path}: {}", p.status);
        let kind = p.header("content-type").unwrap_or_default();
        assert!(kind.starts_with("text/html"), "{path}: {kind} {}", p.body);
    }
    let csrf = c.get("/console/portal/endpoints/new").await.field("csrf");
    let big = "x".repeat(70 * 1024);
    let p = c
        .post(
            "/console/portal/endpoints",
            &[("csrf", csrf.as_str()), ("description", &big)],
        )
        .await;
    assert_eq!(p.status, 413, "{}", p.body);
    assert!(
        p.header("content-type")
            .unwrap_or_default()
            .starts_with("text/html")
    );
}
