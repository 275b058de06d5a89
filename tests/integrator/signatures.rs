//! Ed25519 `v1a` signatures per endpoint: the key pair made by sluice, the public key in the
//! API, the secret key shown once; rotation with an overlap in which both keys sign, across
//! schemes too. Verified by sluice's own check and by an independent implementation (Python's
//! `cryptography` for `v1a`, the reference `standardwebhooks` package for `v1`).

use serde_json::json;
use sluice::signing::verify_v1a;

use crate::capture::{Capture, Captured};
use crate::support::Sluice;
use crate::{WAIT, get_ok, post_expect, python};

const V1A: &str = "verify_v1a.py";
const V1: &str = "verify_standardwebhooks.py";
const JWKS: &str = "verify_jwks.py";

/// Does `got` carry a `v1a` signature that verifies under `public_key`, by both checks?
fn v1a_verifies(got: &Captured, public_key: &str) -> bool {
    let ts: i64 = got.header("webhook-timestamp").parse().unwrap();
    let ours = verify_v1a(
        public_key,
        &got.header("webhook-id"),
        ts,
        &got.body,
        &got.header("webhook-signature"),
    );
    let theirs = python(V1A, &got.verifier_input("public_key", public_key));
    if let Some(theirs) = &theirs {
        assert_eq!(
            theirs.is_ok(),
            ours,
            "the two implementations disagree: {theirs:?}"
        );
    }
    ours
}

async fn next_delivery(s: &crate::support::Sluice, rx: &Capture, token: &str, n: u32) -> Captured {
    let msg = s.send(token, "order.created", json!({ "order": n })).await;
    assert!(crate::eventually(WAIT, || async { !rx.of(&msg).is_empty() }).await);
    rx.of(&msg).remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1a_endpoints_are_signed_with_ed25519_and_rotate_with_an_overlap() {
    let s = Sluice::start_with(|_| {}).await;
    let rx = Capture::start(200).await;
    let (_, token) = s.tenant("acme").await;
    let body = json!({ "url": rx.url(), "signature_scheme": "v1a" });
    let created = post_expect(&s, &token, "/v1/endpoints", body, 201).await;
    let ep = created["id"].as_str().unwrap().to_owned();
    let public = created["public_key"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap();
    assert_eq!(created["signature_scheme"], "v1a");
    assert!(
        public.starts_with("whpk_") && secret.starts_with("whsk_"),
        "{created}"
    );
    let shown = get_ok(&s, &token, &format!("/v1/endpoints/{ep}")).await;
    assert_eq!(
        shown["public_key"],
        public.as_str(),
        "the public key is always shown"
    );
    assert!(
        shown.get("secret").is_none(),
        "the secret key only once: {shown}"
    );

    let got = next_delivery(&s, &rx, &token, 1).await;
    let header = got.header("webhook-signature");
    assert!(
        header.starts_with("v1a,") && !header.contains(' '),
        "{header}"
    );
    assert!(v1a_verifies(&got, &public));
    // The verifier can say no: another key, or a changed body.
    let stranger = sluice::signing::Ed25519Key::generate().public_key();
    assert!(!v1a_verifies(&got, &stranger));
    let mut tampered = got.clone();
    tampered.body = axum::body::Bytes::from_static(br#"{"order":666}"#);
    assert!(!v1a_verifies(&tampered, &public));

    // Rotation within v1a: both keys sign during the overlap.
    let rotate = format!("/v1/endpoints/{ep}/rotate-secret");
    let rotated = post_expect(&s, &token, &rotate, json!({}), 200).await;
    let second = rotated["public_key"].as_str().unwrap().to_owned();
    assert_ne!(second, public);
    assert!(rotated["secret"].as_str().unwrap().starts_with("whsk_"));
    assert!(rotated["previous_secret_until"].is_string(), "{rotated}");
    let got = next_delivery(&s, &rx, &token, 2).await;
    assert_eq!(got.header("webhook-signature").matches("v1a,").count(), 2);
    assert!(v1a_verifies(&got, &second) && v1a_verifies(&got, &public));

    // Rotation to v1: an HMAC secret, and the Ed25519 key still signing beside it.
    let to_v1 = post_expect(
        &s,
        &token,
        &rotate,
        json!({ "signature_scheme": "v1" }),
        200,
    )
    .await;
    assert_eq!(to_v1["signature_scheme"], "v1");
    assert!(to_v1["public_key"].is_null());
    let hmac = to_v1["secret"].as_str().unwrap().to_owned();
    assert!(hmac.starts_with("whsec_"));
    let got = next_delivery(&s, &rx, &token, 3).await;
    let header = got.header("webhook-signature");
    assert!(
        header.starts_with("v1,") && header.contains(" v1a,"),
        "{header}"
    );
    assert!(
        v1a_verifies(&got, &second),
        "the previous key signs during the overlap"
    );
    if let Some(reference) = python(V1, &got.verifier_input("secret", &hmac)) {
        reference.expect("standardwebhooks verifies the v1 signature of a mixed header");
    }
    let events = get_ok(&s, &token, &format!("/v1/endpoints/{ep}/events")).await;
    let detail = events["data"][0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("(v1)") && detail.contains('T') && detail.ends_with('Z'),
        "{detail}"
    );
    s.running.stop().await;
}

/// GET a key set without a token: its status, content type and body.
async fn fetch_jwks(s: &Sluice, path: &str) -> (u16, String, serde_json::Value) {
    let r = s
        .http
        .get(format!("{}{path}", s.base))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let content_type = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, content_type, r.json().await.unwrap_or_default())
}

/// The published key set (JWKS) holds the keys signing now: it verifies a delivery with a
/// third-party JOSE library, holds both keys during a rotation's overlap and not the old one
/// once the overlap ends; an HMAC endpoint and an unknown id have none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_published_key_set_holds_the_keys_signing_now() {
    let s = Sluice::start_with(|raw| raw.rotation_overlap = Some("3s".into())).await;
    let rx = Capture::start(200).await;
    let (_, token) = s.tenant("acme").await;
    let body = json!({ "url": rx.url(), "signature_scheme": "v1a" });
    let created = post_expect(&s, &token, "/v1/endpoints", body, 201).await;
    let ep = created["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/endpoints/{ep}/jwks.json");
    assert_eq!(created["jwks_url"], path.as_str(), "{created}");

    let (status, content_type, set) = fetch_jwks(&s, &path).await;
    assert_eq!(status, 200, "{set}");
    assert_eq!(content_type, "application/jwk-set+json");
    let keys = set["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 1, "{set}");
    assert_eq!(keys[0]["kty"], "OKP");
    assert_eq!(keys[0]["crv"], "Ed25519");
    let first_kid = keys[0]["kid"].as_str().unwrap().to_owned();

    let got = next_delivery(&s, &rx, &token, 1).await;
    let mut input = got.verifier_input("jwks", "");
    input["jwks"] = set.clone();
    if let Some(theirs) = python(JWKS, &input) {
        theirs.expect("joserfc reads the set and its key verifies the delivery");
    }
    // The check can fail: a set of another key does not verify it.
    let stranger = sluice::signing::Ed25519Key::generate();
    input["jwks"] = json!(sluice::signing::jwks::key_set([
        &sluice::signing::SigningKey::V1a(stranger)
    ]));
    if let Some(theirs) = python(JWKS, &input) {
        assert!(theirs.is_err(), "another key's set must not verify");
    }

    // A rotation: both keys, the new one first, the old one's kid unchanged.
    let rotate = format!("/v1/endpoints/{ep}/rotate-secret");
    post_expect(&s, &token, &rotate, json!({}), 200).await;
    let (_, _, set) = fetch_jwks(&s, &path).await;
    let kids: Vec<&str> = set["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap())
        .collect();
    assert_eq!(kids.len(), 2, "{set}");
    assert_eq!(kids[1], first_kid, "a key keeps its kid");
    // The overlap ends: only the new key.
    assert!(
        crate::eventually(std::time::Duration::from_secs(10), || async {
            fetch_jwks(&s, &path).await.2["keys"]
                .as_array()
                .is_some_and(|k| k.len() == 1 && k[0]["kid"] != first_kid.as_str())
        })
        .await,
        "the old key leaves the set when its overlap ends"
    );

    // HMAC only: an empty set at its jwks_url.
    let v1 = post_expect(&s, &token, "/v1/endpoints", json!({ "url": rx.url() }), 201).await;
    let v1_path = format!("/v1/endpoints/{}/jwks.json", v1["id"].as_str().unwrap());
    assert_eq!(v1["jwks_url"], v1_path.as_str(), "{v1}");
    let (status, _, empty) = fetch_jwks(&s, &v1_path).await;
    assert_eq!(status, 200);
    assert_eq!(empty, json!({ "keys": [] }));
    assert_eq!(
        fetch_jwks(&s, "/v1/endpoints/ep_nosuchendpoint0000000/jwks.json")
            .await
            .0,
        404
    );
}
