//! Which IP addresses are the machine itself or its networks: the ranges the
//! daemon never connects to on someone else's word unless `egress.allow`
//! names them. It works on parsed addresses only, so every textual form
//! (`127.1`, `2130706433`, `0x7f000001`, `0`, `::ffff:127.0.0.1`) arrives
//! here as the same `IpAddr` the connection would use.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is denied by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    /// `0.0.0.0/8`, `::`: "this host" to most stacks.
    Unspecified,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// `10/8`, `172.16/12`, `192.168/16`, `fc00::/7`.
    Private,
    /// `100.64.0.0/10`: carrier-grade NAT, a provider's inside network.
    Shared,
    /// `169.254/16` (cloud metadata services live there), `fe80::/10`.
    LinkLocal,
    /// Multicast and broadcast: never a single receiver.
    Multicast,
    /// Documentation, benchmarking, IETF and future-use ranges, the
    /// deprecated IPv6 site-local and IPv4-compatible forms, Teredo.
    Reserved,
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AddressClass::Unspecified => "unspecified, this machine",
            AddressClass::Loopback => "loopback, this machine",
            AddressClass::Private => "a private network",
            AddressClass::Shared => "a carrier-grade NAT network",
            AddressClass::LinkLocal => "link-local",
            AddressClass::Multicast => "multicast or broadcast",
            AddressClass::Reserved => "a reserved range",
        })
    }
}

/// The class that denies `ip`, or `None` for an address on the internet.
pub fn class(ip: IpAddr) -> Option<AddressClass> {
    match ip {
        IpAddr::V4(v4) => class_v4(v4),
        IpAddr::V6(v6) => class_v6(v6),
    }
}

fn class_v4(ip: Ipv4Addr) -> Option<AddressClass> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, _, _) => AddressClass::Unspecified,
        (127, _, _) => AddressClass::Loopback,
        (10, _, _) | (192, 168, _) => AddressClass::Private,
        (172, 16..=31, _) => AddressClass::Private,
        (100, 64..=127, _) => AddressClass::Shared,
        (169, 254, _) => AddressClass::LinkLocal,
        (224..=239, _, _) | (255, 255, 255) => AddressClass::Multicast,
        // IETF protocol assignments, TEST-NET-1/2/3, benchmarking,
        // 6to4 relay anycast, and 240/4 (future use).
        (192, 0, 0) | (192, 0, 2) | (198, 51, 100) | (203, 0, 113) | (192, 88, 99) => {
            AddressClass::Reserved
        }
        (198, 18..=19, _) | (240..=255, _, _) => AddressClass::Reserved,
        _ => return None,
    })
}

fn class_v6(ip: Ipv6Addr) -> Option<AddressClass> {
    if ip.is_unspecified() {
        return Some(AddressClass::Unspecified);
    }
    if ip.is_loopback() {
        return Some(AddressClass::Loopback);
    }
    // Forms that carry an IPv4 address reach that address: judge it.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return class_v4(v4);
    }
    let s = ip.segments();
    // NAT64 (64:ff9b::/96) translates to the embedded IPv4 address.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return class_v4(embedded_v4(&s));
    }
    // 6to4 (2002::/16) tunnels to the IPv4 address in segments 1 and 2.
    if s[0] == 0x2002 {
        let [a, b] = s[1].to_be_bytes();
        let [c, d] = s[2].to_be_bytes();
        return class_v4(Ipv4Addr::new(a, b, c, d));
    }
    Some(match s[0] {
        // IPv4-compatible (::a.b.c.d, deprecated) and the rest of ::/8.
        0x0000 => AddressClass::Reserved,
        x if x & 0xfe00 == 0xfc00 => AddressClass::Private,
        x if x & 0xffc0 == 0xfe80 => AddressClass::LinkLocal,
        x if x & 0xffc0 == 0xfec0 => AddressClass::Reserved,
        x if x & 0xff00 == 0xff00 => AddressClass::Multicast,
        // Discard-only (100::/64), Teredo (2001::/32), documentation
        // (2001:db8::/32).
        0x0100 if s[1..4] == [0, 0, 0] => AddressClass::Reserved,
        0x2001 if s[1] == 0 || s[1] == 0x0db8 => AddressClass::Reserved,
        _ => return None,
    })
}

fn embedded_v4(s: &[u16; 8]) -> Ipv4Addr {
    let [a, b] = s[6].to_be_bytes();
    let [c, d] = s[7].to_be_bytes();
    Ipv4Addr::new(a, b, c, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(text: &str) -> Option<AddressClass> {
        class(text.parse().unwrap())
    }

    #[test]
    fn the_machine_and_its_networks_are_denied() {
        use AddressClass::*;
        for (ip, want) in [
            ("127.0.0.1", Loopback),
            ("127.255.0.9", Loopback),
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", Unspecified),
            ("10.0.0.1", Private),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("192.168.1.1", Private),
            ("100.64.0.1", Shared),
            ("169.254.169.254", LinkLocal),
            ("224.0.0.1", Multicast),
            ("255.255.255.255", Multicast),
            ("240.0.0.1", Reserved),
            ("192.0.2.1", Reserved),
            ("198.18.0.1", Reserved),
            ("::", Unspecified),
            ("::1", Loopback),
            ("::ffff:127.0.0.1", Loopback),
            ("::ffff:7f00:1", Loopback),
            ("::ffff:10.1.2.3", Private),
            ("::ffff:169.254.169.254", LinkLocal),
            ("::127.0.0.1", Reserved),
            ("64:ff9b::7f00:1", Loopback),
            ("2002:7f00:1::", Loopback),
            ("2002:a00:1::", Private),
            ("fc00::1", Private),
            ("fd12:3456::1", Private),
            ("fe80::1", LinkLocal),
            ("fec0::1", Reserved),
            ("ff02::1", Multicast),
            ("2001:db8::1", Reserved),
            ("2001:0:4136:e378::1", Reserved),
        ] {
            assert_eq!(of(ip), Some(want), "{ip}");
        }
    }

    #[test]
    fn internet_addresses_pass() {
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "172.15.255.255",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "169.253.0.1",
            "192.169.0.1",
            "2606:4700:4700::1111",
            "2a00:1450:4001::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::",
        ] {
            assert_eq!(of(ip), None, "{ip}");
        }
    }
}
