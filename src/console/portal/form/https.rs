//! The endpoint form's "HTTPS and authentication" section: the endpoint's own CA bundle, the
//! client certificate sluice presents and its key, and OAuth2 client credentials. The key and
//! the client secret are write-only: never shown, and a blank field keeps what is stored.

use maud::{Markup, html};

use super::{EndpointForm, FieldError};
use crate::api::endpoints::tls::OAuth2In;
use crate::model::{ClientAuth, Endpoint};
use crate::pem::shown_pem;

/// The section's fields, as the form holds them (blank: not set).
pub const FIELDS: [&str; 10] = [
    "tls_ca_bundle",
    "tls_client_certificate",
    "tls_client_key",
    "oauth2.token_url",
    "oauth2.client_id",
    "oauth2.client_secret",
    "oauth2.scope",
    "oauth2.audience",
    "oauth2.client_auth",
    "oauth2",
];

fn blank(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// Fill the section from what `e` has stored (never its key or client secret).
pub fn fill(form: &mut EndpointForm, e: &Endpoint) {
    form.tls_ca_bundle = e
        .tls
        .ca_bundle
        .as_deref()
        .map(shown_pem)
        .unwrap_or_default();
    form.tls_client_certificate = e
        .tls
        .client
        .as_ref()
        .map(|c| shown_pem(&c.certificate))
        .unwrap_or_default();
    if let Some(o) = &e.oauth2 {
        form.oauth2_token_url = o.token_url.clone();
        form.oauth2_client_id = o.client_id.clone();
        form.oauth2_scope = o.scope.clone().unwrap_or_default();
        form.oauth2_audience = o.audience.clone().unwrap_or_default();
        form.oauth2_client_auth = auth_name(o.auth).to_owned();
    }
}

fn auth_name(auth: ClientAuth) -> &'static str {
    match auth {
        ClientAuth::Basic => "basic",
        ClientAuth::Post => "post",
    }
}

/// The OAuth2 credentials the form asks for: none without a token URL; a blank secret is left
/// out (on an update the stored one is kept).
pub fn oauth2(form: &EndpointForm) -> Result<Option<OAuth2In>, FieldError> {
    let client_auth = match form.oauth2_client_auth.trim() {
        "" | "basic" => ClientAuth::Basic,
        "post" => ClientAuth::Post,
        _ => {
            return Err(FieldError {
                field: "oauth2.client_auth".into(),
                detail: "client authentication must be basic or post".into(),
            });
        }
    };
    let Some(token_url) = blank(&form.oauth2_token_url) else {
        return Ok(None);
    };
    Ok(Some(OAuth2In {
        token_url,
        client_id: form.oauth2_client_id.trim().to_owned(),
        client_secret: blank(&form.oauth2_client_secret),
        scope: blank(&form.oauth2_scope),
        audience: blank(&form.oauth2_audience),
        client_auth,
    }))
}

/// An update of a write-only pair: unchanged (`None`), removed (`Some(None)`) or set.
type PairUpdate = (Option<Option<String>>, Option<Option<String>>);

/// The client identity an update asks for: a blank certificate removes it; the certificate
/// stored, unchanged, with a blank key keeps it; anything else needs its key.
pub fn identity_update(
    form: &EndpointForm,
    current: Option<&str>,
) -> Result<PairUpdate, FieldError> {
    let certificate = blank(&form.tls_client_certificate);
    let key = blank(&form.tls_client_key);
    match (certificate, key) {
        (None, _) => Ok((Some(None), Some(None))),
        (Some(c), None) if current.map(str::trim) == Some(c.as_str()) => Ok((None, None)),
        (Some(_), None) => Err(FieldError {
            field: "tls_client_key".into(),
            detail: "a new client certificate needs its key".into(),
        }),
        (Some(c), Some(k)) => Ok((Some(Some(c)), Some(Some(k)))),
    }
}

/// `Some` when `text` is not blank.
pub fn optional(text: &str) -> Option<String> {
    blank(text)
}

/// A text area of the section (also the certificate rotation page's).
pub(crate) fn area(
    name: &str,
    label: &str,
    hint: &str,
    value: &str,
    error: Option<&FieldError>,
) -> Markup {
    let id = format!("f-{}", name.replace('.', "-"));
    let wrong = error.filter(|e| e.field == name);
    html! {
        label for=(id) { (label) " " span.hint { (hint) } }
        textarea id=(id) name=(name.replace('.', "_")) rows="3" spellcheck="false" { (value) }
        @if let Some(e) = wrong { p.field-error role="alert" { (e.detail) } }
    }
}

fn line(
    name: &str,
    label: &str,
    hint: &str,
    kind: &str,
    value: &str,
    error: Option<&FieldError>,
) -> Markup {
    let id = format!("f-{}", name.replace('.', "-"));
    let wrong = error.filter(|e| e.field == name);
    html! {
        label for=(id) { (label) " " span.hint { (hint) } }
        input id=(id) type=(kind) name=(name.replace('.', "_")) value=(value) autocomplete="off";
        @if let Some(e) = wrong { p.field-error role="alert" { (e.detail) } }
    }
}

/// How sluice authenticates to the token endpoint (RFC 6749 §2.3.1).
fn client_auth(values: &EndpointForm, error: Option<&FieldError>) -> Markup {
    let post = values.oauth2_client_auth.trim() == "post";
    let wrong = error.filter(|e| e.field == "oauth2.client_auth");
    html! {
        label for="f-oauth2-client_auth" {
            "OAuth2 client authentication "
            span.hint { "how the client id and secret reach the token URL" }
        }
        select id="f-oauth2-client_auth" name="oauth2_client_auth" {
            option value="basic" selected[!post] { "HTTP Basic (client_secret_basic)" }
            option value="post" selected[post] { "In the form body (client_secret_post)" }
        }
        @if let Some(e) = wrong { p.field-error role="alert" { (e.detail) } }
    }
}

/// The section, open when one of its fields is at fault.
pub fn section(values: &EndpointForm, error: Option<&FieldError>) -> Markup {
    let open = error.is_some_and(|e| FIELDS.contains(&e.field.as_str()));
    html! {
        details.https open[open] {
            summary { "HTTPS and authentication" }
            (area("tls_ca_bundle", "CA certificates (PEM)",
                "trusted for this endpoint beside the usual ones, for a receiver's or a broker's certificate a private CA signed; optional",
                &values.tls_ca_bundle, error))
            (area("tls_client_certificate", "Client certificate (PEM)",
                "presented when your receiver or broker asks for one (mTLS); optional",
                &values.tls_client_certificate, error))
            (area("tls_client_key", "Client key (PEM)",
                "write-only: never shown; blank keeps the stored key",
                "", error))
            (line("oauth2.token_url", "OAuth2 token URL",
                "client credentials: a bearer token goes with every webhook; optional", "url",
                &values.oauth2_token_url, error))
            (line("oauth2.client_id", "OAuth2 client id", "", "text", &values.oauth2_client_id, error))
            (line("oauth2.client_secret", "OAuth2 client secret",
                "write-only: never shown; blank keeps the stored secret", "password", "", error))
            (line("oauth2.scope", "OAuth2 scope", "space-separated; optional", "text", &values.oauth2_scope, error))
            (line("oauth2.audience", "OAuth2 audience", "optional", "text", &values.oauth2_audience, error))
            (client_auth(values, error))
        }
    }
}
