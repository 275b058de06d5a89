//! The endpoint form: its fields as text, parsed into the API's own `CreateEndpoint` and
//! `UpdateEndpoint`, so the checks that follow (egress guard, field ranges, the operator's
//! timeout caps) are the API's, and its errors come back next to the field at fault.

pub mod destination;
pub mod https;

use std::collections::BTreeMap;

use maud::{Markup, html};
use serde::Deserialize;

use crate::api::endpoints::checks::RateLimitIn;
use crate::api::endpoints::{CreateEndpoint, UpdateEndpoint};
use crate::console::page::csrf_field;
use crate::model::{DeliveryOrder, Endpoint};
use crate::web::problem::Problem;

/// The form as submitted (all text; blank means "not set").
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct EndpointForm {
    /// Destination URL.
    pub url: String,
    /// Free text.
    pub description: String,
    /// Event types, separated by commas, spaces or new lines; blank for all.
    pub event_types: String,
    /// Lane size override.
    pub lane_size: String,
    /// Latency breaker ceiling, ms.
    pub latency_ceiling_ms: String,
    /// Connect timeout, ms.
    pub connect_timeout_ms: String,
    /// Read timeout, ms.
    pub read_timeout_ms: String,
    /// Total deadline, ms.
    pub total_timeout_ms: String,
    /// Rate limit, events per second; blank for none.
    #[serde(rename = "rate_limit.per_second")]
    pub rate_per_second: String,
    /// Its burst; blank for one second's worth.
    #[serde(rename = "rate_limit.burst")]
    pub rate_burst: String,
    /// `unordered` (or blank) or `fifo`.
    pub ordering: String,
    /// A ticked checkbox (`on`): send W3C trace context with each attempt; absent: don't.
    pub trace_context: String,
    /// Headers sent with every attempt, one `Name: value` per line.
    pub headers: String,
    /// CA certificates (PEM) trusted for this endpoint.
    pub tls_ca_bundle: String,
    /// The client certificate presented (PEM).
    pub tls_client_certificate: String,
    /// Its key (PEM; write-only: blank keeps the stored one).
    pub tls_client_key: String,
    /// OAuth2 token endpoint; blank for none.
    pub oauth2_token_url: String,
    /// OAuth2 client id.
    pub oauth2_client_id: String,
    /// OAuth2 client secret (write-only: blank keeps the stored one).
    pub oauth2_client_secret: String,
    /// OAuth2 scopes.
    pub oauth2_scope: String,
    /// OAuth2 audience.
    pub oauth2_audience: String,
    /// How sluice authenticates to the token endpoint: `basic` (or blank) or `post`.
    pub oauth2_client_auth: String,
    /// `http` (or blank), `rabbitmq`, `nats`, `redis`, `sqs`, `sns`, `eventbridge` or `pubsub`.
    #[serde(rename = "destination.type")]
    pub destination_type: String,
    /// RabbitMQ exchange.
    #[serde(rename = "destination.exchange")]
    pub destination_exchange: String,
    /// RabbitMQ routing key.
    #[serde(rename = "destination.routing_key")]
    pub destination_routing_key: String,
    /// NATS subject.
    #[serde(rename = "destination.subject")]
    pub destination_subject: String,
    /// Redis stream.
    #[serde(rename = "destination.stream")]
    pub destination_stream: String,
    /// Redis `MAXLEN ~`; blank for none.
    #[serde(rename = "destination.max_len")]
    pub destination_max_len: String,
    /// Broker user name (write-only: blank keeps the stored credentials).
    #[serde(rename = "destination.credentials.username")]
    pub destination_username: String,
    /// Broker password (write-only).
    #[serde(rename = "destination.credentials.password")]
    pub destination_password: String,
    /// NATS token (write-only).
    #[serde(rename = "destination.credentials.token")]
    pub destination_token: String,
    /// SQS queue URL.
    #[serde(rename = "destination.queue_url")]
    pub destination_queue_url: String,
    /// SNS topic ARN.
    #[serde(rename = "destination.topic_arn")]
    pub destination_topic_arn: String,
    /// EventBridge bus.
    #[serde(rename = "destination.event_bus_name")]
    pub destination_event_bus_name: String,
    /// EventBridge `Source`; blank for `sluice`.
    #[serde(rename = "destination.source")]
    pub destination_source: String,
    /// AWS region.
    #[serde(rename = "destination.region")]
    pub destination_region: String,
    /// AWS access key id (write-only: blank keeps the stored credentials).
    #[serde(rename = "destination.credentials.access_key_id")]
    pub destination_access_key_id: String,
    /// AWS secret access key (write-only).
    #[serde(rename = "destination.credentials.secret_access_key")]
    pub destination_secret_access_key: String,
    /// AWS session token (write-only).
    #[serde(rename = "destination.credentials.session_token")]
    pub destination_session_token: String,
    /// Pub/Sub project.
    #[serde(rename = "destination.project_id")]
    pub destination_project_id: String,
    /// Pub/Sub topic.
    #[serde(rename = "destination.topic")]
    pub destination_topic: String,
    /// Google service account key (write-only: blank keeps the stored one).
    #[serde(rename = "destination.credentials.service_account_key")]
    pub destination_service_account_key: String,
}

/// A field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The form field (the API's field name).
    pub field: String,
    /// What is wrong.
    pub detail: String,
}

impl From<Problem> for FieldError {
    fn from(p: Problem) -> Self {
        Self {
            field: p.field.unwrap_or_default(),
            detail: p.detail,
        }
    }
}

fn text(n: Option<u32>) -> String {
    n.map(|n| n.to_string()).unwrap_or_default()
}

impl From<&Endpoint> for EndpointForm {
    fn from(e: &Endpoint) -> Self {
        let mut form = Self {
            url: e.url.clone(),
            description: e.description.clone(),
            event_types: e.event_types.join(", "),
            lane_size: text(e.lane_size),
            latency_ceiling_ms: text(e.latency_ceiling_ms),
            connect_timeout_ms: text(e.connect_timeout_ms),
            read_timeout_ms: text(e.read_timeout_ms),
            total_timeout_ms: text(e.total_timeout_ms),
            rate_per_second: e
                .rate_limit
                .map(|l| l.per_second().to_string())
                .unwrap_or_default(),
            rate_burst: text(e.rate_limit.map(|l| l.burst())),
            ordering: match e.ordering {
                DeliveryOrder::Unordered => String::new(),
                DeliveryOrder::Fifo => "fifo".into(),
            },
            trace_context: if e.trace_context {
                "on".into()
            } else {
                String::new()
            },
            headers: e
                .headers
                .iter()
                .map(|(name, value)| format!("{name}: {value}"))
                .collect::<Vec<_>>()
                .join("\n"),
            ..Self::default()
        };
        https::fill(&mut form, e);
        destination::fill(&mut form, e);
        form
    }
}

/// `Name: value` lines as a header table (blank lines skipped); the API checks the names and
/// values, and its problems name the header (`headers.NAME`), shown next to this field.
fn header_lines(text: &str) -> Result<BTreeMap<String, String>, FieldError> {
    let mut out = BTreeMap::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':').ok_or_else(|| FieldError {
            field: "headers".into(),
            detail: format!("{line:?} is not a header: write Name: value, one per line"),
        })?;
        out.insert(name.trim().to_owned(), value.trim().to_owned());
    }
    Ok(out)
}

fn number(field: &str, value: &str) -> Result<Option<u32>, FieldError> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(None);
    }
    value.parse().map(Some).map_err(|_| FieldError {
        field: field.to_owned(),
        detail: format!("{field} must be a whole number, or blank for the default"),
    })
}

/// The rate limit's two fields: both blank for none; a burst without a rate is refused on the
/// rate's field. The API checks the ranges.
fn rate_limit(form: &EndpointForm) -> Result<Option<RateLimitIn>, FieldError> {
    const RATE: &str = "rate_limit.per_second";
    let per_second = form.rate_per_second.trim();
    let burst = number("rate_limit.burst", &form.rate_burst)?;
    if per_second.is_empty() {
        return match burst {
            None => Ok(None),
            Some(_) => Err(FieldError {
                field: RATE.into(),
                detail: format!("{RATE} is needed with a burst (or leave both blank)"),
            }),
        };
    }
    let per_second = per_second.parse().map_err(|_| FieldError {
        field: RATE.into(),
        detail: format!("{RATE} must be a number of events per second, or blank for no limit"),
    })?;
    Ok(Some(RateLimitIn { per_second, burst }))
}

/// The ordering field: blank or `unordered`, or `fifo`.
fn ordering(form: &EndpointForm) -> Result<DeliveryOrder, FieldError> {
    match form.ordering.trim() {
        "" | "unordered" => Ok(DeliveryOrder::Unordered),
        "fifo" => Ok(DeliveryOrder::Fifo),
        _ => Err(FieldError {
            field: "ordering".into(),
            detail: "ordering must be unordered or fifo".into(),
        }),
    }
}

/// The trace context checkbox: ticked sends `on`, unticked sends nothing.
fn trace_context(form: &EndpointForm) -> bool {
    matches!(form.trace_context.trim(), "on" | "true" | "1")
}

/// The trace context checkbox, with what it sends.
fn trace_context_field(form: &EndpointForm) -> Markup {
    html! {
        label for="f-trace-context" {
            input id="f-trace-context" type="checkbox" name="trace_context" value="on" checked[trace_context(form)];
            " Send trace context "
            span.hint { "each attempt carries a W3C traceparent (and tracestate), so your tracing joins the sender's trace; off: no trace header is sent" }
        }
    }
}

/// The ordering choice, with what FIFO costs.
fn ordering_field(form: &EndpointForm, error: Option<&FieldError>) -> Markup {
    let fifo = form.ordering.trim() == "fifo";
    let wrong = error.filter(|e| e.field == "ordering");
    html! {
        label for="f-ordering" {
            "Ordering " span.hint { "FIFO sends one delivery at a time, in the order messages were accepted: a failing one holds up the rest until it succeeds or is dead-lettered" }
        }
        select id="f-ordering" name="ordering" {
            option value="unordered" selected[!fifo] { "Unordered (several at once)" }
            option value="fifo" selected[fifo] { "FIFO (one at a time, in order)" }
        }
        @if let Some(e) = wrong { p.field-error role="alert" { (e.detail) } }
    }
}

impl EndpointForm {
    fn types(&self) -> Vec<String> {
        self.event_types
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// The API request that creates this endpoint.
    pub fn to_create(&self) -> Result<CreateEndpoint, FieldError> {
        let broker = destination::destination(self)?;
        Ok(CreateEndpoint {
            url: broker.is_none().then(|| self.url.trim().to_owned()),
            destination: broker,
            event_types: self.types(),
            description: self.description.trim().to_owned(),
            lane_size: number("lane_size", &self.lane_size)?,
            latency_ceiling_ms: number("latency_ceiling_ms", &self.latency_ceiling_ms)?,
            connect_timeout_ms: number("connect_timeout_ms", &self.connect_timeout_ms)?,
            read_timeout_ms: number("read_timeout_ms", &self.read_timeout_ms)?,
            total_timeout_ms: number("total_timeout_ms", &self.total_timeout_ms)?,
            headers: header_lines(&self.headers)?,
            tls_ca_bundle: https::optional(&self.tls_ca_bundle),
            tls_client_certificate: https::optional(&self.tls_client_certificate),
            tls_client_key: https::optional(&self.tls_client_key),
            oauth2: https::oauth2(self)?,
            rate_limit: rate_limit(self)?,
            ordering: ordering(self)?,
            trace_context: trace_context(self),
            ..CreateEndpoint::default()
        })
    }

    /// The API request that makes an endpoint match this form (blank overrides are cleared);
    /// `current` is the client certificate stored now (kept when the form leaves it as it is).
    pub fn to_update(&self, current: Option<&str>) -> Result<UpdateEndpoint, FieldError> {
        let (tls_client_certificate, tls_client_key) = https::identity_update(self, current)?;
        let broker = destination::destination(self)?;
        Ok(UpdateEndpoint {
            tls_ca_bundle: Some(https::optional(&self.tls_ca_bundle)),
            tls_client_certificate,
            tls_client_key,
            oauth2: Some(https::oauth2(self)?),
            url: broker.is_none().then(|| self.url.trim().to_owned()),
            destination: broker,
            event_types: Some(self.types()),
            description: Some(self.description.trim().to_owned()),
            enabled: None,
            lane_size: Some(number("lane_size", &self.lane_size)?),
            latency_ceiling_ms: Some(number("latency_ceiling_ms", &self.latency_ceiling_ms)?),
            connect_timeout_ms: Some(number("connect_timeout_ms", &self.connect_timeout_ms)?),
            read_timeout_ms: Some(number("read_timeout_ms", &self.read_timeout_ms)?),
            total_timeout_ms: Some(number("total_timeout_ms", &self.total_timeout_ms)?),
            headers: Some(header_lines(&self.headers)?),
            rate_limit: Some(rate_limit(self)?),
            ordering: Some(ordering(self)?),
            trace_context: Some(trace_context(self)),
        })
    }
}

/// The headers field: one `Name: value` per line; an error about any header (the API names
/// it `headers.NAME`) is shown here.
fn custom_headers(form: &EndpointForm, error: Option<&FieldError>) -> Markup {
    let wrong = error.filter(|e| e.field == "headers" || e.field.starts_with("headers."));
    html! {
        label for="f-headers" {
            "Headers " span.hint { "sent with every attempt, one Name: value per line; optional" }
        }
        textarea id="f-headers" name="headers" rows="3" { (form.headers) }
        @if let Some(e) = wrong { p.field-error role="alert" { (e.detail) } }
    }
}

/// A URL as written back into the form: never with the user name and password a tenant put in
/// it (refused by the API, which points to the credentials fields).
fn without_userinfo(text: &str) -> String {
    match url::Url::parse(text.trim()) {
        Ok(mut u) if !u.username().is_empty() || u.password().is_some() => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.into()
        }
        _ => text.to_owned(),
    }
}

/// What the form needs besides its values.
pub struct FormContext<'a> {
    /// Where it posts.
    pub action: &'a str,
    /// CSRF token.
    pub csrf: &'a str,
    /// The submit button's text.
    pub submit: &'a str,
    /// The operator's default lane size, for the hint.
    pub default_lane: u32,
}

fn field(
    name: &str,
    label: &str,
    hint: &str,
    kind: &str,
    value: &str,
    error: Option<&FieldError>,
) -> Markup {
    let id = format!("f-{name}");
    let wrong = error.filter(|e| e.field == name);
    let numeric = (name == "lane_size" || name.ends_with("_ms") || name == "rate_limit.burst")
        .then_some("numeric");
    html! {
        label for=(id) { (label) " " span.hint { (hint) } }
        input id=(id) type=(kind) name=(name) value=(value) inputmode=[numeric];
        @if let Some(e) = wrong { p.field-error role="alert" { (e.detail) } }
    }
}

/// The endpoint form with `values`, and `error` next to its field (or on top when the field
/// is not one of the form's).
pub fn render(ctx: &FormContext, values: &EndpointForm, error: Option<&FieldError>) -> Markup {
    const FIELDS: [&str; 10] = [
        "url",
        "description",
        "event_types",
        "lane_size",
        "latency_ceiling_ms",
        "connect_timeout_ms",
        "read_timeout_ms",
        "total_timeout_ms",
        "rate_limit.per_second",
        "rate_limit.burst",
    ];
    let general = error.filter(|e| {
        !FIELDS.contains(&e.field.as_str())
            && !https::FIELDS.contains(&e.field.as_str())
            && !destination::FIELDS.contains(&e.field.as_str())
            && e.field != "destination.url"
            && e.field != "headers"
            && !e.field.starts_with("headers.")
    });
    let advanced_open =
        error.is_some_and(|e| e.field.ends_with("_ms") || e.field.starts_with("rate_limit."));
    // A broker URL's problem is the API's `destination.url`: shown on the one URL field.
    let url_error = error
        .filter(|e| e.field == "destination.url")
        .map(|e| FieldError {
            field: "url".into(),
            detail: e.detail.clone(),
        });
    let lane_hint = format!(
        "concurrent deliveries; blank for the default of {}",
        ctx.default_lane
    );
    html! {
        form.endpoint method="post" action=(ctx.action) {
            (csrf_field(ctx.csrf))
            @if let Some(e) = general { p.form-error role="alert" { (e.detail) } }
            (field("url", "URL", "where webhooks are POSTed (http or https), or the broker's address (see Destination)", "url", &without_userinfo(&values.url), url_error.as_ref().or(error)))
            (field("description", "Description", "optional", "text", &values.description, error))
            (field("event_types", "Event types", "comma-separated; blank for every type", "text", &values.event_types, error))
            (field("lane_size", "Lane size", &lane_hint, "text", &values.lane_size, error))
            (ordering_field(values, error))
            (trace_context_field(values))
            (custom_headers(values, error))
            details open[advanced_open] {
                summary { "Rate limit, latency ceiling and timeouts" }
                (field("rate_limit.per_second", "Rate limit (events/s)", "across every dispatcher; deliveries beyond it wait their turn without using an attempt; blank for none", "text", &values.rate_per_second, error))
                (field("rate_limit.burst", "Burst", "events at once after a quiet spell; blank for one second's worth", "text", &values.rate_burst, error))
                (field("latency_ceiling_ms", "Latency ceiling (ms)", "the breaker opens when the p95 stays above it; blank for the default", "text", &values.latency_ceiling_ms, error))
                (field("connect_timeout_ms", "Connect timeout (ms)", "blank for the default", "text", &values.connect_timeout_ms, error))
                (field("read_timeout_ms", "Read timeout (ms)", "blank for the default", "text", &values.read_timeout_ms, error))
                (field("total_timeout_ms", "Total deadline (ms)", "blank for the default", "text", &values.total_timeout_ms, error))
            }
            (destination::section(values, error))
            (https::section(values, error))
            p { button.primary type="submit" { (ctx.submit) } }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blanks_are_defaults_and_numbers_are_checked() {
        let form = EndpointForm {
            url: " https://example.com/hook ".into(),
            event_types: "order.created, order.paid\ninvoice.sent".into(),
            lane_size: "4".into(),
            ..Default::default()
        };
        let c = form.to_create().unwrap();
        assert_eq!(c.url.as_deref(), Some("https://example.com/hook"));
        assert_eq!(
            c.event_types,
            ["order.created", "order.paid", "invoice.sent"]
        );
        assert_eq!((c.lane_size, c.read_timeout_ms), (Some(4), None));
        let u = form.to_update(None).unwrap();
        assert_eq!(u.lane_size, Some(Some(4)));
        assert_eq!(u.total_timeout_ms, Some(None));
        let bad = EndpointForm {
            lane_size: "four".into(),
            ..Default::default()
        };
        assert_eq!(bad.to_create().unwrap_err().field, "lane_size");
    }

    #[test]
    fn the_rate_limit_is_two_fields_blank_for_none() {
        let form = EndpointForm {
            url: "https://example.com/hook".into(),
            rate_per_second: "2.5".into(),
            rate_burst: "5".into(),
            ..Default::default()
        };
        let want = RateLimitIn {
            per_second: 2.5,
            burst: Some(5),
        };
        assert_eq!(form.to_create().unwrap().rate_limit, Some(want));
        let blank = EndpointForm {
            rate_per_second: String::new(),
            rate_burst: String::new(),
            ..form.clone()
        };
        assert_eq!(blank.to_update(None).unwrap().rate_limit, Some(None));
        let wordy = EndpointForm {
            rate_per_second: "fast".into(),
            ..form.clone()
        };
        assert_eq!(
            wordy.to_create().unwrap_err().field,
            "rate_limit.per_second"
        );
        let burst_alone = EndpointForm {
            rate_per_second: String::new(),
            ..form
        };
        assert_eq!(
            burst_alone.to_create().unwrap_err().field,
            "rate_limit.per_second"
        );
    }

    #[test]
    fn header_lines_become_the_header_table() {
        let form = EndpointForm {
            url: "https://example.com/hook".into(),
            headers: "X-Route: eu-1\n\n  Authorization: Bearer a:b  ".into(),
            ..Default::default()
        };
        let c = form.to_create().unwrap();
        assert_eq!(c.headers["X-Route"], "eu-1");
        assert_eq!(c.headers["Authorization"], "Bearer a:b");
        let bad = EndpointForm {
            headers: "no colon here".into(),
            ..form
        };
        assert_eq!(bad.to_update(None).unwrap_err().field, "headers");
    }
}
