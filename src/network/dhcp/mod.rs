//! The launcher's DHCPv4 server for one guest interface (KubeVirt:
//! pkg/network/dhcp/server). It serves exactly one client, the VMI's MAC,
//! with one address for as long as the VM lives.
//!
//! [`Answerer::answer`] is pure: bytes in, a reply or the reason for
//! silence out. The socket and the thread are in `super::server`.

pub mod wire;

use std::fmt;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use wire::{ClasslessRoute, MessageType, Reply, WireError, code};

/// KubeVirt's "infinite" lease: 999 days.
pub const LEASE_SECONDS: u32 = 999 * 24 * 3600;

/// What the guest is told, fixed when the interface is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    /// The only client answered (until [`ClientMac::set`] changes it).
    pub client_mac: [u8; 6],
    pub address: Ipv4Addr,
    pub prefix: u8,
    /// The server identifier (option 54) and `siaddr`: an address of the
    /// interface the server listens on.
    pub server: Ipv4Addr,
    pub router: Option<Ipv4Addr>,
    /// Further routes besides the default one (bridge binding: the pod
    /// interface's routes).
    pub routes: Vec<ClasslessRoute>,
    pub dns_servers: Vec<Ipv4Addr>,
    pub search_domains: Vec<String>,
    pub hostname: String,
    pub mtu: u16,
    /// The VMI's `dhcpOptions`.
    pub extra: ExtraOptions,
}

/// KubeVirt's `DHCPOptions`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtraOptions {
    pub boot_file_name: Option<String>,
    pub tftp_server_name: Option<String>,
    pub ntp_servers: Vec<Ipv4Addr>,
    /// Codes 224–254 only.
    pub private: Vec<(u8, Vec<u8>)>,
}

/// Why a datagram got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ignored {
    Malformed(WireError),
    /// Another MAC than the VMI's.
    ForeignClient([u8; 6]),
    /// A REQUEST that selected another server's offer.
    OtherServer(Ipv4Addr),
    /// RELEASE, DECLINE, INFORM, or a server's message type.
    Unhandled(MessageType),
}

impl Ignored {
    /// Malformed and foreign packets are counted and logged (rate-limited);
    /// the rest is normal protocol traffic.
    pub fn is_noise(&self) -> bool {
        matches!(self, Ignored::Malformed(_) | Ignored::ForeignClient(_))
    }
}

impl fmt::Display for Ignored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ignored::Malformed(e) => write!(f, "malformed: {e}"),
            Ignored::ForeignClient(mac) => write!(f, "from foreign MAC {}", format_mac(mac)),
            Ignored::OtherServer(ip) => write!(f, "REQUEST for server {ip}"),
            Ignored::Unhandled(t) => write!(f, "{} not answered", t.name()),
        }
    }
}

/// Where a reply goes (RFC 2131 §4.1): to the client's address when it
/// has one (renewing), else broadcast on the interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyTarget {
    Broadcast,
    Unicast(Ipv4Addr),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Reply {
        kind: MessageType,
        bytes: Vec<u8>,
        to: ReplyTarget,
    },
    Ignored(Ignored),
}

/// The one MAC a server answers, shared with the launcher: a migration
/// target learns the guest's MAC only when the domain arrives (the source
/// chose it from its own pod interface), and the server must answer that
/// guest, not the MAC the target's pod interface would have given it.
#[derive(Debug)]
pub struct ClientMac(AtomicU64);

impl ClientMac {
    pub fn new(mac: [u8; 6]) -> ClientMac {
        ClientMac(AtomicU64::new(mac_to_u64(&mac)))
    }

    pub fn get(&self) -> [u8; 6] {
        let bytes = self.0.load(Ordering::Relaxed).to_be_bytes();
        [bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7]]
    }

    /// Answers `mac` from now on; returns the MAC answered before.
    pub fn set(&self, mac: [u8; 6]) -> [u8; 6] {
        let old = self
            .0
            .swap(mac_to_u64(&mac), Ordering::Relaxed)
            .to_be_bytes();
        [old[2], old[3], old[4], old[5], old[6], old[7]]
    }
}

fn mac_to_u64(mac: &[u8; 6]) -> u64 {
    let mut bytes = [0u8; 8];
    bytes[2..].copy_from_slice(mac);
    u64::from_be_bytes(bytes)
}

/// Answers DHCP messages for one lease. The options are encoded once.
#[derive(Debug, Clone)]
pub struct Answerer {
    config: LeaseConfig,
    options: Vec<(u8, Vec<u8>)>,
    client: Arc<ClientMac>,
}

impl Answerer {
    pub fn new(config: LeaseConfig) -> Answerer {
        let options = lease_options(&config);
        let client = Arc::new(ClientMac::new(config.client_mac));
        Answerer {
            config,
            options,
            client,
        }
    }

    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// The MAC this answerer serves, to change while it runs.
    pub fn client(&self) -> Arc<ClientMac> {
        self.client.clone()
    }

    pub fn answer(&self, datagram: &[u8]) -> Outcome {
        let request = match wire::parse_request(datagram) {
            Ok(r) => r,
            Err(e) => return Outcome::Ignored(Ignored::Malformed(e)),
        };
        if request.mac != self.client.get() {
            return Outcome::Ignored(Ignored::ForeignClient(request.mac));
        }
        let to = if request.ciaddr.is_unspecified() || request.wants_broadcast() {
            ReplyTarget::Broadcast
        } else {
            ReplyTarget::Unicast(request.ciaddr)
        };
        match request.message_type {
            MessageType::Discover => self.reply(&request, MessageType::Offer, to),
            MessageType::Request => {
                if let Some(server) = request.server_id()
                    && server != self.config.server
                {
                    return Outcome::Ignored(Ignored::OtherServer(server));
                }
                // The address asked for: option 50 when selecting or
                // rebooting, ciaddr when renewing or rebinding.
                let asked = request
                    .requested_ip()
                    .or((!request.ciaddr.is_unspecified()).then_some(request.ciaddr));
                match asked {
                    Some(ip) if ip != self.config.address => {
                        // A stale address: NAK so the client starts over
                        // with a DISCOVER (RFC 2131 §4.3.2).
                        let mut nak = Reply::new(
                            &request,
                            MessageType::Nak,
                            Ipv4Addr::UNSPECIFIED,
                            Ipv4Addr::UNSPECIFIED,
                        );
                        nak.option(code::SERVER_ID, &self.config.server.octets());
                        nak.option(code::MESSAGE, b"requested address is not this client's");
                        Outcome::Reply {
                            kind: MessageType::Nak,
                            bytes: nak.finish(),
                            to: ReplyTarget::Broadcast,
                        }
                    }
                    _ => self.reply(&request, MessageType::Ack, to),
                }
            }
            other => Outcome::Ignored(Ignored::Unhandled(other)),
        }
    }

    fn reply(&self, request: &wire::Request, kind: MessageType, to: ReplyTarget) -> Outcome {
        let mut reply = Reply::new(request, kind, self.config.address, self.config.server);
        for (c, value) in &self.options {
            reply.option(*c, value);
        }
        Outcome::Reply {
            kind,
            bytes: reply.finish(),
            to,
        }
    }
}

/// Every option of the lease, in the order they are sent.
fn lease_options(config: &LeaseConfig) -> Vec<(u8, Vec<u8>)> {
    let mut options = vec![
        (code::SERVER_ID, config.server.octets().to_vec()),
        (code::LEASE_TIME, LEASE_SECONDS.to_be_bytes().to_vec()),
        (
            code::SUBNET_MASK,
            prefix_to_mask(config.prefix).octets().to_vec(),
        ),
    ];
    if let Some(router) = config.router {
        options.push((code::ROUTER, router.octets().to_vec()));
    }
    if !config.dns_servers.is_empty() {
        options.push((
            code::DNS_SERVERS,
            config
                .dns_servers
                .iter()
                .flat_map(|ip| ip.octets())
                .collect(),
        ));
    }
    if !config.routes.is_empty() {
        // With option 121 clients ignore option 3 (RFC 3442), so the
        // default route goes last in the list too, after the routes that
        // make its gateway reachable.
        let mut routes = config.routes.clone();
        if let Some(router) = config.router {
            routes.push(ClasslessRoute {
                destination: Ipv4Addr::UNSPECIFIED,
                prefix: 0,
                gateway: router,
            });
        }
        options.push((
            code::CLASSLESS_ROUTES,
            wire::encode_classless_routes(&routes),
        ));
    }
    if !config.search_domains.is_empty() {
        options.push((
            code::DOMAIN_SEARCH,
            wire::encode_domain_list(&config.search_domains),
        ));
        // Windows asks for a domain name and resolves with it: the
        // longest search domain, as KubeVirt sends.
        if let Some(longest) = config.search_domains.iter().max_by_key(|d| d.len()) {
            options.push((code::DOMAIN_NAME, longest.as_bytes().to_vec()));
        }
    }
    if !config.hostname.is_empty() {
        options.push((code::HOST_NAME, config.hostname.as_bytes().to_vec()));
    }
    options.push((code::INTERFACE_MTU, config.mtu.to_be_bytes().to_vec()));
    let extra = &config.extra;
    if let Some(name) = extra.tftp_server_name.as_deref().filter(|s| !s.is_empty()) {
        options.push((code::TFTP_SERVER_NAME, name.as_bytes().to_vec()));
    }
    if let Some(file) = extra.boot_file_name.as_deref().filter(|s| !s.is_empty()) {
        options.push((code::BOOT_FILE_NAME, file.as_bytes().to_vec()));
    }
    if !extra.ntp_servers.is_empty() {
        options.push((
            code::NTP_SERVERS,
            extra
                .ntp_servers
                .iter()
                .flat_map(|ip| ip.octets())
                .collect(),
        ));
    }
    for (c, value) in &extra.private {
        if (224..=254).contains(c) {
            options.push((*c, value.clone()));
        }
    }
    options
}

pub fn prefix_to_mask(prefix: u8) -> Ipv4Addr {
    let prefix = u32::from(prefix.min(32));
    let bits = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    Ipv4Addr::from(bits)
}

pub fn format_mac(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// "52:54:00:7e:57:01" (or with '-') → bytes.
pub fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let parts: Vec<&str> = text.split([':', '-']).collect();
    if parts.len() != 6 {
        return None;
    }
    let mut mac = [0u8; 6];
    for (byte, part) in mac.iter_mut().zip(parts) {
        if part.len() != 2 {
            return None;
        }
        *byte = u8::from_str_radix(part, 16).ok()?;
    }
    Some(mac)
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    const MAC: [u8; 6] = [0x52, 0x54, 0, 0x7e, 0x57, 1];

    pub fn lease() -> LeaseConfig {
        LeaseConfig {
            client_mac: MAC,
            address: Ipv4Addr::new(10, 0, 2, 2),
            prefix: 24,
            server: Ipv4Addr::new(10, 0, 2, 1),
            router: Some(Ipv4Addr::new(10, 0, 2, 1)),
            routes: Vec::new(),
            dns_servers: vec![Ipv4Addr::new(10, 96, 0, 10)],
            search_domains: vec![
                "default.svc.cluster.local".into(),
                "svc.cluster.local".into(),
                "cluster.local".into(),
            ],
            hostname: "vmi-masquerade".into(),
            mtu: 1480,
            extra: ExtraOptions {
                boot_file_name: Some("pxelinux.0".into()),
                tftp_server_name: Some("tftp.example".into()),
                ntp_servers: vec![Ipv4Addr::new(10, 0, 0, 123)],
                private: vec![(240, b"private".to_vec()), (10, b"ignored".to_vec())],
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::tests_support::lease as masquerade_lease;
    use super::wire::{client_message, parse_reply};
    use super::*;

    const MAC: [u8; 6] = [0x52, 0x54, 0, 0x7e, 0x57, 1];

    fn reply_of(outcome: Outcome) -> (MessageType, Ipv4Addr, BTreeMap<u8, Vec<u8>>, ReplyTarget) {
        match outcome {
            Outcome::Reply { bytes, to, .. } => {
                let (kind, yiaddr, options) =
                    parse_reply(&bytes).unwrap_or_else(|| panic!("unreadable reply"));
                (kind, yiaddr, options, to)
            }
            Outcome::Ignored(why) => panic!("ignored: {why}"),
        }
    }

    #[test]
    fn discover_gets_an_offer_with_every_option() {
        let answerer = Answerer::new(masquerade_lease());
        let (kind, yiaddr, options, to) =
            reply_of(answerer.answer(&client_message(MessageType::Discover, MAC, 1, &[])));
        assert_eq!(kind, MessageType::Offer);
        assert_eq!(yiaddr, Ipv4Addr::new(10, 0, 2, 2));
        assert_eq!(to, ReplyTarget::Broadcast);
        let get = |c: u8| options.get(&c).cloned().unwrap_or_default();
        assert_eq!(get(code::SUBNET_MASK), vec![255, 255, 255, 0]);
        assert_eq!(get(code::ROUTER), vec![10, 0, 2, 1]);
        assert_eq!(get(code::SERVER_ID), vec![10, 0, 2, 1]);
        assert_eq!(get(code::DNS_SERVERS), vec![10, 96, 0, 10]);
        assert_eq!(get(code::HOST_NAME), b"vmi-masquerade".to_vec());
        assert_eq!(get(code::INTERFACE_MTU), 1480u16.to_be_bytes().to_vec());
        assert_eq!(
            get(code::DOMAIN_NAME),
            b"default.svc.cluster.local".to_vec()
        );
        assert!(
            get(code::DOMAIN_SEARCH).starts_with(b"\x07default\x03svc\x07cluster\x05local\x00")
        );
        assert_eq!(get(code::LEASE_TIME), LEASE_SECONDS.to_be_bytes().to_vec());
        assert_eq!(get(code::BOOT_FILE_NAME), b"pxelinux.0".to_vec());
        assert_eq!(get(code::TFTP_SERVER_NAME), b"tftp.example".to_vec());
        assert_eq!(get(code::NTP_SERVERS), vec![10, 0, 0, 123]);
        assert_eq!(get(240), b"private".to_vec());
        // Private options are 224-254 only.
        assert!(!options.contains_key(&10));
        assert!(!options.contains_key(&code::CLASSLESS_ROUTES));
    }

    #[test]
    fn request_gets_an_ack_and_a_stale_address_a_nak() {
        let answerer = Answerer::new(masquerade_lease());
        let selecting = client_message(
            MessageType::Request,
            MAC,
            2,
            &[
                (code::REQUESTED_IP, vec![10, 0, 2, 2]),
                (code::SERVER_ID, vec![10, 0, 2, 1]),
            ],
        );
        let (kind, yiaddr, _, _) = reply_of(answerer.answer(&selecting));
        assert_eq!(
            (kind, yiaddr),
            (MessageType::Ack, Ipv4Addr::new(10, 0, 2, 2))
        );

        let stale = client_message(
            MessageType::Request,
            MAC,
            3,
            &[(code::REQUESTED_IP, vec![10, 0, 2, 15])],
        );
        let (kind, yiaddr, options, _) = reply_of(answerer.answer(&stale));
        assert_eq!((kind, yiaddr), (MessageType::Nak, Ipv4Addr::UNSPECIFIED));
        assert!(!options.contains_key(&code::ROUTER));

        let other = client_message(
            MessageType::Request,
            MAC,
            4,
            &[(code::SERVER_ID, vec![192, 0, 2, 99])],
        );
        assert_eq!(
            answerer.answer(&other),
            Outcome::Ignored(Ignored::OtherServer(Ipv4Addr::new(192, 0, 2, 99)))
        );
    }

    #[test]
    fn renewal_is_answered_to_the_clients_address() {
        let answerer = Answerer::new(masquerade_lease());
        let mut renew = client_message(MessageType::Request, MAC, 5, &[]);
        renew[10] = 0; // no broadcast flag
        renew[12..16].copy_from_slice(&[10, 0, 2, 2]);
        let (kind, _, _, to) = reply_of(answerer.answer(&renew));
        assert_eq!(kind, MessageType::Ack);
        assert_eq!(to, ReplyTarget::Unicast(Ipv4Addr::new(10, 0, 2, 2)));
    }

    #[test]
    fn other_clients_and_message_types_are_ignored() {
        let answerer = Answerer::new(masquerade_lease());
        let foreign = [0x52, 0x54, 0, 0, 0, 9];
        assert_eq!(
            answerer.answer(&client_message(MessageType::Discover, foreign, 1, &[])),
            Outcome::Ignored(Ignored::ForeignClient(foreign))
        );
        let release = answerer.answer(&client_message(MessageType::Release, MAC, 1, &[]));
        assert_eq!(
            release,
            Outcome::Ignored(Ignored::Unhandled(MessageType::Release))
        );
        assert!(matches!(
            answerer.answer(b"hello"),
            Outcome::Ignored(Ignored::Malformed(_))
        ));
    }

    #[test]
    fn a_new_client_mac_is_answered_and_the_old_one_no_longer() {
        let answerer = Answerer::new(masquerade_lease());
        let migrated = [0x0a, 0x58, 0x0a, 0xf4, 0, 7];
        let handle = answerer.client();
        assert_eq!(handle.set(migrated), MAC);
        assert_eq!(handle.get(), migrated);
        let (kind, yiaddr, _, _) =
            reply_of(answerer.answer(&client_message(MessageType::Discover, migrated, 1, &[])));
        assert_eq!(
            (kind, yiaddr),
            (MessageType::Offer, Ipv4Addr::new(10, 0, 2, 2))
        );
        assert_eq!(
            answerer.answer(&client_message(MessageType::Discover, MAC, 2, &[])),
            Outcome::Ignored(Ignored::ForeignClient(MAC))
        );
    }

    #[test]
    fn bridge_routes_end_with_the_default_route() {
        let mut lease = masquerade_lease();
        lease.routes = vec![ClasslessRoute {
            destination: Ipv4Addr::new(10, 10, 0, 0),
            prefix: 16,
            gateway: Ipv4Addr::new(10, 0, 2, 254),
        }];
        let answerer = Answerer::new(lease);
        let (_, _, options, _) =
            reply_of(answerer.answer(&client_message(MessageType::Discover, MAC, 1, &[])));
        assert_eq!(
            options.get(&code::CLASSLESS_ROUTES),
            Some(&vec![16, 10, 10, 10, 0, 2, 254, 0, 10, 0, 2, 1])
        );
    }

    /// Random and truncated datagrams: never a panic, never an answer to a
    /// foreign or broken message, and the answerer still answers afterwards.
    #[test]
    fn random_and_truncated_packets_never_panic() {
        let answerer = Answerer::new(masquerade_lease());
        let mut state: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let valid = client_message(
            MessageType::Request,
            MAC,
            77,
            &[(code::PARAMETER_REQUEST_LIST, vec![1, 3, 6])],
        );
        let mut answered = 0;
        for round in 0..20_000 {
            let packet: Vec<u8> = match round % 4 {
                // Pure noise of any length up to 600 bytes.
                0 => (0..(next() % 600))
                    .map(|_| next().to_le_bytes()[0])
                    .collect(),
                // A valid message cut anywhere.
                1 => valid[..(usize::try_from(next()).unwrap() % valid.len())].to_vec(),
                // A valid message with a few bytes flipped.
                2 => {
                    let mut p = valid.clone();
                    for _ in 0..(1 + next() % 6) {
                        let at = usize::try_from(next()).unwrap() % p.len();
                        p[at] = next().to_le_bytes()[0];
                    }
                    p
                }
                // A valid header followed by random options.
                _ => {
                    let mut p = valid[..wire::HEADER_LEN].to_vec();
                    p.extend((0..(next() % 80)).map(|_| next().to_le_bytes()[0]));
                    p
                }
            };
            if let Outcome::Reply { bytes, .. } = answerer.answer(&packet) {
                answered += 1;
                let (_, _, _) = parse_reply(&bytes).unwrap_or_else(|| panic!("bad reply"));
                // Only the VMI's MAC is ever answered.
                assert_eq!(&bytes[28..34], &MAC);
            }
        }
        // Flipped bytes outside the MAC and type still make valid requests.
        assert!(answered > 0);
        let (kind, _, _, _) = reply_of(answerer.answer(&valid));
        assert_eq!(kind, MessageType::Ack);
    }

    #[test]
    fn masks_and_macs() {
        assert_eq!(prefix_to_mask(24), Ipv4Addr::new(255, 255, 255, 0));
        assert_eq!(prefix_to_mask(0), Ipv4Addr::UNSPECIFIED);
        assert_eq!(prefix_to_mask(32), Ipv4Addr::BROADCAST);
        assert_eq!(prefix_to_mask(20), Ipv4Addr::new(255, 255, 240, 0));
        assert_eq!(parse_mac("52:54:00:7E:57:01"), Some(MAC));
        assert_eq!(parse_mac("52-54-00-7e-57-01"), Some(MAC));
        assert_eq!(parse_mac("52:54:00:7e:57"), None);
        assert_eq!(parse_mac("52:54:00:7e:57:zz"), None);
        assert_eq!(format_mac(&MAC), "52:54:00:7e:57:01");
    }
}
