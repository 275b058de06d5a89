//! OTLP/HTTP's body: an `ExportTraceServiceRequest` in protobuf, written by hand.
//!
//! The few messages a span needs (opentelemetry-proto's `trace/v1`, `common/v1`,
//! `resource/v1`) take a hundred lines of varints and length prefixes; a protobuf library
//! and generated code would add crates to every build for this one body. The tests decode what
//! this writes with PyPI's `opentelemetry-proto` (`tests/otlp_receiver.py`).

use super::span::{Span, Value};

/// Protobuf wire types.
const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;
const FIXED32: u32 = 5;

/// `Span.flags`: the context-has-is-remote bit, and the parent-is-remote bit.
const HAS_IS_REMOTE: u32 = 0x100;
const IS_REMOTE: u32 = 0x200;

/// The process the spans come from: `service.name` and the instrumentation scope.
#[derive(Debug, Clone)]
pub struct Resource {
    /// `service.name` (`OTEL_SERVICE_NAME`).
    pub service_name: String,
    /// The scope's version: sluice's.
    pub version: &'static str,
}

/// The `ExportTraceServiceRequest` carrying `spans`.
pub fn encode(resource: &Resource, spans: &[Span]) -> Vec<u8> {
    let mut res = Vec::new();
    message(&mut res, 1, |b| {
        key_value(
            b,
            1,
            "service.name",
            &Value::Str(resource.service_name.clone()),
        );
        key_value(b, 1, "telemetry.sdk.name", &Value::Static("sluice"));
        key_value(b, 1, "telemetry.sdk.language", &Value::Static("rust"));
        key_value(b, 1, "service.version", &Value::Static(resource.version));
    });
    message(&mut res, 2, |b| {
        message(b, 1, |s| {
            string(s, 1, "sluice");
            string(s, 2, resource.version);
        });
        for span in spans {
            message(b, 2, |s| encode_span(s, span));
        }
    });
    let mut out = Vec::with_capacity(res.len() + 8);
    bytes(&mut out, 1, &res);
    out
}

fn encode_span(b: &mut Vec<u8>, s: &Span) {
    bytes(b, 1, &s.trace_id);
    bytes(b, 2, &s.span_id);
    if let Some(state) = &s.trace_state {
        string(b, 3, state);
    }
    if let Some(parent) = &s.parent_span_id {
        bytes(b, 4, parent);
    }
    string(b, 5, &s.name);
    tag(b, 6, VARINT);
    varint(b, s.kind.code());
    tag(b, 7, FIXED64);
    b.extend_from_slice(&s.start_unix_ns.to_le_bytes());
    tag(b, 8, FIXED64);
    b.extend_from_slice(&s.end_unix_ns.to_le_bytes());
    for (key, value) in &s.attributes {
        key_value(b, 9, key, value);
    }
    for e in &s.events {
        message(b, 11, |m| {
            tag(m, 1, FIXED64);
            m.extend_from_slice(&e.time_unix_ns.to_le_bytes());
            string(m, 2, e.name);
            for (key, value) in &e.attributes {
                key_value(m, 3, key, value);
            }
        });
    }
    // No status is UNSET: the span ended normally.
    message(b, 15, |m| {
        if let Some(description) = &s.error {
            string(m, 2, description);
            tag(m, 3, VARINT);
            varint(m, 2); // STATUS_CODE_ERROR
        }
    });
    // The parent, when there is one, is the producer's span: remote.
    let remote = match s.parent_span_id {
        Some(_) => HAS_IS_REMOTE | IS_REMOTE,
        None => HAS_IS_REMOTE,
    };
    tag(b, 16, FIXED32);
    b.extend_from_slice(&(0x01 | remote).to_le_bytes());
}

fn key_value(b: &mut Vec<u8>, field: u32, key: &str, value: &Value) {
    message(b, field, |kv| {
        string(kv, 1, key);
        message(kv, 2, |v| match value {
            Value::Str(s) => string(v, 1, s),
            Value::Static(s) => string(v, 1, s),
            Value::Int(i) => {
                tag(v, 3, VARINT);
                varint(v, *i as u64);
            }
        });
    });
}

fn message(b: &mut Vec<u8>, field: u32, fill: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    fill(&mut inner);
    bytes(b, field, &inner);
}

fn string(b: &mut Vec<u8>, field: u32, s: &str) {
    bytes(b, field, s.as_bytes());
}

fn bytes(b: &mut Vec<u8>, field: u32, data: &[u8]) {
    tag(b, field, LEN);
    varint(b, data.len() as u64);
    b.extend_from_slice(data);
}

fn tag(b: &mut Vec<u8>, field: u32, wire: u32) {
    varint(b, u64::from(field << 3 | wire));
}

fn varint(b: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        b.push((v as u8) | 0x80);
        v >>= 7;
    }
    b.push(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traces::span::SpanKind;

    #[test]
    fn varints_and_tags_are_protobuf_s() {
        let mut b = Vec::new();
        varint(&mut b, 300);
        assert_eq!(b, [0xac, 0x02]);
        let mut b = Vec::new();
        tag(&mut b, 16, FIXED32);
        assert_eq!(b, [0x85, 0x01]);
        let mut b = Vec::new();
        varint(&mut b, -1i64 as u64);
        assert_eq!(b.len(), 10, "a negative int64 takes ten bytes");
    }

    #[test]
    fn a_request_starts_with_its_resource_spans() {
        let span = Span {
            trace_id: [1; 16],
            span_id: [2; 8],
            parent_span_id: None,
            trace_state: None,
            name: "POST".into(),
            kind: SpanKind::Client,
            start_unix_ns: 1,
            end_unix_ns: 2,
            attributes: vec![("sluice.attempt.number", Value::Int(1))],
            events: Vec::new(),
            error: None,
        };
        let resource = Resource {
            service_name: "sluice".into(),
            version: "0",
        };
        let body = encode(&resource, &[span]);
        assert_eq!(body[0], 0x0a, "field 1, length-delimited");
        let needle = [0x0a, 0x10, 1, 1, 1, 1];
        assert!(body.windows(needle.len()).any(|w| w == needle), "trace id");
    }
}
