//! How fast the launcher is gone once told to go:
//!
//! - SIGTERM -> process exit on libvirt's test driver, with a running
//!   domain (whose guest honours the power button at once): the launcher's
//!   own cost of a graceful stop (events, drain, socket and lock removal,
//!   undefine);
//! - `kill` -> process exit on the real test guest (QEMU under plain
//!   emulation, `--spawn-libvirt`): destroy, the Stopped event, clean-up
//!   and stopping the spawned daemons. KubeVirt's Go launcher exits about
//!   1.9 s after its kill RPC.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::guest::{GuestOptions, STEP, boot};
use crate::common::{Launcher, TempTree, demo_vmi};

/// Polls until the process has exited; the time it took from `since`.
fn exited_after(launcher: &mut Launcher, since: Instant) -> Duration {
    let deadline = since + STEP;
    loop {
        if let Ok(Some(status)) = launcher.child.try_wait() {
            let took = since.elapsed();
            launcher.status = Some(status);
            return took;
        }
        assert!(Instant::now() < deadline, "launcher did not exit");
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn summary(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    format!(
        "p50 {:.1} ms, min {:.1} ms, max {:.1} ms ({} runs)",
        ms(samples[samples.len() / 2]),
        ms(samples[0]),
        ms(samples[samples.len() - 1]),
        samples.len()
    )
}

pub fn exit_figures() {
    let mut samples = Vec::new();
    for _ in 0..20 {
        let mut launcher = Launcher::start_test(&[]);
        launcher.wait_ready(STEP);
        let mut client = launcher.client();
        client.ok("sync", json!({ "vmi": demo_vmi() }));
        let t = Instant::now();
        launcher.signal("TERM");
        samples.push(exited_after(&mut launcher, t));
        assert_eq!(launcher.status.and_then(|s| s.code()), Some(0));
    }
    println!(
        "SIGTERM -> process exit (test:///default, running domain): {}",
        summary(samples)
    );

    let mut replies = Vec::new();
    let mut exits = Vec::new();
    for run in 0..3 {
        let opts = GuestOptions::new(&format!("exit{run}"));
        let mut booted = boot(TempTree::new(&format!("bench-exit-{run}")), &opts, &[]);
        // A guest in its steady state: the agent poller's first round,
        // which starts when the agent connects, is over. (A kill during it
        // can leave libvirtd in an agent call on the dying domain, and the
        // spawned libvirtd's exit then waits out that call's 5 s timeout.)
        let deadline = Instant::now() + STEP;
        while booted.client.ok("query-guest-info", Value::Null)["hostname"] == "" {
            assert!(Instant::now() < deadline, "the agent poller never reported");
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_secs(1));
        let t = Instant::now();
        let reply = booted.client.request_timeout("kill", Value::Null, STEP);
        replies.push(t.elapsed());
        assert!(reply.get("return").is_some(), "{reply}");
        exits.push(exited_after(&mut booted.launcher, t));
        assert_eq!(booted.launcher.status.and_then(|s| s.code()), Some(0));
    }
    println!(
        "kill -> reply (real guest, --spawn-libvirt): {}",
        summary(replies)
    );
    println!(
        "kill -> process exit (real guest, --spawn-libvirt): {}   [KubeVirt's launcher: ~1.9 s]",
        summary(exits)
    );
}
