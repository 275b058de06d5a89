//! The endpoint form's destination chooser: a RabbitMQ destination set in the portal goes
//! through the API's checks (a problem lands next to its field), its password is never shown
//! back, and saving the edit form as it is keeps it.

use crate::client::portal_client;
use crate::support::{Sluice, test_settings};

#[tokio::test]
async fn a_broker_destination_is_chosen_in_the_portal_and_its_password_never_shown() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let c = portal_client(&s, &token).await;
    let form = c.get("/console/portal/endpoints/new").await;
    assert!(form.body.contains("RabbitMQ"), "{}", form.body);
    assert!(form.body.contains("Redis Streams"), "{}", form.body);

    let in_url = c
        .submit(
            "/console/portal/endpoints",
            &form,
            &[
                ("url", "amqp://guest:typed-in-url@127.0.0.1:5672/%2f"),
                ("destination.type", "rabbitmq"),
                ("destination.routing_key", "orders"),
            ],
        )
        .await;
    assert_eq!(in_url.status, 422, "{}", in_url.body);
    assert!(
        in_url.body.contains("destination.credentials"),
        "{}",
        in_url.body
    );
    assert!(!in_url.body.contains("typed-in-url"), "{}", in_url.body);

    let added = c
        .submit(
            "/console/portal/endpoints",
            &form,
            &[
                ("url", "amqp://127.0.0.1:5672/%2f"),
                ("destination.type", "rabbitmq"),
                ("destination.routing_key", "orders"),
                ("destination.credentials.username", "guest"),
                ("destination.credentials.password", "portal-broker-password"),
            ],
        )
        .await;
    assert_eq!(added.status, 200, "{}", added.body);
    let (_, list) = s.get(&token, "/v1/endpoints").await;
    let id = list["data"][0]["id"].as_str().unwrap().to_owned();
    let stored = s.running.store.endpoint(None, &id).await.unwrap();
    assert_eq!(stored.destination.kind(), "rabbitmq");
    let password = stored
        .destination_credentials
        .as_ref()
        .and_then(|c| c.password.clone());
    assert_eq!(password.as_deref(), Some("portal-broker-password"));

    for page in [
        format!("/console/portal/endpoints/{id}/edit"),
        format!("/console/portal/endpoints/{id}"),
    ] {
        let shown = c.get(&page).await;
        assert!(
            !shown.body.contains("portal-broker-password"),
            "{}",
            shown.body
        );
    }
    let edit = c.get(&format!("/console/portal/endpoints/{id}/edit")).await;
    assert!(edit.body.contains("orders"), "{}", edit.body);
    let saved = c
        .submit(
            &format!("/console/portal/endpoints/{id}/edit"),
            &edit,
            &[
                ("url", "amqp://127.0.0.1:5672/%2f"),
                ("destination.type", "rabbitmq"),
                ("destination.routing_key", "orders.v2"),
                ("destination.credentials.username", ""),
                ("destination.credentials.password", ""),
            ],
        )
        .await;
    assert!(saved.status == 303 || saved.status == 200, "{}", saved.body);
    let kept = s.running.store.endpoint(None, &id).await.unwrap();
    assert_eq!(
        kept.destination_credentials, stored.destination_credentials,
        "blank credentials keep the stored ones"
    );
    match kept.destination {
        sluice::model::Destination::Rabbitmq { routing_key, .. } => {
            assert_eq!(routing_key, "orders.v2")
        }
        other => panic!("{other:?}"),
    }
    s.stop().await;
}

#[tokio::test]
async fn an_aws_destination_is_chosen_in_the_portal_and_its_key_never_shown() {
    let s = Sluice::start(test_settings()).await;
    let (_, token) = s.tenant("acme").await;
    let c = portal_client(&s, &token).await;
    let form = c.get("/console/portal/endpoints/new").await;
    for kind in [
        "Amazon SQS",
        "Amazon SNS",
        "Amazon EventBridge",
        "Google Cloud Pub/Sub",
    ] {
        assert!(form.body.contains(kind), "{kind}: {}", form.body);
    }
    let queue = "http://127.0.0.1:4566/123456789012/orders.fifo";
    let wrong = c
        .submit(
            "/console/portal/endpoints",
            &form,
            &[
                ("url", "http://127.0.0.1:4566"),
                ("destination.type", "sqs"),
                ("destination.queue_url", queue),
            ],
        )
        .await;
    assert_eq!(wrong.status, 422, "{}", wrong.body);
    assert!(wrong.body.contains("destination.region"), "{}", wrong.body);

    let added = c
        .submit(
            "/console/portal/endpoints",
            &form,
            &[
                ("url", "http://127.0.0.1:4566"),
                ("destination.type", "sqs"),
                ("destination.queue_url", queue),
                ("destination.region", "eu-west-1"),
                ("destination.credentials.access_key_id", "AKIAPORTALKEY"),
                (
                    "destination.credentials.secret_access_key",
                    "portal-aws-secret",
                ),
            ],
        )
        .await;
    assert_eq!(added.status, 200, "{}", added.body);
    let (_, list) = s.get(&token, "/v1/endpoints").await;
    let id = list["data"][0]["id"].as_str().unwrap().to_owned();
    let stored = s.running.store.endpoint(None, &id).await.unwrap();
    assert_eq!(stored.destination.kind(), "sqs");
    assert_eq!(stored.destination.url(), "http://127.0.0.1:4566/");
    let secret = stored
        .destination_credentials
        .as_ref()
        .and_then(|c| c.secret_access_key.clone());
    assert_eq!(secret.as_deref(), Some("portal-aws-secret"));
    for page in [
        format!("/console/portal/endpoints/{id}/edit"),
        format!("/console/portal/endpoints/{id}"),
    ] {
        let shown = c.get(&page).await;
        assert!(
            !shown.body.contains("portal-aws-secret") && !shown.body.contains("AKIAPORTALKEY"),
            "{}",
            shown.body
        );
    }
    // Saved as the edit form shows it, credentials left blank: it stays what it was.
    let edit = c.get(&format!("/console/portal/endpoints/{id}/edit")).await;
    assert!(edit.body.contains(queue), "{}", edit.body);
    assert!(edit.body.contains("eu-west-1"), "{}", edit.body);
    let saved = c
        .submit(
            &format!("/console/portal/endpoints/{id}/edit"),
            &edit,
            &[
                ("url", "http://127.0.0.1:4566/"),
                ("destination.type", "sqs"),
                ("destination.queue_url", queue),
                ("destination.region", "eu-west-1"),
                ("destination.credentials.access_key_id", ""),
                ("destination.credentials.secret_access_key", ""),
            ],
        )
        .await;
    assert!(saved.status == 303 || saved.status == 200, "{}", saved.body);
    let kept = s.running.store.endpoint(None, &id).await.unwrap();
    assert_eq!(kept.destination, stored.destination);
    assert_eq!(kept.destination_credentials, stored.destination_credentials);
    s.stop().await;
}
