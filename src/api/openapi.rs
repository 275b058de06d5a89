//! The OpenAPI 3.1 document, generated from the handlers' annotations as the router is built
//! (each route is registered together with its documentation, so the two cannot drift), and
//! served at `/openapi.json`.

use std::sync::Arc;

use axum::Extension;
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

/// The finished document of one router, as served (each router documents exactly its routes:
/// `/metrics` is in it only where that listener serves it).
#[derive(Clone)]
pub struct Document(pub Arc<str>);

impl Document {
    /// Serialize `doc` once, with what the API enforces beyond types under this
    /// installation's `limits` ([`super::constraints`]).
    pub fn new(doc: &utoipa::openapi::OpenApi, limits: &super::constraints::Limits) -> Self {
        let mut value = serde_json::to_value(doc).unwrap_or_default();
        super::constraints::apply(&mut value, limits);
        Self(value.to_string().into())
    }
}

/// `GET /openapi.json`: this API's OpenAPI 3.1 document.
#[utoipa::path(get, path = "/openapi.json", operation_id = "getOpenApiDocument", tag = "operations",
    responses((status = 200, description = "the OpenAPI 3.1 document", body = Object,
        content_type = "application/json")))]
pub async fn document(Extension(Document(body)): Extension<Document>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// Client generators name a method after each operationId: every operation has one, no two
    /// share one, and each reads as a method name (`listEndpointDeliveries`, not `list`).
    #[test]
    fn every_operation_has_its_own_meaningful_operation_id() {
        let doc = serde_json::to_value(super::super::openapi_document()).unwrap();
        let mut seen = BTreeSet::new();
        let mut operations = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                operations += 1;
                let id = op["operationId"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{method} {path} has no operationId"));
                assert!(
                    seen.insert(id.to_owned()),
                    "{id} is used twice ({method} {path})"
                );
                let camel = id.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                    && id.chars().all(|c| c.is_ascii_alphanumeric())
                    && id.chars().any(|c| c.is_ascii_uppercase());
                assert!(camel, "{method} {path}: {id} is not a verbNoun name");
            }
        }
        assert_eq!(seen.len(), operations);
    }

    /// A path parameter is declared exactly where the path has a `{name}`, and nowhere else
    /// (a query parameter documented as a path one makes generators refuse the document).
    #[test]
    fn path_parameters_match_the_path_template() {
        let doc = serde_json::to_value(super::super::openapi_document()).unwrap();
        for (path, item) in doc["paths"].as_object().unwrap() {
            let in_template: BTreeSet<String> = path
                .split('{')
                .skip(1)
                .filter_map(|p| p.split('}').next())
                .map(str::to_owned)
                .collect();
            for (method, op) in item.as_object().unwrap() {
                let declared: BTreeSet<String> = op["parameters"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|p| p["in"] == "path")
                    .map(|p| p["name"].as_str().unwrap().to_owned())
                    .collect();
                assert_eq!(declared, in_template, "{method} {path}");
            }
        }
    }

    /// Every 2xx answer that has a body says what is in it (a schema, not an empty object).
    #[test]
    fn every_success_with_a_body_has_a_schema() {
        let doc = serde_json::to_value(super::super::openapi_document()).unwrap();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                for (status, response) in op["responses"].as_object().unwrap() {
                    if !status.starts_with('2') || status == "204" {
                        continue;
                    }
                    let content = response["content"]
                        .as_object()
                        .unwrap_or_else(|| panic!("{method} {path} {status}: no content"));
                    for (kind, media) in content {
                        assert!(
                            media.get("schema").is_some(),
                            "{method} {path} {status} {kind}: no schema"
                        );
                    }
                }
            }
        }
    }
}
