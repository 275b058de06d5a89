//! An endpoint's own TLS setting: the CA certificates trusted for it and the client certificate
//! sluice presents to it (with the one before the last rotation, during its overlap).

use serde::Serialize;

/// An endpoint's own TLS setting, stored as one JSON text column.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct EndpointTls {
    /// CA certificates (PEM) trusted for this endpoint beside the process-wide ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
    /// The client certificate and key presented when the endpoint asks for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientIdentity>,
    /// The client identity before the last rotation, still presented (when the current one is
    /// refused) until `previous_client_until_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_client: Option<ClientIdentity>,
    /// End of the client certificate's rotation overlap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_client_until_ms: Option<i64>,
}

impl EndpointTls {
    /// Nothing set: the process-wide trust, no client certificate.
    pub fn is_empty(&self) -> bool {
        self.ca_bundle.is_none() && self.client.is_none() && self.previous_client.is_none()
    }

    /// The stored form: JSON, or NULL when nothing is set.
    pub fn to_column(&self) -> Option<String> {
        (!self.is_empty()).then(|| serde_json::to_string(self).unwrap_or_default())
    }

    /// From the stored form (NULL or unreadable: nothing set).
    pub fn from_column(text: Option<&str>) -> Self {
        text.and_then(|t| serde_json::from_str(t).ok())
            .unwrap_or_default()
    }
}

/// A client certificate chain and its private key, both PEM: what sluice presents to an
/// endpoint that asks for one.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClientIdentity {
    /// The certificate, then any intermediates, PEM.
    pub certificate: String,
    /// The private key (PKCS#8, PKCS#1 or SEC1), PEM: a secret, never shown.
    pub key: String,
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("certificate", &self.certificate.len())
            .field("key", &"<hidden>")
            .finish()
    }
}
