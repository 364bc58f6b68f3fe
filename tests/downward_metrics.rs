//! Downward metrics on the real test guest (run under
//! `flock /work/qemu-tests.lock`): the guest reads the vhostmd page the
//! way `vm-dump-metrics` does, from the metrics disk (a direct read of the
//! block device, the header's sum checked) and from the
//! `org.github.vhostmd.1` virtio-serial port (a request, the answer up to
//! a blank line), and finds the launcher's real figures there.

mod common;

use std::time::{Duration, Instant};

use common::guest::*;
use common::*;
use serde_json::json;

/// The value of the metric `name` of `context` in a page, if it has it.
fn metric(page: &str, context: &str, name: &str) -> Option<String> {
    page.split("<metric ").skip(1).find_map(|block| {
        let ours = block.contains(&format!("context=\"{context}\""))
            && block.contains(&format!("<name>{name}</name>"));
        let value = block.split_once("<value>")?.1.split_once("</value>")?.0;
        ours.then(|| value.to_string())
    })
}

fn number(page: &str, context: &str, name: &str) -> f64 {
    metric(page, context, name)
        .unwrap_or_else(|| panic!("no {context} {name} in {page}"))
        .parse()
        .unwrap_or_else(|e| panic!("{context} {name}: {e} in {page}"))
}

/// Reads the metrics disk as libmetrics does (O_DIRECT, the device whose
/// first bytes are vhostmd's signature): its header as hex, then its body.
const READ_DISK: &str = r#"
for d in /sys/block/*; do
    dev=/dev/${d##*/}
    [ "$(dd if=$dev bs=512 count=1 iflag=direct 2>/dev/null | head -c 4)" = mvbd ] || continue
    dd if=$dev of=/run/vhostmd bs=65536 count=4 iflag=direct 2>/dev/null || exit 2
    od -An -tx1 -N16 /run/vhostmd
    echo ---
    tail -c +17 /run/vhostmd | tr -d '\000'
    exit 0
done
exit 1
"#;

/// The page on the disk, its header checked: not busy, its length and
/// byte sum those of the body.
fn disk_page(client: &mut Client) -> String {
    let (code, out) = guest_sh(client, READ_DISK);
    assert_eq!(code, 0, "no vhostmd disk in the guest: {out}");
    let (hex, body) = out.split_once("---\n").unwrap_or_else(|| panic!("{out}"));
    let header: Vec<u8> = hex
        .split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect();
    assert_eq!(header.len(), 16, "{hex}");
    assert_eq!(&header[..4], b"mvbd");
    let field = |at: usize| u32::from_be_bytes(header[at..at + 4].try_into().unwrap());
    assert_eq!(field(4), 0, "the guest read a busy page");
    let length = field(12) as usize;
    let body = &body.as_bytes()[..length];
    let sum = body.iter().fold(0u32, |s, &b| s.wrapping_add(u32::from(b)));
    assert_eq!(sum, field(8), "the body's sum");
    String::from_utf8(body.to_vec()).unwrap()
}

/// What `vm-dump-metrics` does with the port: the request, then the
/// answer up to the blank line.
const READ_CHANNEL: &str = r#"
port=/dev/virtio-ports/org.github.vhostmd.1
[ -e $port ] || exit 3
timeout 10 sh -c '
    exec 3<>'$port'
    printf "GET /metrics/XML\n\n" >&3
    while IFS= read -r line <&3; do
        [ -z "$line" ] && exit 0
        echo "$line"
    done
    exit 4'
"#;

/// The answer of the port, asked until the launcher is connected.
fn channel_page(client: &mut Client) -> String {
    let deadline = Instant::now() + STEP;
    loop {
        let (code, out) = guest_sh(client, READ_CHANNEL);
        if code == 0 && out.contains("<name>HostName</name>") {
            return out;
        }
        assert_ne!(code, 3, "the guest has no org.github.vhostmd.1 port");
        assert!(
            Instant::now() < deadline,
            "no answer on the port ({code}): {out}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The VM's and the host's figures on a page.
fn check_page(page: &str) {
    assert_eq!(
        metric(page, "host", "HostName").as_deref(),
        Some("node-e2e"),
        "{page}"
    );
    assert_eq!(
        metric(page, "host", "HostSystemInfo").as_deref(),
        Some("linux")
    );
    assert_eq!(
        metric(page, "host", "VirtualizationVendor").as_deref(),
        Some("kubevirt.io")
    );
    let product = metric(page, "host", "VirtProductInfo").unwrap_or_default();
    assert!(product.starts_with("QEMU "), "{page}");
    assert_eq!(number(page, "vm", "ResourceProcessorLimit"), 1.0);
    // The balloon at the VMI's 192Mi.
    assert_eq!(
        number(page, "vm", "PhysicalMemoryAllocatedToVirtualSystem"),
        196_608.0
    );
    assert!(number(page, "vm", "TotalCPUTime") > 0.0, "{page}");
    assert!(number(page, "host", "FreePhysicalMemory") > 0.0, "{page}");
    assert!(
        page.contains(
            "<metric type=\"real64\" context=\"vm\" unit=\"s\">\n    <name>TotalCPUTime</name>"
        ),
        "{page}"
    );
}

#[test]
fn the_guest_reads_its_metrics_from_the_vhostmd_disk_and_the_virtio_serial_port() {
    if !require(REAL_GUEST) {
        return;
    }
    let mut opts = GuestOptions::new("metrics");
    opts.extra_volumes.push((
        json!({"name": "metrics", "disk": {"bus": "virtio"}}),
        json!({"name": "metrics", "downwardMetrics": {}}),
    ));
    let mut vmi = guest_vmi(&opts);
    vmi["spec"]["domain"]["devices"]["downwardMetrics"] = json!({});
    let mut g = boot_vmi_env(
        TempTree::new("dm-guest"),
        "metrics",
        vmi,
        &[],
        &["NODE_NAME=node-e2e"],
    );

    // The disk: written every 5 s once the domain runs.
    let deadline = Instant::now() + STEP;
    let first = loop {
        let page = disk_page(&mut g.client);
        if page.contains("<name>HostName</name>") {
            break page;
        }
        assert!(
            Instant::now() < deadline,
            "the disk was never written: {page}"
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    check_page(&first);
    let deadline = Instant::now() + STEP;
    let second = loop {
        std::thread::sleep(Duration::from_secs(2));
        let page = disk_page(&mut g.client);
        if number(&page, "host", "Time") > number(&first, "host", "Time") {
            break page;
        }
        assert!(
            Instant::now() < deadline,
            "the disk was never rewritten: {page}"
        );
    };
    check_page(&second);
    assert!(
        number(&second, "vm", "TotalCPUTime") > number(&first, "vm", "TotalCPUTime"),
        "the guest's CPU time did not advance:\n{first}\n{second}"
    );

    // The port: a fresh page for each request.
    let first = channel_page(&mut g.client);
    check_page(&first);
    std::thread::sleep(Duration::from_secs(2));
    let second = channel_page(&mut g.client);
    check_page(&second);
    assert!(
        number(&second, "host", "Time") > number(&first, "host", "Time"),
        "{first}\n{second}"
    );
    assert!(
        number(&second, "vm", "TotalCPUTime") > number(&first, "vm", "TotalCPUTime"),
        "{first}\n{second}"
    );
}
