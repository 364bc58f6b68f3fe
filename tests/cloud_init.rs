//! Cloud-init and configMap ISOs, end to end: a `sync` on the test driver
//! writes them, and the real tools (isoinfo, xorriso, blkid) must read the
//! expected labels, files and contents; a failed sync leaves no file and no
//! domain behind; and the test guest, booted under real QEMU, mounts the
//! NoCloud ISO and reads the VMI's user-data from it through the agent.

mod common;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::guest::*;
use common::*;
use serde_json::{Value, json};
use virt_launcher::domxml::Domain;

/// The tools that read the images back.
const ISO_TOOLS: &[Need] = &[
    Need::Program("isoinfo"),
    Need::Program("xorriso"),
    Need::Program("blkid"),
];
/// Runs `program` and returns its stdout; panics with its stderr on failure.
fn run(program: &str, args: &[&OsStr]) -> Vec<u8> {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} (scripts/setup-host.sh installs it): {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

fn run_text(program: &str, args: &[&OsStr]) -> String {
    String::from_utf8(run(program, args)).expect("UTF-8 output")
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// `isoinfo -d`: the primary volume id.
fn iso_volume_id(iso: &Path) -> String {
    let text = run_text("isoinfo", &[os("-d"), os("-i"), iso.as_os_str()]);
    assert!(
        text.contains("Joliet with UCS level"),
        "{}: no Joliet extension:\n{text}",
        iso.display()
    );
    text.lines()
        .find_map(|l| l.strip_prefix("Volume id: "))
        .unwrap_or_else(|| panic!("{}: no volume id:\n{text}", iso.display()))
        .trim()
        .to_string()
}

/// `isoinfo -J -l`: every file (not directory) by its Joliet path.
fn iso_files(iso: &Path) -> BTreeSet<String> {
    let text = run_text("isoinfo", &[os("-J"), os("-l"), os("-i"), iso.as_os_str()]);
    let mut files = BTreeSet::new();
    let mut dir = String::new();
    for line in text.lines() {
        if let Some(d) = line.strip_prefix("Directory listing of ") {
            dir = d.trim().to_string();
            continue;
        }
        // "----------   0    0    0      13 Jan  1 1970 [     29 00]  user-data "
        let Some((_, name)) = line.split_once("]  ") else {
            continue;
        };
        let name = name.trim_end();
        if line.starts_with('d') || name == "." || name == ".." {
            continue;
        }
        files.insert(format!("{dir}{name}"));
    }
    files
}

/// `isoinfo -J -x`: the content of one file.
fn iso_cat(iso: &Path, path: &str) -> Vec<u8> {
    run(
        "isoinfo",
        &[os("-J"), os("-x"), os(path), os("-i"), iso.as_os_str()],
    )
}

/// `xorriso -find / -type f`: the files xorriso sees.
fn xorriso_files(iso: &Path) -> BTreeSet<String> {
    let text = run_text(
        "xorriso",
        &[
            os("-abort_on"),
            os("FAILURE"),
            os("-indev"),
            iso.as_os_str(),
            os("-find"),
            os("/"),
            os("-type"),
            os("f"),
        ],
    );
    text.lines()
        .map(|l| l.trim().trim_matches('\'').to_string())
        .filter(|l| l.starts_with('/'))
        .collect()
}

/// `blkid -o value -s LABEL`.
fn blkid_label(iso: &Path) -> String {
    run_text(
        "blkid",
        &[
            os("-p"),
            os("-o"),
            os("value"),
            os("-s"),
            os("LABEL"),
            iso.as_os_str(),
        ],
    )
    .trim()
    .to_string()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// The domain as libvirt has it, from `query-domain`.
fn query_domain(client: &mut Client) -> (Value, Domain) {
    let ret = client.ok("query-domain", Value::Null);
    let xml = ret["xml"].as_str().expect("query-domain xml").to_string();
    let domain = Domain::from_xml(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
    (ret, domain)
}

/// The source file of the disk with alias `ua-<volume>`.
fn disk_source(domain: &Domain, volume: &str) -> PathBuf {
    let alias = format!("ua-{volume}");
    let disk = domain
        .devices
        .disks
        .iter()
        .find(|d| d.alias.as_ref().is_some_and(|a| a.name == alias))
        .unwrap_or_else(|| panic!("no disk {alias} in {domain:?}"));
    PathBuf::from(
        disk.source
            .as_ref()
            .and_then(|s| s.file.clone())
            .unwrap_or_else(|| panic!("disk {alias} has no source file")),
    )
}

/// Every regular file under `dir` (recursively), as paths.
/// The launcher's own lock file (held while it runs) is not counted.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push(path),
                Ok(_) if entry.file_name() == "virt-launcher.lock" => {}
                Ok(_) => out.push(path),
                Err(_) => {}
            }
        }
    }
    out.sort();
    out
}

/// Every entry under `dir` (recursively), directories included.
fn tree_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path.clone());
            }
            out.push(path);
        }
    }
    out.sort();
    out
}

/// A configMap volume mounted the way the kubelet does it: each key a
/// symlink `key -> ..data/key`, `..data` a symlink to a timestamped
/// directory holding the real files.
fn config_map_dir(dir: &Path, files: &[(&str, &[u8])]) {
    let stamp = "..2026_01_01_00_00_00.000000001";
    fs::create_dir_all(dir.join(stamp)).expect("create configMap dir");
    let mut top = BTreeSet::new();
    for (key, data) in files {
        let real = dir.join(stamp).join(key);
        fs::create_dir_all(real.parent().unwrap()).expect("create key dir");
        fs::write(&real, data).expect("write key");
        top.insert(key.split('/').next().unwrap().to_string());
    }
    symlink(stamp, dir.join("..data")).expect("..data symlink");
    for name in top {
        symlink(format!("..data/{name}"), dir.join(&name)).expect("key symlink");
    }
}

/// The launcher's demo VMI (test driver) with `volumes` as disks.
fn demo_with(launcher: &Launcher, disks: Value, volumes: Value) -> Value {
    let mut vmi = launcher.demo_vmi();
    vmi["spec"]["domain"]["devices"]["disks"] = disks;
    vmi["spec"]["volumes"] = volumes;
    vmi
}

const USER_DATA: &str =
    "#cloud-config\nhostname: iso-test\nruncmd:\n  - echo \"ünïcödé\" > /tmp/marker\n";
const NETWORK_DATA: &str = "version: 2\nethernets:\n  eth0:\n    dhcp4: true\n";

#[test]
fn sync_writes_no_cloud_and_config_map_isos_the_real_tools_read() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    if !require(ISO_TOOLS) {
        return;
    }
    let mut launcher = Launcher::start_test(&[]);
    launcher.wait_ready(STEP);
    let app_properties = b"color=blue\nsize=42\n".as_slice();
    let db_ini = b"[db]\nhost=db.example\n".as_slice();
    config_map_dir(
        &launcher.tree.path("private/config-map/app-config"),
        &[("app.properties", app_properties), ("conf/db.ini", db_ini)],
    );
    let vmi = demo_with(
        &launcher,
        json!([
            {"name": "cloudinit", "disk": {"bus": "virtio"}},
            {"name": "app-config", "disk": {"bus": "virtio"}, "serial": "CFG1"},
        ]),
        json!([
            {"name": "cloudinit", "cloudInitNoCloud": {
                "userData": USER_DATA, "networkData": NETWORK_DATA}},
            {"name": "app-config", "configMap": {"name": "app-config", "volumeLabel": "APPCFG"}},
        ]),
    );
    let mut client = launcher.client();
    client.ok("sync", json!({ "vmi": vmi }));
    let (ret, domain) = query_domain(&mut client);

    // NoCloud: where KubeVirt puts it, label cidata, the three files.
    let no_cloud = disk_source(&domain, "cloudinit");
    assert_eq!(
        no_cloud,
        launcher.tree.path(&format!(
            "ephemeral/cloud-init-data/default/{}/noCloud.iso",
            launcher.name
        ))
    );
    assert_eq!(iso_volume_id(&no_cloud), "cidata");
    assert_eq!(blkid_label(&no_cloud), "cidata");
    let expected = set(&["/meta-data", "/network-config", "/user-data"]);
    assert_eq!(iso_files(&no_cloud), expected);
    assert_eq!(xorriso_files(&no_cloud), expected);
    assert_eq!(iso_cat(&no_cloud, "/user-data"), USER_DATA.as_bytes());
    assert_eq!(
        iso_cat(&no_cloud, "/network-config"),
        NETWORK_DATA.as_bytes()
    );
    // Generated meta-data: the domain's UUID and the VMI name.
    let meta: Value =
        serde_json::from_slice(&iso_cat(&no_cloud, "/meta-data")).expect("meta-data is JSON");
    assert_eq!(meta["instance-id"], ret["uuid"], "{meta} vs {ret}");
    assert_eq!(meta["local-hostname"], launcher.name.as_str());
    // The ISO is the whole image, nothing staged next to it.
    assert_eq!(
        files_under(no_cloud.parent().unwrap()),
        vec![no_cloud.clone()]
    );

    // configMap: an ISO of the mounted keys (not the ..data machinery).
    let cfg = disk_source(&domain, "app-config");
    assert_eq!(
        cfg,
        launcher
            .tree
            .path("private/config-map-disks/app-config.iso")
    );
    assert_eq!(iso_volume_id(&cfg), "APPCFG");
    assert_eq!(blkid_label(&cfg), "APPCFG");
    let expected = set(&["/app.properties", "/conf/db.ini"]);
    assert_eq!(iso_files(&cfg), expected);
    assert_eq!(xorriso_files(&cfg), expected);
    assert_eq!(iso_cat(&cfg, "/app.properties"), app_properties);
    assert_eq!(iso_cat(&cfg, "/conf/db.ini"), db_ini);
}

#[test]
fn sync_writes_a_config_drive_iso_in_the_openstack_layout() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    if !require(ISO_TOOLS) {
        return;
    }
    let mut launcher = Launcher::start_test(&[]);
    launcher.wait_ready(STEP);
    let network = "{\"links\": [], \"networks\": [], \"services\": []}";
    let vmi = demo_with(
        &launcher,
        json!([{"name": "configdrive", "cdrom": {"bus": "sata"}}]),
        json!([{"name": "configdrive", "cloudInitConfigDrive": {
            // "#cloud-config\nhostname: cd\n"
            "userDataBase64": "I2Nsb3VkLWNvbmZpZwpob3N0bmFtZTogY2QK",
            "networkData": network}}]),
    );
    let mut client = launcher.client();
    client.ok("sync", json!({ "vmi": vmi }));
    let (ret, domain) = query_domain(&mut client);
    let iso = disk_source(&domain, "configdrive");
    assert_eq!(
        iso,
        launcher.tree.path(&format!(
            "ephemeral/cloud-init-data/default/{}/configdrive.iso",
            launcher.name
        ))
    );
    assert_eq!(iso_volume_id(&iso), "config-2");
    assert_eq!(blkid_label(&iso), "config-2");
    let expected = set(&[
        "/openstack/latest/meta_data.json",
        "/openstack/latest/network_data.json",
        "/openstack/latest/user_data",
    ]);
    assert_eq!(iso_files(&iso), expected);
    assert_eq!(xorriso_files(&iso), expected);
    assert_eq!(
        iso_cat(&iso, "/openstack/latest/user_data"),
        b"#cloud-config\nhostname: cd\n"
    );
    assert_eq!(
        iso_cat(&iso, "/openstack/latest/network_data.json"),
        network.as_bytes()
    );
    let meta: Value = serde_json::from_slice(&iso_cat(&iso, "/openstack/latest/meta_data.json"))
        .expect("meta_data.json is JSON");
    assert_eq!(
        meta["instance_id"],
        format!("{}.default", launcher.name).as_str(),
        "{meta}"
    );
    assert_eq!(meta["hostname"], launcher.name.as_str());
    assert_eq!(meta["uuid"], ret["uuid"]);
}

#[test]
fn a_failed_sync_leaves_no_files_and_no_domain() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let mut launcher = Launcher::start_test(&[]);
    launcher.wait_ready(STEP);
    let mut client = launcher.client();
    let ephemeral = launcher.tree.path("ephemeral");
    let private = launcher.tree.path("private");
    let before_ephemeral = tree_under(&ephemeral);
    let before_private = tree_under(&private);
    let no_cloud = json!({"name": "cloudinit", "cloudInitNoCloud": {"userData": USER_DATA}});

    // 1. A containerDisk whose image is not there: refused before anything
    //    is written, naming the volume.
    let vmi = demo_with(
        &launcher,
        json!([
            {"name": "rootdisk", "disk": {"bus": "virtio"}},
            {"name": "cloudinit", "disk": {"bus": "virtio"}},
        ]),
        json!([
            {"name": "rootdisk", "containerDisk": {"image": "quay.io/nowhere/missing:1"}},
            no_cloud,
        ]),
    );
    let (class, desc) = client.err_class("sync", json!({ "vmi": vmi }));
    assert_eq!(class, "InvalidArgument", "{desc}");
    assert!(desc.contains("\"rootdisk\""), "{desc}");
    assert!(desc.contains("disk_0.img"), "{desc}");
    assert_eq!(files_under(&ephemeral), Vec::<PathBuf>::new());
    assert_eq!(tree_under(&ephemeral), before_ephemeral);
    assert_eq!(tree_under(&private), before_private);
    let status = client.ok("query-status", Value::Null);
    assert_eq!(status["domain"]["defined"], false, "{status}");

    // 2. A failure after the NoCloud ISO was written (a configMap key whose
    //    name is not UTF-8 cannot go into a Joliet image): the ISO and the
    //    directories made for it are removed again.
    let cfg_dir = launcher.tree.path("private/config-map/bad-config");
    config_map_dir(&cfg_dir, &[("ok.txt", b"fine")]);
    fs::write(cfg_dir.join(OsStr::from_bytes(b"bad-\xff-name")), b"x").unwrap();
    let before_private = tree_under(&private);
    let vmi = demo_with(
        &launcher,
        json!([
            {"name": "cloudinit", "disk": {"bus": "virtio"}},
            {"name": "bad-config", "disk": {"bus": "virtio"}},
        ]),
        json!([no_cloud, {"name": "bad-config", "configMap": {"name": "bad-config"}}]),
    );
    let reply = client.request("sync", json!({ "vmi": vmi }));
    let err = reply
        .get("error")
        .unwrap_or_else(|| panic!("sync should fail: {reply}"));
    let desc = err["desc"].as_str().unwrap_or_default();
    assert!(desc.contains("\"bad-config\""), "{reply}");
    if std::env::var_os("VL_TEST_LOG").is_none() {
        // (debug log) The ISO was written first, so this did roll back.
        assert!(
            launcher
                .log_text()
                .lines()
                .any(|l| l.contains("disks: removed") && l.ends_with("/noCloud.iso")),
            "the NoCloud ISO was not written before the failure"
        );
    }
    assert_eq!(files_under(&ephemeral), Vec::<PathBuf>::new());
    assert_eq!(tree_under(&ephemeral), before_ephemeral);
    assert_eq!(tree_under(&private), before_private);
    let status = client.ok("query-status", Value::Null);
    assert_eq!(status["domain"]["defined"], false, "{status}");
    assert_eq!(client.err_class("query-domain", Value::Null).0, "NotFound");
}

#[test]
fn the_guest_mounts_the_no_cloud_iso_and_reads_the_vmi_user_data() {
    if !require(REAL_GUEST) {
        return;
    }
    let name = "cidata";
    let user_data = format!(
        "#cloud-config\n# distinctive: {}-{:x}\nruncmd:\n  - [echo, hello]\n",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let meta_data = format!("instance-id: iid-{name}\nlocal-hostname: {name}\n");
    // The NoCloud volume is the only virtio disk: /dev/vda in the guest.
    let mut opts = GuestOptions::new(name);
    opts.extra_cmdline = "tg.mount=/dev/vda:/mnt/cidata".into();
    let mut vmi = guest_vmi(&opts);
    vmi["spec"]["domain"]["devices"]["disks"] =
        json!([{"name": "cloudinit", "disk": {"bus": "virtio"}}]);
    vmi["spec"]["volumes"] = json!([{"name": "cloudinit", "cloudInitNoCloud": {
        "userData": user_data, "metaData": meta_data}}]);

    let mut launcher = start_qemu_launcher(TempTree::new("ci-guest"), name, &[]);
    let mut watcher = launcher.client();
    watcher.ok("subscribe", Value::Null);
    let mut client = launcher.client();
    let synced = client.request_timeout("sync", json!({ "vmi": vmi }), STEP);
    assert!(synced.get("return").is_some(), "sync failed: {synced}");
    watcher.wait_event(STEP, "Started", lifecycle("Started", "Booted"));
    watcher.wait_event(BOOT, "AGENT_CONNECTED", named("AGENT_CONNECTED"));

    let (code, mounts) = guest_sh(&mut client, "grep ' /mnt/cidata ' /proc/mounts");
    assert_eq!(
        code, 0,
        "the ISO is not mounted; /proc/mounts has:\n{mounts}"
    );
    assert!(
        mounts.starts_with("/dev/vda /mnt/cidata iso9660 ro"),
        "{mounts}"
    );
    let (code, listing) = guest_sh(&mut client, "ls /mnt/cidata");
    assert_eq!(code, 0, "{listing}");
    assert_eq!(
        listing.split_whitespace().collect::<Vec<_>>(),
        ["meta-data", "user-data"]
    );
    let (code, got) = guest_sh(&mut client, "cat /mnt/cidata/user-data");
    assert_eq!(code, 0);
    assert_eq!(got, user_data);
    let (code, got) = guest_sh(&mut client, "cat /mnt/cidata/meta-data");
    assert_eq!(code, 0);
    assert_eq!(got, meta_data);

    client.ok("kill", Value::Null);
    watcher.wait_event(STEP, "Stopped", lifecycle("Stopped", "Destroyed"));
    // A stopped domain ends the launcher.
    launcher.wait_exit(STEP);
    wait_no_qemu(&format!("e2e_{name}"), STEP);
}
