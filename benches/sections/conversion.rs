//! VMI → domain XML conversion of every example (pure: no file is created),
//! KubeVirt's defaults included. The target (<= 200 µs) applies to the
//! richest example: the one whose domain XML is largest.

use std::fs;
use std::path::Path;
use std::time::Instant;

use serde_json::Value;

use super::common;

pub fn conversion() {
    use virt_launcher::convert;
    let examples = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/examples"));
    let mut names: Vec<_> = fs::read_dir(examples)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    names.sort();
    println!("VMI -> domain XML conversion (pure, no file creation; release build):");
    let mut rows = Vec::new();
    for path in names {
        let value: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
        let vmi = virt_launcher::vmi::parse_vmi(&value).unwrap();
        let ctx = common::examples::example_context(&vmi, convert::DomainType::Kvm);
        let rounds = 5000u32;
        let t = Instant::now();
        for _ in 0..rounds {
            std::hint::black_box(convert::convert(&vmi, &ctx).unwrap());
        }
        let convert_only = t.elapsed() / rounds;
        let t = Instant::now();
        for _ in 0..rounds {
            let vmi = virt_launcher::vmi::parse_vmi(std::hint::black_box(&value)).unwrap();
            let xml = convert::convert(&vmi, &ctx)
                .unwrap()
                .domain
                .to_xml()
                .unwrap();
            std::hint::black_box(xml);
        }
        let full = t.elapsed() / rounds;
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let size = convert::convert(&vmi, &ctx)
            .unwrap()
            .domain
            .to_xml()
            .unwrap()
            .len();
        rows.push((stem, size, convert_only, full));
    }
    let richest = rows.iter().map(|r| r.1).max().unwrap_or(0);
    for (stem, size, convert_only, full) in rows {
        let target = if size == richest {
            "   [richest; target <= 200 us]"
        } else {
            ""
        };
        println!(
            "  {stem:<26} {size:>5} B XML; convert {:>6.1} us; parse + convert + XML {:>6.1} us{target}",
            convert_only.as_secs_f64() * 1e6,
            full.as_secs_f64() * 1e6
        );
    }
}
