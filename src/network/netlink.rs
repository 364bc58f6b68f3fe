//! A small rtnetlink client (rtnetlink(7)): list links, addresses and
//! routes; create bridges and dummies; change, rename and delete links;
//! add and remove addresses and routes. Used instead of running `ip`
//! several times: one socket, a few microseconds per change.

use std::io;
use std::net::IpAddr;

use crate::os::net::NetlinkSocket;

const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_GETLINK: u16 = 18;
const RTM_NEWADDR: u16 = 20;
const RTM_DELADDR: u16 = 21;
const RTM_GETADDR: u16 = 22;
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_DUMP: u16 = 0x300;
const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_MASTER: u16 = 10;
const IFLA_LINKINFO: u16 = 18;
const IFLA_INFO_KIND: u16 = 1;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_FLAGS: u16 = 8;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_PRIORITY: u16 = 6;
const RTA_TABLE: u16 = 15;
const IFF_UP: u32 = 1;
pub const IFA_F_NODAD: u32 = 0x02;
const RT_TABLE_MAIN: u8 = 254;
const RT_SCOPE_UNIVERSE: u8 = 0;
const RTPROT_BOOT: u8 = 3;
const RTN_UNICAST: u8 = 1;
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "address families are small positive numbers (2 and 10)"
)]
const AF_INET: u8 = libc::AF_INET as u8;
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "address families are small positive numbers (2 and 10)"
)]
const AF_INET6: u8 = libc::AF_INET6 as u8;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    pub mac: Option<[u8; 6]>,
    pub mtu: u32,
    pub up: bool,
    pub master: Option<u32>,
    pub kind: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Address {
    pub ip: IpAddr,
    pub prefix: u8,
    pub scope: u8,
}

impl Address {
    /// Global unicast (not link-local, loopback or multicast).
    pub fn is_global(&self) -> bool {
        self.scope == RT_SCOPE_UNIVERSE
            && match self.ip {
                IpAddr::V4(v4) => !v4.is_loopback() && !v4.is_link_local(),
                IpAddr::V6(v6) => {
                    !v6.is_loopback() && !v6.is_unicast_link_local() && !v6.is_multicast()
                }
            }
    }
}

/// A route of the main table through one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub destination: Option<(IpAddr, u8)>,
    pub gateway: Option<IpAddr>,
    pub metric: Option<u32>,
    pub scope: u8,
    pub protocol: u8,
}

/// Changes to a link; `None` leaves a property as it is.
#[derive(Debug, Clone, Default)]
pub struct LinkChange {
    pub up: Option<bool>,
    pub mtu: Option<u32>,
    /// `Some(0)` removes the link from its bridge.
    pub master: Option<u32>,
    pub name: Option<String>,
    pub mac: Option<[u8; 6]>,
}

pub struct Netlink {
    socket: NetlinkSocket,
    seq: u32,
}

/// One message being built: header, fixed part, attributes.
struct Message {
    buf: Vec<u8>,
}

impl Message {
    fn new(kind: u16, flags: u16, seq: u32, fixed: &[u8]) -> Message {
        let mut buf = vec![0u8; 16];
        buf[4..6].copy_from_slice(&kind.to_ne_bytes());
        buf[6..8].copy_from_slice(&(flags | NLM_F_REQUEST).to_ne_bytes());
        buf[8..12].copy_from_slice(&seq.to_ne_bytes());
        buf.extend_from_slice(fixed);
        Message { buf }
    }

    fn attr(&mut self, kind: u16, value: &[u8]) {
        // Attributes here are names, addresses and small numbers; one too
        // long for the field would be refused by the kernel as malformed.
        let len = u16::try_from(4 + value.len()).unwrap_or(u16::MAX);
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(value);
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    /// A nested attribute holding one string attribute (IFLA_LINKINFO).
    fn nested_kind(&mut self, kind: &str) {
        let mut inner = Message { buf: Vec::new() };
        let mut name = kind.as_bytes().to_vec();
        name.push(0);
        inner.attr(IFLA_INFO_KIND, &name);
        self.attr(IFLA_LINKINFO, &inner.buf);
    }

    fn finish(mut self) -> Vec<u8> {
        let len = u32::try_from(self.buf.len()).unwrap_or(u32::MAX);
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        self.buf
    }
}

fn ifinfomsg(index: u32, flags: u32, change: u32) -> [u8; 16] {
    let mut m = [0u8; 16];
    // The kernel's ifi_index is an int; interface indices are positive.
    m[4..8].copy_from_slice(&index.cast_signed().to_ne_bytes());
    m[8..12].copy_from_slice(&flags.to_ne_bytes());
    m[12..16].copy_from_slice(&change.to_ne_bytes());
    m
}

/// Attributes after `offset` in a message body.
fn attrs(body: &[u8], offset: usize) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let mut i = offset;
    while i + 4 <= body.len() {
        let len = u16::from_ne_bytes([body[i], body[i + 1]]) as usize;
        let kind = u16::from_ne_bytes([body[i + 2], body[i + 3]]) & 0x3fff;
        if len < 4 || i + len > body.len() {
            break;
        }
        out.push((kind, &body[i + 4..i + len]));
        i += len.div_ceil(4) * 4;
    }
    out
}

fn ip_from(family: u8, bytes: &[u8]) -> Option<IpAddr> {
    match family {
        AF_INET => {
            let o: [u8; 4] = bytes.get(..4)?.try_into().ok()?;
            Some(IpAddr::from(o))
        }
        AF_INET6 => {
            let o: [u8; 16] = bytes.get(..16)?.try_into().ok()?;
            Some(IpAddr::from(o))
        }
        _ => None,
    }
}

fn ip_bytes(ip: &IpAddr) -> (u8, Vec<u8>) {
    match ip {
        IpAddr::V4(v4) => (AF_INET, v4.octets().to_vec()),
        IpAddr::V6(v6) => (AF_INET6, v6.octets().to_vec()),
    }
}

fn u32_of(bytes: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.get(..4)?.try_into().ok()?))
}

impl Netlink {
    pub fn open() -> io::Result<Netlink> {
        Ok(Netlink {
            socket: NetlinkSocket::open()?,
            seq: 1,
        })
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Sends a request and waits for its acknowledgement.
    fn request(&mut self, message: Message) -> io::Result<()> {
        let bytes = message.finish();
        let seq = u32::from_ne_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        self.socket.send(&bytes)?;
        let mut buf = vec![0u8; 65536];
        loop {
            let n = self.socket.recv(&mut buf)?;
            for (kind, msg_seq, body) in split(&buf[..n]) {
                if msg_seq != seq {
                    continue;
                }
                if kind == NLMSG_ERROR {
                    let errno = body
                        .get(..4)
                        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                        .unwrap_or(0);
                    return if errno == 0 {
                        Ok(())
                    } else {
                        Err(io::Error::from_raw_os_error(-errno))
                    };
                }
            }
        }
    }

    /// Sends a dump request and returns every reply body of type `kind`.
    fn dump(&mut self, request: u16, fixed: &[u8], kind: u16) -> io::Result<Vec<Vec<u8>>> {
        let seq = self.next_seq();
        let bytes = Message::new(request, NLM_F_DUMP, seq, fixed).finish();
        self.socket.send(&bytes)?;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 65536];
        loop {
            let n = self.socket.recv(&mut buf)?;
            for (msg_kind, msg_seq, body) in split(&buf[..n]) {
                if msg_seq != seq {
                    continue;
                }
                match msg_kind {
                    NLMSG_DONE => return Ok(out),
                    NLMSG_ERROR => {
                        let errno = body
                            .get(..4)
                            .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                            .unwrap_or(0);
                        return Err(io::Error::from_raw_os_error(-errno));
                    }
                    k if k == kind => out.push(body.to_vec()),
                    _ => {}
                }
            }
        }
    }

    pub fn links(&mut self) -> io::Result<Vec<Link>> {
        let bodies = self.dump(RTM_GETLINK, &ifinfomsg(0, 0, 0), RTM_NEWLINK)?;
        Ok(bodies.iter().filter_map(|b| parse_link(b)).collect())
    }

    pub fn link(&mut self, name: &str) -> io::Result<Option<Link>> {
        Ok(self.links()?.into_iter().find(|l| l.name == name))
    }

    pub fn addresses(&mut self, index: u32) -> io::Result<Vec<Address>> {
        let bodies = self.dump(RTM_GETADDR, &[0u8; 8], RTM_NEWADDR)?;
        Ok(bodies
            .iter()
            .filter_map(|body| {
                if body.len() < 8 {
                    return None;
                }
                let family = body[0];
                let index_of = u32::from_ne_bytes([body[4], body[5], body[6], body[7]]);
                if index_of != index {
                    return None;
                }
                let attributes = attrs(body, 8);
                let ip = attributes
                    .iter()
                    .find(|(k, _)| *k == IFA_LOCAL)
                    .or_else(|| attributes.iter().find(|(k, _)| *k == IFA_ADDRESS))
                    .and_then(|(_, v)| ip_from(family, v))?;
                Some(Address {
                    ip,
                    prefix: body[1],
                    scope: body[3],
                })
            })
            .collect())
    }

    /// Main-table routes whose output device is `index`.
    pub fn routes(&mut self, index: u32) -> io::Result<Vec<Route>> {
        let mut out = Vec::new();
        for family in [AF_INET, AF_INET6] {
            let mut fixed = [0u8; 12];
            fixed[0] = family;
            for body in self.dump(RTM_GETROUTE, &fixed, RTM_NEWROUTE)? {
                if body.len() < 12 {
                    continue;
                }
                let attributes = attrs(&body, 12);
                let table = attributes
                    .iter()
                    .find(|(k, _)| *k == RTA_TABLE)
                    .and_then(|(_, v)| u32_of(v))
                    .unwrap_or(u32::from(body[4]));
                let oif = attributes
                    .iter()
                    .find(|(k, _)| *k == RTA_OIF)
                    .and_then(|(_, v)| u32_of(v));
                if table != u32::from(RT_TABLE_MAIN) || oif != Some(index) || body[7] != RTN_UNICAST
                {
                    continue;
                }
                let destination = attributes
                    .iter()
                    .find(|(k, _)| *k == RTA_DST)
                    .and_then(|(_, v)| ip_from(family, v))
                    .map(|ip| (ip, body[1]));
                let gateway = attributes
                    .iter()
                    .find(|(k, _)| *k == RTA_GATEWAY)
                    .and_then(|(_, v)| ip_from(family, v));
                let metric = attributes
                    .iter()
                    .find(|(k, _)| *k == RTA_PRIORITY)
                    .and_then(|(_, v)| u32_of(v));
                out.push(Route {
                    destination,
                    gateway,
                    metric,
                    scope: body[6],
                    protocol: body[5],
                });
            }
        }
        Ok(out)
    }

    /// Creates a link of `kind` (bridge, dummy); fails if `name` exists.
    pub fn create_link(
        &mut self,
        name: &str,
        kind: &str,
        mtu: Option<u32>,
        mac: Option<[u8; 6]>,
    ) -> io::Result<()> {
        let seq = self.next_seq();
        let mut m = Message::new(
            RTM_NEWLINK,
            NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
            seq,
            &ifinfomsg(0, 0, 0),
        );
        let mut cname = name.as_bytes().to_vec();
        cname.push(0);
        m.attr(IFLA_IFNAME, &cname);
        if let Some(mtu) = mtu {
            m.attr(IFLA_MTU, &mtu.to_ne_bytes());
        }
        if let Some(mac) = mac {
            m.attr(IFLA_ADDRESS, &mac);
        }
        m.nested_kind(kind);
        self.request(m)
    }

    pub fn change_link(&mut self, index: u32, change: &LinkChange) -> io::Result<()> {
        let seq = self.next_seq();
        let (flags, mask) = match change.up {
            Some(true) => (IFF_UP, IFF_UP),
            Some(false) => (0, IFF_UP),
            None => (0, 0),
        };
        let mut m = Message::new(RTM_NEWLINK, NLM_F_ACK, seq, &ifinfomsg(index, flags, mask));
        if let Some(mtu) = change.mtu {
            m.attr(IFLA_MTU, &mtu.to_ne_bytes());
        }
        if let Some(master) = change.master {
            m.attr(IFLA_MASTER, &master.to_ne_bytes());
        }
        if let Some(name) = &change.name {
            let mut cname = name.as_bytes().to_vec();
            cname.push(0);
            m.attr(IFLA_IFNAME, &cname);
        }
        if let Some(mac) = change.mac {
            m.attr(IFLA_ADDRESS, &mac);
        }
        self.request(m)
    }

    pub fn delete_link(&mut self, index: u32) -> io::Result<()> {
        let seq = self.next_seq();
        let m = Message::new(RTM_DELLINK, NLM_F_ACK, seq, &ifinfomsg(index, 0, 0));
        self.request(m)
    }

    fn address_message(
        &mut self,
        kind: u16,
        flags: u16,
        index: u32,
        address: &Address,
        ifa_flags: u32,
    ) -> io::Result<()> {
        let seq = self.next_seq();
        let (family, bytes) = ip_bytes(&address.ip);
        let mut fixed = [0u8; 8];
        fixed[0] = family;
        fixed[1] = address.prefix;
        fixed[3] = address.scope;
        fixed[4..8].copy_from_slice(&index.to_ne_bytes());
        let mut m = Message::new(kind, NLM_F_ACK | flags, seq, &fixed);
        m.attr(IFA_LOCAL, &bytes);
        m.attr(IFA_ADDRESS, &bytes);
        if ifa_flags != 0 {
            m.attr(IFA_FLAGS, &ifa_flags.to_ne_bytes());
        }
        self.request(m)
    }

    pub fn add_address(&mut self, index: u32, address: &Address, flags: u32) -> io::Result<()> {
        self.address_message(
            RTM_NEWADDR,
            NLM_F_CREATE | NLM_F_EXCL,
            index,
            address,
            flags,
        )
    }

    pub fn delete_address(&mut self, index: u32, address: &Address) -> io::Result<()> {
        self.address_message(RTM_DELADDR, 0, index, address, 0)
    }

    /// Adds `route` through device `index` to the main table.
    pub fn add_route(&mut self, index: u32, route: &Route) -> io::Result<()> {
        let seq = self.next_seq();
        let family = match route.destination.map(|(ip, _)| ip).or(route.gateway) {
            Some(IpAddr::V6(_)) => AF_INET6,
            _ => AF_INET,
        };
        let mut fixed = [0u8; 12];
        fixed[0] = family;
        fixed[1] = route.destination.map(|(_, p)| p).unwrap_or(0);
        fixed[4] = RT_TABLE_MAIN;
        fixed[5] = if route.protocol == 0 {
            RTPROT_BOOT
        } else {
            route.protocol
        };
        fixed[6] = route.scope;
        fixed[7] = RTN_UNICAST;
        let mut m = Message::new(RTM_NEWROUTE, NLM_F_ACK | NLM_F_CREATE, seq, &fixed);
        if let Some((ip, _)) = route.destination {
            m.attr(RTA_DST, &ip_bytes(&ip).1);
        }
        if let Some(gw) = route.gateway {
            m.attr(RTA_GATEWAY, &ip_bytes(&gw).1);
        }
        if let Some(metric) = route.metric {
            m.attr(RTA_PRIORITY, &metric.to_ne_bytes());
        }
        m.attr(RTA_OIF, &index.to_ne_bytes());
        self.request(m)
    }
}

/// The messages in one datagram: (type, sequence, body).
fn split(buf: &[u8]) -> Vec<(u16, u32, &[u8])> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 16 <= buf.len() {
        let len = u32::from_ne_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]) as usize;
        if len < 16 || i + len > buf.len() {
            break;
        }
        let kind = u16::from_ne_bytes([buf[i + 4], buf[i + 5]]);
        let seq = u32::from_ne_bytes([buf[i + 8], buf[i + 9], buf[i + 10], buf[i + 11]]);
        out.push((kind, seq, &buf[i + 16..i + len]));
        i += len.div_ceil(4) * 4;
    }
    out
}

fn parse_link(body: &[u8]) -> Option<Link> {
    if body.len() < 16 {
        return None;
    }
    let index = i32::from_ne_bytes(body[4..8].try_into().ok()?).cast_unsigned();
    let flags = u32::from_ne_bytes(body[8..12].try_into().ok()?);
    let mut link = Link {
        index,
        name: String::new(),
        mac: None,
        mtu: 0,
        up: flags & IFF_UP != 0,
        master: None,
        kind: None,
    };
    for (kind, value) in attrs(body, 16) {
        match kind {
            IFLA_IFNAME => {
                link.name = String::from_utf8_lossy(value.split(|b| *b == 0).next().unwrap_or(&[]))
                    .into_owned();
            }
            IFLA_ADDRESS => link.mac = value.try_into().ok(),
            IFLA_MTU => link.mtu = u32_of(value).unwrap_or(0),
            IFLA_MASTER => link.master = u32_of(value),
            IFLA_LINKINFO => {
                link.kind = attrs(value, 0)
                    .into_iter()
                    .find(|(k, _)| *k == IFLA_INFO_KIND)
                    .map(|(_, v)| {
                        String::from_utf8_lossy(v.split(|b| *b == 0).next().unwrap_or(&[]))
                            .into_owned()
                    });
            }
            _ => {}
        }
    }
    Some(link)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_the_loopback_device() {
        let mut nl = Netlink::open().unwrap_or_else(|e| panic!("{e}"));
        let lo = nl
            .link("lo")
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("no lo"));
        assert!(lo.index > 0);
        assert!(lo.mtu > 0);
        let addresses = nl.addresses(lo.index).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            addresses
                .iter()
                .any(|a| a.ip == IpAddr::from([127, 0, 0, 1]) && a.prefix == 8)
        );
        assert!(addresses.iter().all(|a| !a.is_global()));
    }

    #[test]
    fn attributes_are_read_back() {
        let mut m = Message::new(RTM_NEWLINK, 0, 7, &ifinfomsg(3, IFF_UP, 0));
        m.attr(IFLA_IFNAME, b"k6t-eth0\0");
        m.attr(IFLA_MTU, &1480u32.to_ne_bytes());
        m.nested_kind("bridge");
        let bytes = m.finish();
        let messages = split(&bytes);
        assert_eq!(messages.len(), 1);
        let link = parse_link(messages[0].2).unwrap_or_else(|| panic!("unparsed"));
        assert_eq!(link.index, 3);
        assert_eq!(link.name, "k6t-eth0");
        assert_eq!(link.mtu, 1480);
        assert!(link.up);
        assert_eq!(link.kind.as_deref(), Some("bridge"));
        // Garbage never panics.
        assert!(split(&[1, 2, 3]).is_empty());
        assert!(parse_link(&[0; 4]).is_none());
        assert!(attrs(&[255, 255, 0, 0, 1], 0).is_empty());
    }
}
