//! The DHCPv6 server of an IPv6 masquerade interface (RFC 8415; KubeVirt:
//! pkg/network/dhcp/serverv6). It hands out one address, fd10:0:2::2 by
//! default, with the pod's IPv6 DNS servers and search domains.
//!
//! ```text
//! msg-type (1) | transaction-id (3) | options: code (2), length (2), value
//! ```
//!
//! Like KubeVirt's, it answers any client on the interface: on a
//! masquerade bridge the only other port is the guest's tap, and a
//! DHCPv6 client identifies itself by a DUID, not necessarily by its MAC.

use std::fmt;
use std::net::Ipv6Addr;

use super::dhcp::LEASE_SECONDS;

pub mod msg {
    pub const SOLICIT: u8 = 1;
    pub const ADVERTISE: u8 = 2;
    pub const REQUEST: u8 = 3;
    pub const CONFIRM: u8 = 4;
    pub const RENEW: u8 = 5;
    pub const REBIND: u8 = 6;
    pub const REPLY: u8 = 7;
    pub const RELEASE: u8 = 8;
    pub const DECLINE: u8 = 9;
    pub const INFORMATION_REQUEST: u8 = 11;
}

pub mod opt {
    pub const CLIENT_ID: u16 = 1;
    pub const SERVER_ID: u16 = 2;
    pub const IA_NA: u16 = 3;
    pub const IA_ADDR: u16 = 5;
    pub const STATUS_CODE: u16 = 13;
    pub const RAPID_COMMIT: u16 = 14;
    pub const DNS_SERVERS: u16 = 23;
    pub const DOMAIN_LIST: u16 = 24;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum V6Error {
    TooShort(usize),
    TruncatedOption(u16),
    NotAClientMessage(u8),
    NoClientId,
}

impl fmt::Display for V6Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            V6Error::TooShort(n) => write!(f, "{n} bytes, shorter than a DHCPv6 header"),
            V6Error::TruncatedOption(c) => write!(f, "option {c} runs past the end"),
            V6Error::NotAClientMessage(t) => write!(f, "message type {t} is not a client's"),
            V6Error::NoClientId => f.write_str("no client identifier"),
        }
    }
}

/// The server's side of the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V6Lease {
    pub address: Ipv6Addr,
    /// The MAC of the interface the server listens on (its DUID-LL).
    pub server_mac: [u8; 6],
    pub dns_servers: Vec<Ipv6Addr>,
    pub search_domains: Vec<String>,
}

/// Options of a message, in order.
fn options(buf: &[u8]) -> Result<Vec<(u16, &[u8])>, V6Error> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < buf.len() {
        let header = buf.get(i..i + 4).ok_or(V6Error::TruncatedOption(0))?;
        let code = u16::from_be_bytes([header[0], header[1]]);
        let len = u16::from_be_bytes([header[2], header[3]]) as usize;
        let value = buf
            .get(i + 4..i + 4 + len)
            .ok_or(V6Error::TruncatedOption(code))?;
        out.push((code, value));
        i += 4 + len;
    }
    Ok(out)
}

fn put_option(out: &mut Vec<u8>, code: u16, value: &[u8]) {
    out.extend_from_slice(&code.to_be_bytes());
    let length = u16::try_from(value.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(&value[..usize::from(length)]);
}

/// The answer to one client message, or why there is none.
pub fn answer(lease: &V6Lease, datagram: &[u8]) -> Result<Vec<u8>, V6Error> {
    if datagram.len() < 4 {
        return Err(V6Error::TooShort(datagram.len()));
    }
    let kind = datagram[0];
    let reply_kind = match kind {
        msg::SOLICIT => msg::ADVERTISE,
        msg::REQUEST
        | msg::CONFIRM
        | msg::RENEW
        | msg::REBIND
        | msg::RELEASE
        | msg::DECLINE
        | msg::INFORMATION_REQUEST => msg::REPLY,
        other => return Err(V6Error::NotAClientMessage(other)),
    };
    let opts = options(&datagram[4..])?;
    let client_id = opts
        .iter()
        .find(|(c, _)| *c == opt::CLIENT_ID)
        .map(|(_, v)| *v);
    let rapid = kind == msg::SOLICIT && opts.iter().any(|(c, _)| *c == opt::RAPID_COMMIT);
    let reply_kind = if rapid { msg::REPLY } else { reply_kind };
    let client_id = match client_id {
        Some(id) => id,
        // Only an Information-request may come without one.
        None if kind == msg::INFORMATION_REQUEST => &[],
        None => return Err(V6Error::NoClientId),
    };
    let mut out = vec![reply_kind, datagram[1], datagram[2], datagram[3]];
    if !client_id.is_empty() {
        put_option(&mut out, opt::CLIENT_ID, client_id);
    }
    // DUID-LL (type 3), hardware type 1 (Ethernet).
    let mut duid = vec![0, 3, 0, 1];
    duid.extend_from_slice(&lease.server_mac);
    put_option(&mut out, opt::SERVER_ID, &duid);
    if rapid {
        put_option(&mut out, opt::RAPID_COMMIT, &[]);
    }
    match kind {
        msg::SOLICIT | msg::REQUEST | msg::RENEW | msg::REBIND => {
            // One IA_NA per IA_NA asked for (its IAID echoed), or one with
            // IAID 0 when the client asked for none.
            let iaids: Vec<[u8; 4]> = opts
                .iter()
                .filter(|(c, v)| *c == opt::IA_NA && v.len() >= 12)
                .map(|(_, v)| [v[0], v[1], v[2], v[3]])
                .collect();
            let iaids = if iaids.is_empty() {
                vec![[0; 4]]
            } else {
                iaids
            };
            for iaid in iaids {
                let mut ia = iaid.to_vec();
                ia.extend_from_slice(&0u32.to_be_bytes()); // T1: client's choice
                ia.extend_from_slice(&0u32.to_be_bytes()); // T2
                let mut addr = lease.address.octets().to_vec();
                addr.extend_from_slice(&LEASE_SECONDS.to_be_bytes()); // preferred
                addr.extend_from_slice(&LEASE_SECONDS.to_be_bytes()); // valid
                put_option(&mut ia, opt::IA_ADDR, &addr);
                put_option(&mut out, opt::IA_NA, &ia);
            }
        }
        msg::CONFIRM | msg::RELEASE | msg::DECLINE => {
            // Status Success.
            put_option(&mut out, opt::STATUS_CODE, &[0, 0]);
        }
        _ => {}
    }
    if !lease.dns_servers.is_empty() {
        let servers: Vec<u8> = lease.dns_servers.iter().flat_map(|a| a.octets()).collect();
        put_option(&mut out, opt::DNS_SERVERS, &servers);
    }
    if !lease.search_domains.is_empty() {
        put_option(
            &mut out,
            opt::DOMAIN_LIST,
            &super::dhcp::wire::encode_domain_list(&lease.search_domains),
        );
    }
    Ok(out)
}

/// The address in the first IA_NA of a server's reply (tests).
pub fn offered_address(reply: &[u8]) -> Option<Ipv6Addr> {
    let opts = options(reply.get(4..)?).ok()?;
    let (_, ia) = opts.iter().find(|(c, _)| *c == opt::IA_NA)?;
    let inner = options(ia.get(12..)?).ok()?;
    let (_, addr) = inner.iter().find(|(c, _)| *c == opt::IA_ADDR)?;
    let octets: [u8; 16] = addr.get(..16)?.try_into().ok()?;
    Some(Ipv6Addr::from(octets))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease() -> V6Lease {
        V6Lease {
            address: "fd10:0:2::2".parse().unwrap_or(Ipv6Addr::UNSPECIFIED),
            server_mac: [2, 0, 0, 0, 0, 0],
            dns_servers: vec!["fd00::10".parse().unwrap_or(Ipv6Addr::UNSPECIFIED)],
            search_domains: vec!["cluster.local".into()],
        }
    }

    fn solicit(rapid: bool) -> Vec<u8> {
        let mut m = vec![msg::SOLICIT, 0xab, 0xcd, 0xef];
        put_option(
            &mut m,
            opt::CLIENT_ID,
            &[0, 3, 0, 1, 0x52, 0x54, 0, 1, 2, 3],
        );
        put_option(&mut m, opt::IA_NA, &[0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0]);
        if rapid {
            put_option(&mut m, opt::RAPID_COMMIT, &[]);
        }
        m
    }

    #[test]
    fn solicit_gets_an_advertise_with_the_address() {
        let reply = answer(&lease(), &solicit(false)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reply[0], msg::ADVERTISE);
        assert_eq!(&reply[1..4], &[0xab, 0xcd, 0xef]);
        assert_eq!(offered_address(&reply), "fd10:0:2::2".parse().ok());
        let opts = options(&reply[4..]).unwrap_or_default();
        let ia = opts
            .iter()
            .find(|(c, _)| *c == opt::IA_NA)
            .map(|(_, v)| v.to_vec());
        assert_eq!(ia.map(|v| v[..4].to_vec()), Some(vec![0, 0, 0, 7]));
        assert!(
            opts.iter()
                .any(|(c, v)| *c == opt::CLIENT_ID && v.len() == 10)
        );
        assert!(
            opts.iter()
                .any(|(c, v)| *c == opt::SERVER_ID && v == &[0, 3, 0, 1, 2, 0, 0, 0, 0, 0])
        );
        assert!(
            opts.iter()
                .any(|(c, v)| *c == opt::DNS_SERVERS && v.len() == 16)
        );
        let rapid = answer(&lease(), &solicit(true)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rapid[0], msg::REPLY);
    }

    #[test]
    fn request_renew_and_information_request() {
        let mut request = solicit(false);
        request[0] = msg::REQUEST;
        let reply = answer(&lease(), &request).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (reply[0], offered_address(&reply)),
            (msg::REPLY, "fd10:0:2::2".parse().ok())
        );
        let info = [msg::INFORMATION_REQUEST, 1, 2, 3];
        let reply = answer(&lease(), &info).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reply[0], msg::REPLY);
        assert_eq!(offered_address(&reply), None);
    }

    #[test]
    fn garbage_is_refused_without_panic() {
        assert_eq!(answer(&lease(), &[1, 2]), Err(V6Error::TooShort(2)));
        assert_eq!(
            answer(&lease(), &[msg::ADVERTISE, 0, 0, 0]),
            Err(V6Error::NotAClientMessage(2))
        );
        assert_eq!(
            answer(&lease(), &[msg::SOLICIT, 0, 0, 0]),
            Err(V6Error::NoClientId)
        );
        assert_eq!(
            answer(&lease(), &[msg::SOLICIT, 0, 0, 0, 0, 1, 0, 9, 1]),
            Err(V6Error::TruncatedOption(1))
        );
        let mut state: u64 = 0x1234_5678_9abc_def1;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let valid = solicit(false);
        for round in 0..10_000 {
            let packet: Vec<u8> = if round % 2 == 0 {
                (0..(next() % 200))
                    .map(|_| next().to_le_bytes()[0])
                    .collect()
            } else {
                let mut p = valid[..(usize::try_from(next()).unwrap() % valid.len())].to_vec();
                if let Some(b) = p.get_mut(usize::try_from(next()).unwrap() % valid.len()) {
                    *b = next().to_le_bytes()[0];
                }
                p
            };
            match (answer(&lease(), &packet), expected_refusal(&packet)) {
                (Err(got), Some(expected)) => assert_eq!(got, expected, "{packet:02x?}"),
                (Ok(reply), None) => assert_answers(&packet, &reply),
                (got, expected) => {
                    panic!("{packet:02x?}: answered {got:02x?}, expected refusal {expected:?}")
                }
            }
        }
        assert!(answer(&lease(), &valid).is_ok());
    }

    /// Why a server must refuse `packet`, worked out apart from `answer`:
    /// `None` for a client message it must answer.
    fn expected_refusal(packet: &[u8]) -> Option<V6Error> {
        let Some((&kind, rest)) = packet.split_first().filter(|_| packet.len() >= 4) else {
            return Some(V6Error::TooShort(packet.len()));
        };
        if !matches!(kind, 1 | 3..=6 | 8 | 9 | 11) {
            return Some(V6Error::NotAClientMessage(kind));
        }
        let mut options = &rest[3..];
        let mut client_id = false;
        while !options.is_empty() {
            let Some(header) = options.get(..4) else {
                return Some(V6Error::TruncatedOption(0));
            };
            let code = u16::from_be_bytes([header[0], header[1]]);
            let len = usize::from(u16::from_be_bytes([header[2], header[3]]));
            let Some(next) = options.get(4 + len..) else {
                return Some(V6Error::TruncatedOption(code));
            };
            client_id |= code == 1;
            options = next;
        }
        (!client_id && kind != 11).then_some(V6Error::NoClientId)
    }

    /// `reply` answers the client message `packet`: an Advertise or Reply
    /// with its transaction id, the server's identifier and, if the
    /// client sent one, the client's.
    fn assert_answers(packet: &[u8], reply: &[u8]) {
        assert!(
            matches!(reply[0], msg::ADVERTISE | msg::REPLY),
            "{packet:02x?} -> {reply:02x?}"
        );
        assert_eq!(reply[1..4], packet[1..4], "transaction id");
        let codes: Vec<u16> = options(&reply[4..])
            .unwrap_or_else(|e| panic!("{e}: {reply:02x?}"))
            .iter()
            .map(|(code, _)| *code)
            .collect();
        assert!(codes.contains(&opt::SERVER_ID), "{reply:02x?}");
        let asked = options(&packet[4..]).unwrap_or_default();
        if let Some((_, id)) = asked.iter().find(|(code, _)| *code == opt::CLIENT_ID) {
            let echoed = options(&reply[4..]).unwrap_or_default();
            assert!(
                echoed.contains(&(opt::CLIENT_ID, *id)) || id.is_empty(),
                "{reply:02x?}"
            );
        }
    }
}
