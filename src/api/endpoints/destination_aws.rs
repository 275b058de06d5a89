//! The AWS destinations as the API takes them (`sqs`, `sns`, `eventbridge`): a region, the
//! queue, topic or bus, an optional `endpoint_url` judged by the egress guard like a
//! receiver's URL, and an access key (write-only).

use super::checks::check_destination_of;
use super::destination::{Checked, DestinationIn, DestinationType, credentials_of, only_for};
use crate::api::AppState;
use crate::model::{Destination, aws_endpoint};
use crate::web::problem::Problem;

fn refuse<T>(field: &str, why: &str) -> Result<T, Problem> {
    Err(Problem::unprocessable(
        &format!("destination.{field}"),
        format!("destination.{field} {why}"),
    ))
}

/// Check an `sqs`, `sns` or `eventbridge` destination.
pub(super) async fn check(state: &AppState, d: DestinationIn) -> Result<Checked, Problem> {
    let (kind, service) = match d.kind {
        DestinationType::Sqs => ("sqs", "sqs"),
        DestinationType::Sns => ("sns", "sns"),
        _ => ("eventbridge", "events"),
    };
    only_for(&d, kind)?;
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
    let credentials = match d.credentials {
        Some(c) => {
            if c.access_key_id.is_none() || c.secret_access_key.is_none() {
                return refuse(
                    "credentials.secret_access_key",
                    "and credentials.access_key_id are both required for AWS",
                );
            }
            if c.token.is_some() {
                return refuse("credentials.token", "applies only to nats");
            }
            Some(credentials_of(c)?)
        }
        None => None,
    };
    let destination = match d.kind {
        DestinationType::Sqs => {
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
        DestinationType::Sns => {
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
    Ok(Checked {
        destination,
        credentials: credentials.map(Some),
    })
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
