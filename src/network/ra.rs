//! Router advertisements for an IPv6 masquerade interface (RFC 4861
//! §4.2). KubeVirt's guests get their default IPv6 route from cloud-init;
//! this launcher also advertises the gateway, so a guest that
//! autoconfigures learns the route by itself and, from the "managed"
//! flag, that its address comes from DHCPv6 (a /120 cannot be used for
//! stateless autoconfiguration).
//!
//! The kernel fills in the ICMPv6 checksum of a raw ICMPv6 socket.

use std::net::Ipv6Addr;

pub const ROUTER_SOLICITATION: u8 = 133;
pub const ROUTER_ADVERTISEMENT: u8 = 134;

/// Router lifetime in seconds (RFC 4861 default: 3 × MaxRtrAdvInterval).
pub const ROUTER_LIFETIME: u16 = 1800;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advertisement {
    /// The bridge's MAC (source link-layer address option).
    pub router_mac: [u8; 6],
    pub mtu: u32,
    /// The on-link prefix (fd10:0:2::/120), advertised on-link only.
    pub prefix: Ipv6Addr,
    pub prefix_len: u8,
}

impl Advertisement {
    /// The ICMPv6 message (checksum left 0 for the kernel).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![
            ROUTER_ADVERTISEMENT,
            0, // code
            0,
            0,    // checksum
            64,   // current hop limit
            0xc0, // M (managed address configuration) | O (other configuration)
        ];
        out.extend_from_slice(&ROUTER_LIFETIME.to_be_bytes());
        out.extend_from_slice(&0u32.to_be_bytes()); // reachable time: unspecified
        out.extend_from_slice(&0u32.to_be_bytes()); // retrans timer: unspecified
        // Source link-layer address: type 1, length 1 (× 8 bytes).
        out.extend_from_slice(&[1, 1]);
        out.extend_from_slice(&self.router_mac);
        // MTU: type 5, length 1.
        out.extend_from_slice(&[5, 1, 0, 0]);
        out.extend_from_slice(&self.mtu.to_be_bytes());
        // Prefix information: type 3, length 4; L (on-link), not A.
        out.extend_from_slice(&[3, 4, self.prefix_len, 0x80]);
        out.extend_from_slice(&u32::MAX.to_be_bytes()); // valid lifetime: infinite
        out.extend_from_slice(&u32::MAX.to_be_bytes()); // preferred lifetime
        out.extend_from_slice(&0u32.to_be_bytes());
        out.extend_from_slice(&self.prefix.octets());
        out
    }
}

/// Whether an ICMPv6 message is a well-formed router solicitation.
pub fn is_solicitation(message: &[u8]) -> bool {
    message.len() >= 8 && message[0] == ROUTER_SOLICITATION && message[1] == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertisement_layout() {
        let ra = Advertisement {
            router_mac: [2, 0, 0, 0, 0, 0],
            mtu: 1480,
            prefix: "fd10:0:2::".parse().unwrap_or(Ipv6Addr::UNSPECIFIED),
            prefix_len: 120,
        }
        .encode();
        assert_eq!(ra.len(), 16 + 8 + 8 + 32);
        assert_eq!(ra[0], ROUTER_ADVERTISEMENT);
        assert_eq!(ra[5], 0xc0);
        assert_eq!(u16::from_be_bytes([ra[6], ra[7]]), ROUTER_LIFETIME);
        assert_eq!(&ra[16..24], &[1, 1, 2, 0, 0, 0, 0, 0]);
        assert_eq!(&ra[24..32], &[5, 1, 0, 0, 0, 0, 0x05, 0xc8]);
        assert_eq!(&ra[32..36], &[3, 4, 120, 0x80]);
        assert_eq!(&ra[48..50], &[0xfd, 0x10]);
        assert!(is_solicitation(&[133, 0, 0, 0, 0, 0, 0, 0]));
        assert!(!is_solicitation(&[133, 0, 0]));
        assert!(!is_solicitation(&[134, 0, 0, 0, 0, 0, 0, 0]));
    }
}
