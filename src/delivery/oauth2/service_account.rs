//! A service account's JSON key, as Google gives it, and the assertion of the JWT-bearer grant
//! (RFC 7523 §2.1) made with it: a JWT signed with the key's `private_key` (RS256), issued by
//! the account, addressed to its `token_uri`.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject;
use serde::Deserialize;

/// How long an assertion is valid: the most Google takes.
const ASSERTION_LIFETIME_S: i64 = 3600;

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

    /// The signed assertion asking for `scope`, issued at `now_s` (epoch seconds).
    pub(super) fn assertion(&self, scope: &str, now_s: i64) -> Result<String, String> {
        let mut header = serde_json::json!({ "alg": "RS256", "typ": "JWT" });
        if let Some(kid) = &self.private_key_id {
            header["kid"] = kid.clone().into();
        }
        let claims = serde_json::json!({
            "iss": self.client_email, "scope": scope, "aud": self.token_uri,
            "iat": now_s, "exp": now_s + ASSERTION_LIFETIME_S,
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
