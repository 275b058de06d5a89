//! What the API enforces beyond a field's type, stated in its OpenAPI document: ranges,
//! lengths, patterns, cursors, header names. The derives describe types; the checks in the
//! handlers refuse more (`lane_size` 1–10000, an event type's characters, a cursor's prefix),
//! and a client generated from the document, or a fuzzer, should know that before it asks.
//! Each rule here restates one check, next to the constant or function it mirrors; a test
//! keeps every rule attached to a property or parameter that exists.
//!
//! What no schema can say stays in the descriptions: a destination must resolve to an address
//! the egress guard allows, PEM must parse, `until` must follow `since`, two header names may
//! not differ only in case.

use serde_json::{Map, Value, json};

use crate::ids;
use crate::model::{MAX_BURST, MAX_PER_SECOND, MIN_PER_SECOND};

/// What this installation allows, where the document depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The operator's caps on an endpoint's timeouts, milliseconds: connect, read, total.
    pub timeout_caps_ms: [u64; 3],
    /// The longest portal link lifetime, seconds.
    pub link_ttl_s: u32,
}

impl Default for Limits {
    fn default() -> Self {
        let caps = crate::dispatcher::DispatchSettings::default().timeout_caps;
        Self {
            timeout_caps_ms: [caps.connect, caps.read, caps.total].map(|d| d.as_millis() as u64),
            link_ttl_s: super::portal_links::PortalLinkSettings::default().ttl_s(),
        }
    }
}

/// An event type: `check_event_type`.
const EVENT_TYPE: &str = r"^[A-Za-z0-9._:-]{1,256}$";
/// An event type filter: an event type, a prefix pattern (`order.*`) or `*` (`check_event_types`).
const EVENT_FILTER: &str = r"^(\*|[A-Za-z0-9._:-]{1,256}|[A-Za-z0-9._:-]{1,256}\.\*)$";
/// Free text: no control characters but newlines and tabs (`check_text`).
const TEXT: &str = r"^[^\u0000-\u0008\u000b-\u001f\u007f-\u009f]*$";
/// A tenant's name: one line, no control characters, not only white space.
const NAME: &str = concat!(
    r"^[^\u0000-\u001f\u007f-\u009f]*",
    r"[^\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]",
    r"[^\u0000-\u001f\u007f-\u009f]*$"
);
/// A header name (RFC 9110 token): what `HeaderName` takes.
const HEADER_NAME: &str = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$";
/// A header value an endpoint may set: visible ASCII, spaces and tabs.
const HEADER_VALUE: &str = r"^[\t\u0020-\u007e]*$";

/// `length` visible ASCII characters or spaces (OAuth2 fields: `visible`).
fn visible(min: usize, max: usize) -> String {
    format!(r"^[\u0020-\u007e]{{{min},{max}}}$")
}

/// A cursor that is an id with `prefix` (`ep_`, `msg_`, `ten_`), at most 64 characters of
/// letters, digits and `_` (`PageQuery::after_id`).
fn id_cursor(prefix: &str) -> String {
    format!("^{prefix}[0-9A-Za-z_]{{0,{}}}$", 64 - prefix.len())
}

/// `[Ww][Ee]…`: `text` in any case (ECMA 262 patterns have no case-insensitive flag).
fn caseless(text: &str) -> String {
    text.chars()
        .map(|c| match (c.to_ascii_uppercase(), c.to_ascii_lowercase()) {
            (u, l) if u != l => format!("[{u}{l}]"),
            _ if c == '-' => r"\-".to_owned(),
            _ => c.to_string(),
        })
        .collect()
}

/// The header names an endpoint may not set (`check_headers`), in any case.
fn refused_header_names() -> String {
    let names: Vec<String> = super::endpoints::checks::REFUSED_HEADERS
        .iter()
        .map(|n| caseless(n))
        .collect();
    format!("^({}.*|{})$", caseless("webhook-"), names.join("|"))
}

/// Rules for the properties of request bodies: (schema, property, what to add).
fn body_rules(limits: &Limits) -> Vec<(&'static str, &'static str, Value)> {
    let [connect, read, total] = limits.timeout_caps_ms;
    let url = json!({ "format": "uri", "maxLength": 2048 });
    let headers = json!({
        "maxProperties": super::endpoints::checks::MAX_HEADERS,
        "propertyNames": { "pattern": HEADER_NAME, "not": { "pattern": refused_header_names() } },
        "additionalProperties": { "type": "string", "maxLength": 4096, "pattern": HEADER_VALUE },
    });
    let event_types = json!({ "maxItems": 100, "items": { "pattern": EVENT_FILTER } });
    let description = json!({ "maxLength": 1000, "pattern": TEXT });
    let mut rules = Vec::new();
    for schema in ["CreateEndpoint", "UpdateEndpoint"] {
        rules.extend([
            (schema, "url", url.clone()),
            (schema, "event_types", event_types.clone()),
            (schema, "description", description.clone()),
            (schema, "headers", headers.clone()),
            (
                schema,
                "lane_size",
                json!({ "minimum": 1, "maximum": 10000 }),
            ),
            (
                schema,
                "latency_ceiling_ms",
                json!({ "minimum": 100, "maximum": 3_600_000 }),
            ),
            (
                schema,
                "connect_timeout_ms",
                json!({ "minimum": 1, "maximum": connect }),
            ),
            (
                schema,
                "read_timeout_ms",
                json!({ "minimum": 1, "maximum": read }),
            ),
            (
                schema,
                "total_timeout_ms",
                json!({ "minimum": 1, "maximum": total }),
            ),
        ]);
    }
    rules.extend([
        ("OAuth2In", "token_url", url.clone()),
        (
            "OAuth2In",
            "client_id",
            json!({ "pattern": visible(1, 256) }),
        ),
        (
            "OAuth2In",
            "client_secret",
            json!({ "pattern": visible(1, 1024) }),
        ),
        ("OAuth2In", "scope", json!({ "pattern": visible(1, 1024) })),
        (
            "OAuth2In",
            "audience",
            json!({ "pattern": visible(1, 1024) }),
        ),
        (
            "RateLimitIn",
            "per_second",
            json!({ "minimum": MIN_PER_SECOND, "maximum": MAX_PER_SECOND }),
        ),
        (
            "RateLimitIn",
            "burst",
            json!({ "minimum": 1, "maximum": MAX_BURST }),
        ),
        (
            "DestinationIn",
            "max_len",
            json!({ "minimum": 1, "maximum": super::endpoints::destination::MAX_LEN_MOST }),
        ),
        (
            "DestinationIn",
            "region",
            json!({ "pattern": "^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$" }),
        ),
        ("OperationalWebhook", "url", url),
        ("OperationalWebhook", "description", description),
        (
            "DisableEndpoint",
            "reason",
            json!({ "maxLength": 500, "pattern": TEXT }),
        ),
        (
            "CreateMessage",
            "event_type",
            json!({ "pattern": EVENT_TYPE }),
        ),
        (
            "CreateTenant",
            "name",
            json!({ "maxLength": 200, "pattern": NAME }),
        ),
        (
            "CreatePortalLink",
            "expires_in_s",
            json!({ "minimum": 1, "maximum": limits.link_ttl_s }),
        ),
    ]);
    let weight = crate::fairness::WEIGHTS;
    for schema in ["CreateTenant", "UpdateTenant"] {
        rules.extend([
            (
                schema,
                "weight",
                json!({ "minimum": weight.start(), "maximum": weight.end() }),
            ),
            (
                schema,
                "max_share",
                json!({ "exclusiveMinimum": 0, "maximum": 1 }),
            ),
        ]);
    }
    rules
}

/// Rules for query and header parameters: (path, parameter, what to add).
fn parameter_rules() -> Vec<(&'static str, &'static str, Value)> {
    let deliveries = json!({ "pattern": ids::row_id_pattern(ids::DELIVERY) });
    vec![
        (
            "/v1/endpoints",
            "after",
            json!({ "pattern": id_cursor("ep_") }),
        ),
        (
            "/v1/tenants",
            "after",
            json!({ "pattern": id_cursor("ten_") }),
        ),
        (
            "/v1/messages",
            "after",
            json!({ "pattern": id_cursor("msg_") }),
        ),
        (
            "/v1/messages",
            "event_type",
            json!({ "pattern": EVENT_FILTER }),
        ),
        (
            "/v1/messages",
            "Idempotency-Key",
            json!({ "pattern": r"^[\u0021-\u007e]{1,256}$" }),
        ),
        ("/v1/messages/{id}/deliveries", "after", deliveries.clone()),
        ("/v1/endpoints/{id}/deliveries", "after", deliveries.clone()),
        ("/v1/dead-letters", "after", deliveries),
        (
            "/v1/endpoints/{id}/attempts",
            "after",
            json!({ "pattern": ids::row_id_pattern(ids::ATTEMPT) }),
        ),
    ]
}

/// Add every rule to `doc` (an OpenAPI document as JSON). A rule whose target is missing is
/// skipped here, and caught by the test below.
pub fn apply(doc: &mut Value, limits: &Limits) {
    for (schema, property, rule) in body_rules(limits) {
        if let Some(p) = doc.pointer_mut(&format!(
            "/components/schemas/{schema}/properties/{property}"
        )) {
            merge(p, &rule);
        }
    }
    for (path, name, rule) in parameter_rules() {
        let Some(item) = doc.pointer_mut(&format!("/paths/{}", path.replace('/', "~1"))) else {
            continue;
        };
        for op in item.as_object_mut().into_iter().flat_map(Map::values_mut) {
            let parameters = op.get_mut("parameters").and_then(Value::as_array_mut);
            for p in parameters.into_iter().flatten() {
                if p["name"] != name {
                    continue;
                }
                if let Some(schema) = p.get_mut("schema") {
                    merge(schema, &rule);
                }
            }
        }
    }
}

/// Add `rule`'s keywords to a property's schema (into its objects: `items` keeps its `type`);
/// one that may be null (`oneOf` of null and a reference) gets them on its non-null branch.
fn merge(schema: &mut Value, rule: &Value) {
    if let Some(branches) = schema.get_mut("oneOf").and_then(Value::as_array_mut) {
        for b in branches.iter_mut().filter(|b| b["type"] != "null") {
            merge(b, rule);
        }
        return;
    }
    let (Some(target), Some(rule)) = (schema.as_object_mut(), rule.as_object()) else {
        return;
    };
    for (k, v) in rule {
        match target.get_mut(k) {
            Some(existing) if existing.is_object() && v.is_object() => merge(existing, v),
            _ => {
                target.insert(k.clone(), v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document() -> Value {
        serde_json::to_value(super::super::openapi_document()).unwrap()
    }

    /// Every rule lands on a property or parameter that exists: a rename cannot drop one.
    #[test]
    fn every_rule_has_its_target() {
        let doc = document();
        for (schema, property, _) in body_rules(&Limits::default()) {
            let at = format!("/components/schemas/{schema}/properties/{property}");
            assert!(doc.pointer(&at).is_some(), "{at}");
        }
        for (path, name, _) in parameter_rules() {
            let item = &doc["paths"][path];
            let found = item
                .as_object()
                .into_iter()
                .flat_map(Map::values)
                .any(|op| {
                    op["parameters"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|p| p["name"] == name)
                });
            assert!(found, "{path} has no parameter {name}");
        }
    }

    #[test]
    fn the_served_document_states_the_rules() {
        let mut doc = document();
        let limits = Limits {
            timeout_caps_ms: [1000, 2000, 3000],
            link_ttl_s: 60,
        };
        apply(&mut doc, &limits);
        let props = &doc["components"]["schemas"]["CreateEndpoint"]["properties"];
        assert_eq!(props["lane_size"]["maximum"], 10000);
        assert_eq!(props["total_timeout_ms"]["maximum"], 3000);
        let link = &doc["components"]["schemas"]["CreatePortalLink"]["properties"];
        assert_eq!(link["expires_in_s"]["maximum"], 60);
        let oauth2 = &doc["components"]["schemas"]["OAuth2In"]["properties"];
        assert_eq!(oauth2["client_id"]["pattern"], visible(1, 256));
        let after = doc["paths"]["/v1/dead-letters"]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "after")
            .unwrap();
        assert_eq!(after["schema"]["pattern"], ids::row_id_pattern("dlv"));
    }

    #[test]
    fn refused_header_names_are_matched_in_any_case() {
        let refused = refused_header_names();
        assert!(
            refused.starts_with(r"^([Ww][Ee][Bb][Hh][Oo][Oo][Kk]\-.*|"),
            "{refused}"
        );
        assert!(refused.contains("[Cc][Oo][Nn][Tt][Ee][Nn][Tt]\\-[Tt][Yy][Pp][Ee]"));
    }
}
