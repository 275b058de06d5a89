//! The console's settings: portal links, sessions, framing and cookies (flags
//! `--console-…`, variables `SLUICE_CONSOLE_…`, a `[console]` table in the settings file).

use std::time::Duration;

use serde::Deserialize;

use crate::api::portal_links::PortalLinkSettings;
use crate::setting::{Problems, SettingProblem, shown};

/// The console's settings, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSettings {
    /// How long a portal link can be opened (it also works only once); 1m–7d.
    pub link_ttl: Duration,
    /// How long a console session lasts after sign-in; 5m–30d.
    pub session_ttl: Duration,
    /// The CSP `frame-ancestors` value: `'none'` (the default; also `X-Frame-Options: DENY`),
    /// `'self'`, or space-separated origins allowed to embed the portal.
    pub frame_ancestors: String,
    /// Mark the console's cookies `Secure` (and `__Host-`); browsers keep Secure cookies from
    /// `http://localhost` and `http://127.0.0.1`, so only plain HTTP elsewhere needs `false`.
    pub secure_cookies: bool,
    /// Key signing the session cookies (at least 32 characters); without it one is generated
    /// and kept in the store's settings, shared by every process on that store.
    pub cookie_key: Option<String>,
    /// Public base URL of the console's host for portal links (`https://hooks.example.com`);
    /// without it links use the Host of the request that created them.
    pub public_url: Option<String>,
}

impl Default for ConsoleSettings {
    fn default() -> Self {
        Self {
            link_ttl: PortalLinkSettings::default().ttl,
            session_ttl: Duration::from_secs(8 * 3600),
            frame_ancestors: "'none'".to_owned(),
            secure_cookies: true,
            cookie_key: None,
            public_url: None,
        }
    }
}

impl ConsoleSettings {
    /// What `POST /v1/portal-links` (an API route) makes links with.
    pub fn portal_links(&self) -> PortalLinkSettings {
        PortalLinkSettings {
            ttl: self.link_ttl,
            public_url: self.public_url.clone(),
        }
    }

    /// Every value out of range: a link lasts 1m–7d, a session 5m–30d, and a cookie key has
    /// at least 32 characters (its length is shown, never the key).
    pub fn problems(&self) -> Vec<SettingProblem> {
        let mut p = Problems::default();
        let minute = Duration::from_secs(60);
        let day = Duration::from_secs(86_400);
        for (field, value, min, max, valid) in [
            ("link_ttl", self.link_ttl, minute, 7 * day, "1m–7d"),
            (
                "session_ttl",
                self.session_ttl,
                5 * minute,
                30 * day,
                "5m–30d",
            ),
        ] {
            p.check((min..=max).contains(&value), field, shown(value), valid);
        }
        if let Some(key) = &self.cookie_key {
            p.check(
                key.len() >= 32,
                "cookie_key",
                format_args!("a {}-character key", key.len()),
                "at least 32 characters long",
            );
        }
        p.into_vec()
    }
}

crate::setting::raw_settings! {
    /// The console's raw settings (flags `--console-…`, variables `SLUICE_CONSOLE_…`; in the file,
    /// keys of a `[console]` table without the prefix: `link-ttl`).
    #[derive(Debug, Clone, Default, Deserialize, clap::Args)]
    #[serde(deny_unknown_fields, rename_all = "kebab-case")]
    pub struct RawConsoleSettings {
        /// How long a portal link can be opened, once [default: 15m]
        #[arg(long = "console-link-ttl", env = "SLUICE_CONSOLE_LINK_TTL")]
        #[serde(alias = "link_ttl")]
        pub link_ttl: Option<String>,
        /// How long a console session lasts [default: 8h]
        #[arg(long = "console-session-ttl", env = "SLUICE_CONSOLE_SESSION_TTL")]
        #[serde(alias = "session_ttl")]
        pub session_ttl: Option<String>,
        /// Who may frame the portal: 'none', 'self' or origins like https://app.example.com [default: 'none']
        #[arg(
            long = "console-frame-ancestors",
            env = "SLUICE_CONSOLE_FRAME_ANCESTORS"
        )]
        #[serde(alias = "frame_ancestors")]
        pub frame_ancestors: Option<String>,
        /// Secure (HTTPS-only) console cookies: true or false [default: true]
        #[arg(long = "console-secure-cookies", env = "SLUICE_CONSOLE_SECURE_COOKIES")]
        #[serde(alias = "secure_cookies")]
        pub secure_cookies: Option<bool>,
        /// Key signing console session cookies, at least 32 characters [default: generated, kept in the store]
        #[arg(
            long = "console-cookie-key",
            env = "SLUICE_CONSOLE_COOKIE_KEY",
            hide_env_values = true
        )]
        #[serde(alias = "cookie_key")]
        pub cookie_key: Option<String>,
        /// Public base URL for portal links, e.g. https://hooks.example.com [default: the request's Host]
        #[arg(long = "console-public-url", env = "SLUICE_CONSOLE_PUBLIC_URL")]
        #[serde(alias = "public_url")]
        pub public_url: Option<String>,
    }
}

impl RawConsoleSettings {
    /// Parse every text value, adding each that does not parse to `errors` (its default is
    /// kept); the ranges are checked by [`ConsoleSettings::problems`].
    pub fn parse(self, errors: &mut Vec<String>) -> ConsoleSettings {
        let mut c = ConsoleSettings::default();
        crate::setting::parse_durations!(errors, "console-", self;
            link_ttl => c.link_ttl,
            session_ttl => c.session_ttl,
        );
        if let Some(text) = &self.frame_ancestors {
            match parse_frame_ancestors(text) {
                Ok(v) => c.frame_ancestors = v,
                Err(e) => errors.push(format!("console-frame-ancestors: {e}")),
            }
        }
        c.secure_cookies = self.secure_cookies.unwrap_or(true);
        c.cookie_key = self.cookie_key;
        if let Some(u) = self.public_url {
            let trimmed = u.trim_end_matches('/');
            match url::Url::parse(trimmed) {
                Ok(p) if matches!(p.scheme(), "http" | "https")
                    && p.host().is_some()
                    && p.query().is_none()
                    && p.fragment().is_none() => c.public_url = Some(trimmed.to_owned()),
                _ => errors.push(format!(
                    "console-public-url: {u:?} must be an http(s) URL like https://hooks.example.com"
                )),
            }
        }
        c
    }
}

/// Check a `frame-ancestors` value: `'none'`, `'self'`, or sources like `https://app.example.com`
/// or `https://*.example.com` (no paths, quotes or separators that could break the header).
pub fn parse_frame_ancestors(text: &str) -> Result<String, String> {
    let sources: Vec<&str> = text.split_whitespace().collect();
    if sources.is_empty() {
        return Err("empty: use 'none', 'self' or origins".into());
    }
    if sources.len() == 1 && sources[0] == "'none'" {
        return Ok("'none'".into());
    }
    for s in &sources {
        if *s == "'self'" {
            continue;
        }
        let rest = s
            .strip_prefix("https://")
            .or_else(|| s.strip_prefix("http://"))
            .ok_or_else(|| format!("{s:?}: expected 'none', 'self' or an http(s) origin"))?;
        let host = rest.strip_prefix("*.").unwrap_or(rest);
        let ok = !host.is_empty()
            && host.bytes().all(|b| {
                b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']')
            });
        if !ok {
            return Err(format!(
                "{s:?}: an origin is scheme://host[:port], nothing more"
            ));
        }
    }
    Ok(sources.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_settings_accept_their_edges() {
        let edge = |link: u64, session: u64| ConsoleSettings {
            link_ttl: Duration::from_secs(link),
            session_ttl: Duration::from_secs(session),
            cookie_key: Some("k".repeat(32)),
            ..ConsoleSettings::default()
        };
        assert_eq!(edge(60, 300).problems(), []);
        assert_eq!(edge(7 * 86_400, 30 * 86_400).problems(), []);
        let fields: Vec<_> = edge(59, 30 * 86_400 + 1)
            .problems()
            .into_iter()
            .map(|p| p.field)
            .collect();
        assert_eq!(fields, ["link_ttl", "session_ttl"]);
    }
}
