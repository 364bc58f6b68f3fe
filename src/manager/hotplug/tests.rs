//! The sync job's live part against a scripted hypervisor: order of steps,
//! waiting for device removal, Timeout, failures midway, refusals that
//! touch nothing.

use std::sync::Mutex;
use std::time::Duration;

use super::*;
use crate::hypervisor::{
    ConnectionId, DomainStatus, GuestInfoKind, HvResult, HypervisorError, HypervisorInfo,
    MigrationRequest, RebootMode, Stat,
};
use crate::scratch::ScratchDir;

const MIB: u64 = 1 << 20;

/// A hypervisor whose live XML is a string and which records the device
/// calls; attach fails for aliases listed in `refuse`.
struct Scripted {
    xml: Mutex<String>,
    calls: Mutex<Vec<String>>,
    /// The XML of each update_device, in order.
    updates: Mutex<Vec<String>>,
    refuse: Vec<&'static str>,
    /// How many set_vcpus calls time out (changing nothing) before one
    /// sets the live count.
    vcpu_timeouts: Mutex<u32>,
}

impl Scripted {
    fn new(xml: String) -> Scripted {
        Scripted {
            xml: Mutex::new(xml),
            calls: Mutex::new(Vec::new()),
            updates: Mutex::new(Vec::new()),
            refuse: Vec::new(),
            vcpu_timeouts: Mutex::new(0),
        }
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    fn unsupported<T>(op: &'static str) -> HvResult<T> {
        Err(HypervisorError::new(
            HypervisorErrorKind::Unsupported,
            op,
            "not scripted",
        ))
    }

    fn record(&self, call: &str, xml: &str) {
        let alias = xml
            .split("alias name=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or("?");
        self.calls.lock().unwrap().push(format!("{call} {alias}"));
    }
}

impl Hypervisor for Scripted {
    fn info(&self) -> HypervisorInfo {
        HypervisorInfo {
            uri: "scripted:///".into(),
            driver: crate::hypervisor::DriverKind::Test,
            backend: "scripted",
            library_version: None,
            daemon_version: "9.0.0".into(),
        }
    }
    fn domain_status(&self, _: &str) -> HvResult<Option<DomainStatus>> {
        Ok(Some(DomainStatus::new(
            DomainState::Running,
            StateReason::Booted,
        )))
    }
    fn define(&self, _: &str) -> HvResult<()> {
        Self::unsupported("define")
    }
    fn undefine(&self, _: &str) -> HvResult<()> {
        Self::unsupported("undefine")
    }
    fn start(&self, _: &str, _: bool) -> HvResult<()> {
        Self::unsupported("start")
    }
    fn suspend(&self, _: &str) -> HvResult<()> {
        Self::unsupported("suspend")
    }
    fn resume(&self, _: &str) -> HvResult<()> {
        Self::unsupported("resume")
    }
    fn shutdown_acpi(&self, _: &str) -> HvResult<()> {
        Self::unsupported("shutdown")
    }
    fn reboot(&self, _: &str, _: RebootMode) -> HvResult<()> {
        Self::unsupported("reboot")
    }
    fn reset(&self, _: &str) -> HvResult<()> {
        Self::unsupported("reset")
    }
    fn destroy(&self, _: &str, _: bool) -> HvResult<()> {
        Self::unsupported("destroy")
    }
    fn domain_xml(&self, _: &str) -> HvResult<(String, String)> {
        Ok((self.xml.lock().unwrap().clone(), "uuid".into()))
    }
    fn stats(&self, _: &str) -> HvResult<Vec<Stat>> {
        Self::unsupported("stats")
    }
    fn attach_device(&self, _: &str, xml: &str, _: Affect) -> HvResult<()> {
        self.record("attach", xml);
        if self.refuse.iter().any(|a| xml.contains(a)) {
            return Err(HypervisorError::new(
                HypervisorErrorKind::Other,
                "virDomainAttachDeviceFlags",
                "internal error: unable to execute QEMU command 'device_add': Bus 'pci.9' not found",
            ));
        }
        Ok(())
    }
    fn detach_device(&self, _: &str, xml: &str, _: Affect) -> HvResult<()> {
        self.record("detach", xml);
        Ok(())
    }
    fn update_device(&self, _: &str, xml: &str, affect: Affect) -> HvResult<()> {
        self.updates.lock().unwrap().push(xml.to_string());
        self.calls
            .lock()
            .unwrap()
            .push(format!("update {} {:?}", !xml.is_empty(), affect));
        Ok(())
    }
    fn set_vcpus(&self, _: &str, count: u32, affect: Affect) -> HvResult<()> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("set-vcpus {count}"));
        let mut timeouts = self.vcpu_timeouts.lock().unwrap();
        if *timeouts > 0 && affect.live {
            *timeouts -= 1;
            return Err(HypervisorError::new(
                HypervisorErrorKind::Timeout,
                "virDomainSetVcpusFlags",
                "Timed out during operation: vcpu unplug request timed out",
            ));
        }
        let mut xml = self.xml.lock().unwrap();
        if let Some(at) = xml.find("current='") {
            let end = at + xml[at + 9..].find('\'').unwrap() + 9;
            xml.replace_range(at..=end, &format!("current='{count}'"));
        }
        Ok(())
    }
    fn agent_command(&self, _: &str, _: &str, _: Duration) -> HvResult<String> {
        Self::unsupported("agent")
    }
    fn set_agent_timeout(&self, _: &str, _: Duration) -> HvResult<()> {
        Self::unsupported("agent timeout")
    }
    fn guest_info(&self, _: &str, _: &[GuestInfoKind]) -> HvResult<Vec<Stat>> {
        Self::unsupported("guest info")
    }
    fn sync_guest_time(&self, _: &str, _: Duration) -> HvResult<()> {
        Self::unsupported("time")
    }
    fn migratable_xml(&self, _: &str) -> HvResult<String> {
        Self::unsupported("migratable xml")
    }
    fn migrate(&self, _: &str, _: &MigrationRequest) -> HvResult<()> {
        Self::unsupported("migrate")
    }
    fn job_stats(&self, _: &str, _: bool) -> HvResult<Vec<Stat>> {
        Self::unsupported("job stats")
    }
    fn abort_job(&self, _: &str) -> HvResult<()> {
        Self::unsupported("abort")
    }
    fn migrate_start_post_copy(&self, _: &str) -> HvResult<()> {
        Self::unsupported("post-copy")
    }
    fn migrate_set_max_downtime(&self, _: &str, _: u64) -> HvResult<()> {
        Self::unsupported("downtime")
    }
    fn hypervisor_version(&self) -> HvResult<u64> {
        Self::unsupported("version")
    }
    fn versions_at(&self, _: &str) -> HvResult<crate::hypervisor::DaemonVersions> {
        Self::unsupported("versions")
    }
    fn start_dirty_rate_calc(&self, _: &str, _: u32) -> HvResult<()> {
        Self::unsupported("dirty rate")
    }
    fn dirty_rate_stats(&self, _: &str) -> HvResult<Vec<crate::hypervisor::Stat>> {
        Self::unsupported("dirty rate")
    }
    fn dump_memory(&self, _: &str, _: &std::path::Path) -> HvResult<()> {
        Self::unsupported("dump")
    }
    fn screenshot(&self, _: &str, _: u32) -> HvResult<crate::hypervisor::Screenshot> {
        Self::unsupported("screenshot")
    }
    fn disk_errors(&self, _: &str) -> HvResult<Vec<crate::hypervisor::DiskError>> {
        Self::unsupported("disk_errors")
    }
    fn backup_begin(&self, _: &str, _: &str, _: Option<&str>) -> HvResult<()> {
        Self::unsupported("backup")
    }
    fn checkpoint_create(&self, _: &str, _: &str, _: bool) -> HvResult<()> {
        Self::unsupported("checkpoint")
    }
    fn checkpoint_names(&self, _: &str) -> HvResult<Vec<String>> {
        Self::unsupported("checkpoints")
    }
    fn checkpoint_xml(&self, _: &str, _: &str) -> HvResult<String> {
        Self::unsupported("checkpoint")
    }
    fn checkpoint_delete(&self, _: &str, _: &str, _: bool) -> HvResult<()> {
        Self::unsupported("checkpoint")
    }
    fn reconnect(&self) -> HvResult<ConnectionId> {
        Self::unsupported("reconnect")
    }
}

fn domain_xml(vcpus: u32, devices: &str) -> String {
    format!(
        r#"<domain type='test'><name>ns_vm</name><memory unit='KiB'>524288</memory>
  <vcpu placement='static' current='{vcpus}'>2</vcpu>
  <os><type>hvm</type></os>
  <devices>
    <controller type='scsi' index='0'/>
    <memory model='virtio-mem'><target><size unit='KiB'>327680</size><node>0</node><block unit='KiB'>2048</block><requested unit='KiB'>0</requested></target><alias name='virtiomem0'/></memory>
    {devices}
  </devices></domain>"#
    )
}

fn disk(name: &str, dir: &str, target: &str) -> String {
    format!(
        "<disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='{dir}/{name}.img'/><target dev='{target}' bus='scsi'/><alias name='ua-{name}'/></disk>"
    )
}

struct Job {
    change: LiveChange,
    removals: Sender<String>,
    progress: Receiver<Progress>,
}

fn job(desired: &str, hotplug_dir: &str, guest_memory: Option<u64>, timeout: Duration) -> Job {
    let (removals_tx, removals) = unbounded();
    let (progress_tx, progress) = unbounded();
    Job {
        change: LiveChange {
            vmi_domain: Domain::from_xml(desired).unwrap(),
            hotplug_dir: PathBuf::from(hotplug_dir),
            guest_memory: guest_memory.map(|g| (g, "spec.domain.memory.guest".into())),
            disk_paths: BTreeMap::new(),
            affect: Affect::LIVE_AND_CONFIG,
            check_host: false,
            unprivileged: None,
            detach_timeout: timeout,
            removals,
            progress: progress_tx.into(),
            tcg: plan::Tcg::default(),
            unread_stack: None,
        },
        removals: removals_tx,
        progress,
    }
}

fn phases(progress: &Receiver<Progress>) -> Vec<String> {
    progress
        .try_iter()
        .map(|Progress::Volume(v)| format!("{} {:?}", v.name, v.phase))
        .collect()
}

/// A hotplug directory with `names` as mounted images.
fn images(tag: &str, names: &[&str]) -> ScratchDir {
    let dir = ScratchDir::new(&format!("hp-{tag}"));
    for name in names {
        std::fs::write(dir.join(format!("{name}.img")), vec![0u8; 4096]).unwrap();
    }
    dir
}

#[test]
fn steps_run_in_order_and_report_what_was_done() {
    let hotplug_dir = images("order", &["hp2"]);
    let dir = hotplug_dir.display().to_string();
    let hv = Scripted::new(domain_xml(1, &disk("hp1", &dir, "sda")));
    let j = job(
        &domain_xml(2, &disk("hp2", &dir, "sdb")),
        &dir,
        Some(256 * MIB),
        Duration::from_secs(5),
    );
    // The guest releases hp1 as soon as it is asked.
    j.removals.send("ua-hp1".into()).unwrap();
    let done = apply_live(&hv, "ns_vm", &j.change, None).unwrap();
    let names: Vec<&str> = done.iter().map(|c| c.change).collect();
    assert_eq!(
        names,
        ["detach-disk", "attach-disk", "set-vcpus", "resize-memory"]
    );
    assert_eq!(
        hv.calls(),
        [
            "detach ua-hp1",
            "attach ua-hp2",
            "set-vcpus 2",
            "update true Affect { live: true, config: true }"
        ]
    );
    assert_eq!(
        phases(&j.progress),
        [
            "hp1 Detaching",
            "hp1 Detached",
            "hp2 Attaching",
            "hp2 Ready"
        ]
    );
    assert_eq!(done[3].from, Some(192 * MIB));
    assert_eq!(done[3].to, Some(256 * MIB));
}

#[test]
fn a_guest_that_keeps_a_disk_gets_timeout_and_the_disk_stays_detaching() {
    let hotplug_dir = images("timeout", &[]);
    let dir = hotplug_dir.display().to_string();
    let hv = Scripted::new(domain_xml(1, &disk("hp1", &dir, "sda")));
    let j = job(&domain_xml(1, ""), &dir, None, Duration::from_millis(200));
    // Another device's removal is not this one's.
    j.removals.send("ua-other".into()).unwrap();
    let err = apply_live(&hv, "ns_vm", &j.change, None).unwrap_err();
    assert_eq!(err.class, ErrorClass::Timeout);
    assert!(
        err.desc.starts_with("sync: detach-disk hp1 (change 1 of 1) failed: the guest has not released it after 0 s; it stays attached"),
        "{}",
        err.desc
    );
    assert!(
        err.desc.contains("nothing was changed before it"),
        "{}",
        err.desc
    );
    assert_eq!(phases(&j.progress), ["hp1 Detaching", "hp1 Detaching"]);
}

#[test]
fn a_removal_whose_event_was_lost_is_seen_in_the_live_xml() {
    let hotplug_dir = images("lost", &[]);
    let dir = hotplug_dir.display().to_string();
    let hv = Scripted::new(domain_xml(1, &disk("hp1", &dir, "sda")));
    let j = job(&domain_xml(1, ""), &dir, None, Duration::from_millis(100));
    // The guest released it, but no event came.
    let released = domain_xml(1, "");
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(20));
            *hv.xml.lock().unwrap() = released;
        });
        let done = apply_live(&hv, "ns_vm", &j.change, None).unwrap();
        assert_eq!(done.len(), 1);
    });
    assert_eq!(phases(&j.progress), ["hp1 Detaching", "hp1 Detached"]);
}

#[test]
fn a_failure_midway_keeps_what_was_done_and_says_so() {
    let hotplug_dir = images("midway", &["hp2", "hp3"]);
    let dir = hotplug_dir.display().to_string();
    let mut hv = Scripted::new(domain_xml(1, &disk("hp1", &dir, "sda")));
    hv.refuse = vec!["ua-hp3"];
    let desired = domain_xml(
        2,
        &format!("{}{}", disk("hp2", &dir, "sdb"), disk("hp3", &dir, "sdc")),
    );
    let j = job(&desired, &dir, None, Duration::from_secs(5));
    j.removals.send("ua-hp1".into()).unwrap();
    let err = apply_live(&hv, "ns_vm", &j.change, None).unwrap_err();
    assert_eq!(err.class, ErrorClass::Internal);
    assert_eq!(
        err.desc,
        "sync: attach-disk hp3 (change 3 of 4) failed: libvirt call failed: internal error: unable to execute QEMU command 'device_add': Bus 'pci.9' not found; done before it, and kept: detach-disk hp1, attach-disk hp2; the 1 change(s) after it were not tried"
    );
    assert_eq!(
        err.causes,
        [
            "virDomainAttachDeviceFlags failed: internal error: unable to execute QEMU command 'device_add': Bus 'pci.9' not found"
        ]
    );
    // Nothing after the failed step was tried.
    assert_eq!(
        hv.calls(),
        ["detach ua-hp1", "attach ua-hp2", "attach ua-hp3"]
    );
    assert_eq!(
        phases(&j.progress),
        [
            "hp1 Detaching",
            "hp1 Detached",
            "hp2 Attaching",
            "hp2 Ready",
            "hp3 Attaching",
            "hp3 Detached"
        ]
    );
}

#[test]
fn refusals_and_missing_images_touch_nothing() {
    let hotplug_dir = images("refuse", &["hp2"]);
    let dir = hotplug_dir.display().to_string();
    let hv = Scripted::new(domain_xml(1, ""));
    // hp1's image is not mounted; hp2's is, but hp1 is checked first.
    let desired = domain_xml(
        2,
        &format!("{}{}", disk("hp2", &dir, "sdb"), disk("hp1", &dir, "sda")),
    );
    let j = job(&desired, &dir, None, Duration::from_secs(5));
    let err = apply_live(&hv, "ns_vm", &j.change, None).unwrap_err();
    assert_eq!(err.class, ErrorClass::InvalidArgument);
    assert!(
        err.desc.starts_with("sync: volume \"hp1\": image "),
        "{}",
        err.desc
    );
    assert!(err.desc.contains(&format!("{dir}/hp1.img")), "{}", err.desc);
    // Memory above the maximum: refused with its path.
    let j = job(
        &domain_xml(2, ""),
        &dir,
        Some(1024 * MIB),
        Duration::from_secs(5),
    );
    let err = apply_live(&hv, "ns_vm", &j.change, None).unwrap_err();
    assert_eq!(err.class, ErrorClass::InvalidArgument);
    assert!(
        err.desc.starts_with(
            "arguments.vmi.spec.domain.memory.guest: 1024Mi is above the maximum of 512Mi"
        ),
        "{}",
        err.desc
    );
    assert!(hv.calls().is_empty(), "{:?}", hv.calls());
}

/// A host with PCI device 0000:81:00.1 in IOMMU group 42, whose node in
/// /dev/vfio has `mode` (owned by whoever runs the test).
fn vfio_host(root: &ScratchDir, mode: u32, memlock: Option<u64>) -> VfioHost {
    use std::os::unix::fs::PermissionsExt;
    let groups = root.join("kernel/iommu_groups/42");
    let device = root.join("pci/0000:81:00.1");
    std::fs::create_dir_all(&groups).unwrap();
    std::fs::create_dir_all(&device).unwrap();
    std::fs::create_dir_all(root.join("dev")).unwrap();
    std::os::unix::fs::symlink(&groups, device.join("iommu_group")).unwrap();
    for node in ["vfio", "42"] {
        let path = root.join("dev").join(node);
        std::fs::write(&path, b"").unwrap();
        let m = if node == "vfio" { 0o666 } else { mode };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m)).unwrap();
    }
    VfioHost {
        pci: root.join("pci"),
        mdev: root.join("mdev"),
        dev: root.join("dev"),
        memlock,
    }
}

const GPU: &str = r#"<hostdev mode="subsystem" type="pci" managed="no"><source><address domain="0x0000" bus="0x81" slot="0x00" function="0x1"/></source><alias name="ua-gpu-gpu1"/></hostdev>"#;

#[test]
fn non_root_mode_refuses_a_host_device_it_cannot_use_before_any_step() {
    let hotplug_dir = images("nonroot", &[]);
    let dir = hotplug_dir.display().to_string();
    // Someone other than the node's owner, in none of its groups.
    let (uid, _) = crate::os::effective_ids();
    let other = Identity {
        uid: uid + 1,
        groups: vec![uid + 1],
    };
    let live = domain_xml(1, &disk("hp1", &dir, "sda"));
    // The VMI drops hp1 and adds a GPU: the detach comes first, so a
    // refusal found only at the attach would leave hp1 gone.
    let desired = domain_xml(1, GPU);
    let run = |host: VfioHost| {
        let hv = Scripted::new(live.clone());
        let mut j = job(&desired, &dir, None, Duration::from_secs(5));
        j.change.unprivileged = Some((host, other.clone()));
        j.removals.send("ua-hp1".into()).unwrap();
        let result = apply_live(&hv, "ns_vm", &j.change, None);
        (result, hv.calls())
    };

    let root = ScratchDir::new("hp-vfio-mode");
    let host = vfio_host(&root, 0o600, None);
    let group = host.dev.join("42");
    let (result, calls) = run(host);
    let err = result.unwrap_err();
    assert_eq!(err.class, ErrorClass::Unavailable);
    assert_eq!(
        err.desc,
        format!(
            "sync: host device \"gpu-gpu1\" (PCI device 0000:81:00.1): QEMU runs as the launcher's unprivileged user (uid {}) and needs {} readable and writable (it is owned by uid {uid}, group {}, mode 0600); give the node to this user, as KubeVirt's device plugins do, or run the launcher as root",
            uid + 1,
            group.display(),
            crate::os::effective_ids().1
        )
    );
    assert!(calls.is_empty(), "{calls:?}");

    // The node is usable, but the guest's 512 MiB (plus 1 GiB) cannot be
    // locked under a 64 MiB hard limit.
    let root = ScratchDir::new("hp-vfio-memlock");
    let (result, calls) = run(vfio_host(&root, 0o666, Some(64 * MIB)));
    let err = result.unwrap_err();
    assert_eq!(err.class, ErrorClass::Unavailable);
    assert!(
        err.desc.contains(
            "needs a locked-memory limit (RLIMIT_MEMLOCK) of at least 1536 MiB, because VFIO pins the guest's memory (its 512 MiB plus 1 GiB, as libvirt sets it), and the launcher's hard limit is 64 MiB"
        ),
        "{}",
        err.desc
    );
    assert!(err.desc.ends_with("raise the hard limit for the launcher (prlimit --memlock, or the container's ulimit), or run the launcher as root"), "{}", err.desc);
    assert!(calls.is_empty(), "{calls:?}");

    // What the user can use is plugged in as for root.
    let root = ScratchDir::new("hp-vfio-ok");
    let (result, calls) = run(vfio_host(&root, 0o666, Some(2048 * MIB)));
    let done: Vec<&str> = result.unwrap().iter().map(|c| c.change).collect();
    assert_eq!(done, ["detach-disk", "attach-host-device"]);
    assert_eq!(calls, ["detach ua-hp1", "attach ua-gpu-gpu1"]);
}

/// KubeVirt's `LinkRefresh` after a migration: each named interface's link
/// goes down, then back as it was; an unknown name changes nothing.
#[test]
fn link_refresh_takes_each_named_link_down_and_up_again() {
    let live = r#"<domain type="qemu"><name>d</name><devices>
        <interface type="ethernet"><mac address="02:00:00:00:00:01"/><target dev="tap0" managed="no"/><model type="virtio-non-transitional"/><alias name="ua-default"/></interface>
        <interface type="ethernet"><mac address="02:00:00:00:00:02"/><target dev="tap1" managed="no"/><model type="virtio-non-transitional"/><alias name="ua-blue"/></interface>
        </devices></domain>"#;
    let hv = Scripted::new(live.to_string());
    let refreshed = crate::manager::link_refresh::refresh(&hv, "d", &["blue".to_string()]).unwrap();
    assert_eq!(refreshed, ["blue"]);
    let updates = hv.updates.lock().unwrap().clone();
    assert_eq!(updates.len(), 2, "{updates:?}");
    assert!(
        updates[0].contains("tap1")
            && updates[0].contains("ua-blue")
            && updates[0].contains(r#"<link state="down"/>"#),
        "{}",
        updates[0]
    );
    assert!(
        updates[1].contains("ua-blue") && !updates[1].contains("<link"),
        "{}",
        updates[1]
    );
    let unknown = crate::manager::link_refresh::refresh(&hv, "d", &["red".to_string()])
        .err()
        .map(|e| (e.class, e.desc));
    assert_eq!(
        unknown,
        Some((
            ErrorClass::InvalidArgument,
            "refresh_links: the domain has no interface \"red\" (alias ua-red)".to_string()
        ))
    );
    assert_eq!(hv.updates.lock().unwrap().len(), 2);
}

/// An emulated domain with 2 of 2 vCPUs; the VMI asks for 1.
fn emulated_two_to_one(timeout: Duration, no_removal: Option<String>) -> (Scripted, Job) {
    let hv = Scripted::new(domain_xml(2, "").replace("type='test'", "type='qemu'"));
    let mut j = job(
        &domain_xml(1, "").replace("type='test'", "type='qemu'"),
        "/nonexistent",
        None,
        timeout,
    );
    j.change.tcg = plan::Tcg {
        no_removal,
        vcpu_threads: Some(2),
    };
    (hv, j)
}

#[test]
fn a_vcpu_removal_under_tcg_that_timed_out_is_asked_for_again_until_libvirt_counts_it() {
    let (hv, j) = emulated_two_to_one(Duration::from_secs(20), None);
    // libvirt 11.3: the first request and the first asked again time out
    // (the guest has not ejected the vCPU yet); the next one counts it.
    *hv.vcpu_timeouts.lock().unwrap() = 2;
    let done = apply_live(&hv, "ns_vm", &j.change, None).unwrap();
    assert_eq!(done, [Step::SetVcpus { from: 2, to: 1 }.change()]);
    // Asked 3 times live, then the persistent definition.
    assert_eq!(hv.calls(), ["set-vcpus 1"; 4]);
    assert!(hv.xml.lock().unwrap().contains("current='1'"));
}

#[test]
fn a_vcpu_removal_that_timed_out_is_not_asked_for_again_where_the_stack_cannot() {
    // A stack that cannot take vCPUs away under TCG never gets here (the
    // plan refuses); under KVM libvirt finishes the removal on its own:
    // the wait only watches.
    let (hv, mut j) = emulated_two_to_one(Duration::from_millis(1500), None);
    j.change.vmi_domain.domain_type = "kvm".into();
    *hv.xml.lock().unwrap() = domain_xml(2, "").replace("type='test'", "type='kvm'");
    *hv.vcpu_timeouts.lock().unwrap() = 5;
    let err = apply_live(&hv, "ns_vm", &j.change, None).unwrap_err();
    assert_eq!(err.class, ErrorClass::Timeout);
    assert!(
        err.desc.contains("has not given the vCPUs back"),
        "{}",
        err.desc
    );
    assert_eq!(hv.calls(), ["set-vcpus 1"]);
}

#[test]
fn a_stack_whose_hypervisor_version_is_unread_is_read_by_the_job_and_a_failed_read_refuses_vcpu_removal()
 {
    // The manager's read had not answered: the job reads the version (this
    // hypervisor cannot tell it), so taking a vCPU away under TCG is
    // refused, saying why; nothing was changed.
    let (hv, mut j) = emulated_two_to_one(Duration::from_secs(1), None);
    j.change.unread_stack = Some(("11.3.0".into(), crate::hypervisor::DriverKind::Qemu));
    j.change.read_unknown_stack(&hv);
    assert_eq!(j.change.unread_stack, None);
    let why = j.change.tcg.no_removal.clone().unwrap();
    assert!(
        why.contains("libvirt is 11.3.0 with a hypervisor whose version cannot be read"),
        "{why}"
    );
    let err = apply_live(&hv, "ns_vm", &j.change, None).unwrap_err();
    assert_eq!(err.class, ErrorClass::InvalidArgument);
    assert!(err.desc.contains("cannot be read"), "{}", err.desc);
    assert!(hv.calls().is_empty());
}

fn synced(action: SyncAction, changes: Vec<Change>) -> Synced {
    Synced {
        domain: "ns_vm".into(),
        action,
        started_paused: false,
        after: None,
        changes,
        steps: Default::default(),
    }
}

#[test]
fn the_vcpu_threads_qemu_made_are_counted_from_the_start_on() {
    let (progress, _rx) = unbounded();
    let mut state = HotplugState::new(progress.into());
    assert_eq!(state.vcpu_threads, None);
    let vmi = serde_json::json!({});
    let two = Domain::from_xml(&domain_xml(2, "")).unwrap();
    let one = Domain::from_xml(&domain_xml(1, "")).unwrap();
    // Started with 2.
    state.sync_started(&vmi, &two);
    assert!(state.sync_ended(Some(&synced(SyncAction::DefinedAndStarted, vec![])), false));
    assert_eq!(state.vcpu_threads, Some(2));
    // Down to 1 makes none; back to 2 makes one.
    state.sync_started(&vmi, &one);
    let down = Step::SetVcpus { from: 2, to: 1 }.change();
    state.sync_ended(Some(&synced(SyncAction::None, vec![down])), false);
    assert_eq!(state.vcpu_threads, Some(2));
    state.sync_started(&vmi, &two);
    let up = Step::SetVcpus { from: 1, to: 2 }.change();
    state.sync_ended(Some(&synced(SyncAction::None, vec![up])), false);
    assert_eq!(state.vcpu_threads, Some(3));
    // A refused sync touched nothing; one that failed asking for fewer
    // added none.
    state.sync_started(&vmi, &two);
    state.sync_ended(None, true);
    state.sync_started(&vmi, &one);
    state.sync_ended(None, false);
    assert_eq!(state.vcpu_threads, Some(3));
    // One that failed asking for more may have added some: unknown.
    state.sync_started(&vmi, &one);
    let down = Step::SetVcpus { from: 2, to: 1 }.change();
    state.sync_ended(Some(&synced(SyncAction::None, vec![down])), false);
    assert_eq!(state.vcpu_threads, Some(3));
    state.sync_started(&vmi, &two);
    state.sync_ended(None, false);
    assert_eq!(state.vcpu_threads, None);
    // Until the domain starts again.
    state.sync_started(&vmi, &one);
    state.sync_ended(
        Some(&synced(SyncAction::RedefinedAndStarted, vec![])),
        false,
    );
    assert_eq!(state.vcpu_threads, Some(1));
}
