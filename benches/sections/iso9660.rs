//! The in-process ISO 9660 writer: a NoCloud seed (3 files) and a
//! configMap-sized image (200 files), in memory and to a file.

use std::fs;
use std::io::{self, BufWriter};
use std::time::{Duration, Instant};

use virt_launcher::disks::iso9660::{IsoFile, write_iso};

// The images, shared with the writer's unit tests and the tool tests.
#[path = "../../src/disks/iso9660/cases.rs"]
mod cases;

fn time_it(iterations: u32, mut f: impl FnMut()) -> Duration {
    f(); // warm up
    let start = Instant::now();
    for _ in 0..iterations {
        f();
    }
    start.elapsed() / iterations
}

pub fn iso9660() {
    let nocloud = cases::nocloud_files();
    let configmap = cases::configmap_files(200);
    let data_bytes: usize = configmap.iter().map(|f| f.data.len()).sum();
    let mut sizes = (0, 0);
    let nocloud_mem = time_it(2000, || {
        let mut out = Vec::new();
        write_iso(&mut out, "cidata", &nocloud).unwrap();
        sizes.0 = out.len();
    });
    let configmap_mem = time_it(200, || {
        let mut out = Vec::new();
        write_iso(&mut out, "cfgdata", &configmap).unwrap();
        sizes.1 = out.len();
    });
    let target = std::env::temp_dir().join(format!("bench-iso-{}.iso", std::process::id()));
    let to_file = |label: &str, files: &[IsoFile]| {
        let mut out = BufWriter::new(fs::File::create(&target).unwrap());
        write_iso(&mut out, label, files).unwrap();
        io::Write::flush(&mut out).unwrap();
    };
    let nocloud_file = time_it(200, || to_file("cidata", &nocloud));
    let configmap_file = time_it(50, || to_file("cfgdata", &configmap));
    let _ = fs::remove_file(&target);
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!("ISO 9660 writer (release build):");
    println!(
        "  NoCloud, 3 files ({} byte image): {:>8.1} us in memory, {:>8.1} us to a file",
        sizes.0,
        us(nocloud_mem),
        us(nocloud_file)
    );
    println!(
        "  configMap, 200 files ({data_bytes} data bytes, {} byte image): {:>8.1} us in memory, {:>8.1} us to a file",
        sizes.1,
        us(configmap_mem),
        us(configmap_file)
    );
}
