//! CIDR ranges as the operator's flags and the NetworkPolicy spell them (`10.0.0.0/8`,
//! `fd00:ec2::254/128`), parsed once at start-up so that a bad flag stops the binary instead of
//! every preview's NetworkPolicy.
//!
//! As Go's `net.ParseCIDR`, an address with host bits set is accepted and names its network
//! (`10.1.2.3/8` is `10.0.0.0/8`); the operator always writes the network form.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// One range: an address family, a network address and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

/// Why a string is not a CIDR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a CIDR range ({reason}): write an address and a prefix length, e.g. 10.0.0.0/8 or fd00::/8")]
pub struct BadCidr {
    pub value: String,
    pub reason: &'static str,
}

impl Cidr {
    /// The range of exactly one address (`/32` or `/128`).
    pub fn host(addr: IpAddr) -> Cidr {
        Cidr { addr, prefix: if addr.is_ipv6() { 128 } else { 32 } }
    }

    pub fn is_ipv6(&self) -> bool {
        self.addr.is_ipv6()
    }

    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    fn bits(addr: IpAddr) -> u128 {
        match addr {
            IpAddr::V4(a) => u128::from(u32::from(a)),
            IpAddr::V6(a) => u128::from(a),
        }
    }

    fn width(&self) -> u8 {
        if self.is_ipv6() { 128 } else { 32 }
    }

    fn mask(width: u8, prefix: u8) -> u128 {
        let host_bits = u32::from(width - prefix);
        let all = if width == 128 { u128::MAX } else { (1u128 << width) - 1 };
        all & !(1u128.checked_shl(host_bits).map_or(u128::MAX, |v| v - 1))
    }

    /// Whether `other` lies inside this range (the same family, a prefix at least as long).
    pub fn contains(&self, other: &Cidr) -> bool {
        self.is_ipv6() == other.is_ipv6()
            && other.prefix >= self.prefix
            && Cidr::bits(other.addr) & Cidr::mask(self.width(), self.prefix) == Cidr::bits(self.addr)
    }

    /// Whether `other` lies inside this range and is smaller (a NetworkPolicy `except` entry
    /// must be a strict subset of its `cidr`).
    pub fn strictly_contains(&self, other: &Cidr) -> bool {
        self.contains(other) && other.prefix > self.prefix
    }
}

impl FromStr for Cidr {
    type Err = BadCidr;
    fn from_str(s: &str) -> Result<Cidr, BadCidr> {
        let bad = |reason| BadCidr { value: s.to_string(), reason };
        let (addr, prefix) = s.trim().split_once('/').ok_or_else(|| bad("no /prefix length"))?;
        let addr: IpAddr = addr.parse().map_err(|_| bad("not an IPv4 or IPv6 address"))?;
        let width = if addr.is_ipv6() { 128 } else { 32 };
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) || prefix.len() > 3 {
            return Err(bad("the prefix length is not a number"));
        }
        let prefix: u8 = prefix.parse().map_err(|_| bad("the prefix length is not a number"))?;
        if prefix > width {
            return Err(bad(if width == 32 {
                "an IPv4 prefix length is at most 32"
            } else {
                "an IPv6 prefix length is at most 128"
            }));
        }
        let net = Cidr::bits(addr) & Cidr::mask(width, prefix);
        let addr = match addr {
            IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::from(u32::try_from(net).map_err(|_| bad("overflow"))?)),
            IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::from(net)),
        };
        Ok(Cidr { addr, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// A comma-separated list of ranges, the form of every CIDR flag; empty items are skipped, so
/// `--deny-egress-cidrs=` is the empty list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CidrList(pub Vec<Cidr>);

impl FromStr for CidrList {
    type Err = BadCidr;
    fn from_str(s: &str) -> Result<CidrList, BadCidr> {
        s.split(',').map(str::trim).filter(|c| !c.is_empty()).map(str::parse).collect::<Result<_, _>>().map(CidrList)
    }
}

impl fmt::Display for CidrList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(Cidr::to_string).collect();
        f.write_str(&parts.join(","))
    }
}

impl CidrList {
    pub fn iter(&self) -> impl Iterator<Item = &Cidr> {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Cidr {
        s.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn parses_normalises_and_prints() {
        assert_eq!(c("10.0.0.0/8").to_string(), "10.0.0.0/8");
        assert_eq!(c("10.1.2.3/8").to_string(), "10.0.0.0/8");
        assert_eq!(c("0.0.0.0/0").to_string(), "0.0.0.0/0");
        assert_eq!(c("fd00:ec2:0::254/128").to_string(), "fd00:ec2::254/128");
        assert_eq!(c("fe80::1/10").to_string(), "fe80::/10");
        assert_eq!(c(" 192.168.0.0/16 ").to_string(), "192.168.0.0/16");
        assert_eq!(Cidr::host("203.0.113.1".parse().expect("ip")).to_string(), "203.0.113.1/32");
    }

    #[test]
    fn refuses_what_is_not_a_range() {
        for bad in
            ["10.0.0.0", "10.0.0.0/33", "::/129", "10.0.0/8", "10.0.0.0/-1", "10.0.0.0/x", "/8", "lots", "10.0.0.0/08a"]
        {
            let e = bad.parse::<Cidr>().expect_err(bad);
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn containment() {
        assert!(c("10.0.0.0/8").contains(&c("10.1.0.0/16")));
        assert!(c("10.0.0.0/8").strictly_contains(&c("10.1.0.0/16")));
        assert!(c("10.0.0.0/8").contains(&c("10.0.0.0/8")));
        assert!(!c("10.0.0.0/8").strictly_contains(&c("10.0.0.0/8")));
        assert!(!c("10.0.0.0/8").contains(&c("11.0.0.0/16")));
        assert!(!c("10.0.0.0/8").contains(&c("0.0.0.0/0")));
        assert!(!c("0.0.0.0/0").contains(&c("::/0")));
        assert!(c("::/0").strictly_contains(&c("fd00:ec2::254/128")));
        assert!(c("fc00::/7").contains(&c("fd00:ec2::254/128")));
    }

    #[test]
    fn lists_skip_empty_items() {
        assert_eq!("".parse::<CidrList>(), Ok(CidrList(vec![])));
        assert_eq!(
            "10.0.0.0/8, ,fd00::/8,".parse::<CidrList>().map(|l| l.to_string()).as_deref(),
            Ok("10.0.0.0/8,fd00::/8")
        );
        assert!("10.0.0.0/8,nope".parse::<CidrList>().is_err());
    }
}
