//! An endpoint's OAuth2 client credentials (RFC 6749 §4.4) as stored; fetching and caching its
//! tokens is [`crate::delivery::oauth2`]'s.

use serde::{Deserialize, Serialize};

/// How sluice authenticates to the token endpoint (RFC 6749 §2.3.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ClientAuth {
    /// HTTP Basic with the client id and secret (the default; every server must support it).
    #[default]
    Basic,
    /// `client_id` and `client_secret` in the form body.
    Post,
}

/// An endpoint's client credentials, as stored.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    /// The token endpoint (http or https; checked by the egress guard like a destination).
    pub token_url: String,
    /// The client id.
    pub client_id: String,
    /// The client secret: write-only, never shown or logged.
    pub client_secret: String,
    /// Space-separated scopes asked for, if any.
    #[serde(default)]
    pub scope: Option<String>,
    /// The audience (resource) asked for, if any (an extension many servers read).
    #[serde(default)]
    pub audience: Option<String>,
    /// How the client authenticates.
    #[serde(default)]
    pub auth: ClientAuth,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("token_url", &self.token_url)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<hidden>")
            .field("scope", &self.scope)
            .field("audience", &self.audience)
            .field("auth", &self.auth)
            .finish()
    }
}
