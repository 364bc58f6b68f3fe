//! SIGKILL of a launcher run with --spawn-libvirt, a guest running: how
//! long until the last process of its tree (launcher, the namespace's
//! init, virtlogd, the libvirt daemon, QEMU) has exited, and until the
//! last one is reaped. KubeVirt leaves this to the container runtime.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::common::guest::*;
use super::common::processes::ProcessTree;
use super::common::*;

pub fn sigkill() {
    const RUNS: usize = 5;
    let opts = GuestOptions::new("benchkill");
    let mut exited = Vec::new();
    let mut reaped = Vec::new();
    let mut processes = 0;
    for _ in 0..RUNS {
        let mut launcher = start_qemu_launcher(TempTree::new("bench-kill"), "benchkill", &[]);
        let mut watcher = launcher.client();
        watcher.ok("subscribe", Value::Null);
        let mut client = launcher.client();
        let synced = client.request_timeout("sync", json!({"vmi": guest_vmi(&opts)}), STEP);
        assert!(synced.get("return").is_some(), "{synced}");
        watcher.wait_event(STEP, "Started", lifecycle("Started", "Booted"));
        let tree = ProcessTree::of(&launcher, Some("e2e_benchkill"));
        assert_eq!(tree.qemu.len(), 1);
        processes = tree.size();
        let sent = Instant::now();
        launcher.signal("KILL");
        exited.push(tree.wait_gone(sent, STEP));
        launcher.wait_exit(STEP);
        reaped.push(tree.wait_reaped(sent, STEP));
    }
    let ms = |d: Vec<Duration>| {
        let (p50, _, max) = super::percentiles(d);
        (p50 / 1000.0, max / 1000.0)
    };
    let (exited_p50, exited_max) = ms(exited);
    let (reaped_p50, reaped_max) = ms(reaped);
    println!(
        "SIGKILL of the launcher -> last process of its tree gone ({processes} processes, guest running, {RUNS} runs, polled every 5 ms): \
         exited p50 {exited_p50:.0} ms, max {exited_max:.0} ms; reaped p50 {reaped_p50:.0} ms, max {reaped_max:.0} ms (by the host's init)   \
         [KubeVirt: left to the container runtime]"
    );
}
