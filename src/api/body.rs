//! The JSON body extractor: malformed JSON, wrong types, unknown fields and oversized bodies
//! become problems that name the field at fault.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use crate::web::deadline::BodyTimedOut;
use crate::web::problem::Problem;

/// A JSON request body of type `T`.
pub struct Body<T>(pub T);

impl<S, T> FromRequest<S> for Body<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Response> {
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
            )
            .into_response());
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if let Some(late) = BodyTimedOut::find_in(&e) {
                // The rest of the body may still be on its way: close rather than read it.
                let mut r = Problem::new(StatusCode::REQUEST_TIMEOUT, late.to_string())
                    .field("body")
                    .into_response();
                r.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
                r
            } else if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                Problem::new(StatusCode::PAYLOAD_TOO_LARGE, "request body too large")
                    .into_response()
            } else {
                Problem::new(StatusCode::BAD_REQUEST, format!("cannot read body: {e}"))
                    .into_response()
            }
        })?;
        parse(&bytes).map(Body).map_err(IntoResponse::into_response)
    }
}

/// Parse JSON, naming the path of the offending field. Every body is an object: serde would
/// otherwise read an array as a struct's fields in order (`["x",7]` as a tenant).
pub(super) fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Problem> {
    let well_formed = || serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok();
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return Err(if well_formed() {
            Problem::unprocessable("body", "the body must be a JSON object")
        } else {
            Problem::bad_request("body", "malformed JSON: the body must be a JSON object")
        });
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        // serde_json reports a value of the wrong kind where an enum belongs (a number for
        // `signature_scheme`) as a syntax error; well-formed JSON is a 422 on the field.
        if (inner.is_syntax() || inner.is_eof()) && !well_formed() {
            Problem::bad_request("body", format!("malformed JSON: {inner}"))
        } else if inner.is_syntax() {
            let field = field_at_fault(&path, "");
            Problem::unprocessable(
                &field,
                format!("{field} has a value of the wrong type: see the API's schema for it"),
            )
        } else {
            let message = inner.to_string();
            Problem::unprocessable(&field_at_fault(&path, &message), message)
        }
    })?;
    de.end()
        .map_err(|e| Problem::bad_request("body", format!("malformed JSON: {e}")))?;
    Ok(value)
}

/// The field a deserialisation error is about. serde reports a missing (or unknown) field at
/// the path of the object that lacks it, so the name comes from the message: a body without
/// `event_type` is `event_type`, a header table without a name is `headers.…`, never `body`.
fn field_at_fault(path: &str, message: &str) -> String {
    let named = ["missing field `", "unknown field `"]
        .iter()
        .find_map(|lead| message.strip_prefix(lead))
        .and_then(|rest| rest.split('`').next())
        .filter(|name| !name.is_empty());
    match (path, named) {
        (".", Some(name)) => name.to_owned(),
        (".", None) => "body".to_owned(),
        (path, Some(name)) if !path.ends_with(name) => format!("{path}.{name}"),
        (path, _) => path.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        name: String,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        event_type: String,
        inner: Option<Inner>,
        count: Option<u32>,
        scheme: Option<Kind>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    enum Kind {
        #[serde(rename = "v1")]
        V1,
    }

    fn field(json: &str) -> (u16, String) {
        let p = parse::<Outer>(json.as_bytes()).unwrap_err();
        (p.status, p.field.unwrap_or_default())
    }

    #[test]
    fn only_an_object_is_a_body() {
        for (json, status) in [
            (r#"["x", 7, null, null]"#, 422),
            ("null", 422),
            ("7", 422),
            (r#""event""#, 422),
            ("", 400),
            ("[1,", 400),
        ] {
            let p = parse::<Outer>(json.as_bytes()).unwrap_err();
            assert_eq!(
                (p.status, p.field.as_deref()),
                (status, Some("body")),
                "{json}"
            );
        }
        let ok = parse::<Outer>(br#" {"event_type":"a"}"#).unwrap();
        assert_eq!(ok.event_type, "a");
    }

    #[test]
    fn the_problem_names_the_field_at_fault() {
        assert_eq!(field(r#"{}"#), (422, "event_type".into()));
        assert_eq!(
            field(r#"{"event_type":"a","inner":{}}"#),
            (422, "inner.name".into())
        );
        assert_eq!(
            field(r#"{"event_type":"a","count":"x"}"#),
            (422, "count".into())
        );
        let (status, name) = field(r#"{"event_type":"a","colour":1}"#);
        assert_eq!((status, name.as_str()), (422, "colour"));
        assert_eq!(field(r#"{"event_type":"a""#), (400, "body".into()));
        assert_eq!(field(r#"[]"#), (422, "body".into()));
        assert_eq!(
            field(r#"{"event_type":"a","scheme":1}"#),
            (422, "scheme".into())
        );
        assert_eq!(
            field(r#"{"event_type":"a","scheme":["v1"]}"#),
            (422, "scheme".into())
        );
        assert_eq!(
            field(r#"{"event_type":"a","scheme":"v1""#),
            (400, "body".into())
        );
    }
}

/// A field that may be left out (`None`: keep), or given as `null` (`Some(None)`: back to the
/// default) or a value: `#[serde(default, with = "super::body::double_option")]`.
pub(super) mod double_option {
    use serde::{Deserialize, Deserializer};

    /// Present, `null` or not: `Some`.
    pub(crate) fn deserialize<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
    where
        D: Deserializer<'de>,
        T: Deserialize<'de>,
    {
        Option::<T>::deserialize(d).map(Some)
    }
}
