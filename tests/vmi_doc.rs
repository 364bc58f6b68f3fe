//! docs/vmi.md's three lists against the converter's own tables, so that
//! neither can change without the other: the fields accepted without
//! effect (`vmi::WITHOUT_EFFECT`), those refused as not supported
//! (`convert::Refused`) and those checked before libvirt
//! (`convert::Checked`). Each list is the first column of its section's
//! table. Then each entry is tried on a VMI that has it, as the document
//! says: a field without effect is logged and leaves the domain exactly as
//! it is without it; a refused field is `not supported by this launcher`,
//! naming it; a checked one is refused naming it, on the host the
//! document names. Last, the VMI model's source is read for the fields it
//! types as refused (`Unsupported`) or ignored (`Ignored`): each must be
//! in its table.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use virt_launcher::convert::{
    Checked, Conversion, ConvertContext, ConvertError, DomainType, HostCell, HostTopology, Listed,
    Refused, convert, kubevirt_defaults, libvirt_version, path_matches,
};
use virt_launcher::vmi::{WITHOUT_EFFECT, fields_without_effect, parse_vmi};

fn repo_file(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The first cell, in backticks, of each table row of the `## heading`
/// section of docs/vmi.md.
fn listed(heading: &str) -> Vec<String> {
    let doc = repo_file("docs/vmi.md");
    let start = doc
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("docs/vmi.md has no section {heading:?}"));
    let section = &doc[start + 1..];
    let section = match section[3..].find("\n## ") {
        Some(end) => &section[..end + 3],
        None => section,
    };
    let fields: Vec<String> = section
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(field, _)| field.to_string())
        .collect();
    assert!(!fields.is_empty(), "no table rows under {heading:?}");
    fields
}

/// What differs between the document's list and the table: `None` when
/// both name the same fields, each once.
fn differences(heading: &str, table: &str, in_table: Vec<&str>) -> Option<String> {
    let in_doc = listed(heading);
    let doc_set: BTreeSet<&str> = in_doc.iter().map(String::as_str).collect();
    let table_set: BTreeSet<&str> = in_table.iter().copied().collect();
    let only_doc: Vec<&&str> = doc_set.difference(&table_set).collect();
    let only_table: Vec<&&str> = table_set.difference(&doc_set).collect();
    let same = only_doc.is_empty()
        && only_table.is_empty()
        && doc_set.len() == in_doc.len()
        && table_set.len() == in_table.len();
    (!same).then(|| {
        format!(
            "docs/vmi.md \"{heading}\" and {table} differ:\n  only in the document: {only_doc:?}\n  only in {table}: {only_table:?}\n  (listed twice in the document: {})",
            in_doc.len() - doc_set.len()
        )
    })
}

#[test]
fn the_lists_of_docs_vmi_md_are_the_converters_tables() {
    let differing: Vec<String> = [
        differences(
            "Fields accepted without effect",
            "vmi::WITHOUT_EFFECT",
            WITHOUT_EFFECT.iter().map(|f| f.field).collect(),
        ),
        differences(
            "Refused: \"not supported by this launcher\"",
            "convert::Refused",
            Refused::ALL.iter().map(|r| r.path()).collect(),
        ),
        differences(
            "Checked before libvirt",
            "convert::Checked",
            Checked::ALL.iter().map(|c| c.path()).collect(),
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert!(differing.is_empty(), "{}", differing.join("\n"));
}

/// The launcher's host, as far as the conversion sees it.
#[derive(Clone, Copy)]
enum Host {
    Kvm,
    /// `--force-emulation`, or no usable KVM with `--allow-emulation`.
    Emulated,
    TestDriver,
    Libvirt(u32, u32, u32),
    /// A `--private-dir` of this many bytes.
    PrivateDir(usize),
    /// Two NUMA cells of four CPUs; the cpuset has two of each.
    Numa,
    /// A `--backend-storage-dir`.
    BackendStorage,
    /// A `--backend-storage-dir` with a libvirt that is not the
    /// launcher's own (the host's daemon).
    BackendStorageHostDaemon,
}

fn context(host: Host) -> ConvertContext {
    let domain_type = match host {
        Host::Emulated => DomainType::Qemu,
        Host::TestDriver => DomainType::Test,
        _ => DomainType::Kvm,
    };
    let mut ctx = ConvertContext {
        namespace: "default".into(),
        name: "doc".into(),
        uid: "0c0f4a3e-5b1d-4f6a-9d2e-7a8b9c0d1e2f".into(),
        ..kubevirt_defaults(domain_type)
    };
    match host {
        Host::Libvirt(major, minor, micro) => {
            ctx.libvirt_version = Some(libvirt_version(major, minor, micro));
        }
        Host::PrivateDir(bytes) => {
            ctx.private_dir = PathBuf::from(format!("/{}", "p".repeat(bytes - 1)));
        }
        Host::Numa => {
            let cell = |id: u32, first: u32| HostCell {
                id,
                cpus: (first..first + 4).map(|cpu| (cpu, vec![cpu])).collect(),
                distances: vec![(0, if id == 0 { 10 } else { 20 }), (1, 10 + 10 * (1 - id))],
            };
            ctx.host_topology = Some(HostTopology {
                cells: vec![cell(0, 0), cell(1, 4)],
            });
            ctx.cpuset = Ok(vec![0, 1, 4, 5]);
        }
        Host::BackendStorage => {
            ctx.backend_storage_dir = Some(PathBuf::from("/srv/vm-state"));
        }
        Host::BackendStorageHostDaemon => {
            ctx.backend_storage_dir = Some(PathBuf::from("/srv/vm-state"));
            ctx.backend_storage_keeps_tpm = false;
        }
        _ => {}
    }
    ctx
}

/// A VMI of 128Mi with `patch` merged in.
fn vmi_json(patch: &Value) -> Value {
    let mut vmi = json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "doc", "namespace": "default", "uid": "0c0f4a3e-5b1d-4f6a-9d2e-7a8b9c0d1e2f"},
        "spec": {"domain": {"resources": {"requests": {"memory": "128Mi"}}, "devices": {}}}
    });
    merge(&mut vmi, patch);
    vmi
}

fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                merge(target.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

/// Why a sync's checks refused a VMI.
#[derive(Debug)]
struct Refusal {
    path: String,
    message: String,
    /// `None` when the VMI model refused it as it was read.
    by_the_converter: Option<Option<Listed>>,
}

/// What a sync's checks say of the VMI: `Ok` if it converts.
fn sync_checks(vmi: &Value, host: Host) -> Result<Conversion, Refusal> {
    let parsed = parse_vmi(vmi).map_err(|e| Refusal {
        path: e.path,
        message: e.message,
        by_the_converter: None,
    })?;
    convert(&parsed, &context(host)).map_err(
        |ConvertError {
             path,
             message,
             listed,
         }| Refusal {
            path,
            message,
            by_the_converter: Some(listed),
        },
    )
}

/// A VMI that has the refused field, and the host it is refused on.
fn refused_example(refused: Refused) -> (Value, Host) {
    let domain = |v: Value| json!({"spec": {"domain": v}});
    let devices = |v: Value| domain(json!({"devices": v}));
    let disk_with = |disk: Value, volume: Value| json!({"spec": {"domain": {"devices": {"disks": [disk]}}, "volumes": [volume]}});
    let empty_disk = json!({"name": "d", "emptyDisk": {"capacity": "1Gi"}});
    let example = match refused {
        Refused::UtilityVolumes => json!({"spec": {"utilityVolumes": [{"name": "u"}]}}),
        Refused::LaunchSecurity => domain(json!({"launchSecurity": {"sev": {}}})),
        Refused::Acpi => domain(json!({"firmware": {"acpi": {"slicNameRef": "slic"}}})),
        Refused::ClientPassthrough => devices(json!({"clientPassthrough": {}})),
        Refused::Sound => devices(json!({"sound": {"name": "s"}})),
        Refused::Diag288Watchdog => {
            devices(json!({"watchdog": {"name": "w", "diag288": {"action": "reset"}}}))
        }
        Refused::MatchVolumeBlockSize => disk_with(
            json!({"name": "d", "blockSize": {"matchVolume": {"enabled": true}}}),
            empty_disk,
        ),
        Refused::MacvtapBinding => devices(json!({"interfaces": [{"name": "n", "macvtap": {}}]})),
        Refused::PasstCoreBinding => devices(json!({"interfaces": [{"name": "n", "passt": {}}]})),
        Refused::NetworkResourceClaim => {
            json!({"spec": {"networks": [{"name": "n", "resourceClaim": {"claimName": "c"}}]}})
        }
        Refused::SupplementalPoolIoThreads => json!({"spec": {
            "domain": {"ioThreadsPolicy": "supplementalPool", "ioThreads": {"supplementalPoolThreadCount": 2},
                "devices": {"disks": [{"name": "d", "disk": {"bus": "virtio"}}]}},
            "volumes": [empty_disk]}}),
        Refused::ConfigDriveDiskTag => json!({"spec": {
            "domain": {"devices": {"disks": [{"name": "d", "tag": "data"}]}},
            "volumes": [empty_disk,
                {"name": "ci", "cloudInitConfigDrive": {"userData": "#cloud-config\n"}}]}}),
        Refused::MultiqueueWithoutTap => json!({"spec": {
            "domain": {"devices": {"networkInterfaceMultiqueue": true,
                "interfaces": [{"name": "default", "binding": {"name": "passt"}}]}},
            "networks": [{"name": "default", "pod": {}}]}}),
        Refused::NumaPassthroughWithMemoryHotplug => domain(json!({
            "cpu": {"cores": 4, "dedicatedCpuPlacement": true, "numa": {"guestMappingPassthrough": {}}},
            "memory": {"guest": "1Gi", "maxGuest": "2Gi", "hugepages": {"pageSize": "2Mi"}}})),
        Refused::Architecture => json!({"spec": {"architecture": "arm64"}}),
    };
    let host = match refused {
        Refused::NumaPassthroughWithMemoryHotplug => Host::Numa,
        _ => Host::Kvm,
    };
    (example, host)
}

#[test]
fn every_refused_field_is_refused_as_not_supported_naming_it() {
    let mut failures = Vec::new();
    for &refused in Refused::ALL {
        let (example, host) = refused_example(refused);
        match sync_checks(&vmi_json(&example), host) {
            // The converter's refusals name their entry.
            Err(Refusal {
                path,
                message,
                by_the_converter,
            }) if path_matches(refused.path(), &path)
                && message.contains("not supported by this launcher")
                && by_the_converter.is_none_or(|l| l == Some(Listed::Refused(refused))) => {}
            Err(error) => failures.push(format!("{refused:?}: refused as {error:?}")),
            Ok(_) => failures.push(format!("{refused:?}: accepted")),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A VMI that fails the check, the host where it does, and the host where
/// the same VMI passes it (when the check depends on the host).
fn checked_example(checked: Checked) -> (Value, Host, Option<Host>) {
    let domain = |v: Value| json!({"spec": {"domain": v}});
    let disk_with = |disk: Value, volume: Value| json!({"spec": {"domain": {"devices": {"disks": [disk]}}, "volumes": [volume]}});
    let container_disk = json!({"name": "d", "containerDisk": {"image": "x"}});
    let claim = json!({"name": "d", "persistentVolumeClaim": {"claimName": "d"}});
    let emulated = (Host::Emulated, Some(Host::Kvm));
    let (example, (bad, good)) = match checked {
        Checked::DiscardGranularity => (
            disk_with(
                json!({"name": "d", "blockSize": {"custom": {"logical": 512, "physical": 4096, "discardGranularity": 4096}}}),
                json!({"name": "d", "emptyDisk": {"capacity": "1Gi"}}),
            ),
            (Host::Libvirt(9, 6, 0), Some(Host::Libvirt(9, 7, 0))),
        ),
        Checked::TlbflushDirect | Checked::TlbflushExtended => {
            let child = if checked == Checked::TlbflushDirect {
                "direct"
            } else {
                "extended"
            };
            (
                domain(json!({"features": {"hyperv": {"tlbflush": {child: {}}}}})),
                (Host::Libvirt(10, 10, 0), Some(Host::Libvirt(11, 0, 0))),
            )
        }
        Checked::ReadOnlySataDisk => (
            disk_with(
                json!({"name": "d", "disk": {"readonly": true}}),
                container_disk,
            ),
            (Host::Kvm, None),
        ),
        Checked::LunBus => (
            disk_with(json!({"name": "d", "lun": {"bus": "sata"}}), claim),
            (Host::Kvm, None),
        ),
        Checked::CdromBus => (
            disk_with(
                json!({"name": "d", "cdrom": {"bus": "virtio"}}),
                container_disk,
            ),
            (Host::Kvm, None),
        ),
        Checked::ShareableCdromOrLun => (
            disk_with(
                json!({"name": "d", "cdrom": {}, "shareable": true}),
                container_disk,
            ),
            (Host::Kvm, None),
        ),
        Checked::SerialConsoleSocket => (
            json!({}),
            (Host::PrivateDir(61), Some(Host::PrivateDir(56))),
        ),
        // The VNC socket's name is shorter than the serial console's.
        Checked::VncSocket => (
            domain(json!({"devices": {"autoattachSerialConsole": false}})),
            (Host::PrivateDir(65), Some(Host::PrivateDir(60))),
        ),
        Checked::EmulatedHyperv => (
            domain(json!({"features": {"hyperv": {"relaxed": {}}}})),
            emulated,
        ),
        Checked::EmulatedHypervPassthrough => (
            domain(json!({"features": {"hypervPassthrough": {"enabled": true}}})),
            emulated,
        ),
        Checked::EmulatedHypervClock => (
            domain(json!({"clock": {"utc": {}, "timer": {"hyperv": {}}}})),
            emulated,
        ),
        Checked::EmulatedHostPassthrough => (
            domain(json!({"cpu": {"model": "host-passthrough"}})),
            emulated,
        ),
        Checked::PausedOnTestDriver => (
            json!({"spec": {"startStrategy": "Paused"}}),
            (Host::TestDriver, Some(Host::Kvm)),
        ),
        Checked::PersistentEfiWithoutBackendStorage => (
            domain(json!({"firmware": {"bootloader": {"efi": {"persistent": true}}}})),
            (Host::Kvm, Some(Host::BackendStorage)),
        ),
        Checked::PersistentTpmOutsideBackendStorage => (
            domain(json!({"devices": {"tpm": {"persistent": true}}})),
            (Host::BackendStorageHostDaemon, Some(Host::BackendStorage)),
        ),
    };
    (example, bad, good)
}

#[test]
fn every_checked_field_is_refused_before_libvirt_naming_it() {
    let mut failures = Vec::new();
    for &checked in Checked::ALL {
        let (example, bad, good) = checked_example(checked);
        let vmi = vmi_json(&example);
        match sync_checks(&vmi, bad) {
            Err(Refusal {
                path,
                by_the_converter,
                ..
            }) if path_matches(checked.path(), &path)
                && by_the_converter == Some(Some(Listed::Checked(checked))) => {}
            Err(error) => failures.push(format!("{checked:?}: refused as {error:?}")),
            Ok(_) => failures.push(format!("{checked:?}: accepted")),
        }
        if let Some(good) = good
            && let Err(error) = sync_checks(&vmi, good)
        {
            failures.push(format!(
                "{checked:?}: refused where the document says it is fine: {error:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A VMI that has the field (the first item of a list, where its path has
/// `[]`).
fn without_effect_example(field: &str) -> Value {
    let domain = |v: Value| json!({"spec": {"domain": v}});
    let spec = |key: &str, v: Value| json!({"spec": {key: v}});
    let kernel_boot = |key: &str| {
        domain(json!({"firmware": {"kernelBoot": {"container": {
            "image": "k", "kernelPath": "/boot/vmlinuz", key: "x"}}}}))
    };
    match field {
        "spec.priorityClassName" => spec("priorityClassName", json!("high")),
        "spec.nodeSelector" => spec("nodeSelector", json!({"disk": "ssd"})),
        "spec.affinity" => spec("affinity", json!({"nodeAffinity": {}})),
        "spec.schedulerName" => spec("schedulerName", json!("mine")),
        "spec.tolerations" => spec("tolerations", json!([{"key": "k", "operator": "Exists"}])),
        "spec.topologySpreadConstraints" => spec(
            "topologySpreadConstraints",
            json!([{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]),
        ),
        "spec.evictionStrategy" => spec("evictionStrategy", json!("LiveMigrate")),
        "spec.livenessProbe" => spec("livenessProbe", json!({"tcpSocket": {"port": 22}})),
        "spec.readinessProbe" => spec("readinessProbe", json!({"tcpSocket": {"port": 22}})),
        "spec.subdomain" => spec("subdomain", json!("vms")),
        "spec.dnsPolicy" => spec("dnsPolicy", json!("None")),
        "spec.dnsConfig" => spec("dnsConfig", json!({"nameservers": ["10.0.0.53"]})),
        "spec.accessCredentials" => spec(
            "accessCredentials",
            json!([{"sshPublicKey": {"source": {"secret": {"secretName": "keys"}},
                "propagationMethod": {"noCloud": {}}}}]),
        ),
        "spec.serviceAccountName" => spec("serviceAccountName", json!("builder")),
        "spec.domain.resources.overcommitGuestOverhead" => {
            domain(json!({"resources": {"overcommitGuestOverhead": true}}))
        }
        "spec.domain.memory.reservedOverhead" => {
            domain(json!({"memory": {"reservedOverhead": {"addedOverhead": "100Mi"}}}))
        }
        "spec.domain.ioThreads" => domain(json!({"ioThreads": {"supplementalPoolThreadCount": 2}})),
        "spec.volumes[].containerDisk.imagePullPolicy" => spec(
            "volumes",
            json!([{"name": "r", "containerDisk": {"image": "x", "imagePullPolicy": "Always"}}]),
        ),
        "spec.volumes[].containerDisk.imagePullSecret" => spec(
            "volumes",
            json!([{"name": "r", "containerDisk": {"image": "x", "imagePullSecret": "pull"}}]),
        ),
        "spec.domain.firmware.kernelBoot.container.imagePullPolicy" => {
            kernel_boot("imagePullPolicy")
        }
        "spec.domain.firmware.kernelBoot.container.imagePullSecret" => {
            kernel_boot("imagePullSecret")
        }
        "spec.domain.devices.disks[].tag" => json!({"spec": {
            "domain": {"devices": {"disks": [{"name": "d", "tag": "data"}]}},
            "volumes": [{"name": "d", "emptyDisk": {"capacity": "1Gi"}}]}}),
        other => panic!("no example of {other}: add one to tests/vmi_doc.rs"),
    }
}

/// `vmi` without the field at `path` (`[]` read as the first item).
fn without(vmi: &Value, path: &str) -> Value {
    let mut vmi = vmi.clone();
    let (parent, leaf) = path.rsplit_once('.').expect("a path with a parent");
    let mut at = &mut vmi;
    for segment in parent.split('.') {
        at = match segment.strip_suffix("[]") {
            Some(list) => &mut at[list][0],
            None => &mut at[segment],
        };
    }
    let removed = at.as_object_mut().and_then(|object| object.remove(leaf));
    assert!(removed.is_some(), "{path} is not in the example");
    vmi
}

#[test]
fn every_field_without_effect_is_logged_and_leaves_the_domain_as_it_is() {
    let mut failures = Vec::new();
    for entry in WITHOUT_EFFECT {
        let with = vmi_json(&without_effect_example(entry.field));
        let logged = parse_vmi(&with)
            .map(|vmi| fields_without_effect(&vmi))
            .unwrap_or_default();
        let expected = entry.field.replace("[]", "[0]");
        if logged != [expected.clone()] {
            failures.push(format!("{}: logged as {logged:?}", entry.field));
        }
        match (
            sync_checks(&with, Host::Kvm),
            sync_checks(&without(&with, entry.field), Host::Kvm),
        ) {
            (Ok(a), Ok(b)) if a == b => {}
            (Ok(_), Ok(_)) => failures.push(format!("{}: changes the domain", entry.field)),
            (a, b) => failures.push(format!(
                "{}: with it {:?}, without it {:?}",
                entry.field,
                a.err(),
                b.err()
            )),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The JSON names of the fields of type `type_name` in the VMI model's
/// source: serde's `rename` when given, else the camelCase of the Rust
/// name (every struct there renames all fields to camelCase).
fn model_fields_of_type(type_name: &str) -> Vec<String> {
    let source = repo_file("src/vmi/types.rs");
    let lines: Vec<&str> = source.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some((name, ty)) = line
            .trim()
            .strip_prefix("pub ")
            .and_then(|d| d.split_once(':'))
        else {
            continue;
        };
        if ty.trim().trim_end_matches(',') != type_name {
            continue;
        }
        let renamed = lines[..i]
            .iter()
            .rev()
            .take_while(|l| l.trim().starts_with("#[") || l.trim().starts_with("///"))
            .find_map(|l| {
                let (_, rest) = l.split_once("rename = \"")?;
                rest.split_once('"').map(|(json, _)| json.to_string())
            });
        let camel: String = name
            .split('_')
            .enumerate()
            .map(|(n, word)| {
                let mut chars = word.chars();
                match (n, chars.next()) {
                    (0, _) | (_, None) => word.to_string(),
                    (_, Some(first)) => first.to_uppercase().chain(chars).collect(),
                }
            })
            .collect();
        found.push(renamed.unwrap_or(camel));
    }
    assert!(
        !found.is_empty(),
        "no field of type {type_name} in src/vmi/types.rs"
    );
    found
}

#[test]
fn every_field_the_vmi_model_refuses_or_ignores_is_in_its_table() {
    let last = |path: &str| {
        path.rsplit('.')
            .next()
            .unwrap_or_default()
            .trim_end_matches("[]")
            .to_string()
    };
    let refused: BTreeSet<String> = Refused::ALL.iter().map(|r| last(r.path())).collect();
    let missing: Vec<String> = model_fields_of_type("Unsupported")
        .into_iter()
        .filter(|name| !refused.contains(name))
        .collect();
    assert!(
        missing.is_empty(),
        "the VMI model refuses {missing:?}, which convert::Refused (and docs/vmi.md) do not list"
    );
    let ignored: BTreeSet<String> = WITHOUT_EFFECT.iter().map(|f| last(f.field)).collect();
    let missing: Vec<String> = model_fields_of_type("Ignored")
        .into_iter()
        .filter(|name| !ignored.contains(name))
        .collect();
    assert!(
        missing.is_empty(),
        "the VMI model ignores {missing:?}, which vmi::WITHOUT_EFFECT (and docs/vmi.md) do not list"
    );
}

/// docs/vmi.md's "Versions" table is `VERSION_FACTS`, row for row: the
/// field, the libvirt version it needs and what an older daemon does.
#[test]
fn the_versions_table_is_the_converters_version_facts() {
    let doc = repo_file("docs/vmi.md");
    let start = doc
        .find("\n## Versions\n")
        .expect("docs/vmi.md has a Versions section");
    let section = &doc[start + 1..];
    let section = &section[..section[3..]
        .find("\n## ")
        .map_or(section.len(), |end| end + 3)];
    let rows: Vec<Vec<String>> = section
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            line.trim_matches('|')
                .split(" | ")
                .map(|cell| cell.trim().to_string())
                .collect()
        })
        .collect();
    let facts: Vec<Vec<String>> = virt_launcher::convert::VERSION_FACTS
        .iter()
        .map(|fact| {
            let (major, minor, micro) = fact.libvirt;
            vec![
                format!("`{}`", fact.field),
                format!("{major}.{minor}.{micro}"),
                fact.older.to_string(),
            ]
        })
        .collect();
    assert_eq!(rows, facts, "docs/vmi.md's Versions table");
    // The versions the "Checked before libvirt" table gives agree.
    let checked = repo_file("docs/vmi.md");
    for fact in virt_launcher::convert::VERSION_FACTS {
        let (major, minor, micro) = fact.libvirt;
        if fact.older.starts_with("refused") {
            let row = format!(
                "| `{}` | libvirt is older than {major}.{minor}.{micro} |",
                fact.field
            );
            assert!(checked.contains(&row), "docs/vmi.md has no row {row}");
        }
    }
}
