//! The DHCPv4 message layout (RFC 2131 §2, BOOTP's fixed header) and the
//! option area (RFC 2132 §2, long options split per RFC 3396).
//!
//! ```text
//!  0        1        2        3
//!  op       htype    hlen     hops
//!  xid (4)
//!  secs (2)          flags (2)
//!  ciaddr (4)  yiaddr (4)  siaddr (4)  giaddr (4)
//!  chaddr (16)
//!  sname (64)
//!  file (128)
//!  magic cookie 99.130.83.99, then options: code, length, value ... 255
//! ```
//!
//! Parsing never panics: every length is checked against the buffer, and
//! a message that does not fit the layout is a [`WireError`].

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;

/// Bytes before the options: the fixed header and the magic cookie.
pub const HEADER_LEN: usize = 240;
/// BOOTP's minimum message size; some clients drop shorter replies.
pub const MIN_REPLY_LEN: usize = 300;
pub const MAGIC_COOKIE: [u8; 4] = [99, 130, 83, 99];

pub const OP_REQUEST: u8 = 1;
pub const OP_REPLY: u8 = 2;
pub const HTYPE_ETHERNET: u8 = 1;
/// The "broadcast" bit of `flags` (RFC 2131 §2 figure 2).
pub const FLAG_BROADCAST: u16 = 0x8000;

/// Option codes this server reads or writes (RFC 2132 unless noted).
pub mod code {
    pub const PAD: u8 = 0;
    pub const SUBNET_MASK: u8 = 1;
    pub const ROUTER: u8 = 3;
    pub const DNS_SERVERS: u8 = 6;
    pub const HOST_NAME: u8 = 12;
    pub const DOMAIN_NAME: u8 = 15;
    pub const INTERFACE_MTU: u8 = 26;
    pub const NTP_SERVERS: u8 = 42;
    pub const REQUESTED_IP: u8 = 50;
    pub const LEASE_TIME: u8 = 51;
    pub const OVERLOAD: u8 = 52;
    pub const MESSAGE_TYPE: u8 = 53;
    pub const SERVER_ID: u8 = 54;
    pub const PARAMETER_REQUEST_LIST: u8 = 55;
    pub const MESSAGE: u8 = 56;
    pub const RENEWAL_TIME: u8 = 58;
    pub const REBINDING_TIME: u8 = 59;
    pub const CLIENT_ID: u8 = 61;
    pub const TFTP_SERVER_NAME: u8 = 66;
    pub const BOOT_FILE_NAME: u8 = 67;
    /// RFC 3397.
    pub const DOMAIN_SEARCH: u8 = 119;
    /// RFC 3442.
    pub const CLASSLESS_ROUTES: u8 = 121;
    pub const END: u8 = 255;
}

/// DHCP message types (option 53).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageType {
    Discover,
    Offer,
    Request,
    Decline,
    Ack,
    Nak,
    Release,
    Inform,
}

impl MessageType {
    pub fn from_byte(b: u8) -> Option<MessageType> {
        Some(match b {
            1 => MessageType::Discover,
            2 => MessageType::Offer,
            3 => MessageType::Request,
            4 => MessageType::Decline,
            5 => MessageType::Ack,
            6 => MessageType::Nak,
            7 => MessageType::Release,
            8 => MessageType::Inform,
            _ => return None,
        })
    }

    pub fn to_byte(self) -> u8 {
        match self {
            MessageType::Discover => 1,
            MessageType::Offer => 2,
            MessageType::Request => 3,
            MessageType::Decline => 4,
            MessageType::Ack => 5,
            MessageType::Nak => 6,
            MessageType::Release => 7,
            MessageType::Inform => 8,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            MessageType::Discover => "DISCOVER",
            MessageType::Offer => "OFFER",
            MessageType::Request => "REQUEST",
            MessageType::Decline => "DECLINE",
            MessageType::Ack => "ACK",
            MessageType::Nak => "NAK",
            MessageType::Release => "RELEASE",
            MessageType::Inform => "INFORM",
        }
    }
}

/// Why a datagram is not a DHCP message this server can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    TooShort(usize),
    NotRequest(u8),
    NotEthernet {
        htype: u8,
        hlen: u8,
    },
    BadMagic,
    /// An option's length runs past the end of the message.
    TruncatedOption(u8),
    NoMessageType,
    BadMessageType(u8),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::TooShort(n) => write!(f, "{n} bytes, shorter than a DHCP header"),
            WireError::NotRequest(op) => write!(f, "op {op} is not BOOTREQUEST"),
            WireError::NotEthernet { htype, hlen } => {
                write!(f, "hardware type {htype}/length {hlen} is not Ethernet")
            }
            WireError::BadMagic => f.write_str("no DHCP magic cookie"),
            WireError::TruncatedOption(c) => write!(f, "option {c} runs past the end"),
            WireError::NoMessageType => f.write_str("no message type option (BOOTP?)"),
            WireError::BadMessageType(t) => write!(f, "unknown message type {t}"),
        }
    }
}

/// A client's message, as far as this server needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub message_type: MessageType,
    pub xid: [u8; 4],
    pub flags: u16,
    pub ciaddr: Ipv4Addr,
    pub giaddr: Ipv4Addr,
    pub chaddr: [u8; 16],
    pub mac: [u8; 6],
    /// Every option, by code; repeated codes concatenated (RFC 3396).
    pub options: BTreeMap<u8, Vec<u8>>,
}

impl Request {
    pub fn requested_ip(&self) -> Option<Ipv4Addr> {
        ipv4_option(self.options.get(&code::REQUESTED_IP)?)
    }

    pub fn server_id(&self) -> Option<Ipv4Addr> {
        ipv4_option(self.options.get(&code::SERVER_ID)?)
    }

    pub fn wants_broadcast(&self) -> bool {
        self.flags & FLAG_BROADCAST != 0
    }
}

fn ipv4_option(value: &[u8]) -> Option<Ipv4Addr> {
    let octets: [u8; 4] = value.try_into().ok()?;
    Some(Ipv4Addr::from(octets))
}

fn read_ipv4(buf: &[u8], at: usize) -> Ipv4Addr {
    Ipv4Addr::new(buf[at], buf[at + 1], buf[at + 2], buf[at + 3])
}

/// Reads a client message (op BOOTREQUEST, Ethernet, with option 53).
pub fn parse_request(buf: &[u8]) -> Result<Request, WireError> {
    if buf.len() < HEADER_LEN {
        return Err(WireError::TooShort(buf.len()));
    }
    if buf[0] != OP_REQUEST {
        return Err(WireError::NotRequest(buf[0]));
    }
    if buf[1] != HTYPE_ETHERNET || buf[2] != 6 {
        return Err(WireError::NotEthernet {
            htype: buf[1],
            hlen: buf[2],
        });
    }
    if buf[236..240] != MAGIC_COOKIE {
        return Err(WireError::BadMagic);
    }
    let mut options = BTreeMap::new();
    let overload = read_options(&buf[HEADER_LEN..], &mut options)?;
    // Option 52: the file (1), sname (2) or both (3) fields hold options too.
    if overload & 1 != 0 {
        read_options(&buf[108..236], &mut options)?;
    }
    if overload & 2 != 0 {
        read_options(&buf[44..108], &mut options)?;
    }
    let message_type = match options.get(&code::MESSAGE_TYPE).map(Vec::as_slice) {
        None | Some([]) => return Err(WireError::NoMessageType),
        Some([t, ..]) => MessageType::from_byte(*t).ok_or(WireError::BadMessageType(*t))?,
    };
    let mut chaddr = [0u8; 16];
    chaddr.copy_from_slice(&buf[28..44]);
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&buf[28..34]);
    Ok(Request {
        message_type,
        xid: [buf[4], buf[5], buf[6], buf[7]],
        flags: u16::from_be_bytes([buf[10], buf[11]]),
        ciaddr: read_ipv4(buf, 12),
        giaddr: read_ipv4(buf, 24),
        chaddr,
        mac,
        options,
    })
}

/// Adds the options in `area` to `into`; returns the overload value
/// (option 52), 0 when absent.
fn read_options(area: &[u8], into: &mut BTreeMap<u8, Vec<u8>>) -> Result<u8, WireError> {
    let mut overload = 0;
    let mut i = 0;
    while i < area.len() {
        let c = area[i];
        match c {
            code::PAD => i += 1,
            code::END => break,
            _ => {
                let len = *area.get(i + 1).ok_or(WireError::TruncatedOption(c))? as usize;
                let value = area
                    .get(i + 2..i + 2 + len)
                    .ok_or(WireError::TruncatedOption(c))?;
                if c == code::OVERLOAD {
                    overload = value.first().copied().unwrap_or(0);
                }
                into.entry(c).or_default().extend_from_slice(value);
                i += 2 + len;
            }
        }
    }
    Ok(overload)
}

/// A reply under construction: the fixed header, then options in the order
/// they are added.
pub struct Reply {
    buf: Vec<u8>,
}

impl Reply {
    /// A BOOTREPLY to `request` of type `message_type`, giving `yiaddr`.
    pub fn new(
        request: &Request,
        message_type: MessageType,
        yiaddr: Ipv4Addr,
        siaddr: Ipv4Addr,
    ) -> Reply {
        let mut buf = vec![0u8; HEADER_LEN];
        buf[0] = OP_REPLY;
        buf[1] = HTYPE_ETHERNET;
        buf[2] = 6;
        buf[4..8].copy_from_slice(&request.xid);
        buf[10..12].copy_from_slice(&(request.flags & FLAG_BROADCAST).to_be_bytes());
        // RFC 2131 table 3: ciaddr is echoed in an ACK, 0 in OFFER and NAK.
        if message_type == MessageType::Ack {
            buf[12..16].copy_from_slice(&request.ciaddr.octets());
        }
        buf[16..20].copy_from_slice(&yiaddr.octets());
        buf[20..24].copy_from_slice(&siaddr.octets());
        buf[24..28].copy_from_slice(&request.giaddr.octets());
        buf[28..44].copy_from_slice(&request.chaddr);
        buf[236..240].copy_from_slice(&MAGIC_COOKIE);
        let mut reply = Reply { buf };
        reply.option(code::MESSAGE_TYPE, &[message_type.to_byte()]);
        reply
    }

    /// Appends option `code`; values longer than 255 bytes become several
    /// consecutive instances (RFC 3396), an empty value one empty option.
    pub fn option(&mut self, code: u8, value: &[u8]) {
        if value.is_empty() {
            self.buf.extend_from_slice(&[code, 0]);
            return;
        }
        for chunk in value.chunks(255) {
            self.buf.push(code);
            // At most 255: chunks of 255.
            self.buf.push(u8::try_from(chunk.len()).unwrap_or(u8::MAX));
            self.buf.extend_from_slice(chunk);
        }
    }

    /// The finished message: END, padded to BOOTP's minimum size.
    pub fn finish(mut self) -> Vec<u8> {
        self.buf.push(code::END);
        if self.buf.len() < MIN_REPLY_LEN {
            self.buf.resize(MIN_REPLY_LEN, code::PAD);
        }
        self.buf
    }
}

/// RFC 1035 §3.1 names, one after the other, each ending in the root
/// label: the value of option 119 (RFC 3397, without compression).
pub fn encode_domain_list(domains: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for domain in domains {
        let labels: Vec<&str> = domain
            .trim_end_matches('.')
            .split('.')
            .filter(|label| !label.is_empty())
            .collect();
        // A DNS label is at most 63 bytes: a name with a longer one is not
        // a domain, and is left out rather than sent mangled.
        let Some(lengths) = labels
            .iter()
            .map(|label| u8::try_from(label.len()).ok().filter(|n| *n <= 63))
            .collect::<Option<Vec<u8>>>()
        else {
            continue;
        };
        for (label, length) in labels.iter().zip(lengths) {
            out.push(length);
            out.extend_from_slice(label.as_bytes());
        }
        out.push(0);
    }
    out
}

/// One classless static route (RFC 3442): destination, prefix length,
/// gateway (0.0.0.0 for an on-link route).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClasslessRoute {
    pub destination: Ipv4Addr,
    pub prefix: u8,
    pub gateway: Ipv4Addr,
}

/// The value of option 121: per route the prefix length, the significant
/// octets of the destination, and the gateway.
pub fn encode_classless_routes(routes: &[ClasslessRoute]) -> Vec<u8> {
    let mut out = Vec::new();
    for route in routes {
        let prefix = route.prefix.min(32);
        let significant = (prefix as usize).div_ceil(8);
        out.push(prefix);
        out.extend_from_slice(&route.destination.octets()[..significant]);
        out.extend_from_slice(&route.gateway.octets());
    }
    out
}

/// A DISCOVER or REQUEST as a client would send it (tests and benchmarks).
pub fn client_message(
    message_type: MessageType,
    mac: [u8; 6],
    xid: u32,
    extra: &[(u8, Vec<u8>)],
) -> Vec<u8> {
    let mut buf = vec![0u8; HEADER_LEN];
    buf[0] = OP_REQUEST;
    buf[1] = HTYPE_ETHERNET;
    buf[2] = 6;
    buf[4..8].copy_from_slice(&xid.to_be_bytes());
    buf[10..12].copy_from_slice(&FLAG_BROADCAST.to_be_bytes());
    buf[28..34].copy_from_slice(&mac);
    buf[236..240].copy_from_slice(&MAGIC_COOKIE);
    buf.extend_from_slice(&[code::MESSAGE_TYPE, 1, message_type.to_byte()]);
    for (c, value) in extra {
        buf.push(*c);
        buf.push(u8::try_from(value.len()).unwrap());
        buf.extend_from_slice(value);
    }
    buf.push(code::END);
    buf
}

/// Reads a reply (tests, benchmarks and the bench's client): the message
/// type, yiaddr and options.
pub fn parse_reply(buf: &[u8]) -> Option<(MessageType, Ipv4Addr, BTreeMap<u8, Vec<u8>>)> {
    if buf.len() < HEADER_LEN || buf[0] != OP_REPLY || buf[236..240] != MAGIC_COOKIE {
        return None;
    }
    let mut options = BTreeMap::new();
    read_options(&buf[HEADER_LEN..], &mut options).ok()?;
    let message_type = MessageType::from_byte(*options.get(&code::MESSAGE_TYPE)?.first()?)?;
    Some((message_type, read_ipv4(buf, 16), options))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [0x52, 0x54, 0, 0x7e, 0x57, 1];

    #[test]
    fn parses_a_discover_with_its_options() {
        let msg = client_message(
            MessageType::Discover,
            MAC,
            0x1234_5678,
            &[
                (code::PARAMETER_REQUEST_LIST, vec![1, 3, 6, 15, 26, 119]),
                (code::REQUESTED_IP, vec![10, 0, 2, 2]),
            ],
        );
        let req = parse_request(&msg).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(req.message_type, MessageType::Discover);
        assert_eq!(req.mac, MAC);
        assert_eq!(req.xid, [0x12, 0x34, 0x56, 0x78]);
        assert!(req.wants_broadcast());
        assert_eq!(req.requested_ip(), Some(Ipv4Addr::new(10, 0, 2, 2)));
        assert_eq!(req.server_id(), None);
        assert_eq!(
            req.options.get(&code::PARAMETER_REQUEST_LIST),
            Some(&vec![1, 3, 6, 15, 26, 119])
        );
    }

    #[test]
    fn rejects_what_is_not_a_dhcp_request() {
        let good = client_message(MessageType::Discover, MAC, 1, &[]);
        assert_eq!(parse_request(&good[..100]), Err(WireError::TooShort(100)));
        let mut reply = good.clone();
        reply[0] = OP_REPLY;
        assert_eq!(parse_request(&reply), Err(WireError::NotRequest(2)));
        let mut magic = good.clone();
        magic[238] = 0;
        assert_eq!(parse_request(&magic), Err(WireError::BadMagic));
        let mut truncated = good[..HEADER_LEN].to_vec();
        truncated.extend_from_slice(&[code::MESSAGE_TYPE, 5, 1]);
        assert_eq!(
            parse_request(&truncated),
            Err(WireError::TruncatedOption(code::MESSAGE_TYPE))
        );
        let mut bootp = good[..HEADER_LEN].to_vec();
        bootp.push(code::END);
        assert_eq!(parse_request(&bootp), Err(WireError::NoMessageType));
        let mut token_ring = good.clone();
        token_ring[1] = 6;
        assert!(matches!(
            parse_request(&token_ring),
            Err(WireError::NotEthernet { .. })
        ));
        let mut odd_type = good;
        odd_type[HEADER_LEN + 2] = 42;
        assert_eq!(parse_request(&odd_type), Err(WireError::BadMessageType(42)));
    }

    #[test]
    fn overloaded_file_field_holds_options() {
        let mut msg = client_message(MessageType::Request, MAC, 7, &[(code::OVERLOAD, vec![1])]);
        // Requested IP in the file field.
        msg[108..115].copy_from_slice(&[code::REQUESTED_IP, 4, 10, 0, 2, 2, code::END]);
        let req = parse_request(&msg).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(req.requested_ip(), Some(Ipv4Addr::new(10, 0, 2, 2)));
    }

    #[test]
    fn replies_echo_the_transaction_and_split_long_options() {
        let req = parse_request(&client_message(MessageType::Request, MAC, 9, &[]))
            .unwrap_or_else(|e| panic!("{e}"));
        let mut reply = Reply::new(
            &req,
            MessageType::Ack,
            Ipv4Addr::new(10, 0, 2, 2),
            Ipv4Addr::new(10, 0, 2, 1),
        );
        let long = vec![7u8; 300];
        reply.option(code::DOMAIN_SEARCH, &long);
        let bytes = reply.finish();
        assert!(bytes.len() >= MIN_REPLY_LEN);
        assert_eq!(&bytes[4..8], &req.xid);
        assert_eq!(&bytes[28..34], &MAC);
        let (kind, yiaddr, options) = parse_reply(&bytes).unwrap_or_else(|| panic!("no reply"));
        assert_eq!(kind, MessageType::Ack);
        assert_eq!(yiaddr, Ipv4Addr::new(10, 0, 2, 2));
        // The two pieces are concatenated again on reading (RFC 3396).
        assert_eq!(options.get(&code::DOMAIN_SEARCH), Some(&long));
    }

    #[test]
    fn search_domains_and_routes_encode_as_the_rfcs_say() {
        assert_eq!(
            encode_domain_list(&["example.com".into(), "a.b.".into()]),
            b"\x07example\x03com\x00\x01a\x01b\x00".to_vec()
        );
        let routes = [
            ClasslessRoute {
                destination: Ipv4Addr::new(10, 0, 0, 0),
                prefix: 8,
                gateway: Ipv4Addr::new(10, 1, 2, 3),
            },
            ClasslessRoute {
                destination: Ipv4Addr::new(192, 168, 1, 0),
                prefix: 24,
                gateway: Ipv4Addr::new(192, 168, 2, 3),
            },
            ClasslessRoute {
                destination: Ipv4Addr::UNSPECIFIED,
                prefix: 0,
                gateway: Ipv4Addr::new(10, 1, 1, 1),
            },
        ];
        assert_eq!(
            encode_classless_routes(&routes),
            vec![
                8, 10, 10, 1, 2, 3, 24, 192, 168, 1, 192, 168, 2, 3, 0, 10, 1, 1, 1
            ]
        );
    }
}
