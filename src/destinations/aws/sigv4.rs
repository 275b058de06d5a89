//! AWS Signature Version 4 for one `POST /` with no query string: the only request the AWS
//! destinations make. Written over `hmac` and `sha2` (already sluice's) rather than pulling in
//! `aws-sigv4` and its dependencies for one shape of request; tested against AWS's published
//! SigV4 test-suite vectors here and against moto, which checks signatures, in
//! `tests/destinations/aws.rs`.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

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
    /// when there is one, and `authorization`.
    pub(super) fn sign(
        &self,
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
        let mut key = hmac(
            format!("AWS4{}", self.secret_access_key).as_bytes(),
            date.as_bytes(),
        );
        for part in [self.region, self.service, "aws4_request"] {
            key = hmac(&key, part.as_bytes());
        }
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

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes any key");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
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
        let h = suite().sign("example.amazonaws.com", &[], b"", "20150830T123600Z");
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
        let h = s.sign("example.amazonaws.com", &[], b"", "20150830T123600Z");
        assert!(authorization(&h).contains("SignedHeaders=host;x-amz-date;x-amz-security-token"));
        assert!(h.contains(&("x-amz-security-token", "TOKEN".to_owned())));
    }

    #[test]
    fn the_date_is_basic_iso_8601() {
        assert_eq!(amz_date(1_440_938_160_000), "20150830T123600Z");
    }
}
