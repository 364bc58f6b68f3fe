//! Backup and memory dump throughput on the test guest (real libvirt and
//! QEMU): a full and an incremental push backup of a changed block
//! tracking disk, in MiB/s of guest disk (the disk's size over the time
//! from `backup` sent to BACKUP_COMPLETED, and the changed bytes over it
//! for the incremental), beside `qemu-img convert` of the same disk (the
//! floor: a plain copy of the same bytes), and a memory dump's MiB/s of
//! guest memory (`memory-dump` sent -> MEMORY_DUMP_COMPLETED).

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use serde_json::{Value, json};

use super::common::guest::*;
use super::common::*;

/// The tracked disk's size.
const DISK_MIB: u64 = 512;
/// What the guest rewrites before the incremental backup.
const CHANGED_MIB: u64 = 32;

fn mib_per_s(mib: u64, seconds: f64) -> f64 {
    #[allow(clippy::cast_precision_loss)] // small sizes: exact
    let mib = mib as f64;
    mib / seconds
}

/// `backup` with `arguments`, until BACKUP_COMPLETED: seconds taken.
fn timed_backup(g: &mut Booted, arguments: Value) -> f64 {
    let t = Instant::now();
    let started = g.client.ok("backup", arguments);
    assert_eq!(started["phase"], "InProgress", "{started}");
    let ended = g.watcher.wait_event(STEP, "BACKUP_COMPLETED", |e| {
        e["event"] == "BACKUP_COMPLETED" || e["event"] == "BACKUP_FAILED"
    });
    assert_eq!(ended["event"], "BACKUP_COMPLETED", "{ended}");
    t.elapsed().as_secs_f64()
}

fn convert_seconds(from: &Path, to: &Path) -> f64 {
    let t = Instant::now();
    let out = Command::new("qemu-img")
        // -U: the guest has the disk open (its lock is shared for reads).
        .args(["convert", "-U", "-f", "raw", "-O", "qcow2"])
        .arg(from)
        .arg(to)
        .output()
        .expect("run qemu-img");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    t.elapsed().as_secs_f64()
}

pub fn backup() {
    println!("backup and memory dump (real QEMU, emulated; push backups to qcow2):");
    let tree = TempTree::new("bench-backup");
    // Random bytes throughout, written on the host: every cluster is data.
    let raw = tree.path("data.img");
    let filled = Command::new("dd")
        .args(["if=/dev/urandom", "bs=1M", "status=none"])
        .arg(format!("count={DISK_MIB}"))
        .arg(format!("of={}", raw.display()))
        .status()
        .unwrap();
    assert!(filled.success());
    let backups = tree.path("backups");
    fs::create_dir_all(&backups).unwrap();
    let mut opts = GuestOptions::new("benchbackup");
    opts.extra_volumes.push((
        json!({"name": "data", "disk": {"bus": "virtio"}, "changedBlockTracking": true}),
        json!({"name": "data", "hostDisk": {"path": raw, "type": "Disk"}}),
    ));
    let vmi = guest_vmi(&opts);
    let mut g = boot_vmi(TempTree::new("bench-backup-run"), &opts.name, vmi, &[]);

    // The floor: the same disk copied by qemu-img convert.
    let floor = convert_seconds(&raw, &tree.path("convert.qcow2"));
    let full = timed_backup(&mut g, json!({"target_dir": backups, "checkpoint": "full"}));
    let (code, _) = guest_sh(
        &mut g.client,
        &format!(
            "dd if=/dev/urandom of=/dev/vda bs=1M seek=64 count={CHANGED_MIB} oflag=direct conv=notrunc,fsync 2>/dev/null"
        ),
    );
    assert_eq!(code, 0);
    let inc = timed_backup(
        &mut g,
        json!({"target_dir": backups, "checkpoint": "inc", "incremental": "full"}),
    );
    println!(
        "  qemu-img convert of the {DISK_MIB} MiB disk (the floor): {:.0} MiB/s ({:.2} s)",
        mib_per_s(DISK_MIB, floor),
        floor
    );
    println!(
        "  full backup, backup -> BACKUP_COMPLETED: {:.0} MiB/s of guest disk ({:.2} s)",
        mib_per_s(DISK_MIB, full),
        full
    );
    println!(
        "  incremental backup of {CHANGED_MIB} MiB changed: {:.0} MiB/s of changed disk ({:.2} s; {:.0} MiB/s of the whole disk)",
        mib_per_s(CHANGED_MIB, inc),
        inc,
        mib_per_s(DISK_MIB, inc)
    );

    // A memory dump of the guest's 192 MiB.
    let dump = tree.path("bench.memory.dump");
    let t = Instant::now();
    let started = g.client.ok("memory-dump", json!({ "path": dump }));
    assert_eq!(started["phase"], "InProgress", "{started}");
    g.watcher.wait_event(
        STEP,
        "MEMORY_DUMP_COMPLETED",
        named("MEMORY_DUMP_COMPLETED"),
    );
    let seconds = t.elapsed().as_secs_f64();
    println!(
        "  memory dump, memory-dump -> MEMORY_DUMP_COMPLETED: {:.0} MiB/s of guest memory ({:.2} s for 192 MiB)",
        mib_per_s(192, seconds),
        seconds
    );
    let _ = g.client.ok("kill", Value::Null);
}
