//! The SSRF guard and the authority rule: which URLs the harvester may fetch at all.
//!
//! Upstream documents are untrusted input that names URLs, and the harvester runs inside an
//! operator's network. So every hop (first request and each redirect) is checked here: only
//! http and https, and no target on a loopback, private, link-local, CGNAT, multicast,
//! documentation or otherwise non-public address unless the source's `allow_private` (or an
//! `allow_networks` entry) says so. IP literals are checked before sending — the `url` crate
//! has already normalised `2130706433`, `0x7f.1` and `017700000001` to `127.0.0.1`. Host names
//! are resolved by [`GuardedResolver`], which hands the HTTP client only vetted addresses, so a
//! name cannot be re-pointed between check and connect (DNS rebinding).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::{Host, Url};

use super::error::FetchError;
use crate::config::Settings;

/// What a source allows beyond the public Internet.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub(crate) struct GuardPolicy {
    pub(crate) allow_private: bool,
    pub(crate) allow_networks: Vec<IpNet>,
}

impl GuardPolicy {
    pub(crate) fn from_settings(s: &Settings) -> Self {
        GuardPolicy { allow_private: s.allow_private, allow_networks: s.allow_networks.clone() }
    }

    /// `Err(reason)` when `ip` may not be contacted.
    pub(crate) fn check_ip(&self, ip: IpAddr) -> Result<(), String> {
        if self.allow_private || self.allow_networks.iter().any(|n| n.contains(&ip)) {
            return Ok(());
        }
        match non_public_reason(ip) {
            Some(why) => Err(format!("{ip} is a {why} address (set allow_private for this source to allow it)")),
            None => Ok(()),
        }
    }

    /// Checks scheme and, for IP-literal hosts, the address.
    pub(crate) fn check_url(&self, url: &Url) -> Result<(), FetchError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(FetchError::BadScheme { url: url.to_string() });
        }
        let ip = match url.host() {
            None => return Err(FetchError::InvalidUrl { url: url.to_string(), detail: "no host".into() }),
            Some(Host::Domain(_)) => return Ok(()),
            Some(Host::Ipv4(v4)) => IpAddr::V4(v4),
            Some(Host::Ipv6(v6)) => IpAddr::V6(v6),
        };
        self.check_ip(ip).map_err(|reason| FetchError::Refused { url: url.to_string(), reason })
    }
}

/// Why `ip` is not a public unicast address (e.g. "loopback"), or `None` when it is public.
pub fn non_public_reason(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_reason(v4),
        IpAddr::V6(v6) => v6_reason(v6),
    }
}

fn v4_reason(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, ..) => "unspecified (0.0.0.0/8)",
        (127, ..) => "loopback",
        (10, ..) | (172, 16..=31, _) | (192, 168, _) => "private (RFC 1918)",
        (169, 254, _) => "link-local",
        (100, 64..=127, _) => "shared CGNAT (RFC 6598)",
        (192, 0, 0) => "IETF protocol assignment",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation",
        (198, 18..=19, _) => "benchmarking",
        (192, 88, 99) => "6to4 relay anycast",
        (224..=239, ..) => "multicast",
        (240..=255, ..) => "reserved or broadcast",
        _ => return None,
    })
}

fn v6_reason(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = embedded_v4(ip) {
        return v4_reason(v4);
    }
    let seg = ip.segments();
    Some(match seg[0] {
        _ if ip.is_unspecified() => "unspecified",
        _ if ip.is_loopback() => "loopback",
        0xfc00..=0xfdff => "unique local (RFC 4193)",
        0xfe80..=0xfebf => "link-local",
        0xfec0..=0xfeff => "site-local",
        0xff00..=0xffff => "multicast",
        0x2001 if seg[1] == 0x0db8 => "documentation",
        0x2001 if seg[1] == 0 => "Teredo",
        0x0100 if seg[1..4] == [0, 0, 0] => "discard-only",
        0x0000..=0x00ff => "reserved",
        _ => return None,
    })
}

/// The IPv4 address inside IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`),
/// NAT64 (`64:ff9b::/96`) and 6to4 (`2002::/16`) addresses: each reaches that IPv4 host.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let seg = ip.segments();
    let low = |hi: u16, lo: u16| Ipv4Addr::from(((hi as u32) << 16) | lo as u32);
    match seg {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => Some(low(hi, lo)),
        [0, 0, 0, 0, 0, 0, hi, lo] if (hi, lo) > (0, 1) => Some(low(hi, lo)),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(low(hi, lo)),
        [0x2002, hi, lo, ..] => Some(low(hi, lo)),
        _ => None,
    }
}

/// A DNS resolver that drops addresses the policy refuses; when none is left the lookup fails
/// with a [`Refusal`] the fetcher turns into [`FetchError::Refused`].
#[derive(Debug)]
pub(crate) struct GuardedResolver {
    pub(crate) policy: Arc<GuardPolicy>,
}

/// A name whose every address was refused.
#[derive(Debug, thiserror::Error)]
#[error("{host} resolves only to refused addresses: {reason}")]
pub(crate) struct Refusal {
    pub(crate) host: String,
    pub(crate) reason: String,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut reason = String::from("no addresses");
            let vetted: Vec<SocketAddr> =
                all.into_iter().filter(|a| policy.check_ip(a.ip()).map_err(|r| reason = r).is_ok()).collect();
            if vetted.is_empty() {
                return Err(Box::new(Refusal { host, reason }) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(vetted.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(s: &str) -> bool {
        let url = Url::parse(s).unwrap();
        matches!(GuardPolicy::default().check_url(&url), Err(FetchError::Refused { .. }))
    }

    #[test]
    fn numeric_tricks_and_ranges_are_refused() {
        for u in [
            "http://127.0.0.1/",
            "http://2130706433/",
            "http://0x7f.1/",
            "http://017700000001/",
            "http://127.1/",
            "http://0.0.0.0/",
            "http://10.1.2.3/",
            "http://172.20.0.1/",
            "http://192.168.1.1/",
            "http://169.254.169.254/",
            "http://100.100.0.1/",
            "http://192.0.2.1/",
            "http://224.0.0.1/",
            "http://255.255.255.255/",
            "http://[::1]/",
            "http://[::]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://[fd00::1]/",
            "http://[fe80::1]/",
            "http://[ff02::1]/",
            "http://[2001:db8::1]/",
            "http://[64:ff9b::a00:1]/",
            "http://[2002:c0a8:101::1]/",
        ] {
            assert!(refused(u), "{u} should be refused");
        }
        for u in ["http://93.184.215.14/", "https://[2606:4700::1111]/", "http://example.org/"] {
            assert!(!refused(u), "{u} should pass");
        }
    }

    #[test]
    fn policy_exceptions() {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(GuardPolicy { allow_private: true, ..Default::default() }.check_ip(ip).is_ok());
        let nets = vec!["127.0.0.1/32".parse().unwrap()];
        let p = GuardPolicy { allow_private: false, allow_networks: nets };
        assert!(p.check_ip(ip).is_ok());
        assert!(p.check_ip("127.0.0.2".parse().unwrap()).is_err());
        let file = Url::parse("file:///etc/passwd").unwrap();
        assert!(matches!(p.check_url(&file), Err(FetchError::BadScheme { .. })));
    }
}
