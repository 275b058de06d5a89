//! The endpoint form's HTTPS and authentication section: a CA bundle, a client certificate with
//! its key and OAuth2 credentials set in the portal go through the API's checks; the key and the
//! client secret are never shown back, and a blank key or secret keeps what is stored.

use serde_json::json;
use sluice_testkit::tls::TestCa;

use crate::client::portal_client;
use crate::support::{Sluice, test_settings};

#[tokio::test]
async fn https_settings_are_set_in_the_portal_and_secrets_never_shown() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let c = portal_client(&s, &token).await;
    let ca = TestCa::new("tenant CA");
    let identity = ca.client("sluice");
    let other = ca.client("other");
    let form = c.get("/console/portal/endpoints/new").await;
    assert!(
        form.body.contains("HTTPS and authentication"),
        "{}",
        form.body
    );

    // A key that is not the certificate's is refused next to the key field.
    let wrong = c
        .submit(
            "/console/portal/endpoints",
            &form,
            &[
                ("url", "https://127.0.0.1:9/hook"),
                ("tls_client_certificate", &identity.certificate),
                ("tls_client_key", &other.key),
            ],
        )
        .await;
    assert_eq!(wrong.status, 422, "{}", wrong.body);
    assert!(
        wrong.body.contains("does not belong to the certificate"),
        "{}",
        wrong.body
    );
    assert!(
        !wrong.body.contains("PRIVATE KEY"),
        "a key is never written back"
    );

    let added = c
        .submit(
            "/console/portal/endpoints",
            &form,
            &[
                ("url", "https://127.0.0.1:9/hook"),
                ("tls_ca_bundle", &ca.certificate),
                ("tls_client_certificate", &identity.certificate),
                ("tls_client_key", &identity.key),
                ("oauth2_token_url", "http://127.0.0.1:9/token"),
                ("oauth2_client_id", "sluice"),
                ("oauth2_client_secret", "portal-secret-value"),
                ("oauth2_scope", "webhooks"),
            ],
        )
        .await;
    assert_eq!(added.status, 200, "{}", added.body);
    let (_, list) = s.get(&token, "/v1/endpoints").await;
    let id = list["data"][0]["id"].as_str().unwrap().to_owned();
    let stored = s.running.store.endpoint(None, &id).await.unwrap();
    // Kept re-encoded: the same PEM but for the form's trimming.
    assert_eq!(
        stored.tls.ca_bundle.as_deref().map(str::trim),
        Some(ca.certificate.trim())
    );
    assert_eq!(
        stored.tls.client.as_ref().unwrap().key.trim(),
        identity.key.trim()
    );
    assert_eq!(
        stored.oauth2.as_ref().unwrap().client_secret,
        "portal-secret-value"
    );

    // The edit page shows the certificate, never the key or the secret; saved as it is, both
    // are kept.
    let edit = c.get(&format!("/console/portal/endpoints/{id}/edit")).await;
    assert!(edit.body.contains("BEGIN CERTIFICATE"), "{}", edit.body);
    assert!(!edit.body.contains("PRIVATE KEY"), "{}", edit.body);
    assert!(!edit.body.contains("portal-secret-value"), "{}", edit.body);
    let saved = c
        .submit(
            &format!("/console/portal/endpoints/{id}/edit"),
            &edit,
            &[
                ("url", "https://127.0.0.1:9/hook"),
                ("tls_ca_bundle", &ca.certificate),
                ("tls_client_certificate", &identity.certificate),
                ("tls_client_key", ""),
                ("oauth2_token_url", "http://127.0.0.1:9/token"),
                ("oauth2_client_id", "sluice"),
                ("oauth2_client_secret", ""),
                ("oauth2_scope", "webhooks"),
            ],
        )
        .await;
    assert!(saved.status == 303 || saved.status == 200, "{}", saved.body);
    let kept = s.running.store.endpoint(None, &id).await.unwrap();
    assert_eq!(kept.tls, stored.tls);
    assert_eq!(kept.oauth2, stored.oauth2);
    // Rotated from the endpoint's page: a key that is not the certificate's is refused next to
    // its field; then the new one is current and the old one kept for the overlap.
    let next = ca.client("next");
    let page = c.get(&format!("/console/portal/endpoints/{id}")).await;
    assert!(
        page.body.contains("Rotate client certificate"),
        "{}",
        page.body
    );
    let path = format!("/console/portal/endpoints/{id}/client-certificate");
    let form = c.get(&path).await;
    let refused = c
        .submit(
            &path,
            &form,
            &[
                ("tls_client_certificate", &next.certificate),
                ("tls_client_key", &other.key),
            ],
        )
        .await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(refused.body.contains("field-error"), "{}", refused.body);
    let rotated = c
        .submit(
            &path,
            &form,
            &[
                ("tls_client_certificate", &next.certificate),
                ("tls_client_key", &next.key),
            ],
        )
        .await;
    assert!(
        rotated.status == 303 || rotated.status == 200,
        "{}",
        rotated.body
    );
    let after = s.running.store.endpoint(None, &id).await.unwrap();
    assert_eq!(
        after.tls.client.unwrap().certificate.trim(),
        next.certificate.trim()
    );
    assert_eq!(after.tls.previous_client, stored.tls.client);
    assert!(after.tls.previous_client_until_ms.is_some());
    let (_, shown) = s.get(&token, &format!("/v1/endpoints/{id}")).await;
    assert_eq!(
        shown["oauth2"],
        json!({
            "token_url": "http://127.0.0.1:9/token", "client_id": "sluice", "scope": "webhooks",
            "audience": null, "client_auth": "basic"
        })
    );
    s.stop().await;
}

#[tokio::test]
async fn the_endpoint_page_names_a_certificate_no_one_trusts() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let ca = TestCa::new("unknown CA");
    let server = ca.server(&["127.0.0.1"], sluice_testkit::tls::Validity::Current);
    let options = sluice_testkit::receiver::Options {
        tls: Some(sluice_testkit::tls::server_config(&server, &[])),
        ..Default::default()
    };
    let rx =
        sluice_testkit::receiver::start_with(sluice_testkit::receiver::Behavior::Fast, options)
            .await
            .unwrap();
    let (id, _) = s.endpoint(&token, &rx.url(), json!({})).await;
    s.send(&token, "order.created", json!({})).await;
    let c = portal_client(&s, &token).await;
    let page = format!("/console/portal/endpoints/{id}");
    let named = crate::support::eventually(std::time::Duration::from_secs(20), || async {
        c.get(&page)
            .await
            .body
            .contains("presented a TLS certificate no trusted CA signed")
    })
    .await;
    assert!(named, "{}", c.get(&page).await.body);
    s.stop().await;
}

#[tokio::test]
async fn saving_the_form_keeps_how_sluice_authenticates_to_the_token_url() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let c = portal_client(&s, &token).await;
    let oauth2 = json!({
        "token_url": "http://127.0.0.1:9/token", "client_id": "sluice", "client_secret": "s",
        "client_auth": "post"
    });
    let (id, _) = s
        .endpoint(
            &token,
            "http://127.0.0.1:9/hook",
            json!({ "oauth2": oauth2 }),
        )
        .await;
    let path = format!("/console/portal/endpoints/{id}/edit");
    let edit = c.get(&path).await;
    let auth = edit.selected("oauth2_client_auth");
    assert_eq!(auth, "post", "{}", edit.body);
    // Saved as the browser sends it, nothing about OAuth2 changed.
    let fields = [
        ("url", "http://127.0.0.1:9/hook"),
        ("oauth2_token_url", "http://127.0.0.1:9/token"),
        ("oauth2_client_id", "sluice"),
        ("oauth2_client_secret", ""),
        ("oauth2_client_auth", auth.as_str()),
    ];
    let saved = c.submit(&path, &edit, &fields).await;
    assert!(saved.status == 303 || saved.status == 200, "{}", saved.body);
    let (_, shown) = s.get(&token, &format!("/v1/endpoints/{id}")).await;
    assert_eq!(shown["oauth2"]["client_auth"], "post", "{shown}");
    // And it can be changed back from the form.
    let edit = c.get(&path).await;
    let mut fields = fields;
    fields[4] = ("oauth2_client_auth", "basic");
    let saved = c.submit(&path, &edit, &fields).await;
    assert!(saved.status == 303 || saved.status == 200, "{}", saved.body);
    let (_, shown) = s.get(&token, &format!("/v1/endpoints/{id}")).await;
    assert_eq!(shown["oauth2"]["client_auth"], "basic", "{shown}");
    s.stop().await;
}
