//! A handler that panics still answers: a 500 problem, an error log line with the panic's
//! message, and `sluice_http_panics_total` counted, instead of a connection closed without a
//! word, no access log line and nothing to alert on. It wraps every router sluice serves,
//! inside the access log, so the 500 is logged there too.

use std::any::Any;
use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use tower_http::catch_panic::CatchPanicLayer;

use crate::metrics::Metrics;
use crate::web::problem::Problem;

/// The text a panic was raised with (`panic!("…")` carries a `&str` or a `String`).
fn message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

/// `router` with every panic of its handlers answered as a 500 problem, logged and counted.
pub fn caught(router: Router, metrics: Arc<Metrics>) -> Router {
    router.layer(CatchPanicLayer::custom(
        move |panic: Box<dyn Any + Send>| {
            metrics.http_panics.inc();
            tracing::error!(
                target: "sluice::panic",
                panic = message(panic.as_ref()),
                "a request handler panicked; answered 500"
            );
            Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "sluice failed while answering this request (a bug, logged on the server); \
             nothing more was done with it",
            )
            .into_response()
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use axum::routing::get;
    use tower::ServiceExt;

    async fn boom() -> &'static str {
        panic!("boom at {}", 42)
    }

    #[tokio::test]
    async fn a_panicking_handler_answers_a_counted_500_problem() {
        let metrics = Arc::new(Metrics::default());
        let router = Router::new()
            .route("/boom", get(boom))
            .route("/fine", get(|| async { "fine" }));
        let router = caught(router, Arc::clone(&metrics));
        for _ in 0..2 {
            let request = Request::get("/boom").body(Body::empty()).unwrap();
            let response = router.clone().oneshot(request).await.unwrap();
            assert_eq!(response.status(), 500);
            assert_eq!(
                response.headers()["content-type"],
                "application/problem+json"
            );
            let body = axum::body::to_bytes(response.into_body(), 4096)
                .await
                .unwrap();
            let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(json["status"], 500);
        }
        let request = Request::get("/fine").body(Body::empty()).unwrap();
        let response = router.oneshot(request).await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(metrics.http_panics.get(), 2);
    }

    #[test]
    fn the_message_is_read_from_either_kind_of_payload() {
        assert_eq!(message(&"static"), "static");
        assert_eq!(message(&String::from("owned")), "owned");
        assert_eq!(message(&42), "a panic without a message");
    }
}
