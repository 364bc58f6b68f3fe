//! Reading domain XML (`Domain::from_xml`, what every `query-domain` miss,
//! sync and hotplug plan does with libvirt's live XML): our reader beside
//! quick-xml's serde deserializer, which it replaced, on the live XML of a
//! QEMU domain and on the largest golden file.

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
}
