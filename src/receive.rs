//! `sluice receive`: a webhook receiver for trying sluice out. It prints each webhook it gets
//! and whether its signature verifies against the endpoint's secret (Standard Webhooks, ±5
//! minutes of clock skew), and answers 204.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::any;
use tokio::net::TcpListener;

/// Receive on `addr` until the process ends, checking signatures against `secret` if given.
pub async fn print_forever(
    addr: SocketAddr,
    secret: Option<crate::signing::Secret>,
) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    println!("receiving webhooks on http://{}/", listener.local_addr()?);
    let secret = Arc::new(secret);
    let app = Router::new().fallback(any(move |headers: HeaderMap, body: Bytes| {
        let secret = secret.clone();
        async move {
            let get = |name: &str| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned()
            };
            let (id, ts, sig) = (
                get("webhook-id"),
                get("webhook-timestamp"),
                get("webhook-signature"),
            );
            let verdict = match (secret.as_ref(), ts.parse::<i64>()) {
                (Some(secret), Ok(ts)) => {
                    let skew = (crate::clock::now_ms() / 1000 - ts).abs();
                    if skew > 300 {
                        "signature timestamp too old".to_owned()
                    } else if crate::signing::verify(secret, &id, ts, &body, &sig) {
                        "signature verified".to_owned()
                    } else {
                        "SIGNATURE INVALID".to_owned()
                    }
                }
                (Some(_), Err(_)) => "no webhook-timestamp".to_owned(),
                (None, _) => "signature not checked (no --secret)".to_owned(),
            };
            println!("{id} {}: {}", verdict, String::from_utf8_lossy(&body));
            StatusCode::NO_CONTENT
        }
    }));
    axum::serve(listener, app).await
}
