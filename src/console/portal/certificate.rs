//! The page that rotates an endpoint's client certificate with an overlap: the new certificate
//! and its key (write-only), through the API's own rotation.

use maud::{Markup, html};

use super::form::FieldError;
use super::form::https::area;
use crate::model::Endpoint;

/// The rotation form: a new client certificate and its key (write-only).
#[derive(Debug, Default, Clone, serde::Deserialize)]
#[serde(default)]
pub struct RotateForm {
    /// The new certificate (PEM).
    pub tls_client_certificate: String,
    /// Its key (PEM).
    pub tls_client_key: String,
}

fn rotate_page(
    e: &Endpoint,
    csrf: &str,
    values: &RotateForm,
    error: Option<&FieldError>,
) -> Markup {
    html! {
        section.narrow {
            h1 { "Rotate the client certificate" }
            p.url { strong { (e.url) } }
            p { "The new certificate is presented first. Until the overlap ends, when your receiver \
                 refuses it the current one is presented instead, so you can trust the new one \
                 whenever you are ready." }
            form.endpoint method="post" action={"/console/portal/endpoints/" (e.id) "/client-certificate"} {
                (crate::console::page::csrf_field(csrf))
                (area("tls_client_certificate", "New client certificate (PEM)", "then any intermediates",
                    &values.tls_client_certificate, error))
                (area("tls_client_key", "Its key (PEM)", "write-only: never shown", "", error))
                div.actions {
                    button.primary type="submit" { "Rotate" }
                    a.button href={"/console/portal/endpoints/" (e.id)} { "Cancel" }
                }
            }
        }
    }
}

/// `GET /console/portal/endpoints/{id}/client-certificate`
pub async fn rotate_form(
    axum::extract::State(console): axum::extract::State<crate::console::Console>,
    portal: super::Portal,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<Markup, crate::console::page::ConsoleError> {
    let e = super::endpoints::endpoint_of(&console, &portal, &id).await?;
    let body = rotate_page(&e, &portal.csrf, &RotateForm::default(), None);
    Ok(portal.page("Rotate the client certificate", body))
}

/// `POST /console/portal/endpoints/{id}/client-certificate`: the API's rotation; its problems
/// come back next to the field.
pub async fn rotate(
    axum::extract::State(console): axum::extract::State<crate::console::Console>,
    portal: super::Portal,
    axum::extract::Path(id): axum::extract::Path<String>,
    crate::console::guard::CsrfForm(values): crate::console::guard::CsrfForm<RotateForm>,
) -> Result<axum::response::Response, crate::console::page::ConsoleError> {
    use axum::response::IntoResponse;
    let e = super::endpoints::endpoint_of(&console, &portal, &id).await?;
    let rotated = crate::api::endpoints::tls::rotate_identity(
        &console.app,
        &portal.tenant.id,
        &e.id,
        values.tls_client_certificate.trim(),
        values.tls_client_key.trim(),
    )
    .await;
    match rotated {
        Ok(e) => {
            let to = format!("/console/portal/endpoints/{}", e.id);
            Ok(axum::response::Redirect::to(&to).into_response())
        }
        Err(problem) => {
            let error = FieldError::from(problem);
            let body = rotate_page(&e, &portal.csrf, &values, Some(&error));
            let page = portal.page("Rotate the client certificate", body);
            Ok((axum::http::StatusCode::UNPROCESSABLE_ENTITY, page).into_response())
        }
    }
}
