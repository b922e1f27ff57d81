//! Which hosts a fetch may reach.
//!
//! Bundle inputs are chosen by tenants, and the operator that fetches them runs with a
//! Kubernetes token inside the cluster network. So an input whose host is, or resolves to, one of
//! these addresses is refused ([`SourceError::HostRefused`]):
//!
//! - loopback (`127.0.0.0/8`, `::1`): the operator pod itself;
//! - link-local (`169.254.0.0/16`, `fe80::/10`), which holds the cloud metadata service
//!   `169.254.169.254`, and the metadata service's IPv6 address `fd00:ec2::254`;
//! - unspecified (`0.0.0.0/8`, `::`), which reaches the local host on Linux;
//! - every range of [`crate::FetchOptions::denied_addresses`]: the Kubernetes API server's
//!   addresses (the operator adds the in-cluster one itself);
//! - IPv4 addresses written as IPv6 (`::ffff:a.b.c.d`) are checked as the IPv4 address.
//!
//! `file://` URLs and plain paths read the operator's own file system and are refused the same
//! way. [`crate::FetchOptions::allow_private_hosts`] lifts all of this (tests, development,
//! `varroa-operator render` on a workstation); [`crate::FetchOptions::allowed_hosts`] lifts it
//! for named hosts only (an internal Git server that resolves to a denied range).
//!
//! Private ranges (RFC 1918, `100.64.0.0/10`, `fc00::/7`) are not refused here, because internal
//! Git servers and registries commonly live there; the operator's egress NetworkPolicy
//! (deploy/varroa/operator-networkpolicy.yaml) keeps them out unless the administrator opens them.
//!
//! # Where the check happens, and its limit
//!
//! Every address a name resolves to is checked, not only the first. Git over HTTP(S) checks the
//! addresses it actually connects to: its HTTP client resolves names through
//! [`CheckingResolver`], so a name that resolves to a public address when checked and to a
//! private one when connecting (DNS rebinding) is still refused, and redirects are not followed
//! (a redirect to a literal address would skip the resolver). For OCI (whose client takes no
//! resolver), Git over SSH and `git://`, the host is resolved and checked just before the fetch;
//! a DNS server that answers differently a moment later (rebinding), an OCI registry that
//! redirects blob downloads or names a token service elsewhere, can still reach an address the
//! check would refuse. The NetworkPolicy is the second line for those.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use crate::SourceError;

/// An IP address range, `address/prefix` (`10.96.0.0/12`, `fd00::/8`) or one address
/// (`10.96.0.1`, the same as `/32` or `/128`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AddressRange {
    network: IpAddr,
    prefix: u8,
}

impl AddressRange {
    /// The range holding only `address`.
    pub fn single(address: IpAddr) -> AddressRange {
        let prefix = if address.is_ipv4() { 32 } else { 128 };
        AddressRange { network: address, prefix }
    }

    /// Whether `address` is in the range (an IPv4 range also holds the IPv4-mapped IPv6 form).
    pub fn contains(&self, address: IpAddr) -> bool {
        match (self.network, canonical(address)) {
            (IpAddr::V4(net), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(net) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(net) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for AddressRange {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let (address, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let network: IpAddr = address
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address or range: write e.g. 10.96.0.1 or 10.96.0.0/12"))?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => return Err(format!("{s:?}: the prefix length must be a number from 0 to {max}")),
            },
        };
        Ok(AddressRange { network, prefix })
    }
}

impl fmt::Display for AddressRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// An IPv4 address written as IPv6 (`::ffff:a.b.c.d`) as the IPv4 address; others unchanged.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// The cloud metadata service's IPv6 address (AWS).
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);
/// The cloud metadata service's IPv4 address (AWS, GCP, Azure, ...).
const METADATA_V4: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);

/// Why `address` may not be fetched from, if it may not.
pub(crate) fn refused(address: IpAddr, denied: &[AddressRange]) -> Option<String> {
    let address = canonical(address);
    let class = match address {
        IpAddr::V4(a) if a == METADATA_V4 => Some("the cloud metadata service"),
        IpAddr::V6(a) if a == METADATA_V6 => Some("the cloud metadata service"),
        IpAddr::V4(a) if a.is_loopback() => Some("a loopback address"),
        IpAddr::V6(a) if a.is_loopback() => Some("a loopback address"),
        IpAddr::V4(a) if a.octets()[0] == 0 => Some("an unspecified address (this host)"),
        IpAddr::V6(a) if a.is_unspecified() => Some("an unspecified address (this host)"),
        IpAddr::V4(a) if a.is_link_local() => Some("a link-local address"),
        IpAddr::V6(a) if a.segments()[0] & 0xffc0 == 0xfe80 => Some("a link-local address"),
        _ => None,
    };
    if let Some(class) = class {
        return Some(format!("{address}, {class}"));
    }
    denied.iter().find(|r| r.contains(address)).map(|r| {
        format!(
            "{address}, in the denied range {r} (the Kubernetes API server or another address set in denied_addresses)"
        )
    })
}

/// The host rules of one fetcher.
#[derive(Debug, Clone, Default)]
pub(crate) struct HostPolicy {
    pub allow_private: bool,
    pub allowed_hosts: Vec<String>,
    pub denied: Vec<AddressRange>,
}

impl HostPolicy {
    /// Whether `host` (as written, `host` or `host:port`) is exempt from the address check.
    pub fn exempt(&self, host: &str, port: Option<u16>) -> bool {
        if self.allow_private {
            return true;
        }
        let host = host.trim_start_matches('[').trim_end_matches(']');
        self.allowed_hosts.iter().any(|allowed| {
            let allowed = allowed.trim();
            allowed.eq_ignore_ascii_case(host)
                || allowed.trim_start_matches('[').trim_end_matches(']').eq_ignore_ascii_case(host)
                || port.is_some_and(|p| {
                    let with_port = if host.contains(':') { format!("[{host}]:{p}") } else { format!("{host}:{p}") };
                    allowed.eq_ignore_ascii_case(&with_port)
                })
        })
    }

    /// Refuses a local path (`file://`, plain paths) unless private hosts are allowed.
    pub fn check_local(&self, input: &str) -> Result<(), SourceError> {
        if self.allow_private {
            return Ok(());
        }
        Err(SourceError::HostRefused {
            input: input.to_string(),
            host: "the local file system".to_string(),
            reason: "a file:// URL or path reads the operator's own file system".to_string(),
        })
    }

    /// Checks the addresses `host` resolves to (or is), just before fetching.
    pub async fn check(&self, input: &str, host: &str, port: u16) -> Result<(), SourceError> {
        if self.exempt(host, Some(port)) {
            return Ok(());
        }
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addresses: Vec<IpAddr> = match bare.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => tokio::net::lookup_host((bare, port))
                .await
                .map_err(|e| SourceError::Unreachable {
                    input: input.to_string(),
                    detail: format!("cannot resolve {bare}: {e}"),
                })?
                .map(|a| a.ip())
                .collect(),
        };
        self.check_addresses(input, host, &addresses)
    }

    /// Refuses when any of `addresses` (what `host` resolved to) is refused.
    pub fn check_addresses(&self, input: &str, host: &str, addresses: &[IpAddr]) -> Result<(), SourceError> {
        if self.exempt(host, None) {
            return Ok(());
        }
        for address in addresses {
            if let Some(why) = refused(*address, &self.denied) {
                let reason = if host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().is_ok() {
                    format!("it is {why}")
                } else {
                    format!("it resolves to {why}")
                };
                return Err(SourceError::HostRefused { input: input.to_string(), host: host.to_string(), reason });
            }
        }
        Ok(())
    }
}

/// A DNS resolver for reqwest that refuses names resolving to a refused address, so that the
/// addresses checked are the addresses connected to. The first refusal is kept for the caller,
/// which turns the transport's error back into [`SourceError::HostRefused`].
pub(crate) struct CheckingResolver {
    pub policy: HostPolicy,
    pub input: String,
    pub refusal: Arc<Mutex<Option<SourceError>>>,
}

impl reqwest::dns::Resolve for CheckingResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        let input = self.input.clone();
        let refusal = self.refusal.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let ips: Vec<IpAddr> = found.iter().map(SocketAddr::ip).collect();
            if let Err(error) = policy.check_addresses(&input, &host, &ips) {
                let message = error.to_string();
                if let Ok(mut slot) = refusal.lock() {
                    slot.get_or_insert(error);
                }
                return Err(message.into());
            }
            let addrs: reqwest::dns::Addrs = Box::new(found.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn refused_classes() {
        let api: Vec<AddressRange> = vec!["10.96.0.1".parse().expect("range"), "2001:db8::/64".parse().expect("range")];
        for (address, class) in [
            ("127.0.0.1", "loopback"),
            ("127.1.2.3", "loopback"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("0.0.0.0", "unspecified"),
            ("::", "unspecified"),
            ("169.254.169.254", "metadata"),
            ("::ffff:169.254.169.254", "metadata"),
            ("fd00:ec2::254", "metadata"),
            ("169.254.10.1", "link-local"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("10.96.0.1", "denied range 10.96.0.1/32"),
            ("2001:db8::5", "denied range 2001:db8::/64"),
        ] {
            let why = refused(ip(address), &api).unwrap_or_else(|| panic!("{address} must be refused"));
            assert!(why.contains(class), "{address}: {why}");
        }
        for address in ["8.8.8.8", "10.96.0.2", "192.168.1.1", "2001:db9::1", "fec0::1", "140.82.112.3"] {
            assert_eq!(refused(ip(address), &api), None, "{address}");
        }
    }

    #[test]
    fn ranges_parse_and_reject_bad_input() {
        let r: AddressRange = "10.0.0.0/8".parse().expect("range");
        assert!(r.contains(ip("10.255.0.1")) && !r.contains(ip("11.0.0.1")));
        assert_eq!(r.to_string(), "10.0.0.0/8");
        let all: AddressRange = "0.0.0.0/0".parse().expect("range");
        assert!(all.contains(ip("1.2.3.4")) && !all.contains(ip("::2")));
        for bad in ["10.0.0.0/33", "::/129", "example.com", "10.0.0.0/x", ""] {
            assert!(bad.parse::<AddressRange>().is_err(), "{bad}");
        }
    }

    #[test]
    fn allowed_hosts_match_with_or_without_port() {
        let policy = HostPolicy {
            allowed_hosts: vec!["git.internal".into(), "127.0.0.1:5000".into(), "[::1]".into()],
            ..HostPolicy::default()
        };
        assert!(policy.exempt("GIT.internal", Some(443)));
        assert!(policy.exempt("127.0.0.1", Some(5000)));
        assert!(!policy.exempt("127.0.0.1", Some(5001)));
        assert!(policy.exempt("[::1]", Some(80)));
        assert!(policy.exempt("::1", None));
        assert!(!policy.exempt("other", Some(443)));
    }

    #[tokio::test]
    async fn names_are_checked_on_every_address() {
        let policy = HostPolicy::default();
        let error = policy.check("oci localhost/x", "localhost", 443).await.expect_err("localhost");
        assert!(matches!(&error, SourceError::HostRefused { host, .. } if host == "localhost"), "{error:?}");
        assert!(error.to_string().contains("loopback"), "{error}");
        let error = policy.check("in", "[::1]", 443).await.expect_err("::1");
        assert!(error.to_string().contains("it is ::1, a loopback address"), "{error}");
        let allowed = HostPolicy { allow_private: true, ..HostPolicy::default() };
        allowed.check("in", "localhost", 443).await.expect("allowed");
    }
}
