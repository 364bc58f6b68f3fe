//! Golden tests: every `examples/*.json` converts to exactly
//! `tests/golden/<example>.xml` and parses back into the same model.
//! `UPDATE_GOLDEN=1 cargo test --test golden` rewrites the golden files
//! that changed, prints the diff and fails, so each is reviewed.
//! These run no program and need no libvirt; tests/convert_libvirt.rs feeds
//! the same XML to libvirt's schema and drivers.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use common::diff::line_diff;
use common::examples::*;
use virt_launcher::convert::{ConvertContext, DomainType, convert};
use virt_launcher::domxml::Domain;

fn golden_path(stem: &str) -> PathBuf {
    Path::new(GOLDEN_DIR).join(format!("{stem}.xml"))
}

#[test]
fn there_are_enough_examples() {
    let stems: Vec<String> = examples().into_iter().map(|(stem, _)| stem).collect();
    assert!(stems.len() >= 16, "{stems:?}");
    assert!(
        stems.contains(&"vmi".to_string()),
        "examples/vmi.json (the demo) is missing"
    );
}

/// With `UPDATE_GOLDEN=1` a golden file that changed is rewritten, its
/// diff printed, and the test fails: a regenerated file is always a change
/// someone reviewed and committed.
#[test]
fn examples_match_golden_xml() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let mut mismatches = Vec::new();
    for (stem, path) in examples() {
        let xml = example_xml(&path, DomainType::Kvm);
        let golden = golden_path(&stem);
        let diff = match fs::read_to_string(&golden) {
            Ok(expected) if expected == xml => continue,
            Ok(expected) => line_diff(&expected, &xml),
            Err(err) if update => format!("(new file; it could not be read: {err})"),
            Err(err) => {
                mismatches.push(format!("{stem}: cannot read {}: {err}", golden.display()));
                continue;
            }
        };
        if update {
            fs::create_dir_all(GOLDEN_DIR).unwrap_or_else(|e| panic!("{GOLDEN_DIR}: {e}"));
            fs::write(&golden, &xml).unwrap_or_else(|e| panic!("{}: {e}", golden.display()));
        }
        mismatches.push(format!("{}:\n{diff}", golden.display()));
    }
    if update {
        assert!(
            mismatches.is_empty(),
            "UPDATE_GOLDEN=1 rewrote {} golden file(s); review the change and commit it:\n{}",
            mismatches.len(),
            mismatches.join("\n")
        );
    }
    assert!(
        mismatches.is_empty(),
        "{}\n(run `UPDATE_GOLDEN=1 cargo test --test golden`, then review and commit the change)",
        mismatches.join("\n")
    );
}

#[test]
fn every_golden_file_has_an_example() {
    let stems: BTreeSet<String> = examples().into_iter().map(|(stem, _)| stem).collect();
    for (stem, path) in files_with_ext(GOLDEN_DIR, "xml") {
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
        let vmi = load_example(&path);
        let domain = convert(&vmi, &example_context(&vmi, DomainType::Kvm))
            .unwrap_or_else(|e| panic!("{stem}: {e}"))
            .domain;
        let xml = domain.to_xml().unwrap_or_else(|e| panic!("{stem}: {e}"));
        let parsed = Domain::from_xml(&xml).unwrap_or_else(|e| panic!("{stem}: {e}"));
        assert_eq!(
            parsed, domain,
            "{stem}: the XML does not read back into the same model"
        );
    }
}

#[test]
fn demo_vmi_needs_nothing_on_disk_but_what_the_launcher_creates() {
    let root = std::env::temp_dir().join(format!("demo-plan-{}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(&root).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
    let vmi = load_example(&Path::new(EXAMPLES_DIR).join("vmi.json"));
    let ctx = ConvertContext {
        private_dir: root.join("private"),
        ephemeral_disk_dir: root.join("ephemeral"),
        container_disk_dir: root.join("container-disks"),
        hotplug_disk_dir: root.join("hotplug"),
        ..example_context(&vmi, DomainType::Test)
    };
    let conversion = convert(&vmi, &ctx).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(conversion.domain.domain_type, "test");
    let prepared =
        virt_launcher::disks::prepare(&conversion.disk_plan).unwrap_or_else(|e| panic!("{e}"));
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
