//! Hostile input to the API (issue 24): a query or body instant that splits a character, a
//! wrongly typed enum, header values outside visible ASCII, and a portal link asked for under
//! another Host. Each is a clear problem naming the field, never a dropped connection.

use reqwest::Method;
use serde_json::json;

use crate::assert_problem;
use crate::support::Sluice;

/// `2026-01-01T00:00:€Z`: the euro sign (three bytes) straddles the end of the seconds field.
const SPLIT_SECONDS: &str = "2026-01-01T00:00:%E2%82%ACZ";

#[tokio::test]
async fn an_instant_that_splits_a_character_is_a_400_naming_the_field() {
    let s = Sluice::start_with(|_| {}).await;
    let (_, token) = s.tenant("acme").await;
    for field in ["since", "until"] {
        let path = format!("/v1/messages?{field}={SPLIT_SECONDS}");
        let r = s.call(Method::GET, &path, Some(&token), None).await;
        assert_problem(&r, 400, Some(field));
    }
    let ep = s
        .create_endpoint(&token, "http://127.0.0.1:9/hook", json!({}))
        .await;
    let ep = ep["id"].as_str().unwrap();
    for (body, field) in [
        (json!({ "since": "2026-01-01T00:00:\u{20ac}Z" }), "since"),
        (
            json!({ "since": "2026-01-01T00:00:00Z", "until": "2026-01-01T00:00:0\u{20ac}Z" }),
            "until",
        ),
    ] {
        let path = format!("/v1/endpoints/{ep}/recover");
        let r = s.call(Method::POST, &path, Some(&token), Some(body)).await;
        assert!(r.status == 400 || r.status == 422, "{}", r.text);
        assert_eq!(r.body["field"], field, "{}", r.text);
    }
    // The server is still answering.
    let r = s
        .call(Method::GET, "/v1/messages", Some(&token), None)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
}

#[tokio::test]
async fn a_wrongly_typed_enum_is_a_422_naming_it_not_malformed_json() {
    let s = Sluice::start_with(|_| {}).await;
    let (_, token) = s.tenant("acme").await;
    let ep = s
        .create_endpoint(&token, "http://127.0.0.1:9/hook", json!({}))
        .await;
    let ep = ep["id"].as_str().unwrap();
    let path = format!("/v1/endpoints/{ep}/rotate-secret");
    let r = s
        .call(
            Method::POST,
            &path,
            Some(&token),
            Some(json!({ "signature_scheme": 1 })),
        )
        .await;
    assert_problem(&r, 422, Some("signature_scheme"));
    let r = s
        .call(
            Method::POST,
            "/v1/endpoints",
            Some(&token),
            Some(json!({ "url": "http://127.0.0.1:9/x", "signature_scheme": [] })),
        )
        .await;
    assert_problem(&r, 422, Some("signature_scheme"));
    // Malformed JSON is still a 400 on the body.
    let r = s
        .raw(
            Method::POST,
            &path,
            Some(&token),
            Some(b"{\"signature_scheme\":".to_vec()),
            "application/json",
            &[],
        )
        .await;
    assert_problem(&r, 400, Some("body"));
}

#[tokio::test]
async fn header_values_must_be_visible_ascii() {
    let s = Sluice::start_with(|_| {}).await;
    let (_, token) = s.tenant("acme").await;
    for value in ["caf\u{e9}", "\u{202e}evil", "ok\u{7f}"] {
        let r = s
            .call(
                Method::POST,
                "/v1/endpoints",
                Some(&token),
                Some(json!({ "url": "http://127.0.0.1:9/x", "headers": { "X-Name": value } })),
            )
            .await;
        assert_problem(&r, 422, Some("headers.X-Name"));
    }
    let r = s
        .call(
            Method::POST,
            "/v1/endpoints",
            Some(&token),
            Some(json!({ "url": "http://127.0.0.1:9/x", "headers": { "X-Name": "a b\tc~" } })),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
}

#[tokio::test]
async fn portal_link_urls_never_follow_a_foreign_host() {
    let s = Sluice::start_with(|_| {}).await;
    let (_, token) = s.tenant("acme").await;
    for headers in [
        &[("host", "evil.example")][..],
        &[
            ("host", "evil.example:8080"),
            ("x-forwarded-proto", "https"),
        ],
        &[("x-forwarded-proto", "https")],
    ] {
        let r = s
            .raw(
                Method::POST,
                "/v1/portal-links",
                Some(&token),
                Some(b"{}".to_vec()),
                "application/json",
                headers,
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        let url = r.body["url"].as_str().unwrap();
        assert!(
            !url.contains("evil.example") && !url.starts_with("https:"),
            "{headers:?}: {url}"
        );
        assert_eq!(
            r.body["path"].as_str().map(|p| url.ends_with(p)),
            Some(true)
        );
    }
    // On loopback (the walk-through) the link is absolute on this address.
    let r = s
        .call(
            Method::POST,
            "/v1/portal-links",
            Some(&token),
            Some(json!({})),
        )
        .await;
    let url = r.body["url"].as_str().unwrap();
    assert!(
        url.starts_with(&format!("{}/console/enter?token=pl_", s.base)),
        "{url}"
    );
    // With the public URL configured, links are built on it whatever the Host says.
    let public = Sluice::start_with(|raw| {
        raw.console.public_url = Some("https://hooks.example.com".into());
    })
    .await;
    let (_, token) = public.tenant("acme").await;
    let r = public
        .raw(
            Method::POST,
            "/v1/portal-links",
            Some(&token),
            Some(b"{}".to_vec()),
            "application/json",
            &[("host", "evil.example")],
        )
        .await;
    let url = r.body["url"].as_str().unwrap();
    assert!(
        url.starts_with("https://hooks.example.com/console/enter?token=pl_"),
        "{url}"
    );
}

#[tokio::test]
async fn a_body_that_is_not_an_object_is_refused_and_creates_nothing() {
    let s = Sluice::start_with(|_| {}).await;
    let (_, token) = s.tenant("acme").await;
    let admin = crate::support::ADMIN;
    // serde would read an array as a struct's fields in order: `["x",7,0.5]` was a tenant.
    for body in [&b"[\"x\",7,0.5]"[..], b"null", b"\"x\"", b"42"] {
        let r = s
            .raw(
                Method::POST,
                "/v1/tenants",
                Some(admin),
                Some(body.to_vec()),
                "application/json",
                &[],
            )
            .await;
        assert_problem(&r, 422, Some("body"));
        let r = s
            .raw(
                Method::POST,
                "/v1/endpoints",
                Some(&token),
                Some(body.to_vec()),
                "application/json",
                &[],
            )
            .await;
        assert_problem(&r, 422, Some("body"));
    }
    let r = s.call(Method::GET, "/v1/tenants", Some(admin), None).await;
    let names: Vec<_> = r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(names, ["acme"], "{}", r.text);
    let r = s
        .call(Method::GET, "/v1/endpoints", Some(&token), None)
        .await;
    assert_eq!(r.body["data"], json!([]), "{}", r.text);
}

#[tokio::test]
async fn an_authorization_header_beside_oauth2_is_refused_whichever_comes_first() {
    let s = Sluice::start_with(|_| {}).await;
    let (_, token) = s.tenant("acme").await;
    let oauth2 = json!({
        "token_url": "http://127.0.0.1:9/token", "client_id": "sluice", "client_secret": "s"
    });
    let header = json!({ "Authorization": "Bearer mine" });
    let r = s
        .call(
            Method::POST,
            "/v1/endpoints",
            Some(&token),
            Some(json!({ "url": "http://127.0.0.1:9/x", "headers": header, "oauth2": oauth2 })),
        )
        .await;
    assert_problem(&r, 422, Some("headers.authorization"));
    // Each alone is fine; adding the other on an update is refused, and nothing changes.
    for (first, then) in [
        (json!({ "headers": header }), json!({ "oauth2": oauth2 })),
        (json!({ "oauth2": oauth2 }), json!({ "headers": header })),
    ] {
        let mut body = first.clone();
        body["url"] = json!("http://127.0.0.1:9/x");
        let created = s
            .call(Method::POST, "/v1/endpoints", Some(&token), Some(body))
            .await;
        assert_eq!(created.status, 201, "{}", created.text);
        let id = created.body["id"].as_str().unwrap();
        let path = format!("/v1/endpoints/{id}");
        let r = s.call(Method::PATCH, &path, Some(&token), Some(then)).await;
        assert_problem(&r, 422, Some("headers.authorization"));
        let after = s.call(Method::GET, &path, Some(&token), None).await;
        assert_eq!(
            after.body["oauth2"].is_null(),
            first.get("oauth2").is_none()
        );
        assert_eq!(
            after.body["headers"].as_object().map_or(0, |h| h.len()),
            usize::from(first.get("headers").is_some()),
            "{}",
            after.text
        );
    }
}
