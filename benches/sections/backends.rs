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

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::common::guest::{BOOT, GuestOptions, STEP, guest_vmi, images};
use super::common::{BIN, Client, Launcher, TempTree, named};

const URI: &str = "qemu:///system";

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

/// Round trips of one request line, `n` times on one connection.
fn time_line(client: &mut Client, line: &str, n: usize) -> Vec<Duration> {
    let line = format!("{line}\n");
    (0..n)
        .map(|_| {
            let t = Instant::now();
            client.send_raw(line.as_bytes());
            let reply = client.read_reply(STEP);
            let took = t.elapsed();
            assert!(reply.get("return").is_some(), "{line}: {reply}");
            took
        })
        .collect()
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
    // Interleaved in blocks like the queries below: an idle host wakes a
    // sleeping thread slower, so one launcher measured after the other
    // would be compared on another machine state.
    let mut pings: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..10 {
        for (i, c) in clients.iter_mut().enumerate() {
            pings[i].extend(time_line(c, r#"{"execute":"ping","id":1}"#, 1000));
        }
    }
    let ping = pings.map(p50_us);
    row(
        "ping round trip (10,000)",
        format!("p50 {:.1} us", ping[0]),
        format!("p50 {:.1} us", ping[1]),
        "[unchanged]",
    );

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
    // The agent poller's first rounds.
    std::thread::sleep(Duration::from_secs(15));

    // Cached answers (the launcher's own work) and `max_age_ms: 0` (a
    // fresh read through the backend: the figure that compares them).
    for (what, line, n) in [
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
    ] {
        // Interleaved in blocks, so both see the same machine load.
        let mut samples: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
        for _ in 0..10 {
            for (i, c) in clients.iter_mut().enumerate() {
                samples[i].extend(time_line(c, line, n / 10));
            }
        }
        let [a, b] = samples.map(|s| format!("p50 {:.0} us", p50_us(s)));
        row(
            &format!("{what}, running guest ({n})"),
            a,
            b,
            "[wire no slower]",
        );
    }
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
    let object = format!(
        r#"{{"execute":"ping","arguments":{{{}}},"id":4}}"#,
        (0..70_000)
            .map(|i| format!(r#""k{i:06}":"v""#))
            .collect::<Vec<_>>()
            .join(",")
    );
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
