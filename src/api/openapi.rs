//! The OpenAPI 3.1 document, generated from the handlers' annotations as the router is built
//! (each route is registered together with its documentation, so the two cannot drift), and
//! served at `/openapi.json`.

use std::sync::OnceLock;

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// The document's fixed parts: title, version, security schemes.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "sluice",
        description = "A webhook dispatcher where one slow, dead or hostile endpoint never takes \
            delivery away from the others. Tenants authenticate with `Authorization: Bearer \
            <tenant token>`; the operator with the admin token. Errors are \
            `application/problem+json` naming the field at fault."
    ),
    modifiers(&Security),
    tags(
        (name = "tenants", description = "Operator only: tenants and their API tokens."),
        (name = "endpoints", description = "A tenant's webhook destinations and their evidence."),
        (name = "messages", description = "Events to deliver."),
        (name = "deliveries", description = "Deliveries and attempts."),
        (name = "dead letters", description = "What could not be delivered, and its replay."),
        (name = "operational webhook", description = "sluice's notices to the tenant."),
        (name = "operations", description = "Health, readiness, metrics, this document."),
    )
)]
pub struct ApiDoc;

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for (name, what) in [
            ("admin", "the operator's token"),
            ("tenant", "a tenant API token"),
        ] {
            components.add_security_scheme(
                name,
                SecurityScheme::Http(
                    HttpBuilder::new()
                        .scheme(HttpAuthScheme::Bearer)
                        .description(Some(what))
                        .build(),
                ),
            );
        }
    }
}

static DOCUMENT: OnceLock<String> = OnceLock::new();

/// Keep the finished document (the first router built sets it; every router is the same).
pub fn set_document(doc: &utoipa::openapi::OpenApi) {
    DOCUMENT.get_or_init(|| doc.to_json().unwrap_or_else(|_| "{}".to_owned()));
}

/// `GET /openapi.json`: this API's OpenAPI 3.1 document.
#[utoipa::path(get, path = "/openapi.json", tag = "operations",
    responses((status = 200, description = "the OpenAPI 3.1 document",
        content_type = "application/json")))]
pub async fn document() -> impl IntoResponse {
    let body = DOCUMENT.get().cloned().unwrap_or_else(|| "{}".to_owned());
    ([(header::CONTENT_TYPE, "application/json")], body)
}
