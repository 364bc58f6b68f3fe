//! `mixed`: live migration in KubeVirt mode across two nodes (network
//! namespaces) through virt-handler's proxies, driven by virt-handler's
//! client, for each pairing of launchers: this one -> this one, KubeVirt's
//! -> this one, this one -> KubeVirt's, and KubeVirt's -> KubeVirt's beside
//! them. Per pairing: the time from MigrateVirtualMachine to the target
//! running (what virt-handler waits), and libvirt's own figures from the
//! target's completed job: the migration's elapsed time and the guest's
//! downtime. The test guest (192 MiB, memory only) under emulation.

use std::process::Command;
use std::time::Duration;

use crate::common::fleet::*;
use crate::common::guest::REAL_GUEST;
use crate::common::{Need, TempTree, require};

/// Migrations per pairing.
const HOPS: usize = 3;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// "p50 (min-max)" of millisecond samples; "n/a" for none.
fn describe(samples: &[f64]) -> String {
    if samples.is_empty() {
        return "n/a".into();
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    format!(
        "{:.0} ({:.0}-{:.0})",
        sorted[sorted.len() / 2],
        sorted[0],
        sorted[sorted.len() - 1]
    )
}

/// libvirt's figures of the completed incoming migration on `pod`'s daemon
/// (`virsh domjobinfo --completed`): elapsed time and downtime, in ms.
fn completed_job(pod: &Pod) -> (Option<f64>, Option<f64>) {
    let uri = format!("qemu:///system?socket={}", pod.daemon_socket());
    let out = Command::new("virsh")
        .args(["-c", &uri, "domjobinfo", "--completed", &pod.domain])
        .output();
    let text = out
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(name))
            .and_then(|l| l.split(':').nth(1))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    (field("Time elapsed"), field("Total downtime"))
}

#[derive(Default)]
struct Figures {
    call_to_running: Vec<f64>,
    elapsed: Vec<f64>,
    downtime: Vec<f64>,
}

pub fn mixed() {
    use Launcher::{Go, Ours};
    println!("mixed fleet: live migration across two nodes through virt-handler's proxies");
    if !require(&[REAL_GUEST, &[Need::Kvhandler, Need::GoLauncher]].concat()) {
        println!("  (skipped: needs root, QEMU, the test guest, kvhandler and virt-launcher-go)");
        return;
    }
    let pairings = [(Ours, Ours), (Go, Ours), (Ours, Go), (Go, Go)];
    let mut figures: Vec<Figures> = pairings.iter().map(|_| Figures::default()).collect();
    // One guest per sequence; a sequence alternating the two launchers
    // gives both mixed pairings.
    let sequences: [(&str, Vec<Launcher>); 3] = [
        ("ours", vec![Ours; HOPS + 1]),
        ("go", vec![Go; HOPS + 1]),
        (
            "mixed",
            (0..=2 * HOPS)
                .map(|i| if i % 2 == 0 { Go } else { Ours })
                .collect(),
        ),
    ];
    for (label, order) in &sequences {
        let nodes = Nodes::new();
        let a = nodes.source_node();
        let b = nodes.target_node();
        let tag = format!("bm-{label}");
        let name = format!("bm{label}");
        let logs = TempTree::new(&format!("{tag}-proxy"));
        let vmi = mixed_vmi(&name, false);
        let (mut pod, _) = boot(order[0], a, &tag, &name, &vmi);
        let mut here = (a, b);
        for (i, kind) in order.iter().enumerate().skip(1) {
            let from = order[i - 1];
            let (target, took) = hop(
                pod,
                *kind,
                here.0,
                here.1,
                &vmi,
                &format!("migration-{i}"),
                &format!("{tag}-{i}"),
                &logs,
            );
            pod = target;
            let (elapsed, downtime) = completed_job(&pod);
            if let Some(at) = pairings.iter().position(|p| *p == (from, *kind)) {
                let f = &mut figures[at];
                f.call_to_running.push(ms(took));
                f.elapsed.extend(elapsed);
                f.downtime.extend(downtime);
            }
            here = (here.1, here.0);
        }
        end_guest(pod);
    }
    println!(
        "  {:<34} {:>22} {:>22} {:>22}",
        "pairing (ms, p50 (min-max))", "migrate -> running", "libvirt elapsed", "downtime"
    );
    for ((from, to), f) in pairings.iter().zip(&figures) {
        let name = |k: &Launcher| match k {
            Ours => "this launcher",
            Go => "KubeVirt's",
        };
        println!(
            "  {:<34} {:>22} {:>22} {:>22}",
            format!("{} -> {}", name(from), name(to)),
            describe(&f.call_to_running),
            describe(&f.elapsed),
            describe(&f.downtime)
        );
    }
}
