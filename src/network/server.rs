//! The threads that answer the guest: a DHCPv4 server per interface that
//! needs one, and for IPv6 masquerade a DHCPv6 server and a router
//! advertiser. Each owns its socket and sleeps in poll(2) on it and on a
//! stop pipe, so an idle server never wakes (the advertiser wakes for its
//! periodic advertisements only). None talks to the domain manager: what
//! it has handed out is published in [`LeaseStatus`], which queries read.

use std::io::{self, PipeReader, PipeWriter, Read};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::dhcp::wire::MessageType;
use super::dhcp::{Answerer, Ignored, Outcome, ReplyTarget};
use super::dhcpv6::{self, V6Lease};
use super::ra::{self, Advertisement};
use crate::os;
use crate::os::net as os_net;

/// How long a server pauses after its socket failed, before it tries
/// again.
const ERROR_PAUSE: Duration = Duration::from_millis(200);
/// At most one line about dropped packets per interface this often.
const NOISE_LOG_INTERVAL: Duration = Duration::from_secs(10);
pub const DHCP_CLIENT_PORT: u16 = 68;
pub const DHCP_SERVER_PORT: u16 = 67;
pub const DHCPV6_CLIENT_PORT: u16 = 546;
pub const DHCPV6_SERVER_PORT: u16 = 547;
const ALL_DHCP_AGENTS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 1, 2);
const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// What a server has done, shared with whoever reports on the interface.
#[derive(Debug, Default)]
pub struct LeaseStatus {
    pub offers: AtomicU64,
    pub acks: AtomicU64,
    pub naks: AtomicU64,
    pub dropped: AtomicU64,
    /// The IPv4 address acknowledged to the guest, once it was.
    pub leased_v4: Mutex<Option<Ipv4Addr>>,
    /// The IPv6 address given in a DHCPv6 Reply, once it was.
    pub leased_v6: Mutex<Option<Ipv6Addr>>,
    pub advertisements: AtomicU64,
}

impl LeaseStatus {
    pub fn v4(&self) -> Option<Ipv4Addr> {
        self.leased_v4.lock().ok().and_then(|l| *l)
    }

    pub fn v6(&self) -> Option<Ipv6Addr> {
        self.leased_v6.lock().ok().and_then(|l| *l)
    }
}

/// Counts dropped packets and logs them at most every 10 s.
struct NoiseLog {
    device: String,
    since: Instant,
    pending: u64,
    last: String,
    logged_once: bool,
}

impl NoiseLog {
    fn new(device: &str) -> NoiseLog {
        NoiseLog {
            device: device.to_string(),
            since: Instant::now(),
            pending: 0,
            last: String::new(),
            logged_once: false,
        }
    }

    fn record(&mut self, what: &str, why: &dyn std::fmt::Display) {
        self.pending += 1;
        self.last = format!("{why}");
        if !self.logged_once || self.since.elapsed() >= NOISE_LOG_INTERVAL {
            log::warn!(
                "network {}: dropped {} {what} packet(s) in the last {} s; last: {}",
                self.device,
                self.pending,
                self.since.elapsed().as_secs().max(1),
                self.last
            );
            self.logged_once = true;
            self.pending = 0;
            self.since = Instant::now();
        }
    }
}

/// A running server thread; stopped (and joined) on [`ServerThread::stop`]
/// or drop.
pub struct ServerThread {
    name: String,
    /// Closing it ends the thread's stop pipe.
    stop: Option<PipeWriter>,
    handle: Option<JoinHandle<()>>,
}

/// What woke a server thread.
#[derive(Debug, PartialEq, Eq)]
enum Woken {
    Stop,
    Readable,
    Timeout,
}

/// The server thread's end of its stop pipe: at end of file once the
/// thread must stop.
struct StopSignal(PipeReader);

impl StopSignal {
    /// Waits until `socket` is readable, the thread must stop, or
    /// `timeout` passes.
    fn wait(&self, socket: BorrowedFd<'_>, timeout: Option<Duration>) -> Woken {
        match os::wait_readable(&[self.0.as_fd(), socket], timeout) {
            Ok(ready) if ready[0] && self.stopped() => Woken::Stop,
            Ok(ready) if ready[1] => Woken::Readable,
            Ok(_) => Woken::Timeout,
            Err(e) => {
                log::warn!("network: waiting on a server socket failed: {e}");
                if self.sleep(ERROR_PAUSE) {
                    Woken::Stop
                } else {
                    Woken::Timeout
                }
            }
        }
    }

    /// Pauses for `pause`; true if the thread must stop.
    fn sleep(&self, pause: Duration) -> bool {
        match os::wait_readable(&[self.0.as_fd()], Some(pause)) {
            Ok(ready) => ready[0] && self.stopped(),
            Err(_) => false,
        }
    }

    /// Whether the pipe is at its end (nothing is ever written to it).
    fn stopped(&self) -> bool {
        let mut byte = [0u8; 1];
        matches!((&self.0).read(&mut byte), Ok(0) | Err(_))
    }
}

impl ServerThread {
    fn spawn(
        name: String,
        body: impl FnOnce(StopSignal) + Send + 'static,
    ) -> io::Result<ServerThread> {
        let (reader, writer) = io::pipe()?;
        let handle = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || body(StopSignal(reader)))?;
        Ok(ServerThread {
            name,
            stop: Some(writer),
            handle: Some(handle),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn stop(&mut self) {
        drop(self.stop.take());
        if let Some(handle) = self.handle.take()
            && handle.join().is_err()
        {
            log::error!("network: thread {} panicked", self.name);
        }
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Where DHCPv4 replies go.
#[derive(Debug, Clone, Copy)]
pub enum ReplyRoute {
    /// As RFC 2131 says: broadcast, or the client's address, port 68.
    Standard,
    /// Back to the datagram's source (tests and benchmarks on loopback).
    ToSender,
}

/// Starts a DHCPv4 server on `socket` (normally from
/// [`os_net::udp_on_device`] on port 67).
pub fn spawn_dhcp4(
    device: &str,
    socket: UdpSocket,
    answerer: Answerer,
    route: ReplyRoute,
    status: Arc<LeaseStatus>,
) -> io::Result<ServerThread> {
    // poll(2) says when a datagram is there; the timeout only guards a
    // receive that would block anyway.
    socket.set_read_timeout(Some(ERROR_PAUSE))?;
    let device = device.to_string();
    ServerThread::spawn(format!("dhcp-{device}"), move |stop| {
        let mut noise = NoiseLog::new(&device);
        let mut buf = vec![0u8; 4096];
        loop {
            match stop.wait(socket.as_fd(), None) {
                Woken::Stop => break,
                Woken::Timeout => continue,
                Woken::Readable => {}
            }
            let (n, from) = match socket.recv_from(&mut buf) {
                Ok(got) => got,
                Err(e) if is_timeout(&e) => continue,
                Err(e) => {
                    log::warn!("network {device}: DHCP receive failed: {e}");
                    if stop.sleep(ERROR_PAUSE) {
                        break;
                    }
                    continue;
                }
            };
            match answerer.answer(&buf[..n]) {
                Outcome::Reply { kind, bytes, to } => {
                    let dest = match (route, to) {
                        (ReplyRoute::ToSender, _) => from,
                        (ReplyRoute::Standard, ReplyTarget::Broadcast) => {
                            SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::BROADCAST, DHCP_CLIENT_PORT))
                        }
                        (ReplyRoute::Standard, ReplyTarget::Unicast(ip)) => {
                            SocketAddr::V4(SocketAddrV4::new(ip, DHCP_CLIENT_PORT))
                        }
                    };
                    if let Err(e) = socket.send_to(&bytes, dest) {
                        log::warn!("network {device}: cannot send DHCP {}: {e}", kind.name());
                        continue;
                    }
                    match kind {
                        MessageType::Offer => {
                            status.offers.fetch_add(1, Ordering::Relaxed);
                        }
                        MessageType::Ack => {
                            status.acks.fetch_add(1, Ordering::Relaxed);
                            let address = answerer.config().address;
                            let first = status
                                .leased_v4
                                .lock()
                                .map(|mut l| l.replace(address).is_none())
                                .unwrap_or(false);
                            if first {
                                log::info!("network {device}: DHCP ACK {address} to the guest");
                            }
                        }
                        _ => {
                            status.naks.fetch_add(1, Ordering::Relaxed);
                            log::info!("network {device}: DHCP NAK to the guest (stale address)");
                        }
                    }
                    log::debug!("network {device}: DHCP {} to {dest}", kind.name());
                }
                Outcome::Ignored(why) if why.is_noise() => {
                    status.dropped.fetch_add(1, Ordering::Relaxed);
                    noise.record("DHCP", &why);
                }
                Outcome::Ignored(why @ Ignored::OtherServer(_))
                | Outcome::Ignored(why @ Ignored::Unhandled(_)) => {
                    log::debug!("network {device}: DHCP {why}");
                }
                Outcome::Ignored(why) => log::debug!("network {device}: DHCP {why}"),
            }
        }
    })
}

/// Starts the DHCPv6 server of an IPv6 masquerade interface.
pub fn spawn_dhcp6(
    device: &str,
    lease: V6Lease,
    status: Arc<LeaseStatus>,
) -> io::Result<ServerThread> {
    let ifindex = os_net::interface_index(device)?;
    let socket = os_net::udp_on_device(true, DHCPV6_SERVER_PORT, device)?;
    socket.join_multicast_v6(&ALL_DHCP_AGENTS, ifindex)?;
    socket.set_read_timeout(Some(ERROR_PAUSE))?;
    let device = device.to_string();
    ServerThread::spawn(format!("dhcp6-{device}"), move |stop| {
        let mut noise = NoiseLog::new(&device);
        let mut buf = vec![0u8; 4096];
        loop {
            match stop.wait(socket.as_fd(), None) {
                Woken::Stop => break,
                Woken::Timeout => continue,
                Woken::Readable => {}
            }
            let (n, from) = match socket.recv_from(&mut buf) {
                Ok(got) => got,
                Err(e) if is_timeout(&e) => continue,
                Err(e) => {
                    log::warn!("network {device}: DHCPv6 receive failed: {e}");
                    if stop.sleep(ERROR_PAUSE) {
                        break;
                    }
                    continue;
                }
            };
            match dhcpv6::answer(&lease, &buf[..n]) {
                Ok(reply) => {
                    if let Err(e) = socket.send_to(&reply, from) {
                        log::warn!("network {device}: cannot send a DHCPv6 reply: {e}");
                        continue;
                    }
                    if reply[0] == dhcpv6::msg::REPLY && dhcpv6::offered_address(&reply).is_some() {
                        let first = status
                            .leased_v6
                            .lock()
                            .map(|mut l| l.replace(lease.address).is_none())
                            .unwrap_or(false);
                        if first {
                            log::info!(
                                "network {device}: DHCPv6 reply {} to the guest",
                                lease.address
                            );
                        }
                    }
                }
                Err(e) => {
                    status.dropped.fetch_add(1, Ordering::Relaxed);
                    noise.record("DHCPv6", &e);
                }
            }
        }
    })
}

/// Starts the router advertiser of an IPv6 masquerade interface: an
/// answer to every solicitation, and unsolicited advertisements every 3 s
/// for the first 30 s (while the guest boots), then every 200 s.
pub fn spawn_router_advertiser(
    device: &str,
    advertisement: Advertisement,
    status: Arc<LeaseStatus>,
) -> io::Result<ServerThread> {
    let ifindex = os_net::interface_index(device)?;
    let socket = os_net::Icmp6Socket::open(device, ifindex, ALL_ROUTERS)?;
    socket.set_read_timeout(ERROR_PAUSE)?;
    let message = advertisement.encode();
    let device = device.to_string();
    ServerThread::spawn(format!("ra-{device}"), move |stop| {
        let all_nodes = SocketAddrV6::new(ALL_NODES, 0, 0, ifindex);
        let started = Instant::now();
        let mut next = Instant::now();
        let mut buf = vec![0u8; 1500];
        let mut warned = false;
        loop {
            // Awake for a solicitation or the next periodic advertisement.
            let until_next = next.saturating_duration_since(Instant::now());
            let solicited = match stop.wait(socket.as_fd(), Some(until_next)) {
                Woken::Stop => break,
                Woken::Timeout => false,
                Woken::Readable => match socket.recv(&mut buf) {
                    Ok(n) => ra::is_solicitation(&buf[..n]),
                    Err(e) if is_timeout(&e) => false,
                    Err(e) => {
                        log::debug!("network {device}: ICMPv6 receive failed: {e}");
                        if stop.sleep(ERROR_PAUSE) {
                            break;
                        }
                        false
                    }
                },
            };
            if solicited || Instant::now() >= next {
                match socket.send_to(&message, &all_nodes) {
                    Ok(_) => {
                        status.advertisements.fetch_add(1, Ordering::Relaxed);
                    }
                    // Until the bridge has a carrier (QEMU opened the tap)
                    // it has no link-local address to send from.
                    Err(e) if !warned && started.elapsed() > Duration::from_secs(60) => {
                        log::warn!("network {device}: cannot send a router advertisement: {e}");
                        warned = true;
                    }
                    Err(_) => {}
                }
                let interval = if started.elapsed() < Duration::from_secs(30) {
                    Duration::from_secs(3)
                } else {
                    Duration::from_secs(200)
                };
                next = Instant::now() + interval;
            }
        }
    })
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    ) || e.kind() == io::ErrorKind::Interrupted
}

#[cfg(test)]
mod tests {
    use super::super::dhcp::tests_support::lease;
    use super::super::dhcp::wire::{self, MessageType};
    use super::*;

    /// The server thread on loopback: garbage first, then a DISCOVER that
    /// is still answered; the counters show both.
    #[test]
    fn server_survives_garbage_and_still_answers() {
        let server_socket = UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let server_addr = server_socket.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let status = Arc::new(LeaseStatus::default());
        let config = lease();
        let mac = config.client_mac;
        let mut server = spawn_dhcp4(
            "lo",
            server_socket,
            Answerer::new(config),
            ReplyRoute::ToSender,
            status.clone(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let client = UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap_or_else(|e| panic!("{e}"));
        let mut state: u64 = 0xdead_beef_cafe_f00d;
        for i in 0..300u32 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = (state % 700) as usize;
            let junk: Vec<u8> = (0..len)
                .map(|j| (state >> (j % 56)).to_le_bytes()[0])
                .collect();
            let junk = if i % 3 == 0 {
                let valid = wire::client_message(MessageType::Discover, mac, i, &[]);
                valid[..(usize::try_from(state).unwrap() % valid.len())].to_vec()
            } else {
                junk
            };
            client
                .send_to(&junk, server_addr)
                .unwrap_or_else(|e| panic!("{e}"));
            if i % 25 == 24 {
                // Let the server keep up: a full receive buffer drops.
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let foreign = wire::client_message(MessageType::Discover, [2, 2, 2, 2, 2, 2], 1, &[]);
        client
            .send_to(&foreign, server_addr)
            .unwrap_or_else(|e| panic!("{e}"));
        let discover = wire::client_message(MessageType::Discover, mac, 4242, &[]);
        client
            .send_to(&discover, server_addr)
            .unwrap_or_else(|e| panic!("{e}"));
        // Truncated copies of a valid DISCOVER may have been answered too;
        // the last answer is the one to the intact DISCOVER.
        let mut buf = [0u8; 1500];
        loop {
            let (n, _) = client
                .recv_from(&mut buf)
                .unwrap_or_else(|e| panic!("no answer: {e}"));
            let (kind, yiaddr, _) =
                wire::parse_reply(&buf[..n]).unwrap_or_else(|| panic!("bad reply"));
            assert_eq!(
                (kind, yiaddr),
                (MessageType::Offer, Ipv4Addr::new(10, 0, 2, 2))
            );
            if buf[4..8] == 4242u32.to_be_bytes() {
                break;
            }
        }
        server.stop();
        assert!(status.dropped.load(Ordering::Relaxed) >= 150);
        assert!(status.offers.load(Ordering::Relaxed) >= 1);
        assert_eq!(status.v4(), None);
    }
}
