use std::collections::BTreeMap;
use std::path::Path;

use super::*;

const HOTPLUG: &str = "/run/kv/hotplug-disks";

/// A running domain as libvirt describes it: a root disk, a scsi
/// controller, one NIC, 1 of 2 vCPUs, 192 MiB booted with a 320 MiB
/// virtio-mem device (64 MiB requested).
fn live_xml(extra_devices: &str) -> String {
    format!(
        r#"<domain type='qemu' id='3'>
  <name>ns_vm</name>
  <memory unit='KiB'>524288</memory>
  <currentMemory unit='KiB'>262144</currentMemory>
  <vcpu placement='static' current='1'>2</vcpu>
  <vcpus><vcpu id='0' enabled='yes' hotpluggable='no'/><vcpu id='1' enabled='no' hotpluggable='yes'/></vcpus>
  <os><type arch='x86_64' machine='pc-q35-7.2'>hvm</type></os>
  <cpu><numa><cell id='0' cpus='0-1' memory='196608' unit='KiB'/></numa></cpu>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='/run/kv/disk-data/root/disk.qcow2' index='2'/>
      <backingStore type='file' index='3'><format type='raw'/><source file='/base.img'/><backingStore/></backingStore>
      <target dev='vda' bus='virtio'/>
      <alias name='ua-root'/>
      <address type='pci' domain='0x0000' bus='0x03' slot='0x00' function='0x0'/>
    </disk>
    <controller type='scsi' index='0' model='virtio-non-transitional'><alias name='scsi0'/></controller>
    <interface type='user'>
      <mac address='52:54:00:7e:57:01'/>
      <model type='virtio-non-transitional'/>
      <alias name='ua-default'/>
    </interface>
    <memory model='virtio-mem'>
      <target><size unit='KiB'>327680</size><node>0</node><block unit='KiB'>2048</block><requested unit='KiB'>65536</requested><current unit='KiB'>65536</current><address base='0x100000000'/></target>
      <alias name='virtiomem0'/>
      <address type='pci' domain='0x0000' bus='0x05' slot='0x00' function='0x0'/>
    </memory>
    {extra_devices}
  </devices>
</domain>"#
    )
}

fn domain(xml: &str) -> Domain {
    Domain::from_xml(xml).unwrap_or_else(|e| panic!("{e}"))
}

/// The converter's view: what the VMI asks for.
fn desired_xml(vcpus_enabled: u32, extra_devices: &str) -> String {
    let vcpus: String = (0..2)
        .map(|id| {
            format!(
                "<vcpu id='{id}' enabled='{}' hotpluggable='{}'/>",
                if id < vcpus_enabled { "yes" } else { "no" },
                if id > 0 { "yes" } else { "no" }
            )
        })
        .collect();
    format!(
        r#"<domain type='qemu'>
  <name>ns_vm</name>
  <memory unit='b'>536870912</memory>
  <vcpu placement='static'>2</vcpu>
  <vcpus>{vcpus}</vcpus>
  <os><type arch='x86_64' machine='q35'>hvm</type></os>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='/run/kv/disk-data/root/disk.qcow2'/>
      <target dev='vda' bus='virtio'/>
      <alias name='ua-root'/>
    </disk>
    <interface type='user'>
      <mac address='52:54:00:7e:57:01'/>
      <model type='virtio-non-transitional'/>
      <alias name='ua-default'/>
    </interface>
    {extra_devices}
  </devices>
</domain>"#
    )
}

fn plan_of(live: &str, desired: &str, guest: Option<u64>) -> Result<Vec<Step>, NotLive> {
    plan_under(live, desired, guest, Tcg::default())
}

fn plan_under(
    live: &str,
    desired: &str,
    guest: Option<u64>,
    tcg: Tcg,
) -> Result<Vec<Step>, NotLive> {
    let live = domain(live);
    let desired = domain(desired);
    let mut disk_paths = BTreeMap::new();
    disk_paths.insert(
        "hp1".to_string(),
        "spec.domain.devices.disks[1]".to_string(),
    );
    disk_paths.insert(
        "hp2".to_string(),
        "spec.domain.devices.disks[2]".to_string(),
    );
    plan(
        &live,
        &Desired {
            domain: &desired,
            hotplug_dir: Path::new(HOTPLUG),
            guest_memory: guest.map(|g| (g, "spec.domain.memory.guest".to_string())),
            disk_paths,
            tcg,
        },
    )
}

const MIB: u64 = 1 << 20;

fn hotplug_disk(name: &str, target: &str, bus: &str) -> String {
    format!(
        "<disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='{HOTPLUG}/{name}.img'/><target dev='{target}' bus='{bus}'/><alias name='ua-{name}'/></disk>"
    )
}

#[test]
fn nothing_to_do_when_the_domain_matches() {
    let steps = plan_of(&live_xml(""), &desired_xml(1, ""), Some(256 * MIB)).unwrap();
    assert_eq!(steps, []);
}

#[test]
fn a_new_hotplug_disk_is_attached_on_a_free_target_and_scsi_unit() {
    // The converter named it sdb (a cdrom before it in the VMI); the live
    // domain has sdb in use, so it moves to the first free name.
    let live = live_xml(&format!(
        "<disk type='file' device='cdrom'><source file='/x.iso'/><target dev='sda' bus='sata'/><alias name='ua-ci'/></disk>{}",
        hotplug_disk("hp0", "sdb", "scsi").replace("<target dev='sdb' bus='scsi'/>", "<target dev='sdb' bus='scsi'/><address type='drive' controller='0' bus='0' target='0' unit='1'/>")
    ));
    let desired = desired_xml(
        1,
        &format!(
            "<disk type='file' device='cdrom'><source file='/x.iso'/><target dev='sda' bus='sata'/><alias name='ua-ci'/></disk>{}{}",
            hotplug_disk("hp0", "sdb", "scsi"),
            hotplug_disk("hp1", "sdb", "scsi")
        ),
    );
    let steps = plan_of(&live, &desired, None).unwrap();
    assert_eq!(steps.len(), 1, "{steps:?}");
    let Step::AttachDisk {
        volume,
        alias,
        target,
        bus,
        image,
        kind,
        xml,
    } = &steps[0]
    else {
        panic!("{steps:?}")
    };
    assert_eq!(
        (
            volume.as_str(),
            alias.as_str(),
            target.as_str(),
            bus.as_str()
        ),
        ("hp1", "ua-hp1", "sdc", "scsi")
    );
    assert_eq!(image, &format!("{HOTPLUG}/hp1.img"));
    assert_eq!(kind, &ImageKind::File);
    let disk: Disk = crate::domxml::read::from_str(xml).unwrap();
    assert_eq!(disk.target.dev, "sdc");
    let address = disk.address.unwrap();
    assert_eq!(
        (
            address.address_type.as_str(),
            address.controller.as_deref(),
            address.unit.as_deref()
        ),
        ("drive", Some("0"), Some("2"))
    );
    assert_eq!(steps[0].change().change, "attach-disk");
    assert_eq!(steps[0].describe(), "attach-disk hp1");
}

#[test]
fn a_virtio_hotplug_disk_keeps_a_free_name() {
    let desired = desired_xml(1, &hotplug_disk("hp1", "vdb", "virtio"));
    let steps = plan_of(&live_xml(""), &desired, None).unwrap();
    assert!(
        matches!(&steps[..], [Step::AttachDisk { target, .. }] if target == "vdb"),
        "{steps:?}"
    );
}

#[test]
fn a_removed_hotplug_disk_is_detached_with_its_live_element() {
    let live = live_xml(&hotplug_disk("hp1", "vdb", "virtio").replace(
        "<alias",
        "<address type='pci' domain='0x0000' bus='0x07' slot='0x00' function='0x0'/><alias",
    ));
    let steps = plan_of(&live, &desired_xml(1, ""), None).unwrap();
    let [
        Step::DetachDisk {
            volume,
            alias,
            target,
            xml,
        },
    ] = &steps[..]
    else {
        panic!("{steps:?}")
    };
    assert_eq!(
        (volume.as_str(), alias.as_str(), target.as_str()),
        ("hp1", "ua-hp1", "vdb")
    );
    assert!(xml.contains("bus=\"0x07\""), "{xml}");
    assert!(steps[0].is_detach());
    // A disk that is not hotplugged is never detached, and one the running
    // domain lacks is not attached: the VMI needs a restart.
    let desired = desired_xml(1, "").replace("ua-root", "ua-other");
    let err = plan_of(&live_xml(""), &desired, None).unwrap_err();
    assert_eq!(err.path, "spec.domain.devices.disks");
    assert!(err.message.contains("needs a restart"), "{}", err.message);
}

#[test]
fn detaches_come_before_attaches() {
    let live = live_xml(&hotplug_disk("hp1", "vdb", "virtio"));
    let desired = desired_xml(2, &hotplug_disk("hp2", "vdc", "virtio"));
    let steps = plan_of(&live, &desired, None).unwrap();
    let names: Vec<String> = steps.iter().map(Step::describe).collect();
    assert_eq!(
        names,
        ["detach-disk hp1", "attach-disk hp2", "set-vcpus 1 → 2"]
    );
}

#[test]
fn disks_that_cannot_be_hotplugged_are_refused_with_their_path() {
    let sata = desired_xml(1, &hotplug_disk("hp1", "sdb", "sata"));
    let err = plan_of(&live_xml(""), &sata, None).unwrap_err();
    assert_eq!(err.path, "spec.domain.devices.disks[1].disk.bus");
    assert!(
        err.message.contains("only scsi and virtio"),
        "{}",
        err.message
    );
    let not_hotplug = desired_xml(
        1,
        "<disk type='file' device='disk'><source file='/run/kv/vmi-disks/hp2/disk.img'/><target dev='vdb' bus='virtio'/><alias name='ua-hp2'/></disk>",
    );
    let err = plan_of(&live_xml(""), &not_hotplug, None).unwrap_err();
    assert_eq!(err.path, "spec.domain.devices.disks[2]");
    assert!(err.message.contains("not hotpluggable"), "{}", err.message);
    let no_scsi = live_xml("").replace(
        "<controller type='scsi' index='0' model='virtio-non-transitional'><alias name='scsi0'/></controller>",
        "",
    );
    let err = plan_of(
        &no_scsi,
        &desired_xml(1, &hotplug_disk("hp1", "sda", "scsi")),
        None,
    )
    .unwrap_err();
    assert!(
        err.message.contains("no virtio-scsi controller"),
        "{}",
        err.message
    );
}

#[test]
fn interfaces_are_plugged_and_unplugged_by_alias() {
    let nic = "<interface type='user'><mac address='02:00:00:00:00:09'/><model type='virtio-non-transitional'/><alias name='ua-hot'/></interface>";
    let steps = plan_of(&live_xml(""), &desired_xml(1, nic), None).unwrap();
    let [Step::AttachInterface { name, mac, xml, .. }] = &steps[..] else {
        panic!("{steps:?}")
    };
    assert_eq!(
        (name.as_str(), mac.as_deref()),
        ("hot", Some("02:00:00:00:00:09"))
    );
    assert!(xml.starts_with("<interface type=\"user\">"), "{xml}");
    let steps = plan_of(&live_xml(nic), &desired_xml(1, ""), None).unwrap();
    assert!(matches!(&steps[..], [Step::DetachInterface { name, .. }] if name == "hot"));
}

#[test]
fn host_devices_are_plugged_and_unplugged_by_alias() {
    let dev = "<hostdev mode='subsystem' type='pci' managed='no'><source><address domain='0x0000' bus='0x81' slot='0x00' function='0x1'/></source><alias name='ua-sriov-net1'/></hostdev>";
    let steps = plan_of(&live_xml(""), &desired_xml(1, dev), None).unwrap();
    let [
        Step::AttachHostDevice {
            name,
            host_address,
            host_type,
            ..
        },
    ] = &steps[..]
    else {
        panic!("{steps:?}")
    };
    assert_eq!(
        (name.as_str(), host_address.as_str(), host_type.as_str()),
        ("sriov-net1", "0000:81:00.1", "pci")
    );
    let steps = plan_of(&live_xml(dev), &desired_xml(1, ""), None).unwrap();
    assert!(matches!(&steps[..], [Step::DetachHostDevice { .. }]));
    // libvirt's own host devices (no user alias) are left alone.
    let theirs = dev.replace("ua-sriov-net1", "hostdev0");
    assert!(
        plan_of(&live_xml(&theirs), &desired_xml(1, ""), None)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn vcpus_change_within_the_maximum() {
    let steps = plan_of(&live_xml(""), &desired_xml(2, ""), None).unwrap();
    assert_eq!(steps, [Step::SetVcpus { from: 1, to: 2 }]);
    let three = desired_xml(2, "").replace(
        "<vcpu placement='static'>2</vcpu>",
        "<vcpu placement='static'>3</vcpu>",
    );
    let err = plan_of(&live_xml(""), &three, None).unwrap_err();
    assert_eq!(err.path, "spec.domain.cpu");
}

/// The live domain with both of its 2 vCPUs enabled.
fn two_enabled() -> String {
    live_xml("").replace(
        "<vcpu id='1' enabled='no' hotpluggable='yes'/>",
        "<vcpu id='1' enabled='yes' hotpluggable='yes'/>",
    )
}

#[test]
fn vcpus_go_down_live_under_kvm_and_under_tcg_where_the_stack_can() {
    let two = two_enabled();
    // Under KVM libvirt unplugs the second one, whatever the stack.
    let kvm = two.replace("<domain type='qemu'", "<domain type='kvm'");
    let old_stack = Tcg {
        no_removal: tcg_vcpu_removal("9.0.0", "QEMU 7.2.0"),
        vcpu_threads: None,
    };
    let steps = plan_under(&kvm, &desired_xml(1, ""), None, old_stack.clone()).unwrap();
    assert_eq!(steps, [Step::SetVcpus { from: 2, to: 1 }]);
    // Emulated on libvirt 9.0 / QEMU 7.2, libvirt would count the vCPU
    // for good: refused, nothing planned, the versions named.
    let err = plan_under(&two, &desired_xml(1, ""), None, old_stack).unwrap_err();
    assert_eq!(err.path, "spec.domain.cpu.sockets");
    assert!(
        err.message.starts_with(
            "going from 2 to 1 vCPUs needs a restart of the VMI: the domain is emulated (TCG)"
        ),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("needs libvirt 11.3.0 and QEMU 10.0.0 or newer; this launcher's libvirt is 9.0.0 with QEMU 7.2.0"),
        "{}",
        err.message
    );
    // libvirt 11.3 / QEMU 10.0 with the count known: planned.
    let new_stack = Tcg {
        no_removal: tcg_vcpu_removal("11.3.0", "QEMU 10.0.2"),
        vcpu_threads: Some(2),
    };
    assert_eq!(new_stack.no_removal, None);
    let steps = plan_under(&two, &desired_xml(1, ""), None, new_stack.clone()).unwrap();
    assert_eq!(steps, [Step::SetVcpus { from: 2, to: 1 }]);
    // Without the count (the launcher did not start the domain): refused.
    let unknown = Tcg {
        vcpu_threads: None,
        ..new_stack
    };
    let err = plan_under(&two, &desired_xml(1, ""), None, unknown).unwrap_err();
    assert_eq!(err.path, "spec.domain.cpu.sockets");
    assert!(
        err.message
            .contains("this launcher does not know how many vCPUs QEMU made"),
        "{}",
        err.message
    );
}

#[test]
fn more_vcpus_under_tcg_only_while_qemu_has_translation_contexts_left() {
    // 1 of 2 enabled; QEMU made 1 thread (at start): one more fits.
    let tcg = |threads| Tcg {
        no_removal: None,
        vcpu_threads: threads,
    };
    let steps = plan_under(&live_xml(""), &desired_xml(2, ""), None, tcg(Some(1))).unwrap();
    assert_eq!(steps, [Step::SetVcpus { from: 1, to: 2 }]);
    // Made 2 already (one taken away since): a third would abort QEMU.
    let err = plan_under(&live_xml(""), &desired_xml(2, ""), None, tcg(Some(2))).unwrap_err();
    assert_eq!(err.path, "spec.domain.cpu.sockets");
    assert_eq!(
        err.message,
        "going from 1 to 2 vCPUs needs a restart of the VMI: the domain is emulated (TCG), QEMU made 2 vCPUs since the domain started and each holds one of its 2 TCG translation contexts for good (a vCPU taken away live does not give its context back): 1 more would make QEMU abort and the guest with it"
    );
    // Unknown: as before (no removal can have happened through this
    // launcher without the count).
    assert!(plan_under(&live_xml(""), &desired_xml(2, ""), None, tcg(None)).is_ok());
    // KVM has no such contexts.
    let kvm = live_xml("").replace("<domain type='qemu'", "<domain type='kvm'");
    assert!(plan_under(&kvm, &desired_xml(2, ""), None, tcg(Some(2))).is_ok());
}

#[test]
fn the_stack_that_can_take_a_vcpu_away_under_tcg() {
    assert_eq!(tcg_vcpu_removal("11.3.0", "QEMU 10.0.2"), None);
    assert_eq!(tcg_vcpu_removal("12.0.0", "QEMU 10.1.0"), None);
    for (libvirt, qemu) in [
        ("9.0.0", "QEMU 7.2.0"),
        ("11.2.0", "QEMU 10.0.2"),
        ("11.3.0", "QEMU 9.2.0"),
        ("", "QEMU 10.0.2"),
        ("11.3.0", "FAKE 0.0.0"),
    ] {
        let why = tcg_vcpu_removal(libvirt, qemu).unwrap_or_else(|| panic!("{libvirt} {qemu}"));
        assert!(
            why.contains("needs libvirt 11.3.0 and QEMU 10.0.0"),
            "{why}"
        );
    }
}

#[test]
fn virtio_mem_requests_the_difference_from_boot_memory() {
    let steps = plan_of(&live_xml(""), &desired_xml(1, ""), Some(320 * MIB)).unwrap();
    let [Step::ResizeMemory { from, to, xml }] = &steps[..] else {
        panic!("{steps:?}")
    };
    assert_eq!((*from, *to), (256 * MIB, 320 * MIB));
    let device: MemoryDevice = crate::domxml::read::from_str(xml).unwrap();
    assert_eq!(
        device.target.requested.and_then(|r| r.to_bytes()),
        Some(128 * MIB)
    );
    assert!(device.target.current.is_none());
    // libvirt 9.4 and newer refuse an update that drops the base address.
    assert_eq!(
        device.target.address.and_then(|a| a.base).as_deref(),
        Some("0x100000000")
    );
    assert_eq!(device.alias.map(|a| a.name).as_deref(), Some("virtiomem0"));
    // Back to what it booted with.
    let steps = plan_of(&live_xml(""), &desired_xml(1, ""), Some(192 * MIB)).unwrap();
    assert!(matches!(&steps[..], [Step::ResizeMemory { to, .. }] if *to == 192 * MIB));
}

#[test]
fn memory_outside_the_device_or_off_its_blocks_is_refused() {
    let above = plan_of(&live_xml(""), &desired_xml(1, ""), Some(600 * MIB)).unwrap_err();
    assert_eq!(above.path, "spec.domain.memory.guest");
    assert!(
        above.message.contains("above the maximum of 512Mi"),
        "{}",
        above.message
    );
    let below = plan_of(&live_xml(""), &desired_xml(1, ""), Some(128 * MIB)).unwrap_err();
    assert!(
        below.message.contains("less than the 192Mi"),
        "{}",
        below.message
    );
    let odd = plan_of(&live_xml(""), &desired_xml(1, ""), Some(193 * MIB)).unwrap_err();
    assert!(odd.message.contains("not block-aligned"), "{}", odd.message);
    assert!(
        odd.message.contains("2Mi virtio-mem block"),
        "{}",
        odd.message
    );
    let without = live_xml("")
        .split("<memory model='virtio-mem'>")
        .next()
        .unwrap()
        .to_string()
        + "</devices></domain>";
    let without = without.replace("524288", "196608");
    assert!(
        plan_of(&without, &desired_xml(1, ""), Some(192 * MIB))
            .unwrap()
            .is_empty()
    );
    let err = plan_of(&without, &desired_xml(1, ""), Some(256 * MIB)).unwrap_err();
    assert!(
        err.message.contains("no virtio-mem device"),
        "{}",
        err.message
    );
}

#[test]
fn device_names_round_trip() {
    for (i, name) in [
        (0, "sda"),
        (25, "sdz"),
        (26, "sdaa"),
        (701, "sdzz"),
        (702, "sdaaa"),
    ] {
        assert_eq!(device_name("sd", i), name);
        assert_eq!(name_index(name, "sd"), Some(i));
    }
    assert_eq!(name_index("vda", "sd"), None);
    assert_eq!(name_index("sd1", "sd"), None);
}
