//! Non-root mode and the probe subcommand (issue 15): start -> ready of a
//! launcher with its own daemons, as root and as an unprivileged user made
//! for the bench; and `virt-launcher probe` from exec to exit against a
//! booted guest whose agent is connected, run as that user, beside the
//! binary's bare exec (`--version`), which is the floor; then SIGTERM to
//! that guest's launcher -> the guest powered off by ACPI.

use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::common::guest::{GuestOptions, STEP, boot_as};
use super::common::unprivileged::TestUser;
use super::common::{BIN, Launcher, TempTree, lifecycle, named};

const RUNS: usize = 10;
const EXECS: usize = 50;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// p50 and max of `samples`, in ms.
fn summary(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    (
        ms(samples[samples.len() / 2]),
        ms(samples[samples.len() - 1]),
    )
}

/// exec -> launcher-sock accepts, for a launcher with --spawn-libvirt, `runs`
/// times. As `user`, with `home` as its HOME: where the launcher keeps the
/// QEMU capabilities its session daemon probed (`None`: a fresh, empty
/// home for each run, so each start is cold).
fn start_to_ready(user: Option<(&TestUser, Option<&Path>)>, runs: usize) -> Vec<Duration> {
    (0..runs)
        .map(|_| {
            let tree = TempTree::new("bench-nr-start");
            let args: Vec<String> = ["--spawn-libvirt", "--name", "b", "--namespace", "bench"]
                .map(String::from)
                .to_vec();
            let fresh = tree.path("home");
            let started = Instant::now();
            let mut launcher = match user {
                Some((user, home)) => {
                    let home = home.unwrap_or(&fresh);
                    std::fs::create_dir_all(home).expect("create the home");
                    user.give(home);
                    user.give(&tree.root);
                    let wrapper = ["env".to_string(), format!("HOME={}", home.display())];
                    Launcher::start_with(
                        tree,
                        &wrapper,
                        &args,
                        Some("info"),
                        Some((user.uid, user.gid)),
                    )
                }
                None => Launcher::start_in(tree, &args),
            };
            let socket = launcher.ready_socket();
            while UnixStream::connect(&socket).is_err() {
                if let Ok(Some(status)) = launcher.child.try_wait() {
                    panic!("launcher exited ({status}): {}", launcher.log_text());
                }
                assert!(started.elapsed() < Duration::from_secs(60));
                std::thread::sleep(Duration::from_micros(500));
            }
            let took = started.elapsed();
            launcher.signal("TERM");
            launcher.wait_exit(Duration::from_secs(30));
            took
        })
        .collect()
}

/// exec -> exit of `binary ARGS`, run as `user`, `EXECS` times; every run
/// must exit 0.
fn exec_times(binary: &Path, args: &[&str], user: &TestUser) -> Vec<Duration> {
    (0..EXECS)
        .map(|_| {
            let started = Instant::now();
            let status = Command::new(binary)
                .args(args)
                .uid(user.uid)
                .gid(user.gid)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .status()
                .expect("run the binary");
            let took = started.elapsed();
            assert!(status.success(), "{} {args:?}: {status}", binary.display());
            took
        })
        .collect()
}

pub fn nonroot() {
    println!("non-root mode (--spawn-libvirt as an unprivileged user) and the probe subcommand:");
    let user = TestUser::create("bench");
    let (root_p50, root_max) = summary(start_to_ready(None, RUNS));
    let (cold_p50, cold_max) = summary(start_to_ready(Some((&user, None)), RUNS));
    // One home for all runs: the first start probes QEMU and keeps the
    // entry there, the others start from it.
    let home = TempTree::new("bench-nr-home");
    user.give(&home.root);
    start_to_ready(Some((&user, Some(&home.path("home")))), 1);
    let (warm_p50, warm_max) = summary(start_to_ready(
        Some((&user, Some(&home.path("home")))),
        RUNS,
    ));
    println!(
        "  start -> ready with --spawn-libvirt ({RUNS} runs each): root p50 {root_p50:.0} ms (max {root_max:.0}); \
         non-root, the user's session cache warm p50 {warm_p50:.0} ms (max {warm_max:.0}), \
         cold (empty HOME, the daemon probes QEMU) p50 {cold_p50:.0} ms (max {cold_max:.0})"
    );

    let mut g = boot_as(
        Some(&user),
        TempTree::new("bench-nr-probe"),
        &GuestOptions::new("benchprobe"),
        &[],
    );
    let socket = g.launcher.ready_socket();
    let s = socket.to_str().unwrap_or_default().to_string();
    let probe = ["probe", "--socket", s.as_str(), "--timeout", "5s"];
    exec_times(Path::new(BIN), &probe, &user); // warm the page cache
    let (p50, max) = summary(exec_times(Path::new(BIN), &probe, &user));
    let (floor, _) = summary(exec_times(Path::new(BIN), &["--version"], &user));
    println!(
        "  virt-launcher probe, exec -> exit with a connected agent ({EXECS} runs, as the user): p50 {p50:.1} ms, max {max:.1} ms; \
         bare exec of the same binary (--version) p50 {floor:.1} ms   [target <= 5 ms]"
    );
    // The static build (no libvirt library to load), when it was built.
    let static_bin = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/x86_64-unknown-linux-musl/static/virt-launcher");
    if static_bin.exists() {
        user.assert_can_read(&static_bin);
        exec_times(&static_bin, &probe, &user);
        let (p50, max) = summary(exec_times(&static_bin, &probe, &user));
        println!(
            "  the same with the static build ({}): p50 {p50:.1} ms, max {max:.1} ms",
            static_bin.display()
        );
    } else {
        println!("  (the static build, scripts/build-static.sh, is not built: no figure for it)");
    }
    // SIGTERM: the guest, run by the user's QEMU, powers off by ACPI
    // (tests/nonroot.rs checks that it does, by the Stopped event's detail).
    g.launcher.signal("TERM");
    let started = g
        .watcher
        .wait_event(STEP, "SHUTDOWN_STARTED", named("SHUTDOWN_STARTED"));
    let stopped = g
        .watcher
        .wait_event(STEP, "Stopped", lifecycle("Stopped", "Shutdown"));
    println!(
        "  SIGTERM as the user: SHUTDOWN_STARTED -> Stopped (Shutdown) {:.2} s   [target < 20 s]",
        super::event_seconds(&stopped) - super::event_seconds(&started)
    );
    g.launcher.wait_exit(Duration::from_secs(60));
}
