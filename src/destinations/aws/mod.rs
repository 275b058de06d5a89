//! The AWS destinations (SQS, SNS, EventBridge): one SigV4-signed API call per attempt over the
//! HTTP clients HTTP delivery uses ([`Clients::post`]), so the egress guard, the proxy, the
//! endpoint's TLS setting and the timeouts are exactly an HTTP attempt's. Delivered means the
//! service accepted the message: a `MessageId` (SQS, SNS), `FailedEntryCount` 0 (EventBridge).
//!
//! A refusal is named by the service's error code: throttling is `throttled` (read like a 429),
//! refused credentials `broker_auth`, no such queue, topic or bus `broker_not_found`, a message
//! the service can never take `invalid` (dead at once) or `too_large`; a 5xx is kept as its HTTP
//! status, so the governor reads it as any receiver's. The text is read only where the code is
//! too generic to tell a message too large from an invalid one
//! ([`super::refused_for_size`]).

mod eventbridge;
mod sigv4;
mod sns;
mod sqs;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::time::Instant;

use super::Signed;
use crate::delivery::{Clients, ErrorKind, Failure, Phases, Response, Target};
use crate::model::{Destination, DestinationCredentials};

/// The most message attributes SQS and SNS take on one message.
const MOST_ATTRIBUTES: usize = 10;

/// One API call, ready to sign.
struct Call {
    /// The signing name: `sqs`, `sns`, `events`.
    service: &'static str,
    /// What the service is called in an attempt's record.
    name: &'static str,
    content_type: &'static str,
    /// `X-Amz-Target` (the JSON protocols).
    amz_target: Option<&'static str>,
    body: Vec<u8>,
}

/// The AWS destinations' state: the signing keys of the day.
#[derive(Default)]
pub(super) struct Publisher {
    keys: sigv4::SigningKeys,
}

impl Publisher {
    /// Send `signed` to `target`'s AWS destination through `clients`, answered by `deadline`.
    pub(super) async fn publish(
        &self,
        clients: &Clients,
        target: &Target,
        signed: &Signed<'_>,
        deadline: Instant,
        phases: &mut Phases,
    ) -> Result<Response, Failure> {
        let (call, region) = match &target.destination {
            Destination::Sqs {
                queue_url, region, ..
            } => (sqs::call(target, queue_url, signed), region),
            Destination::Sns {
                topic_arn, region, ..
            } => (sns::call(target, topic_arn, signed), region),
            Destination::Eventbridge {
                event_bus_name,
                region,
                source,
                ..
            } => (eventbridge::call(event_bus_name, source, signed)?, region),
            _ => {
                return Err(Failure {
                    kind: ErrorKind::Other,
                    message: "not an AWS destination".into(),
                });
            }
        };
        let credentials = target.destination_credentials.as_ref();
        let (Some(key_id), Some(secret)) = (
            credentials.and_then(|c| c.access_key_id.as_deref()),
            credentials.and_then(|c| c.secret_access_key.as_deref()),
        ) else {
            return Err(Failure {
                kind: ErrorKind::BrokerAuth,
                message: format!("{}: no AWS credentials are stored", call.name),
            });
        };
        let signer = sigv4::Signer {
            access_key_id: key_id,
            secret_access_key: secret,
            session_token: credentials.and_then(|c| c.session_token.as_deref()),
            region,
            service: call.service,
        };
        let url = &target.url;
        let host = match (url.host_str(), url.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_owned(),
            (None, _) => {
                return Err(Failure {
                    kind: ErrorKind::Refused,
                    message: "the service endpoint has no host".into(),
                });
            }
        };
        let mut to_sign = vec![("content-type", call.content_type)];
        if let Some(t) = call.amz_target {
            to_sign.push(("x-amz-target", t));
        }
        let amz_date = sigv4::amz_date(crate::clock::now_ms());
        let mut headers = HeaderMap::new();
        let auth = signer.sign(&self.keys, &host, &to_sign, &call.body, &amz_date);
        for (name, value) in to_sign
            .iter()
            .map(|(n, v)| (*n, (*v).to_owned()))
            .chain(auth)
        {
            let value = HeaderValue::from_str(&value).map_err(|_| Failure {
                kind: ErrorKind::BrokerAuth,
                message: format!("{}: a credential is not valid in an HTTP header", call.name),
            })?;
            headers.insert(HeaderName::from_static(name), value);
        }
        headers.insert(
            reqwest::header::USER_AGENT,
            HeaderValue::from_static("sluice/0.1"),
        );
        let response = clients
            .post(target, url, headers, call.body, deadline, phases)
            .await?;
        let answer = match call.service {
            "sqs" => sqs::answer(&response),
            "sns" => sns::answer(&response),
            _ => eventbridge::answer(&response),
        };
        match answer {
            Ok(accepted) => Ok(accepted),
            Err(refusal) => refusal.into_result(call.name, &response, credentials),
        }
    }
}

/// What a service answered instead of accepting: its error code and message.
struct Refusal {
    code: Option<String>,
    message: String,
}

impl Refusal {
    /// The attempt's failure, named by the code (or, without one, the HTTP status), with no
    /// credential in its text; or, for a 5xx or 429 without a code sluice knows, the response
    /// itself, read like any receiver's.
    fn into_result(
        self,
        service: &str,
        response: &Response,
        credentials: Option<&DestinationCredentials>,
    ) -> Result<Response, Failure> {
        let kind = match self.code.as_deref() {
            Some(code) => match kind_of(code) {
                ErrorKind::Invalid if super::refused_for_size(&self.message) => ErrorKind::TooLarge,
                kind => kind,
            },
            None => match response.status {
                401 | 403 => ErrorKind::BrokerAuth,
                404 => ErrorKind::BrokerNotFound,
                413 => ErrorKind::TooLarge,
                _ => ErrorKind::Other,
            },
        };
        // A 5xx (or a 429) the service gave no throttling code for is kept as its status: the
        // governor and the evidence read it as any receiver's.
        if kind == ErrorKind::Other && (response.status >= 500 || response.status == 429) {
            return Ok(Response {
                status: response.status,
                retry_after: None,
                body: response.body.clone(),
            });
        }
        let mut message = match (&self.code, kind) {
            // An auth refusal's text may echo what was signed: the code says enough.
            (Some(code), ErrorKind::BrokerAuth) => format!("{service}: {code}"),
            (Some(code), _) => format!("{service}: {code}: {}", self.message),
            (None, _) => format!("{service}: HTTP {}: {}", response.status, self.message),
        };
        for secret in credentials.into_iter().flat_map(|c| {
            [&c.access_key_id, &c.secret_access_key, &c.session_token]
                .into_iter()
                .flatten()
        }) {
            message = message.replace(secret.as_str(), "<hidden>");
        }
        Err(Failure { kind, message })
    }
}

/// The failure kind of an AWS error code (the `Code` of a query-protocol error, the `__type`
/// of a JSON one, an EventBridge entry's `ErrorCode`).
fn kind_of(code: &str) -> ErrorKind {
    match code {
        "ThrottlingException"
        | "Throttling"
        | "RequestThrottled"
        | "ThrottledException"
        | "TooManyRequestsException"
        | "RequestLimitExceeded"
        | "KMSThrottlingException"
        | "KMSThrottling" => ErrorKind::Throttled,
        "InvalidClientTokenId"
        | "SignatureDoesNotMatch"
        | "AccessDenied"
        | "AccessDeniedException"
        | "UnrecognizedClientException"
        | "IncompleteSignature"
        | "MissingAuthenticationToken"
        | "ExpiredToken"
        | "ExpiredTokenException"
        | "AuthorizationError"
        | "InvalidSecurity"
        | "NotAuthorized"
        | "KMSAccessDenied"
        | "KMSAccessDeniedException" => ErrorKind::BrokerAuth,
        "AWS.SimpleQueueService.NonExistentQueue"
        | "QueueDoesNotExist"
        | "NonExistentQueue"
        | "NotFound"
        | "NotFoundException"
        | "ResourceNotFoundException" => ErrorKind::BrokerNotFound,
        "RequestEntityTooLarge" | "RequestSizeTooLarge" | "MessageTooLong" => ErrorKind::TooLarge,
        "InvalidParameterValue"
        | "InvalidParameter"
        | "InvalidParameterException"
        | "InvalidParameterCombination"
        | "MissingParameter"
        | "ValidationException"
        | "ValidationError"
        | "InvalidMessageContents"
        | "InvalidAttributeName"
        | "InvalidAttributeValue"
        | "AWS.SimpleQueueService.InvalidBatchEntryId"
        | "MalformedDetail"
        | "InvalidArgument"
        | "InvalidArgumentException" => ErrorKind::Invalid,
        _ => ErrorKind::Other,
    }
}

/// Whether a queue URL or topic ARN names a FIFO one.
fn is_fifo(name: &str) -> bool {
    name.ends_with(".fifo")
}

/// The message attributes of an SQS or SNS message: the Standard Webhooks headers over the
/// body's bytes and the event type, the trace context when asked for, then the endpoint's own
/// headers while they fit in the ten attributes a message may carry.
fn attributes<'a>(target: &'a Target, signed: &'a Signed<'_>) -> Vec<(&'a str, String)> {
    let mut out: Vec<(&str, String)> = vec![
        (crate::signing::WEBHOOK_ID, signed.message_id.to_owned()),
        (
            crate::signing::WEBHOOK_TIMESTAMP,
            signed.timestamp_s.to_string(),
        ),
        (crate::signing::WEBHOOK_SIGNATURE, signed.signature.clone()),
        ("webhook-event-type", signed.event_type.to_owned()),
    ];
    out.extend(signed.trace_headers().map(|(n, v)| (n, v.to_owned())));
    for (name, value) in &target.headers {
        if out.len() >= MOST_ATTRIBUTES {
            break;
        }
        if let Ok(v) = value.to_str()
            && !v.is_empty()
            && attribute_name(name.as_str())
            && !out.iter().any(|(n, _)| *n == name.as_str())
        {
            out.push((name.as_str(), v.to_owned()));
        }
    }
    out
}

/// Whether SQS and SNS take `name` as a message attribute's: letters, digits, `_`, `-` and
/// `.`, at most 256, not starting with AWS's own prefixes. (A header that is not one is left
/// out rather than have the service refuse every message.)
fn attribute_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    (1..=256).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..")
        && !lower.starts_with("aws.")
        && !lower.starts_with("amazon.")
}

/// The code and message of a JSON-protocol error (`{"__type": "…#Code", "message": …}`).
fn json_refusal(response: &Response) -> Refusal {
    let v: serde_json::Value = serde_json::from_slice(&response.body).unwrap_or_default();
    if v.is_null() {
        // Some refusals (of the signature, before the service reads the call) come as the
        // query protocol's XML whatever the call's protocol.
        let body = String::from_utf8_lossy(&response.body);
        return Refusal {
            code: xml_text(&body, "Code"),
            message: xml_text(&body, "Message").unwrap_or_default(),
        };
    }
    let code = v["__type"]
        .as_str()
        .or(v["code"].as_str())
        .or(v["Code"].as_str())
        .map(|t| t.rsplit('#').next().unwrap_or(t).to_owned());
    let message = v["message"]
        .as_str()
        .or(v["Message"].as_str())
        .unwrap_or_default()
        .to_owned();
    Refusal { code, message }
}

/// The text of the first `<tag>…</tag>` in an XML answer (the query protocol's answers are
/// small and flat enough that this is all the XML read there is).
fn xml_text(body: &str, tag: &str) -> Option<String> {
    let start = body.find(&format!("<{tag}>"))? + tag.len() + 2;
    let end = start + body[start..].find(&format!("</{tag}>"))?;
    Some(
        body[start..end]
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: u16, body: &str) -> Response {
        Response {
            status,
            retry_after: None,
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn codes_name_their_kinds() {
        assert_eq!(kind_of("ThrottlingException"), ErrorKind::Throttled);
        assert_eq!(kind_of("RequestThrottled"), ErrorKind::Throttled);
        assert_eq!(kind_of("SignatureDoesNotMatch"), ErrorKind::BrokerAuth);
        assert_eq!(kind_of("QueueDoesNotExist"), ErrorKind::BrokerNotFound);
        assert_eq!(kind_of("NotFound"), ErrorKind::BrokerNotFound);
        assert_eq!(kind_of("InvalidParameterValue"), ErrorKind::Invalid);
        assert_eq!(kind_of("SomethingNew"), ErrorKind::Other);
    }

    /// SQS's and SNS's size refusals come with codes any bad parameter gets: `too_large`
    /// only when the text says it is the size.
    #[test]
    fn a_generic_code_is_too_large_only_when_its_text_says_so() {
        let kind = |code: &str, message: &str| {
            let r = response(400, "");
            let refusal = Refusal {
                code: Some(code.into()),
                message: message.into(),
            };
            refusal.into_result("AWS", &r, None).unwrap_err().kind
        };
        let sqs = "One or more parameters are invalid. Reason: Message must be shorter than \
                   262144 bytes.";
        assert_eq!(kind("InvalidParameterValue", sqs), ErrorKind::TooLarge);
        let sns = "Invalid parameter: Message too long";
        assert_eq!(kind("InvalidParameter", sns), ErrorKind::TooLarge);
        let events = "Total size of the entries in the request is over the limit.";
        assert_eq!(kind("ValidationException", events), ErrorKind::TooLarge);
        assert_eq!(
            kind(
                "InvalidParameterValue",
                "Value 1000 for parameter DelaySeconds is invalid."
            ),
            ErrorKind::Invalid
        );
        // Only a refusal its code already calls invalid is read.
        assert_eq!(kind("AccessDenied", sns), ErrorKind::BrokerAuth);
        assert_eq!(kind("SomethingNew", sqs), ErrorKind::Other);
    }

    #[test]
    fn a_json_error_is_read_from_its_type() {
        let r = response(
            400,
            r#"{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"no queue"}"#,
        );
        let refusal = json_refusal(&r);
        assert_eq!(refusal.code.as_deref(), Some("QueueDoesNotExist"));
        let f = refusal.into_result("Amazon SQS", &r, None).unwrap_err();
        assert_eq!(f.kind, ErrorKind::BrokerNotFound);
    }

    #[test]
    fn a_5xx_without_a_code_stays_a_status_and_credentials_never_show() {
        let r = response(503, "busy");
        let refusal = Refusal {
            code: None,
            message: "busy".into(),
        };
        assert_eq!(refusal.into_result("SNS", &r, None).unwrap().status, 503);
        let creds = DestinationCredentials {
            access_key_id: Some("AKIDLEAK".into()),
            ..Default::default()
        };
        let r = response(400, "");
        let refusal = Refusal {
            code: Some("InvalidParameterValue".into()),
            message: "bad AKIDLEAK".into(),
        };
        let f = refusal.into_result("SNS", &r, Some(&creds)).unwrap_err();
        assert!(!f.message.contains("AKIDLEAK"), "{}", f.message);
    }

    #[test]
    fn only_names_sqs_takes_become_attributes() {
        assert!(attribute_name("x-tenant"));
        assert!(attribute_name("webhook-id"));
        assert!(!attribute_name("x!bang"));
        assert!(!attribute_name("aws.reserved"));
        assert!(!attribute_name("Amazon.reserved"));
        assert!(!attribute_name("a..b"));
    }

    #[test]
    fn xml_text_reads_the_first_tag() {
        let body = "<ErrorResponse><Error><Code>NotFound</Code><Message>a &amp; b</Message></Error></ErrorResponse>";
        assert_eq!(xml_text(body, "Code").as_deref(), Some("NotFound"));
        assert_eq!(xml_text(body, "Message").as_deref(), Some("a & b"));
        assert_eq!(xml_text(body, "MessageId"), None);
    }
}
