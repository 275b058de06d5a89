//! The JSON body extractor: malformed JSON, wrong types, unknown fields and oversized bodies
//! become problems that name the field at fault.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{StatusCode, header};
use serde::de::DeserializeOwned;

use super::error::Problem;

/// A JSON request body of type `T`.
pub struct Body<T>(pub T);

impl<S, T> FromRequest<S> for Body<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Problem> {
        let json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                let mime = v.split(';').next().unwrap_or("").trim();
                mime == "application/json" || mime.ends_with("+json")
            });
        if !json {
            return Err(Problem::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "expected Content-Type: application/json",
            ));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                Problem::new(StatusCode::PAYLOAD_TOO_LARGE, "request body too large")
            } else {
                Problem::new(StatusCode::BAD_REQUEST, format!("cannot read body: {e}"))
            }
        })?;
        parse(&bytes).map(Body)
    }
}

/// Parse JSON, naming the path of the offending field.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Problem> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            Problem::bad_request("body", format!("malformed JSON: {inner}"))
        } else {
            let field = if path == "." { "body".to_owned() } else { path };
            Problem::unprocessable(&field, inner.to_string())
        }
    })?;
    de.end()
        .map_err(|e| Problem::bad_request("body", format!("malformed JSON: {e}")))?;
    Ok(value)
}
