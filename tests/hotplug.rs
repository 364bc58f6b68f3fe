//! sync on a running guest applies what changed, on the real test guest
//! (real libvirt, real QEMU under TCG, the guest's own kernel): hotplugged
//! disks on scsi and virtio that keep their data, vCPUs (fewer under TCG
//! where the stack can take them away), virtio-mem, a hot-added NIC, a
//! change that needs a restart, and a sync that changes nothing. Run under
//! the shared lock:
//! `flock /work/qemu-tests.lock cargo test --test hotplug`.

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::guest::*;
use common::*;
use serde_json::{Value, json};

/// Polls a guest shell command until its output satisfies `pred`.
fn guest_until(
    client: &mut Client,
    script: &str,
    what: &str,
    pred: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + STEP;
    loop {
        let (_, out) = guest_sh(client, script);
        if pred(&out) {
            return out;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the guest still says {out:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The launcher speaks to libvirt with the backend the run asks for
/// (`VL_LAUNCHER_BACKEND=wire` with the static binary in scripts/test.sh).
fn assert_backend(client: &Client) {
    if let Some(backend) = expected_backend() {
        assert_eq!(client.hello["hello"]["backend"], backend.as_str());
    }
}

/// The block devices of the guest's /proc/partitions.
fn partitions(client: &mut Client) -> Vec<String> {
    let (_, out) = guest_sh(client, "cat /proc/partitions");
    out.lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().nth(3))
        .map(str::to_string)
        .collect()
}

fn sync(client: &mut Client, vmi: &Value) -> Value {
    let reply = client.request_timeout("sync", json!({ "vmi": vmi }), STEP);
    reply
        .get("return")
        .unwrap_or_else(|| panic!("sync failed: {reply}"))
        .clone()
}

/// `vmi` with the hotpluggable PVC `name` as a disk on `bus`.
fn with_volume(vmi: &Value, name: &str, bus: &str) -> Value {
    let mut v = vmi.clone();
    v["spec"]["domain"]["devices"]["disks"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": name, "disk": {"bus": bus}}));
    v["spec"]["volumes"].as_array_mut().unwrap().push(json!({
        "name": name,
        "persistentVolumeClaim": {"claimName": name, "hotpluggable": true}
    }));
    v
}

#[test]
fn disks_plug_in_on_scsi_and_virtio_unplug_and_keep_their_data() {
    if !require(REAL_GUEST) {
        return;
    }
    let opts = GuestOptions::new("hpdisk");
    let base = guest_vmi(&opts);
    // A device plugin "assigned" a PCI device this host does not have.
    let mut g = boot_vmi_env(
        TempTree::new("q-hpdisk"),
        "hpdisk",
        base.clone(),
        &[],
        &["PCI_RESOURCE_VENDOR_COM_GHOST=0000:ff:1f.7"],
    );
    assert_backend(&g.client);
    let hotplug_dir = g.launcher.tree.path("hotplug-disks");
    fs::create_dir_all(&hotplug_dir).unwrap();

    // An unchanged VMI is a no-op.
    let same = sync(&mut g.client, &base);
    assert_eq!(same["action"], "none");
    assert_eq!(same["changes"], json!([]));

    // A machine-type change needs a restart: refused, nothing touched.
    let xml_before = g.client.ok("query-domain", Value::Null)["xml"].clone();
    let mut other_machine = base.clone();
    other_machine["spec"]["domain"]["machine"] = json!({"type": "pc-q35-7.2"});
    let (class, desc) = g.client.err_class("sync", json!({ "vmi": other_machine }));
    assert_eq!(class, "InvalidArgument");
    assert!(
        desc.starts_with(
            "arguments.vmi.spec.domain.machine.type: changed from (not set) to \"pc-q35-7.2\""
        ),
        "{desc}"
    );
    assert_eq!(g.client.ok("query-domain", Value::Null)["xml"], xml_before);
    assert_eq!(guest_sh(&mut g.client, "echo alive").1, "alive\n");

    for (volume, bus) in [("hpscsi", "scsi"), ("hpvirtio", "virtio")] {
        let image = hotplug_dir.join(format!("{volume}.img"));
        fs::File::create(&image)
            .and_then(|f| f.set_len(64 << 20))
            .unwrap();
        let before = partitions(&mut g.client);
        let plugged = with_volume(&base, volume, bus);
        let sent = Instant::now();
        let reply = sync(&mut g.client, &plugged);
        assert_eq!(reply["action"], "updated", "{reply}");
        assert_eq!(reply["changes"][0]["change"], "attach-disk");
        assert_eq!(reply["changes"][0]["bus"], bus);
        let added = g.watcher.wait_event(STEP, "DEVICE_ADDED", |e| {
            e["event"] == "DEVICE_ADDED" && e["data"]["alias"] == format!("ua-{volume}")
        });
        assert_eq!(added["data"]["kind"], "disk");
        // The guest sees a new 64 MiB block device (65536 1 KiB blocks).
        let out = guest_until(&mut g.client, "cat /proc/partitions", "new disk", |out| {
            out.lines().any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() == 4 && f[2] == "65536" && !before.contains(&f[3].to_string())
            })
        });
        eprintln!(
            "{bus}: the guest saw the disk {:.2} s after sync was sent",
            sent.elapsed().as_secs_f64()
        );
        let dev = out
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 4 && f[2] == "65536").then(|| f[3].to_string())
            })
            .find(|d| !before.contains(d))
            .unwrap();
        let status = g.client.ok("query-domain", Value::Null);
        let listed = status["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == volume)
            .cloned()
            .unwrap_or_else(|| panic!("{volume} not in {}", status["volumes"]));
        assert_eq!(listed["phase"], "ready");
        assert_eq!(listed["hotpluggable"], true);

        let marker = format!("marker-{bus}");
        let (code, _) = guest_sh(
            &mut g.client,
            &format!("printf {marker} > /dev/{dev} && sync && echo 3 > /proc/sys/vm/drop_caches"),
        );
        assert_eq!(code, 0);

        let reply = sync(&mut g.client, &base);
        assert_eq!(reply["changes"][0]["change"], "detach-disk", "{reply}");
        g.watcher.wait_event(STEP, "DEVICE_REMOVED", |e| {
            e["event"] == "DEVICE_REMOVED" && e["data"]["alias"] == format!("ua-{volume}")
        });
        guest_until(&mut g.client, "cat /proc/partitions", "disk gone", |out| {
            !out.split_whitespace().any(|w| w == dev)
        });
        let status = g.client.ok("query-domain", Value::Null);
        assert!(
            status["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .all(|v| v["name"] != volume),
            "{}",
            status["volumes"]
        );

        // Plugged in again: the data is still there.
        sync(&mut g.client, &plugged);
        let out = guest_until(
            &mut g.client,
            &format!(
                "for d in $(awk 'NR>2 && $3==65536 {{print $4}}' /proc/partitions); do head -c {} /dev/$d; echo; done",
                marker.len()
            ),
            "marker back",
            |out| out.contains(&marker),
        );
        assert!(out.contains(&marker), "{out}");
        // Leave it unplugged for the next bus.
        sync(&mut g.client, &base);
        g.watcher.wait_event(STEP, "DEVICE_REMOVED", |e| {
            e["event"] == "DEVICE_REMOVED" && e["data"]["alias"] == format!("ua-{volume}")
        });
    }

    // A host device that is not on this host: named with its address.
    let mut ghost = base.clone();
    ghost["spec"]["domain"]["devices"]["hostDevices"] =
        json!([{"name": "ghost", "deviceName": "vendor.com/ghost"}]);
    let (class, desc) = g.client.err_class("sync", json!({ "vmi": ghost }));
    assert_eq!(class, "InvalidArgument");
    assert!(
        desc.starts_with("sync: host device \"hostdevice-ghost\": PCI device 0000:ff:1f.7 is not on this host (/sys/bus/pci/devices/0000:ff:1f.7: "),
        "{desc}"
    );

    // A volume whose image is not mounted is refused naming its path.
    let (class, desc) = g.client.err_class(
        "sync",
        json!({ "vmi": with_volume(&base, "absent", "scsi") }),
    );
    assert_eq!(class, "InvalidArgument");
    assert!(desc.contains("hotplug-disks/absent.img"), "{desc}");
}

/// The guest's MemTotal in KiB.
fn mem_total(client: &mut Client) -> u64 {
    let (_, out) = guest_sh(client, "grep MemTotal /proc/meminfo");
    out.split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no MemTotal in {out:?}"))
}

/// Enabled vCPUs of the live domain, as query-domain shows them.
fn live_vcpus(client: &mut Client) -> u64 {
    let spec = client.ok("query-domain", Value::Null)["spec"].clone();
    spec["vcpu"]["@current"]
        .as_u64()
        .or_else(|| spec["vcpu"]["$text"].as_u64())
        .unwrap_or_else(|| panic!("no vcpu in {}", spec["vcpu"]))
}

/// Whether the launcher's stack takes vCPUs away live under TCG (libvirt
/// 11.3 and QEMU 10.0 or newer, the newer stack; not libvirt 9.0 with QEMU
/// 7.2, the host's), from what query-version reports.
fn removes_vcpus_under_tcg(client: &mut Client) -> bool {
    let version = client.ok("query-version", Value::Null);
    let numbers = |dotted: &str| -> (u32, u32) {
        let mut parts = dotted.split('.').map(|p| p.parse().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    };
    let daemon = numbers(version["libvirt"]["daemon"].as_str().unwrap());
    let qemu = version["hypervisor"].as_str().unwrap();
    let qemu = numbers(qemu.strip_prefix("QEMU ").unwrap_or(qemu));
    daemon >= (11, 3) && qemu >= (10, 0)
}

#[test]
fn vcpus_memory_and_a_nic_change_live() {
    if !require(REAL_GUEST) {
        return;
    }
    let opts = GuestOptions::new("hpcpu");
    let mut base = guest_vmi(&opts);
    base["spec"]["domain"]["cpu"] =
        json!({"sockets": 1, "cores": 1, "threads": 1, "maxSockets": 2});
    base["spec"]["domain"]["memory"] = json!({"guest": "192Mi", "maxGuest": "512Mi"});
    let mut g = boot_vmi(
        TempTree::new("q-hpcpu"),
        "hpcpu",
        base.clone(),
        &["--qemu-agent-sys-interval", "3s"],
    );
    assert_backend(&g.client);
    assert_eq!(live_vcpus(&mut g.client), 1);

    // vCPUs: 1 → 2 (back to 1 at the end).
    let mut two = base.clone();
    two["spec"]["domain"]["cpu"]["sockets"] = json!(2);
    let reply = sync(&mut g.client, &two);
    assert_eq!(
        reply["changes"],
        json!([{"change": "set-vcpus", "from": 1, "to": 2}])
    );
    // The guest brings the new vCPU online (as udev would).
    guest_until(
        &mut g.client,
        "cat /sys/devices/system/cpu/online",
        "cpu1 online",
        |out| out.trim() == "0-1",
    );
    assert_eq!(live_vcpus(&mut g.client), 2);
    let mut three = base.clone();
    three["spec"]["domain"]["cpu"]["sockets"] = json!(3);
    let (class, desc) = g.client.err_class("sync", json!({ "vmi": three }));
    assert_eq!(class, "InvalidArgument");
    assert!(
        desc.starts_with("arguments.vmi.spec.domain.cpu.sockets: 3 sockets is above"),
        "{desc}"
    );

    // Memory: virtio-mem from 192 MiB to 320 MiB.
    let before = mem_total(&mut g.client);
    let mut more = two.clone();
    more["spec"]["domain"]["memory"]["guest"] = json!("320Mi");
    let reply = sync(&mut g.client, &more);
    assert_eq!(
        reply["changes"],
        json!([{"change": "resize-memory", "from": 192u64 << 20, "to": 320u64 << 20}])
    );
    let xml = g.client.ok("query-domain", Value::Null)["xml"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        xml.contains("<requested unit='KiB'>131072</requested>"),
        "{xml}"
    );
    let deadline = Instant::now() + STEP;
    let after = loop {
        let now = mem_total(&mut g.client);
        if now >= before + 100 * 1024 || Instant::now() > deadline {
            break now;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        after >= before + 100 * 1024,
        "MemTotal {before} KiB → {after} KiB"
    );

    // A NIC plugged in shows in the agent's interfaces with its MAC, and
    // goes again.
    let mac = "52:54:00:7e:57:99";
    let mut nic = more.clone();
    nic["spec"]["domain"]["devices"]["interfaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "hot", "binding": {"name": "slirp"}, "macAddress": mac}));
    nic["spec"]["networks"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "hot", "pod": {}}));
    let reply = sync(&mut g.client, &nic);
    assert_eq!(reply["changes"][0]["change"], "attach-interface", "{reply}");
    assert_eq!(reply["changes"][0]["mac"], mac);
    let has_mac = |client: &mut Client| {
        client.ok("query-interfaces", Value::Null)["interfaces"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["mac"] == mac)
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    while !has_mac(&mut g.client) {
        assert!(Instant::now() < deadline, "{mac} never in query-interfaces");
        std::thread::sleep(Duration::from_millis(500));
    }
    let reply = sync(&mut g.client, &more);
    assert_eq!(reply["changes"][0]["change"], "detach-interface", "{reply}");
    let deadline = Instant::now() + Duration::from_secs(90);
    while has_mac(&mut g.client) {
        assert!(Instant::now() < deadline, "{mac} still in query-interfaces");
        std::thread::sleep(Duration::from_millis(500));
    }

    // vCPUs back to 1. libvirt 9.0 with QEMU 7.2: refused under
    // emulation, before anything is touched (QEMU takes the vCPU from the
    // guest but sends no DEVICE_DELETED for it, so libvirt would keep
    // counting it; see docs/protocol.md), and the guest keeps its second
    // vCPU. libvirt 11.3 with QEMU 10.0: done (the launcher asks libvirt
    // again), and then QEMU has made 2 vCPUs, as many as the maximum: one
    // more would abort it, so adding one back is refused.
    let mut one = more.clone();
    one["spec"]["domain"]["cpu"]["sockets"] = json!(1);
    let newer = removes_vcpus_under_tcg(&mut g.client);
    if newer {
        let reply = sync(&mut g.client, &one);
        assert_eq!(
            reply["changes"],
            json!([{"change": "set-vcpus", "from": 2, "to": 1}])
        );
        assert_eq!(live_vcpus(&mut g.client), 1);
        guest_until(
            &mut g.client,
            "cat /sys/devices/system/cpu/online",
            "cpu1 gone",
            |out| out.trim() == "0",
        );
        let (class, desc) = g.client.err_class("sync", json!({ "vmi": more }));
        assert_eq!(class, "InvalidArgument");
        assert!(
            desc.starts_with("arguments.vmi.spec.domain.cpu.sockets: going from 1 to 2 vCPUs needs a restart of the VMI: the domain is emulated (TCG), QEMU made 2 vCPUs since the domain started and each holds one of its 2 TCG translation contexts for good"),
            "{desc}"
        );
        assert_eq!(live_vcpus(&mut g.client), 1);
    } else {
        let (class, desc) = g.client.err_class("sync", json!({ "vmi": one }));
        assert_eq!(class, "InvalidArgument");
        assert!(
            desc.starts_with("arguments.vmi.spec.domain.cpu.sockets: going from 2 to 1 vCPUs needs a restart of the VMI: the domain is emulated (TCG)"),
            "{desc}"
        );
        assert_eq!(live_vcpus(&mut g.client), 2);
        let (_, cpus) = guest_sh(&mut g.client, "cat /sys/devices/system/cpu/online");
        assert_eq!(cpus.trim(), "0-1");
    }
    // The VMI that matches the guest is still a no-op.
    let (now, settled) = if newer { (&one, &base) } else { (&more, &two) };
    assert_eq!(sync(&mut g.client, now)["changes"], json!([]));

    // Memory back to 192 MiB: virtio-mem asks for nothing, and the guest
    // gives the plugged memory back.
    let grown = mem_total(&mut g.client);
    let reply = sync(&mut g.client, settled);
    assert_eq!(
        reply["changes"],
        json!([{"change": "resize-memory", "from": 320u64 << 20, "to": 192u64 << 20}])
    );
    let xml = g.client.ok("query-domain", Value::Null)["xml"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(xml.contains("<requested unit='KiB'>0</requested>"), "{xml}");
    let deadline = Instant::now() + STEP;
    let shrunk = loop {
        let now = mem_total(&mut g.client);
        if now + 100 * 1024 <= grown || Instant::now() > deadline {
            break now;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        shrunk + 100 * 1024 <= grown,
        "MemTotal {grown} KiB → {shrunk} KiB"
    );
    assert_eq!(sync(&mut g.client, settled)["changes"], json!([]));
}

/// Fewer vCPUs live under TCG: on the newer stack the guest sees one CPU
/// fewer, libvirt counts it, and the change can be made again (also after
/// an upgrade, which hands the count of vCPUs QEMU made over), until QEMU
/// has made as many vCPUs as the maximum (each holds a TCG translation
/// context for good): then adding one is refused, and the guest runs on.
/// On the host's stack (libvirt 9.0, QEMU 7.2) taking one away is refused
/// naming the versions it needs.
#[test]
fn fewer_vcpus_live_under_tcg_where_the_stack_can_take_them_away() {
    if !require(REAL_GUEST) {
        return;
    }
    let opts = GuestOptions::new("hpless");
    let mut two = guest_vmi(&opts);
    two["spec"]["domain"]["cpu"] = json!({"sockets": 2, "cores": 1, "threads": 1, "maxSockets": 3});
    let mut one = two.clone();
    one["spec"]["domain"]["cpu"]["sockets"] = json!(1);
    let mut g = boot_vmi(TempTree::new("q-hpless"), "hpless", two.clone(), &[]);
    assert_backend(&g.client);
    assert_eq!(live_vcpus(&mut g.client), 2);
    let online = |g: &mut Booted, want: &str| {
        guest_until(
            &mut g.client,
            "cat /sys/devices/system/cpu/online",
            &format!("CPUs {want} online"),
            |out| out.trim() == want,
        );
    };
    online(&mut g, "0-1");

    if !removes_vcpus_under_tcg(&mut g.client) {
        let (class, desc) = g.client.err_class("sync", json!({ "vmi": one }));
        assert_eq!(class, "InvalidArgument");
        assert!(
            desc.starts_with("arguments.vmi.spec.domain.cpu.sockets: going from 2 to 1 vCPUs needs a restart of the VMI: the domain is emulated (TCG)"),
            "{desc}"
        );
        assert!(
            desc.contains(
                "needs libvirt 11.3.0 and QEMU 10.0.0 or newer; this launcher's libvirt is "
            ),
            "{desc}"
        );
        assert_eq!(live_vcpus(&mut g.client), 2);
        online(&mut g, "0-1");
        return;
    }

    // QEMU made 2 vCPUs at start, of at most 3.
    let started = Instant::now();
    let reply = sync(&mut g.client, &one);
    eprintln!(
        "2 → 1 vCPUs: the sync replied after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        reply["changes"],
        json!([{"change": "set-vcpus", "from": 2, "to": 1}])
    );
    assert_eq!(live_vcpus(&mut g.client), 1);
    online(&mut g, "0");
    // Back to 2 (a third vCPU thread), and the guest brings it online.
    let reply = sync(&mut g.client, &two);
    assert_eq!(
        reply["changes"],
        json!([{"change": "set-vcpus", "from": 1, "to": 2}])
    );
    assert_eq!(live_vcpus(&mut g.client), 2);
    online(&mut g, "0-1");
    // The count goes on across an upgrade (without it the new launcher
    // would refuse to take a vCPU away).
    let reply = g.launcher.client().request("upgrade", Value::Null);
    assert!(reply.get("return").is_some(), "upgrade: {reply}");
    common::upgrade::wait_resumed(&mut g.launcher, 1, STEP);
    g.client = g.launcher.client();
    // Down again.
    let reply = sync(&mut g.client, &one);
    assert_eq!(
        reply["changes"],
        json!([{"change": "set-vcpus", "from": 2, "to": 1}])
    );
    assert_eq!(live_vcpus(&mut g.client), 1);
    online(&mut g, "0");
    // A fourth vCPU thread would abort QEMU: refused, nothing touched.
    let (class, desc) = g.client.err_class("sync", json!({ "vmi": two }));
    assert_eq!(class, "InvalidArgument");
    assert!(
        desc.starts_with("arguments.vmi.spec.domain.cpu.sockets: going from 1 to 2 vCPUs needs a restart of the VMI: the domain is emulated (TCG), QEMU made 3 vCPUs since the domain started and each holds one of its 3 TCG translation contexts for good"),
        "{desc}"
    );
    assert_eq!(live_vcpus(&mut g.client), 1);
    assert_eq!(guest_sh(&mut g.client, "echo alive").1, "alive\n");
    assert_eq!(g.client.ok("query-domain", Value::Null)["state"], "Running");
}

/// A launcher on libvirt's test driver with `env` in its environment.
fn test_driver_launcher(env: &[&str]) -> Launcher {
    let wrapper: Vec<String> = std::iter::once("env")
        .chain(env.iter().copied())
        .map(str::to_string)
        .collect();
    let args: Vec<String> = [
        "--connect",
        "test:///default",
        "--name",
        "demo",
        "--namespace",
        "default",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut launcher =
        Launcher::start_wrapped(TempTree::new("hostdev"), &wrapper, &args, Some("debug"));
    launcher.wait_ready(Duration::from_secs(20));
    launcher
}

/// Host devices start with the domain, checked by libvirt's schema; a
/// device added while it runs is sent to libvirt's driver, which refuses
/// it. A live attach that succeeds is covered only by the unit tests'
/// scripted hypervisor (src/manager/hotplug/tests.rs): neither the test
/// driver nor this host (no IOMMU, no mediated devices) can attach one.
#[test]
fn host_devices_from_the_environment_start_with_the_domain_but_only_the_fake_attaches_one_live() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    if !require(&[Need::Program("virt-xml-validate")]) {
        return;
    }
    let launcher = test_driver_launcher(&[
        "PCI_RESOURCE_VENDOR_COM_NIC=0000:81:00.1,0000:81:00.2",
        "MDEV_PCI_RESOURCE_NVIDIA_COM_T4=6fd8a4b0-7b04-4a0b-9a5d-7f3fe2a0a001",
        "KUBEVIRT_RESOURCE_NAME_sriov1=vendor.com/vf",
        "PCI_RESOURCE_VENDOR_COM_VF=0000:3b:02.4",
    ]);
    let mut client = launcher.client();
    let mut vmi = demo_vmi();
    vmi["spec"]["domain"]["devices"]["hostDevices"] =
        json!([{"name": "nic1", "deviceName": "vendor.com/nic"}]);
    vmi["spec"]["domain"]["devices"]["gpus"] =
        json!([{"name": "gpu1", "deviceName": "nvidia.com/T4"}]);
    vmi["spec"]["domain"]["devices"]["interfaces"] = json!([
        {"name": "default", "binding": {"name": "slirp"}},
        {"name": "sriov1", "sriov": {}}
    ]);
    vmi["spec"]["networks"] = json!([
        {"name": "default", "pod": {}},
        {"name": "sriov1", "multus": {"networkName": "sriov-net"}}
    ]);
    let reply = sync(&mut client, &vmi);
    assert_eq!(reply["action"], "defined-and-started");
    let domain = client.ok("query-domain", Value::Null);
    let hostdevs = domain["spec"]["devices"]["hostdev"]
        .as_array()
        .unwrap()
        .clone();
    let aliases: Vec<&str> = hostdevs
        .iter()
        .map(|h| h["alias"]["@name"].as_str().unwrap())
        .collect();
    assert_eq!(
        aliases,
        ["ua-hostdevice-nic1", "ua-gpu-gpu1", "ua-sriov-sriov1"]
    );
    assert_eq!(hostdevs[0]["source"]["address"]["@bus"], "0x81");
    assert_eq!(hostdevs[1]["@type"], "mdev");
    // What libvirt holds passes libvirt's own schema.
    let xml_path = launcher.tree.path("live.xml");
    fs::write(&xml_path, domain["xml"].as_str().unwrap()).unwrap();
    let validate = std::process::Command::new("virt-xml-validate")
        .arg(&xml_path)
        .arg("domain")
        .output()
        .expect("run virt-xml-validate");
    assert!(
        validate.status.success(),
        "{}{}",
        String::from_utf8_lossy(&validate.stdout),
        String::from_utf8_lossy(&validate.stderr)
    );

    // A second device while it runs is HotplugHostDevices: the attach
    // reaches the test driver, which cannot attach devices, and the error
    // says so, naming the device and its host address.
    vmi["spec"]["domain"]["devices"]["hostDevices"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "nic2", "deviceName": "vendor.com/nic"}));
    let (class, desc) = client.err_class("sync", json!({ "vmi": vmi }));
    assert_eq!(class, "Unavailable");
    assert!(
        desc.starts_with("sync: attach-host-device hostdevice-nic2 (change 1 of 1) failed: host device \"hostdevice-nic2\" (host address 0000:81:00.2): the libvirt driver does not support this operation"),
        "{desc}"
    );
    // A device of a resource the pod was not given.
    vmi["spec"]["domain"]["devices"]["gpus"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "gpu2", "deviceName": "nvidia.com/A100"}));
    let (class, desc) = client.err_class("sync", json!({ "vmi": vmi }));
    assert_eq!(class, "InvalidArgument");
    assert!(
        desc.starts_with("arguments.vmi.spec.domain.devices.gpus[1]: no device of resource \"nvidia.com/A100\" was assigned to the launcher: PCI_RESOURCE_NVIDIA_COM_A100 or MDEV_PCI_RESOURCE_NVIDIA_COM_A100 is not set"),
        "{desc}"
    );
}

/// A launcher on the test driver for KubeVirt's example VMI `name` (in
/// namespace default), with the image of its container disk, `env` in its
/// environment and `extra` flags.
fn example_launcher(name: &str, env: &[&str], extra: &[&str]) -> Launcher {
    let tree = TempTree::new(name);
    // The container disk's image, where KubeVirt's handler puts it.
    let image = tree.path("container-disks/disk_0.img");
    fs::create_dir_all(image.parent().unwrap()).unwrap();
    let made = std::process::Command::new("qemu-img")
        .args(["create", "-q", "-f", "qcow2"])
        .arg(&image)
        .arg("64M")
        .status()
        .expect("run qemu-img");
    assert!(made.success());
    let wrapper: Vec<String> = std::iter::once("env")
        .chain(env.iter().copied())
        .map(str::to_string)
        .collect();
    let args: Vec<String> = [
        "--connect",
        "test:///default",
        "--name",
        name,
        "--namespace",
        "default",
    ]
    .iter()
    .chain(extra)
    .map(|s| s.to_string())
    .collect();
    let mut launcher = Launcher::start_wrapped(tree, &wrapper, &args, Some("debug"));
    launcher.wait_ready(Duration::from_secs(20));
    launcher
}

/// KubeVirt's `examples/vmi-usb.yaml`, as JSON: a host device of KubeVirt's
/// USB device plugin (resource `kubevirt.io/storage`).
fn kubevirt_vmi_usb_example() -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"labels": {"special": "vmi-usb"}, "name": "vmi-usb"},
        "spec": {
            "domain": {
                "devices": {
                    "disks": [
                        {"disk": {"bus": "virtio"}, "name": "containerdisk"},
                        {"disk": {"bus": "virtio"}, "name": "cloudinitdisk"}
                    ],
                    "hostDevices": [
                        {"deviceName": "kubevirt.io/storage", "name": "node-usb-to-vmi-storage"}
                    ],
                    "rng": {}
                },
                "memory": {"guest": "1024M"},
                "resources": {}
            },
            "terminationGracePeriodSeconds": 0,
            "volumes": [
                {"containerDisk": {"image": "registry:5000/kubevirt/fedora-with-test-tooling-container-disk:devel"},
                 "name": "containerdisk"},
                {"cloudInitNoCloud": {"userData": "#cloud-config\npassword: fedora\nchpasswd: { expire: False }\npackages:\n  - nginx\nruncmd:\n  - [ \"systemctl\", \"enable\", \"--now\", \"nginx\" ]"},
                 "name": "cloudinitdisk"}
            ]
        }
    })
}

/// KubeVirt's vmi-usb example with its USB device plugin's environment
/// (`USB_RESOURCE_<resource>=<bus>:<device>`) is defined with a
/// `<hostdev type='usb'>` and the USB controller; without the variable it
/// is refused as a PCI or mediated device is, naming the variables.
#[test]
fn kubevirts_vmi_usb_example_gets_the_usb_device_its_plugin_assigned() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    if !require(&[
        Need::Program("qemu-img"),
        Need::Program("virt-xml-validate"),
    ]) {
        return;
    }
    let vmi = kubevirt_vmi_usb_example();

    let launcher = example_launcher("vmi-usb", &[], &[]);
    let mut client = launcher.client();
    let (class, desc) = client.err_class("sync", json!({ "vmi": vmi }));
    assert_eq!(class, "InvalidArgument");
    assert_eq!(
        desc,
        "arguments.vmi.spec.domain.devices.hostDevices[0]: no device of resource \"kubevirt.io/storage\" was assigned to the launcher: PCI_RESOURCE_KUBEVIRT_IO_STORAGE, MDEV_PCI_RESOURCE_KUBEVIRT_IO_STORAGE or USB_RESOURCE_KUBEVIRT_IO_STORAGE is not set in its environment (the device plugin sets it)"
    );
    drop(client);
    drop(launcher);

    let launcher = example_launcher("vmi-usb", &["USB_RESOURCE_KUBEVIRT_IO_STORAGE=2:7"], &[]);
    let mut client = launcher.client();
    let reply = sync(&mut client, &vmi);
    assert_eq!(reply["action"], "defined-and-started");
    let domain = client.ok("query-domain", Value::Null);
    let devices = &domain["spec"]["devices"];
    let hostdev = &devices["hostdev"][0];
    assert_eq!(hostdev["@type"], "usb", "{devices}");
    assert_eq!(hostdev["@mode"], "subsystem");
    assert_eq!(
        hostdev["alias"]["@name"],
        "ua-usb-host-node-usb-to-vmi-storage"
    );
    assert_eq!(hostdev["source"]["address"]["@bus"], "2");
    assert_eq!(hostdev["source"]["address"]["@device"], "7");
    let usb_controller: Vec<&Value> = devices["controller"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["@type"] == "usb")
        .collect();
    assert_eq!(usb_controller[0]["@model"], "qemu-xhci", "{devices}");
    // What libvirt holds passes libvirt's own schema.
    let xml_path = launcher.tree.path("live.xml");
    fs::write(&xml_path, domain["xml"].as_str().unwrap()).unwrap();
    let validate = std::process::Command::new("virt-xml-validate")
        .arg(&xml_path)
        .arg("domain")
        .output()
        .expect("run virt-xml-validate");
    assert!(
        validate.status.success(),
        "{}{}",
        String::from_utf8_lossy(&validate.stdout),
        String::from_utf8_lossy(&validate.stderr)
    );
}

/// KubeVirt's `examples/vmi-dra-pgpu.yaml`, as JSON: a GPU of a resource
/// claim made from a template.
fn kubevirt_vmi_dra_pgpu_example() -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"labels": {"special": "vmi-dra-pgpu"}, "name": "vmi-dra-pgpu"},
        "spec": {
            "domain": {
                "devices": {
                    "disks": [
                        {"disk": {"bus": "virtio"}, "name": "containerdisk"},
                        {"disk": {"bus": "virtio"}, "name": "cloudinitdisk"}
                    ],
                    "gpus": [
                        {"claimName": "pgpu-resource-claim", "name": "example-gpu", "requestName": "pgpu"}
                    ],
                    "rng": {}
                },
                "memory": {"guest": "1024M"},
                "resources": {}
            },
            "resourceClaims": [
                {"name": "pgpu-resource-claim", "resourceClaimTemplateName": "pgpu-resource-claim-tmpl"}
            ],
            "terminationGracePeriodSeconds": 0,
            "volumes": [
                {"containerDisk": {"image": "registry:5000/kubevirt/fedora-with-test-tooling-container-disk:devel"},
                 "name": "containerdisk"},
                {"cloudInitNoCloud": {"userData": "#cloud-config\npassword: fedora\nchpasswd: { expire: False }"},
                 "name": "cloudinitdisk"}
            ]
        }
    })
}

/// KubeVirt's vmi-dra-pgpu example: its GPU is the PCI device the DRA
/// driver's metadata names, read from `--dra-metadata-dir` where KubeVirt
/// reads it (`resourceclaimtemplates/<claim>/<request>/*-metadata.json`);
/// without the metadata the sync is refused naming the GPU, the claim and
/// the directory looked in.
#[test]
fn kubevirts_dra_gpu_example_gets_the_device_of_its_claims_metadata() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    if !require(&[
        Need::Program("qemu-img"),
        Need::Program("virt-xml-validate"),
    ]) {
        return;
    }
    let metadata = TempTree::new("dra-metadata");
    let dir_arg = metadata.path("").display().to_string();
    let vmi = kubevirt_vmi_dra_pgpu_example();
    let launcher = example_launcher("vmi-dra-pgpu", &[], &["--dra-metadata-dir", &dir_arg]);
    let mut client = launcher.client();
    let (class, desc) = client.err_class("sync", json!({ "vmi": vmi }));
    assert_eq!(class, "InvalidArgument");
    let request_dir = metadata.path("resourceclaimtemplates/pgpu-resource-claim/pgpu");
    assert!(
        desc.starts_with(&format!(
            "arguments.vmi.spec.domain.devices.gpus[0]: no device of claim \"pgpu-resource-claim\" request \"pgpu\" was allocated to the launcher: the DRA driver's metadata of claim \"pgpu-resource-claim\" request \"pgpu\" is not in {} (",
            request_dir.display()
        )),
        "{desc}"
    );

    // The DRA driver's metadata, as KEP-5304 writes it.
    fs::create_dir_all(&request_dir).unwrap();
    fs::write(
        request_dir.join("gpu.nvidia.com-metadata.json"),
        json!({
            "apiVersion": "metadata.resource.k8s.io/v1alpha1",
            "kind": "DeviceMetadata",
            "metadata": {"name": "vmi-dra-pgpu-pgpu-resource-claim-x7k2q", "namespace": "default"},
            "podClaimName": "pgpu-resource-claim",
            "requests": [{"name": "pgpu", "devices": [{
                "driver": "gpu.nvidia.com", "pool": "node1", "name": "gpu-0",
                "attributes": {"resource.kubernetes.io/pciBusID": {"string": "0000:3b:00.0"}}}]}]
        })
        .to_string(),
    )
    .unwrap();
    let reply = sync(&mut client, &vmi);
    assert_eq!(reply["action"], "defined-and-started");
    let domain = client.ok("query-domain", Value::Null);
    let hostdev = &domain["spec"]["devices"]["hostdev"][0];
    assert_eq!(hostdev["@type"], "pci", "{hostdev}");
    assert_eq!(hostdev["@managed"], "no");
    assert_eq!(hostdev["alias"]["@name"], "ua-dra-gpu-example-gpu");
    assert_eq!(hostdev["source"]["address"]["@bus"], "0x3b");
    let xml_path = launcher.tree.path("live.xml");
    fs::write(&xml_path, domain["xml"].as_str().unwrap()).unwrap();
    let validate = std::process::Command::new("virt-xml-validate")
        .arg(&xml_path)
        .arg("domain")
        .output()
        .expect("run virt-xml-validate");
    assert!(
        validate.status.success(),
        "{}{}",
        String::from_utf8_lossy(&validate.stdout),
        String::from_utf8_lossy(&validate.stderr)
    );
}
