//! IP ranges of the `network` condition: CIDR blocks and the named ranges
//! Beats documents, with Go's `net.IP` meaning of each name.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One range a `network` condition accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Range {
    Named(Named),
    Cidr { net: IpAddr, prefix: u8 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Named {
    Loopback,
    GlobalUnicast,
    LinkLocalUnicast,
    InterfaceLocalMulticast,
    LinkLocalMulticast,
    Multicast,
    Unspecified,
    Private,
    Public,
}

const NAMES: &[(&str, Named)] = &[
    ("loopback", Named::Loopback),
    ("global_unicast", Named::GlobalUnicast),
    ("unicast", Named::GlobalUnicast),
    ("link_local_unicast", Named::LinkLocalUnicast),
    ("interface_local_multicast", Named::InterfaceLocalMulticast),
    ("link_local_multicast", Named::LinkLocalMulticast),
    ("multicast", Named::Multicast),
    ("unspecified", Named::Unspecified),
    ("private", Named::Private),
    ("public", Named::Public),
];

impl Range {
    /// A named range or a CIDR such as `192.0.2.0/24` or `2001:db8::/32`.
    pub fn parse(s: &str) -> Result<Range, String> {
        if let Some((_, named)) = NAMES.iter().find(|(n, _)| *n == s) {
            return Ok(Range::Named(*named));
        }
        let bad = || {
            let names: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
            format!(
                "`{s}` is neither a CIDR (an address and a prefix length, like \
                 `192.0.2.0/24` or `2001:db8::/32`) nor a named range ({})",
                names.join(", ")
            )
        };
        let (addr, len) = s.split_once('/').ok_or_else(bad)?;
        let net: IpAddr = addr.parse().map_err(|_| bad())?;
        if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) || len.len() > 3 {
            return Err(bad());
        }
        let prefix: u8 = len.parse().map_err(|_| bad())?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(bad());
        }
        Ok(Range::Cidr { net, prefix })
    }

    /// Whether `ip` is in this range. An IPv4-mapped IPv6 address counts as
    /// the IPv4 address, as in Go.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        match self {
            Range::Named(n) => named_contains(*n, ip),
            Range::Cidr { net, prefix } => match (canonical(*net), ip) {
                (IpAddr::V4(n), IpAddr::V4(a)) => {
                    prefix_eq(&n.octets(), &a.octets(), u32::from(*prefix))
                }
                (IpAddr::V6(n), IpAddr::V6(a)) => {
                    prefix_eq(&n.octets(), &a.octets(), u32::from(*prefix))
                }
                _ => false,
            },
        }
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

fn prefix_eq(a: &[u8], b: &[u8], bits: u32) -> bool {
    let full = (bits / 8) as usize;
    if a[..full] != b[..full] {
        return false;
    }
    let rest = bits % 8;
    if rest == 0 {
        return true;
    }
    let mask = 0xffu8 << (8 - rest);
    (a[full] & mask) == (b[full] & mask)
}

fn named_contains(n: Named, ip: IpAddr) -> bool {
    match n {
        Named::Loopback => ip.is_loopback(),
        Named::GlobalUnicast => is_global_unicast(ip),
        Named::LinkLocalUnicast => is_link_local_unicast(ip),
        Named::InterfaceLocalMulticast => match ip {
            IpAddr::V6(a) => a.octets()[0] == 0xff && a.octets()[1] & 0x0f == 0x01,
            IpAddr::V4(_) => false,
        },
        Named::LinkLocalMulticast => is_link_local_multicast(ip),
        Named::Multicast => ip.is_multicast(),
        Named::Unspecified => ip.is_unspecified(),
        Named::Private => is_private(ip),
        Named::Public => !is_local_or_private(ip),
    }
}

fn is_link_local_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.octets()[0] == 169 && a.octets()[1] == 254,
        IpAddr::V6(a) => a.segments()[0] & 0xffc0 == 0xfe80,
    }
}

fn is_link_local_multicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.octets()[..3] == [224, 0, 0],
        IpAddr::V6(a) => a.octets()[0] == 0xff && a.octets()[1] & 0x0f == 0x02,
    }
}

fn is_global_unicast(ip: IpAddr) -> bool {
    ip != IpAddr::V4(Ipv4Addr::BROADCAST)
        && !ip.is_unspecified()
        && !ip.is_loopback()
        && !ip.is_multicast()
        && !is_link_local_unicast(ip)
}

/// RFC 1918 for IPv4; for IPv6, `fd00::/8` as in Beats (the locally
/// assigned half of RFC 4193's `fc00::/7`).
fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            o[0] == 10 || (o[0] == 172 && o[1] & 0xf0 == 16) || (o[0] == 192 && o[1] == 168)
        }
        IpAddr::V6(a) => a.octets()[0] == 0xfd,
    }
}

fn is_local_or_private(ip: IpAddr) -> bool {
    is_private(ip)
        || ip.is_loopback()
        || ip.is_unspecified()
        || ip == IpAddr::V4(Ipv4Addr::BROADCAST)
        || is_link_local_unicast(ip)
        || is_link_local_multicast(ip)
        || named_contains(Named::InterfaceLocalMulticast, ip)
}

/// Parses an address the way Go's `net.ParseIP` accepts it (no zone, no
/// brackets).
pub(crate) fn parse_ip(s: &str) -> Option<IpAddr> {
    if let Ok(v4) = s.parse::<Ipv4Addr>() {
        return Some(IpAddr::V4(v4));
    }
    s.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        parse_ip(s).unwrap()
    }

    #[test]
    fn cidr_contains_v4_and_v6_and_mapped() {
        let r = Range::parse("192.168.1.0/24").unwrap();
        assert!(r.contains(ip("192.168.1.77")));
        assert!(r.contains(ip("::ffff:192.168.1.5")));
        assert!(!r.contains(ip("192.168.2.1")));
        let r6 = Range::parse("2001:db8::/32").unwrap();
        assert!(r6.contains(ip("2001:db8:1::1")));
        assert!(!r6.contains(ip("2001:db9::1")));
        assert!(!r6.contains(ip("10.0.0.1")));
        let odd = Range::parse("10.0.0.0/9").unwrap();
        assert!(odd.contains(ip("10.127.0.1")));
        assert!(!odd.contains(ip("10.128.0.1")));
    }

    #[test]
    fn named_ranges_follow_go() {
        let private = Range::parse("private").unwrap();
        for a in [
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.0.1",
            "fd12::1",
        ] {
            assert!(private.contains(ip(a)), "{a}");
        }
        for a in ["172.32.0.1", "8.8.8.8", "fc00::1"] {
            assert!(!private.contains(ip(a)), "{a}");
        }
        let public = Range::parse("public").unwrap();
        assert!(public.contains(ip("8.8.8.8")));
        assert!(!public.contains(ip("127.0.0.1")));
        assert!(!public.contains(ip("169.254.1.1")));
        assert!(!public.contains(ip("255.255.255.255")));
        assert!(Range::parse("loopback").unwrap().contains(ip("::1")));
        assert!(Range::parse("unicast").unwrap().contains(ip("10.0.0.1")));
        assert!(!Range::parse("unicast").unwrap().contains(ip("224.0.0.1")));
        assert!(
            Range::parse("link_local_multicast")
                .unwrap()
                .contains(ip("224.0.0.251"))
        );
        assert!(
            Range::parse("interface_local_multicast")
                .unwrap()
                .contains(ip("ff01::1"))
        );
        assert!(Range::parse("unspecified").unwrap().contains(ip("::")));
    }

    #[test]
    fn bad_ranges_are_rejected() {
        for s in [
            "192.168.1.0",
            "192.168.1.0/33",
            "privat",
            "10.0.0.0/x",
            "::/129",
        ] {
            assert!(Range::parse(s).is_err(), "{s}");
        }
    }
}
