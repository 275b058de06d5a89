//! Amazon SQS `SendMessage` over the JSON protocol (`AmazonSQS.SendMessage`): the body is the
//! signed payload, the Standard Webhooks headers are `String` message attributes. A FIFO queue
//! gets `MessageGroupId` = the endpoint id (one ordered group per endpoint) and
//! `MessageDeduplicationId` = the message id, so a retry inside SQS's five-minute window is
//! not delivered twice; a standard queue takes neither.

use serde_json::{Map, Value, json};

use super::{Call, Refusal, attributes, is_fifo, json_refusal};
use crate::delivery::{Response, Target};
use crate::destinations::{Signed, acknowledged};

pub(super) fn call(target: &Target, queue_url: &str, signed: &Signed<'_>) -> Call {
    let mut attrs = Map::new();
    for (name, value) in attributes(target, signed) {
        attrs.insert(
            name.to_owned(),
            json!({ "DataType": "String", "StringValue": value }),
        );
    }
    let mut body = json!({
        "QueueUrl": queue_url,
        "MessageBody": signed.payload,
        "MessageAttributes": attrs,
    });
    if is_fifo(queue_url) {
        body["MessageGroupId"] = Value::from(target.endpoint_id.as_str());
        body["MessageDeduplicationId"] = Value::from(signed.message_id);
    }
    Call {
        service: "sqs",
        name: "Amazon SQS",
        content_type: "application/x-amz-json-1.0",
        amz_target: Some("AmazonSQS.SendMessage"),
        body: body.to_string().into_bytes(),
    }
}

/// Accepted: a `MessageId`.
pub(super) fn answer(response: &Response) -> Result<Response, Refusal> {
    let v: Value = serde_json::from_slice(&response.body).unwrap_or_default();
    match v["MessageId"].as_str() {
        Some(id) if response.status == 200 => {
            Ok(acknowledged(&format!("Amazon SQS (message {id})")))
        }
        _ => Err(json_refusal(response)),
    }
}
