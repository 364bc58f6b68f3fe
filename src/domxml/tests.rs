use super::*;

const LIVE_QEMU: &str = include_str!("testdata/live-qemu.xml");

fn live() -> Domain {
    Domain::from_xml(LIVE_QEMU).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn parses_live_qemu_xml_and_skips_unmodelled_parts() {
    let domain = live();
    assert_eq!(domain.domain_type, "kvm");
    assert_eq!(domain.id, Some(7));
    assert_eq!(domain.name, "default_fedora");
    assert_eq!(domain.memory.to_bytes(), Some(2 << 30));
    let kubevirt = domain.metadata.as_ref().and_then(|m| m.kubevirt.as_ref());
    assert_eq!(
        kubevirt.map(|k| k.uid.as_str()),
        Some("b9a3c3b0-1111-2222-3333-444455556666")
    );
    assert_eq!(
        kubevirt
            .and_then(|k| k.graceperiod.as_ref())
            .map(|g| g.deletion_grace_period_seconds),
        Some(30)
    );
    assert_eq!(domain.os.os_type.machine.as_deref(), Some("pc-q35-7.2"));
    assert_eq!(
        domain
            .cpu
            .as_ref()
            .and_then(|c| c.topology.as_ref())
            .map(|t| t.cores),
        Some(2)
    );

    let devices = &domain.devices;
    assert_eq!(
        devices.emulator.as_deref(),
        Some("/usr/bin/qemu-system-x86_64")
    );
    assert_eq!(devices.disks.len(), 2);
    let root = &devices.disks[0];
    assert_eq!(
        root.alias.as_ref().map(|a| a.name.as_str()),
        Some("ua-rootdisk")
    );
    assert_eq!(root.boot.as_ref().map(|b| b.order), Some(1));
    let backing = root.backing_store.as_ref();
    assert_eq!(
        backing
            .and_then(|b| b.source.as_ref())
            .and_then(|s| s.file.as_deref()),
        Some("/var/run/kubevirt/container-disks/disk_0.img")
    );
    assert_eq!(
        backing.and_then(|b| b.backing_store.as_deref()),
        Some(&BackingStore::default())
    );
    assert!(devices.disks[1].readonly.is_some());
    assert_eq!(devices.controllers.len(), 5);
    assert_eq!(
        devices.controllers[2].model.as_deref(),
        Some("pcie-root-port")
    );
    assert_eq!(
        devices.controllers[2]
            .address
            .as_ref()
            .and_then(|a| a.multifunction.as_deref()),
        Some("on")
    );
    assert_eq!(
        devices.channels[0]
            .target
            .as_ref()
            .and_then(|t| t.state.as_deref()),
        Some("connected")
    );
    assert_eq!(
        devices.serials[0]
            .target
            .as_ref()
            .and_then(|t| t.target_type.as_deref()),
        Some("isa-serial")
    );
    assert_eq!(devices.inputs.len(), 2);
    assert_eq!(devices.graphics[0].listen[0].listen_type, "socket");
    assert_eq!(
        devices
            .memballoon
            .as_ref()
            .and_then(|b| b.stats.as_ref())
            .map(|s| s.period),
        Some(10)
    );
    assert_eq!(devices.rngs[0].backend.source, "/dev/urandom");
}

#[test]
fn written_xml_parses_back_to_the_same_model() {
    let domain = live();
    let xml = domain.to_xml().unwrap_or_else(|e| panic!("{e}"));
    let again = Domain::from_xml(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
    assert_eq!(again, domain);
    assert!(xml.starts_with("<domain type=\"kvm\" id=\"7\">\n  <name>default_fedora</name>\n"));
    assert!(xml.contains("<kubevirt xmlns=\"http://kubevirt.io\">"));
    assert!(xml.ends_with("</domain>\n"));
}

#[test]
fn interleaved_devices_are_collected_per_kind() {
    let xml = "<domain type='test'><name>x</name><memory>1</memory><os><type>hvm</type></os>\
        <devices><disk type='file'><target dev='vda'/></disk><controller type='usb' index='0'/>\
        <disk type='block'><target dev='vdb'/></disk></devices></domain>";
    let domain = Domain::from_xml(xml).unwrap_or_else(|e| panic!("{e}"));
    let targets: Vec<&str> = domain
        .devices
        .disks
        .iter()
        .map(|d| d.target.dev.as_str())
        .collect();
    assert_eq!(targets, ["vda", "vdb"]);
    assert_eq!(domain.devices.controllers.len(), 1);
}

#[test]
fn json_uses_attribute_and_text_keys() {
    let domain = live();
    let json = serde_json::to_value(&domain).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(json["@type"], "kvm");
    assert_eq!(json["memory"]["@unit"], "KiB");
    assert_eq!(json["memory"]["$text"], 2_097_152);
    assert_eq!(json["devices"]["disk"][0]["target"]["@dev"], "vda");
}

#[test]
fn garbage_is_an_error() {
    let err = Domain::from_xml("<domain><name>x</name>").err();
    assert!(err.is_some_and(|e| e.message.starts_with("invalid domain XML")));
    assert!(Domain::from_xml("not xml").is_err());
}

#[test]
fn special_characters_are_escaped() {
    let mut domain = live();
    domain.os.cmdline = Some("console=ttyS0 a<b&c \"q\"".to_string());
    let xml = domain.to_xml().unwrap_or_else(|e| panic!("{e}"));
    assert!(xml.contains("<cmdline>console=ttyS0 a&lt;b&amp;c"));
    let again = Domain::from_xml(&xml).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.os.cmdline, domain.os.cmdline);
}

#[test]
fn qemu_commandline_round_trips_with_its_namespace() {
    let mut domain = Domain {
        domain_type: "qemu".to_string(),
        name: "d".to_string(),
        ..Domain::default()
    };
    domain.add_qemu_args(["-netdev".to_string(), "stream,id=x".to_string()]);
    let xml = domain.to_xml().unwrap();
    assert!(
        xml.contains("xmlns:qemu=\"http://libvirt.org/schemas/domain/qemu/1.0\""),
        "{xml}"
    );
    assert!(xml.contains("<qemu:arg value=\"-netdev\"/>"), "{xml}");
    let back = Domain::from_xml(&xml).unwrap();
    assert_eq!(back.qemu_commandline, domain.qemu_commandline, "{xml}");
}
