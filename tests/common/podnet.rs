//! The network namespaces of the pod-networking tests and benchmarks: a
//! "pod" namespace (where the launcher, its libvirt daemons and QEMU run)
//! joined by a veth pair to an "outside" namespace that plays the
//! cluster network. All traffic stays inside these namespaces (TEST-NET-2
//! addresses, fd99::/64); both are removed on drop.

use std::fs;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::guest::{BOOT, Booted, GuestOptions, STEP, guest_sh, guest_vmi, images};
use super::{Client, Launcher, TempTree, lifecycle, named};

pub const POD_IP: &str = "198.51.100.2";
pub const OUTSIDE_IP: &str = "198.51.100.1";
pub const POD_IP6: &str = "fd99::2";
pub const OUTSIDE_IP6: &str = "fd99::1";
pub const DNS_SERVER: &str = "198.51.100.53";

static COUNTER: AtomicU32 = AtomicU32::new(0);

pub fn run(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A pod namespace (eth0 198.51.100.2/24, fd99::2/64, default routes via
/// the outside) and an outside namespace (198.51.100.1, fd99::1).
pub struct PodNet {
    pub pod: String,
    pub outside: String,
    pub tree_dir: TempTree,
    pub servers: Vec<Child>,
}

impl PodNet {
    pub fn new() -> PodNet {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}-{n}", std::process::id());
        let pod = format!("vlpod-{tag}");
        let outside = format!("vlout-{tag}");
        let net = PodNet {
            pod: pod.clone(),
            outside: outside.clone(),
            tree_dir: TempTree::new("podnet"),
            servers: Vec::new(),
        };
        run(&["ip", "netns", "add", &pod]);
        run(&["ip", "netns", "add", &outside]);
        run(&[
            "ip", "-n", &pod, "link", "add", "eth0", "type", "veth", "peer", "name", "ext0",
            "netns", &outside,
        ]);
        for (ns, dev, v4, v6) in [
            (&pod, "eth0", POD_IP, POD_IP6),
            (&outside, "ext0", OUTSIDE_IP, OUTSIDE_IP6),
        ] {
            run(&["ip", "-n", ns, "link", "set", "lo", "up"]);
            run(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{v4}/24"),
                "dev",
                dev,
            ]);
            run(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{v6}/64"),
                "dev",
                dev,
                "nodad",
            ]);
            run(&["ip", "-n", ns, "link", "set", dev, "up"]);
        }
        run(&[
            "ip", "-n", &pod, "route", "add", "default", "via", OUTSIDE_IP,
        ]);
        run(&[
            "ip",
            "-n",
            &pod,
            "-6",
            "route",
            "add",
            "default",
            "via",
            OUTSIDE_IP6,
        ]);
        fs::write(
            net.resolv_conf(),
            format!("search e2e.svc.cluster.local svc.cluster.local cluster.local\nnameserver {DNS_SERVER}\noptions ndots:5\n"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        net
    }

    pub fn resolv_conf(&self) -> String {
        self.tree_dir
            .path("resolv.conf")
            .to_string_lossy()
            .into_owned()
    }

    pub fn in_pod(&self, args: &[&str]) -> String {
        let mut full = vec!["ip", "netns", "exec", &self.pod];
        full.extend_from_slice(args);
        run(&full)
    }

    /// A TCP server in the outside namespace that answers every
    /// connection with the address it came from.
    pub fn serve_outside(&mut self, bind: &str, port: u16) {
        let listen = if bind.contains(':') {
            format!("TCP6-LISTEN:{port},reuseaddr,fork,bind=[{bind}]")
        } else {
            format!("TCP-LISTEN:{port},reuseaddr,fork,bind={bind}")
        };
        let child = Command::new("ip")
            .args(["netns", "exec", &self.outside, "socat", &listen])
            .arg("SYSTEM:echo peer=$SOCAT_PEERADDR")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("socat: {e}"));
        self.servers.push(child);
        // Wait until it listens.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let ss = run(&["ip", "netns", "exec", &self.outside, "ss", "-ltnH"]);
            if ss.contains(&format!(":{port} ")) {
                break;
            }
            assert!(Instant::now() < deadline, "socat did not listen: {ss}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What a client in the outside namespace gets from `addr:port`, or
    /// None when the connection fails.
    pub fn connect_from_outside(&self, addr: &str, port: u16) -> Option<String> {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.outside, "socat", "-T", "5", "-"])
            .arg(format!("TCP:{addr}:{port},connect-timeout=5"))
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("socat: {e}"));
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
            .filter(|s| !s.is_empty())
    }

    /// What the outside client gets from `addr:port` once it answers,
    /// retried every 500 ms until `within` has passed (the guest's
    /// listener starts in the background).
    pub fn wait_reachable_from_outside(&self, addr: &str, port: u16, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            if let Some(r) = self.connect_from_outside(addr, port) {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "port {port} never reached the guest"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Devices and nftables tables the launcher would have created.
    pub fn leftovers(&self) -> Vec<String> {
        let links = self.in_pod(&["ip", "-o", "link", "show"]);
        let mut left: Vec<String> = links
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|name| name.split('@').next().unwrap_or(name).to_string())
            .filter(|name| {
                name.starts_with("k6t-") || name.starts_with("tap") || name.ends_with("-nic")
            })
            .collect();
        let tables = self.in_pod(&["nft", "list", "tables"]);
        left.extend(
            tables
                .lines()
                .filter(|l| l.contains("virt_launcher"))
                .map(str::to_string),
        );
        left
    }

    pub fn launcher(&self, name: &str, extra: &[&str]) -> Launcher {
        // auto would do the same where PID 1's namespace is readable.
        self.launcher_in_mode(name, "setup", extra)
    }

    /// A launcher with `--pod-network mode`.
    pub fn launcher_in_mode(&self, name: &str, mode: &str, extra: &[&str]) -> Launcher {
        images();
        let mut args: Vec<String> = [
            "--spawn-libvirt",
            "--force-emulation",
            "--pod-network",
            mode,
            "--resolv-conf",
            &self.resolv_conf(),
            "--name",
            name,
            "--namespace",
            "e2e",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let wrapper: Vec<String> = ["ip", "netns", "exec", &self.pod]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let rust_log = std::env::var("VL_TEST_LOG").unwrap_or_else(|_| "debug".into());
        let mut launcher = Launcher::start_wrapped(
            TempTree::new(&format!("net-{name}")),
            &wrapper,
            &args,
            Some(&rust_log),
        );
        launcher.wait_ready(STEP);
        launcher
    }
}

impl Drop for PodNet {
    fn drop(&mut self) {
        for child in &mut self.servers {
            let _ = child.kill();
            let _ = child.wait();
        }
        for ns in [&self.pod, &self.outside] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Boots the test guest in `net`'s pod namespace with `opts`.
pub fn boot_in(net: &PodNet, opts: &GuestOptions) -> Booted {
    boot_in_mode(net, opts, "setup")
}

/// `boot_in` with `--pod-network mode`.
pub fn boot_in_mode(net: &PodNet, opts: &GuestOptions, mode: &str) -> Booted {
    let launcher = net.launcher_in_mode(&opts.name, mode, &[]);
    let mut watcher = launcher.client();
    watcher.ok("subscribe", Value::Null);
    let mut client = launcher.client();
    let synced = client.request_timeout("sync", json!({"vmi": guest_vmi(opts)}), STEP);
    assert!(synced.get("return").is_some(), "sync failed: {synced}");
    let booted_at = Instant::now();
    watcher.wait_event(STEP, "Started", lifecycle("Started", "Booted"));
    watcher.wait_event(BOOT, "AGENT_CONNECTED", named("AGENT_CONNECTED"));
    Booted {
        launcher,
        client,
        watcher,
        booted_at,
    }
}

/// Runs `script` in the guest until it prints something containing
/// `want` (the guest's DHCP client runs in the background).
pub fn guest_until(client: &mut Client, script: &str, want: &str) -> String {
    let deadline = Instant::now() + STEP;
    loop {
        let (_, out) = guest_sh(client, script);
        if out.contains(want) {
            return out;
        }
        assert!(
            Instant::now() < deadline,
            "{script:?} never showed {want:?}; last: {out}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}
