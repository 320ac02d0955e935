//! Which addresses `web_fetch` may connect to, and the resolver that makes
//! every connection go to a checked address.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use ureq::config::Config;
use ureq::http::Uri;
use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::NextTimeout;

/// Whether `ip` is a public unicast address: not loopback, private,
/// link-local (cloud metadata at 169.254.169.254 included), shared
/// (CGNAT), unspecified, broadcast, multicast, documentation, benchmarking
/// or reserved; IPv6 forms that embed an IPv4 address are judged by it.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0
        || a == 10
        || a == 127
        || (a == 100 && (64..128).contains(&b))
        || (a == 169 && b == 254)
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 192 && b == 0 && c == 2)
        || (a == 192 && b == 88 && c == 99)
        || (a == 192 && b == 168)
        || (a == 198 && (b == 18 || b == 19))
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
        || a >= 224)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let s = ip.segments();
    // NAT64 (64:ff9b::/96) and 6to4 (2002::/16) carry an IPv4 address.
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        let [.., h, l] = ip.octets();
        let o = ip.octets();
        return is_public_v4(Ipv4Addr::new(o[12], o[13], h, l));
    }
    if s[0] == 0x2002 {
        let o = ip.octets();
        return is_public_v4(Ipv4Addr::new(o[2], o[3], o[4], o[5]));
    }
    !(ip.is_unspecified()
        || ip.is_loopback()
        || s[0..6] == [0, 0, 0, 0, 0, 0] // IPv4-compatible (deprecated)
        || (s[0] & 0xfe00) == 0xfc00 // unique local
        || (s[0] & 0xffc0) == 0xfe80 // link-local
        || (s[0] & 0xffc0) == 0xfec0 // site-local
        || (s[0] & 0xff00) == 0xff00 // multicast
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || (s[0] == 0x0100 && s[1..4] == [0, 0, 0])) // discard-only
}

/// Hosts the user allowed to be non-public, and test name overrides.
#[derive(Clone, Debug, Default)]
pub struct AddressPolicy {
    /// Host names (lowercase) or IP literals that may resolve to non-public
    /// addresses.
    pub allowed_hosts: BTreeSet<String>,
    /// Names resolved to these addresses instead of through DNS (tests).
    pub overrides: BTreeMap<String, Vec<IpAddr>>,
}

/// Why a host cannot be fetched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AddressError {
    /// No address.
    NotFound(String),
    /// Every address is non-public and the host is not allowed.
    Blocked {
        /// The host.
        host: String,
        /// The first refused address.
        address: IpAddr,
    },
}

impl core::fmt::Display for AddressError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            AddressError::NotFound(h) => write!(f, "cannot resolve host \"{h}\""),
            AddressError::Blocked { host, address } => write!(
                f,
                "host \"{host}\" resolves to the non-public address {address}; requests to loopback, private, link-local and metadata addresses are refused unless the user allows the host"
            ),
        }
    }
}

/// `host` without brackets, lowercased.
pub fn bare_host(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

impl AddressPolicy {
    /// The addresses of `host:port` this policy lets a request connect to.
    pub fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, AddressError> {
        let host = bare_host(host);
        let addrs: Vec<SocketAddr> = if let Ok(ip) = host.parse::<IpAddr>() {
            vec![SocketAddr::new(ip, port)]
        } else if let Some(ips) = self.overrides.get(&host) {
            ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect()
        } else {
            (host.as_str(), port)
                .to_socket_addrs()
                .map(|it| it.take(16).collect())
                .unwrap_or_default()
        };
        if addrs.is_empty() {
            return Err(AddressError::NotFound(host));
        }
        if self.allowed_hosts.contains(&host) {
            return Ok(addrs);
        }
        let public: Vec<SocketAddr> = addrs
            .iter()
            .copied()
            .filter(|a| is_public(a.ip()))
            .collect();
        match (public.is_empty(), addrs.first()) {
            (false, _) => Ok(public),
            (true, Some(first)) => Err(AddressError::Blocked {
                host,
                address: first.ip(),
            }),
            (true, None) => Err(AddressError::NotFound(host)),
        }
    }
}

/// The ureq resolver: only addresses the policy lets through.
#[derive(Debug)]
pub(crate) struct GuardResolver(pub(crate) Arc<AddressPolicy>);

impl Resolver for GuardResolver {
    fn resolve(
        &self,
        uri: &Uri,
        _config: &Config,
        _timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let host = uri.host().ok_or(ureq::Error::HostNotFound)?;
        let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
            Some("https") => 443,
            _ => 80,
        });
        let addrs = self
            .0
            .resolve(host, port)
            .map_err(|_| ureq::Error::HostNotFound)?;
        let mut out = self.empty();
        for a in addrs.into_iter().take(16) {
            out.push(a);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_public_addresses_are_recognised() {
        for a in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fc00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::7f00:1",
            "2002:7f00:1::",
            "fd00:ec2::254",
        ] {
            assert!(!is_public(a.parse().unwrap()), "{a}");
        }
        for a in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(is_public(a.parse().unwrap()), "{a}");
        }
    }

    #[test]
    fn a_public_looking_name_pointing_inside_is_refused_unless_allowed() {
        let mut p = AddressPolicy::default();
        p.overrides
            .insert("public.example".into(), vec!["127.0.0.1".parse().unwrap()]);
        let e = p.resolve("public.example", 80).unwrap_err();
        assert!(
            e.to_string().contains("non-public address 127.0.0.1"),
            "{e}"
        );
        assert!(p.resolve("169.254.169.254", 80).is_err());
        p.allowed_hosts.insert("public.example".into());
        assert_eq!(p.resolve("PUBLIC.example", 8).unwrap().len(), 1);
    }
}
