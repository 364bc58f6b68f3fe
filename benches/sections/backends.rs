//! The two backends side by side, in one run, on the same daemon (the
//! host's libvirtd, `qemu:///system`) and the same guest image: the default
//! build (`virt`, libvirt's C library, the binary cargo built) and the
//! static musl build (`wire`, libvirt's RPC protocol spoken directly;
//! `VL_STATIC_BIN`, which scripts/bench.sh builds with
//! scripts/build-static.sh).
//!
//! Figures: stripped size, RSS and private dirty memory after ready (idle)
//! and with a running guest, exec -> ready socket, `ping`, `query-domain`,
//! `query-stats` and re-sync of an unchanged VMI, and the agent-polling
//! soak: RSS after N minutes of the guest agent being polled, 1 by default,
//! `VL_BENCH_SOAK_MINUTES=N` (the issue's figure is N=10), and RSS after a
//! few requests of nearly the 1 MiB line limit.
//!
//! Round trips alternate between the launchers one request at a time. On a
//! host whose CPUs wake slowly from idle (a VM with halt polling off), where
//! a launcher's threads happen to wake changes its round trip by several
//! microseconds, so `ping` is also measured between two launchers of the
//! same build (the noise floor), and every round trip again with both
//! launchers and the client on one CPU, which leaves their own work.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::common::guest::{BOOT, GuestOptions, STEP, guest_vmi, images};
use super::common::{BIN, Client, Launcher, TempTree, named};

const URI: &str = "qemu:///system";
const PING: &str = r#"{"execute":"ping","id":1}"#;

struct Build {
    backend: &'static str,
    bin: PathBuf,
}

/// Memory of a process: (RSS, private dirty), KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let field = |file: &str, key: &str| {
        fs::read_to_string(format!("/proc/{pid}/{file}"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (
        field("status", "VmRSS:"),
        field("smaps_rollup", "Private_Dirty:"),
    )
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// The change from `before` to `after` KiB, signed.
fn growth(before: u64, after: u64) -> String {
    if after >= before {
        format!("+{} KiB", after - before)
    } else {
        format!("-{} KiB", before - after)
    }
}

fn p50_us(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1e6
}

/// p50s of the first two clients' samples, microseconds.
fn p50_pair(samples: Vec<Vec<Duration>>) -> [f64; 2] {
    let mut p50s = samples.into_iter().map(p50_us);
    [0, 1].map(|_| p50s.next().unwrap_or(f64::NAN))
}

/// The size of `bin` once stripped, MiB.
fn stripped_mib(bin: &Path) -> f64 {
    let copy = std::env::temp_dir().join(format!("vl-bench-strip-{}", std::process::id()));
    let _ = fs::copy(bin, &copy);
    let _ = Command::new("strip").arg(&copy).status();
    let size = fs::metadata(&copy).map(|m| m.len()).unwrap_or(0);
    let _ = fs::remove_file(&copy);
    size as f64 / (1 << 20) as f64
}

fn start(build: &Build, name: &str, extra: &[&str]) -> Launcher {
    start_in(
        build,
        TempTree::new(&format!("bench-{}", build.backend)),
        name,
        extra,
    )
}

fn start_in(build: &Build, tree: TempTree, name: &str, extra: &[&str]) -> Launcher {
    let mut args: Vec<String> = [
        "--connect",
        URI,
        "--force-emulation",
        "--name",
        name,
        "--namespace",
        "e2e",
    ]
    .map(String::from)
    .to_vec();
    args.extend(extra.iter().map(|s| s.to_string()));
    Launcher::start_binary(&build.bin, tree, &[], &args, Some("info"), None)
}

/// One round trip of `line` (newline included), asserting it succeeded.
fn round_trip(client: &mut Client, line: &str) -> Duration {
    let t = Instant::now();
    client.send_raw(line.as_bytes());
    let reply = client.read_reply(STEP);
    let took = t.elapsed();
    assert!(reply.get("return").is_some(), "{line}: {reply}");
    took
}

/// Round trips of one request line, `n` times on one connection.
fn time_line(client: &mut Client, line: &str, n: usize) -> Vec<Duration> {
    let line = format!("{line}\n");
    (0..n).map(|_| round_trip(client, &line)).collect()
}

/// Round trips of `line` on each client, alternating one request at a
/// time and swapping which client goes first every round, so that drift
/// in the host's state (its wake-up phases last seconds) falls on every
/// client alike. `n` requests each.
fn alternate(clients: &mut [Client], line: &str, n: usize) -> Vec<Vec<Duration>> {
    let line = format!("{line}\n");
    let count = clients.len();
    let mut samples = vec![Vec::with_capacity(n); count];
    for round in 0..n {
        for k in 0..count {
            let i = if round % 2 == 0 { k } else { count - 1 - k };
            samples[i].push(round_trip(&mut clients[i], &line));
        }
    }
    samples
}

/// The wire build's target for a round trip: `ping` unchanged, the
/// queries no slower.
fn round_trip_target(line: &str) -> &'static str {
    if line == PING {
        "[unchanged]"
    } else {
        "[wire no slower]"
    }
}

/// Alternates `line` between the two launchers' clients and prints their
/// p50s as one row, with `decimals` digits of microseconds.
fn compare_row(clients: &mut [Client], what: &str, line: &str, n: usize, decimals: usize) {
    let [virt, wire] = p50_pair(alternate(clients, line, n));
    let target = round_trip_target(line);
    row(
        what,
        format!("p50 {virt:.decimals$} us"),
        format!("p50 {wire:.decimals$} us"),
        target,
    );
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is a plain bit set; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    assert_eq!(
        rc,
        0,
        "sched_getaffinity: {}",
        std::io::Error::last_os_error()
    );
    (0..usize::try_from(libc::CPU_SETSIZE).unwrap_or(1024))
        // SAFETY: `c` is below CPU_SETSIZE, the set's size in bits.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Lets thread `tid` (0: the calling thread) run only on `cpus`.
fn set_affinity(tid: libc::pid_t, cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: as in allowed_cpus.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: CPUs come from allowed_cpus, below CPU_SETSIZE.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed; a thread that
    // has exited gives ESRCH, not undefined behaviour.
    let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of_val(&set), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Every thread of `pid` and the calling thread on one CPU while `f`
/// runs, then back on all of them. Threads a launcher starts meanwhile
/// inherit the CPU of the thread that starts them.
fn on_one_cpu<T>(pids: &[u32], f: impl FnOnce() -> T) -> T {
    let all = allowed_cpus();
    let one = [*all.last().unwrap_or(&0)];
    let threads: Vec<libc::pid_t> = pids
        .iter()
        .flat_map(|pid| {
            let dir = format!("/proc/{pid}/task");
            fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("{dir}: {e}"))
                .flatten()
                .filter_map(|t| t.file_name().to_str()?.parse().ok())
        })
        .collect();
    let pin = |cpus: &[usize]| {
        for &tid in &threads {
            if let Err(e) = set_affinity(tid, cpus) {
                // A thread that ended between listing and pinning.
                assert_eq!(e.raw_os_error(), Some(libc::ESRCH), "thread {tid}: {e}");
            }
        }
        set_affinity(0, cpus).unwrap_or_else(|e| panic!("this thread: {e}"));
    };
    pin(&one);
    let result = f();
    pin(&all);
    result
}

fn row(what: &str, virt: String, wire: String, target: &str) {
    println!("  {what:<52} {virt:>22} {wire:>22}   {target}");
}

pub fn backends() {
    let Some(static_bin) = std::env::var_os("VL_STATIC_BIN").map(PathBuf::from) else {
        println!(
            "backends: VL_STATIC_BIN is not set; scripts/bench.sh builds the static binary and sets it"
        );
        return;
    };
    let builds = [
        Build {
            backend: "virt",
            bin: PathBuf::from(BIN),
        },
        Build {
            backend: "wire",
            bin: static_bin,
        },
    ];
    images();
    let tag = std::process::id();
    println!(
        "backends side by side (daemon {URI}, libvirtd; guest: the test guest, plain emulation):"
    );
    row(
        "",
        "virt (default build)".into(),
        "wire (static musl)".into(),
        "",
    );
    let sizes = builds.each_ref().map(|b| stripped_mib(&b.bin));
    row(
        "stripped binary",
        format!("{:.2} MiB", sizes[0]),
        format!("{:.2} MiB", sizes[1]),
        "[wire <= 2.5 MiB]",
    );

    // exec -> ready socket with the daemon up, 30 runs each, alternating.
    let mut startup: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    for round in 0..30 {
        for (i, build) in builds.iter().enumerate() {
            // The directory tree is made before the clock starts.
            let tree = TempTree::new(&format!("bench-{}", build.backend));
            let started = Instant::now();
            let launcher = start_in(build, tree, &format!("start-{tag}-{round}"), &[]);
            let socket = launcher.ready_socket();
            while std::os::unix::net::UnixStream::connect(&socket).is_err() {
                assert!(started.elapsed() < STEP, "{}", launcher.log_text());
                std::thread::sleep(Duration::from_micros(200));
            }
            startup[i].push(started.elapsed());
            drop(launcher);
        }
    }
    let [s_virt, s_wire] = startup.map(|s| format!("p50 {:.1} ms", p50_us(s) / 1000.0));
    row(
        "exec -> ready socket (daemon up, 30 runs)",
        s_virt,
        s_wire,
        "[wire <= 10 ms]",
    );

    // Two idle launchers, then each with its own guest.
    let names = builds
        .each_ref()
        .map(|b| format!("bench-{}-{tag}", b.backend));
    let mut launchers: Vec<Launcher> = builds
        .iter()
        .zip(&names)
        .map(|(b, n)| start(b, n, &["--qemu-timeout", "30m"]))
        .collect();
    for l in &mut launchers {
        l.wait_ready(STEP);
    }
    let mut clients: Vec<Client> = launchers.iter().map(|l| l.client()).collect();
    for c in &mut clients {
        time_line(c, r#"{"execute":"ping","id":0}"#, 200);
    }
    // Let start-up garbage settle, as a launcher waiting for its VMI would.
    std::thread::sleep(Duration::from_secs(2));
    let idle = [0, 1].map(|i| memory_kib(launchers[i].pid()));
    row(
        "RSS after ready, idle",
        mib(idle[0].0),
        mib(idle[1].0),
        "[wire <= 4 MiB]",
    );
    row(
        "private dirty after ready, idle",
        mib(idle[0].1),
        mib(idle[1].1),
        "",
    );
    // Alternating one request at a time, as every round trip below: an
    // idle host wakes a sleeping thread slower, so one launcher measured
    // after the other would be compared on another machine state.
    compare_row(&mut clients, "ping round trip (10,000)", PING, 10_000, 1);
    // The noise floor: the same build against itself, measured the same
    // way. Two identical launchers differ by as much as their threads'
    // placement on this host's CPUs makes them differ.
    {
        let mut twin = start(&builds[0], &format!("bench-twin-{tag}"), &[]);
        twin.wait_ready(STEP);
        let mut pair = vec![launchers[0].client(), twin.client()];
        let floor = p50_pair(alternate(&mut pair, PING, 10_000));
        row(
            "  noise floor: virt against a second virt launcher",
            format!("p50 {:.1} us", floor[0]),
            format!("(virt #2) p50 {:.1} us", floor[1]),
            "",
        );
        drop(pair);
        drop(twin);
    }

    let vmis = boot_guests(&launchers, &mut clients, &names);
    // The agent poller's first rounds.
    std::thread::sleep(Duration::from_secs(15));

    // Cached answers (the launcher's own work) and `max_age_ms: 0` (a
    // fresh read through the backend: the figure that compares them).
    let queries = [
        (
            "query-domain, cached",
            r#"{"execute":"query-domain","id":2}"#,
            1000,
        ),
        (
            "query-domain, max_age_ms 0",
            r#"{"execute":"query-domain","arguments":{"max_age_ms":0},"id":2}"#,
            500,
        ),
        (
            "query-stats, cached",
            r#"{"execute":"query-stats","id":2}"#,
            1000,
        ),
        (
            "query-stats, max_age_ms 0",
            r#"{"execute":"query-stats","arguments":{"max_age_ms":0},"id":2}"#,
            500,
        ),
    ];
    for (what, line, n) in queries {
        compare_row(
            &mut clients,
            &format!("{what}, running guest ({n})"),
            line,
            n,
            0,
        );
    }
    // The same round trips with both launchers and this client on one
    // CPU: every wake-up is then a switch on that CPU, not a wake-up of
    // another, so what is left is the launchers' own path, and the host's
    // placement noise (the floor above) mostly goes.
    let pids = [launchers[0].pid(), launchers[1].pid()];
    on_one_cpu(&pids, || {
        let what = "ping, both launchers and the client on one CPU";
        compare_row(&mut clients, what, PING, 10_000, 1);
        for (what, line, n) in queries {
            compare_row(&mut clients, &format!("{what}, on one CPU"), line, n, 0);
        }
    });

    let mut resync: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..20 {
        for (i, c) in clients.iter_mut().enumerate() {
            let line =
                json!({"execute": "sync", "arguments": {"vmi": vmis[i]}, "id": 3}).to_string();
            resync[i].extend(time_line(c, &line, 10));
        }
    }
    let [a, b] = resync.map(|s| format!("p50 {:.2} ms", p50_us(s) / 1000.0));
    row("re-sync of the unchanged running VMI (200)", a, b, "");

    let running = [0, 1].map(|i| memory_kib(launchers[i].pid()));
    row(
        "RSS with the running guest",
        mib(running[0].0),
        mib(running[1].0),
        "",
    );
    row(
        "private dirty with the running guest",
        mib(running[0].1),
        mib(running[1].1),
        "",
    );

    // The agent-polling soak: 1 minute by default, the issue's 10 with
    // VL_BENCH_SOAK_MINUTES=10 (0 skips it).
    let soak: u64 = std::env::var("VL_BENCH_SOAK_MINUTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    if soak > 0 {
        let began = Instant::now();
        let mut samples: Vec<[(u64, u64); 2]> = Vec::new();
        while began.elapsed() < Duration::from_secs(soak * 60) {
            std::thread::sleep(Duration::from_secs(30));
            samples.push([0, 1].map(|i| memory_kib(launchers[i].pid())));
            // The guests are still answering.
            for c in &mut clients {
                c.ok("guest-ping", Value::Null);
            }
        }
        let last = samples.last().copied().unwrap_or(running);
        let peak = |i: usize| samples.iter().map(|s| s[i].0).max().unwrap_or(0);
        row(
            &format!("RSS after {soak} min of agent polling"),
            mib(last[0].0),
            mib(last[1].0),
            "[wire <= 6 MiB, flat]",
        );
        row(
            &format!("  growth over the {soak} min (peak)"),
            format!("{} ({})", growth(running[0].0, last[0].0), mib(peak(0))),
            format!("{} ({})", growth(running[1].0, last[1].0), mib(peak(1))),
            "",
        );
        row(
            &format!("private dirty after {soak} min"),
            mib(last[0].1),
            mib(last[1].1),
            "",
        );
        let per_minute = |i: usize| {
            samples
                .iter()
                .map(|s| format!("{:.1}", s[i].0 as f64 / 1024.0))
                .collect::<Vec<_>>()
                .join(" ")
        };
        println!("  RSS every 30 s, virt (MiB): {}", per_minute(0));
        println!("  RSS every 30 s, wire (MiB): {}", per_minute(1));
    }

    // What one large request leaves behind: a request line just under
    // the default 1 MiB limit, parsed into many small blocks and freed
    // (ping refuses arguments, after parsing them). Three of them: an
    // object of 70,000 members, an array of 200,000 strings, the object
    // again.
    let object = near_limit_object();
    let array = format!(
        r#"{{"execute":"ping","arguments":{{"a":[{}]}},"id":4}}"#,
        vec![r#""x""#; 200_000].join(",")
    );
    for line in [&object, &array, &object] {
        for c in &mut clients {
            c.send_raw(format!("{line}\n").as_bytes());
            let reply = c.read_reply(STEP);
            assert_eq!(reply["error"]["class"], "InvalidArgument", "{reply}");
        }
    }
    let after_large = [0, 1].map(|i| memory_kib(launchers[i].pid()));
    row(
        &format!(
            "RSS after 3 requests of {} and {} KiB",
            object.len() / 1024,
            array.len() / 1024
        ),
        mib(after_large[0].0),
        mib(after_large[1].0),
        "",
    );

    for (l, c) in launchers.iter_mut().zip(&mut clients) {
        c.ok("kill", Value::Null);
        l.wait_exit(STEP);
    }
}

/// Syncs each launcher's test guest (VMI named after `names`) and waits
/// until every guest's agent connected; returns the VMIs.
fn boot_guests(launchers: &[Launcher], clients: &mut [Client], names: &[String; 2]) -> [Value; 2] {
    let mut watchers: Vec<Client> = launchers
        .iter()
        .map(|l| {
            let mut w = l.client();
            w.ok("subscribe", json!({"events": ["AGENT_CONNECTED"]}));
            w
        })
        .collect();
    let vmis = names.each_ref().map(|n| guest_vmi(&GuestOptions::new(n)));
    for (c, vmi) in clients.iter_mut().zip(&vmis) {
        let synced = c.request_timeout("sync", json!({ "vmi": vmi }), STEP);
        assert!(synced.get("return").is_some(), "{synced}");
    }
    for w in &mut watchers {
        w.wait_event(BOOT, "AGENT_CONNECTED", named("AGENT_CONNECTED"));
    }
    vmis
}

/// A `ping` request line just under the default 1 MiB limit: an object
/// of 70,000 members, parsed into many small blocks and freed (ping
/// refuses arguments, after parsing them).
fn near_limit_object() -> String {
    format!(
        r#"{{"execute":"ping","arguments":{{{}}},"id":4}}"#,
        (0..70_000)
            .map(|i| format!(r#""k{i:06}":"v""#))
            .collect::<Vec<_>>()
            .join(",")
    )
}

/// Minor page faults of a process so far (all its threads): each page
/// the allocator maps anew, or maps again after giving it back, faults
/// once when first touched, so their count per request is how much an
/// allocator churns the kernel's mappings, on a busy machine as on an
/// idle one.
fn minor_faults(pid: u32) -> u64 {
    // /proc/PID/stat: the command name is in parentheses and may hold
    // spaces; minflt is the 10th field, the 8th after the closing one.
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let after = s.rsplit_once(')')?.1.to_string();
            after.split_whitespace().nth(7)?.parse().ok()
        })
        .unwrap_or(0)
}

/// The static build's allocator (src/block_cache.rs) beside musl's own
/// malloc, in one run: the same static binary built twice
/// (`VL_STATIC_BIN`, and `VL_STATIC_MUSL_MALLOC_BIN` built with
/// `--cfg vl_musl_malloc`; scripts/bench.sh builds both), each launcher
/// running the test guest on the host's libvirtd.
pub fn allocator() {
    let (Some(ours), Some(musl)) = (
        std::env::var_os("VL_STATIC_BIN"),
        std::env::var_os("VL_STATIC_MUSL_MALLOC_BIN"),
    ) else {
        println!(
            "allocator: VL_STATIC_BIN and VL_STATIC_MUSL_MALLOC_BIN are not set; \
             scripts/bench.sh allocator builds both static binaries and sets them"
        );
        return;
    };
    let builds = [
        Build {
            backend: "block-cache",
            bin: PathBuf::from(ours),
        },
        Build {
            backend: "musl-malloc",
            bin: PathBuf::from(musl),
        },
    ];
    images();
    let tag = std::process::id();
    println!(
        "the static build's allocator beside musl's malloc (daemon {URI}, libvirtd; guest: the test guest):"
    );
    let line = |what: &str, a: String, b: String| println!("  {what:<52} {a:>22} {b:>22}");
    line("", "block cache (ours)".into(), "musl's malloc".into());
    let sizes = builds.each_ref().map(|b| stripped_mib(&b.bin));
    line(
        "stripped binary",
        format!("{:.2} MiB", sizes[0]),
        format!("{:.2} MiB", sizes[1]),
    );
    let names = builds
        .each_ref()
        .map(|b| format!("bench-{}-{tag}", b.backend));
    let mut launchers: Vec<Launcher> = builds
        .iter()
        .zip(&names)
        .map(|(b, n)| start(b, n, &["--qemu-timeout", "30m"]))
        .collect();
    for l in &mut launchers {
        l.wait_ready(STEP);
    }
    let pids = [launchers[0].pid(), launchers[1].pid()];
    let mut clients: Vec<Client> = launchers.iter().map(|l| l.client()).collect();
    for c in &mut clients {
        time_line(c, PING, 200);
    }
    std::thread::sleep(Duration::from_secs(2));
    let idle = pids.map(memory_kib);
    line("RSS after ready, idle", mib(idle[0].0), mib(idle[1].0));
    let [a, b] = p50_pair(alternate(&mut clients, PING, 10_000));
    line(
        "ping round trip (10,000)",
        format!("p50 {a:.1} us"),
        format!("p50 {b:.1} us"),
    );

    boot_guests(&launchers, &mut clients, &names);
    std::thread::sleep(Duration::from_secs(15));
    let queries = [
        (
            "query-domain, cached",
            r#"{"execute":"query-domain","id":2}"#,
            1000,
        ),
        (
            "query-domain, max_age_ms 0",
            r#"{"execute":"query-domain","arguments":{"max_age_ms":0},"id":2}"#,
            500,
        ),
        (
            "query-stats, max_age_ms 0",
            r#"{"execute":"query-stats","arguments":{"max_age_ms":0},"id":2}"#,
            500,
        ),
    ];
    for (what, request, n) in queries {
        let before = pids.map(minor_faults);
        let [a, b] = p50_pair(alternate(&mut clients, request, n));
        let after = pids.map(minor_faults);
        let per = |i: usize| after[i].saturating_sub(before[i]) as f64 / n as f64;
        line(
            &format!("{what} ({n})"),
            format!("p50 {a:.0} us, {:.1} faults", per(0)),
            format!("p50 {b:.0} us, {:.1} faults", per(1)),
        );
    }
    let running = pids.map(memory_kib);
    line(
        "RSS with the running guest, after the queries",
        mib(running[0].0),
        mib(running[1].0),
    );
    line(
        "private dirty with the running guest",
        mib(running[0].1),
        mib(running[1].1),
    );
    // Nearly 1 MiB request lines parsed into many small blocks and freed,
    // as in `backends`.
    let object = near_limit_object();
    for _ in 0..3 {
        for c in &mut clients {
            c.send_raw(format!("{object}\n").as_bytes());
            let reply = c.read_reply(STEP);
            assert_eq!(reply["error"]["class"], "InvalidArgument", "{reply}");
        }
    }
    let after_large = pids.map(memory_kib);
    line(
        &format!("RSS after 3 requests of {} KiB", object.len() / 1024),
        mib(after_large[0].0),
        mib(after_large[1].0),
    );
    for (l, c) in launchers.iter_mut().zip(&mut clients) {
        c.ok("kill", Value::Null);
        l.wait_exit(STEP);
    }
}
