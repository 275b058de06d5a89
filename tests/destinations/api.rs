//! The API's destination: `url` as the HTTP shorthand, `destination` of a type, bad fields
//! named, passwords refused in URLs, credentials never shown.

use serde_json::{Value, json};

use super::support::{Sluice, test_settings};

async fn create(s: &Sluice, token: &str, body: Value) -> (u16, Value) {
    s.post(token, "/v1/endpoints", body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destinations_are_checked_field_by_field_and_credentials_are_write_only() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;

    // The shorthand is an HTTP destination.
    let (status, shown) = create(&s, &token, json!({ "url": "http://127.0.0.1:9/hook" })).await;
    assert_eq!(status, 201, "{shown}");
    assert_eq!(shown["destination"]["type"], "http", "{shown}");
    assert_eq!(shown["destination"]["url"], "http://127.0.0.1:9/hook");
    assert_eq!(shown["url"], "http://127.0.0.1:9/hook");

    let bad = [
        (
            json!({ "url": "http://127.0.0.1:9/", "destination": { "type": "http", "url": "http://127.0.0.1:9/" } }),
            "destination",
        ),
        (json!({}), "url"),
        (
            json!({ "destination": { "type": "rabbitmq", "url": "amqp://127.0.0.1:5672/%2f" } }),
            "destination.routing_key",
        ),
        (
            json!({ "destination": { "type": "rabbitmq", "url": "http://127.0.0.1:5672/", "routing_key": "q" } }),
            "destination.url",
        ),
        (
            json!({ "destination": { "type": "rabbitmq", "url": "amqp://guest:hunter2@127.0.0.1:5672/%2f", "routing_key": "q" } }),
            "destination.url",
        ),
        (
            json!({ "destination": { "type": "rabbitmq", "url": "amqp://127.0.0.1:5672/%2f", "routing_key": "q\u{1}" } }),
            "destination.routing_key",
        ),
        (
            json!({ "destination": { "type": "http", "url": "http://127.0.0.1:9/", "routing_key": "q" } }),
            "destination.routing_key",
        ),
        (
            json!({ "destination": { "type": "kafka", "url": "kafka://127.0.0.1:9092" } }),
            "destination.type",
        ),
        (
            json!({ "destination": { "type": "nats", "url": "nats://127.0.0.1:4222" } }),
            "destination.subject",
        ),
        (
            json!({ "destination": { "type": "redis", "url": "redis://127.0.0.1:6379/0" } }),
            "destination.stream",
        ),
        (
            json!({ "destination": { "type": "redis", "url": "redis://127.0.0.1:6379/0", "stream": "s", "max_len": 0 } }),
            "destination.max_len",
        ),
        (
            json!({ "destination": { "type": "redis", "url": "redis://127.0.0.1:6379/0", "stream": "s", "max_len": 1.5 } }),
            "destination.max_len",
        ),
        (
            json!({ "destination": { "type": "redis", "url": "redis://127.0.0.1:6379/0", "stream": "s", "max_len": 1_000_000_001u64 } }),
            "destination.max_len",
        ),
        (
            json!({ "destination": { "type": "redis", "url": "redis://127.0.0.1:6379/x", "stream": "s" } }),
            "destination.url",
        ),
        (
            json!({ "destination": { "type": "redis", "url": "redis://127.0.0.1:6379/0", "stream": "s", "subject": "x" } }),
            "destination.subject",
        ),
        (
            json!({ "destination": { "type": "nats", "url": "nats://127.0.0.1:4222", "subject": "orders.>" } }),
            "destination.subject",
        ),
        (
            json!({ "destination": { "type": "nats", "url": "nats://u:hunter2@127.0.0.1:4222", "subject": "orders" } }),
            "destination.url",
        ),
        (
            json!({ "destination": { "type": "rabbitmq", "url": "amqp://127.0.0.1:5672/%2f", "routing_key": "q", "credentials": { "token": "t" } } }),
            "destination.credentials.token",
        ),
        (
            json!({ "destination": { "type": "rabbitmq", "url": "amqp://127.0.0.1:5672/%2f", "routing_key": "q", "credentials": { "username": "" } } }),
            "destination.credentials.username",
        ),
    ];
    for (body, field) in bad {
        let (status, problem) = create(&s, &token, body.clone()).await;
        assert_eq!(status, 422, "{body} -> {problem}");
        assert_eq!(problem["field"], field, "{body} -> {problem}");
        assert!(!problem.to_string().contains("hunter2"), "{problem}");
    }
    // A whole number written as a float (as JavaScript clients send it) is that number.
    let (status, made) = create(
        &s,
        &token,
        json!({ "destination": { "type": "redis", "url": "redis://127.0.0.1:6379/0", "stream": "s", "max_len": 1000.0 } }),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["destination"]["max_len"], 1000, "{made}");
    let (_, problem) = create(
        &s,
        &token,
        json!({ "destination": { "type": "rabbitmq", "url": "amqp://u:hunter2@127.0.0.1/%2f", "routing_key": "q" } }),
    )
    .await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("destination.credentials"),
        "{problem}"
    );

    // A private broker address is refused without --allow-network.
    let strict = Sluice::start(sluice::config::RawSettings {
        allow_network: Vec::new(),
        ..test_settings()
    })
    .await;
    let (_, strict_token) = strict.tenant("acme").await;
    let (status, problem) = create(
        &strict,
        &strict_token,
        json!({ "destination": { "type": "rabbitmq", "url": "amqp://127.0.0.1:5672/%2f", "routing_key": "q" } }),
    )
    .await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["field"], "destination.url", "{problem}");
    strict.stop().await;

    // A broker with credentials: shown without them, everywhere.
    let (status, shown) = create(
        &s,
        &token,
        json!({ "destination": {
            "type": "rabbitmq", "url": "amqp://127.0.0.1:5672/%2f", "exchange": "events",
            "routing_key": "orders", "credentials": { "username": "guest", "password": "hunter2" }
        } }),
    )
    .await;
    assert_eq!(status, 201, "{shown}");
    let id = shown["id"].as_str().unwrap().to_owned();
    assert_eq!(shown["destination"]["type"], "rabbitmq");
    assert_eq!(shown["destination"]["exchange"], "events");
    assert_eq!(shown["destination"]["routing_key"], "orders");
    assert_eq!(shown["destination"]["has_credentials"], true);
    let path = format!("/v1/endpoints/{id}");
    let (_, got) = s.get(&token, &path).await;
    let (_, list) = s.get(&token, "/v1/endpoints").await;
    for view in [&shown, &got, &list] {
        assert!(!view.to_string().contains("hunter2"), "{view}");
    }

    // A PATCH of the routing key keeps the credentials; a change of type drops them.
    let r = s
        .http
        .patch(format!("{}{path}", s.base))
        .bearer_auth(&token)
        .json(&json!({ "destination": { "type": "rabbitmq", "url": "amqp://127.0.0.1:5672/%2f", "routing_key": "other" } }))
        .send()
        .await
        .unwrap();
    let patched: Value = r.json().await.unwrap();
    assert_eq!(patched["destination"]["routing_key"], "other", "{patched}");
    assert_eq!(patched["destination"]["has_credentials"], true, "{patched}");
    let r = s
        .http
        .patch(format!("{}{path}", s.base))
        .bearer_auth(&token)
        .json(&json!({ "url": "http://127.0.0.1:9/back" }))
        .send()
        .await
        .unwrap();
    let patched: Value = r.json().await.unwrap();
    assert_eq!(patched["destination"]["type"], "http", "{patched}");
    assert_eq!(
        patched["destination"]["has_credentials"], false,
        "{patched}"
    );
    s.stop().await;
}
