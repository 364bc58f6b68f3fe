//! Pod networking (issue 13's targets), in network namespaces the bench
//! makes and removes (a "pod" one and an "outside" one, joined by a veth
//! pair; tests/common/podnet.rs). Nothing runs in the host's namespace.
//!
//! - **Set-up time** (target <= 50 ms): what the launcher does before it
//!   defines the domain for one masquerade interface with IPv4 and IPv6
//!   (bridge, tap, addresses, forwarding, both nftables tables, DHCP,
//!   DHCPv6 and RA threads), by the library call the launcher makes, run
//!   on a thread that entered the pod namespace; then its removal. The
//!   launcher's own log line of each real start below is reported too.
//! - **DHCP answer time** (target p50 <= 1 ms): DISCOVER sent -> OFFER
//!   received, through the server thread and its UDP socket (loopback).
//! - **TCP throughput guest -> outside**: 32 MiB from the test guest
//!   (`dd | nc`) to a receiver in the outside namespace, for masquerade,
//!   bridge, passt and slirp on the same guest (TCG emulation, so the
//!   guest's CPU is the limit). passt: with libvirt 9.0 the launcher runs
//!   passt itself (src/network/passt.rs); one listed port, since forwarding
//!   every port takes more open files than this host allows.

use std::fs;
use std::io::Read;
use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use virt_launcher::network::dhcp::wire::{self, MessageType};
use virt_launcher::network::dhcp::{Answerer, ExtraOptions, LeaseConfig};
use virt_launcher::network::plan;
use virt_launcher::network::server::{self, LeaseStatus, ReplyRoute};
use virt_launcher::network::setup::{self, Mode, SetupOptions};

use crate::common::guest::{GuestOptions, guest_sh};
use crate::common::podnet::{OUTSIDE_IP, PodNet, boot_in, guest_until};

const SEND_BYTES: usize = 32 << 20;
const RECEIVER_PORT: u16 = 5001;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn summary(mut samples: Vec<Duration>) -> String {
    samples.sort();
    format!(
        "p50 {:.2} ms, p90 {:.2} ms, min {:.2} ms, max {:.2} ms ({} runs)",
        ms(samples[samples.len() / 2]),
        ms(samples[samples.len() * 9 / 10]),
        ms(samples[0]),
        ms(samples[samples.len() - 1]),
        samples.len()
    )
}

/// Runs `f` on a thread that entered network namespace `ns` (a name under
/// /run/netns); the process's other threads stay where they are.
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // SAFETY: setns with a valid descriptor of a network namespace
        // changes only this thread's network namespace; `file` outlives
        // the call.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .unwrap_or_else(|_| panic!("thread in {ns} panicked"))
}

pub fn network() {
    setup_time();
    dhcp_answer_time();
    throughput();
}

fn setup_time() {
    let net = PodNet::new();
    let vmi = virt_launcher::vmi::parse_vmi(&json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "bench", "namespace": "e2e"},
        "spec": {"domain": {"devices": {"interfaces": [
                    {"name": "default", "masquerade": {}, "ports": [{"port": 8080}]}]}},
                 "networks": [{"name": "default", "pod": {}}]}}))
    .unwrap_or_else(|e| panic!("{}: {}", e.path, e.message));
    let plan = plan::plan(
        &vmi,
        &vmi.spec.domain.devices.interfaces,
        &vmi.spec.networks,
        |_| 1,
    )
    .unwrap_or_else(|e| panic!("{}", e.message));
    let options = SetupOptions {
        mode: Mode::Create,
        resolv_conf: net.resolv_conf().into(),
        tap_owner: None,
        mac_seed: "bench".into(),
        passt_spawner: None,
    };
    let (up, down) = in_netns(&net.pod, move || {
        let (mut up, mut down) = (Vec::new(), Vec::new());
        for _ in 0..20 {
            let t = Instant::now();
            let mut active = setup::setup(&plan, &options).unwrap_or_else(|e| panic!("{e}"));
            up.push(t.elapsed());
            let t = Instant::now();
            active.teardown();
            down.push(t.elapsed());
        }
        (up, down)
    });
    assert_eq!(net.leftovers(), Vec::<String>::new());
    println!(
        "network set-up, masquerade IPv4+IPv6 (bridge, tap, nft, DHCP/DHCPv6/RA threads): {} (target <= 50 ms)",
        summary(up)
    );
    println!("network clean-up of the same: {}", summary(down));
}

fn dhcp_answer_time() {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let server_addr = socket.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let mac = [0x52, 0x54, 0, 0x7e, 0x57, 1];
    let lease = LeaseConfig {
        client_mac: mac,
        address: Ipv4Addr::new(10, 0, 2, 2),
        prefix: 24,
        server: Ipv4Addr::new(10, 0, 2, 1),
        router: Some(Ipv4Addr::new(10, 0, 2, 1)),
        routes: Vec::new(),
        dns_servers: vec![Ipv4Addr::new(10, 96, 0, 10)],
        search_domains: vec![
            "e2e.svc.cluster.local".into(),
            "svc.cluster.local".into(),
            "cluster.local".into(),
        ],
        hostname: "bench".into(),
        mtu: 1500,
        extra: ExtraOptions::default(),
    };
    let status = Arc::new(LeaseStatus::default());
    let mut thread = server::spawn_dhcp4(
        "lo",
        socket,
        Answerer::new(lease),
        ReplyRoute::ToSender,
        status,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let client = UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut samples = Vec::new();
    let mut buf = [0u8; 1500];
    for xid in 0..1050u32 {
        let discover = wire::client_message(MessageType::Discover, mac, xid, &[]);
        let t = Instant::now();
        client
            .send_to(&discover, server_addr)
            .unwrap_or_else(|e| panic!("{e}"));
        let n = client
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("no OFFER: {e}"));
        let took = t.elapsed();
        let (kind, _, _) = wire::parse_reply(&buf[..n]).unwrap_or_else(|| panic!("bad reply"));
        assert_eq!(kind, MessageType::Offer);
        assert_eq!(buf[4..8], xid.to_be_bytes());
        if xid >= 50 {
            samples.push(took);
        }
    }
    thread.stop();
    println!(
        "DHCP DISCOVER -> OFFER (server thread, loopback): {} (target p50 <= 1 ms)",
        summary(samples)
    );
}

/// A receiver in the outside namespace; the thread returns (bytes, time
/// from the first byte to the last).
fn receiver(net: &PodNet) -> std::thread::JoinHandle<(usize, Duration)> {
    let outside = net.outside.clone();
    let (ready_tx, ready_rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        in_netns(&outside, move || {
            let listener = TcpListener::bind((OUTSIDE_IP, RECEIVER_PORT))
                .unwrap_or_else(|e| panic!("bind: {e}"));
            let _ = ready_tx.send(());
            let (mut stream, _) = listener.accept().unwrap_or_else(|e| panic!("{e}"));
            stream
                .set_read_timeout(Some(Duration::from_secs(60)))
                .unwrap_or_else(|e| panic!("{e}"));
            let mut buf = vec![0u8; 1 << 16];
            let mut total = 0;
            let mut first = None;
            while total < SEND_BYTES {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        first.get_or_insert_with(Instant::now);
                        total += n;
                    }
                }
            }
            (total, first.map(|f| f.elapsed()).unwrap_or_default())
        })
    });
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("receiver: {e}"));
    handle
}

fn throughput() {
    let bindings: [(&str, Value); 4] = [
        ("masquerade", json!({"name": "default", "masquerade": {}})),
        ("bridge", json!({"name": "default", "bridge": {}})),
        (
            "passt",
            json!({"name": "default", "binding": {"name": "passt"}, "ports": [{"port": 8080}]}),
        ),
        (
            "slirp",
            json!({"name": "default", "binding": {"name": "slirp"}}),
        ),
    ];
    let mut real_setups = Vec::new();
    for (binding, interface) in bindings {
        let net = PodNet::new();
        let mut opts = GuestOptions::new(&format!("tput-{binding}"));
        opts.interface = interface;
        let mut g = boot_in(&net, &opts);
        guest_until(&mut g.client, "ip -4 addr show dev eth0", "inet ");
        let recv = receiver(&net);
        let count = SEND_BYTES >> 16;
        // Detached: guest-exec's own time limit does not bound the run.
        guest_sh(
            &mut g.client,
            &format!(
                "setsid sh -c 'dd if=/dev/zero bs=65536 count={count} 2>/dev/null | nc {OUTSIDE_IP} {RECEIVER_PORT}' </dev/null >/dev/null 2>&1 &"
            ),
        );
        let (bytes, took) = recv.join().unwrap_or_else(|_| panic!("receiver panicked"));
        let mbit = bytes as f64 * 8.0 / took.as_secs_f64().max(1e-9) / 1e6;
        println!(
            "TCP guest -> outside, {binding}: {mbit:.0} Mbit/s ({} MiB in {:.2} s, TCG guest)",
            bytes >> 20,
            took.as_secs_f64()
        );
        assert_eq!(bytes, SEND_BYTES, "{binding}: the transfer was cut short");
        for line in g.launcher.log_text().lines() {
            if let Some(rest) = line.split("network: set up ").nth(1)
                && let Some(figure) = rest.split(" in ").nth(1)
            {
                real_setups.push(format!("{binding} {}", figure.trim()));
            }
        }
        g.client.ok("kill", Value::Null);
        g.launcher.wait_exit(crate::common::guest::STEP);
    }
    println!(
        "network set-up in the launcher's real starts: {}",
        real_setups.join(", ")
    );
}
