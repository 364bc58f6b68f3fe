//! Day-2 operations on the real test guest (real libvirt, real QEMU): the
//! QEMU version, the VM statistics, the dirty rate of a busy guest against
//! an idle one, a memory dump and a screenshot, checked against what the host's own
//! tools say (`qemu-system-x86_64 --version`, the ELF header, `virsh
//! screenshot`, Python's zlib); and changed block tracking backups, full
//! and incremental, push and pull, restored with `qemu-img` and compared
//! with the guest's disk, also after an aborted backup and after the
//! launcher was killed and a new one adopted the running guest; and the
//! persistent state of `--backend-storage-dir` (EFI variables the guest
//! writes, a persistent TPM's state) across a launcher restart and a
//! migration.

mod common;

use std::fs;
use std::process::Command;

use serde_json::{Value, json};

use common::guest::{
    BOOT, GuestOptions, REAL_GUEST, STEP, boot_vmi, guest_sh, guest_vmi, qemu_pids, wait_status,
};
use common::{Client, Launcher, Need, TempTree, named, require};

/// The guest's memory (tests/common/guest.rs gives it 192Mi).
const GUEST_MEMORY: u64 = 192 << 20;

fn uri_of(client: &mut Client) -> String {
    client.ok("query-status", Value::Null)["libvirt"]["uri"]
        .as_str()
        .unwrap()
        .to_string()
}

/// "QEMU 7.2.22" from "QEMU emulator version 7.2.22 (Debian ...)".
fn host_qemu_version() -> String {
    let out = Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .expect("run qemu-system-x86_64 --version");
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text
        .split_whitespace()
        .skip_while(|w| *w != "version")
        .nth(1)
        .unwrap_or_else(|| panic!("no version in {text}"));
    format!("QEMU {version}")
}

/// The dirty rate measured over `seconds`.
fn dirty_rate(client: &mut Client, seconds: u64) -> i64 {
    let reply = client.request_timeout("query-dirty-rate", json!({ "seconds": seconds }), STEP);
    eprintln!("query-dirty-rate: {reply}");
    reply["return"]["megabytes_per_second"]
        .as_i64()
        .unwrap_or_else(|| panic!("query-dirty-rate: {reply}"))
}

/// (width, height) of the image `virsh screenshot` saved: a PNG (libvirt
/// asks QEMU for one where QEMU can write it) or a binary PPM.
fn image_size(image: &[u8]) -> (u64, u64) {
    if image.starts_with(b"\x89PNG\r\n\x1a\n") {
        let word = |at: usize| u64::from(u32::from_be_bytes(image[at..at + 4].try_into().unwrap()));
        return (word(16), word(20));
    }
    let text = String::from_utf8_lossy(&image[..image.len().min(64)]).into_owned();
    let mut words = text.split_whitespace();
    assert_eq!(words.next(), Some("P6"), "neither PNG nor PPM: {text}");
    let width = words.next().unwrap().parse().unwrap();
    let height = words.next().unwrap().parse().unwrap();
    (width, height)
}

#[test]
fn version_vm_stats_dirty_rate_memory_dump_and_screenshot_of_the_test_guest() {
    if !require(REAL_GUEST) {
        return;
    }
    let opts = GuestOptions::new("daytwo");
    let mut vmi = guest_vmi(&opts);
    vmi["spec"]["domain"]["devices"]["autoattachGraphicsDevice"] = json!(true);
    let tree = TempTree::new("day2");
    let dumps = tree.path("dumps");
    fs::create_dir_all(&dumps).unwrap();
    let mut g = boot_vmi(TempTree::new("day2-run"), &opts.name, vmi, &[]);
    let client = &mut g.client;

    // The QEMU the daemon runs, as the host's binary says.
    assert_eq!(
        client.ok("query-qemu-version", Value::Null)["version"],
        json!(host_qemu_version())
    );

    // The VM statistics KubeVirt's GetVMStats collects: what the agent
    // says is the guest's (its name, OS, clock, vCPU), each with an age.
    let vm = client.ok("query-vm-stats", Value::Null);
    eprintln!("query-vm-stats: {vm}");
    assert!(vm["domain_stats"]["stats"]["cpu.time"].is_u64(), "{vm}");
    let agent = &vm["agent"];
    assert_eq!(
        agent["guest-get-host-name"]["return"]["host-name"],
        "daytwo"
    );
    assert_eq!(agent["guest-get-osinfo"]["return"]["id"], "tg-guest");
    assert_eq!(
        agent["guest-get-vcpus"]["return"].as_array().unwrap().len(),
        1
    );
    let host_ns = i128::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    )
    .unwrap();
    let guest_ns = i128::from(agent["guest-get-time"]["return"].as_i64().unwrap());
    assert!(
        (host_ns - guest_ns).abs() < 120_000_000_000,
        "guest clock {guest_ns}"
    );
    for (command, part) in agent.as_object().unwrap() {
        assert!(
            part["age_ms"].is_u64() || part["error"].is_string(),
            "{command}: {part}"
        );
    }

    // An idle guest, then one rewriting 64 MiB of tmpfs over and over,
    // with random bytes and zeros in turn (page sampling sees a page
    // dirty only when its contents change, and measures the share of a
    // sample of pages dirtied in the period: the busy guest dirties a
    // third of its memory each second).
    let idle = (0..2).map(|_| dirty_rate(client, 1)).min().unwrap();
    let (code, _) = guest_sh(
        client,
        "dd if=/dev/urandom of=/dev/shm/pattern bs=1M count=16 2>/dev/null && \
         (while :; do for at in 0 16 32 48; do \
         dd if=/dev/shm/pattern of=/dev/shm/dirty bs=1M seek=$at conv=notrunc 2>/dev/null; done; \
         dd if=/dev/zero of=/dev/shm/dirty bs=1M count=64 conv=notrunc 2>/dev/null; done) \
         </dev/null >/dev/null 2>&1 & echo $! >/dev/shm/writer.pid",
    );
    assert_eq!(code, 0);
    let busy = (0..3).map(|_| dirty_rate(client, 1)).max().unwrap();
    eprintln!("dirty rate: idle {idle} MB/s, busy {busy} MB/s");
    assert!(
        busy > idle,
        "a guest writing memory dirties it faster than an idle one: busy {busy} MB/s, idle {idle} MB/s"
    );
    guest_sh(
        client,
        "kill $(cat /dev/shm/writer.pid); rm -f /dev/shm/dirty /dev/shm/pattern",
    );

    // A memory dump, and a second one while it runs: sent together, so
    // the second reaches the launcher while the first is being written.
    let path = dumps.join("daytwo.memory.dump");
    let second = dumps.join("second.memory.dump");
    let line = |id: u64, p: &std::path::Path| {
        format!(
            "{}\n",
            json!({"execute": "memory-dump", "arguments": {"path": p}, "id": id})
        )
    };
    client.send_raw(format!("{}{}", line(901, &path), line(902, &second)).as_bytes());
    let first = client.read_reply(STEP);
    eprintln!("memory-dump: {first}");
    assert_eq!(first["id"], 901, "{first}");
    assert_eq!(first["return"]["phase"], "InProgress", "{first}");
    let refused = client.read_reply(STEP);
    eprintln!("memory-dump again: {refused}");
    assert_eq!(refused["id"], 902, "{refused}");
    assert_eq!(refused["error"]["class"], "InvalidState", "{refused}");
    let done = g.watcher.wait_event(
        STEP,
        "MEMORY_DUMP_COMPLETED",
        named("MEMORY_DUMP_COMPLETED"),
    );
    assert_eq!(done["data"]["path"], json!(path));
    let size = fs::metadata(&path).unwrap().len();
    assert_eq!(done["data"]["size_bytes"], json!(size));
    // The guest's RAM, as the ELF's loadable segments say: the ones
    // below the end of the guest's memory add up to it (less the legacy
    // VGA hole); the file is those segments, the display's video RAM and
    // the ELF headers and notes.
    let (ram, loaded) = elf_load_segments(&path, GUEST_MEMORY);
    assert!(
        (GUEST_MEMORY - (1 << 20)..=GUEST_MEMORY).contains(&ram),
        "{ram} bytes of RAM in the dump for {GUEST_MEMORY} bytes of guest memory"
    );
    assert!(
        (loaded..loaded + (1 << 20)).contains(&size),
        "a dump of {size} bytes for {loaded} bytes of segments"
    );
    eprintln!("dump: {done}");
    let header = fs::read(&path).unwrap()[..20].to_vec();
    assert_eq!(&header[..4], b"\x7fELF", "not an ELF file");
    // 64-bit, little-endian, a core file (e_type 4), for x86-64 (62).
    assert_eq!((header[4], header[5]), (2, 1));
    assert_eq!(u16::from_le_bytes([header[16], header[17]]), 4);
    assert_eq!(u16::from_le_bytes([header[18], header[19]]), 62);
    assert!(!second.exists());
    let status = client.ok("query-status", Value::Null);
    eprintln!("status after the dump: {status}");
    assert_eq!(status["memory_dump"]["phase"], "Completed", "{status}");
    assert_eq!(status["memory_dump"]["size_bytes"], json!(size));
    fs::remove_file(&path).unwrap();

    // A screenshot: a PNG of the size QEMU's own screendump has.
    let shot = client.ok("screenshot", Value::Null);
    eprintln!(
        "screenshot: mime {} {}x{} {} bytes, data starts {}",
        shot["mime"],
        shot["width"],
        shot["height"],
        shot["size_bytes"],
        &shot["data"].as_str().unwrap()[..40]
    );
    assert_eq!(shot["mime"], "image/png");
    let ppm_path = tree.path("virsh-screenshot");
    let uri = uri_of(client);
    let out = Command::new("virsh")
        .args(["-c", &uri, "screenshot", "e2e_daytwo"])
        .arg(&ppm_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "virsh screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (width, height) = image_size(&fs::read(&ppm_path).unwrap());
    assert_eq!(
        (shot["width"].clone(), shot["height"].clone()),
        (json!(width), json!(height))
    );
    // Python's zlib inflates it, and the pixels are the rows announced.
    let png_path = tree.path("shot.png");
    let png = decode_base64(shot["data"].as_str().unwrap());
    assert_eq!(shot["size_bytes"], json!(png.len()));
    fs::write(&png_path, &png).unwrap();
    let check = Command::new("python3")
        .arg("-c")
        .arg(
            "import struct, sys, zlib\n\
             d = open(sys.argv[1], 'rb').read()\n\
             assert d[:8] == b'\\x89PNG\\r\\n\\x1a\\n'\n\
             i, idat, size = 8, b'', None\n\
             while i < len(d):\n\
             \x20   n, t = struct.unpack('>I4s', d[i:i+8])\n\
             \x20   body = d[i+8:i+8+n]\n\
             \x20   assert zlib.crc32(d[i+4:i+8+n]) == struct.unpack('>I', d[i+8+n:i+12+n])[0], t\n\
             \x20   if t == b'IHDR': size = struct.unpack('>II', body[:8])\n\
             \x20   if t == b'IDAT': idat += body\n\
             \x20   i += 12 + n\n\
             w, h = size\n\
             raw = zlib.decompress(idat)\n\
             assert len(raw) == h * (1 + 3 * w), (len(raw), w, h)\n\
             print(w, h)\n",
        )
        .arg(&png_path)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "python3 could not decode the PNG: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&check.stdout).trim(),
        format!("{width} {height}")
    );
}

/// From an ELF64 core's program headers: the bytes of the loadable
/// segments that lie below `end` (guest-physical), and of all of them.
fn elf_load_segments(path: &std::path::Path, end: u64) -> (u64, u64) {
    let data = fs::read(path).unwrap();
    let u16_at = |at: usize| u64::from(u16::from_le_bytes(data[at..at + 2].try_into().unwrap()));
    let u64_at = |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().unwrap());
    let phoff = usize::try_from(u64_at(32)).unwrap();
    let (phentsize, phnum) = (u16_at(54), u16_at(56));
    assert!(phnum > 0 && phnum < 0xffff, "{phnum} program headers");
    let (mut below, mut all) = (0, 0);
    for n in 0..phnum {
        let at = phoff + usize::try_from(n * phentsize).unwrap();
        // PT_LOAD
        if u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) != 1 {
            continue;
        }
        let (paddr, filesz) = (u64_at(at + 24), u64_at(at + 32));
        all += filesz;
        if paddr + filesz <= end {
            below += filesz;
        }
    }
    (below, all)
}

fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let mut out = Vec::new();
    let (mut buffer, mut bits) = (0u32, 0);
    for c in text.bytes().filter(|c| *c != b'=') {
        buffer = (buffer << 6) | u32::from(value(c));
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from((buffer >> bits) & 0xff).unwrap());
        }
    }
    out
}

fn sha256(path: &std::path::Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

fn qemu_img(args: &[&str]) {
    let out = Command::new("qemu-img").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "qemu-img {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts a backup and waits for its end; the event's data.
fn backup(g: &mut common::guest::Booted, arguments: Value) -> Value {
    backup_on(&mut g.client, &mut g.watcher, arguments)
}

/// `backup` through a launcher's command client and subscribed watcher.
fn backup_on(client: &mut Client, watcher: &mut Client, arguments: Value) -> Value {
    let started = client.ok("backup", arguments.clone());
    eprintln!("backup {arguments}: {started}");
    assert_eq!(started["phase"], "InProgress", "{started}");
    let ended = watcher.wait_event(STEP, "BACKUP_COMPLETED", |e| {
        e["event"] == "BACKUP_COMPLETED" || e["event"] == "BACKUP_FAILED"
    });
    eprintln!("backup ended: {ended}");
    assert_eq!(ended["event"], "BACKUP_COMPLETED", "{ended}");
    ended["data"].clone()
}

/// Writes `mib` MiB of random bytes at `at_mib` MiB of the guest's
/// tracked disk (/dev/vda), past the guest's caches.
fn guest_write(client: &mut common::Client, at_mib: u64, mib: u64) {
    let (code, _) = guest_sh(
        client,
        &format!(
            "dd if=/dev/urandom of=/dev/vda bs=1M seek={at_mib} count={mib} oflag=direct conv=notrunc,fsync 2>/dev/null"
        ),
    );
    assert_eq!(code, 0);
}

#[test]
fn full_and_incremental_backups_of_a_changed_block_tracking_disk_restore_the_guest_disk() {
    if !require(REAL_GUEST) {
        return;
    }
    let tree = TempTree::new("backup");
    let raw = tree.path("data.img");
    fs::File::create(&raw).unwrap().set_len(64 << 20).unwrap();
    let backups = tree.path("backups");
    fs::create_dir_all(&backups).unwrap();
    let mut opts = GuestOptions::new("backup");
    opts.extra_volumes.push((
        json!({"name": "data", "disk": {"bus": "virtio"}, "changedBlockTracking": true}),
        json!({"name": "data", "hostDisk": {"path": raw, "type": "Disk"}}),
    ));
    let vmi = guest_vmi(&opts);
    let mut g = boot_vmi(TempTree::new("backup-run"), &opts.name, vmi, &[]);

    // The disk the guest sees is the raw file, under qcow2 metadata.
    let domain = g.client.ok("query-domain", json!({"fields": ["xml"]}));
    let xml = domain["xml"].as_str().unwrap();
    assert!(
        xml.contains("cbt/data.qcow2") && xml.contains("type='qcow2'"),
        "{xml}"
    );

    // Full, then two incrementals after writing known data.
    guest_write(&mut g.client, 0, 24);
    let full = backup(&mut g, json!({"target_dir": backups, "checkpoint": "c1"}));
    guest_write(&mut g.client, 8, 1);
    let inc1 = backup(
        &mut g,
        json!({"target_dir": backups, "checkpoint": "c2", "incremental": "c1"}),
    );
    guest_write(&mut g.client, 40, 1);
    let inc2 = backup(
        &mut g,
        json!({"target_dir": backups, "checkpoint": "c3", "incremental": "c2"}),
    );
    // The guest is idle: its disk now is its disk at checkpoint c3.
    let at_c3 = sha256(&raw);
    let file = |b: &Value| std::path::PathBuf::from(b["disks"][0]["file"].as_str().unwrap());
    let (full, inc1, inc2) = (file(&full), file(&inc1), file(&inc2));
    assert_eq!(full, backups.join("c1-data.qcow2"));
    let size = |p: &std::path::Path| fs::metadata(p).unwrap().len();
    eprintln!(
        "sizes: full {} inc1 {} inc2 {}",
        size(&full),
        size(&inc1),
        size(&inc2)
    );
    assert!(size(&inc1) < size(&full) / 4 && size(&inc2) < size(&full) / 4);
    // Restore: each incremental over the one before, then flatten.
    let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
    qemu_img(&["rebase", "-u", "-F", "qcow2", "-b", &s(&full), &s(&inc1)]);
    qemu_img(&["rebase", "-u", "-F", "qcow2", "-b", &s(&inc1), &s(&inc2)]);
    let restored = tree.path("restored.raw");
    qemu_img(&["convert", "-O", "raw", &s(&inc2), &s(&restored)]);
    assert_eq!(sha256(&restored), at_c3);
    // Without the incrementals it is not the disk at c3: they carry the
    // changes.
    let full_only = tree.path("full-only.raw");
    qemu_img(&["convert", "-O", "raw", &s(&full), &s(&full_only)]);
    assert_ne!(sha256(&full_only), at_c3);

    // An incremental since a checkpoint libvirt does not know is refused
    // as such, never taken as a full one.
    let refused = g.client.request(
        "backup",
        json!({"target_dir": backups, "checkpoint": "c9", "incremental": "nope"}),
    );
    eprintln!("incremental since nope: {refused}");
    assert_eq!(refused["error"]["class"], "InvalidArgument", "{refused}");
    assert!(
        refused["error"]["desc"]
            .as_str()
            .unwrap()
            .contains("invalid"),
        "{refused}"
    );
    assert!(!backups.join("c9-data.qcow2").exists());

    // libvirt forgets c3 (as after the domain is defined anew); the bitmap
    // stays in the image, and redefining c3 from its XML brings it back.
    let listed = g.client.ok("query-checkpoints", Value::Null);
    let names: Vec<&str> = listed["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c1", "c2", "c3"]);
    let c3_xml = listed["checkpoints"][2]["xml"]
        .as_str()
        .unwrap()
        .to_string();
    g.client.ok(
        "delete-checkpoint",
        json!({"name": "c3", "metadata_only": true}),
    );
    let redefined = g
        .client
        .ok("redefine-checkpoint", json!({"name": "c3", "xml": c3_xml}));
    assert_eq!(redefined, json!({"checkpoint": "c3", "valid": true}));
    // A checkpoint whose bitmap no image has is said to be invalid.
    let ghost = g.client.ok("redefine-checkpoint", json!({"name": "ghost"}));
    eprintln!("redefine ghost: {ghost}");
    assert_eq!(ghost["valid"], false, "{ghost}");

    // Pull mode: the disk over NBD on a unix socket, readable with
    // qemu-img convert, until backup-abort ends the export.
    guest_write(&mut g.client, 16, 1);
    let at_c4 = sha256(&raw);
    let socket = tree.path("nbd.sock");
    let pulled = g.client.ok(
        "backup",
        json!({"mode": "pull", "socket": socket, "checkpoint": "c4", "incremental": "c3"}),
    );
    eprintln!("pull backup: {pulled}");
    assert_eq!(pulled["disks"][0]["export"], "data");
    let copy = tree.path("pulled.raw");
    let nbd = format!("nbd+unix:///data?socket={}", socket.display());
    qemu_img(&["convert", "-f", "raw", "-O", "raw", &nbd, &s(&copy)]);
    assert_eq!(sha256(&copy), at_c4);
    g.client.ok("backup-abort", Value::Null);
    let ended = g
        .watcher
        .wait_event(STEP, "BACKUP_COMPLETED", named("BACKUP_COMPLETED"));
    assert_eq!(ended["data"]["mode"], "pull", "{ended}");
    assert!(
        !socket.exists(),
        "the NBD socket is gone once the backup ended"
    );

    // The next incremental since the pull's checkpoint works.
    guest_write(&mut g.client, 48, 1);
    let inc5 = backup(
        &mut g,
        json!({"target_dir": backups, "checkpoint": "c5", "incremental": "c4", "format": "raw"}),
    );
    assert_eq!(inc5["disks"][0]["file"], json!(backups.join("c5-data.raw")));
    let status = g.client.ok("query-status", Value::Null);
    assert_eq!(status["backup"]["checkpoint"], "c5", "{status}");
    assert_eq!(status["backup"]["phase"], "Completed", "{status}");
}

/// The host daemon's domain, destroyed and undefined when the test ends
/// (a launcher killed by the test leaves it running).
struct HostDomain(String);

impl Drop for HostDomain {
    fn drop(&mut self) {
        for action in ["destroy", "undefine"] {
            let _ = Command::new("virsh")
                .args(["-c", "qemu:///system", action, &self.0])
                .output();
        }
    }
}

/// `qemu-img convert` of `full` with `incrementals` rebased over it in
/// turn: the disk as the last one saw it.
fn restore(full: &std::path::Path, incrementals: &[&std::path::Path], to: &std::path::Path) {
    let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let mut base = full;
    for inc in incrementals {
        qemu_img(&["rebase", "-u", "-F", "qcow2", "-b", &s(base), &s(inc)]);
        base = inc;
    }
    qemu_img(&["convert", "-O", "raw", &s(base), &s(to)]);
}

#[test]
fn an_aborted_backup_and_a_restarted_launcher_leave_the_next_incremental_working() {
    if !require(&[Need::Root, Need::Qemu, Need::TestGuest, Need::HostLibvirtd]) {
        return;
    }
    // On the host's daemon, so that a killed launcher leaves the guest
    // running for the next one to adopt.
    let name = format!("bkabort{}", std::process::id());
    let domain = format!("e2e_{name}");
    let _cleanup = HostDomain(domain.clone());
    let tree = TempTree::new("backup-abort");
    // A disk full of random bytes, written on the host: a full backup of
    // it takes long enough to be aborted while it runs.
    let raw = tree.path("data.img");
    let filled = Command::new("dd")
        .args(["if=/dev/urandom", "bs=1M", "count=384", "status=none"])
        .arg(format!("of={}", raw.display()))
        .status()
        .unwrap();
    assert!(filled.success());
    let backups = tree.path("backups");
    fs::create_dir_all(&backups).unwrap();
    let mut opts = GuestOptions::new(&name);
    opts.extra_volumes.push((
        json!({"name": "data", "disk": {"bus": "virtio"}, "changedBlockTracking": true}),
        json!({"name": "data", "hostDisk": {"path": raw, "type": "Disk"}}),
    ));
    let args = [
        "--connect",
        "qemu:///system",
        "--force-emulation",
        "--name",
        &name,
        "--namespace",
        "e2e",
        "--uid",
        "a1d0b7e5-0000-4000-8000-00000000bac0",
    ]
    .map(String::from);
    let mut first = Launcher::start_in(TempTree::new("backup-abort-run"), &args);
    first.wait_ready(STEP);
    let mut watcher = first.client();
    watcher.ok("subscribe", Value::Null);
    let mut client = first.client();
    let synced = client.request_timeout("sync", json!({"vmi": guest_vmi(&opts)}), STEP);
    assert!(synced.get("return").is_some(), "sync failed: {synced}");
    watcher.wait_event(BOOT, "AGENT_CONNECTED", named("AGENT_CONNECTED"));

    let file = |b: &Value| std::path::PathBuf::from(b["disks"][0]["file"].as_str().unwrap());
    let size = |p: &std::path::Path| fs::metadata(p).unwrap().len();
    let full = file(&backup_on(
        &mut client,
        &mut watcher,
        json!({"target_dir": backups, "checkpoint": "c1"}),
    ));

    // A second full backup, aborted while it copies. libvirt's abort is
    // best effort: one that reaches QEMU once the copy is done lets the
    // backup complete (seen when the disk sat in the page cache), so a
    // backup that completed anyway is tried again, under a new name.
    let mut ended = Value::Null;
    for checkpoint in ["c2", "c2b", "c2c"] {
        guest_write(&mut client, 8, 1);
        let started = client.ok(
            "backup",
            json!({"target_dir": backups, "checkpoint": checkpoint}),
        );
        assert_eq!(started["phase"], "InProgress", "{started}");
        let abort = client.request("backup-abort", Value::Null);
        ended = watcher.wait_event(STEP, "BACKUP_FAILED", |e| {
            e["event"] == "BACKUP_COMPLETED" || e["event"] == "BACKUP_FAILED"
        });
        eprintln!("aborted backup: {abort} then {ended}");
        if ended["event"] == "BACKUP_FAILED" {
            assert!(abort.get("return").is_some(), "{abort}");
            break;
        }
    }
    assert_eq!(ended["event"], "BACKUP_FAILED", "{ended}");
    assert_eq!(ended["data"]["phase"], "Aborted", "{ended}");
    // The guest runs on, and answers.
    let status = client.ok("query-status", Value::Null);
    assert_eq!(status["domain"]["state"], "Running", "{status}");
    assert_eq!(status["backup"]["phase"], "Aborted", "{status}");
    let (code, out) = guest_sh(&mut client, "echo alive");
    assert_eq!((code, out.trim()), (0, "alive"));

    // The next incremental, since the last completed backup, carries
    // what changed since it.
    guest_write(&mut client, 16, 1);
    let inc3 = file(&backup_on(
        &mut client,
        &mut watcher,
        json!({"target_dir": backups, "checkpoint": "c3", "incremental": "c1"}),
    ));
    let at_c3 = sha256(&raw);
    let restored = tree.path("restored-c3.raw");
    restore(&full, &[&inc3], &restored);
    assert_eq!(sha256(&restored), at_c3);
    assert!(
        size(&inc3) < size(&full) / 4,
        "{} of {}",
        size(&inc3),
        size(&full)
    );

    // The launcher is killed; the guest keeps running and the next
    // launcher on the same directories adopts it.
    first.signal("KILL");
    assert_eq!(first.wait_exit(STEP), -1);
    let qemu = qemu_pids(&domain);
    assert_eq!(qemu.len(), 1, "the guest did not keep running: {qemu:?}");
    let run_tree = std::mem::replace(&mut first.tree, TempTree::new("backup-abort-gone"));
    let mut second = Launcher::start_in(run_tree, &args);
    second.wait_ready(STEP);
    let mut watcher = second.client();
    watcher.ok("subscribe", Value::Null);
    let mut client = second.client();
    let status = wait_status(&mut client, STEP, "the adopted guest's agent", |s| {
        s["domain"]["state"] == "Running" && s["agent"]["connected"] == true
    });
    // It knows the last backup, and libvirt its checkpoints.
    assert_eq!(status["backup"]["checkpoint"], "c3", "{status}");
    assert_eq!(status["backup"]["phase"], "Completed", "{status}");
    let listed = client.ok("query-checkpoints", Value::Null);
    let names: Vec<&str> = listed["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"c3"), "{listed}");

    // The next incremental is one: small, and over the others it gives
    // the disk as it is now.
    guest_write(&mut client, 40, 1);
    let inc4 = file(&backup_on(
        &mut client,
        &mut watcher,
        json!({"target_dir": backups, "checkpoint": "c4", "incremental": "c3"}),
    ));
    let at_c4 = sha256(&raw);
    assert!(
        size(&inc4) < size(&full) / 4,
        "{} of {}",
        size(&inc4),
        size(&full)
    );
    let restored = tree.path("restored-c4.raw");
    restore(&full, &[&inc3, &inc4], &restored);
    assert_eq!(sha256(&restored), at_c4);
    assert_eq!(qemu_pids(&domain), qemu);
    client.ok("kill", Value::Null);
}

/// Live-migrates the running guest `a` (the VMI `vmi`) into a new
/// launcher in `tree` whose `--backend-storage-dir` is `backend`; returns
/// that launcher once the migration is finalized and its agent connected
/// (`a` has exited 0).
fn migrate_to_a_new_launcher(
    a: common::guest::Booted,
    vmi: &Value,
    tree: TempTree,
    name: &str,
    backend: &std::path::Path,
) -> common::guest::Booted {
    let mut a = a;
    let b = common::guest::start_qemu_launcher(
        tree,
        name,
        &["--backend-storage-dir", backend.to_str().unwrap()],
    );
    let mut b_watch = b.client();
    b_watch.ok("subscribe", Value::Null);
    let mut b_client = b.client();
    let ret = b_client.request_timeout("prepare-migration-target", json!({"vmi": vmi}), STEP);
    let target = ret["return"]["target"].clone();
    assert!(target.is_object(), "prepare-migration-target failed: {ret}");
    let started = a.client.ok("migrate", json!({"target": target}));
    assert_eq!(started["started"], true);
    a.watcher.wait_events(
        STEP * 2,
        &[
            ("MIGRATION_COMPLETED", &named("MIGRATION_COMPLETED")),
            (
                "Stopped/Migrated",
                &common::lifecycle("Stopped", "Migrated"),
            ),
        ],
    );
    assert_eq!(a.launcher.wait_exit(STEP), 0);
    b_watch.wait_event(
        STEP,
        "target MIGRATION_COMPLETED",
        named("MIGRATION_COMPLETED"),
    );
    assert_eq!(
        b_client.ok("finalize-migration", Value::Null)["finalized"],
        true
    );
    wait_status(&mut b_client, STEP, "agent on B", |s| {
        s["agent"]["connected"] == true
    });
    common::guest::Booted {
        launcher: b,
        client: b_client,
        watcher: b_watch,
        booted_at: std::time::Instant::now(),
    }
}

/// An EFI variable of this test's own (its GUID is random), as efivarfs
/// names it.
const TEST_EFI_VARIABLE: &str = "VlPersist-4f1c2b7e-9a3d-4e5f-8b6a-0c1d2e3f4a5b";

/// Boots `vmi` (EFI under emulation: slower than the BIOS boots of
/// `boot_vmi`) on a new launcher in `tree`, with `--backend-storage-dir`.
fn boot_efi(tree: TempTree, vmi: &Value, backend: &std::path::Path) -> common::guest::Booted {
    let name = vmi["metadata"]["name"].as_str().unwrap_or_default();
    let launcher = common::guest::start_qemu_launcher(
        tree,
        name,
        &["--backend-storage-dir", backend.to_str().unwrap()],
    );
    let mut watcher = launcher.client();
    watcher.ok("subscribe", Value::Null);
    let mut client = launcher.client();
    let synced = client.request_timeout("sync", json!({ "vmi": vmi }), STEP);
    assert!(synced.get("return").is_some(), "sync failed: {synced}");
    let booted_at = std::time::Instant::now();
    watcher.wait_event(STEP, "Started", common::lifecycle("Started", "Booted"));
    watcher.wait_event(BOOT * 3, "AGENT_CONNECTED", named("AGENT_CONNECTED"));
    common::guest::Booted {
        launcher,
        client,
        watcher,
        booted_at,
    }
}

/// The launcher stops the guest gracefully (SIGTERM: ACPI power off) and
/// exits.
fn stop_gracefully(mut g: common::guest::Booted, domain: &str) {
    g.launcher.signal("TERM");
    g.watcher
        .wait_event(STEP, "Stopped", common::lifecycle("Stopped", "Shutdown"));
    assert_eq!(g.launcher.wait_exit(STEP), 0);
    common::guest::wait_no_qemu(domain, std::time::Duration::from_secs(10));
}

/// `efi.persistent` and `tpm.persistent` with `--backend-storage-dir`: an
/// EFI variable the guest writes is there again when a new launcher, with
/// a private dir of its own, boots the same VMI after a graceful stop; the
/// TPM's state is kept in the directory and reused (no new endorsement
/// key certificate is made for it).
#[test]
fn efi_variables_and_tpm_state_outlive_the_launcher_in_the_backend_storage_dir() {
    if !require(REAL_GUEST) {
        return;
    }
    let state_tree = TempTree::new("d2-state");
    let backend = state_tree.path("vm-state");
    let mut vmi = guest_vmi(&GuestOptions::new("persist"));
    // The test kernel is not signed for Secure Boot.
    vmi["spec"]["domain"]["firmware"]["bootloader"] =
        json!({"efi": {"secureBoot": false, "persistent": true}});
    vmi["spec"]["domain"]["devices"]["tpm"] = json!({"persistent": true});
    let mark = format!("marker-{}", std::process::id());
    let efivars = "/sys/firmware/efi/efivars";
    let mount_efivarfs = format!(
        "[ -d /sys/firmware/efi ] || {{ echo not an EFI guest; exit 2; }}; \
         modprobe efivarfs 2>/dev/null; \
         grep -q efivarfs /proc/mounts || mount -t efivarfs efivarfs {efivars} || exit 3"
    );

    let mut g = boot_efi(TempTree::new("d2-persist-a"), &vmi, &backend);
    let spec = g.client.ok("query-domain", Value::Null)["spec"].clone();
    let nvram = backend.join("nvram/persist_VARS.fd");
    assert_eq!(
        spec["os"]["nvram"]["$text"].as_str(),
        nvram.to_str(),
        "{spec}"
    );
    // Attributes NV | BS | RT (7, little-endian u32), then the data.
    let (code, out) = guest_sh(
        &mut g.client,
        &format!(
            "{mount_efivarfs} && printf '\\007\\000\\000\\000{mark}' > {efivars}/{TEST_EFI_VARIABLE} \
             && tail -c +5 {efivars}/{TEST_EFI_VARIABLE}"
        ),
    );
    assert_eq!((code, out.as_str()), (0, mark.as_str()), "{out}");
    let (code, out) = guest_sh(&mut g.client, "ls /dev/tpm0");
    assert_eq!(code, 0, "the guest has no TPM: {out}");
    let uuid = spec["uuid"].as_str().unwrap_or_default().to_string();
    stop_gracefully(g, "e2e_persist");

    // The variable is in the store the launcher left in the directory.
    let store = fs::read(&nvram).unwrap_or_else(|e| panic!("{}: {e}", nvram.display()));
    assert!(
        store.windows(mark.len()).any(|w| w == mark.as_bytes()),
        "{} does not hold the variable",
        nvram.display()
    );
    let tpm_state = backend
        .join("swtpm")
        .join(&uuid)
        .join("tpm2/tpm2-00.permall");
    assert!(
        tpm_state.is_file(),
        "no TPM state at {}",
        tpm_state.display()
    );
    // swtpm_localca counts the certificates it signs: the TPM made at the
    // first start got its endorsement key and platform certificates.
    let serial = backend.join("swtpm-localca/certserial");
    let serial_before = fs::read_to_string(&serial).unwrap_or_default();
    assert!(
        !serial_before.trim().is_empty(),
        "no certificate authority state at {}",
        serial.display()
    );

    // A new launcher, a new private dir: only the backend dir is shared.
    let mut again = boot_efi(TempTree::new("d2-persist-b"), &vmi, &backend);
    let (code, out) = guest_sh(
        &mut again.client,
        &format!("{mount_efivarfs} && tail -c +5 {efivars}/{TEST_EFI_VARIABLE}"),
    );
    assert_eq!(
        (code, out.as_str()),
        (0, mark.as_str()),
        "the EFI variable did not survive the restart: {out}"
    );
    let (code, out) = guest_sh(&mut again.client, "ls /dev/tpm0");
    assert_eq!(code, 0, "the guest has no TPM after the restart: {out}");
    assert!(tpm_state.is_file());
    assert_eq!(
        fs::read_to_string(&serial).unwrap_or_default(),
        serial_before,
        "a new TPM was made at the second start (its state was not reused)"
    );
    again.client.ok("kill", Value::Null);
    assert_eq!(again.launcher.wait_exit(STEP), 0);
}

/// A migration between two launchers given the same `--backend-storage-dir`
/// (shared storage, as KubeVirt's RWX backend-storage PVC): the EFI
/// variables written before the migration and after it, on the target, are
/// both in the store a third launcher boots from.
#[test]
fn persistent_efi_variables_follow_a_migration_on_a_shared_backend_storage_dir() {
    if !require(REAL_GUEST) {
        return;
    }
    let state_tree = TempTree::new("d2-mstate");
    let backend = state_tree.path("vm-state");
    let mut vmi = guest_vmi(&GuestOptions::new("efimover"));
    vmi["spec"]["domain"]["firmware"]["bootloader"] =
        json!({"efi": {"secureBoot": false, "persistent": true}});
    let efivars = "/sys/firmware/efi/efivars";
    let mount_efivarfs = format!(
        "[ -d /sys/firmware/efi ] || {{ echo not an EFI guest; exit 2; }}; \
         modprobe efivarfs 2>/dev/null; \
         grep -q efivarfs /proc/mounts || mount -t efivarfs efivarfs {efivars} || exit 3"
    );
    let variable = |n: u32| TEST_EFI_VARIABLE.replacen("VlPersist", &format!("VlMoved{n}"), 1);
    let write = |client: &mut Client, n: u32, mark: &str| {
        let (code, out) = guest_sh(
            client,
            &format!(
                "{mount_efivarfs} && printf '\\007\\000\\000\\000{mark}' > {efivars}/{v}",
                v = variable(n)
            ),
        );
        assert_eq!(code, 0, "{out}");
    };
    let read = |client: &mut Client, n: u32| {
        guest_sh(
            client,
            &format!(
                "{mount_efivarfs} && tail -c +5 {efivars}/{v}",
                v = variable(n)
            ),
        )
    };
    let before = format!("before-{}", std::process::id());
    let after = format!("after-{}", std::process::id());

    let mut a = boot_efi(TempTree::new("d2-mig-a"), &vmi, &backend);
    write(&mut a.client, 1, &before);

    let mut b = migrate_to_a_new_launcher(a, &vmi, TempTree::new("d2-mig-b"), "efimover", &backend);
    // The same guest on B: the variable is there, and B's QEMU writes the
    // store.
    assert_eq!(read(&mut b.client, 1), (0, before.clone()));
    write(&mut b.client, 2, &after);
    stop_gracefully(b, "e2e_efimover");

    let mut c = boot_efi(TempTree::new("d2-mig-c"), &vmi, &backend);
    assert_eq!(
        read(&mut c.client, 1),
        (0, before),
        "the variable written before the migration is lost"
    );
    assert_eq!(
        read(&mut c.client, 2),
        (0, after),
        "the variable written on the migration's target is lost"
    );
    c.client.ok("kill", Value::Null);
    assert_eq!(c.launcher.wait_exit(STEP), 0);
}

/// `bytes` as octal escapes for the guest's `printf`.
fn printf_escapes(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("\\{b:03o}")).collect()
}

/// Sends the raw TPM 2.0 command `command` to the guest's `/dev/tpm0`
/// (one write, then the response read from the same open file, as the
/// kernel's TPM device wants) and gives the response's bytes.
fn tpm_command(client: &mut Client, command: &[u8]) -> Vec<u8> {
    let script = format!(
        "printf '{}' > /tmp/tpm-cmd && exec 3<>/dev/tpm0 && \
         dd if=/tmp/tpm-cmd bs=4096 count=1 >&3 2>/dev/null && \
         dd bs=4096 count=1 <&3 2>/dev/null | od -An -tx1 -v",
        printf_escapes(command)
    );
    let (code, out) = guest_sh(client, &script);
    assert_eq!(code, 0, "the TPM command failed: {out}");
    out.split_whitespace()
        .map(|h| u8::from_str_radix(h, 16).unwrap_or_else(|e| panic!("{h}: {e} in {out}")))
        .collect()
}

/// The response code of a TPM 2.0 response (0: success).
fn tpm_rc(response: &[u8]) -> u32 {
    assert!(response.len() >= 10, "short TPM response {response:02x?}");
    u32::from_be_bytes(response[6..10].try_into().unwrap())
}

/// A TPM 2.0 command: `tag`, the size, `code`, then `body`.
fn tpm_build(tag: u16, code: u32, body: &[u8]) -> Vec<u8> {
    let mut c = tag.to_be_bytes().to_vec();
    let size = u32::try_from(10 + body.len()).expect("a small TPM command");
    c.extend_from_slice(&size.to_be_bytes());
    c.extend_from_slice(&code.to_be_bytes());
    c.extend_from_slice(body);
    c
}

/// The authorization area of one password session with an empty password
/// (TPM_RS_PW), as a command's handle needs it.
const TPM_PASSWORD_SESSION: [u8; 13] = [0, 0, 0, 9, 0x40, 0, 0, 9, 0, 0, 1, 0, 0];

/// The NV index this test defines in the guest's TPM (an owner index).
const TEST_NV_INDEX: [u8; 4] = [0x01, 0x50, 0x00, 0x17];

/// TPM2_NV_DefineSpace of `TEST_NV_INDEX` (8 bytes, owner and auth
/// read/write) under the owner hierarchy: permanent state, in the
/// TPM's NV storage (swtpm's `tpm2-00.permall`).
fn tpm_define_test_index(client: &mut Client) -> u32 {
    let mut body = vec![0x40, 0, 0, 1]; // TPM_RH_OWNER
    body.extend_from_slice(&TPM_PASSWORD_SESSION);
    body.extend_from_slice(&[0, 0]); // auth: empty
    body.extend_from_slice(&[0, 14]); // TPM2B_NV_PUBLIC's size
    body.extend_from_slice(&TEST_NV_INDEX);
    body.extend_from_slice(&[0, 0x0b]); // sha256
    body.extend_from_slice(&0x0006_0006u32.to_be_bytes()); // OWNER|AUTH READ|WRITE
    body.extend_from_slice(&[0, 0]); // no policy
    body.extend_from_slice(&[0, 8]); // data size
    tpm_rc(&tpm_command(client, &tpm_build(0x8002, 0x12a, &body)))
}

/// Whether the guest's TPM lists `TEST_NV_INDEX` (TPM2_GetCapability of
/// the NV index handles).
fn tpm_has_test_index(client: &mut Client) -> bool {
    let mut body = 1u32.to_be_bytes().to_vec(); // TPM_CAP_HANDLES
    body.extend_from_slice(&0x0100_0000u32.to_be_bytes()); // NV indices
    body.extend_from_slice(&64u32.to_be_bytes());
    let response = tpm_command(client, &tpm_build(0x8001, 0x17a, &body));
    assert_eq!(tpm_rc(&response), 0, "{response:02x?}");
    response.windows(4).skip(19).any(|w| w == TEST_NV_INDEX)
}

/// TPM2_PCR_Extend of PCR 16 with a SHA-256 digest of `byte`s: volatile
/// state, which only a live migration of the TPM carries.
fn tpm_extend_pcr16(client: &mut Client, byte: u8) -> u32 {
    let mut body = 16u32.to_be_bytes().to_vec();
    body.extend_from_slice(&TPM_PASSWORD_SESSION);
    body.extend_from_slice(&1u32.to_be_bytes()); // one digest
    body.extend_from_slice(&[0, 0x0b]); // sha256
    body.extend_from_slice(&[byte; 32]);
    tpm_rc(&tpm_command(client, &tpm_build(0x8002, 0x182, &body)))
}

/// PCR 16's SHA-256 value as the guest's kernel shows it.
fn pcr16(client: &mut Client) -> String {
    let (code, out) = guest_sh(client, "cat /sys/class/tpm/tpm0/pcr-sha256/16");
    assert_eq!(code, 0, "{out}");
    out.trim().to_string()
}

/// A migration between two launchers with backend-storage directories of
/// their own (no shared storage: KubeVirt's RWO backend-storage PVC, a
/// new one for the target): a persistent TPM migrates in-band (QEMU's
/// tpm-emulator migration), its volatile state (a PCR extended before)
/// and its permanent state (an NV index defined before) are the target's,
/// the latter in the target's directory (`swtpm/<uuid>/`), where a third
/// launcher finds it; the EFI variables reach the target's
/// `nvram/<name>_VARS.fd` (QEMU's pflash writes the migrated flash to the
/// target's file).
#[test]
fn persistent_tpm_and_efi_variables_follow_a_migration_to_a_backend_storage_dir_of_its_own() {
    if !require(REAL_GUEST) {
        return;
    }
    let state_tree = TempTree::new("d2-tstate");
    let backend_a = state_tree.path("vm-state-a");
    let backend_b = state_tree.path("vm-state-b");
    let mut vmi = guest_vmi(&GuestOptions::new("tpmmover"));
    vmi["spec"]["domain"]["firmware"]["bootloader"] =
        json!({"efi": {"secureBoot": false, "persistent": true}});
    vmi["spec"]["domain"]["devices"]["tpm"] = json!({"persistent": true});
    let efivars = "/sys/firmware/efi/efivars";
    let mount_efivarfs = format!(
        "[ -d /sys/firmware/efi ] || {{ echo not an EFI guest; exit 2; }}; \
         modprobe efivarfs 2>/dev/null; \
         grep -q efivarfs /proc/mounts || mount -t efivarfs efivarfs {efivars} || exit 3"
    );
    let variable = TEST_EFI_VARIABLE.replacen("VlPersist", "VlTpmMoved", 1);
    let mark = format!("tpm-before-{}", std::process::id());

    let mut a = boot_efi(TempTree::new("d2-tmig-a"), &vmi, &backend_a);
    let uuid = a.client.ok("query-domain", Value::Null)["spec"]["uuid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (code, out) = guest_sh(
        &mut a.client,
        &format!("{mount_efivarfs} && printf '\\007\\000\\000\\000{mark}' > {efivars}/{variable}"),
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(tpm_define_test_index(&mut a.client), 0, "NV_DefineSpace");
    assert!(tpm_has_test_index(&mut a.client));
    let zero = pcr16(&mut a.client);
    assert_eq!(tpm_extend_pcr16(&mut a.client, 0x5a), 0, "PCR_Extend");
    let extended = pcr16(&mut a.client);
    assert_ne!(extended, zero, "PCR 16 did not change");

    let mut b =
        migrate_to_a_new_launcher(a, &vmi, TempTree::new("d2-tmig-b"), "tpmmover", &backend_b);
    // The TPM on B is the same TPM, in the state it had on A.
    assert_eq!(
        pcr16(&mut b.client),
        extended,
        "the TPM's volatile state (PCR 16) did not migrate"
    );
    assert!(
        tpm_has_test_index(&mut b.client),
        "the TPM's NV index did not migrate"
    );
    // The EFI variable store is in B's directory, with the variable.
    let nvram_b = backend_b.join("nvram/tpmmover_VARS.fd");
    let store = fs::read(&nvram_b).unwrap_or_else(|e| panic!("{}: {e}", nvram_b.display()));
    assert!(
        store.windows(mark.len()).any(|w| w == mark.as_bytes()),
        "{} does not hold the variable written before the migration",
        nvram_b.display()
    );
    stop_gracefully(b, "e2e_tpmmover");
    let tpm_state = backend_b
        .join("swtpm")
        .join(&uuid)
        .join("tpm2/tpm2-00.permall");
    assert!(
        tpm_state.is_file(),
        "no TPM state at {}",
        tpm_state.display()
    );

    // A new launcher on B's directory boots the same TPM and variables.
    let mut c = boot_efi(TempTree::new("d2-tmig-c"), &vmi, &backend_b);
    assert!(
        tpm_has_test_index(&mut c.client),
        "the TPM state in the target's directory is not the migrated TPM's"
    );
    assert_eq!(
        guest_sh(
            &mut c.client,
            &format!("{mount_efivarfs} && tail -c +5 {efivars}/{variable}")
        ),
        (0, mark),
        "the EFI variable is lost"
    );
    c.client.ok("kill", Value::Null);
    assert_eq!(c.launcher.wait_exit(STEP), 0);
}

/// A loop device over a file, seen by the launcher as a block PVC
/// (`/dev/<name>`, as virt-handler leaves one in the pod); both go when
/// dropped.
struct BlockPvc {
    name: String,
    loop_device: String,
    backing: std::path::PathBuf,
}

impl BlockPvc {
    fn new(tree: &TempTree, name: &str, mib: u64) -> BlockPvc {
        let backing = tree.path(&format!("{name}.img"));
        fs::File::create(&backing)
            .unwrap()
            .set_len(mib << 20)
            .unwrap();
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&backing)
            .output()
            .expect("run losetup");
        assert!(
            out.status.success(),
            "losetup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let loop_device = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let name = format!("{name}{}", std::process::id());
        let link = format!("/dev/{name}");
        let _ = fs::remove_file(&link);
        std::os::unix::fs::symlink(&loop_device, &link).expect("link the PVC's device");
        BlockPvc {
            name,
            loop_device,
            backing,
        }
    }
}

impl Drop for BlockPvc {
    fn drop(&mut self) {
        let _ = fs::remove_file(format!("/dev/{}", self.name));
        let _ = Command::new("losetup")
            .args(["--detach", &self.loop_device])
            .status();
    }
}

/// Changed block tracking of a block PVC: its qcow2 metadata image names
/// the device as its `<dataStore>` where libvirt has it (10.10: the newer
/// stack), and a full and an incremental backup restore the device's
/// bytes; an older libvirt gets the sync refused with the version.
#[test]
fn a_tracked_block_device_is_the_data_store_of_its_metadata_image_where_libvirt_has_it() {
    if !require(REAL_GUEST) || !require(&[Need::Program("losetup")]) {
        return;
    }
    let tree = TempTree::new("cbt-block");
    let pvc = BlockPvc::new(&tree, "vlcbt", 64);
    let backups = tree.path("backups");
    fs::create_dir_all(&backups).unwrap();
    let mut opts = GuestOptions::new("cbtblock");
    opts.extra_volumes.push((
        json!({"name": pvc.name, "disk": {"bus": "virtio"}, "changedBlockTracking": true}),
        json!({"name": pvc.name, "persistentVolumeClaim": {"claimName": pvc.name}}),
    ));
    let vmi = guest_vmi(&opts);
    let launcher =
        common::guest::start_qemu_launcher(TempTree::new("cbt-block-run"), &opts.name, &[]);
    let mut client = launcher.client();
    let daemon = client.ok("query-version", Value::Null)["libvirt"]["daemon"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let version = virt_launcher::hypervisor::state::parse_libvirt_version(&daemon)
        .unwrap_or_else(|| panic!("the daemon's version {daemon:?} does not read"));
    eprintln!("libvirt {daemon}");
    if version < 10_010_000 {
        let (class, desc) = client.err_class("sync", json!({ "vmi": vmi }));
        assert_eq!(class, "InvalidArgument", "{desc}");
        assert!(
            desc.contains("spec.domain.devices.disks[0].changedBlockTracking")
                && desc.contains("needs libvirt 10.10.0 or newer")
                && desc.contains(&daemon),
            "{desc}"
        );
        return;
    }
    let mut g = common::guest::boot_launcher(launcher, vmi);
    let xml = g.client.ok("query-domain", json!({"fields": ["xml"]}))["xml"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let device = format!("/dev/{}", pvc.name);
    assert!(
        xml.contains("cbt/") && xml.contains("<dataStore type='block'>"),
        "{xml}"
    );
    assert!(xml.contains(&format!("<source dev='{device}'")), "{xml}");

    guest_write(&mut g.client, 0, 16);
    let full = backup(&mut g, json!({"target_dir": backups, "checkpoint": "b1"}));
    guest_write(&mut g.client, 4, 1);
    let inc = backup(
        &mut g,
        json!({"target_dir": backups, "checkpoint": "b2", "incremental": "b1"}),
    );
    // The guest is idle: the device's bytes now are its disk at b2.
    let at_b2 = sha256(&pvc.backing);
    let file = |b: &Value| std::path::PathBuf::from(b["disks"][0]["file"].as_str().unwrap());
    let (full, inc) = (file(&full), file(&inc));
    let size = |p: &std::path::Path| fs::metadata(p).unwrap().len();
    assert!(
        size(&inc) < size(&full) / 4,
        "{} {}",
        size(&inc),
        size(&full)
    );
    let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
    qemu_img(&["rebase", "-u", "-F", "qcow2", "-b", &s(&full), &s(&inc)]);
    let restored = tree.path("restored.raw");
    qemu_img(&["convert", "-O", "raw", &s(&inc), &s(&restored)]);
    assert_eq!(sha256(&restored), at_b2);
    g.client.ok("kill", Value::Null);
    let _ = g.launcher.wait_exit(STEP);
}
