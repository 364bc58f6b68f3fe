//! The converter's output against real libvirt: every `tests/golden/*.xml`
//! is defined with VIR_DOMAIN_DEFINE_VALIDATE on the QEMU driver of a
//! launcher's own libvirt daemon (`--spawn-libvirt`), and every example,
//! converted for the `test` domain type, on libvirt's in-process
//! `test:///default` driver. What libvirt gives back
//! (`VIR_DOMAIN_XML_INACTIVE`) must parse into the model with the values the
//! converter set.
//!
//! Every golden XML also passes libvirt's schema (`virt-xml-validate`). The
//! byte-for-byte goldens and the model round trip without libvirt are in
//! tests/golden.rs.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use common::examples::*;
use common::guest::*;
use common::*;
use serde_json::Value;
use virt::connect::Connect;
use virt_launcher::convert::{DomainType, convert};
use virt_launcher::domxml::{Disk, Domain, Interface, MaxMemory, ScaledInteger};

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The example converted for the test driver. The test driver cannot start
/// a domain paused, so an example that asks for it must be refused with a
/// reason; it is then defined without its startStrategy.
fn test_driver_xml(path: &Path) -> String {
    let mut vmi = load_example(path);
    let ctx = example_context(&vmi, DomainType::Test);
    if vmi.starts_paused() {
        let refused = convert(&vmi, &ctx).err().map(|e| e.to_string());
        assert!(
            refused
                .as_deref()
                .is_some_and(|e| e.starts_with("spec.startStrategy: Paused needs a driver")),
            "{}: {refused:?}",
            path.display()
        );
        vmi.spec.start_strategy = None;
    }
    convert(&vmi, &ctx)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .domain
        .to_xml()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The same XML text with the domain renamed (first `<name>` element, the
/// domain's own), so it cannot clash with any other domain on the driver.
fn renamed(xml: &str, name: &str) -> String {
    let start = xml.find("<name>").expect("a <name> element") + "<name>".len();
    let end = start + xml[start..].find("</name>").expect("</name>");
    format!("{}{name}{}", &xml[..start], &xml[end..])
}

/// Every value in `want` is in `got` (objects may have more keys in `got`).
fn subset(want: &Value, got: &Value, path: &str, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Null, _) => {}
        (Value::Object(w), Value::Object(g)) => {
            for (key, value) in w {
                match g.get(key) {
                    Some(got) => subset(value, got, &format!("{path}/{key}"), out),
                    None if value.is_null() => {}
                    None => out.push(format!("{path}/{key}: {value} is missing")),
                }
            }
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (w, g)) in w.iter().zip(g).enumerate() {
                subset(w, g, &format!("{path}[{i}]"), out);
            }
        }
        (w, g) if w == g => {}
        (w, g) => out.push(format!("{path}: set {w}, libvirt has {g}")),
    }
}

fn json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("model serialises to JSON")
}

fn bytes(s: &ScaledInteger) -> Option<u64> {
    s.to_bytes()
}

fn disk_desc(d: &Disk) -> String {
    format!("disk {}", d.target.dev)
}

/// Compares what libvirt read back with what the converter set. Returns
/// one line per value that did not survive.
fn compare(want: &Domain, got: &Domain) -> Vec<String> {
    let mut diffs = Vec::new();
    let mut eq = |what: &str, w: String, g: String| {
        if w != g {
            diffs.push(format!("{what}: set {w}, libvirt has {g}"));
        }
    };
    eq(
        "domain type",
        want.domain_type.clone(),
        got.domain_type.clone(),
    );
    eq("name", want.name.clone(), got.name.clone());
    if want.uuid.is_some() {
        eq(
            "uuid",
            format!("{:?}", want.uuid),
            format!("{:?}", got.uuid),
        );
    }
    eq(
        "memory (bytes)",
        format!("{:?}", bytes(&want.memory)),
        format!("{:?}", bytes(&got.memory)),
    );
    if let Some(cur) = &want.current_memory {
        eq(
            "currentMemory (bytes)",
            format!("{:?}", bytes(cur)),
            format!("{:?}", got.current_memory.as_ref().and_then(bytes)),
        );
    }
    if let Some(max) = &want.max_memory {
        let max_bytes = |m: &MaxMemory| {
            let size = ScaledInteger {
                unit: m.unit.clone(),
                value: m.value,
            };
            (size.to_bytes(), m.slots)
        };
        eq(
            "maxMemory (bytes, slots)",
            format!("{:?}", Some(max_bytes(max))),
            format!("{:?}", got.max_memory.as_ref().map(max_bytes)),
        );
    }
    // libvirt fills in `current` from the enabled vCPUs of <vcpus>.
    let vcpus = |d: &Domain| {
        d.vcpu.as_ref().map(|v| {
            let enabled = d.vcpus.as_ref().map(|l| {
                u32::try_from(l.vcpu.iter().filter(|c| c.enabled == "yes").count()).unwrap()
            });
            (v.count, v.current.or(enabled).unwrap_or(v.count))
        })
    };
    eq(
        "vcpu (maximum, current)",
        format!("{:?}", vcpus(want)),
        format!("{:?}", vcpus(got)),
    );
    if let Some(mb) = &want.memory_backing {
        let mut out = Vec::new();
        subset(
            &json(mb),
            &json(&got.memory_backing),
            "memoryBacking",
            &mut out,
        );
        diffs.extend(out);
    }
    if let Some(meta) = want.metadata.as_ref().and_then(|m| m.kubevirt.as_ref()) {
        let got_uid = got
            .metadata
            .as_ref()
            .and_then(|m| m.kubevirt.as_ref())
            .map(|k| k.uid.clone());
        if got_uid.as_deref() != Some(meta.uid.as_str()) {
            diffs.push(format!(
                "metadata kubevirt uid: set {}, libvirt has {got_uid:?}",
                meta.uid
            ));
        }
    }

    // <os>: the machine type is expanded by libvirt (q35 → pc-q35-X.Y).
    let (wo, go) = (&want.os, &got.os);
    let mut eq_os = |what: &str, w: &Option<String>, g: &Option<String>| {
        if w.is_some() && w != g {
            diffs.push(format!("os {what}: set {w:?}, libvirt has {g:?}"));
        }
    };
    eq_os("kernel", &wo.kernel, &go.kernel);
    eq_os("initrd", &wo.initrd, &go.initrd);
    eq_os("cmdline", &wo.cmdline, &go.cmdline);
    eq_os("arch", &wo.os_type.arch, &go.os_type.arch);
    eq_os("firmware", &wo.firmware, &go.firmware);
    if let Some(machine) = &wo.os_type.machine {
        let g = go.os_type.machine.clone().unwrap_or_default();
        if !(g == *machine || g.contains(&format!("-{machine}"))) {
            diffs.push(format!("os machine: set {machine}, libvirt has {g}"));
        }
    }
    if wo.os_type.value != go.os_type.value {
        diffs.push(format!(
            "os type: set {}, libvirt has {}",
            wo.os_type.value, go.os_type.value
        ));
    }
    let mut out = Vec::new();
    subset(&json(&wo.loader), &json(&go.loader), "os/loader", &mut out);
    subset(&json(&wo.nvram), &json(&go.nvram), "os/nvram", &mut out);
    subset(&json(&wo.smbios), &json(&go.smbios), "os/smbios", &mut out);
    // Every feature we set is there, with the same states.
    subset(
        &json(&want.features),
        &json(&got.features),
        "features",
        &mut out,
    );
    // libvirt writes SMBIOS entries in its own order.
    let sysinfo = |d: &Domain| {
        let mut entries = BTreeSet::new();
        if let Some(s) = &d.sysinfo {
            for (section, list) in [("system", &s.system), ("chassis", &s.chassis)] {
                for e in list.iter().flat_map(|l| &l.entry) {
                    entries.insert(format!("{section}/{}={}", e.name, e.value));
                }
            }
            for e in s.oem_strings.iter().flat_map(|o| &o.entry) {
                entries.insert(format!("oemStrings={e}"));
            }
        }
        entries
    };
    let missing: Vec<String> = sysinfo(want).difference(&sysinfo(got)).cloned().collect();
    if !missing.is_empty() {
        out.push(format!("sysinfo: {missing:?} missing"));
    }
    subset(&json(&want.vcpus), &json(&got.vcpus), "vcpus", &mut out);
    subset(&json(&want.clock), &json(&got.clock), "clock", &mut out);
    if let Some(cpu) = &want.cpu {
        let got_cpu = got.cpu.as_ref();
        subset(
            &json(&cpu.mode),
            &json(&got_cpu.map(|c| &c.mode)),
            "cpu/mode",
            &mut out,
        );
        subset(
            &json(&cpu.model),
            &json(&got_cpu.map(|c| &c.model)),
            "cpu/model",
            &mut out,
        );
        subset(
            &json(&cpu.topology),
            &json(&got_cpu.map(|c| &c.topology)),
            "cpu/topology",
            &mut out,
        );
        subset(
            &json(&cpu.feature),
            &json(&got_cpu.map(|c| &c.feature)),
            "cpu/feature",
            &mut out,
        );
        subset(
            &json(&cpu.numa),
            &json(&got_cpu.map(|c| &c.numa)),
            "cpu/numa",
            &mut out,
        );
    }
    // Hot-pluggable memory, sizes compared in bytes.
    let mem_devices = |d: &Domain| -> Vec<String> {
        let b = |s: &Option<ScaledInteger>| s.as_ref().and_then(bytes);
        d.devices
            .memory_devices
            .iter()
            .map(|m| {
                let t = &m.target;
                format!(
                    "{} size {:?} node {:?} block {:?} requested {:?}",
                    m.model,
                    b(&t.size),
                    t.node,
                    b(&t.block),
                    b(&t.requested)
                )
            })
            .collect()
    };
    if mem_devices(want) != mem_devices(got) {
        out.push(format!(
            "memory devices: set {:?}, libvirt has {:?}",
            mem_devices(want),
            mem_devices(got)
        ));
    }
    diffs.extend(out);

    // Disks, by target device.
    let got_disks: Vec<&str> = got
        .devices
        .disks
        .iter()
        .map(|d| d.target.dev.as_str())
        .collect();
    let want_disks: Vec<&str> = want
        .devices
        .disks
        .iter()
        .map(|d| d.target.dev.as_str())
        .collect();
    if got_disks.len() != want_disks.len() {
        diffs.push(format!(
            "disks: set {want_disks:?}, libvirt has {got_disks:?}"
        ));
    }
    for w in &want.devices.disks {
        let Some(g) = got
            .devices
            .disks
            .iter()
            .find(|g| g.target.dev == w.target.dev)
        else {
            diffs.push(format!(
                "{}: missing; libvirt has {got_disks:?}",
                disk_desc(w)
            ));
            continue;
        };
        let what = disk_desc(w);
        let src = |d: &Disk| {
            d.source
                .as_ref()
                .map(|s| (s.file.clone(), s.dev.clone()))
                .unwrap_or_default()
        };
        if src(w) != src(g) {
            diffs.push(format!(
                "{what} source: set {:?}, libvirt has {:?}",
                src(w),
                src(g)
            ));
        }
        let fields = |d: &Disk| {
            (
                d.disk_type.clone(),
                d.device.clone().unwrap_or_else(|| "disk".into()),
                d.target.bus.clone(),
                d.serial.clone(),
                d.readonly.is_some(),
                d.shareable.is_some(),
                d.boot.as_ref().map(|b| b.order),
                d.alias.as_ref().map(|a| a.name.clone()),
            )
        };
        if fields(w) != fields(g) {
            diffs.push(format!(
                "{what} (type, device, bus, serial, readonly, shareable, boot, alias): set {:?}, libvirt has {:?}",
                fields(w),
                fields(g)
            ));
        }
        let driver = |d: &Disk| {
            d.driver
                .as_ref()
                .map(|dr| (dr.format.clone(), dr.cache.clone(), dr.error_policy.clone()))
        };
        if driver(w) != driver(g) {
            diffs.push(format!(
                "{what} driver (type, cache, error_policy): set {:?}, libvirt has {:?}",
                driver(w),
                driver(g)
            ));
        }
    }

    // Interfaces, in order.
    let (wi, gi) = (&want.devices.interfaces, &got.devices.interfaces);
    if wi.len() != gi.len() {
        diffs.push(format!(
            "interfaces: set {}, libvirt has {}",
            wi.len(),
            gi.len()
        ));
    }
    for (i, (w, g)) in wi.iter().zip(gi).enumerate() {
        let mac = |n: &Interface| n.mac.as_ref().map(|m| m.address.to_lowercase());
        match (mac(w), mac(g)) {
            (Some(w), Some(g)) if w == g => {}
            (None, _) => {} // libvirt generates one
            (w, g) => diffs.push(format!("interface {i} MAC: set {w:?}, libvirt has {g:?}")),
        }
        let fields = |n: &Interface| {
            (
                n.interface_type.clone(),
                n.model.as_ref().map(|m| m.model_type.clone()),
                n.boot.as_ref().map(|b| b.order),
                n.alias.as_ref().map(|a| a.name.clone()),
            )
        };
        if fields(w) != fields(g) {
            diffs.push(format!(
                "interface {i} (type, model, boot, alias): set {:?}, libvirt has {:?}",
                fields(w),
                fields(g)
            ));
        }
        // The test driver names untargeted interfaces itself (testnet0).
        let target = |n: &Interface| {
            n.target
                .as_ref()
                .map(|t| (t.dev.clone(), t.managed.clone()))
        };
        if target(w).is_some() && target(w) != target(g) {
            diffs.push(format!(
                "interface {i} target: set {:?}, libvirt has {:?}",
                target(w),
                target(g)
            ));
        }
    }
    diffs
}

/// The launcher's `query-status`, and a connection of this process's own
/// to its libvirt daemon (the URI the status names).
fn daemon_of(client: &mut Client) -> (Value, Connect) {
    let status = client.ok("query-status", Value::Null);
    let uri = status["libvirt"]["uri"]
        .as_str()
        .unwrap_or_else(|| panic!("no libvirt.uri: {status}"))
        .to_string();
    let conn = Connect::open(Some(&uri)).unwrap_or_else(|e| panic!("open {uri}: {e}"));
    (status, conn)
}

/// Defines `xml` (renamed to `name`) with VALIDATE, reads it back inactive,
/// undefines it, and compares. Err carries libvirt's message or the values
/// that did not survive.
fn define_and_compare(
    conn: &Connect,
    name: &str,
    xml: &str,
    undefine_flags: virt::sys::virDomainUndefineFlagsValues,
) -> Result<(), String> {
    let xml = renamed(xml, name);
    let want = Domain::from_xml(&xml).map_err(|e| format!("the XML does not parse: {e}"))?;
    let dom = conn
        .define_domain_xml_flags(&xml, virt::sys::VIR_DOMAIN_DEFINE_VALIDATE)
        .map_err(|e| format!("libvirt rejected the XML: {e}"))?;
    let back = dom.xml_desc(virt::sys::VIR_DOMAIN_XML_INACTIVE);
    let undefined = dom.undefine_flags(undefine_flags);
    let back = back.map_err(|e| format!("virDomainGetXMLDesc: {e}"))?;
    undefined.map_err(|e| format!("virDomainUndefineFlags: {e}"))?;
    let got = Domain::from_xml(&back)
        .map_err(|e| format!("libvirt's XML does not parse back: {e}\n{back}"))?;
    let diffs = compare(&want, &got);
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "values changed in libvirt:\n    {}\n  libvirt's XML:\n{back}",
            diffs.join("\n    ")
        ))
    }
}

fn assert_all_ok(driver: &str, results: Vec<(String, Result<(), String>)>) {
    assert!(!results.is_empty(), "nothing was checked");
    let failures: Vec<String> = results
        .into_iter()
        .filter_map(|(stem, r)| r.err().map(|e| format!("{stem}: {e}")))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of the domain XMLs failed on {driver}:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_golden_xml_is_accepted_by_the_qemu_driver_and_reads_back() {
    if !require(REAL_GUEST) {
        return;
    }
    let goldens = files_with_ext(GOLDEN_DIR, "xml");
    assert!(goldens.len() >= 9, "{goldens:?}");
    let launcher = start_qemu_launcher(TempTree::new("golden-qemu"), "golden", &[]);
    let mut client = launcher.client();
    let (status, conn) = daemon_of(&mut client);
    let uri = status["libvirt"]["uri"].as_str().unwrap_or_default();
    assert!(uri.starts_with("qemu"), "{uri}");
    assert_eq!(status["domain"]["defined"], false);

    assert_eq!(conn.driver_type().unwrap_or_default(), "QEMU");
    let tag = std::process::id();
    let results: Vec<(String, Result<(), String>)> = goldens
        .iter()
        .map(|(stem, path)| {
            let name = format!("vltest-{stem}-{tag}");
            // KEEP_NVRAM: an EFI domain cannot be undefined otherwise,
            // and the NVRAM path it names is left alone.
            let flags = virt::sys::VIR_DOMAIN_UNDEFINE_KEEP_NVRAM;
            (
                stem.clone(),
                define_and_compare(&conn, &name, &read(path), flags),
            )
        })
        .collect();
    let left = conn.list_defined_domains().unwrap_or_default();
    drop(conn);
    let mut launcher = launcher;
    assert!(
        left.iter().all(|n| !n.starts_with("vltest-")),
        "domains left defined: {left:?}"
    );
    // None of it touched the launcher's own domain.
    let status = client.ok("query-status", Value::Null);
    assert_eq!(status["domain"]["defined"], false, "{status}");
    // Without a domain there is nothing to kill: stop the launcher (and its
    // daemons) rather than have the harness wait for a kill that is refused.
    drop(client);
    launcher.signal("TERM");
    assert_eq!(launcher.wait_exit(STEP), 0);
    assert_all_ok(&format!("the QEMU driver ({uri})"), results);
}

#[test]
fn every_example_converted_for_the_test_driver_is_accepted_and_reads_back() {
    let examples = files_with_ext(EXAMPLES_DIR, "json");
    assert!(examples.len() >= 9, "{examples:?}");
    let conn = Connect::open(Some("test:///default")).expect("open test:///default");
    let tag = std::process::id();
    let mut results = Vec::new();
    for (stem, path) in &examples {
        let xml = test_driver_xml(path);
        assert!(xml.starts_with("<domain type=\"test\">"), "{stem}: {xml}");
        let golden = read(&Path::new(GOLDEN_DIR).join(format!("{stem}.xml")));
        let qemu = example_xml(path, DomainType::Kvm);
        assert_eq!(qemu, golden, "{stem}: the golden file is stale");
        let name = format!("vltest-{stem}-{tag}");
        results.push((stem.clone(), define_and_compare(&conn, &name, &xml, 0)));
    }
    // VALIDATE is in force: an element outside libvirt's schema is refused.
    let vmi_xml = test_driver_xml(&Path::new(EXAMPLES_DIR).join("vmi.json"));
    let bogus = renamed(&vmi_xml, &format!("vltest-bogus-{tag}"))
        .replace("<devices>", "<devices>\n    <bogus/>");
    let err = define_and_compare(&conn, &format!("vltest-bogus-{tag}"), &bogus, 0)
        .expect_err("an invalid element must be refused");
    assert!(err.contains("libvirt rejected the XML"), "{err}");
    let left = conn.list_defined_domains().unwrap_or_default();
    assert!(
        left.iter().all(|n| !n.starts_with("vltest-")),
        "domains left defined: {left:?}"
    );
    assert_all_ok("test:///default", results);
}

#[test]
fn the_comparison_notices_values_that_change() {
    let xml = read(&Path::new(GOLDEN_DIR).join("emptydisk-hostdisk.xml"));
    let want = Domain::from_xml(&xml).expect("golden parses");
    assert_eq!(compare(&want, &want), Vec::<String>::new());
    let mut got = want.clone();
    got.memory = ScaledInteger {
        unit: Some("KiB".into()),
        value: bytes(&want.memory).unwrap() / 1024,
    };
    assert_eq!(
        compare(&want, &got),
        Vec::<String>::new(),
        "same size in KiB"
    );
    got.memory.value += 1;
    got.devices.disks[1].source.as_mut().unwrap().file = Some("/elsewhere.img".into());
    got.devices.interfaces[0].model = None;
    got.features.as_mut().unwrap().acpi = None;
    got.devices.disks.pop();
    let diffs = compare(&want, &got).join("\n");
    for needle in [
        "memory (bytes)",
        "/elsewhere.img",
        "interface 0",
        "features/acpi",
        "disks: set",
    ] {
        assert!(diffs.contains(needle), "{needle} not reported:\n{diffs}");
    }
}

#[test]
fn every_golden_xml_passes_libvirt_schema() {
    if !require(&[Need::Program("virt-xml-validate")]) {
        return;
    }
    let mut failures = Vec::new();
    for (stem, path) in files_with_ext(GOLDEN_DIR, "xml") {
        let output = std::process::Command::new("virt-xml-validate")
            .arg(&path)
            .arg("domain")
            .output()
            .unwrap_or_else(|e| {
                panic!("virt-xml-validate (package libvirt-clients) is needed: {e}")
            });
        if !output.status.success() {
            failures.push(format!(
                "{stem}: {}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The Hyper-V flags that need libvirt 11.0 (`tlbflush`'s `direct` and
/// `extended`), converted for the connected daemon's own version, on its
/// QEMU driver: where the daemon is 11.0 or newer they are written, libvirt
/// keeps them through a validated define, and its QEMU command line for the
/// domain turns them on; an older daemon's version gets the VMI refused,
/// naming the field and both versions. (Starting such a guest needs a KVM
/// that allows Hyper-V's VP index, which this machine's nested KVM does not;
/// docs/testing.md.)
#[test]
fn hyperv_flags_of_libvirt_11_are_written_and_taken_by_the_connected_daemon() {
    if !require(REAL_GUEST) {
        return;
    }
    let launcher = start_qemu_launcher(TempTree::new("hyperv-flags"), "hyperv-flags", &[]);
    let mut client = launcher.client();
    let (_, conn) = daemon_of(&mut client);
    let daemon = conn.lib_version().expect("virConnectGetLibVersion");
    let dotted = virt_launcher::hypervisor::state::dotted_version(daemon.into());

    let mut json = example_json(&Path::new(EXAMPLES_DIR).join("vmi.json"));
    json["spec"]["domain"]["features"] = serde_json::json!({"hyperv": {
        "vpindex": {}, "tlbflush": {"direct": {}, "extended": {}}}});
    let vmi = virt_launcher::vmi::parse_vmi(&json).expect("the VMI");
    let mut ctx = example_context(&vmi, DomainType::Kvm);
    ctx.libvirt_version = Some(daemon);
    let converted = convert(&vmi, &ctx);
    if daemon < virt_launcher::convert::libvirt_version(11, 0, 0) {
        let refused = converted.err().map(|e| e.to_string());
        assert_eq!(
            refused.as_deref(),
            Some(
                format!(
                    "spec.domain.features.hyperv.tlbflush.direct: hyperv tlbflush direct needs libvirt 11.0.0 or newer; this launcher's libvirt is {dotted}"
                )
                .as_str()
            )
        );
    } else {
        let xml = converted
            .unwrap_or_else(|e| panic!("refused on libvirt {dotted}: {e}"))
            .domain
            .to_xml()
            .expect("XML");
        let words = xml.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            words.contains(
                r#"<tlbflush state="on"> <direct state="on"/> <extended state="on"/> </tlbflush>"#
            ),
            "{xml}"
        );
        let name = format!("vltest-hyperv-{}", std::process::id());
        let result = define_and_compare(&conn, &name, &xml, 0);
        assert_eq!(result, Ok(()), "libvirt {dotted}");
        let argv = conn
            .domain_xml_to_native("qemu-argv", &renamed(&xml, &name), 0)
            .unwrap_or_else(|e| panic!("virConnectDomainXMLToNative on libvirt {dotted}: {e}"));
        for flag in [
            "hv-vpindex=on",
            "hv-tlbflush=on",
            "hv-tlbflush-direct=on",
            "hv-tlbflush-ext=on",
        ] {
            assert!(
                argv.contains(flag),
                "{flag} not in libvirt {dotted}'s command line: {argv}"
            );
        }
    }
    drop(conn);
    drop(client);
    let mut launcher = launcher;
    launcher.signal("TERM");
    assert_eq!(launcher.wait_exit(STEP), 0);
}
