//! What keeps the console safe: one-time, expiring portal links; cookie flags; CSRF and
//! cross-site form refusal; CSP and framing headers; tenant isolation; no token in any page;
//! revocation by sign-out and by token rotation; who may create a link.

use std::time::Duration;

use serde_json::json;
use sluice_testkit::receiver::{self, Behavior};

use crate::client::{Client, SESSION, admin_client, portal_client, portal_link};
use crate::support::{ADMIN, Sluice, test_settings};

#[tokio::test]
async fn a_portal_link_works_once_and_expires() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let (status, link) = portal_link(&s, &token, json!({})).await;
    assert_eq!(status, 201, "{link}");
    let url = link["url"].as_str().unwrap();
    assert!(
        url.starts_with(&format!("{}/console/enter?token=pl_", s.base)),
        "{url}"
    );

    // Opening shows a button; nothing is used up by a GET (link previews, prefetch).
    let first = Client::new(&s.base);
    let page = first.get(url).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("acme"));
    let page = first.get(url).await;
    assert_eq!(page.status, 200, "a GET does not consume the link");
    let done = first
        .submit("/console/enter", &page, &[("token", &page.field("token"))])
        .await;
    assert_eq!((done.status, done.location()), (303, "/console/portal/"));
    assert!(
        !done.location().contains("pl_"),
        "the token is gone from the URL after the exchange"
    );

    // A second browser with the same link: it no longer works, on GET or POST.
    let second = Client::new(&s.base);
    assert_eq!(second.get(url).await.status, 410);
    let login = second.get("/console/login").await;
    let again = second
        .submit("/console/enter", &login, &[("token", &page.field("token"))])
        .await;
    assert_eq!(again.status, 410, "{}", again.body);
    assert!(second.cookie(SESSION).is_none());

    // A short-lived link stops working when it expires, unused.
    let (status, short) = portal_link(&s, &token, json!({ "expires_in_s": 1 })).await;
    assert_eq!(status, 201, "{short}");
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let late = Client::new(&s.base);
    let page = late.get(short["url"].as_str().unwrap()).await;
    assert_eq!(page.status, 410, "{}", page.body);
}

#[tokio::test]
async fn only_the_tenant_or_the_operator_makes_links() {
    let s = Sluice::start(test_settings()).await;
    let (a, token_a) = s.tenant("a").await;
    let (b, _) = s.tenant("b").await;
    assert_eq!(portal_link(&s, &token_a, json!({})).await.0, 201);
    assert_eq!(
        portal_link(&s, &token_a, json!({ "tenant_id": a })).await.0,
        201
    );
    let (status, body) = portal_link(&s, &token_a, json!({ "tenant_id": b })).await;
    assert_eq!((status, body["field"].as_str()), (404, Some("tenant_id")));
    let (status, body) = portal_link(&s, ADMIN, json!({})).await;
    assert_eq!((status, body["field"].as_str()), (422, Some("tenant_id")));
    let (status, body) = portal_link(&s, ADMIN, json!({ "tenant_id": b })).await;
    assert_eq!(
        (status, body["tenant_id"].as_str()),
        (201, Some(b.as_str()))
    );
    assert_eq!(
        portal_link(&s, ADMIN, json!({ "tenant_id": "ten_nobody" }))
            .await
            .0,
        404
    );
    assert_eq!(portal_link(&s, "sk_wrong", json!({})).await.0, 401);
    let (status, body) = portal_link(&s, &token_a, json!({ "expires_in_s": 999_999 })).await;
    assert_eq!(
        (status, body["field"].as_str()),
        (422, Some("expires_in_s"))
    );
    // Documented like every other route.
    let (_, doc) = s.get(ADMIN, "/openapi.json").await;
    assert!(
        doc["paths"]["/v1/portal-links"]["post"].is_object(),
        "{doc}"
    );
}

#[tokio::test]
async fn session_cookies_are_http_only_strict_and_secure() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let (_, link) = portal_link(&s, &token, json!({})).await;
    let c = Client::new(&s.base);
    let page = c.get(link["url"].as_str().unwrap()).await;
    let pre = page.set_cookies();
    assert_eq!(pre.len(), 1, "{pre:?}");
    let done = c
        .submit("/console/enter", &page, &[("token", &page.field("token"))])
        .await;
    let session = done
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with(&format!("{SESSION}=")) && !c.contains("Max-Age=0"))
        .expect("a session cookie");
    for flag in [
        "HttpOnly",
        "Secure",
        "SameSite=Strict",
        "Path=/",
        "Max-Age=28800",
    ] {
        assert!(session.contains(flag), "{flag} missing: {session}");
    }
    assert!(!session.to_lowercase().contains("domain="), "{session}");

    // Plain HTTP deployments can turn Secure off; the cookie then keeps to /console.
    let mut raw = test_settings();
    raw.console.secure_cookies = Some(false);
    let plain = Sluice::start(raw).await;
    let (_, token) = plain.tenant("acme").await;
    let (_, link) = portal_link(&plain, &token, json!({})).await;
    let c = Client::new(&plain.base);
    let page = c.get(link["url"].as_str().unwrap()).await;
    let done = c
        .submit("/console/enter", &page, &[("token", &page.field("token"))])
        .await;
    let cookie = done.set_cookies().join("\n");
    assert!(cookie.contains("sluice_console=") && !cookie.contains("__Host-"));
    assert!(cookie.contains("Path=/console") && !cookie.contains("Secure"));
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
    assert_eq!(c.get("/console/portal/").await.status, 200);
}

#[tokio::test]
async fn forms_without_the_csrf_token_or_from_another_site_are_refused() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let c = portal_client(&s, &token).await;
    let form = c.get("/console/portal/endpoints/new").await;
    let csrf = form.field("csrf");
    let fields = [("url", "http://127.0.0.1:9/hook")];
    let without = c.post("/console/portal/endpoints", &fields).await;
    assert_eq!(without.status, 403, "{}", without.body);
    let wrong = c
        .post(
            "/console/portal/endpoints",
            &[("csrf", "forged"), ("url", "http://127.0.0.1:9/hook")],
        )
        .await;
    assert_eq!(wrong.status, 403);
    let with = [("csrf", csrf.as_str()), ("url", "http://127.0.0.1:9/hook")];
    let cross = c
        .post_with(
            "/console/portal/endpoints",
            &with,
            &[("sec-fetch-site", "cross-site")],
        )
        .await;
    assert_eq!(cross.status, 403);
    let foreign = c
        .post_with(
            "/console/portal/endpoints",
            &with,
            &[("origin", "https://evil.example")],
        )
        .await;
    assert_eq!(foreign.status, 403);
    // Another browser's token is no good either (it is bound to this session's cookie).
    let other = portal_client(&s, &token).await;
    let theirs = other
        .get("/console/portal/endpoints/new")
        .await
        .field("csrf");
    let swapped = c
        .post(
            "/console/portal/endpoints",
            &[
                ("csrf", theirs.as_str()),
                ("url", "http://127.0.0.1:9/hook"),
            ],
        )
        .await;
    assert_eq!(swapped.status, 403);
    let (_, list) = s.get(&token, "/v1/endpoints").await;
    assert_eq!(
        list["data"].as_array().unwrap().len(),
        0,
        "nothing was created"
    );
    // The admin sign-in form is protected the same way.
    let fresh = Client::new(&s.base);
    let login = fresh.post("/console/login", &[("token", ADMIN)]).await;
    assert_eq!(login.status, 403);
    // With the token it works.
    let ok = c.post("/console/portal/endpoints", &with).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
}

#[tokio::test]
async fn every_console_response_carries_csp_and_frame_headers() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let c = portal_client(&s, &token).await;
    for path in [
        "/console/",
        "/console/login",
        "/console/portal/",
        "/console/portal/endpoints/ep_nope",
        "/console/assets/console.css",
        "/console/no/such/page",
    ] {
        let p = c.get(path).await;
        let csp = p.header("content-security-policy").unwrap_or_default();
        assert!(
            csp.contains("default-src 'none'")
                && csp.contains("script-src 'self'")
                && csp.contains("frame-ancestors 'none'")
                && !csp.contains("unsafe-inline"),
            "{path}: {csp}"
        );
        assert_eq!(p.header("x-frame-options"), Some("DENY"), "{path}");
        assert_eq!(p.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(p.header("referrer-policy"), Some("no-referrer"));
    }
    assert_eq!(
        c.get("/console/portal/").await.header("cache-control"),
        Some("no-store")
    );

    // A platform may embed the portal: its origin in frame-ancestors, no X-Frame-Options.
    let mut raw = test_settings();
    raw.console.frame_ancestors = Some("https://app.example.com".into());
    let embed = Sluice::start(raw).await;
    let p = Client::new(&embed.base).get("/console/login").await;
    let csp = p.header("content-security-policy").unwrap();
    assert!(
        csp.ends_with("frame-ancestors https://app.example.com"),
        "{csp}"
    );
    assert_eq!(p.header("x-frame-options"), None);
}

#[tokio::test]
async fn another_tenants_ids_are_404_everywhere() {
    let s = Sluice::start(test_settings()).await;
    let receiver = receiver::start(Behavior::Status(500), false).await.unwrap();
    let (_, token_a) = s.tenant("a").await;
    let (_, token_b) = s.tenant("b").await;
    let (ep, _) = s
        .endpoint(
            &token_a,
            &receiver.url(),
            json!({ "description": "A's secret endpoint" }),
        )
        .await;
    let msg = s.send(&token_a, "order.created", json!({ "n": 1 })).await;
    let delivery = s.message(&token_a, &msg).await["deliveries"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let b = portal_client(&s, &token_b).await;
    for path in [
        format!("/console/portal/endpoints/{ep}"),
        format!("/console/portal/endpoints/{ep}/edit"),
        format!("/console/portal/endpoints/{ep}/delete"),
        format!("/console/portal/messages/{msg}"),
        format!("/console/portal/messages?endpoint={ep}"),
        format!("/console/portal/dead-letters?endpoint={ep}"),
    ] {
        let p = b.get(&path).await;
        assert_eq!(p.status, 404, "{path}");
        assert!(!p.body.contains("secret endpoint"), "{path}");
    }
    let csrf = b.get("/console/portal/").await.field("csrf");
    for path in [
        format!("/console/portal/endpoints/{ep}/disable"),
        format!("/console/portal/endpoints/{ep}/rotate-secret"),
        format!("/console/portal/endpoints/{ep}/delete"),
        format!("/console/portal/endpoints/{ep}/replay"),
        format!("/console/portal/endpoints/{ep}/edit"),
        format!("/console/portal/deliveries/{delivery}/replay"),
    ] {
        let p = b
            .post(&path, &[("csrf", &csrf), ("url", "http://127.0.0.1:9/x")])
            .await;
        assert_eq!(p.status, 404, "{path}: {}", p.body);
    }
    let listed = b.get("/console/portal/").await;
    assert!(!listed.body.contains(&ep));
    let log = b.get("/console/portal/messages").await;
    assert!(!log.body.contains(&msg));
    // A's endpoint is untouched.
    let (_, e) = s.get(&token_a, &format!("/v1/endpoints/{ep}")).await;
    assert_eq!(e["enabled"], json!(true));
}

#[tokio::test]
async fn no_token_or_session_id_ever_appears_in_a_page() {
    let s = Sluice::start(test_settings()).await;
    let receiver = receiver::start(Behavior::Fast, false).await.unwrap();
    let (tenant, token) = s.tenant("acme").await;
    let (ep, secret) = s.endpoint(&token, &receiver.url(), json!({})).await;
    let msg = s.send(&token, "order.created", json!({ "n": 1 })).await;
    let (_, link) = portal_link(&s, &token, json!({})).await;
    let link_token = link["url"]
        .as_str()
        .unwrap()
        .split("token=")
        .nth(1)
        .unwrap()
        .to_owned();

    let c = portal_client(&s, &token).await;
    for path in [
        "/console/portal/".to_owned(),
        "/console/portal/endpoints/new".to_owned(),
        format!("/console/portal/endpoints/{ep}"),
        format!("/console/portal/endpoints/{ep}/edit"),
        "/console/portal/messages".to_owned(),
        format!("/console/portal/messages/{msg}"),
        "/console/portal/dead-letters".to_owned(),
    ] {
        assert_eq!(c.get(&path).await.status, 200, "{path}");
    }
    let admin = admin_client(&s).await;
    for path in [
        "/console/admin/",
        "/console/admin/tenants",
        "/console/admin/plan",
    ] {
        assert_eq!(admin.get(path).await.status, 200, "{path}");
    }
    let session = c.cookie(SESSION).unwrap();
    let session_id = session.split('.').nth(1).unwrap().to_owned();
    let admin_session = admin.cookie(SESSION).unwrap();
    let mut pages = c.seen.lock().unwrap().clone();
    pages.extend(admin.seen.lock().unwrap().iter().cloned());
    for body in &pages {
        for (what, needle) in [
            ("tenant token", token.as_str()),
            ("admin token", ADMIN),
            ("endpoint secret", secret.as_str()),
            ("unused portal link", link_token.as_str()),
            ("session id", session_id.as_str()),
            ("operator session", admin_session.as_str()),
        ] {
            assert!(!body.contains(needle), "{what} in a page: {body}");
        }
    }
    assert!(
        pages.iter().any(|p| p.contains(&tenant)),
        "the operator sees the tenant"
    );
}

#[tokio::test]
async fn sessions_end_on_sign_out_and_on_token_rotation() {
    let s = Sluice::start(test_settings()).await;
    let (tenant, token) = s.tenant("acme").await;
    let c = portal_client(&s, &token).await;
    let stolen = c.cookie(SESSION).unwrap();
    let page = c.get("/console/portal/").await;
    assert_eq!(page.status, 200);
    let out = c.submit("/console/logout", &page, &[]).await;
    assert_eq!(out.status, 200);
    assert!(c.cookie(SESSION).is_none(), "the cookie is cleared");
    // The old cookie replayed: the session row is gone, so it is worthless.
    let thief = Client::new(&s.base);
    thief.set_cookie(SESSION, &stolen);
    assert_eq!(thief.get("/console/portal/").await.status, 401);
    // An altered cookie fails its signature.
    let c = portal_client(&s, &token).await;
    let good = c.cookie(SESSION).unwrap();
    let mut parts: Vec<&str> = good.split('.').collect();
    let later = (parts[0].parse::<i64>().unwrap() + 1).to_string();
    parts[0] = &later;
    thief.set_cookie(SESSION, &parts.join("."));
    assert_eq!(thief.get("/console/portal/").await.status, 401);
    // Rotating the tenant's API token ends its portal sessions.
    assert_eq!(c.get("/console/portal/").await.status, 200);
    let (status, _) = s
        .post(
            ADMIN,
            &format!("/v1/tenants/{tenant}/rotate-token"),
            json!({}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(c.get("/console/portal/").await.status, 401);
    // The operator's session is not a portal session, and a portal session is no operator's.
    let admin = admin_client(&s).await;
    assert_eq!(admin.get("/console/portal/").await.status, 403);
    let (_, token) = s.tenant("other").await;
    let portal = portal_client(&s, &token).await;
    let p = portal.get("/console/admin/").await;
    assert_eq!((p.status, p.location()), (303, "/console/login"));
}

#[tokio::test]
async fn the_operator_signs_in_with_the_admin_token_once() {
    let s = Sluice::start(test_settings()).await;
    let c = Client::new(&s.base);
    let p = c.get("/console/admin/").await;
    assert_eq!((p.status, p.location()), (303, "/console/login"));
    let login = c.get("/console/login").await;
    let wrong = c
        .submit(
            "/console/login",
            &login,
            &[("token", "not-the-admin-token")],
        )
        .await;
    assert_eq!(wrong.status, 401);
    assert!(c.cookie(SESSION).is_none());
    let admin = admin_client(&s).await;
    let p = admin.get("/console/admin/").await;
    assert_eq!(p.status, 200);
    assert!(p.body.contains("Fleet"));
    assert_eq!(admin.get("/console/").await.location(), "/console/admin/");
}
