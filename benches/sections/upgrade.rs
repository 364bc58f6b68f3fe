//! `upgrade` (issue 34): 20 hand-overs in a row on libvirt's test driver
//! (in-process; the static build: libvirtd's) while a client pings every 10 ms, for the default build and the static
//! one (`VL_STATIC_BIN`, static -> static): the hand-over time the new
//! launcher logs (the old one's exec -> the new one ready on the same
//! socket) and the longest gap the pinging client saw (its connection
//! closed -> its next ping answered, through a reconnect). Then the same
//! on the test guest with the launcher's own daemons (`--spawn-libvirt`,
//! default build), the guest noting its uptime on its disk every 10 ms
//! (each note synced to the disk): the longest stall of those notes across
//! the hand-overs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::common::guest::{GuestOptions, boot, ext4_image, guest_sh};
use super::common::upgrade::*;
use super::common::*;

const ROUNDS: usize = 20;

/// `ROUNDS` upgrades of `launcher` in a row, each waited for (up to
/// `timeout`), then `pause` before the next.
fn upgrade_in_a_row(launcher: &mut Launcher, timeout: Duration, pause: Duration) {
    for round in 1..=ROUNDS {
        let reply = launcher.client().request("upgrade", Value::Null);
        assert!(reply.get("return").is_some(), "{reply}");
        wait_resumed(launcher, round, timeout);
        std::thread::sleep(pause);
    }
}

fn hand_overs(bin: &Path, build: &str, uri: &str) {
    let args = ["--connect", uri, "--name", "up", "--namespace", "bench"].map(String::from);
    let mut launcher = Launcher::start_binary(
        bin,
        TempTree::new("bench-upgrade"),
        &[],
        &args,
        Some("info"),
        None,
    );
    launcher.wait_ready(Duration::from_secs(30));
    let socket = launcher.ready_socket();
    let pinger = Pinger::start(socket.clone());
    let watch = SocketWatch::start(socket);
    std::thread::sleep(Duration::from_millis(100));
    upgrade_in_a_row(
        &mut launcher,
        Duration::from_secs(30),
        Duration::from_millis(50),
    );
    let tally = pinger.finish();
    let missing = watch.finish();
    let times: Vec<Duration> = hand_over_ms(&launcher)
        .into_iter()
        .map(|ms| Duration::from_secs_f64(ms / 1e3))
        .collect();
    let (p50, _, max) = super::percentiles(times);
    println!(
        "upgrade, {build} build -> itself ({ROUNDS} hand-overs, {uri}, a client pinging every 10 ms): \
         hand-over (exec -> new launcher ready) p50 {:.1} ms, max {:.1} ms; longest client-visible gap {:.1} ms; \
         {} pings answered, {} connections closed, {} connects failed, socket file missing {missing} times   [goal < 20 ms on the static build]",
        p50 / 1000.0,
        max / 1000.0,
        tally.longest_gap.as_secs_f64() * 1e3,
        tally.answered,
        tally.closed,
        tally.failed_connects.len()
    );
}

/// `ROUNDS` hand-overs under the test guest (`--spawn-libvirt`), which
/// notes /proc/uptime (10 ms resolution) on its data disk every 10 ms,
/// syncing each note: the longest time between two notes.
fn under_a_guest() {
    let images = TempTree::new("bench-upgrade-disk");
    let disk = images.path("data.img");
    ext4_image(&disk, 64);
    let mut opts = GuestOptions::new("upbench");
    opts.data_disk = Some(disk);
    let mut booted = boot(TempTree::new("bench-upgrade-guest"), &opts, &[]);
    let (code, _) = guest_sh(
        &mut booted.client,
        "(while true; do read up idle < /proc/uptime; echo $up >> /mnt/data/ticks; sync; sleep 0.01; done) >/dev/null 2>&1 &",
    );
    assert_eq!(code, 0);
    let mut launcher = booted.launcher;
    // A baseline: as long again of notes without a hand-over, since under
    // TCG on a busy host the notes stall now and then on their own.
    std::thread::sleep(Duration::from_secs(3));
    let (_, out) = guest_sh(&mut launcher.client(), "wc -l < /mnt/data/ticks");
    let baseline_notes: u64 = out.trim().parse().unwrap_or(0);
    let pinger = Pinger::start(launcher.ready_socket());
    std::thread::sleep(Duration::from_millis(300));
    upgrade_in_a_row(
        &mut launcher,
        Duration::from_secs(60),
        Duration::from_millis(100),
    );
    let tally = pinger.finish();
    // The longest gap among the baseline's notes, then among the rest.
    let (_, out) = guest_sh(
        &mut launcher.client(),
        &format!(
            "awk 'NR > 1 && NR <= {baseline_notes} && $1 - p > b {{ b = $1 - p }} \
             NR > {baseline_notes} + 1 && $1 - p > m {{ m = $1 - p }} {{ p = $1 }} \
             END {{ print b, m, NR - {baseline_notes} }}' /mnt/data/ticks"
        ),
    );
    let mut fields = out.split_whitespace();
    let mut number = || -> f64 {
        fields
            .next()
            .and_then(|f| f.parse().ok())
            .unwrap_or(f64::NAN)
    };
    let baseline_stall = number();
    let stall = number();
    let notes = number();
    let times: Vec<Duration> = hand_over_ms(&launcher)
        .into_iter()
        .map(|ms| Duration::from_secs_f64(ms / 1e3))
        .collect();
    let (p50, _, max) = super::percentiles(times);
    println!(
        "upgrade under the test guest, default build, --spawn-libvirt ({ROUNDS} hand-overs, a client pinging every 10 ms): \
         hand-over p50 {:.1} ms, max {:.1} ms; longest client-visible gap {:.1} ms; \
         the guest's 10 ms notes on its disk ({notes}) stalled at most {:.0} ms, against {:.0} ms in the 3 s before ({baseline_notes} notes, no hand-over; uptime's resolution: 10 ms)   [goal < 50 ms]",
        p50 / 1000.0,
        max / 1000.0,
        tally.longest_gap.as_secs_f64() * 1e3,
        stall * 1e3,
        baseline_stall * 1e3
    );
    launcher.signal("TERM");
    let _ = launcher.wait_exit(Duration::from_secs(60));
}

pub fn upgrade() {
    hand_overs(&launcher_bin(), "default", "test:///default");
    match std::env::var_os("VL_STATIC_BIN").map(PathBuf::from) {
        // The static build has no in-process test driver: libvirtd's.
        Some(bin) => hand_overs(&bin, "static", "test+unix:///default"),
        None => println!(
            "upgrade, static build: VL_STATIC_BIN is not set; scripts/bench.sh builds the static binary and sets it"
        ),
    }
    under_a_guest();
}
