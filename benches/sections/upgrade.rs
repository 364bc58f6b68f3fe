//! `upgrade` (issue 34): 20 hand-overs in a row on libvirt's test driver
//! (in-process; the static build: libvirtd's) while a client pings every 10 ms, for the default build and the static
//! one (`VL_STATIC_BIN`, static -> static): the hand-over time the new
//! launcher logs (the old one's exec -> the new one ready on the same
//! socket) and the longest gap the pinging client saw (its connection
//! closed -> its next ping answered, through a reconnect).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::common::upgrade::*;
use super::common::*;

const ROUNDS: usize = 20;

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
    for round in 1..=ROUNDS {
        let reply = launcher.client().request("upgrade", Value::Null);
        assert!(reply.get("return").is_some(), "{reply}");
        wait_resumed(&mut launcher, round, Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(50));
    }
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

pub fn upgrade() {
    hand_overs(&launcher_bin(), "default", "test:///default");
    match std::env::var_os("VL_STATIC_BIN").map(PathBuf::from) {
        // The static build has no in-process test driver: libvirtd's.
        Some(bin) => hand_overs(&bin, "static", "test+unix:///default"),
        None => println!(
            "upgrade, static build: VL_STATIC_BIN is not set; scripts/bench.sh builds the static binary and sets it"
        ),
    }
}
