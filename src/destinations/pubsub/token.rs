//! A service account's access token: a JWT (RS256, signed with the key's `private_key`)
//! exchanged at the key's `token_uri` (RFC 7523's `jwt-bearer` grant), through the HTTP
//! clients and so the egress guard, and kept per key until a minute before it expires.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::delivery::{Clients, ErrorKind, Failure, Phases, Target};

/// The scope asked for.
const SCOPE: &str = "https://www.googleapis.com/auth/pubsub";
/// A token is fetched again this long before it expires.
const EARLY: Duration = Duration::from_secs(60);

/// What sluice reads of a service account's JSON key.
#[derive(Deserialize)]
pub struct ServiceAccountKey {
    /// `service_account`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The account, the token's issuer.
    pub client_email: String,
    /// Its RSA key, PKCS #8 PEM.
    pub private_key: String,
    /// The key's id (the JWT's `kid`).
    #[serde(default)]
    pub private_key_id: Option<String>,
    /// Where tokens are fetched.
    pub token_uri: String,
}

impl ServiceAccountKey {
    /// The key, or why it is not one sluice can sign with (never echoing the key).
    pub fn parse(text: &str) -> Result<ServiceAccountKey, String> {
        let key: ServiceAccountKey = serde_json::from_str(text).map_err(|_| {
            "is not a service account's JSON key (type, client_email, private_key, token_uri)"
                .to_owned()
        })?;
        if key.kind != "service_account" {
            return Err("must be a key of type service_account".into());
        }
        key.signer()?;
        Ok(key)
    }

    fn signer(&self) -> Result<ring::signature::RsaKeyPair, String> {
        match PrivateKeyDer::from_pem_slice(self.private_key.as_bytes()) {
            Ok(PrivateKeyDer::Pkcs8(der)) => {
                ring::signature::RsaKeyPair::from_pkcs8(der.secret_pkcs8_der())
                    .map_err(|_| "private_key must be an RSA key (PKCS #8 PEM)".to_owned())
            }
            _ => Err("private_key must be an RSA key (PKCS #8 PEM)".into()),
        }
    }

    /// The signed assertion for a token, issued at `now_s`.
    fn assertion(&self, now_s: i64) -> Result<String, String> {
        let mut header = serde_json::json!({ "alg": "RS256", "typ": "JWT" });
        if let Some(kid) = &self.private_key_id {
            header["kid"] = kid.clone().into();
        }
        let claims = serde_json::json!({
            "iss": self.client_email, "scope": SCOPE, "aud": self.token_uri,
            "iat": now_s, "exp": now_s + 3600,
        });
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signer = self.signer()?;
        let mut signature = vec![0; signer.public().modulus_len()];
        signer
            .sign(
                &ring::signature::RSA_PKCS1_SHA256,
                &ring::rand::SystemRandom::new(),
                signing_input.as_bytes(),
                &mut signature,
            )
            .map_err(|_| "could not sign the token request".to_owned())?;
        Ok(format!(
            "{signing_input}.{}",
            URL_SAFE_NO_PAD.encode(signature)
        ))
    }
}

/// A key's token and until when it is used, behind a lock of the key's own: attempts needing
/// a new one wait for the one fetch (single flight), and other keys never wait for it.
type Slot = Arc<tokio::sync::Mutex<Option<(String, Instant)>>>;

/// Tokens by the SHA-256 of the key they were fetched with.
#[derive(Default)]
pub(super) struct Tokens {
    by_key: Mutex<HashMap<[u8; 32], Slot>>,
}

fn key_id(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

impl Tokens {
    /// A token for `key`: the kept one, or a new one from its `token_uri`.
    pub(super) async fn bearer(
        &self,
        clients: &Clients,
        target: &Target,
        key: &str,
        deadline: Instant,
        phases: &mut Phases,
    ) -> Result<String, Failure> {
        let slot = {
            let mut by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
            if by_key.len() > 10_000 {
                by_key.clear();
            }
            by_key.entry(key_id(key)).or_default().clone()
        };
        // Waiting here is bounded by the attempt's deadline, like every step of it.
        let mut kept = slot.lock().await;
        if let Some((token, until)) = kept.as_ref()
            && Instant::now() < *until
        {
            return Ok(token.clone());
        }
        let refused = |message: String| Failure {
            kind: ErrorKind::TokenEndpoint,
            message: format!("Google token endpoint: {message}"),
        };
        let account = ServiceAccountKey::parse(key).map_err(refused)?;
        let token_uri = reqwest::Url::parse(&account.token_uri)
            .map_err(|e| refused(format!("token_uri: {e}")))?;
        let assertion = account
            .assertion(crate::clock::now_ms() / 1000)
            .map_err(refused)?;
        let body = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer")
            .append_pair("assertion", &assertion)
            .finish();
        let mut headers = HeaderMap::new();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        let clock = Instant::now();
        let mut token_phases = Phases::default();
        let answer = clients
            .post(
                target,
                &token_uri,
                headers,
                body.into_bytes(),
                deadline,
                &mut token_phases,
            )
            .await
            .map_err(|f| Failure {
                kind: if f.kind == ErrorKind::Refused {
                    ErrorKind::Refused
                } else {
                    ErrorKind::TokenEndpoint
                },
                message: format!("Google token endpoint {token_uri}: {}", f.message),
            })?;
        phases.token = clock.elapsed();
        phases.fetched_token = true;
        #[derive(Deserialize)]
        struct Answer {
            access_token: String,
            #[serde(default)]
            expires_in: Option<u64>,
        }
        let got: Answer = serde_json::from_slice(&answer.body)
            .ok()
            .filter(|_| answer.status == 200)
            .ok_or_else(|| {
                refused(format!(
                    "{token_uri} answered HTTP {} without a token",
                    answer.status
                ))
            })?;
        let lives = Duration::from_secs(got.expires_in.unwrap_or(3600));
        let until = Instant::now() + lives.saturating_sub(EARLY);
        *kept = Some((got.access_token.clone(), until));
        Ok(got.access_token)
    }

    /// Forget `token` of `key` (refused: revoked or rotated early).
    pub(super) async fn forget(&self, key: &str, token: &str) {
        let slot = {
            let by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
            by_key.get(&key_id(key)).cloned()
        };
        if let Some(slot) = slot {
            let mut kept = slot.lock().await;
            if kept.as_ref().is_some_and(|(t, _)| t == token) {
                *kept = None;
            }
        }
    }
}
