//! `GET /v1/endpoints/{id}/jwks.json`: the endpoint's `v1a` public keys as a JSON Web Key Set,
//! without a token (they are public, and a receiver fetches them from its own code): the key
//! signing now and, during a rotation's overlap, the one still signing beside it; never the one
//! whose overlap ended; empty while only `v1` (HMAC) keys sign. A receiver caches the set and
//! fetches it again when no key of it verifies.

use axum::extract::{Path, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use crate::api::AppState;
use crate::api::views::{check_id, public_keys};
use crate::signing::jwks::{JwkSet, key_set};
use crate::web::problem::{ApiResult, Problem};

/// How long a receiver may keep the set: well within a rotation's overlap.
const MAX_AGE_S: u32 = 300;

/// The endpoint's public signing keys (JWKS, RFC 7517; Ed25519 keys per RFC 8037).
#[utoipa::path(get, path = "/v1/endpoints/{id}/jwks.json", operation_id = "getEndpointJwks",
    tag = "endpoints",
    params(("id" = String, Path, description = "`ep_…`")),
    responses((status = 200, body = JwkSet, content_type = "application/jwk-set+json"),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn jwks(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    check_id("endpoint", &id)?;
    let e = state.store.endpoint(None, &id).await?;
    // An endpoint signing with `v1` (HMAC) alone has an empty set: nothing public to verify.
    let keys = public_keys(&e, crate::clock::now_ms());
    let mut response = axum::Json(key_set(&keys)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/jwk-set+json"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_str(&format!("public, max-age={MAX_AGE_S}")).expect("ascii"),
    );
    Ok(response)
}
