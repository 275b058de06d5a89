//! Amazon EventBridge `PutEvents` of one entry over the JSON 1.1 protocol
//! (`AWSEvents.PutEvents`): `Source` the endpoint's, `DetailType` the event type, `Detail` the
//! payload, which EventBridge takes only as a JSON object: any other payload is a failed
//! attempt of kind `invalid`, dead at once (no retry changes the payload).
//!
//! No signature travels: an entry has no attributes, and EventBridge parses `Detail` and hands
//! rules and targets a re-serialized copy, so no signature over the payload's bytes could be
//! checked by a consumer. What vouches for an event is IAM: only a principal allowed
//! `events:PutEvents` on the bus (these credentials) can put it there.

use serde_json::{Value, json};

use super::{Call, Refusal, json_refusal};
use crate::delivery::{ErrorKind, Failure, Response};
use crate::destinations::{Signed, acknowledged};

pub(super) fn call(bus: &str, source: &str, signed: &Signed<'_>) -> Result<Call, Failure> {
    let is_object = serde_json::from_str::<Value>(signed.payload).is_ok_and(|v| v.is_object());
    if !is_object {
        return Err(Failure {
            kind: ErrorKind::Invalid,
            message: "Amazon EventBridge: an event's Detail must be a JSON object, and this \
                      payload is not one"
                .into(),
        });
    }
    let body = json!({
        "Entries": [{
            "EventBusName": bus,
            "Source": source,
            "DetailType": signed.event_type,
            "Detail": signed.payload,
        }]
    });
    Ok(Call {
        service: "events",
        name: "Amazon EventBridge",
        content_type: "application/x-amz-json-1.1",
        amz_target: Some("AWSEvents.PutEvents"),
        body: body.to_string().into_bytes(),
    })
}

/// Accepted: `FailedEntryCount` 0; a failed entry is named by its `ErrorCode`.
pub(super) fn answer(response: &Response) -> Result<Response, Refusal> {
    if response.status != 200 {
        return Err(json_refusal(response));
    }
    let v: Value = serde_json::from_slice(&response.body).unwrap_or_default();
    let entry = &v["Entries"][0];
    match (v["FailedEntryCount"].as_u64(), entry["EventId"].as_str()) {
        (Some(0), Some(id)) => Ok(acknowledged(&format!("Amazon EventBridge (event {id})"))),
        _ => Err(Refusal {
            code: entry["ErrorCode"].as_str().map(str::to_owned),
            message: entry["ErrorMessage"]
                .as_str()
                .unwrap_or("no event id in the answer")
                .to_owned(),
        }),
    }
}
