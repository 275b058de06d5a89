//! One attempt's place in its message's trace: the context an endpoint that asked for it is
//! sent, and the span exported after the attempt.
//!
//! The span tree: the producer's span (its `traceparent` on `POST /v1/messages`) is the parent
//! of one span per attempt, of every delivery of the message, each a sibling of the others
//! (HTTP: kind CLIENT, named `POST`; broker: kind PRODUCER, named `send <destination>`). A
//! delivery held without an attempt (shed at a full lane, paused, breaker open, tenant
//! ceiling, rate limit) is an INTERNAL span `held` with the reason as an event. A message
//! without a `traceparent` is in a trace of its own, derived from its id, whose attempt spans
//! are roots.
//!
//! Nothing here runs for a delivery unless export is on or its endpoint asked for trace
//! context and its message has one: [`AttemptTrace::begin`] is one branch otherwise.

use std::sync::Arc;

use reqwest::header::HeaderValue;

use super::Ctx;
use crate::delivery::{Report, Target, TraceHeaders};
use crate::model::{
    Claimed, Destination, SettleOutcome, TraceParent, trace_id_of, traceparent_header,
};
use crate::traces::{Event, Span, SpanKind, Value, new_span_id, now_unix_ns};

/// The trace context of one attempt.
pub(super) struct AttemptTrace {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent: Option<TraceParent>,
    /// Recorded (exported)?
    sampled: bool,
    start_unix_ns: u64,
}

impl AttemptTrace {
    /// The context of an attempt of `d` to `target` starting now, when one is needed: export
    /// is on, or the endpoint asked for trace context and the message came with one.
    pub(super) fn begin(ctx: &Ctx, d: &Claimed, target: &Target) -> Option<Self> {
        if !(ctx.tracer.exporting() || target.trace_context && d.traceparent.is_some()) {
            return None;
        }
        let parent = d.traceparent.as_deref().and_then(TraceParent::parse);
        let trace_id = match &parent {
            Some(p) => p.trace_id,
            None => trace_id_of(None, &d.message_id),
        };
        let sampled = if ctx.tracer.exporting() {
            ctx.tracer
                .sampled(parent.as_ref().map(TraceParent::sampled), &trace_id)
        } else {
            // Not recording: the producer's decision passes through unchanged.
            parent.as_ref().is_some_and(TraceParent::sampled)
        };
        Some(Self {
            trace_id,
            span_id: new_span_id(),
            parent,
            sampled,
            start_unix_ns: now_unix_ns(),
        })
    }

    /// The headers for `target`, when it asked for trace context (HTTP headers, or a broker
    /// message's headers, AMQP application headers or stream fields): this attempt's span as the
    /// parent, the producer's `tracestate`.
    pub(super) fn headers(&self, d: &Claimed, target: &Target) -> Option<TraceHeaders> {
        if !target.trace_context {
            return None;
        }
        let value = traceparent_header(&self.trace_id, &self.span_id, self.sampled);
        Some(TraceHeaders {
            traceparent: HeaderValue::from_str(&value).ok()?,
            tracestate: d
                .tracestate
                .as_deref()
                .and_then(|s| HeaderValue::from_str(s).ok()),
        })
    }

    /// Export the attempt's span, if its trace is sampled.
    pub(super) fn finish(
        self,
        ctx: &Arc<Ctx>,
        d: &Claimed,
        target: &Target,
        report: &Report,
        outcome: &SettleOutcome,
        disabled: bool,
    ) {
        if !self.sampled || !ctx.tracer.exporting() {
            return;
        }
        let end = self.start_unix_ns + report.duration.as_nanos() as u64;
        let mut attributes = Vec::with_capacity(14);
        let url = &target.url;
        let (name, kind) = match &target.destination {
            Destination::Http { .. } => {
                attributes.push(("http.request.method", Value::Static("POST")));
                attributes.push(("url.scheme", Value::Str(url.scheme().to_owned())));
                ("POST".to_owned(), SpanKind::Client)
            }
            broker => {
                let (system, destination) = messaging(broker);
                attributes.push(("messaging.system", Value::Static(system)));
                attributes.push((
                    "messaging.destination.name",
                    Value::Str(destination.clone()),
                ));
                attributes.push(("messaging.operation.type", Value::Static("send")));
                attributes.push(("messaging.message.id", Value::Str(d.message_id.clone())));
                (format!("send {destination}"), SpanKind::Producer)
            }
        };
        if let Some(host) = url.host_str() {
            attributes.push(("server.address", Value::Str(host.to_owned())));
        }
        if let Some(port) = url.port_or_known_default() {
            attributes.push(("server.port", Value::Int(i64::from(port))));
        }
        let mut error = None;
        match &report.result {
            Ok(r) if !target.destination.is_broker() => {
                attributes.push(("http.response.status_code", Value::Int(i64::from(r.status))));
                if r.status >= 400 {
                    attributes.push(("error.type", Value::Str(r.status.to_string())));
                    error = Some(format!("HTTP {}", r.status));
                }
            }
            Ok(_) => {}
            Err(f) => {
                attributes.push(("error.type", Value::Static(f.kind.as_str())));
                error = Some(f.kind.as_str().to_owned());
            }
        }
        let delivery_id = ctx
            .store
            .row_ids()
            .format(crate::ids::DELIVERY, d.delivery_id);
        attributes.extend([
            ("sluice.tenant.id", Value::Str(d.tenant_id.clone())),
            ("sluice.endpoint.id", Value::Str(d.endpoint_id.clone())),
            ("sluice.message.id", Value::Str(d.message_id.clone())),
            ("sluice.delivery.id", Value::Str(delivery_id)),
            (
                "sluice.attempt.number",
                Value::Int(i64::from(d.attempts) + 1),
            ),
            (
                "sluice.outcome",
                Value::Static(outcome_name(outcome, disabled)),
            ),
        ]);
        ctx.tracer.export(Span {
            trace_id: self.trace_id,
            span_id: self.span_id,
            parent_span_id: self.parent.map(|p| p.parent_id),
            trace_state: d.tracestate.clone(),
            name,
            kind,
            start_unix_ns: self.start_unix_ns,
            end_unix_ns: end,
            attributes,
            events: Vec::new(),
            error,
        });
    }
}

/// Export a `held` span for a delivery of `d` held without an attempt for `reason`, when
/// export is on and its trace is sampled.
pub(super) fn held(ctx: &Ctx, d: &Claimed, reason: &'static str) {
    if !ctx.tracer.exporting() {
        return;
    }
    let parent = d.traceparent.as_deref().and_then(TraceParent::parse);
    let trace_id = match &parent {
        Some(p) => p.trace_id,
        None => trace_id_of(None, &d.message_id),
    };
    if !ctx
        .tracer
        .sampled(parent.as_ref().map(TraceParent::sampled), &trace_id)
    {
        return;
    }
    let now = now_unix_ns();
    ctx.tracer.export(Span {
        trace_id,
        span_id: new_span_id(),
        parent_span_id: parent.map(|p| p.parent_id),
        trace_state: d.tracestate.clone(),
        name: "held".into(),
        kind: SpanKind::Internal,
        start_unix_ns: now,
        end_unix_ns: now,
        attributes: vec![
            ("sluice.tenant.id", Value::Str(d.tenant_id.clone())),
            ("sluice.endpoint.id", Value::Str(d.endpoint_id.clone())),
            ("sluice.message.id", Value::Str(d.message_id.clone())),
            ("sluice.outcome", Value::Static("held")),
        ],
        events: vec![Event {
            time_unix_ns: now,
            name: if reason == "shed" {
                "sluice.shed"
            } else {
                "sluice.held"
            },
            attributes: vec![("sluice.reason", Value::Static(reason))],
        }],
        error: None,
    });
}

/// `messaging.system` and `messaging.destination.name` of a broker destination.
fn messaging(d: &Destination) -> (&'static str, String) {
    match d {
        Destination::Rabbitmq {
            exchange,
            routing_key,
            ..
        } => (
            "rabbitmq",
            if exchange.is_empty() {
                routing_key.clone()
            } else {
                exchange.clone()
            },
        ),
        Destination::Nats { subject, .. } => ("nats", subject.clone()),
        Destination::Redis { stream, .. } => ("redis", stream.clone()),
        // The semantic conventions' names for SQS and SNS; EventBridge has none of its own.
        Destination::Sqs { queue_url, .. } => ("aws_sqs", queue_url.clone()),
        Destination::Sns { topic_arn, .. } => ("aws.sns", topic_arn.clone()),
        Destination::Eventbridge { event_bus_name, .. } => {
            ("aws.eventbridge", event_bus_name.clone())
        }
        Destination::Pubsub { topic, .. } => ("gcp_pubsub", topic.clone()),
        Destination::Http { .. } => ("http", String::new()),
    }
}

/// `sluice.outcome`: what the attempt came to.
fn outcome_name(o: &SettleOutcome, disabled: bool) -> &'static str {
    match o {
        _ if disabled => "disabled",
        SettleOutcome::Delivered => "delivered",
        SettleOutcome::Retry { .. } => "retry",
        SettleOutcome::Dead { .. } => "dead",
        SettleOutcome::Shed { .. } => "held",
        SettleOutcome::Release => "released",
    }
}
