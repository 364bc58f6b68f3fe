//! Pod networking end to end: each test makes a "pod" network namespace
//! with a veth pair to an "outside" namespace that plays the cluster
//! network, runs the launcher inside the pod namespace (with its own
//! libvirt daemons, so QEMU and its tap are there too), boots the test
//! guest and checks what the guest and the outside see. All traffic stays
//! inside these namespaces (TEST-NET-2 addresses, fd99::/64); the
//! namespaces are removed when a test ends.

mod common;

use std::time::{Duration, Instant};

use common::guest::*;
use common::podnet::*;
use common::*;
use serde_json::{Value, json};

fn network_report(client: &mut Client) -> Value {
    client.ok("query-domain", Value::Null)["network"][0].clone()
}

#[test]
fn masquerade_gives_kubevirts_addresses_nat_ports_dns_ipv6_and_cleans_up_on_sigterm() {
    if !require(REAL_GUEST) {
        return;
    }
    let mut net = PodNet::new();
    net.serve_outside(OUTSIDE_IP, 8080);
    net.serve_outside(OUTSIDE_IP6, 8086);
    let mut opts = GuestOptions::new("masq");
    // The guest's DHCPv6 client (dhcpcd) runs only when asked.
    opts.extra_cmdline = "tg.net6=dhcp".into();
    opts.interface = json!({"name": "default", "masquerade": {}, "ports": [{"port": 8080}],
        "portRanges": [{"protocol": "TCP", "start": 9100, "end": 9110}]});
    let mut g = boot_in(&net, &opts);

    // The pod side: KubeVirt's bridge and tap.
    let links = net.in_pod(&["ip", "-o", "link", "show"]);
    assert!(links.contains("k6t-eth0"), "{links}");
    assert!(links.contains("tap0"), "{links}");

    // The guest got 10.0.2.2/24 and the gateway 10.0.2.1 by DHCP.
    let addr = guest_until(&mut g.client, "ip -4 addr show dev eth0", "10.0.2.2/24");
    assert!(addr.contains("inet 10.0.2.2/24"), "{addr}");
    let (_, routes) = guest_sh(&mut g.client, "ip -4 route");
    assert!(routes.contains("default via 10.0.2.1"), "{routes}");
    let report = network_report(&mut g.client);
    assert_eq!(report["binding"], "masquerade");
    assert_eq!(report["tap"], "tap0");
    assert_eq!(report["mac"], opts.mac);
    assert_eq!(report["dhcp"]["leased"], "10.0.2.2");
    let agent = wait_for(&mut g.client, "query-interfaces", |r| {
        r["interfaces"][0]["ipAddress"] == "10.0.2.2"
    });
    assert_eq!(agent["network"][0]["dhcp"]["leased"], "10.0.2.2");

    // The pod's DNS server and search domains reached the guest.
    let (_, resolv) = guest_sh(&mut g.client, "cat /etc/resolv.conf");
    assert!(
        resolv.contains(&format!("nameserver {DNS_SERVER}")),
        "{resolv}"
    );
    assert!(resolv.contains("e2e.svc.cluster.local"), "{resolv}");

    // Out through NAT: the outside sees the pod's address.
    let out = guest_until(
        &mut g.client,
        &format!("nc -w 5 {OUTSIDE_IP} 8080 </dev/null"),
        "peer=",
    );
    assert!(out.contains(&format!("peer={POD_IP}")), "{out}");

    // IPv6: the guest's dhcpcd got fd10:0:2::2 by DHCPv6 and its default
    // route from the launcher's router advertisements; out through NAT66.
    let addr6 = guest_until(&mut g.client, "ip -6 addr show dev eth0", "fd10:0:2::2");
    assert!(addr6.contains("inet6 fd10:0:2::2/"), "{addr6}");
    let routes6 = guest_until(&mut g.client, "ip -6 route", "default via fe80::");
    assert!(routes6.contains("dev eth0"), "{routes6}");
    let report = network_report(&mut g.client);
    assert_eq!(report["dhcp"]["offeredIPv6"], "fd10:0:2::2");
    assert_eq!(report["dhcp"]["leasedIPv6"], "fd10:0:2::2");
    let out6 = guest_until(
        &mut g.client,
        &format!("nc -w 5 {OUTSIDE_IP6} 8086 </dev/null"),
        "peer=",
    );
    // socat writes the peer in full: [fd99:0000:...:0002].
    let peer6 = out6
        .split("peer=[")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .and_then(|ip| ip.parse::<std::net::Ipv6Addr>().ok());
    assert_eq!(peer6, POD_IP6.parse().ok(), "{out6}");

    // In: port 8080 is listed and 9105 is in a listed range, both reach
    // the guest; 9090 is not listed.
    guest_sh(
        &mut g.client,
        "for p in 8080 9105 9090; do setsid sh -c \"while true; do nc -l -p $p -e echo guest-$p; done\" </dev/null >/dev/null 2>&1 & done; sleep 1",
    );
    let reply = net.wait_reachable_from_outside(POD_IP, 8080, STEP);
    assert!(reply.contains("guest-8080"), "{reply}");
    let ranged = net.connect_from_outside(POD_IP, 9105).unwrap_or_default();
    assert!(ranged.contains("guest-9105"), "{ranged}");
    assert_eq!(net.connect_from_outside(POD_IP, 9090), None);

    // SIGTERM: the guest powers off, the launcher exits, nothing is left.
    g.launcher.signal("TERM");
    assert_eq!(g.launcher.wait_exit(STEP), 0);
    assert_eq!(net.leftovers(), Vec::<String>::new());
    let forward = net.in_pod(&["cat", "/proc/sys/net/ipv4/ip_forward"]);
    assert_eq!(forward.trim(), "0", "ip_forward was not restored");
}

fn wait_for(client: &mut Client, command: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + STEP;
    loop {
        let reply = client.request(command, Value::Null);
        if let Some(r) = reply.get("return")
            && pred(r)
        {
            return r.clone();
        }
        assert!(Instant::now() < deadline, "{command}: {reply}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn bridge_moves_the_pod_address_to_the_guest_and_back_after_kill() {
    if !require(REAL_GUEST) {
        return;
    }
    let mut net = PodNet::new();
    net.serve_outside(OUTSIDE_IP, 8080);
    let mut opts = GuestOptions::new("bridged");
    opts.interface = json!({"name": "default", "bridge": {}});
    let mut g = boot_in(&net, &opts);

    let addr = guest_until(&mut g.client, "ip -4 addr show dev eth0", POD_IP);
    assert!(addr.contains(&format!("inet {POD_IP}/24")), "{addr}");
    let (_, routes) = guest_sh(&mut g.client, "ip -4 route");
    assert!(
        routes.contains(&format!("default via {OUTSIDE_IP}")),
        "{routes}"
    );
    let report = network_report(&mut g.client);
    assert_eq!(report["binding"], "bridge");
    assert_eq!(report["dhcp"]["leased"], POD_IP);
    let pod_links = net.in_pod(&["ip", "-o", "link", "show"]);
    assert!(pod_links.contains("eth0-nic"), "{pod_links}");

    // The guest itself, with the pod's address, talks to the outside.
    let out = guest_until(
        &mut g.client,
        &format!("nc -w 5 {OUTSIDE_IP} 8080 </dev/null"),
        "peer=",
    );
    assert!(out.contains(&format!("peer={POD_IP}")), "{out}");

    // kill: the domain is destroyed and the launcher exits; the pod
    // interface is eth0 again, with its address and default route.
    g.client.ok("kill", Value::Null);
    g.launcher.wait_exit(STEP);
    assert_eq!(net.leftovers(), Vec::<String>::new());
    let eth0 = net.in_pod(&["ip", "-4", "addr", "show", "dev", "eth0"]);
    assert!(eth0.contains(&format!("{POD_IP}/24")), "{eth0}");
    let routes = net.in_pod(&["ip", "-4", "route"]);
    assert!(
        routes.contains(&format!("default via {OUTSIDE_IP}")),
        "{routes}"
    );
}

#[test]
fn a_failed_start_leaves_no_bridge_tap_or_rules() {
    if !require(REAL_GUEST) {
        return;
    }
    let net = PodNet::new();
    let launcher = net.launcher("broken", &[]);
    let mut client = launcher.client();
    let mut opts = GuestOptions::new("broken");
    opts.interface = json!({"name": "default", "masquerade": {}});
    let mut vmi = guest_vmi(&opts);
    // A kernel QEMU cannot load: the domain is defined after the network
    // set-up, and QEMU exits as it starts.
    let kernel = launcher.tree.path("not-a-kernel");
    std::fs::write(&kernel, vec![0u8; 64 * 1024]).unwrap();
    vmi["spec"]["domain"]["firmware"]["kernelBoot"]["container"]["kernelPath"] = json!(kernel);
    let reply = client.request_timeout("sync", json!({"vmi": vmi}), STEP);
    // QEMU's start failed (not an earlier step), and the definition was
    // taken back.
    let error = &reply["error"];
    assert_eq!(error["class"], "Internal", "{reply}");
    // (QEMU 7.2 says "linux kernel too old to load a ram disk".)
    assert!(
        error["desc"]
            .as_str()
            .is_some_and(|d| d.starts_with("libvirt call failed: ") && d.contains("kernel")),
        "{reply}"
    );
    assert!(
        error["causes"][0]
            .as_str()
            .is_some_and(|c| c.starts_with("virDomainCreateWithFlags failed: ")),
        "not the start that failed: {reply}"
    );
    assert_eq!(
        error["causes"][1], "the domain was undefined again",
        "{reply}"
    );
    // The pod network was set up before the start, and removed after it.
    let log = launcher.log_text();
    let set_up = log.find("network: set up 1 interface(s)");
    let removed = log.find("network: removed the launcher's bridges, taps and rules");
    assert!(
        matches!((set_up, removed), (Some(a), Some(b)) if a < b),
        "the network was not set up and then removed:\n{log}"
    );
    assert_eq!(net.leftovers(), Vec::<String>::new());
}

#[test]
fn without_a_pod_namespace_masquerade_needs_an_existing_tap() {
    if !require(REAL_GUEST) {
        return;
    }
    // On the host's own network namespace the launcher never creates
    // anything; with no tap0 the sync is refused with a clear error.
    let launcher = start_qemu_launcher(TempTree::new("net-host"), "hostnet", &[]);
    let mut client = launcher.client();
    let mut opts = GuestOptions::new("hostnet");
    opts.interface = json!({"name": "default", "masquerade": {}});
    let reply = client.request_timeout("sync", json!({"vmi": guest_vmi(&opts)}), STEP);
    let desc = reply["error"]["desc"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        desc.contains("needs tap tap0, which does not exist"),
        "{reply}"
    );
    assert!(desc.contains("slirp"), "{desc}");
}

#[test]
fn a_bridge_interface_on_a_secondary_network_is_plugged_in_and_out_live() {
    if !require(REAL_GUEST) {
        return;
    }
    let net = PodNet::new();
    // Multus's second pod interface for network "hot", to an outside
    // address of its own.
    let pod_if = virt_launcher::network::names::hashed_pod_interface("hot");
    run(&[
        "ip",
        "-n",
        &net.pod,
        "link",
        "add",
        &pod_if,
        "type",
        "veth",
        "peer",
        "name",
        "ext1",
        "netns",
        &net.outside,
    ]);
    run(&[
        "ip",
        "-n",
        &net.pod,
        "addr",
        "add",
        "198.51.101.2/24",
        "dev",
        &pod_if,
    ]);
    run(&["ip", "-n", &net.pod, "link", "set", &pod_if, "up"]);
    run(&[
        "ip",
        "-n",
        &net.outside,
        "addr",
        "add",
        "198.51.101.1/24",
        "dev",
        "ext1",
    ]);
    run(&["ip", "-n", &net.outside, "link", "set", "ext1", "up"]);

    let mut opts = GuestOptions::new("hotnic");
    opts.interface = json!({"name": "default", "masquerade": {}});
    let base = guest_vmi(&opts);
    let launcher = net.launcher("hotnic", &["--qemu-agent-sys-interval", "3s"]);
    let mut client = launcher.client();
    let synced = client.request_timeout("sync", json!({ "vmi": base }), STEP);
    assert!(synced.get("return").is_some(), "{synced}");
    let mut watcher = launcher.client();
    watcher.ok("subscribe", Value::Null);
    watcher.wait_event(BOOT, "AGENT_CONNECTED", named("AGENT_CONNECTED"));

    let mac = "52:54:00:7e:57:99";
    let mut plugged = base.clone();
    plugged["spec"]["domain"]["devices"]["interfaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "hot", "bridge": {}, "macAddress": mac}));
    plugged["spec"]["networks"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "hot", "multus": {"networkName": "hotnet"}}));
    let reply = client.request_timeout("sync", json!({ "vmi": plugged }), STEP);
    let changes = reply["return"]["changes"].clone();
    assert_eq!(changes[0]["change"], "attach-interface", "{reply}");
    assert_eq!(changes[0]["mac"], mac);
    // The launcher made KubeVirt's bridge and tap for it.
    let links = net.in_pod(&["ip", "-o", "link", "show"]);
    let tap = virt_launcher::network::names::tap_name(&pod_if, true);
    assert!(links.contains(&tap), "{links}");
    let report = client.ok("query-domain", Value::Null)["network"].clone();
    assert!(
        report
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["name"] == "hot" && i["tap"] == tap),
        "{report}"
    );
    let has_mac = |client: &mut Client| {
        client.ok("query-interfaces", Value::Null)["interfaces"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["mac"] == mac)
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    while !has_mac(&mut client) {
        assert!(Instant::now() < deadline, "{mac} never in query-interfaces");
        std::thread::sleep(Duration::from_millis(500));
    }
    let reply = client.request_timeout("sync", json!({ "vmi": base }), STEP);
    assert_eq!(
        reply["return"]["changes"][0]["change"], "detach-interface",
        "{reply}"
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    while has_mac(&mut client) {
        assert!(Instant::now() < deadline, "{mac} still in query-interfaces");
        std::thread::sleep(Duration::from_millis(500));
    }
    // Unplugged, its bridge, tap and DHCP server are gone (not kept until
    // the launcher exits), and the primary NIC's are still there.
    let links = net.in_pod(&["ip", "-o", "link", "show"]);
    let bridge = virt_launcher::network::names::bridge_name(&pod_if);
    assert!(!links.contains(&tap), "{links}");
    assert!(!links.contains(&format!(" {bridge}:")), "{links}");
    let report = client.ok("query-domain", Value::Null)["network"].clone();
    let names: Vec<&str> = report
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["name"].as_str())
        .collect();
    assert_eq!(names, ["default"], "{report}");
}

/// KubeVirt keeps a migrated guest's MAC and address: the target pod's
/// launcher sets up its own bridge, tap and DHCP server (from its own pod
/// interface, whose MAC differs), then adopts the MAC the guest arrives
/// with, so the guest's DHCP renewals are answered and its traffic leaves
/// through the target pod's NAT.
#[test]
fn a_migrated_masquerade_guest_keeps_its_mac_and_address_in_the_target_pod() {
    if !require(REAL_GUEST) {
        return;
    }
    let mut source = PodNet::new();
    let mut target_net = PodNet::new();
    source.serve_outside(OUTSIDE_IP, 8080);
    target_net.serve_outside(OUTSIDE_IP, 8080);
    let mut opts = GuestOptions::new("netmove");
    // No macAddress: the guest takes the source pod interface's MAC.
    opts.mac = String::new();
    opts.interface = json!({"name": "default", "masquerade": {}});
    let mut g = boot_in(&source, &opts);
    guest_until(&mut g.client, "ip -4 addr show dev eth0", "10.0.2.2/24");
    let guest_mac = guest_sh(&mut g.client, "cat /sys/class/net/eth0/address")
        .1
        .trim()
        .to_string();
    let pod_mac = |net: &PodNet| {
        net.in_pod(&["cat", "/sys/class/net/eth0/address"])
            .trim()
            .to_string()
    };
    assert_eq!(guest_mac, pod_mac(&source));
    assert_eq!(network_report(&mut g.client)["mac"], guest_mac.as_str());
    assert_ne!(pod_mac(&target_net), guest_mac, "two veths with one MAC");

    // The target launcher in its own pod namespace, prepared from the VMI:
    // its plan has its own pod interface's MAC until the guest arrives.
    let mut b = target_net.launcher(&opts.name, &[]);
    let mut b_watch = b.client();
    b_watch.ok("subscribe", Value::Null);
    let mut b_client = b.client();
    let prepared = b_client.request_timeout(
        "prepare-migration-target",
        json!({"vmi": guest_vmi(&opts)}),
        STEP,
    );
    let target = prepared["return"]["target"].clone();
    assert!(target.is_object(), "{prepared}");
    // (No domain to query yet: the set-up's log line says it.)
    let planned = format!("tap tap0, MAC {}", pod_mac(&target_net));
    assert!(b.log_text().contains(&planned), "no {planned:?} in the log");

    g.client.ok("migrate", json!({"target": target}));
    b_watch.wait_event(
        STEP,
        "target MIGRATION_COMPLETED",
        named("MIGRATION_COMPLETED"),
    );
    assert_eq!(g.launcher.wait_exit(STEP), 0);
    assert_eq!(source.leftovers(), Vec::<String>::new());
    wait_status(&mut b_client, STEP, "agent on the target", |s| {
        s["agent"]["connected"] == true
    });

    // The target serves the guest's own MAC now.
    let report = network_report(&mut b_client);
    assert_eq!(report["mac"], guest_mac.as_str());
    assert!(b.log_text().contains("the migrated guest has MAC"));
    assert_eq!(
        guest_sh(&mut b_client, "cat /sys/class/net/eth0/address")
            .1
            .trim(),
        guest_mac
    );
    // A DHCP exchange from the guest (one-shot, leaves the address as
    // it is) is answered by the target's server with the same address.
    let renewed = guest_until(
        &mut b_client,
        "udhcpc -i eth0 -n -q -t 3 -T 2 -s /bin/true 2>&1",
        "obtained",
    );
    assert!(renewed.contains("10.0.2.2"), "{renewed}");
    let report = network_report(&mut b_client);
    assert_eq!(report["dhcp"]["leased"], "10.0.2.2", "{report}");
    // Out through the target pod's NAT (the source's is gone).
    let out = guest_until(
        &mut b_client,
        &format!("nc -w 5 {OUTSIDE_IP} 8080 </dev/null"),
        "peer=",
    );
    assert!(out.contains(&format!("peer={POD_IP}")), "{out}");

    b.signal("TERM");
    assert_eq!(b.wait_exit(STEP), 0);
    assert_eq!(target_net.leftovers(), Vec::<String>::new());
}

/// `--pod-network existing`: KubeVirt's handler made the masquerade bridge
/// (with both gateways) and the tap; the launcher creates nothing but runs
/// the DHCP, DHCPv6 and router-advertisement servers on that bridge, and
/// leaves the devices in place when it exits.
#[test]
fn existing_masquerade_bridge_gets_dhcp_dhcpv6_and_router_advertisements() {
    if !require(REAL_GUEST) {
        return;
    }
    let net = PodNet::new();
    for args in [
        vec!["link", "add", "k6t-eth0", "type", "bridge"],
        vec!["addr", "add", "10.0.2.1/24", "dev", "k6t-eth0"],
        vec!["addr", "add", "fd10:0:2::1/120", "dev", "k6t-eth0", "nodad"],
        vec!["tuntap", "add", "dev", "tap0", "mode", "tap"],
        vec!["link", "set", "tap0", "master", "k6t-eth0", "up"],
        vec!["link", "set", "k6t-eth0", "up"],
    ] {
        let mut full = vec!["ip", "-n", &net.pod];
        full.extend(args);
        run(&full);
    }
    let mut opts = GuestOptions::new("existing6");
    opts.extra_cmdline = "tg.net6=dhcp".into();
    opts.interface = json!({"name": "default", "masquerade": {}});
    let mut g = boot_in_mode(&net, &opts, "existing");

    let addr = guest_until(&mut g.client, "ip -4 addr show dev eth0", "10.0.2.2/24");
    assert!(addr.contains("inet 10.0.2.2/24"), "{addr}");
    let addr6 = guest_until(&mut g.client, "ip -6 addr show dev eth0", "fd10:0:2::2");
    assert!(addr6.contains("inet6 fd10:0:2::2/"), "{addr6}");
    guest_until(&mut g.client, "ip -6 route", "default via fe80::");
    let report = network_report(&mut g.client);
    assert_eq!(report["created"], false, "{report}");
    assert_eq!(report["dhcp"]["offered"], "10.0.2.2/24", "{report}");
    assert_eq!(report["dhcp"]["leasedIPv6"], "fd10:0:2::2", "{report}");

    // What the launcher did not create stays.
    g.client.ok("kill", Value::Null);
    g.launcher.wait_exit(STEP);
    let links = net.in_pod(&["ip", "-o", "link", "show"]);
    assert!(
        links.contains("k6t-eth0") && links.contains("tap0"),
        "{links}"
    );
}

/// A masquerade interface without `ports` forwards every port (KubeVirt);
/// with `networkInterfaceMultiqueue` and two vCPUs the tap is
/// multi-queue and the guest's NIC has two queue pairs.
#[test]
fn masquerade_without_ports_forwards_every_port_and_multiqueue_reaches_the_guest() {
    if !require(REAL_GUEST) {
        return;
    }
    let net = PodNet::new();
    let mut opts = GuestOptions::new("allports");
    opts.interface = json!({"name": "default", "masquerade": {}});
    let mut vmi = guest_vmi(&opts);
    vmi["spec"]["domain"]["cpu"]["cores"] = json!(2);
    vmi["spec"]["domain"]["devices"]["networkInterfaceMultiqueue"] = json!(true);
    let mut launcher = net.launcher(&opts.name, &[]);
    let mut watcher = launcher.client();
    watcher.ok("subscribe", Value::Null);
    let mut client = launcher.client();
    let synced = client.request_timeout("sync", json!({"vmi": vmi}), STEP);
    assert!(synced.get("return").is_some(), "sync failed: {synced}");
    watcher.wait_event(BOOT, "AGENT_CONNECTED", named("AGENT_CONNECTED"));

    let tap = net.in_pod(&["ip", "-d", "link", "show", "tap0"]);
    assert!(tap.contains("multi_queue"), "{tap}");
    let queues = guest_until(&mut client, "ls /sys/class/net/eth0/queues", "rx-1");
    assert!(queues.contains("tx-1"), "{queues}");

    guest_until(&mut client, "ip -4 addr show dev eth0", "10.0.2.2/24");
    guest_sh(
        &mut client,
        "for p in 2222 31337; do setsid sh -c \"while true; do nc -l -p $p -e echo guest-$p; done\" </dev/null >/dev/null 2>&1 & done; sleep 1",
    );
    for port in [2222, 31337] {
        let reply = net.wait_reachable_from_outside(POD_IP, port, STEP);
        assert!(reply.contains(&format!("guest-{port}")), "{reply}");
    }
    client.ok("kill", Value::Null);
    launcher.wait_exit(STEP);
    assert_eq!(net.leftovers(), Vec::<String>::new());
}

/// passt processes whose command line names `dir` (the launcher's tree,
/// where the launcher runs passt) or `domain` (libvirt's own passt backend
/// names its socket `<id>-<domain>-<alias>.socket`).
fn passt_processes(dir: &str, domain: &str) -> Vec<String> {
    let socket = format!("-{domain}-");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if (text.starts_with("passt") || text.contains("/passt "))
            && (text.contains(dir) || text.contains(&socket))
        {
            found.push(format!("{}: {text}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

/// An address of the outside beyond the pod's gateway (OUTSIDE_IP).
const BEYOND_IP: &str = "203.0.113.1";

#[test]
fn passt_gives_the_pod_address_forwards_listed_ports_and_stops_with_the_launcher() {
    if !require(REAL_GUEST) {
        return;
    }
    let mut net = PodNet::new();
    // The server is beyond the gateway, not on it: passt as libvirt 11.3
    // runs it (no --no-map-gw) maps the gateway's own address to the pod's
    // loopback.
    run(&[
        "ip",
        "-n",
        &net.outside,
        "addr",
        "add",
        &format!("{BEYOND_IP}/32"),
        "dev",
        "lo",
    ]);
    net.serve_outside(BEYOND_IP, 8080);
    let mut opts = GuestOptions::new("passt");
    opts.interface = json!({"name": "default", "binding": {"name": "passt"},
        "ports": [{"port": 8080}]});
    let mut g = boot_in(&net, &opts);
    let tree = g
        .launcher
        .tree
        .path("private")
        .to_string_lossy()
        .into_owned();

    // passt runs beside QEMU: by the launcher when libvirt is older than
    // 9.2 (Debian 12), by libvirt otherwise.
    let report = network_report(&mut g.client);
    assert_eq!(report["binding"], "passt", "{report}");
    assert_eq!(report["name"], "default", "{report}");
    assert_eq!(report["passt"]["tcpPorts"], "8080", "{report}");
    assert_eq!(passt_processes(&tree, "e2e_passt").len(), 1, "{report}");
    // Who runs it follows the daemon's version: libvirt's own passt
    // backend from 9.2 (the newer stack, scripts/newer-stack.sh), the
    // launcher with QEMU joining its socket on the command line before.
    let daemon = g.client.ok("query-version", Value::Null)["libvirt"]["daemon"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let xml = g.client.ok("query-domain", Value::Null)["xml"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let native = virt_launcher::convert::passt_by_libvirt(
        virt_launcher::hypervisor::state::parse_libvirt_version(&daemon),
    );
    eprintln!("libvirt {daemon}: passt run by libvirt: {native}");
    assert_eq!(xml.contains("<backend type='passt'"), native, "{xml}");
    assert_eq!(xml.contains("<qemu:commandline>"), !native, "{xml}");

    // passt's DHCP gives the guest the pod's own address and gateway.
    let addr = guest_until(
        &mut g.client,
        "ip -4 addr show dev eth0",
        &format!("{POD_IP}/24"),
    );
    assert!(addr.contains(&format!("inet {POD_IP}/24")), "{addr}");
    let (_, routes) = guest_sh(&mut g.client, "ip -4 route");
    assert!(
        routes.contains(&format!("default via {OUTSIDE_IP}")),
        "{routes}"
    );

    // Out: the outside sees the pod's address. (Debian 12's passt does
    // not pass on the server's FIN once the guest closed its side first,
    // so the guest keeps its side open until the server is done.)
    let out = guest_until(
        &mut g.client,
        &format!("sleep 2 | timeout 10 nc {BEYOND_IP} 8080"),
        "peer=",
    );
    assert!(out.contains(&format!("peer={POD_IP}")), "{out}");

    // In: the listed port reaches the guest, another does not.
    guest_sh(
        &mut g.client,
        "for p in 8080 9090; do setsid sh -c \"while true; do nc -l -p $p -e echo guest-$p; done\" </dev/null >/dev/null 2>&1 & done; sleep 1",
    );
    let reply = net.wait_reachable_from_outside(POD_IP, 8080, STEP);
    assert!(reply.contains("guest-8080"), "{reply}");
    assert_eq!(net.connect_from_outside(POD_IP, 9090), None);

    // SIGTERM: the launcher stops passt and removes its socket.
    g.launcher.signal("TERM");
    assert_eq!(g.launcher.wait_exit(STEP), 0);
    assert_eq!(passt_processes(&tree, "e2e_passt"), Vec::<String>::new());
    let sockets: Vec<_> = std::fs::read_dir(format!("{tree}/passt"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(sockets.is_empty(), "{sockets:?}");
}

#[test]
fn a_sigkilled_launcher_leaves_no_passt() {
    if !require(REAL_GUEST) {
        return;
    }
    let net = PodNet::new();
    let mut opts = GuestOptions::new("passtkill");
    opts.interface = json!({"name": "default", "binding": {"name": "passt"},
        "portRanges": [{"protocol": "UDP", "start": 5000, "end": 5010}]});
    let mut launcher = net.launcher("passtkill", &[]);
    let tree = launcher.tree.path("private").to_string_lossy().into_owned();
    let mut watcher = launcher.client();
    watcher.ok("subscribe", Value::Null);
    let mut client = launcher.client();
    let synced = client.request_timeout("sync", json!({"vmi": guest_vmi(&opts)}), STEP);
    assert!(synced.get("return").is_some(), "sync failed: {synced}");
    watcher.wait_event(STEP, "Started", lifecycle("Started", "Booted"));
    let report = network_report(&mut client);
    assert_eq!(report["binding"], "passt", "{report}");
    assert_eq!(report["passt"]["tcpPorts"], "none", "{report}");
    assert_eq!(report["passt"]["udpPorts"], "5000-5010", "{report}");
    assert_eq!(passt_processes(&tree, "e2e_passtkill").len(), 1, "{report}");
    launcher.signal("KILL");
    launcher.wait_exit(STEP);
    // It ran in the daemons' PID namespace, which died with the launcher.
    let deadline = Instant::now() + STEP;
    while !passt_processes(&tree, "e2e_passtkill").is_empty() {
        assert!(
            Instant::now() < deadline,
            "passt outlived the launcher: {:?}",
            passt_processes(&tree, "e2e_passtkill")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
