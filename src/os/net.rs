//! Raw OS calls for pod networking: sockets bound to a device, a raw
//! ICMPv6 socket, tap creation on /dev/net/tun, and the netlink socket;
//! and a unix-socket connect with a time limit.
//! Each `unsafe` block has its SAFETY argument; callers get safe functions
//! that return `io::Result`.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::mem;
use std::net::{Ipv6Addr, SocketAddrV6, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use super::check;

/// The size of `T` as the kernel's `socklen_t` (socket addresses and options
/// are a few bytes).
fn socklen_of<T>() -> libc::socklen_t {
    socklen(mem::size_of::<T>())
}

fn socklen(len: usize) -> libc::socklen_t {
    libc::socklen_t::try_from(len).unwrap_or(libc::socklen_t::MAX)
}

/// An address family (a small positive `int`) as a socket address's
/// `sa_family_t`.
fn family(af: libc::c_int) -> libc::sa_family_t {
    libc::sa_family_t::try_from(af).unwrap_or(0)
}

fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to a live T of the size passed.
    check(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            socklen_of::<T>(),
        )
    })
    .map(drop)
}

fn new_socket(
    domain: libc::c_int,
    kind: libc::c_int,
    protocol: libc::c_int,
) -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes no pointers; a valid result is a fresh fd we own.
    let fd = check(unsafe { libc::socket(domain, kind | libc::SOCK_CLOEXEC, protocol) })?;
    // SAFETY: fd was just returned by socket(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn bind_to_device(fd: RawFd, device: &str) -> io::Result<()> {
    let name = CString::new(device)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "device name contains NUL"))?;
    let bytes = name.as_bytes_with_nul();
    // SAFETY: the pointer and length describe the NUL-terminated name.
    check(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_BINDTODEVICE,
            bytes.as_ptr().cast(),
            socklen(bytes.len()),
        )
    })
    .map(drop)
}

/// The index of network device `name` in this network namespace.
pub fn interface_index(name: &str) -> io::Result<u32> {
    let c = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "device name contains NUL"))?;
    // SAFETY: c is a valid NUL-terminated string for the call's duration.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if index == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(index)
    }
}

/// A UDP socket on `port` of every address, receiving and sending only
/// on `device` (SO_BINDTODEVICE), allowed to broadcast; several such
/// sockets on one port coexist (SO_REUSEADDR), one per device.
pub fn udp_on_device(ipv6: bool, port: u16, device: &str) -> io::Result<UdpSocket> {
    let domain = if ipv6 { libc::AF_INET6 } else { libc::AF_INET };
    let socket = new_socket(domain, libc::SOCK_DGRAM, 0)?;
    let fd = socket.as_raw_fd();
    let one: libc::c_int = 1;
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, &one)?;
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_BROADCAST, &one)?;
    if ipv6 {
        setsockopt(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, &one)?;
    }
    bind_to_device(fd, device)?;
    let udp = UdpSocket::from(socket);
    if ipv6 {
        bind_udp(
            &udp,
            std::net::SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)),
        )?;
    } else {
        bind_udp(&udp, std::net::SocketAddr::from(([0, 0, 0, 0], port)))?;
    }
    Ok(udp)
}

fn bind_udp(socket: &UdpSocket, addr: std::net::SocketAddr) -> io::Result<()> {
    let fd = socket.as_raw_fd();
    match addr {
        std::net::SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: family(libc::AF_INET),
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sin is a valid sockaddr_in of the length passed.
            check(unsafe {
                libc::bind(
                    fd,
                    (&sin as *const libc::sockaddr_in).cast(),
                    socklen_of::<libc::sockaddr_in>(),
                )
            })
            .map(drop)
        }
        std::net::SocketAddr::V6(v6) => {
            let sin6 = sockaddr_in6(&v6);
            // SAFETY: sin6 is a valid sockaddr_in6 of the length passed.
            check(unsafe {
                libc::bind(
                    fd,
                    (&sin6 as *const libc::sockaddr_in6).cast(),
                    socklen_of::<libc::sockaddr_in6>(),
                )
            })
            .map(drop)
        }
    }
}

fn sockaddr_in6(addr: &SocketAddrV6) -> libc::sockaddr_in6 {
    libc::sockaddr_in6 {
        sin6_family: family(libc::AF_INET6),
        sin6_port: addr.port().to_be(),
        sin6_flowinfo: 0,
        sin6_addr: libc::in6_addr {
            s6_addr: addr.ip().octets(),
        },
        sin6_scope_id: addr.scope_id(),
    }
}

/// A raw ICMPv6 socket on `device` that sends with hop limit 255 (as
/// neighbour discovery requires) and has joined `group`.
pub struct Icmp6Socket {
    fd: OwnedFd,
}

impl Icmp6Socket {
    pub fn open(device: &str, ifindex: u32, group: Ipv6Addr) -> io::Result<Icmp6Socket> {
        let fd = new_socket(libc::AF_INET6, libc::SOCK_RAW, libc::IPPROTO_ICMPV6)?;
        let raw = fd.as_raw_fd();
        bind_to_device(raw, device)?;
        let hops: libc::c_int = 255;
        setsockopt(raw, libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_HOPS, &hops)?;
        setsockopt(raw, libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS, &hops)?;
        let zero: libc::c_int = 0;
        setsockopt(raw, libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_LOOP, &zero)?;
        let mreq = libc::ipv6_mreq {
            ipv6mr_multiaddr: libc::in6_addr {
                s6_addr: group.octets(),
            },
            ipv6mr_interface: ifindex,
        };
        setsockopt(raw, libc::IPPROTO_IPV6, libc::IPV6_ADD_MEMBERSHIP, &mreq)?;
        Ok(Icmp6Socket { fd })
    }

    pub fn set_read_timeout(&self, timeout: Duration) -> io::Result<()> {
        let tv = libc::timeval {
            // The field types, not libc's `time_t` and `suseconds_t` names (which
            // libc deprecates on musl): 64 bits on x86_64 with glibc and musl.
            tv_sec: timeout.as_secs().try_into().unwrap_or(i64::MAX),
            tv_usec: timeout.subsec_micros().into(),
        };
        setsockopt(
            self.fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &tv,
        )
    }

    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: buf is valid for writes of buf.len() bytes.
        let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        // Negative (-1) exactly when it failed.
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }

    /// The socket, to wait on (poll).
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    pub fn send_to(&self, message: &[u8], to: &SocketAddrV6) -> io::Result<usize> {
        let addr = sockaddr_in6(&SocketAddrV6::new(*to.ip(), 0, 0, to.scope_id()));
        // SAFETY: message and addr are valid for the lengths passed.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                message.as_ptr().cast(),
                message.len(),
                0,
                (&addr as *const libc::sockaddr_in6).cast(),
                socklen_of::<libc::sockaddr_in6>(),
            )
        };
        // Negative (-1) exactly when it failed.
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }
}

// linux/if_tun.h (`Ioctl` is the request type of libc's ioctl: c_ulong on
// glibc, c_int on musl).
const TUNSETIFF: libc::Ioctl = 0x4004_54ca;
const TUNSETPERSIST: libc::Ioctl = 0x4004_54cb;
const TUNSETOWNER: libc::Ioctl = 0x4004_54cc;
const TUNSETGROUP: libc::Ioctl = 0x4004_54ce;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;
const IFF_MULTI_QUEUE: libc::c_short = 0x0100;

#[repr(C)]
struct IfReqFlags {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Creates the persistent tap `name` (multi-queue when asked), owned by
/// `owner` (uid, gid) when given, so QEMU can open it later: the device
/// stays after this process closes /dev/net/tun (TUNSETPERSIST).
pub fn create_tap(name: &str, multi_queue: bool, owner: Option<(u32, u32)>) -> io::Result<()> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a valid interface name"),
        ));
    }
    let tun: File = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")?;
    let mut req = IfReqFlags {
        name: [0; libc::IFNAMSIZ],
        flags: IFF_TAP | IFF_NO_PI | IFF_VNET_HDR | if multi_queue { IFF_MULTI_QUEUE } else { 0 },
        _pad: [0; 22],
    };
    for (slot, byte) in req.name.iter_mut().zip(name.bytes()) {
        *slot = libc::c_char::from_ne_bytes([byte]);
    }
    let fd = tun.as_raw_fd();
    // SAFETY: req is a valid, initialised struct ifreq-compatible buffer
    // that TUNSETIFF reads and writes in place.
    check(unsafe { libc::ioctl(fd, TUNSETIFF, &mut req as *mut IfReqFlags) })?;
    if let Some((uid, gid)) = owner {
        // SAFETY: these ioctls take an integer argument.
        check(unsafe { libc::ioctl(fd, TUNSETOWNER, uid as libc::c_ulong) })?;
        // SAFETY: as above.
        check(unsafe { libc::ioctl(fd, TUNSETGROUP, gid as libc::c_ulong) })?;
    }
    // SAFETY: integer argument.
    check(unsafe { libc::ioctl(fd, TUNSETPERSIST, 1 as libc::c_ulong) })?;
    Ok(())
}

/// A NETLINK_ROUTE socket.
pub struct NetlinkSocket {
    fd: OwnedFd,
}

impl NetlinkSocket {
    pub fn open() -> io::Result<NetlinkSocket> {
        let fd = new_socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE)?;
        // SAFETY: sockaddr_nl is plain data; all-zero is a valid value.
        let mut addr: libc::sockaddr_nl = unsafe { mem::zeroed() };
        addr.nl_family = family(libc::AF_NETLINK);
        // SAFETY: addr is a valid sockaddr_nl of the length passed.
        check(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_nl).cast(),
                socklen_of::<libc::sockaddr_nl>(),
            )
        })?;
        let socket = NetlinkSocket { fd };
        let tv = libc::timeval {
            tv_sec: 5,
            tv_usec: 0,
        };
        setsockopt(
            socket.fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &tv,
        )?;
        let one: libc::c_int = 1;
        // Extended acks carry the kernel's error message; best effort.
        let _ = setsockopt(
            socket.fd.as_raw_fd(),
            libc::SOL_NETLINK,
            libc::NETLINK_EXT_ACK,
            &one,
        );
        Ok(socket)
    }

    pub fn send(&self, message: &[u8]) -> io::Result<()> {
        // SAFETY: sockaddr_nl is plain data; all-zero (pid 0 = the kernel)
        // is the destination wanted.
        let mut addr: libc::sockaddr_nl = unsafe { mem::zeroed() };
        addr.nl_family = family(libc::AF_NETLINK);
        // SAFETY: message and addr are valid for the lengths passed.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                message.as_ptr().cast(),
                message.len(),
                0,
                (&addr as *const libc::sockaddr_nl).cast(),
                socklen_of::<libc::sockaddr_nl>(),
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: buf is valid for writes of buf.len() bytes.
        let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        // Negative (-1) exactly when it failed.
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }
}

/// Connects a unix stream socket to `path` within `timeout`. A blocking
/// connect(2) waits without limit while the listener's backlog is full
/// (a server that stopped accepting); a non-blocking one fails with
/// EAGAIN at once, and is retried here until `timeout` has passed.
pub fn connect_unix(path: &Path, timeout: Duration) -> io::Result<UnixStream> {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data; all zeros is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} cannot be a socket address", path.display()),
        ));
    }
    addr.sun_family = family(libc::AF_UNIX);
    for (to, from) in addr.sun_path.iter_mut().zip(bytes) {
        *to = libc::c_char::from_ne_bytes([*from]);
    }
    // The family field, the path and its terminating NUL.
    let len = socklen(mem::offset_of!(libc::sockaddr_un, sun_path) + bytes.len() + 1);
    let fd = new_socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0)?;
    let deadline = Instant::now() + timeout;
    loop {
        // SAFETY: `addr` is a live sockaddr_un and `len` does not exceed
        // its size (the path is shorter than sun_path).
        let ret = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len,
            )
        };
        match check(ret) {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                if Instant::now() >= deadline {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("{} did not accept within {timeout:?}", path.display()),
                    ));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e),
        }
    }
    let stream = UnixStream::from(fd);
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// Whether this process has CAP_NET_ADMIN in its effective set.
pub fn has_cap_net_admin() -> bool {
    const CAP_NET_ADMIN: u32 = 12;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_NET_ADMIN) != 0)
}

/// The inode of a process's network namespace (`/proc/PID/ns/net`).
pub fn netns_id(pid: &str) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata(format!("/proc/{pid}/ns/net"))?.ino())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchDir;
    use std::os::unix::net::UnixListener;

    #[test]
    fn a_unix_connect_gives_up_when_the_backlog_stays_full() {
        let dir = ScratchDir::new("connect-unix");
        let path = dir.join("sock");
        let listener = UnixListener::bind(&path).unwrap();
        // A backlog of 0 holds one connection that is never accepted.
        // SAFETY: listen(2) on a socket this test owns; no pointers.
        check(unsafe { libc::listen(listener.as_raw_fd(), 0) }).unwrap();
        let timeout = Duration::from_millis(200);
        let mut held = Vec::new();
        let started = Instant::now();
        let error = loop {
            match connect_unix(&path, timeout) {
                Ok(stream) => held.push(stream),
                Err(e) => break e,
            }
            assert!(held.len() < 10, "the backlog never filled");
        };
        assert_eq!(error.kind(), io::ErrorKind::TimedOut, "{error}");
        assert!(started.elapsed() >= timeout);
        // Accepting one makes room: the next connect succeeds, and the
        // stream it gives is blocking, as std's are (a read waits for its
        // timeout rather than failing at once).
        let (_accepted, _) = listener.accept().unwrap();
        let stream = connect_unix(&path, timeout).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let mut byte = [0u8; 1];
        let reading = Instant::now();
        let read = std::io::Read::read(&mut &stream, &mut byte).unwrap_err();
        assert_eq!(read.kind(), io::ErrorKind::WouldBlock);
        assert!(reading.elapsed() >= Duration::from_millis(50));
    }

    #[test]
    fn a_unix_connect_reports_a_missing_socket_and_a_bad_path() {
        let dir = ScratchDir::new("connect-unix");
        let missing = connect_unix(&dir.join("none"), Duration::from_secs(1)).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        let long = dir.join("x".repeat(200));
        let too_long = connect_unix(&long, Duration::from_secs(1)).unwrap_err();
        assert_eq!(too_long.kind(), io::ErrorKind::InvalidInput);
    }
}
