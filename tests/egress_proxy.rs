//! Deliveries through a real HTTP egress proxy (tinyproxy): https through a CONNECT tunnel,
//! http as absolute-form requests, the no-proxy list going direct, and the SSRF guard still
//! refusing private destinations, by name and by IP literal, though the proxy resolves names.

use sluice_testkit as support;

use std::time::Duration;

use serde_json::json;
use sluice_testkit::egress_proxy::{Tinyproxy, tinyproxy};
use sluice_testkit::receiver::{self, Behavior, Options};
use sluice_testkit::tls::{TestCa, Validity, server_config};
use support::{Sluice, eventually, test_settings};

const WAIT: Duration = Duration::from_secs(20);

/// Settings sending everything through `proxy`, named by host name (the proxy's own name is
/// not judged by the guard: the operator chose it).
fn through(proxy: &Tinyproxy) -> sluice::config::RawSettings {
    let mut raw = test_settings();
    raw.egress.proxy = Some(format!("http://localhost:{}", proxy.port));
    raw
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_and_http_deliveries_go_through_the_proxy() {
    let Some(proxy) = tinyproxy().await else {
        return;
    };
    let mut raw = through(&proxy);
    // `localhost` resolves to ::1 too: with a proxy every address of a name must pass.
    raw.allow_network.push("::1/128".into());
    let s = Sluice::start(raw).await;
    let ca = TestCa::new("tenant CA");
    let server = ca.server(&["localhost"], Validity::Current);
    let tls = Options {
        tls: Some(server_config(&server, &[])),
        ..Options::default()
    };
    let secure = receiver::start_with(Behavior::Fast, tls).await.unwrap();
    let plain = receiver::start(Behavior::Fast, false).await.unwrap();
    let (_, token) = s.tenant("acme").await;
    let secure_url = format!("https://localhost:{}/hook", secure.addr.port());
    s.endpoint(
        &token,
        &secure_url,
        json!({ "tls_ca_bundle": ca.certificate }),
    )
    .await;
    s.endpoint(&token, &plain.url(), json!({})).await;
    s.send(&token, "order.created", json!({})).await;
    assert!(eventually(WAIT, || async { secure.record.requests() >= 1 }).await);
    assert!(eventually(WAIT, || async { plain.record.requests() >= 1 }).await);
    let log = proxy.log();
    let tunnel = format!("CONNECT localhost:{}", secure.addr.port());
    assert!(
        log.contains(&tunnel),
        "no {tunnel:?} in the proxy's log:\n{log}"
    );
    let forwarded = format!("POST {}", plain.url());
    assert!(log.contains(&forwarded), "no {forwarded:?} in:\n{log}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_no_proxy_list_goes_direct() {
    let Some(proxy) = tinyproxy().await else {
        return;
    };
    let mut raw = through(&proxy);
    raw.egress.no_proxy = vec!["127.0.0.1".into()];
    let s = Sluice::start(raw).await;
    let rx = receiver::start(Behavior::Fast, false).await.unwrap();
    let (_, token) = s.tenant("acme").await;
    s.endpoint(&token, &rx.url(), json!({})).await;
    s.send(&token, "order.created", json!({})).await;
    assert!(eventually(WAIT, || async { rx.record.requests() >= 1 }).await);
    let port = rx.addr.port().to_string();
    assert!(!proxy.log().contains(&port), "{}", proxy.log());
    s.stop().await;
}

/// The guard as a customer would meet it: no allow-list. Endpoints on loopback (by name and by
/// IP literal, written to the store as if they had passed once) are refused on the attempt,
/// before anything reaches the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_destinations_are_refused_though_the_proxy_resolves_names() {
    let Some(proxy) = tinyproxy().await else {
        return;
    };
    let mut raw = through(&proxy);
    raw.allow_network.clear();
    let s = Sluice::start(raw).await;
    let rx = receiver::start(Behavior::Fast, false).await.unwrap();
    let (tenant, token) = s.tenant("acme").await;
    let port = rx.addr.port();
    for (id, url) in [
        ("ep_byname", format!("http://localhost:{port}/hook")),
        ("ep_literal", format!("http://127.0.0.1:{port}/hook")),
    ] {
        let e = sluice::model::Endpoint::new(
            id.into(),
            tenant.clone(),
            url.clone(),
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
            sluice::clock::now_ms(),
        );
        s.running.store.create_endpoint(&e).await.unwrap();
        // The API refuses it outright.
        let (status, problem) = s.post(&token, "/v1/endpoints", json!({ "url": url })).await;
        assert_eq!(status, 422, "{problem}");
        assert_eq!(problem["field"], "url");
    }
    let msg = s.send(&token, "order.created", json!({})).await;
    assert!(
        eventually(WAIT, || async {
            let m = s.message(&token, &msg).await;
            let deliveries = m["deliveries"].as_array().cloned().unwrap_or_default();
            deliveries.len() == 2 && deliveries.iter().all(|d| d["state"] == "dead")
        })
        .await
    );
    for d in s.message(&token, &msg).await["deliveries"]
        .as_array()
        .unwrap()
    {
        let why = d["last_error"].as_str().unwrap_or_default();
        assert!(why.contains("destination refused"), "{why}");
    }
    assert_eq!(rx.record.requests(), 0);
    assert!(!proxy.log().contains(&port.to_string()), "{}", proxy.log());
    s.stop().await;
}
