//! One broker message is one event: the same JSON envelope on every broker, and the
//! idempotency key a message without one is given from its broker's own identity, so a
//! redelivery after a crash stores nothing twice.

use serde::Deserialize;
use serde_json::value::RawValue;

/// Longest idempotency key the API takes; a longer derived one is hashed to fit.
const MAX_KEY: usize = 256;

/// The body of a message: `{"tenant_id", "event_type", "payload", "idempotency_key"?}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope<'a> {
    tenant_id: String,
    event_type: String,
    #[serde(borrow)]
    payload: &'a RawValue,
    #[serde(default)]
    idempotency_key: Option<String>,
}

/// An event read from a message, not yet checked by the API's rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// `ten_…`
    pub tenant_id: String,
    /// The event type.
    pub event_type: String,
    /// The payload's JSON text, byte for byte as in the message.
    pub payload: String,
    /// The message's own key, else one derived from its broker identity (`None` when the
    /// broker gave it none: a RabbitMQ message without a `message-id`).
    pub idempotency_key: Option<String>,
}

/// Read `body` as an event; `identity` is the message's broker identity (`nats:ORDERS:42`).
/// An error is the reason it is refused.
pub fn read(body: &[u8], identity: Option<&str>) -> Result<Event, String> {
    let envelope: Envelope<'_> = serde_json::from_slice(body).map_err(|e| {
        format!(
            "the body is not an event {{\"tenant_id\", \"event_type\", \"payload\", \
             \"idempotency_key\"?}}: {e}"
        )
    })?;
    Ok(Event {
        tenant_id: envelope.tenant_id,
        event_type: envelope.event_type,
        payload: envelope.payload.get().to_owned(),
        idempotency_key: envelope
            .idempotency_key
            .or_else(|| identity.map(derived_key)),
    })
}

/// `ingest:` and the broker identity, or (over 256 characters, or not printable ASCII) its
/// SHA-256: stable, so every redelivery of one message has the same key.
fn derived_key(identity: &str) -> String {
    let key = format!("ingest:{identity}");
    match key.len() <= MAX_KEY && key.bytes().all(|b| b.is_ascii_graphic()) {
        true => key,
        false => format!("ingest:sha256:{}", crate::ids::hash_token(identity)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_is_read_and_its_payload_kept_byte_for_byte() {
        let body = br#"{"tenant_id":"ten_1","event_type":"order.paid","payload":{"b": 1,"a":[ ]}}"#;
        let e = read(body, Some("redis:orders:1-0")).unwrap();
        assert_eq!(e.payload, r#"{"b": 1,"a":[ ]}"#);
        assert_eq!(
            e.idempotency_key.as_deref(),
            Some("ingest:redis:orders:1-0")
        );
        let keyed = br#"{"tenant_id":"t","event_type":"e","payload":null,"idempotency_key":"k"}"#;
        assert_eq!(
            read(keyed, Some("x")).unwrap().idempotency_key.as_deref(),
            Some("k")
        );
        assert_eq!(read(keyed, None).unwrap().payload, "null");
    }

    #[test]
    fn a_message_that_is_not_an_event_says_why() {
        for body in [
            &b"not json"[..],
            br#"{"tenant_id":"t","event_type":"e"}"#,
            br#"{"tenant_id":"t","event_type":"e","payload":1,"extra":2}"#,
        ] {
            assert!(read(body, None).unwrap_err().contains("not an event"));
        }
    }

    #[test]
    fn a_long_identity_is_hashed_to_a_stable_key() {
        let long = "q".repeat(300);
        let a = derived_key(&long);
        assert_eq!(a, derived_key(&long));
        assert!(a.len() <= MAX_KEY && a.starts_with("ingest:sha256:"));
        assert!(derived_key("with space").starts_with("ingest:sha256:"));
    }
}
