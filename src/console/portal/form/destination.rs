//! The endpoint form's destination chooser: HTTP (the URL alone), a broker (RabbitMQ, NATS
//! JetStream, Redis Streams) or an AWS service (SQS, SNS, EventBridge, whose endpoint is the
//! form's URL, blank for the region's) with the fields of its type. The broker's credentials are
//! write-only: never shown, and blank fields keep what is stored while the type is unchanged.

use maud::{Markup, html};

use super::{EndpointForm, FieldError};
use crate::api::endpoints::destination::{CredentialsIn, DestinationIn, DestinationType};
use crate::model::{Destination, Endpoint};

/// The section's fields (the API's names, so its problems land next to them).
pub const FIELDS: [&str; 21] = [
    "destination",
    "destination.type",
    "destination.exchange",
    "destination.routing_key",
    "destination.subject",
    "destination.stream",
    "destination.max_len",
    "destination.credentials.username",
    "destination.credentials.password",
    "destination.credentials.token",
    "destination.queue_url",
    "destination.topic_arn",
    "destination.event_bus_name",
    "destination.source",
    "destination.region",
    "destination.credentials.access_key_id",
    "destination.credentials.secret_access_key",
    "destination.credentials.session_token",
    "destination.project_id",
    "destination.topic",
    "destination.credentials.service_account_key",
];

fn blank(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// Fill the section from what `e` delivers to (never its credentials).
pub fn fill(form: &mut EndpointForm, e: &Endpoint) {
    form.destination_type = e.destination.kind().to_owned();
    match &e.destination {
        Destination::Http { .. } => {}
        Destination::Rabbitmq {
            exchange,
            routing_key,
            ..
        } => {
            form.destination_exchange = exchange.clone();
            form.destination_routing_key = routing_key.clone();
        }
        Destination::Nats { subject, .. } => form.destination_subject = subject.clone(),
        Destination::Redis {
            stream, max_len, ..
        } => {
            form.destination_stream = stream.clone();
            form.destination_max_len = max_len.map(|n| n.to_string()).unwrap_or_default();
        }
        Destination::Sqs {
            queue_url, region, ..
        } => {
            form.destination_queue_url = queue_url.clone();
            form.destination_region = region.clone();
        }
        Destination::Sns {
            topic_arn, region, ..
        } => {
            form.destination_topic_arn = topic_arn.clone();
            form.destination_region = region.clone();
        }
        Destination::Eventbridge {
            event_bus_name,
            region,
            source,
            ..
        } => {
            form.destination_event_bus_name = event_bus_name.clone();
            form.destination_source = source.clone();
            form.destination_region = region.clone();
        }
        Destination::Pubsub {
            project_id, topic, ..
        } => {
            form.destination_project_id = project_id.clone();
            form.destination_topic = topic.clone();
        }
    }
}

/// The destination the form asks for: `None` for HTTP (the form's URL is the shorthand).
pub fn destination(form: &EndpointForm) -> Result<Option<DestinationIn>, FieldError> {
    let kind = match form.destination_type.trim() {
        "" | "http" => return Ok(None),
        "rabbitmq" => DestinationType::Rabbitmq,
        "nats" => DestinationType::Nats,
        "redis" => DestinationType::Redis,
        "sqs" => DestinationType::Sqs,
        "sns" => DestinationType::Sns,
        "eventbridge" => DestinationType::Eventbridge,
        "pubsub" => DestinationType::Pubsub,
        other => {
            return Err(FieldError {
                field: "destination.type".into(),
                detail: format!("{other:?} is not a destination type"),
            });
        }
    };
    let max_len = match blank(&form.destination_max_len) {
        None => None,
        Some(n) => Some(n.parse().map_err(|_| FieldError {
            field: "destination.max_len".into(),
            detail: "destination.max_len must be a whole number, or blank for no trimming".into(),
        })?),
    };
    let (username, password, token) = (
        blank(&form.destination_username),
        blank(&form.destination_password),
        blank(&form.destination_token),
    );
    let (access_key_id, secret_access_key, session_token) = (
        blank(&form.destination_access_key_id),
        blank(&form.destination_secret_access_key),
        blank(&form.destination_session_token),
    );
    let service_account_key = blank(&form.destination_service_account_key);
    let credentials = [
        &username,
        &password,
        &token,
        &access_key_id,
        &secret_access_key,
        &session_token,
        &service_account_key,
    ]
    .iter()
    .any(|c| c.is_some())
    .then_some(CredentialsIn {
        username,
        password,
        token,
        access_key_id,
        secret_access_key,
        session_token,
        service_account_key,
    });
    let of = |k: DestinationType, v: &str| (kind == k).then(|| v.trim().to_owned());
    let aws = matches!(
        kind,
        DestinationType::Sqs | DestinationType::Sns | DestinationType::Eventbridge
    );
    let cloud = aws || kind == DestinationType::Pubsub;
    Ok(Some(DestinationIn {
        kind,
        url: (!cloud).then(|| form.url.trim().to_owned()),
        queue_url: of(DestinationType::Sqs, &form.destination_queue_url),
        topic_arn: of(DestinationType::Sns, &form.destination_topic_arn),
        event_bus_name: of(
            DestinationType::Eventbridge,
            &form.destination_event_bus_name,
        ),
        source: blank(&form.destination_source).filter(|_| kind == DestinationType::Eventbridge),
        region: aws.then(|| form.destination_region.trim().to_owned()),
        endpoint_url: blank(&form.url).filter(|_| cloud),
        project_id: of(DestinationType::Pubsub, &form.destination_project_id),
        topic: of(DestinationType::Pubsub, &form.destination_topic),
        exchange: of(DestinationType::Rabbitmq, &form.destination_exchange),
        routing_key: of(DestinationType::Rabbitmq, &form.destination_routing_key),
        subject: of(DestinationType::Nats, &form.destination_subject),
        stream: of(DestinationType::Redis, &form.destination_stream),
        max_len: max_len.filter(|_| kind == DestinationType::Redis),
        credentials,
    }))
}

/// The chooser and the broker fields.
pub fn section(form: &EndpointForm, error: Option<&FieldError>) -> Markup {
    let kind = form.destination_type.trim();
    let open = (!kind.is_empty() && kind != "http")
        || error.is_some_and(|e| FIELDS.contains(&e.field.as_str()));
    let field = |name: &str, id: &str, label: &str, hint: &str, value: &str, kind: &str| {
        let wrong = error.filter(|e| e.field == name);
        html! {
            label for=(id) { (label) " " span.hint { (hint) } }
            input id=(id) type=(kind) name=(name) value=(value) autocomplete="off";
            @if let Some(e) = wrong { p.field-error role="alert" { (e.detail) } }
        }
    };
    let wrong_type = error.filter(|e| e.field == "destination.type" || e.field == "destination");
    html! {
        details open[open] {
            summary { "Destination: HTTP, a message broker or a cloud service" }
            label for="f-destination-type" {
                "Type " span.hint { "HTTP POSTs to the URL; a broker type publishes to the broker at the URL (amqp://host:port/vhost, nats://host:port, redis://host:port/db; over TLS amqps://, tls://, rediss://, trusting the CA certificates under HTTPS and authentication); an AWS type calls the service endpoint at the URL, or the region's when it is blank" }
            }
            select id="f-destination-type" name="destination.type" {
                option value="http" selected[kind.is_empty() || kind == "http"] { "HTTP" }
                option value="rabbitmq" selected[kind == "rabbitmq"] { "RabbitMQ" }
                option value="nats" selected[kind == "nats"] { "NATS JetStream" }
                option value="redis" selected[kind == "redis"] { "Redis Streams" }
                option value="sqs" selected[kind == "sqs"] { "Amazon SQS" }
                option value="sns" selected[kind == "sns"] { "Amazon SNS" }
                option value="eventbridge" selected[kind == "eventbridge"] { "Amazon EventBridge" }
                option value="pubsub" selected[kind == "pubsub"] { "Google Cloud Pub/Sub" }
            }
            @if let Some(e) = wrong_type { p.field-error role="alert" { (e.detail) } }
            (field("destination.exchange", "f-destination-exchange", "Exchange (RabbitMQ)", "blank for the default exchange, which routes to the queue named by the routing key", &form.destination_exchange, "text"))
            (field("destination.routing_key", "f-destination-routing-key", "Routing key (RabbitMQ)", "", &form.destination_routing_key, "text"))
            (field("destination.subject", "f-destination-subject", "Subject (NATS)", "a JetStream stream must capture it", &form.destination_subject, "text"))
            (field("destination.stream", "f-destination-stream", "Stream (Redis)", "it must exist", &form.destination_stream, "text"))
            (field("destination.max_len", "f-destination-max-len", "Trim to about (Redis)", "entries; blank for no trimming", &form.destination_max_len, "text"))
            (field("destination.credentials.username", "f-destination-username", "User name", "write-only: blank keeps the stored credentials", &form.destination_username, "text"))
            (field("destination.credentials.password", "f-destination-password", "Password", "write-only, never shown", "", "password"))
            (field("destination.credentials.token", "f-destination-token", "Token (NATS)", "write-only, never shown", "", "password"))
            (field("destination.queue_url", "f-destination-queue-url", "Queue URL (SQS)", "a name ending in .fifo is a FIFO queue", &form.destination_queue_url, "text"))
            (field("destination.topic_arn", "f-destination-topic-arn", "Topic ARN (SNS)", "arn:aws:sns:REGION:ACCOUNT:NAME", &form.destination_topic_arn, "text"))
            (field("destination.event_bus_name", "f-destination-event-bus-name", "Event bus (EventBridge)", "its name or ARN", &form.destination_event_bus_name, "text"))
            (field("destination.source", "f-destination-source", "Source (EventBridge)", "blank for sluice", &form.destination_source, "text"))
            (field("destination.region", "f-destination-region", "Region (AWS)", "e.g. us-east-1; the URL above is the service endpoint, blank for the region's", &form.destination_region, "text"))
            (field("destination.credentials.access_key_id", "f-destination-access-key-id", "Access key id (AWS)", "write-only: blank keeps the stored credentials", "", "password"))
            (field("destination.credentials.secret_access_key", "f-destination-secret-access-key", "Secret access key (AWS)", "write-only, never shown", "", "password"))
            (field("destination.credentials.session_token", "f-destination-session-token", "Session token (AWS)", "write-only, never shown; only for temporary credentials", "", "password"))
            (field("destination.project_id", "f-destination-project-id", "Project (Pub/Sub)", "the Google Cloud project's id; the URL above is the endpoint, blank for Google's", &form.destination_project_id, "text"))
            (field("destination.topic", "f-destination-topic", "Topic (Pub/Sub)", "its id in the project", &form.destination_topic, "text"))
            label for="f-destination-service-account-key" { "Service account key (Pub/Sub) " span.hint { "the JSON key; write-only: blank keeps the stored one, none for an emulator" } }
            textarea id="f-destination-service-account-key" name="destination.credentials.service_account_key" rows="3" autocomplete="off" {}
            @if let Some(e) = error.filter(|e| e.field == "destination.credentials.service_account_key") { p.field-error role="alert" { (e.detail) } }
        }
    }
}
