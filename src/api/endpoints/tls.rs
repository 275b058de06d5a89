//! An endpoint's HTTPS settings as the API takes and shows them: its own CA bundle, the client
//! certificate sluice presents (mTLS; the key is write-only and rotates with an overlap, like
//! signing secrets), and OAuth2 client credentials (the client secret is write-only). Each is
//! checked before anything is stored; a problem names the field at fault. Certificates and keys
//! are kept re-encoded, without whatever text surrounded them, and a tenant's endpoints hold at
//! most [`MAX_TENANT_CERTIFICATE_BYTES`] of certificates between them.

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use utoipa::ToSchema;

use super::actions::record;
use super::checks::check_destination_of;
use crate::api::AppState;
use crate::api::auth::TenantAuth;
use crate::api::views::{EndpointOut, check_id};
use crate::delivery::tls::{self, IdentityError};
use crate::model::{ClientAuth, ClientIdentity, Credentials, Endpoint, EndpointTls};
use crate::web::problem::{ApiResult, Problem};

/// Most bytes of certificates (CA bundles and client certificates, as kept) one tenant's
/// endpoints hold between them: what bounds the PEM a page of endpoints reads and a
/// dispatcher keeps for the tenant, beside the per-field limit of 256 KiB.
pub(crate) const MAX_TENANT_CERTIFICATE_BYTES: u64 = 4 * 1024 * 1024;

/// OAuth2 client credentials (RFC 6749 §4.4) as written: sluice gets a token from `token_url`
/// and sends it as `Authorization: Bearer` with every attempt.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OAuth2In {
    /// The token endpoint (http or https; checked by the egress guard like the endpoint's URL).
    pub token_url: String,
    /// The client id, 1–256 visible ASCII characters.
    pub client_id: String,
    /// The client secret, 1–1024 visible ASCII characters: write-only, never shown again. On
    /// an update it may be left out to keep the stored one (the token URL and client id
    /// unchanged).
    #[serde(default)]
    pub client_secret: Option<String>,
    /// Space-separated scopes to ask for (at most 1024 characters).
    #[serde(default)]
    pub scope: Option<String>,
    /// The audience (resource) to ask for, sent as `audience` (at most 1024 characters).
    #[serde(default)]
    pub audience: Option<String>,
    /// How sluice authenticates to the token endpoint: `basic` (HTTP Basic, the default) or
    /// `post` (in the form body).
    #[serde(default)]
    pub client_auth: ClientAuth,
}

/// `POST /v1/endpoints/{id}/rotate-client-certificate`: the new certificate and key.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RotateClientCertificate {
    /// The new client certificate (PEM, then any intermediates).
    pub tls_client_certificate: String,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1): write-only.
    pub tls_client_key: String,
}

/// A CA bundle fit to trust, as it is kept (its certificates re-encoded, nothing else), or a
/// 422 naming `tls_ca_bundle`.
pub(crate) fn check_ca_bundle(pem: &str) -> Result<String, Problem> {
    tls::canonical_ca_bundle(pem)
        .map_err(|e| Problem::unprocessable("tls_ca_bundle", format!("tls_ca_bundle {e}")))
}

/// A client certificate and key that belong together, as they are kept (re-encoded, nothing
/// else), or a 422 naming the one at fault.
pub(crate) fn check_identity(certificate: &str, key: &str) -> Result<ClientIdentity, Problem> {
    let identity = ClientIdentity {
        certificate: certificate.to_owned(),
        key: key.to_owned(),
    };
    match tls::canonical_identity(&identity) {
        Ok(kept) => Ok(kept),
        Err(IdentityError::Certificate(why)) => Err(Problem::unprocessable(
            "tls_client_certificate",
            format!("tls_client_certificate {why}"),
        )),
        Err(IdentityError::Key(why)) => Err(Problem::unprocessable(
            "tls_client_key",
            format!("tls_client_key {why}"),
        )),
    }
}

/// The client identity a request sets: both parts or neither; `Some(None)` clears it.
pub(crate) fn identity_of(
    certificate: Option<Option<String>>,
    key: Option<Option<String>>,
) -> Result<Option<Option<ClientIdentity>>, Problem> {
    match (certificate, key) {
        (None, None) => Ok(None),
        (Some(None), Some(None)) => Ok(Some(None)),
        (Some(Some(c)), Some(Some(k))) => check_identity(&c, &k).map(|i| Some(Some(i))),
        (Some(Some(_)), _) => Err(Problem::unprocessable(
            "tls_client_key",
            "tls_client_key must be given with tls_client_certificate",
        )),
        (_, _) => Err(Problem::unprocessable(
            "tls_client_certificate",
            "tls_client_certificate must be given with tls_client_key (null clears both)",
        )),
    }
}

/// The bytes of certificates an endpoint's TLS setting counts against its tenant's cap.
pub(crate) fn certificate_bytes(t: &EndpointTls) -> u64 {
    let chain = |c: &Option<ClientIdentity>| c.as_ref().map_or(0, |c| c.certificate.len());
    (t.ca_bundle.as_ref().map_or(0, String::len) + chain(&t.client) + chain(&t.previous_client))
        as u64
}

/// Refuse a change that grows the certificates endpoint `e` holds (from `before` bytes) when
/// its tenant's endpoints would then hold more than [`MAX_TENANT_CERTIFICATE_BYTES`]; the
/// problem names `field`. A change that adds nothing passes, so a tenant over the cap can still
/// edit everything else.
pub(crate) async fn check_certificate_room(
    state: &AppState,
    e: &Endpoint,
    before: u64,
    field: &str,
) -> Result<(), Problem> {
    let after = certificate_bytes(&e.tls);
    if after <= before {
        return Ok(());
    }
    let others = state
        .store
        .tenant_certificate_bytes(&e.tenant_id, &e.id)
        .await?;
    if others + after <= MAX_TENANT_CERTIFICATE_BYTES {
        return Ok(());
    }
    Err(Problem::unprocessable(
        field,
        format!(
            "{field} would bring the certificates kept for this tenant's endpoints (CA bundles \
             and client certificates) to {} bytes: at most {MAX_TENANT_CERTIFICATE_BYTES} \
             (4 MiB) are kept for one tenant",
            others + after
        ),
    ))
}

fn visible(field: &str, text: &str, min: usize, max: usize) -> Result<(), Problem> {
    let ok = (min..=max).contains(&text.len()) && text.bytes().all(|b| (0x20..0x7f).contains(&b));
    match ok {
        true => Ok(()),
        false => Err(Problem::unprocessable(
            field,
            format!("{field} must be {min}–{max} visible ASCII characters"),
        )),
    }
}

/// Check OAuth2 credentials; `stored` supplies the secret an update leaves out.
pub(crate) async fn check_oauth2(
    state: &AppState,
    given: OAuth2In,
    stored: Option<&Credentials>,
) -> Result<Credentials, Problem> {
    let token_url = check_destination_of(state, "oauth2.token_url", &given.token_url).await?;
    visible("oauth2.client_id", &given.client_id, 1, 256)?;
    let secret = match (given.client_secret, stored) {
        (Some(secret), _) => secret,
        (None, Some(s)) if s.token_url == token_url && s.client_id == given.client_id => {
            s.client_secret.clone()
        }
        (None, _) => {
            return Err(Problem::unprocessable(
                "oauth2.client_secret",
                "oauth2.client_secret is required (it may be left out only to keep the stored \
                 one, with the same token_url and client_id)",
            ));
        }
    };
    visible("oauth2.client_secret", &secret, 1, 1024)?;
    if let Some(scope) = &given.scope {
        visible("oauth2.scope", scope, 1, 1024)?;
    }
    if let Some(audience) = &given.audience {
        visible("oauth2.audience", audience, 1, 1024)?;
    }
    Ok(Credentials {
        token_url,
        client_id: given.client_id,
        client_secret: secret,
        scope: given.scope,
        audience: given.audience,
        auth: given.client_auth,
    })
}

/// Present a new client certificate: the one it replaces is still presented, when the receiver
/// refuses the new one, until `previous_tls_client_certificate_until` (the rotation overlap), so
/// a receiver that has not yet trusted the new certificate keeps receiving.
#[utoipa::path(post, path = "/v1/endpoints/{id}/rotate-client-certificate", tag = "endpoints",
    operation_id = "rotateEndpointClientCertificate", security(("tenant" = [])),
    params(("id" = String, Path, description = "`ep_…`")),
    request_body = RotateClientCertificate,
    responses((status = 200, body = EndpointOut),
        (status = "4XX", body = Problem,
            content_type = "application/problem+json"),
    ))]
pub(crate) async fn rotate_client_certificate(
    State(state): State<AppState>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
    crate::api::Body(req): crate::api::Body<RotateClientCertificate>,
) -> ApiResult<Json<EndpointOut>> {
    let e = rotate_identity(
        &state,
        &tenant.id,
        &id,
        &req.tls_client_certificate,
        &req.tls_client_key,
    )
    .await?;
    Ok(Json(EndpointOut::new(e, false)))
}

/// Give `tenant`'s endpoint `id` a new client identity, the current one kept for the overlap
/// (the JSON route and the console).
pub(crate) async fn rotate_identity(
    state: &AppState,
    tenant: &str,
    id: &str,
    certificate: &str,
    key: &str,
) -> ApiResult<Endpoint> {
    check_id("endpoint", id)?;
    let mut e = state.store.endpoint(Some(tenant), id).await?;
    let identity = check_identity(certificate, key)?;
    let before = certificate_bytes(&e.tls);
    let now = crate::clock::now_ms();
    let until = now + state.settings.rotation_overlap.as_millis() as i64;
    let previous = e.tls.client.replace(identity);
    let detail = match &previous {
        Some(_) => format!(
            "client certificate rotated; the previous one is also presented until {}",
            crate::clock::rfc3339(until)
        ),
        None => "client certificate set".to_owned(),
    };
    e.tls.previous_client_until_ms = previous.as_ref().map(|_| until);
    e.tls.previous_client = previous;
    check_certificate_room(state, &e, before, "tls_client_certificate").await?;
    e.updated_at_ms = now;
    state.store.update_endpoint(&e).await?;
    if let Some(ctx) = &state.dispatcher {
        ctx.reload_endpoint(&e.id);
    }
    record(state, &e, "client_certificate_rotated", detail).await;
    Ok(e)
}
