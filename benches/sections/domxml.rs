//! Reading domain XML (`Domain::from_xml`, what every `query-domain` miss,
//! sync and hotplug plan does with libvirt's live XML): our reader beside
//! quick-xml's serde deserializer, which it replaced, on the live XML of a
//! QEMU domain and on the largest golden file; and the time per element of
//! ever wider documents (the reader's time is linear in their size).

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use virt_launcher::domxml::Domain;

fn per_call(rounds: u32, mut f: impl FnMut()) -> Duration {
    f();
    let t = Instant::now();
    for _ in 0..rounds {
        f();
    }
    t.elapsed() / rounds
}

pub fn reading() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let live = root.join("src/domxml/testdata/live-qemu.xml");
    let largest = fs::read_dir(root.join("tests/golden"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "xml"))
        .max_by_key(|p| fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .unwrap();
    println!("Domain XML reading (Domain::from_xml; release build):");
    for path in [live, largest] {
        let xml = fs::read_to_string(&path).unwrap();
        let ours = per_call(5000, || {
            std::hint::black_box(Domain::from_xml(std::hint::black_box(&xml)).unwrap());
        });
        let quick_xml = per_call(5000, || {
            let domain: Domain = quick_xml::de::from_str(std::hint::black_box(&xml)).unwrap();
            std::hint::black_box(domain);
        });
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        println!(
            "  {name:<26} {:>5} B: {:>6.1} us (quick-xml's serde deserializer: {:>6.1} us)",
            xml.len(),
            ours.as_secs_f64() * 1e6,
            quick_xml.as_secs_f64() * 1e6
        );
    }
    // Wide documents: many siblings of distinct names (unknown to the
    // model) beside many of one name. Linear reading keeps the time per
    // element the same as the document grows.
    let live = fs::read_to_string(root.join("src/domxml/testdata/live-qemu.xml")).unwrap();
    let per_element: Vec<(usize, f64)> = [5_000, 20_000, 80_000]
        .iter()
        .map(|&n| {
            let xml = wide(&live, n);
            let took = per_call(5, || {
                std::hint::black_box(Domain::from_xml(std::hint::black_box(&xml)).unwrap());
            });
            (n, took.as_secs_f64() * 1e9 / (2 * n) as f64)
        })
        .collect();
    let shown: Vec<String> = per_element
        .iter()
        .map(|(n, ns)| format!("{} elements {ns:.0} ns", 2 * n))
        .collect();
    println!(
        "  wide devices (distinct names beside one repeated name), per element: {}   [linear: about the same for each size]",
        shown.join(", ")
    );
}

/// `live` with `n` elements of distinct names and `n` elements of one
/// name added to its devices.
fn wide(live: &str, n: usize) -> String {
    let mut extra = String::with_capacity(n * 40);
    for i in 0..n {
        extra.push_str(&format!("<vl-unknown-{i}/><vl-repeated id='{i}'/>"));
    }
    live.replacen("</devices>", &format!("{extra}</devices>"), 1)
}
