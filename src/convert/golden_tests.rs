//! Golden tests: every `examples/*.json` converts to exactly
//! `tests/golden/<example>.xml`, parses back into the same model, and passes
//! libvirt's schema (`virt-xml-validate`). `UPDATE_GOLDEN=1 cargo test`
//! rewrites the golden files.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{ConvertContext, DomainType, convert};
use crate::domxml::Domain;
use crate::vmi::{VirtualMachineInstance, parse_vmi};

const EXAMPLES_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
const GOLDEN_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");

/// The fixed context of the golden files: KubeVirt's default directories,
/// TCG, slirp, the UID from the VMI, fixed OVMF paths, one block PVC volume
/// name and one pre-created tap used by the examples.
pub(crate) fn golden_context(vmi: &VirtualMachineInstance) -> ConvertContext {
    super::example_context(vmi, DomainType::Qemu)
}

/// (example stem, example path), sorted.
pub(crate) fn examples() -> Vec<(String, PathBuf)> {
    let mut found: Vec<(String, PathBuf)> = fs::read_dir(EXAMPLES_DIR)
        .unwrap_or_else(|e| panic!("{EXAMPLES_DIR}: {e}"))
        .map(|entry| entry.unwrap_or_else(|e| panic!("{e}")).path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .filter_map(|path| Some((path.file_stem()?.to_string_lossy().into_owned(), path)))
        .collect();
    found.sort();
    found
}

pub(crate) fn load(path: &Path) -> VirtualMachineInstance {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let value: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    parse_vmi(&value).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub(crate) fn example_xml(path: &Path) -> (Domain, String) {
    let vmi = load(path);
    let conversion =
        convert(&vmi, &golden_context(&vmi)).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let xml = conversion
        .domain
        .to_xml()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (conversion.domain, xml)
}

fn golden_path(stem: &str) -> PathBuf {
    Path::new(GOLDEN_DIR).join(format!("{stem}.xml"))
}

#[test]
fn there_are_enough_examples() {
    let stems: Vec<String> = examples().into_iter().map(|(stem, _)| stem).collect();
    assert!(stems.len() >= 9, "{stems:?}");
    assert!(
        stems.contains(&"vmi".to_string()),
        "examples/vmi.json (the demo) is missing"
    );
}

#[test]
fn examples_match_golden_xml() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let mut mismatches = Vec::new();
    for (stem, path) in examples() {
        let (_, xml) = example_xml(&path);
        let golden = golden_path(&stem);
        if update {
            fs::create_dir_all(GOLDEN_DIR).unwrap_or_else(|e| panic!("{GOLDEN_DIR}: {e}"));
            fs::write(&golden, &xml).unwrap_or_else(|e| panic!("{}: {e}", golden.display()));
            continue;
        }
        match fs::read_to_string(&golden) {
            Ok(expected) if expected == xml => {}
            Ok(_) => mismatches.push(format!("{stem}: differs from {}", golden.display())),
            Err(err) => mismatches.push(format!("{stem}: cannot read {}: {err}", golden.display())),
        }
    }
    assert!(
        mismatches.is_empty(),
        "{}\n(run `UPDATE_GOLDEN=1 cargo test golden` after checking the change)",
        mismatches.join("\n")
    );
}

#[test]
fn every_golden_file_has_an_example() {
    let stems: BTreeSet<String> = examples().into_iter().map(|(stem, _)| stem).collect();
    for entry in fs::read_dir(GOLDEN_DIR).unwrap_or_else(|e| panic!("{GOLDEN_DIR}: {e}")) {
        let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        assert!(
            stems.contains(&stem),
            "{} has no example; remove it",
            path.display()
        );
    }
}

#[test]
fn golden_xml_parses_back_to_the_same_model() {
    for (stem, path) in examples() {
        let (domain, xml) = example_xml(&path);
        let parsed = Domain::from_xml(&xml).unwrap_or_else(|e| panic!("{stem}: {e}"));
        assert_eq!(
            parsed, domain,
            "{stem}: the XML does not read back into the same model"
        );
    }
}

#[test]
fn golden_xml_passes_libvirt_schema() {
    let dir = std::env::temp_dir().join(format!("golden-validate-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut failures = Vec::new();
    for (stem, path) in examples() {
        let (_, xml) = example_xml(&path);
        let file = dir.join(format!("{stem}.xml"));
        fs::write(&file, xml).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let output = Command::new("virt-xml-validate")
            .arg(&file)
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
    let _ = fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn demo_vmi_needs_nothing_on_disk_but_what_the_launcher_creates() {
    let root = std::env::temp_dir().join(format!("demo-plan-{}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(&root).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
    let vmi = load(&Path::new(EXAMPLES_DIR).join("vmi.json"));
    let ctx = ConvertContext {
        domain_type: DomainType::Test,
        private_dir: root.join("private"),
        ephemeral_disk_dir: root.join("ephemeral"),
        container_disk_dir: root.join("container-disks"),
        hotplug_disk_dir: root.join("hotplug"),
        ..golden_context(&vmi)
    };
    let conversion = convert(&vmi, &ctx).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(conversion.domain.domain_type, "test");
    let prepared = crate::disks::prepare(&conversion.disk_plan).unwrap_or_else(|e| panic!("{e}"));
    let iso = root.join("ephemeral/cloud-init-data/default/demo/noCloud.iso");
    let image = fs::read(&iso).unwrap_or_else(|e| panic!("{}: {e}", iso.display()));
    assert_eq!(&image[0x8001..0x8006], b"CD001");
    assert!(image.windows(13).any(|w| w == b"#cloud-config"));
    assert!(
        root.join("private/0c0f4a3e-5b1d-4f6a-9d2e-7a8b9c0d1e2f")
            .is_dir()
    );
    prepared.rollback();
    let left: Vec<_> = fs::read_dir(&root)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "rollback left {left:?}");
    let _ = fs::remove_dir_all(&root);
}
