//! A Google Cloud Pub/Sub destination as the API takes it (`pubsub`): a project, a topic, an
//! optional `endpoint_url` (an emulator) judged by the egress guard like a receiver's URL, and
//! a service account's key (write-only) whose `token_uri` the guard judges too.

use super::checks::check_destination_of;
use crate::api::AppState;
use crate::delivery::oauth2::ServiceAccountKey;
use crate::model::{Destination, PUBSUB_ENDPOINT};
use crate::web::problem::Problem;

/// Largest service account key taken, bytes (Google's are about 2.3 KiB).
const MOST_KEY_BYTES: usize = 16 * 1024;

fn refuse<T>(field: &str, why: &str) -> Result<T, Problem> {
    Err(Problem::unprocessable(
        &format!("destination.{field}"),
        format!("destination.{field} {why}"),
    ))
}

/// Check a `pubsub` destination's fields.
pub(super) async fn check(
    state: &AppState,
    endpoint_url: Option<String>,
    project_id: Option<String>,
    topic: Option<String>,
) -> Result<Destination, Problem> {
    let Some(project_id) = project_id else {
        return refuse("project_id", "is required for pubsub");
    };
    // Google's rule: 6 to 30 lower-case letters, digits and hyphens, starting with a letter.
    let project_ok = (6..=30).contains(&project_id.len())
        && project_id.starts_with(|c: char| c.is_ascii_lowercase())
        && project_id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !project_id.ends_with('-');
    if !project_ok {
        return refuse(
            "project_id",
            "must be a project id: 6 to 30 lower-case letters, digits and hyphens, starting \
             with a letter",
        );
    }
    let Some(topic) = topic else {
        return refuse("topic", "is required for pubsub");
    };
    // Google's rule: 3 to 255 of letters, digits and - _ . ~ + %, starting with a letter,
    // not starting with goog.
    let topic_ok = (3..=255).contains(&topic.len())
        && topic.starts_with(|c: char| c.is_ascii_alphabetic())
        && !topic.starts_with("goog")
        && topic
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.~+%".contains(c));
    if !topic_ok {
        return refuse(
            "topic",
            "must be a topic id: 3 to 255 letters, digits and - _ . ~ + %, starting with a \
             letter (not goog)",
        );
    }
    let url = match &endpoint_url {
        Some(u) => check_destination_of(state, "destination.endpoint_url", u).await?,
        None => PUBSUB_ENDPOINT.to_owned(),
    };
    Ok(Destination::Pubsub {
        url,
        project_id,
        topic,
    })
}

/// A service account's key: one sluice can sign with, whose `token_uri` the egress guard
/// lets through. The problem never echoes the key.
pub(super) async fn check_key(state: &AppState, key: &str) -> Result<(), Problem> {
    const FIELD: &str = "destination.credentials.service_account_key";
    if key.len() > MOST_KEY_BYTES {
        return Err(Problem::unprocessable(
            FIELD,
            format!("{FIELD} must be at most {MOST_KEY_BYTES} bytes"),
        ));
    }
    let parsed = ServiceAccountKey::parse(key)
        .map_err(|why| Problem::unprocessable(FIELD, format!("{FIELD} {why}")))?;
    check_destination_of(state, FIELD, &parsed.token_uri).await?;
    Ok(())
}
