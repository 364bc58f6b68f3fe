//! KubeVirt's hook sidecars (`hooks.kubevirt.io/hookSidecars`,
//! `--hook-sidecars`): sidecars of our own speaking KubeVirt's hook
//! protocol (tests/common/hook_sidecar.rs: what KubeVirt's smbios and
//! cloudinit examples do) change the domain XML and the cloud-init ISO
//! before the domain is defined, in priority order; a sidecar that is gone,
//! hangs or returns no domain fails the sync with an error that names it;
//! and on the test guest, the guest sees the hook's base board
//! manufacturer and the hook's user data.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::guest::*;
use common::hook_sidecar::{self, Behaviour, CallLog, MANUFACTURER_ANNOTATION};
use common::*;
use serde_json::{Value, json};

/// KubeVirt's annotation, listing `n` sidecars as its examples do.
fn with_hook_annotation(vmi: &mut Value, n: usize, manufacturer: &str) {
    let list: Vec<Value> = (0..n)
        .map(|_| json!({"args": ["--version", "v1alpha3"], "image": "registry:5000/kubevirt/example-hook-sidecar:devel"}))
        .collect();
    vmi["metadata"]["annotations"] = json!({
        "hooks.kubevirt.io/hookSidecars": Value::Array(list).to_string(),
        MANUFACTURER_ANNOTATION: manufacturer,
    });
}

fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find_file(&path, name) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
    }
    None
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

fn calls(log: &CallLog) -> Vec<String> {
    log.lock().unwrap().clone()
}

/// The base board's manufacturer in libvirt's live XML (this launcher's
/// domain model has no base board: only hooks write one).
fn base_board_manufacturer(xml: &str) -> Option<String> {
    let board = &xml[xml.find("<baseBoard>")?..xml.find("</baseBoard>")?];
    let entry = "<entry name='manufacturer'>";
    let value = &board[board.find(entry)? + entry.len()..];
    Some(value[..value.find("</entry>")?].to_string())
}

fn hook_flags(dir: &Path) -> Vec<String> {
    vec![
        "--hook-sidecars-dir".into(),
        dir.to_string_lossy().into_owned(),
        "--hook-timeout".into(),
        "2s".into(),
    ]
}

#[test]
fn hooks_change_the_domain_and_the_cloud_init_iso_in_priority_order_and_shutdown_is_called() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let hooks = TempTree::new("hooks");
    let dir = hooks.path("h");
    let log = CallLog::default();
    // Found first (directory order), but of lower priority: runs last,
    // so its manufacturer is the one defined.
    let mut low = Behaviour::new("low", &[("OnDefineDomain", 1)]);
    low.manufacturer = Some("Low Corp".into());
    hook_sidecar::start(&dir, "a-low", low, &log);
    let mut high = Behaviour::new(
        "high",
        &[
            ("OnDefineDomain", 10),
            ("PreCloudInitIso", 0),
            ("Shutdown", 0),
        ],
    );
    high.user_data = Some("#cloud-config\n# written by the hook\n".into());
    hook_sidecar::start(&dir, "b-high", high, &log);
    let mut args = hook_flags(&dir);
    args.extend(["--hook-sidecars".into(), "2".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut launcher = Launcher::start_test(&args);
    launcher.wait_ready(Duration::from_secs(30));
    assert!(
        launcher.log_text().contains("hooks: sidecar \"high\" at "),
        "{}",
        launcher.log_text()
    );
    let mut client = launcher.client();
    let mut vmi = launcher.demo_vmi();
    with_hook_annotation(&mut vmi, 2, "Acme");
    vmi["spec"]["domain"]["devices"]["disks"] =
        json!([{"name": "cloudinit", "disk": {"bus": "virtio"}}]);
    vmi["spec"]["volumes"] = json!([{"name": "cloudinit", "cloudInitNoCloud": {
        "userData": "#cloud-config\n# written by the VMI\n"}}]);
    let synced = client.ok("sync", json!({ "vmi": vmi }));
    assert!(synced["steps_ms"]["hooks"].is_number(), "{synced}");
    assert_eq!(
        calls(&log),
        [
            "high PreCloudInitIso",
            "high OnDefineDomain",
            "low OnDefineDomain"
        ]
    );
    let xml = client.ok("query-domain", Value::Null)["xml"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        base_board_manufacturer(&xml).as_deref(),
        Some("Low Corp"),
        "{xml}"
    );
    assert!(xml.contains("<smbios mode='sysinfo'/>"), "{xml}");
    let iso = find_file(&launcher.tree.root, "noCloud.iso").expect("the cloud-init ISO");
    let iso = std::fs::read(iso).unwrap();
    assert!(contains(&iso, "# written by the hook"));
    assert!(!contains(&iso, "# written by the VMI"));

    client.ok("kill", Value::Null);
    assert_eq!(launcher.wait_exit(Duration::from_secs(30)), 0);
    assert_eq!(
        calls(&log).last().map(String::as_str),
        Some("high Shutdown")
    );
}

#[test]
fn a_hung_dead_or_wrong_sidecar_fails_the_sync_naming_it_and_nothing_is_defined() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let hooks = TempTree::new("hooks");
    let dir = hooks.path("h");
    let log = CallLog::default();
    let mut hung = Behaviour::new("hung", &[("OnDefineDomain", 2)]);
    hung.hang = true;
    let hung = hook_sidecar::start(&dir, "hung", hung, &log);
    let mut args = hook_flags(&dir);
    args.extend(["--hook-sidecars".into(), "1".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut launcher = Launcher::start_test(&args);
    launcher.wait_ready(Duration::from_secs(30));
    let mut client = launcher.client();
    let vmi = launcher.demo_vmi();

    // It never answers: --hook-timeout.
    let (class, desc) = client.err_class("sync", json!({ "vmi": vmi }));
    assert_eq!(class, "Unavailable");
    assert_eq!(
        desc,
        format!(
            "sync: hook sidecar \"hung\" ({}): OnDefineDomain: no answer within 2s (--hook-timeout)",
            hung.socket.display()
        )
    );
    assert_eq!(calls(&log), ["hung OnDefineDomain"]);
    // Its container died.
    hung.kill();
    let (class, desc) = client.err_class("sync", json!({ "vmi": vmi }));
    assert_eq!(class, "Unavailable");
    assert!(
        desc.starts_with(&format!(
            "sync: hook sidecar \"hung\" ({0}): OnDefineDomain: cannot connect to {0}: ",
            hung.socket.display()
        )),
        "{desc}"
    );
    // Nothing was defined, and the manager answers.
    let (class, _) = client.err_class("query-domain", Value::Null);
    assert_eq!(class, "NotFound");
    launcher.signal("TERM");
    launcher.wait_exit(Duration::from_secs(30));

    // A sidecar that returns a domain that is not this one.
    let dir = hooks.path("w");
    let mut wrong = Behaviour::new("wrong", &[("OnDefineDomain", 0)]);
    wrong.broken_xml = Some("<domain type='test'><name>someone-else</name></domain>".into());
    let wrong = hook_sidecar::start(&dir, "wrong", wrong, &log);
    let mut args = hook_flags(&dir);
    args.extend(["--hook-sidecars".into(), "1".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut launcher = Launcher::start_test(&args);
    launcher.wait_ready(Duration::from_secs(30));
    let mut client = launcher.client();
    let (class, desc) = client.err_class("sync", json!({ "vmi": launcher.demo_vmi() }));
    assert_eq!(class, "InvalidArgument");
    assert_eq!(
        desc,
        format!(
            "sync: hook sidecar \"wrong\" ({}): OnDefineDomain: the domain XML returned: it names domain \"someone-else\", not this launcher's \"{}\"",
            wrong.socket.display(),
            launcher.domain_name()
        )
    );
    // Nothing was defined.
    let (class, _) = client.err_class("query-domain", Value::Null);
    assert_eq!(class, "NotFound");
    launcher.signal("TERM");
    launcher.wait_exit(Duration::from_secs(30));
}

#[test]
fn the_launcher_waits_for_its_sidecars_and_a_vmi_needs_as_many_as_it_names() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let hooks = TempTree::new("hooks");
    let dir = hooks.path("h");
    std::fs::create_dir_all(&dir).unwrap();
    let log = CallLog::default();
    // Two asked for, one there: exit status 3 after --qemu-timeout.
    hook_sidecar::start(
        &dir,
        "only",
        Behaviour::new("only", &[("OnDefineDomain", 0)]),
        &log,
    );
    let mut args = hook_flags(&dir);
    args.extend(["--hook-sidecars", "2", "--qemu-timeout", "2s"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut launcher = Launcher::start_test(&args);
    assert_eq!(launcher.wait_exit(Duration::from_secs(30)), 3);
    let text = launcher.log_text();
    assert!(
        text.contains(&format!(
            "1 of the 2 hook sidecars (--hook-sidecars) answered in {}/*/ within 2 s (--qemu-timeout): \"only\" at ",
            dir.display()
        )),
        "{text}"
    );

    // One sidecar collected; the VMI names two.
    let mut args = hook_flags(&dir);
    args.extend(["--hook-sidecars".into(), "1".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut launcher = Launcher::start_test(&args);
    launcher.wait_ready(Duration::from_secs(30));
    let mut client = launcher.client();
    let mut vmi = launcher.demo_vmi();
    with_hook_annotation(&mut vmi, 2, "Acme");
    let (class, desc) = client.err_class("sync", json!({ "vmi": vmi }));
    assert_eq!(class, "Unavailable");
    assert_eq!(
        desc,
        "sync: metadata.annotations.hooks.kubevirt.io/hookSidecars: the VMI names 2 hook sidecar(s), but 1 answered when the launcher started; start it with --hook-sidecars 2, their sockets in --hook-sidecars-dir"
    );
    assert!(calls(&log).is_empty());
    launcher.signal("TERM");
    launcher.wait_exit(Duration::from_secs(30));
}

/// On the test guest: KubeVirt's smbios example's change shows in the live
/// domain and to the guest (its DMI base board vendor), and the cloudinit
/// example's in the ISO the guest mounts.
#[test]
fn the_guest_sees_the_hooks_base_board_manufacturer_and_user_data() {
    if !require(REAL_GUEST) {
        return;
    }
    let hooks = TempTree::new("hooks");
    let dir = hooks.path("h");
    let log = CallLog::default();
    // KubeVirt's two examples, as the shim runs them (priority 0).
    hook_sidecar::start(
        &dir,
        "hook-sidecar-0",
        Behaviour::new("smbios", &[("OnDefineDomain", 0), ("Shutdown", 0)]),
        &log,
    );
    let mut cloudinit = Behaviour::new("cloudinit", &[("PreCloudInitIso", 0)]);
    cloudinit.user_data = Some("#cloud-config\n".into());
    hook_sidecar::start(&dir, "hook-sidecar-1", cloudinit, &log);

    let name = "hooks";
    let mut opts = GuestOptions::new(name);
    opts.extra_cmdline = "tg.mount=/dev/vda:/mnt/cidata".into();
    let mut vmi = guest_vmi(&opts);
    with_hook_annotation(&mut vmi, 2, "Hooked Boards Inc");
    vmi["spec"]["domain"]["devices"]["disks"] =
        json!([{"name": "cloudinit", "disk": {"bus": "virtio"}}]);
    vmi["spec"]["volumes"] = json!([{"name": "cloudinit", "cloudInitNoCloud": {
        "userData": "#cloud-config\n# from the VMI\n"}}]);
    let mut args = hook_flags(&dir);
    args.extend(["--hook-sidecars".into(), "2".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut g = boot_vmi(TempTree::new("hooks-guest"), name, vmi, &args);

    let xml = g.client.ok("query-domain", Value::Null)["xml"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        base_board_manufacturer(&xml).as_deref(),
        Some("Hooked Boards Inc"),
        "{xml}"
    );
    let (code, vendor) = guest_sh(&mut g.client, "cat /sys/class/dmi/id/board_vendor");
    assert_eq!((code, vendor.as_str()), (0, "Hooked Boards Inc\n"));
    let (code, user_data) = guest_sh(&mut g.client, "cat /mnt/cidata/user-data");
    assert_eq!((code, user_data.as_str()), (0, "#cloud-config\n"));
    assert_eq!(
        calls(&log),
        ["cloudinit PreCloudInitIso", "smbios OnDefineDomain"]
    );

    g.client.ok("kill", Value::Null);
    assert_eq!(g.launcher.wait_exit(STEP), 0);
    assert_eq!(
        calls(&log).last().map(String::as_str),
        Some("smbios Shutdown")
    );
    wait_no_qemu(&format!("e2e_{name}"), STEP);
}

/// A migration target calls its own sidecars while it prepares, as
/// KubeVirt's target launcher does: `PreCloudInitIso` for the ISO it
/// writes (which then holds the hook's user data, as the source's does)
/// and `OnDefineDomain` with its own domain; the guest that arrives is the
/// source's, with the source's hooked base board.
#[test]
fn a_migration_target_calls_its_sidecars_as_kubevirts_target_does() {
    if !require(REAL_GUEST) {
        return;
    }
    let hooks = TempTree::new("hooks-mig");
    let start_sidecars = |dir: &Path, log: &CallLog, user_data: &str| {
        hook_sidecar::start(
            dir,
            "hook-sidecar-0",
            Behaviour::new("smbios", &[("OnDefineDomain", 0), ("Shutdown", 0)]),
            log,
        );
        let mut cloudinit = Behaviour::new("cloudinit", &[("PreCloudInitIso", 0)]);
        cloudinit.user_data = Some(user_data.into());
        hook_sidecar::start(dir, "hook-sidecar-1", cloudinit, log);
    };
    let (dir_a, log_a) = (hooks.path("a"), CallLog::default());
    start_sidecars(&dir_a, &log_a, "#cloud-config\n# hooked\n");
    let (dir_b, log_b) = (hooks.path("b"), CallLog::default());
    start_sidecars(&dir_b, &log_b, "#cloud-config\n# hooked\n");

    let name = "hookmover";
    let mut vmi = guest_vmi(&GuestOptions::new(name));
    with_hook_annotation(&mut vmi, 2, "Moved Boards Inc");
    vmi["spec"]["domain"]["devices"]["disks"] =
        json!([{"name": "cloudinit", "disk": {"bus": "virtio"}}]);
    vmi["spec"]["volumes"] = json!([{"name": "cloudinit", "cloudInitNoCloud": {
        "userData": "#cloud-config\n# from the VMI\n"}}]);
    let args_for = |dir: &Path| {
        let mut args = hook_flags(dir);
        args.extend(["--hook-sidecars".into(), "2".into()]);
        args
    };
    let args_a = args_for(&dir_a);
    let args_a: Vec<&str> = args_a.iter().map(String::as_str).collect();
    let mut a = boot_vmi(TempTree::new("hooks-mig-a"), name, vmi.clone(), &args_a);

    let args_b = args_for(&dir_b);
    let args_b: Vec<&str> = args_b.iter().map(String::as_str).collect();
    let b = start_qemu_launcher(TempTree::new("hooks-mig-b"), name, &args_b);
    let mut b_watch = b.client();
    b_watch.ok("subscribe", Value::Null);
    let mut b_client = b.client();
    let ret = b_client.request_timeout("prepare-migration-target", json!({"vmi": vmi}), STEP);
    let target = ret["return"]["target"].clone();
    assert!(target.is_object(), "prepare-migration-target failed: {ret}");
    assert_eq!(
        calls(&log_b),
        ["cloudinit PreCloudInitIso", "smbios OnDefineDomain"],
        "the target's sidecars"
    );
    let iso = find_file(&b.tree.root, "noCloud.iso").expect("the target's cloud-init ISO");
    let iso = std::fs::read(iso).unwrap();
    assert!(contains(&iso, "# hooked"), "the target's ISO is not hooked");
    assert!(!contains(&iso, "# from the VMI"));

    let started = a.client.ok("migrate", json!({"target": target}));
    assert_eq!(started["started"], true);
    a.watcher.wait_event(
        STEP * 2,
        "MIGRATION_COMPLETED",
        named("MIGRATION_COMPLETED"),
    );
    assert_eq!(a.launcher.wait_exit(STEP), 0);
    b_watch.wait_event(
        STEP,
        "target MIGRATION_COMPLETED",
        named("MIGRATION_COMPLETED"),
    );
    b_client.ok("finalize-migration", Value::Null);
    wait_status(&mut b_client, STEP, "agent on B", |s| {
        s["agent"]["connected"] == true
    });
    let (code, vendor) = guest_sh(&mut b_client, "cat /sys/class/dmi/id/board_vendor");
    assert_eq!((code, vendor.as_str()), (0, "Moved Boards Inc\n"));
    // The target defined nothing of its own: its sidecars were called once.
    assert_eq!(
        calls(&log_b),
        ["cloudinit PreCloudInitIso", "smbios OnDefineDomain"]
    );
    b_client.ok("kill", Value::Null);
    let mut b = b;
    assert_eq!(b.wait_exit(STEP), 0);
    wait_no_qemu(&format!("e2e_{name}"), STEP);
}
