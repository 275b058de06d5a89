//! An endpoint's `v1a` public keys as a JSON Web Key Set (RFC 7517), so a receiver fetches
//! what verifies its webhooks instead of pasting a key: each an `OKP` key on curve `Ed25519`
//! (RFC 8037), `x` its 32 bytes in unpadded base64url, and a `kid` that is its RFC 7638
//! thumbprint, so the same key has the same id wherever it is published.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::SigningKey;

/// One public key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Jwk {
    /// `OKP`.
    pub kty: &'static str,
    /// `Ed25519`.
    pub crv: &'static str,
    /// The public key, unpadded base64url.
    pub x: String,
    /// Its RFC 7638 thumbprint (SHA-256, unpadded base64url).
    pub kid: String,
    /// `sig`.
    #[serde(rename = "use")]
    pub use_: &'static str,
    /// `EdDSA`.
    pub alg: &'static str,
}

/// A JSON Web Key Set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct JwkSet {
    /// The keys, the one signing now first.
    pub keys: Vec<Jwk>,
}

/// The JWK of an Ed25519 public key.
pub fn jwk(public: &[u8]) -> Jwk {
    let x = URL_SAFE_NO_PAD.encode(public);
    // RFC 7638: the required members only, in lexicographic order, no whitespace.
    let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
    let kid = URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()));
    Jwk {
        kty: "OKP",
        crv: "Ed25519",
        x,
        kid,
        use_: "sig",
        alg: "EdDSA",
    }
}

/// The Ed25519 keys an endpoint signs with at `now_ms`: its `secret`, and its `previous` one
/// while its overlap runs (until `previous_until_ms`; never once it has ended).
pub fn signing_keys(
    secret: &str,
    previous: Option<&str>,
    previous_until_ms: Option<i64>,
    now_ms: i64,
) -> Vec<SigningKey> {
    let previous = previous.filter(|_| previous_until_ms.is_some_and(|until| until > now_ms));
    std::iter::once(secret)
        .chain(previous)
        .filter_map(|k| SigningKey::parse(k).ok())
        .filter(|k| matches!(k, SigningKey::V1a(_)))
        .collect()
}

/// The set of the Ed25519 keys among `keys` (HMAC keys have nothing public to publish).
pub fn key_set<'a>(keys: impl IntoIterator<Item = &'a SigningKey>) -> JwkSet {
    JwkSet {
        keys: keys
            .into_iter()
            .filter_map(|k| match k {
                SigningKey::V1a(k) => Some(jwk(k.public_bytes())),
                SigningKey::V1(_) => None,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8037, appendix A.2 and A.3: the example Ed25519 public key and its thumbprint.
    #[test]
    fn the_rfc_8037_example_key_has_its_thumbprint() {
        let public = URL_SAFE_NO_PAD
            .decode("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
            .unwrap();
        let k = jwk(&public);
        assert_eq!(k.x, "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo");
        assert_eq!(k.kid, "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k");
    }

    #[test]
    fn only_ed25519_keys_are_published_the_current_first() {
        let v1a = SigningKey::generate(super::super::Scheme::V1a);
        let v1 = SigningKey::generate(super::super::Scheme::V1);
        let other = SigningKey::generate(super::super::Scheme::V1a);
        let set = key_set([&v1a, &v1, &other]);
        assert_eq!(set.keys.len(), 2);
        let SigningKey::V1a(first) = &v1a else {
            unreachable!()
        };
        assert_eq!(set.keys[0], jwk(first.public_bytes()));
        assert_ne!(set.keys[0].kid, set.keys[1].kid);
    }
}
