//! AWS Signature Version 4 for one `POST /` with no query string: the only request the AWS
//! destinations make. Written over `hmac` and `sha2` (already sluice's) rather than pulling in
//! `aws-sigv4` and its dependencies for one shape of request; tested against AWS's published
//! SigV4 test-suite vectors here and against moto, which checks signatures, in
//! `tests/destinations/aws.rs`.
//!
//! The signing key (four HMACs over the secret, the date, the region and the service) is the
//! same for every call of a day: [`SigningKeys`] keeps it, so a call computes one HMAC, not five.

use std::collections::HashMap;
use std::sync::Mutex;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// Most signing keys kept: one per (secret access key, region, service) in use today, and
/// yesterday's until they are pushed out.
const MAX_KEYS: usize = 1024;

/// Derived signing keys, by the SHA-256 of what they are derived from (the secret itself is
/// not kept here). Bounded by [`MAX_KEYS`]; the lock is never held across an await.
#[derive(Default)]
pub(super) struct SigningKeys {
    keys: Mutex<HashMap<[u8; 32], [u8; 32]>>,
}

impl SigningKeys {
    /// The signing key of `secret_access_key` on `date` (`20150830`) for `region` and
    /// `service`: the kept one, or derived and kept.
    fn get(&self, secret_access_key: &str, date: &str, region: &str, service: &str) -> [u8; 32] {
        let mut id = Sha256::new();
        for part in [secret_access_key, date, region, service] {
            id.update((part.len() as u64).to_be_bytes());
            id.update(part.as_bytes());
        }
        let id: [u8; 32] = id.finalize().into();
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(key) = keys.get(&id) {
            return *key;
        }
        let key = derive(secret_access_key, date, region, service);
        if keys.len() >= MAX_KEYS {
            // Mostly other days' keys, which no call needs again.
            keys.clear();
        }
        keys.insert(id, key);
        key
    }
}

/// SigV4's signing key: `HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service),
/// "aws4_request")`.
fn derive(secret_access_key: &str, date: &str, region: &str, service: &str) -> [u8; 32] {
    let mut key = hmac(
        format!("AWS4{secret_access_key}").as_bytes(),
        date.as_bytes(),
    );
    for part in [region, service, "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    key
}

/// Whose request it is.
pub(super) struct Signer<'a> {
    pub access_key_id: &'a str,
    pub secret_access_key: &'a str,
    pub session_token: Option<&'a str>,
    pub region: &'a str,
    /// The signing name: `sqs`, `sns`, `events`.
    pub service: &'a str,
}

impl Signer<'_> {
    /// The headers to add to a `POST /` to `host` carrying `headers` (lower-case names, each
    /// signed) and `body`, at `amz_date` (`20150830T123600Z`): `x-amz-date`, the session token
    /// when there is one, and `authorization`. The signing key comes from `keys`.
    pub(super) fn sign(
        &self,
        keys: &SigningKeys,
        host: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        amz_date: &str,
    ) -> Vec<(&'static str, String)> {
        let mut signed: Vec<(&str, &str)> = headers.to_vec();
        signed.push(("host", host));
        signed.push(("x-amz-date", amz_date));
        if let Some(t) = self.session_token {
            signed.push(("x-amz-security-token", t));
        }
        signed.sort_by(|a, b| a.0.cmp(b.0));
        let names = signed.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(";");
        let mut canonical = String::from("POST\n/\n\n");
        for (name, value) in &signed {
            canonical.push_str(name);
            canonical.push(':');
            canonical.push_str(value.trim());
            canonical.push('\n');
        }
        canonical.push('\n');
        canonical.push_str(&names);
        canonical.push('\n');
        canonical.push_str(&hex(&Sha256::digest(body)));

        let date = &amz_date[..8];
        let scope = format!("{date}/{}/{}/aws4_request", self.region, self.service);
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
            hex(&Sha256::digest(canonical.as_bytes()))
        );
        let key = keys.get(self.secret_access_key, date, self.region, self.service);
        let signature = hex(&hmac(&key, to_sign.as_bytes()));
        let mut out = vec![
            ("x-amz-date", amz_date.to_owned()),
            (
                "authorization",
                format!(
                    "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={names}, Signature={signature}",
                    self.access_key_id
                ),
            ),
        ];
        if let Some(t) = self.session_token {
            out.push(("x-amz-security-token", t.to_owned()));
        }
        out
    }
}

/// Epoch milliseconds as SigV4's basic ISO 8601 time, `20150830T123600Z`.
pub(super) fn amz_date(ms: i64) -> String {
    let text = crate::clock::rfc3339(ms); // 2015-08-30T12:36:00.000Z
    format!(
        "{}Z",
        text[..19].replace(['-', ':'], "") // 20150830T123600
    )
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes any key");
    mac.update(data);
    mac.finalize().into_bytes().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The credentials of AWS's SigV4 test suite.
    fn suite() -> Signer<'static> {
        Signer {
            access_key_id: "AKIDEXAMPLE",
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            session_token: None,
            region: "us-east-1",
            service: "service",
        }
    }

    fn authorization(headers: &[(&'static str, String)]) -> String {
        headers
            .iter()
            .find(|(n, _)| *n == "authorization")
            .map(|(_, v)| v.clone())
            .unwrap()
    }

    /// The suite's `post-vanilla` (a `POST /` without a body).
    #[test]
    fn the_suites_post_vanilla() {
        let h = suite().sign(
            &SigningKeys::default(),
            "example.amazonaws.com",
            &[],
            b"",
            "20150830T123600Z",
        );
        assert_eq!(
            authorization(&h),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date, \
             Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"
        );
    }

    /// The suite's `post-x-www-form-urlencoded`.
    #[test]
    fn the_suites_post_x_www_form_urlencoded() {
        let h = suite().sign(
            &SigningKeys::default(),
            "example.amazonaws.com",
            &[("content-type", "application/x-www-form-urlencoded")],
            b"Param1=value1",
            "20150830T123600Z",
        );
        assert_eq!(
            authorization(&h),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date, \
             Signature=ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"
        );
    }

    #[test]
    fn a_session_token_is_signed_and_sent() {
        let mut s = suite();
        s.session_token = Some("TOKEN");
        let h = s.sign(
            &SigningKeys::default(),
            "example.amazonaws.com",
            &[],
            b"",
            "20150830T123600Z",
        );
        assert!(authorization(&h).contains("SignedHeaders=host;x-amz-date;x-amz-security-token"));
        assert!(h.contains(&("x-amz-security-token", "TOKEN".to_owned())));
    }

    /// AWS's worked example of deriving a signing key (secret `wJalr…EXAMPLEKEY`, 2012-02-15,
    /// us-east-1, iam).
    #[test]
    fn the_derived_key_is_awss_example() {
        let key = derive(
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            "20120215",
            "us-east-1",
            "iam",
        );
        assert_eq!(
            hex(&key),
            "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"
        );
    }

    #[test]
    fn a_kept_key_is_the_derived_one_and_changes_with_the_date() {
        let keys = SigningKeys::default();
        let secret = suite().secret_access_key;
        let today = keys.get(secret, "20150830", "us-east-1", "sqs");
        assert_eq!(today, derive(secret, "20150830", "us-east-1", "sqs"));
        assert_eq!(keys.get(secret, "20150830", "us-east-1", "sqs"), today);
        assert_eq!(
            keys.keys.lock().unwrap().len(),
            1,
            "kept, not derived again"
        );
        let tomorrow = keys.get(secret, "20150831", "us-east-1", "sqs");
        assert_ne!(tomorrow, today);
        assert_eq!(tomorrow, derive(secret, "20150831", "us-east-1", "sqs"));
        assert_ne!(keys.get(secret, "20150830", "us-east-1", "sns"), today);
        assert_ne!(keys.get("another", "20150830", "us-east-1", "sqs"), today);
    }

    #[test]
    fn the_keys_kept_are_bounded() {
        let keys = SigningKeys::default();
        for n in 0..MAX_KEYS + 10 {
            keys.get(&format!("secret-{n}"), "20150830", "us-east-1", "sqs");
        }
        assert!(keys.keys.lock().unwrap().len() <= MAX_KEYS);
    }

    #[test]
    fn the_date_is_basic_iso_8601() {
        assert_eq!(amz_date(1_440_938_160_000), "20150830T123600Z");
    }
}
