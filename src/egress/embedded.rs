//! IPv6 addresses that carry an IPv4 address, and which one: traffic to them ends up at that
//! IPv4 destination (through a translator, a relay or the host's own stack), so the guard
//! classifies the IPv4 address with the IPv4 deny list rather than trusting the IPv6 prefix.

use std::net::{Ipv4Addr, Ipv6Addr};

/// `::ffff:0:0/96`, IPv4-mapped: the socket talks IPv4 to the last 32 bits.
const MAPPED: (u128, u8) = (0xffff << 32, 96);
/// `::ffff:0:0:0/96`, IPv4-translated (SIIT, RFC 7915): the last 32 bits.
const TRANSLATED: (u128, u8) = (0xffff << 48, 96);
/// `64:ff9b::/96`, the NAT64 well-known prefix (RFC 6052): the last 32 bits.
const NAT64: (u128, u8) = (0x0064_ff9b << 96, 96);
/// `64:ff9b:1::/48`, NAT64 local-use (RFC 8215): the IPv4 position depends on the prefix length
/// the site chose, so every position RFC 6052 allows inside a /48 is a candidate.
pub const NAT64_LOCAL: (u128, u8) = (0x0064_ff9b_0001 << 80, 48);
/// `2002::/16`, 6to4 (RFC 3056): bits 16–47 are the IPv4 address of the site's relay.
const SIX_TO_FOUR: (u128, u8) = (0x2002 << 112, 16);
/// `2001::/32`, Teredo (RFC 4380): bits 32–63 are the server's IPv4 address and the last 32
/// bits the client's, XOR'd with `0xffffffff`.
const TEREDO: (u128, u8) = (0x2001_0000 << 96, 32);

fn within(bits: u128, (net, len): (u128, u8)) -> bool {
    bits >> (128 - len) == net >> (128 - len)
}

fn v4(bits: u128, shift: u32) -> Ipv4Addr {
    Ipv4Addr::from((bits >> shift) as u32)
}

/// The IPv4 addresses `ip` embeds (every one a packet to it may reach), or `None` when it is not
/// one of the embedding forms. The IPv4-compatible form `::/96` is not listed: it is deprecated
/// and refused outright.
pub fn embedded_ipv4(ip: Ipv6Addr) -> Option<Vec<Ipv4Addr>> {
    let bits = u128::from(ip);
    if within(bits, MAPPED) || within(bits, TRANSLATED) || within(bits, NAT64) {
        return Some(vec![v4(bits, 0)]);
    }
    if within(bits, SIX_TO_FOUR) {
        return Some(vec![v4(bits, 80)]);
    }
    if within(bits, TEREDO) {
        return Some(vec![v4(bits, 64), Ipv4Addr::from(!(bits as u32))]);
    }
    if within(bits, NAT64_LOCAL) {
        // RFC 6052: bits 64–71 (the "u" octet) are always zero; anything else is not a valid
        // translated address and stays refused by the prefix itself.
        if (bits >> 56) as u8 != 0 {
            return None;
        }
        let byte = |i: u32| (bits >> (120 - 8 * i)) as u8;
        let at = |idx: [u32; 4]| Ipv4Addr::from(idx.map(byte));
        return Some(vec![
            at([6, 7, 9, 10]),    // /48
            at([7, 9, 10, 11]),   // /56
            at([9, 10, 11, 12]),  // /64
            at([12, 13, 14, 15]), // /96
        ]);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn embedded(text: &str) -> Option<Vec<String>> {
        let ip: Ipv6Addr = text.parse().expect("test address");
        embedded_ipv4(ip).map(|v| v.iter().map(Ipv4Addr::to_string).collect())
    }

    #[test]
    fn each_form_yields_the_ipv4_it_carries() {
        for (ip, expected) in [
            ("::ffff:127.0.0.1", vec!["127.0.0.1"]),
            ("::ffff:0:10.1.2.3", vec!["10.1.2.3"]),
            ("64:ff9b::8.8.4.4", vec!["8.8.4.4"]),
            ("2002:7f00:1::1", vec!["127.0.0.1"]),
            ("2002:c0a8:101:5::9", vec!["192.168.1.1"]),
            // Teredo: server 65.54.227.120, client 192.0.2.45 (the RFC 4380 example).
            (
                "2001:0:4136:e378:8000:63bf:3fff:fdd2",
                vec!["65.54.227.120", "192.0.2.45"],
            ),
            // NAT64 local-use, 127.0.0.1 written at the /48 position (u octet skipped).
            (
                "64:ff9b:1:7f00:0:100::",
                vec!["127.0.0.1", "0.0.1.0", "0.1.0.0", "0.0.0.0"],
            ),
        ] {
            assert_eq!(
                embedded(ip),
                Some(expected.iter().map(|s| s.to_string()).collect()),
                "{ip}"
            );
        }
    }

    #[test]
    fn other_addresses_embed_nothing() {
        for ip in [
            "2606:4700::1111",
            "::1",
            "::",
            "fe80::1",
            "2003::1",
            "2001:db8::1",
        ] {
            assert_eq!(embedded(ip), None, "{ip}");
        }
        // A NAT64 local-use address with a non-zero u octet is not a translated address.
        assert_eq!(embedded("64:ff9b:1:0:ff00::1"), None);
    }
}
