//! The endpoint form's destination chooser: HTTP (the URL alone) or a broker (RabbitMQ, NATS
//! JetStream, Redis Streams) with the fields of its type. The broker's credentials are
//! write-only: never shown, and blank fields keep what is stored while the type is unchanged.

use maud::{Markup, html};

use super::{EndpointForm, FieldError};
use crate::api::endpoints::destination::{CredentialsIn, DestinationIn, DestinationType};
use crate::model::{Destination, Endpoint};

/// The section's fields (the API's names, so its problems land next to them).
pub const FIELDS: [&str; 10] = [
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
    }
}

/// The destination the form asks for: `None` for HTTP (the form's URL is the shorthand).
pub fn destination(form: &EndpointForm) -> Result<Option<DestinationIn>, FieldError> {
    let kind = match form.destination_type.trim() {
        "" | "http" => return Ok(None),
        "rabbitmq" => DestinationType::Rabbitmq,
        "nats" => DestinationType::Nats,
        "redis" => DestinationType::Redis,
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
    let credentials =
        (username.is_some() || password.is_some() || token.is_some()).then_some(CredentialsIn {
            username,
            password,
            token,
        });
    let of = |k: DestinationType, v: &str| (kind == k).then(|| v.trim().to_owned());
    Ok(Some(DestinationIn {
        kind,
        url: form.url.trim().to_owned(),
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
            summary { "Destination: HTTP or a message broker" }
            label for="f-destination-type" {
                "Type " span.hint { "HTTP POSTs to the URL; a broker type publishes to the broker at the URL (amqp://host:port/vhost, nats://host:port, redis://host:port/db; over TLS amqps://, tls://, rediss://, trusting the CA certificates under HTTPS and authentication)" }
            }
            select id="f-destination-type" name="destination.type" {
                option value="http" selected[kind.is_empty() || kind == "http"] { "HTTP" }
                option value="rabbitmq" selected[kind == "rabbitmq"] { "RabbitMQ" }
                option value="nats" selected[kind == "nats"] { "NATS JetStream" }
                option value="redis" selected[kind == "redis"] { "Redis Streams" }
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
        }
    }
}
