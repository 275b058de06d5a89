//! The SSRF guard: which destinations sluice may connect to, checked after DNS resolution.
//!
//! Two entry points cover every request. [`EgressPolicy::check_url`] runs before a request is built: it
//! refuses bad schemes and credentials and classifies IP-literal hosts, which never reach a resolver.
//! [`GuardedResolver`] is installed as the HTTP client's DNS resolver, so the connection goes only to
//! addresses that passed the check (no window for DNS rebinding between check and connect).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use url::{Host, Url};

pub mod embedded;
pub mod settings;

// The deny lists are the IANA IPv4 and IPv6 Special-Purpose Address Registries (RFC 6890 and
// its updates): every block whose "Globally Reachable" is False or N/A is refused, whole (the
// few globally reachable anycast services registered inside 192.0.0.0/24 and 2001::/23 go with
// their block: no webhook receiver lives there), plus multicast, the reserved 240.0.0.0/4 with
// the limited broadcast, 192.88.99.0/24 (the deprecated 6to4 relay anycast, RFC 7526) and
// 3fff::/20 (documentation, RFC 9637). Blocks that embed an IPv4 address (mapped, NAT64, 6to4,
// Teredo) are judged by that address (see `embedded`).

/// IPv4 ranges refused by default: (network, prefix length, what it is).
const DENY_V4: &[([u8; 4], u8, &str)] = &[
    ([0, 0, 0, 0], 8, "this network"),
    ([10, 0, 0, 0], 8, "private"),
    ([100, 64, 0, 0], 10, "shared address space"),
    ([127, 0, 0, 0], 8, "loopback"),
    ([169, 254, 0, 0], 16, "link-local"),
    ([172, 16, 0, 0], 12, "private"),
    ([192, 0, 0, 0], 24, "IETF protocol assignments"),
    ([192, 0, 2, 0], 24, "documentation"),
    ([192, 88, 99, 0], 24, "6to4 relay anycast (deprecated)"),
    ([192, 168, 0, 0], 16, "private"),
    ([198, 18, 0, 0], 15, "benchmarking"),
    ([198, 51, 100, 0], 24, "documentation"),
    ([203, 0, 113, 0], 24, "documentation"),
    ([224, 0, 0, 0], 4, "multicast"),
    ([240, 0, 0, 0], 4, "reserved"),
];

/// IPv6 ranges refused by default; the ones that embed an IPv4 address are handled apart.
const DENY_V6: &[(u128, u8, &str)] = &[
    (0, 128, "unspecified"),
    (1, 128, "loopback"),
    // The rest of ::/96 is the deprecated IPv4-compatible form: nothing legitimate lives there.
    (0, 96, "IPv4-compatible (deprecated)"),
    (0x0100 << 112, 64, "discard-only"),
    ((0x0100 << 112) | (1 << 64), 64, "dummy prefix"),
    // ORCHID (2001:10::/28), ORCHIDv2 (2001:20::/28), benchmarking (2001:2::/48) and the rest;
    // Teredo (2001::/32) is judged by the IPv4 addresses it carries before this is reached.
    (0x2001 << 112, 23, "IETF protocol assignments"),
    (0x3fff << 112, 20, "documentation"),
    (0x5f00 << 112, 16, "SRv6 SIDs"),
    (0xfc00 << 112, 7, "unique local"),
    (0xfe80 << 112, 10, "link-local"),
    (0xff00 << 112, 8, "multicast"),
    (0x2001_0db8 << 96, 32, "documentation"),
    // Reached only when the address is not a well-formed translation (see `embedded`).
    (
        embedded::NAT64_LOCAL.0,
        embedded::NAT64_LOCAL.1,
        "NAT64 local-use",
    ),
];

/// Names the deny-list range `ip` falls in, or `None` for a routable public address.
pub fn refused_range(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => {
            // 6to4, NAT64, Teredo, mapped and translated addresses are as safe as the IPv4
            // addresses they carry, and no safer.
            if let Some(v4s) = embedded::embedded_ipv4(v6) {
                return v4s.into_iter().find_map(refused_v4);
            }
            let bits = u128::from(v6);
            DENY_V6
                .iter()
                .find(|(net, len, _)| bits >> (128 - len) == net >> (128 - len))
                .map(|&(_, _, name)| name)
        }
    }
}

fn refused_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let bits = u32::from(ip);
    DENY_V4
        .iter()
        .find(|(net, len, _)| bits >> (32 - len) == u32::from_be_bytes(*net) >> (32 - len))
        .map(|&(_, _, name)| name)
}

/// True when `ip` is on the deny list (private, loopback, link-local, documentation, multicast, …).
pub fn is_refused(ip: IpAddr) -> bool {
    refused_range(ip).is_some()
}

/// Why a destination was not allowed.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    /// The URL's scheme is not `http` or `https`.
    #[error("destination refused: scheme {0:?} is not allowed (only http and https)")]
    Scheme(String),
    /// The URL has no host.
    #[error("destination refused: the URL has no host")]
    NoHost,
    /// The URL carries a user name or password.
    #[error("destination refused: credentials in the URL are not allowed")]
    Credentials,
    /// The host is, or resolves to, an address on the deny list.
    #[error("destination refused: {host} resolves to {addr} ({range}), which is not allowed")]
    Refused {
        /// The host as written in the URL.
        host: String,
        /// The refused address.
        addr: IpAddr,
        /// The deny-list range it falls in.
        range: &'static str,
    },
    /// The host name could not be resolved.
    #[error("could not resolve {host}: {source}")]
    Resolve {
        /// The host name that was looked up.
        host: String,
        /// The resolver's error.
        source: std::io::Error,
    },
    /// The URL does not parse.
    #[error("invalid destination URL: {0}")]
    Parse(#[from] url::ParseError),
}

impl EgressError {
    fn refused(host: &str, addr: IpAddr, range: &'static str) -> Self {
        let host = host.to_owned();
        Self::Refused { host, addr, range }
    }

    /// True when a deny-list range refused the destination (as opposed to a bad URL or a DNS failure).
    pub fn is_refused(&self) -> bool {
        matches!(self, Self::Refused { .. })
    }

    /// Finds an `EgressError` in an error's source chain (e.g. inside a `reqwest::Error`).
    pub fn find_in<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a EgressError> {
        let mut cur = Some(err);
        while let Some(e) = cur {
            if let Some(found) = e.downcast_ref::<EgressError>() {
                return Some(found);
            }
            cur = e.source();
        }
        None
    }
}

/// Which destinations are allowed: the deny list, minus the networks on the allow-list.
#[derive(Debug, Clone, Default)]
pub struct EgressPolicy {
    /// Networks that override the deny list (e.g. `127.0.0.0/8` for tests and local receivers).
    pub allow: Vec<IpNet>,
}

impl EgressPolicy {
    /// A policy whose allow-list is `allow`.
    pub fn new(allow: Vec<IpNet>) -> Self {
        Self { allow }
    }

    /// The deny-list range refusing `ip` under this policy, if any.
    fn refusal(&self, ip: IpAddr) -> Option<&'static str> {
        let range = refused_range(ip)?;
        // An IPv4-mapped address is allowed when its IPv4 form is.
        let canonical = ip.to_canonical();
        let allowed = self
            .allow
            .iter()
            .any(|net| net.contains(&ip) || net.contains(&canonical));
        (!allowed).then_some(range)
    }

    /// Allows `ip` unless it is on the deny list and not on the allow-list.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), EgressError> {
        match self.refusal(ip) {
            None => Ok(()),
            Some(range) => Err(EgressError::refused(&ip.to_string(), ip, range)),
        }
    }

    /// Parses and checks a destination URL: http(s) only, a host, no credentials, IP literals classified.
    ///
    /// Host names pass here and are checked after resolution by [`GuardedResolver`].
    pub fn check_url(&self, url: &str) -> Result<Url, EgressError> {
        self.check_url_of(url, &["http", "https"])
    }

    /// [`Self::check_url`] for a URL of one of `schemes` (a broker's: `amqp`, …); its caller
    /// names the schemes it allows before this is reached.
    pub fn check_url_of(&self, url: &str, schemes: &[&str]) -> Result<Url, EgressError> {
        let url = Url::parse(url)?;
        if !schemes.contains(&url.scheme()) {
            return Err(EgressError::Scheme(url.scheme().to_owned()));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(EgressError::Credentials);
        }
        let ip = match url.host() {
            None => return Err(EgressError::NoHost),
            Some(Host::Domain(_)) => return Ok(url),
            Some(Host::Ipv4(v4)) => IpAddr::V4(v4),
            Some(Host::Ipv6(v6)) => IpAddr::V6(v6),
        };
        match self.refusal(ip) {
            None => Ok(url),
            Some(range) => Err(EgressError::refused(
                url.host_str().unwrap_or_default(),
                ip,
                range,
            )),
        }
    }

    /// Resolves `host`, drops refused addresses, and fails when none remain.
    pub async fn resolve_checked(
        &self,
        host: &str,
        port: u16,
    ) -> Result<Vec<SocketAddr>, EgressError> {
        let resolve_error = |source| EgressError::Resolve {
            host: host.to_owned(),
            source,
        };
        let resolved = tokio::net::lookup_host((host, port))
            .await
            .map_err(resolve_error)?;
        let mut allowed = Vec::new();
        let mut first_refusal = None;
        for addr in resolved {
            match self.refusal(addr.ip()) {
                None => allowed.push(addr),
                Some(range) => {
                    first_refusal.get_or_insert((addr.ip(), range));
                }
            }
        }
        if !allowed.is_empty() {
            return Ok(allowed);
        }
        Err(match first_refusal {
            Some((addr, range)) => EgressError::refused(host, addr, range),
            None => resolve_error(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no addresses",
            )),
        })
    }
}

impl EgressPolicy {
    /// Resolves `host` and fails when any of its addresses is refused: for a destination reached
    /// through a proxy, which picks the address itself.
    pub async fn resolve_all_allowed(
        &self,
        host: &str,
        port: u16,
    ) -> Result<Vec<SocketAddr>, EgressError> {
        let resolved = tokio::net::lookup_host((host, port))
            .await
            .map_err(|source| EgressError::Resolve {
                host: host.to_owned(),
                source,
            })?
            .collect::<Vec<_>>();
        for addr in &resolved {
            if let Some(range) = self.refusal(addr.ip()) {
                return Err(EgressError::refused(host, addr.ip(), range));
            }
        }
        Ok(resolved)
    }
}

/// The HTTP client's DNS resolver: it returns only addresses the policy allows, so reqwest connects to
/// exactly what was checked. IP-literal URLs bypass resolvers; [`EgressPolicy::check_url`] covers them.
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    policy: Arc<EgressPolicy>,
    /// The egress proxy's host: the operator chose it, and it usually lives on a private
    /// network, so its addresses are not checked.
    trusted: Option<String>,
}

impl GuardedResolver {
    /// A resolver that checks every name against `policy`.
    pub fn new(policy: Arc<EgressPolicy>) -> Self {
        Self {
            policy,
            trusted: None,
        }
    }

    /// A resolver that checks every name but `trusted` (the egress proxy's host).
    pub fn trusting(policy: Arc<EgressPolicy>, trusted: Option<String>) -> Self {
        Self { policy, trusted }
    }
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = Arc::clone(&self.policy);
        let trusted = self
            .trusted
            .as_deref()
            .is_some_and(|t| t.eq_ignore_ascii_case(name.as_str()));
        Box::pin(async move {
            // Port 0: reqwest applies the URL's (or the scheme's default) port.
            let addrs = match trusted {
                true => tokio::net::lookup_host((name.as_str(), 0))
                    .await?
                    .collect::<Vec<_>>(),
                false => policy.resolve_checked(name.as_str(), 0).await?,
            };
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("test address")
    }

    fn loopback_allowed() -> EgressPolicy {
        EgressPolicy::new(vec!["127.0.0.0/8".parse().expect("test network")])
    }

    /// One address inside each deny range, edges included, with the range name expected.
    const INSIDE: &str = "
        0.1.2.3=this network; 10.255.0.1=private; 100.64.0.1=shared address space;
        100.127.255.254=shared address space; 127.0.0.1=loopback; 127.255.255.254=loopback;
        169.254.169.254=link-local; 172.16.0.1=private; 172.31.255.254=private;
        192.0.0.8=IETF protocol assignments; 192.0.2.1=documentation; 192.168.1.1=private;
        198.18.0.1=benchmarking; 198.19.255.254=benchmarking; 198.51.100.7=documentation;
        203.0.113.9=documentation; 224.0.0.1=multicast; 239.255.255.250=multicast;
        240.0.0.1=reserved; 255.255.255.255=reserved; ::=unspecified; ::1=loopback;
        fc00::1=unique local; fdff:ffff::1=unique local; fe80::1=link-local; febf::1=link-local;
        ff02::1=multicast; 2001:db8::1=documentation; ::ffff:10.0.0.1=private;
        ::ffff:127.0.0.1=loopback; 64:ff9b::7f00:1=loopback; 64:ff9b::a9fe:a9fe=link-local;
        ::127.0.0.1=IPv4-compatible (deprecated); ::8.8.8.8=IPv4-compatible (deprecated);
        2002:7f00:1::1=loopback; 2002:a00:1::=private; 2002:a9fe:a9fe:1::1=link-local;
        2002:c0a8:101::1=private; 2002::1=this network; ::ffff:0:7f00:1=loopback;
        64:ff9b::a00:1=private; 64:ff9b::c0a8:101=private;
        64:ff9b:1:7f00:0:100::=loopback; 64:ff9b:1:808:8:808:a00:1=private;
        64:ff9b:1:808:ff08:808:808:808=NAT64 local-use;
        2001:0:808:808::80ff:fffe=loopback; 2001:0:a00:1::f7f7:f7f7=private;
        2001:0:808:808:8000:63bf:3fff:fdd2=documentation;
        192.88.99.1=6to4 relay anycast (deprecated); 100::1=discard-only;
        100::ffff:ffff:ffff:ffff=discard-only; 100:0:0:1::5=dummy prefix;
        2001:2::1=IETF protocol assignments; 2001:10::1=IETF protocol assignments;
        2001:20::1=IETF protocol assignments; 2001:1ff::1=IETF protocol assignments;
        3fff::1=documentation; 3fff:fff:ffff::1=documentation; 5f00::1=SRv6 SIDs;
        5f00:ffff::1=SRv6 SIDs;
    ";

    /// Neighbours just outside the deny ranges, and public addresses.
    const OUTSIDE: &str = "
        1.0.0.1 9.255.255.255 11.0.0.1 100.63.255.255 100.128.0.1 126.255.255.255 128.0.0.1
        169.253.255.255 169.255.0.1 172.15.255.255 172.32.0.1 192.0.1.1 192.0.3.1 192.167.255.255
        192.169.0.1 198.17.255.255 198.20.0.1 198.51.99.1 198.51.101.1 203.0.112.1 203.0.114.1
        223.255.255.255 8.8.8.8 2606:4700::1111 2001:4860:4860::8888 fbff::1 fec0::1 2001:db9::1
        ::ffff:8.8.8.8 64:ff9b::808:808 2002:808:808::1 2002:101:101:7f00::1 ::ffff:0:808:808
        64:ff9b:1:808:8:808:808:808 2001:0:808:808::f7f7:f7f7 2001:0:4136:e378::f7f7:f7f7
        192.88.98.1 192.88.100.1 100:0:0:2::1 ff::1 2001:200::1 3fff:1000::1 5eff::1 5f01::1
    ";

    /// True when `result` is a deny-list refusal.
    fn refusal<T>(result: Result<T, EgressError>) -> bool {
        result.is_err_and(|e| e.is_refused())
    }

    #[test]
    fn every_deny_range_is_refused() {
        for entry in INSIDE.split(';').map(str::trim).filter(|e| !e.is_empty()) {
            let (addr, range) = entry.split_once('=').expect("address=range");
            assert_eq!(refused_range(ip(addr)), Some(range), "{addr}");
            assert!(is_refused(ip(addr)), "{addr}");
        }
    }

    #[test]
    fn neighbours_and_public_addresses_are_allowed() {
        for addr in OUTSIDE.split_whitespace() {
            assert_eq!(refused_range(ip(addr)), None, "{addr}");
            assert!(EgressPolicy::default().check_ip(ip(addr)).is_ok(), "{addr}");
        }
    }

    #[test]
    fn allow_list_overrides_the_deny_list() {
        let policy = loopback_allowed();
        assert!(policy.check_ip(ip("127.0.0.1")).is_ok());
        assert!(policy.check_ip(ip("::ffff:127.0.0.1")).is_ok());
        assert!(refusal(policy.check_ip(ip("10.0.0.1"))));
        assert!(refusal(EgressPolicy::default().check_ip(ip("127.0.0.1"))));
    }

    /// A URL and the start of the `Debug` of what `check_url` must return for it.
    const URLS: &str = "
        https://example.com:8443/hook?a=1 Ok; http://8.8.8.8/ Ok; http://[2606:4700::1111]:80/ Ok;
        ftp://example.com/ Err(Scheme; file:///etc/passwd Err(Scheme; not a url Err(Parse;
        http://user:pw@example.com/ Err(Credentials; http://user@example.com/ Err(Credentials;
        http://127.0.0.1:8080/ Err(Refused; http://127.1/ Err(Refused; http://2130706433/ Err(Refused;
        http://[::1]/ Err(Refused; http://[::ffff:127.0.0.1]/ Err(Refused; http://[64:ff9b::a00:1]/
        Err(Refused; https://169.254.169.254/latest/meta-data/ Err(Refused;
        http://[2002:7f00:1::1]/ Err(Refused; http://[2001:0:808:808::80ff:fffe]/ Err(Refused;
        http://[2002:808:808::1]/ Ok;
    ";

    #[test]
    fn urls_are_checked_before_any_request() {
        let policy = EgressPolicy::default();
        for entry in URLS.split(';').map(str::trim).filter(|e| !e.is_empty()) {
            let (url, expected) = entry.rsplit_once(char::is_whitespace).expect("url outcome");
            let got = format!("{:?}", policy.check_url(url));
            assert!(got.starts_with(expected), "{url}: {got}");
        }
        assert!(loopback_allowed().check_url("http://127.0.0.1:9/").is_ok());
    }

    #[tokio::test]
    async fn localhost_resolves_to_a_refused_address() {
        let policy = EgressPolicy::default();
        let err = policy.resolve_checked("localhost", 80).await;
        let err = err.expect_err("localhost refused");
        let text = err.to_string();
        assert!(err.is_refused(), "{text}");
        let start = "destination refused: localhost resolves to ";
        assert!(text.starts_with(start), "{text}");
        assert!(text.ends_with("(loopback), which is not allowed"), "{text}");
        let addrs = loopback_allowed().resolve_checked("localhost", 80).await;
        let addrs = addrs.expect("allowed with 127.0.0.0/8");
        let loopback_v4 = |a: &SocketAddr| a.is_ipv4() && a.ip().is_loopback() && a.port() == 80;
        assert!(addrs.iter().all(loopback_v4), "{addrs:?}");
    }

    const REPLY: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";

    /// Serves fixed `200 OK` responses on 127.0.0.1 and returns the port.
    async fn tiny_server() -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await;
        let listener = listener.expect("bind");
        let port = listener.local_addr().expect("local addr").port();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = conn.read(&mut buf).await;
                    let _ = conn.write_all(REPLY).await;
                });
            }
        });
        port
    }

    fn client(policy: EgressPolicy) -> reqwest::Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::builder()
            .dns_resolver(Arc::new(GuardedResolver::new(Arc::new(policy))))
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client")
    }

    #[tokio::test]
    async fn client_connects_only_to_checked_addresses() {
        let url = format!("http://localhost:{}/", tiny_server().await);
        let refused = client(EgressPolicy::default()).post(&url).send().await;
        let err = refused.expect_err("refused without the allow-list");
        let cause = EgressError::find_in(&err).expect("egress error in the chain");
        assert!(cause.is_refused(), "{cause}");
        let delivered = client(loopback_allowed()).post(&url).send().await;
        let ok = delivered.expect("delivered with 127.0.0.0/8 allowed");
        assert_eq!(ok.status(), reqwest::StatusCode::OK);
        assert_eq!(ok.text().await.expect("body"), "ok");
    }
}
