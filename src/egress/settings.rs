//! How deliveries leave the host: extra CA certificates trusted for every endpoint, an HTTP
//! egress proxy with its no-proxy list, and the timeouts of OAuth2 token requests. Flags
//! `--egress-…`, variables `SLUICE_EGRESS_…`, and an `[egress]` table in the settings file.

use std::path::PathBuf;
use std::time::Duration;

use rustls::pki_types::CertificateDer;
use serde::Deserialize;

use crate::setting::{Problems, SettingProblem, shown};

/// The egress settings, validated.
#[derive(Debug, Clone, Default)]
pub struct EgressSettings {
    /// Extra CA certificates every endpoint's certificate may chain to (beside the system's),
    /// read from `--egress-ca-file` at start-up.
    pub extra_roots: Vec<CertificateDer<'static>>,
    /// The HTTP proxy deliveries go through, if any.
    pub proxy: Option<ProxySettings>,
    /// Timeouts of a request to an OAuth2 token endpoint.
    pub token: TokenTimeouts,
}

/// An HTTP proxy (CONNECT for https destinations, absolute-form requests for http ones).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxySettings {
    /// `http://host:port` (credentials in it are sent as Proxy-Authorization).
    pub url: url::Url,
    /// Destinations reached directly: host names (`example.com` also covers its subdomains,
    /// `.example.com` only them), IP addresses and CIDR networks; `*` for every one.
    pub no_proxy: Vec<String>,
}

/// Timeouts of a token request (each within 100ms–60s, connect within total).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenTimeouts {
    /// Connecting to the token endpoint.
    pub connect: Duration,
    /// The whole request, from connect to the last byte of the token.
    pub total: Duration,
}

impl Default for TokenTimeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(3),
            total: Duration::from_secs(10),
        }
    }
}

impl EgressSettings {
    /// Every value out of range: token timeouts 100ms–60s, connect no longer than total.
    pub fn problems(&self) -> Vec<SettingProblem> {
        let mut p = Problems::default();
        let range = Duration::from_millis(100)..=Duration::from_secs(60);
        let t = self.token;
        p.check(
            range.contains(&t.connect) && t.connect <= t.total,
            "token_connect_timeout",
            shown(t.connect),
            "100ms–60s and at most token-timeout",
        );
        p.check(
            range.contains(&t.total),
            "token_timeout",
            shown(t.total),
            "100ms–60s",
        );
        p.into_vec()
    }
}

crate::setting::raw_settings! {
    /// The raw egress settings (flags `--egress-…`; in the file, keys of an `[egress]` table
    /// without the prefix: `proxy`).
    #[derive(Debug, Clone, Default, Deserialize, clap::Args)]
    #[serde(deny_unknown_fields, rename_all = "kebab-case")]
    pub struct RawEgressSettings {
        /// PEM file of extra CA certificates trusted for every endpoint, beside the system's [default: none]
        #[arg(long = "egress-ca-file", env = "SLUICE_EGRESS_CA_FILE")]
        #[serde(alias = "ca_file")]
        pub ca_file: Option<PathBuf>,
        /// HTTP proxy for deliveries and token requests, http://host:port (https via CONNECT; SOCKS is not supported) [default: none, direct]
        #[arg(long = "egress-proxy", env = "SLUICE_EGRESS_PROXY")]
        pub proxy: Option<String>,
        /// Destinations reached without the proxy, comma-separated: hosts (example.com covers its subdomains), IPs, CIDR networks, or * [default: none]
        #[arg(
            long = "egress-no-proxy",
            env = "SLUICE_EGRESS_NO_PROXY",
            value_delimiter = ','
        )]
        #[serde(default, alias = "no_proxy")]
        pub no_proxy: Vec<String>,
        /// Connect timeout of an OAuth2 token request, 100ms–60s [default: 3s]
        #[arg(
            long = "egress-token-connect-timeout",
            env = "SLUICE_EGRESS_TOKEN_CONNECT_TIMEOUT"
        )]
        #[serde(alias = "token_connect_timeout")]
        pub token_connect_timeout: Option<String>,
        /// Total timeout of an OAuth2 token request, 100ms–60s [default: 10s]
        #[arg(long = "egress-token-timeout", env = "SLUICE_EGRESS_TOKEN_TIMEOUT")]
        #[serde(alias = "token_timeout")]
        pub token_timeout: Option<String>,
    }
}

impl RawEgressSettings {
    /// Parse every value (reading the CA file), adding each that does not parse to `errors`;
    /// the ranges are checked by [`EgressSettings::problems`].
    pub fn parse(self, errors: &mut Vec<String>) -> EgressSettings {
        let mut s = EgressSettings::default();
        if let Some(path) = &self.ca_file {
            match std::fs::read_to_string(path) {
                Ok(pem) => match crate::pem::parse_ca_bundle(&pem) {
                    Ok(certs) => s.extra_roots = certs,
                    Err(e) => errors.push(format!("egress-ca-file: {} {e}", path.display())),
                },
                Err(e) => errors.push(format!(
                    "egress-ca-file: cannot read {}: {e}",
                    path.display()
                )),
            }
        }
        if let Some(text) = &self.proxy {
            match parse_proxy(text) {
                Ok(url) => {
                    s.proxy = Some(ProxySettings {
                        url,
                        no_proxy: self
                            .no_proxy
                            .iter()
                            .map(|e| e.trim().to_owned())
                            .filter(|e| !e.is_empty())
                            .collect(),
                    })
                }
                Err(e) => errors.push(format!("egress-proxy: {e}")),
            }
        } else if !self.no_proxy.is_empty() {
            errors.push("egress-no-proxy: is set but egress-proxy is not".into());
        }
        crate::setting::parse_durations!(errors, "egress-", self;
            token_connect_timeout => s.token.connect,
            token_timeout => s.token.total,
        );
        s
    }
}

/// An HTTP proxy URL: `http://host:port` with an optional user and password; SOCKS and HTTPS
/// proxies are refused (the TLS to the destination runs inside the CONNECT tunnel either way).
pub fn parse_proxy(text: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(text.trim())
        .map_err(|e| format!("{text:?} is not a URL like http://proxy:3128: {e}"))?;
    if url.scheme() != "http" {
        return Err(format!(
            "{text:?}: only http:// proxies are supported (HTTP CONNECT); SOCKS and https:// \
             proxies are not"
        ));
    }
    if url.host().is_none() || url.path() != "/" || url.query().is_some() {
        return Err(format!(
            "{text:?} must be http://host:port and nothing more"
        ));
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxies_are_http_urls() {
        assert!(parse_proxy("http://proxy:3128").is_ok());
        assert!(parse_proxy("http://user:pw@10.0.0.1:3128/").is_ok());
        for bad in [
            "socks5://proxy:1080",
            "https://proxy",
            "proxy:3128",
            "http://p/x",
        ] {
            assert!(parse_proxy(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_no_proxy_list_needs_a_proxy_and_timeouts_their_range() {
        let mut errors = Vec::new();
        let raw = RawEgressSettings {
            no_proxy: vec!["example.com".into()],
            token_timeout: Some("2m".into()),
            ..Default::default()
        };
        let s = raw.parse(&mut errors);
        assert_eq!(errors, ["egress-no-proxy: is set but egress-proxy is not"]);
        assert_eq!(s.problems().len(), 1, "{:?}", s.problems());
    }
}
