//! Who may read `/metrics` (every tenant's endpoint ids and destination hosts): the operator.
//! On the API listener it needs the admin token; with `--operator-listen` it is served there
//! (with `/healthz` and `/readyz`) and not at all on the API listener.

use reqwest::Method;

use super::{ADMIN, Sluice, assert_problem};

#[tokio::test]
async fn metrics_on_the_api_listener_need_the_admin_token() {
    let s = Sluice::start_with(|_| {}).await;
    let (_, token) = s.tenant("acme").await;
    assert_problem(
        &s.call(Method::GET, "/metrics", None, None).await,
        401,
        None,
    );
    let r = s.call(Method::GET, "/metrics", Some(&token), None).await;
    assert_problem(&r, 401, None);
    let r = s.call(Method::GET, "/metrics", Some(ADMIN), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.content_type.starts_with("text/plain; version=0.0.4"));
    assert!(r.text.contains("sluice_in_flight"), "{}", r.text);
    // Health stays open to load balancers.
    for path in ["/healthz", "/readyz"] {
        assert_eq!(
            s.call(Method::GET, path, None, None).await.status,
            200,
            "{path}"
        );
    }
    s.stop().await;
}

#[tokio::test]
async fn an_operator_listener_serves_metrics_and_health_and_the_api_listener_no_metrics() {
    let port = crate::support::free_port();
    let s = Sluice::start_with(|raw| raw.operator_listen = Some(format!("127.0.0.1:{port}"))).await;
    let http = reqwest::Client::new();
    let operator = format!("http://127.0.0.1:{port}");
    let get = |path: &str| http.get(format!("{operator}{path}")).send();

    let r = http
        .get(format!("{operator}/metrics"))
        .header("accept", "application/openmetrics-text; version=1.0.0")
        .send()
        .await
        .expect("operator listener answers");
    assert_eq!(r.status(), 200);
    let content_type = r.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    assert!(r.text().await.unwrap().contains("sluice_in_flight"));
    for path in ["/healthz", "/readyz"] {
        assert_eq!(get(path).await.unwrap().status(), 200, "{path}");
    }
    // The operator listener serves nothing else.
    let r = get("/v1/messages").await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.headers()["content-type"], "application/problem+json");

    // The API listener no longer serves /metrics, not even to the operator, nor documents it.
    assert_problem(
        &s.call(Method::GET, "/metrics", Some(ADMIN), None).await,
        404,
        None,
    );
    assert_eq!(
        s.call(Method::GET, "/healthz", None, None).await.status,
        200
    );
    let doc = s.call(Method::GET, "/openapi.json", None, None).await.body;
    assert!(doc["paths"].get("/metrics").is_none(), "{}", doc["paths"]);
    assert!(doc["paths"].get("/v1/messages").is_some());
    s.stop().await;
}
