//! Amazon SNS `Publish` over the query protocol (a form body, an XML answer): the message is
//! the signed payload, the Standard Webhooks headers are `String` message attributes (which a
//! subscribed queue receives as its own with raw message delivery). A FIFO topic gets
//! `MessageGroupId` = the endpoint id and `MessageDeduplicationId` = the message id.

use super::{Call, Refusal, attributes, is_fifo, xml_text};
use crate::delivery::{Response, Target};
use crate::destinations::{Signed, acknowledged};

pub(super) fn call(target: &Target, topic_arn: &str, signed: &Signed<'_>) -> Call {
    let mut form = url::form_urlencoded::Serializer::new(String::new());
    form.append_pair("Action", "Publish")
        .append_pair("Version", "2010-03-31")
        .append_pair("TopicArn", topic_arn)
        .append_pair("Message", signed.payload);
    for (n, (name, value)) in attributes(target, signed).into_iter().enumerate() {
        let entry = format!("MessageAttributes.entry.{}", n + 1);
        form.append_pair(&format!("{entry}.Name"), name)
            .append_pair(&format!("{entry}.Value.DataType"), "String")
            .append_pair(&format!("{entry}.Value.StringValue"), &value);
    }
    if is_fifo(topic_arn) {
        form.append_pair("MessageGroupId", &target.endpoint_id)
            .append_pair("MessageDeduplicationId", signed.message_id);
    }
    Call {
        service: "sns",
        name: "Amazon SNS",
        content_type: "application/x-www-form-urlencoded; charset=utf-8",
        amz_target: None,
        body: form.finish().into_bytes(),
    }
}

/// Accepted: a `MessageId` in the `PublishResult`.
pub(super) fn answer(response: &Response) -> Result<Response, Refusal> {
    let body = String::from_utf8_lossy(&response.body);
    match xml_text(&body, "MessageId") {
        Some(id) if response.status == 200 => {
            Ok(acknowledged(&format!("Amazon SNS (message {id})")))
        }
        _ => Err(Refusal {
            code: xml_text(&body, "Code"),
            message: xml_text(&body, "Message").unwrap_or_default(),
        }),
    }
}
