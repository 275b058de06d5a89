//! CA bundles and client certificates as a hostile tenant writes them (issue 44, N5 and N10):
//! lists show a fingerprint of each rather than its PEM, a tenant's certificates are capped,
//! nothing but the certificates (and the key) is kept or shown, and bundles that differ only in
//! their text share one HTTP client.

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sluice_testkit::receiver::Receiver;
use sluice_testkit::tls::{TestCa, Validity};

use super::{WAIT, attempts, https};
use crate::support::{Sluice, eventually, test_settings};

/// The documented cap on the certificate bytes one tenant's endpoints hold.
const TENANT_CAP: usize = 4 * 1024 * 1024;

/// The DER certificates of a PEM text.
fn ders(pem: &str) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .expect("PEM certificates")
}

/// SHA-256 over `certs` in order, lower-case hex.
fn sha256(certs: &[CertificateDer<'_>]) -> String {
    let mut h = Sha256::new();
    for cert in certs {
        h.update(cert.as_ref());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// A bundle of fresh CA certificates at least `bytes` long.
fn big_bundle(bytes: usize) -> String {
    let mut pem = String::new();
    while pem.len() < bytes {
        pem.push_str(&TestCa::new(&format!("CA {}", pem.len())).certificate);
    }
    pem
}

/// PATCH JSON with a bearer token; returns (status, body).
async fn patch(s: &Sluice, token: &str, path: &str, body: Value) -> (u16, Value) {
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

/// DELETE with a bearer token; returns the status.
async fn delete(s: &Sluice, token: &str, path: &str) -> u16 {
    let r = s
        .http
        .delete(format!("{}{path}", s.base))
        .bearer_auth(token)
        .send()
        .await
        .expect("request");
    r.status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_show_fingerprints_and_only_the_endpoint_itself_shows_the_pem() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let (root, intermediate) = (TestCa::new("root"), TestCa::new("intermediate"));
    let bundle = format!("{}{}", root.certificate, intermediate.certificate);
    let identity = root.client("sluice");
    let (id, _) = s
        .endpoint(
            &token,
            "https://127.0.0.1:9/hook",
            json!({
                "tls_ca_bundle": bundle,
                "tls_client_certificate": identity.certificate,
                "tls_client_key": identity.key,
            }),
        )
        .await;
    let bundle_sha = sha256(&ders(&bundle));
    let leaf_sha = sha256(&[identity.der()]);

    let (status, list) = s.get(&token, "/v1/endpoints").await;
    assert_eq!(status, 200, "{list}");
    assert!(
        !list.to_string().contains("BEGIN"),
        "no PEM in a list: {list}"
    );
    let item = &list["data"][0];
    assert_eq!(item["id"], id.as_str());
    assert!(item.get("tls_ca_bundle").is_none(), "{item}");
    assert!(item.get("tls_client_certificate").is_none(), "{item}");
    assert_eq!(item["tls_ca_bundle_sha256"], bundle_sha.as_str(), "{item}");
    assert_eq!(item["tls_ca_bundle_certificates"], 2, "{item}");
    assert_eq!(item["tls_client_certificate_sha256"], leaf_sha.as_str());

    // The endpoint itself shows both certificates, and the same summary.
    let (_, one) = s.get(&token, &format!("/v1/endpoints/{id}")).await;
    let shown = one["tls_ca_bundle"].as_str().expect("the PEM");
    assert_eq!(ders(shown), ders(&bundle));
    assert_eq!(one["tls_ca_bundle_sha256"], bundle_sha.as_str());
    assert_eq!(one["tls_ca_bundle_certificates"], 2);
    let certificate = one["tls_client_certificate"].as_str().expect("the PEM");
    assert_eq!(ders(certificate), [identity.der()]);
    assert_eq!(one["tls_client_certificate_sha256"], leaf_sha.as_str());

    // Without TLS settings the summary is null, in lists as in the endpoint.
    let (bare, _) = s.endpoint(&token, "https://127.0.0.1:9/b", json!({})).await;
    let (_, list) = s.get(&token, "/v1/endpoints").await;
    let item = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == bare.as_str())
        .expect("listed");
    assert!(item["tls_ca_bundle_sha256"].is_null(), "{item}");
    assert!(item["tls_ca_bundle_certificates"].is_null(), "{item}");
    assert!(item["tls_client_certificate_sha256"].is_null(), "{item}");
    let (_, one) = s.get(&token, &format!("/v1/endpoints/{bare}")).await;
    assert!(one["tls_ca_bundle"].is_null(), "{one}");
    assert!(one["tls_client_certificate"].is_null(), "{one}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_certificates_are_capped_and_the_write_past_the_cap_is_a_422() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let bundle = big_bundle(200 * 1024);
    let url = "https://127.0.0.1:9/hook";
    let (first, _) = s
        .endpoint(&token, url, json!({ "tls_ca_bundle": bundle }))
        .await;
    let (_, shown) = s.get(&token, &format!("/v1/endpoints/{first}")).await;
    let stored = shown["tls_ca_bundle"].as_str().unwrap().len();
    let fits = TENANT_CAP / stored;
    assert!((10..40).contains(&fits), "{stored} bytes a bundle");
    for _ in 1..fits {
        s.endpoint(&token, url, json!({ "tls_ca_bundle": bundle }))
            .await;
    }
    let (status, problem) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({ "url": url, "tls_ca_bundle": bundle }),
        )
        .await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["field"], "tls_ca_bundle", "{problem}");
    assert!(
        problem["detail"].as_str().unwrap().contains("4194304"),
        "the cap is named: {problem}"
    );

    // A PATCH that adds certificates is refused the same way; one that leaves them is not.
    let (bare, _) = s.endpoint(&token, url, json!({})).await;
    let path = format!("/v1/endpoints/{bare}");
    let (status, problem) = patch(&s, &token, &path, json!({ "tls_ca_bundle": bundle })).await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["field"], "tls_ca_bundle", "{problem}");
    let ca = TestCa::new("client CA");
    let identity = ca.client("sluice");
    let chain = format!("{}{bundle}", identity.certificate);
    let (status, problem) = patch(
        &s,
        &token,
        &path,
        json!({ "tls_client_certificate": chain, "tls_client_key": identity.key }),
    )
    .await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["field"], "tls_client_certificate", "{problem}");
    let first_path = format!("/v1/endpoints/{first}");
    let (status, body) = patch(&s, &token, &first_path, json!({ "description": "kept" })).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = patch(&s, &token, &first_path, json!({ "tls_ca_bundle": bundle })).await;
    assert_eq!(status, 200, "the same bundle again adds nothing: {body}");

    // Another tenant has its own room; a deleted endpoint gives its room back.
    let (_, other) = s.tenant("globex").await;
    s.endpoint(&other, url, json!({ "tls_ca_bundle": bundle }))
        .await;
    assert_eq!(delete(&s, &token, &first_path).await, 204);
    let (status, body) = patch(&s, &token, &path, json!({ "tls_ca_bundle": bundle })).await;
    assert_eq!(status, 200, "{body}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_bytes_around_pem_sections_are_refused_naming_the_field() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let ca = TestCa::new("CA");
    let identity = ca.client("sluice");
    let url = "https://127.0.0.1:9/hook";
    for junk in ["\u{0}", "\u{1b}[2J", "\u{7}", "\u{7f}", "\u{9b}"] {
        let cases = [
            (
                json!({ "tls_ca_bundle": format!("{junk}\n{}", ca.certificate) }),
                "tls_ca_bundle",
            ),
            (
                json!({ "tls_ca_bundle": format!("{}{junk}{}", ca.certificate, ca.certificate) }),
                "tls_ca_bundle",
            ),
            (
                json!({
                    "tls_client_certificate": format!("{}{junk}\n", identity.certificate),
                    "tls_client_key": identity.key,
                }),
                "tls_client_certificate",
            ),
            (
                json!({
                    "tls_client_certificate": identity.certificate,
                    "tls_client_key": format!("{junk}{}", identity.key),
                }),
                "tls_client_key",
            ),
        ];
        for (mut body, field) in cases {
            body["url"] = json!(url);
            let (status, problem) = s.post(&token, "/v1/endpoints", body).await;
            assert_eq!(status, 422, "{junk:?} in {field}: {problem}");
            assert_eq!(problem["field"], field, "{problem}");
            assert!(!problem.to_string().contains(junk), "not echoed: {problem}");
        }
    }
    // A key, or any section but a certificate, in a CA bundle or a certificate chain.
    let key_too = format!("{}{}", ca.certificate, identity.key);
    let odd = "-----BEGIN X509 CRL-----\nMAA=\n-----END X509 CRL-----\n";
    for (body, field) in [
        (json!({ "tls_ca_bundle": key_too }), "tls_ca_bundle"),
        (
            json!({ "tls_ca_bundle": format!("{}{odd}", ca.certificate) }),
            "tls_ca_bundle",
        ),
        (
            json!({ "tls_client_certificate": key_too, "tls_client_key": identity.key }),
            "tls_client_certificate",
        ),
    ] {
        let mut body = body;
        body["url"] = json!(url);
        let (status, problem) = s.post(&token, "/v1/endpoints", body).await;
        assert_eq!(status, 422, "{problem}");
        assert_eq!(problem["field"], field, "{problem}");
        assert!(!problem.to_string().contains("MAA="), "{problem}");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_around_pem_sections_is_neither_kept_nor_shown() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let ca = TestCa::new("CA");
    let identity = ca.client("sluice");
    // Key bytes pasted without their armour, comments as `openssl` and CA stores write them.
    let unarmoured: String = identity
        .key
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect::<Vec<_>>()
        .join("\n");
    let bundle = format!(
        "# Acme private CA\nsubject=CN = CA\n{}{unarmoured}\n\n{}trailing words\n",
        ca.certificate, ca.certificate
    );
    let chain = format!(
        "Bag Attributes\n    localKeyID: 01 02\n{}\nnot a section\n",
        identity.certificate.replace('\n', "\r\n")
    );
    let key = format!(
        "Key Attributes: <No Attributes>\n{}tail words\n",
        identity.key
    );
    // Each with a space or a colon: none can occur in base64 by chance.
    let junk = [
        "Acme private CA",
        "subject=CN = CA",
        "trailing words",
        "Bag Attributes",
        "localKeyID:",
        "not a section",
        "Key Attributes",
        "tail words",
    ];
    let first_line = unarmoured.lines().next().unwrap();
    let (status, created) = s
        .post(
            &token,
            "/v1/endpoints",
            json!({
                "url": "https://127.0.0.1:9/hook",
                "tls_ca_bundle": bundle,
                "tls_client_certificate": chain,
                "tls_client_key": key,
            }),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap();
    let (_, shown) = s.get(&token, &format!("/v1/endpoints/{id}")).await;
    for answer in [&created, &shown] {
        let text = answer.to_string();
        for word in junk.iter().chain([&first_line]) {
            assert!(!text.contains(word), "{word:?} shown: {text}");
        }
    }
    let shown_bundle = shown["tls_ca_bundle"].as_str().unwrap();
    assert_eq!(ders(shown_bundle), ders(&format!("{0}{0}", ca.certificate)));
    assert!(shown_bundle.starts_with("-----BEGIN CERTIFICATE-----\n"));
    assert!(shown_bundle.ends_with("-----END CERTIFICATE-----\n"));

    // Stored: the certificates and the key, re-encoded, and nothing else.
    let stored = s.running.store.endpoint(None, id).await.unwrap();
    let text = format!(
        "{}{}{}",
        stored.tls.ca_bundle.as_deref().unwrap(),
        stored.tls.client.as_ref().unwrap().certificate,
        stored.tls.client.as_ref().unwrap().key,
    );
    for word in junk {
        assert!(!text.contains(word), "{word:?} stored");
    }
    assert!(!text.contains('\r'), "line breaks are re-encoded too");
    let bundle = stored.tls.ca_bundle.as_deref().unwrap();
    assert!(!bundle.contains(first_line), "key bytes kept: {bundle}");
    assert_eq!(
        stored.tls.client.as_ref().unwrap().key.trim(),
        identity.key.trim()
    );

    // The same holds for a PATCH and a rotation.
    let next = ca.client("next");
    let path = format!("/v1/endpoints/{id}");
    let (status, patched) = patch(
        &s,
        &token,
        &path,
        json!({ "tls_ca_bundle": format!("junk text\n{}", ca.certificate) }),
    )
    .await;
    assert_eq!(status, 200, "{patched}");
    assert!(!patched.to_string().contains("junk text"), "{patched}");
    let (status, rotated) = s
        .post(
            &token,
            &format!("{path}/rotate-client-certificate"),
            json!({
                "tls_client_certificate": format!("a comment\n{}", next.certificate),
                "tls_client_key": format!("a comment\n{}", next.key),
            }),
        )
        .await;
    assert_eq!(status, 200, "{rotated}");
    assert!(!rotated.to_string().contains("a comment"), "{rotated}");
    let stored = s.running.store.endpoint(None, id).await.unwrap();
    let tls = serde_json::to_string(&stored.tls).unwrap();
    assert!(
        !tls.contains("a comment") && !tls.contains("junk text"),
        "{tls}"
    );
    s.stop().await;
}

/// Two endpoints whose bundles hold the same certificate in different text: deliveries to
/// both go over one kept-alive connection, so they share one HTTP client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bundles_that_differ_only_in_their_text_share_one_client() {
    let s = Sluice::start(test_settings()).await;
    let ca = TestCa::new("tenant CA");
    let rx: Receiver = https(&ca, &["127.0.0.1"], Validity::Current, &[]).await;
    let (_, token) = s.tenant("acme").await;
    let plain = ca.certificate.clone();
    let dressed = format!(
        "# the tenant CA, again\r\n\r\n{}\r\n\r\n",
        ca.certificate.replace('\n', "\r\n")
    );
    let mut ids = Vec::new();
    for (bundle, kind) in [(plain, "one.sent"), (dressed, "two.sent")] {
        let (id, _) = s
            .endpoint(
                &token,
                &rx.url(),
                json!({ "tls_ca_bundle": bundle, "event_types": [kind] }),
            )
            .await;
        ids.push((id, kind));
    }
    // One after the other: the second finds the first's connection back in the pool.
    for (id, kind) in &ids {
        s.send(&token, kind, json!({})).await;
        assert!(
            eventually(WAIT, || async {
                !attempts(&s, &token, id).await.is_empty()
            })
            .await
        );
    }
    assert_eq!(rx.record.requests(), 2);
    assert_eq!(
        rx.record.handshakes(),
        1,
        "both endpoints use one client and its kept-alive connection"
    );
    s.stop().await;
}

/// A bundle stored as it was given, before control characters were refused and text dropped:
/// deliveries still trust its certificates, and only they are shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_stored_with_text_around_it_still_delivers_and_shows_only_certificates() {
    let s = Sluice::start(test_settings()).await;
    let ca = TestCa::new("tenant CA");
    let rx = https(&ca, &["127.0.0.1"], Validity::Current, &[]).await;
    let (_, token) = s.tenant("acme").await;
    let (id, _) = s.endpoint(&token, &rx.url(), json!({})).await;
    let mut stored = s.running.store.endpoint(None, &id).await.unwrap();
    stored.tls.ca_bundle = Some(format!("\u{0}\u{1b}[2J old comment\n{}", ca.certificate));
    s.running.store.update_endpoint(&stored).await.unwrap();

    let (_, shown) = s.get(&token, &format!("/v1/endpoints/{id}")).await;
    let bundle = shown["tls_ca_bundle"].as_str().unwrap();
    assert_eq!(ders(bundle), ders(&ca.certificate));
    assert!(
        !bundle.contains("old comment") && !bundle.contains('\u{0}'),
        "{bundle}"
    );
    assert_eq!(
        shown["tls_ca_bundle_sha256"],
        sha256(&ders(&ca.certificate)).as_str()
    );

    s.send(&token, "order.created", json!({})).await;
    assert!(eventually(WAIT, || async { rx.record.requests() >= 1 }).await);
    s.stop().await;
}
