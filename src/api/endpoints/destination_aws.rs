//! The AWS destinations as the API takes them (`sqs`, `sns`, `eventbridge`): a region, the
//! queue, topic or bus, an optional `endpoint_url` judged by the egress guard like a
//! receiver's URL, and an access key (write-only).

use super::checks::check_destination_of;
use crate::api::AppState;
use crate::model::{Destination, aws_endpoint};
use crate::web::problem::Problem;

fn refuse<T>(field: &str, why: &str) -> Result<T, Problem> {
    Err(Problem::unprocessable(
        &format!("destination.{field}"),
        format!("destination.{field} {why}"),
    ))
}

/// An AWS destination's fields as given (the other types' refused already).
pub(super) struct AwsIn {
    /// `sqs`, `sns` or `eventbridge`.
    pub kind: &'static str,
    pub region: Option<String>,
    pub endpoint_url: Option<String>,
    pub queue_url: Option<String>,
    pub topic_arn: Option<String>,
    pub event_bus_name: Option<String>,
    pub source: Option<String>,
}

/// Check an `sqs`, `sns` or `eventbridge` destination (its credentials are checked with every
/// type's).
pub(super) async fn check(state: &AppState, d: AwsIn) -> Result<Destination, Problem> {
    let kind = d.kind;
    let service = match kind {
        "sqs" => "sqs",
        "sns" => "sns",
        _ => "events",
    };
    let Some(region) = d.region.clone() else {
        return refuse("region", &format!("is required for {kind}"));
    };
    let region_ok = (1..=32).contains(&region.len())
        && region
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !region.starts_with('-')
        && !region.ends_with('-');
    if !region_ok {
        return refuse(
            "region",
            "must be an AWS region: lower-case letters, digits and hyphens (us-east-1)",
        );
    }
    let url = match &d.endpoint_url {
        Some(u) => check_destination_of(state, "destination.endpoint_url", u).await?,
        None => aws_endpoint(service, &region),
    };
    let destination = match kind {
        "sqs" => {
            let Some(queue_url) = d.queue_url else {
                return refuse("queue_url", "is required for sqs");
            };
            check_queue_url(&queue_url)?;
            Destination::Sqs {
                url,
                queue_url,
                region,
            }
        }
        "sns" => {
            let Some(topic_arn) = d.topic_arn else {
                return refuse("topic_arn", "is required for sns");
            };
            let parts: Vec<&str> = topic_arn.split(':').collect();
            let name_ok = |n: &str| {
                (1..=256).contains(&n.len())
                    && n.chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            };
            if parts.len() != 6 || parts[0] != "arn" || parts[2] != "sns" || !name_ok(parts[5]) {
                return refuse(
                    "topic_arn",
                    "must be a topic's ARN (arn:aws:sns:REGION:ACCOUNT:NAME)",
                );
            }
            Destination::Sns {
                url,
                topic_arn,
                region,
            }
        }
        _ => {
            let Some(bus) = d.event_bus_name else {
                return refuse("event_bus_name", "is required for eventbridge");
            };
            let bus_ok = (1..=1600).contains(&bus.len())
                && bus
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '-' | '_' | ':'));
            if !bus_ok {
                return refuse(
                    "event_bus_name",
                    "must be an event bus's name or ARN (letters, digits and / . - _ :)",
                );
            }
            let source = d.source.unwrap_or_else(|| "sluice".to_owned());
            if source.is_empty()
                || source.len() > 256
                || source.starts_with("aws.")
                || source.chars().any(|c| c.is_control())
            {
                return refuse(
                    "source",
                    "must be 1 to 256 characters without control characters, not starting with \
                     aws. (AWS's own)",
                );
            }
            Destination::Eventbridge {
                url,
                event_bus_name: bus,
                region,
                source,
            }
        }
    };
    Ok(destination)
}

/// A queue URL: http or https, a host, and a path `/ACCOUNT/NAME` whose name SQS would take.
/// It is never connected to (the endpoint is), so the egress guard does not judge it.
fn check_queue_url(queue_url: &str) -> Result<(), Problem> {
    let why = "must be a queue's URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)";
    let Ok(u) = url::Url::parse(queue_url) else {
        return refuse("queue_url", why);
    };
    let segments: Vec<&str> = u.path().trim_matches('/').split('/').collect();
    let name = segments.last().copied().unwrap_or_default();
    let stem = name.strip_suffix(".fifo").unwrap_or(name);
    let ok = matches!(u.scheme(), "http" | "https")
        && u.host_str().is_some()
        && queue_url.len() <= 2048
        && segments.len() == 2
        && (1..=80).contains(&name.len())
        && !stem.is_empty()
        && stem
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'));
    if ok { Ok(()) } else { refuse("queue_url", why) }
}
