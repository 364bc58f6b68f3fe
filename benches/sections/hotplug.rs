//! sync on a running guest (the test guest on real libvirt and QEMU):
//! re-sync of an unchanged VMI (the launcher's no-op path, which calls no
//! libvirt), and the time from a sync that plugs in a disk until the guest
//! sees it. KubeVirt's Go launcher takes 3.4–3.9 ms for an unchanged
//! SyncVMI (issue 12).

use std::fs;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::common::guest::*;
use super::common::*;

pub fn hotplug() {
    println!("sync of a running guest (real QEMU, emulated):");
    let opts = GuestOptions::new("benchhp");
    let base = guest_vmi(&opts);
    let mut g = boot(TempTree::new("bench-hotplug"), &opts, &[]);

    // Unchanged VMI, sent again and again on one connection: each reply
    // is the full round trip (encode, socket, parse, convert, compare).
    let request = format!(
        "{}\n",
        json!({"execute": "sync", "arguments": {"vmi": base}, "id": 1})
    );
    let mut samples = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let t = Instant::now();
        g.client.send_raw(request.as_bytes());
        let reply = g.client.read_reply(STEP);
        samples.push(t.elapsed());
        assert_eq!(reply["return"]["action"], "none", "{reply}");
    }
    samples.sort();
    let at = |p: usize| samples[(samples.len() - 1) * p / 100].as_secs_f64() * 1000.0;
    println!(
        "  re-sync of an unchanged running VMI: p50 {:.3} ms, p99 {:.3} ms (1000 syncs; target p50 <= 0.5 ms, KubeVirt 3.4-3.9 ms)",
        at(50),
        at(99)
    );

    // A disk plugged in: sync sent -> the guest lists it.
    let dir = g.launcher.tree.path("hotplug-disks");
    fs::create_dir_all(&dir).unwrap();
    let mut seen = Vec::new();
    for (round, bus) in ["scsi", "virtio", "scsi", "virtio"].iter().enumerate() {
        let name = format!("bench{round}");
        fs::File::create(dir.join(format!("{name}.img")))
            .and_then(|f| f.set_len(64 << 20))
            .unwrap();
        let mut plugged = base.clone();
        plugged["spec"]["domain"]["devices"]["disks"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": name, "disk": {"bus": bus}}));
        plugged["spec"]["volumes"]
            .as_array_mut()
            .unwrap()
            .push(json!({
                "name": name,
                "persistentVolumeClaim": {"claimName": name, "hotpluggable": true}
            }));
        let t = Instant::now();
        let reply = g
            .client
            .request_timeout("sync", json!({ "vmi": plugged }), STEP);
        let replied = t.elapsed();
        assert!(reply.get("return").is_some(), "{reply}");
        loop {
            let (_, out) = guest_sh(&mut g.client, "awk '$3 == 65536' /proc/partitions");
            if !out.trim().is_empty() {
                break;
            }
            assert!(t.elapsed() < STEP, "the guest never saw the {bus} disk");
            std::thread::sleep(Duration::from_millis(20));
        }
        seen.push((bus, replied, t.elapsed()));
        let reply = g
            .client
            .request_timeout("sync", json!({ "vmi": base }), STEP);
        assert!(reply.get("return").is_some(), "{reply}");
    }
    for (bus, replied, visible) in seen {
        println!(
            "  sync -> disk in the guest's /proc/partitions ({bus}): {:.0} ms (sync reply after {:.0} ms)",
            visible.as_secs_f64() * 1000.0,
            replied.as_secs_f64() * 1000.0
        );
    }
    let _ = g.client.ok("query-status", Value::Null);
}
