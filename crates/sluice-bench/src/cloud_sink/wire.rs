//! The four services' calls and answers as sluice speaks them, pure: which service a request is
//! for and the `sent_at_us` of the message it carries, the service's success reply (the fields
//! sluice reads: a `MessageId`, `FailedEntryCount` 0 with an `EventId`, `messageIds`), and its
//! throttling error (the code sluice reads as `throttled`; no Retry-After, as the services send
//! none).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::timeline::sent_at_us;

/// A cloud service the sink answers as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Service {
    /// Amazon SQS `SendMessage`, JSON 1.0 protocol.
    Sqs,
    /// Amazon SNS `Publish`, query protocol (a form, an XML answer).
    Sns,
    /// Amazon EventBridge `PutEvents`, JSON 1.1 protocol.
    EventBridge,
    /// Google Cloud Pub/Sub REST `publish`.
    PubSub,
}

impl Service {
    /// Whether its calls are SigV4-signed (carry an `Authorization` header).
    pub(crate) fn is_aws(self) -> bool {
        self != Service::PubSub
    }

    /// Its name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Service::Sqs => "Amazon SQS",
            Service::Sns => "Amazon SNS",
            Service::EventBridge => "Amazon EventBridge",
            Service::PubSub => "Google Cloud Pub/Sub",
        }
    }

    /// The error it throttles with, as an attempt's evidence names it.
    pub(crate) fn throttling_code(self) -> &'static str {
        match self {
            Service::Sqs => "RequestThrottled",
            Service::Sns => "Throttling",
            Service::EventBridge => "ThrottlingException",
            Service::PubSub => "RESOURCE_EXHAUSTED",
        }
    }
}

/// One call the sink read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Call {
    pub service: Service,
    /// The producer's stamp in the message's payload (none when it carries none).
    pub sent_at_us: Option<u64>,
}

/// Which service `body` (sent to `path` with `X-Amz-Target: amz_target`) calls, and the stamp
/// of the message it carries; `None` for a call none of the four would take as a publish.
pub(crate) fn read(amz_target: Option<&str>, path: &str, body: &[u8]) -> Option<Call> {
    let (service, payload) = match amz_target {
        Some("AmazonSQS.SendMessage") => {
            let v: Value = serde_json::from_slice(body).ok()?;
            (Service::Sqs, v["MessageBody"].as_str()?.as_bytes().to_vec())
        }
        Some("AWSEvents.PutEvents") => {
            let v: Value = serde_json::from_slice(body).ok()?;
            let detail = v["Entries"][0]["Detail"].as_str()?;
            (Service::EventBridge, detail.as_bytes().to_vec())
        }
        Some(_) => return None,
        None if path.ends_with(":publish") => {
            let v: Value = serde_json::from_slice(body).ok()?;
            let data = v["messages"][0]["data"].as_str()?;
            (Service::PubSub, STANDARD.decode(data).ok()?)
        }
        None => {
            let mut action = None;
            let mut message = None;
            for (name, value) in url::form_urlencoded::parse(body) {
                match &*name {
                    "Action" => action = Some(value),
                    "Message" => message = Some(value),
                    _ => {}
                }
            }
            if action.as_deref() != Some("Publish") {
                return None;
            }
            (Service::Sns, message?.into_owned().into_bytes())
        }
    };
    Some(Call {
        service,
        sent_at_us: sent_at_us(&payload),
    })
}

/// An answer: status, content type, body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

const SNS_XMLNS: &str = "http://sns.amazonaws.com/doc/2010-03-31/";

/// `service`'s reply accepting message number `n`.
pub(crate) fn accepted(service: Service, n: u64) -> Answer {
    // AWS ids are UUIDs; Pub/Sub's are decimal numbers.
    let id = format!("00000000-0000-4000-8000-{n:012}");
    match service {
        Service::Sqs => Answer {
            status: 200,
            content_type: "application/x-amz-json-1.0",
            body: json!({ "MessageId": id }).to_string(),
        },
        Service::Sns => Answer {
            status: 200,
            content_type: "text/xml",
            body: format!(
                "<PublishResponse xmlns=\"{SNS_XMLNS}\"><PublishResult><MessageId>{id}</MessageId>\
                 </PublishResult><ResponseMetadata><RequestId>{id}</RequestId>\
                 </ResponseMetadata></PublishResponse>"
            ),
        },
        Service::EventBridge => Answer {
            status: 200,
            content_type: "application/x-amz-json-1.1",
            body: json!({ "FailedEntryCount": 0, "Entries": [{ "EventId": id }] }).to_string(),
        },
        Service::PubSub => Answer {
            status: 200,
            content_type: "application/json",
            body: json!({ "messageIds": [n.to_string()] }).to_string(),
        },
    }
}

/// `service`'s refusal of a call beyond its rate: the error code sluice reads as `throttled`.
pub(crate) fn throttled(service: Service) -> Answer {
    let code = service.throttling_code();
    match service {
        Service::Sqs => Answer {
            status: 400,
            content_type: "application/x-amz-json-1.0",
            body: json!({
                "__type": format!("com.amazonaws.sqs#{code}"),
                "message": "Request is throttled.",
            })
            .to_string(),
        },
        Service::Sns => Answer {
            status: 400,
            content_type: "text/xml",
            body: format!(
                "<ErrorResponse xmlns=\"{SNS_XMLNS}\"><Error><Type>Sender</Type>\
                 <Code>{code}</Code><Message>Rate exceeded</Message></Error>\
                 <RequestId>00000000-0000-4000-8000-000000000000</RequestId></ErrorResponse>"
            ),
        },
        Service::EventBridge => Answer {
            status: 400,
            content_type: "application/x-amz-json-1.1",
            body: json!({ "__type": code, "message": "Rate exceeded" }).to_string(),
        },
        Service::PubSub => Answer {
            status: 429,
            content_type: "application/json",
            body: json!({
                "error": { "code": 429, "message": "Resource exhausted", "status": code },
            })
            .to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAYLOAD: &str = r#"{"sent_at_us":1700000000000001,"seq":7}"#;

    #[test]
    fn each_call_is_read_as_its_service_with_the_payloads_stamp() {
        let stamp = Some(1_700_000_000_000_001);
        let sqs = json!({ "QueueUrl": "http://q/1/b", "MessageBody": PAYLOAD }).to_string();
        assert_eq!(
            read(Some("AmazonSQS.SendMessage"), "/", sqs.as_bytes()),
            Some(Call {
                service: Service::Sqs,
                sent_at_us: stamp
            })
        );
        let events = json!({ "Entries": [{ "Source": "s", "Detail": PAYLOAD }] }).to_string();
        assert_eq!(
            read(Some("AWSEvents.PutEvents"), "/", events.as_bytes()),
            Some(Call {
                service: Service::EventBridge,
                sent_at_us: stamp
            })
        );
        let mut form = url::form_urlencoded::Serializer::new(String::new());
        form.append_pair("Action", "Publish")
            .append_pair("TopicArn", "arn:aws:sns:us-east-1:0:t")
            .append_pair("Message", PAYLOAD);
        assert_eq!(
            read(None, "/", form.finish().as_bytes()),
            Some(Call {
                service: Service::Sns,
                sent_at_us: stamp
            })
        );
        let pubsub = json!({ "messages": [{ "data": STANDARD.encode(PAYLOAD) }] }).to_string();
        assert_eq!(
            read(None, "/v1/projects/p/topics/t:publish", pubsub.as_bytes()),
            Some(Call {
                service: Service::PubSub,
                sent_at_us: stamp
            })
        );
    }

    #[test]
    fn what_is_not_a_publish_is_not_read() {
        assert_eq!(read(Some("AmazonSQS.ReceiveMessage"), "/", b"{}"), None);
        assert_eq!(read(None, "/", b"Action=Subscribe&Message=x"), None);
        assert_eq!(read(None, "/v1/projects/p/topics/t:publish", b"{}"), None);
        // A message without a stamp is still a call, timed as none.
        let sqs = json!({ "MessageBody": "{}" }).to_string();
        let call = read(Some("AmazonSQS.SendMessage"), "/", sqs.as_bytes()).unwrap();
        assert_eq!(call.sent_at_us, None);
    }

    #[test]
    fn every_service_throttles_with_its_own_code() {
        for service in [
            Service::Sqs,
            Service::Sns,
            Service::EventBridge,
            Service::PubSub,
        ] {
            let answer = throttled(service);
            assert!(answer.status >= 400);
            assert!(answer.body.contains(service.throttling_code()));
            assert_eq!(accepted(service, 3).status, 200);
        }
    }
}
