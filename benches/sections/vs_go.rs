//! The rows of issue 16: the figures on which this launcher was measured
//! beside KubeVirt's Go launcher (same machine, same minimal VMI), each
//! printed with its target and the Go figure from that measurement.
//!
//! - `--spawn-libvirt` start to the ready socket: with the host's
//!   capabilities cache as it is, with a stale entry for an emulator the
//!   VMI does not use, and cold (no usable cache: libvirt probes QEMU);
//! - `sync` -> Running against a bare `virDomainCreateXML` of the same XML
//!   in the same run, as the first domain of a fresh daemon like the
//!   launcher's, and as the second domain of that daemon (warm), with the
//!   launcher's steps (`steps_ms` of the reply);
//! - `kill` -> process exit against a bare `virDomainDestroy`, with where
//!   the rest goes (the reply, the exit decision, the process's end);
//! - idle wake-ups per minute (context switches of every thread, from
//!   /proc/PID/task/*/status, over 60 s, with the busiest threads by
//!   name) with a running guest and no client, and with no guest; for the
//!   static build's wire backend too when `VL_STATIC_BIN` names it
//!   (scripts/bench.sh builds it), all four launchers in the same window;
//! - `query-stats` and `query-domain` round trips on the running guest:
//!   cached, and with `max_age_ms: 0` (a fresh read each time).
//!
//! `VS_GO_PARTS=spawn,sync,guest` (any of them) runs only those parts.
//!
//! The launchers log at info level here (the harness's default, debug,
//! writes every domain XML to the log).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::common::guest::{BOOT, GuestOptions, STEP, guest_vmi, images};
use super::common::{Client, Launcher, TempTree, lifecycle, named};

/// The host's QEMU capabilities cache, which --spawn-libvirt copies.
const HOST_CACHE: &str = "/var/cache/libvirt/qemu/capabilities";
/// The only emulator the launcher's domains use.
const EMULATOR: &str = "/usr/bin/qemu-system-x86_64";

pub fn vs_go() {
    println!(
        "issue 16: the rows measured beside KubeVirt's Go launcher (Go figures from that run)"
    );
    // VS_GO_PARTS=spawn,sync,guest runs only those parts (while iterating).
    let parts = std::env::var("VS_GO_PARTS").unwrap_or_default();
    let part = |name: &str| parts.is_empty() || parts.split(',').any(|p| p.trim() == name);
    if part("spawn") {
        spawn_start();
    }
    if part("sync") {
        sync_and_kill();
    }
    if part("guest") {
        running_guest();
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(|a, b| a.total_cmp(b));
    samples.get(samples.len() / 2).copied().unwrap_or(f64::NAN)
}

fn launcher_args(name: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--force-emulation",
        "--name",
        name,
        "--namespace",
        // The test guest's VMI lives in this namespace (tests/common/guest.rs):
        // a launcher refuses a VMI of another.
        "e2e",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// A launcher with its own daemons, logging at info level, and how long it
/// took from exec to a ready socket that answers.
fn start(name: &str, cache: Option<&Path>) -> (Launcher, Duration) {
    start_with(name, cache, &["--spawn-libvirt"])
}

/// `start` with `flags` instead of --spawn-libvirt.
fn start_with(name: &str, cache: Option<&Path>, flags: &[&str]) -> (Launcher, Duration) {
    start_bin(None, name, cache, flags)
}

/// `start_with`, running the binary at `bin` (`None`: the binary under test).
fn start_bin(
    bin: Option<&Path>,
    name: &str,
    cache: Option<&Path>,
    flags: &[&str],
) -> (Launcher, Duration) {
    let tree = TempTree::new(&format!("go-{name}"));
    let args = launcher_args(name, flags);
    // The host's cache as the launcher sees it can be replaced in a mount
    // namespace of the launcher's own: the host is not touched.
    let wrapper: Vec<String> = match cache {
        Some(dir) => [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount --bind \"$0\" /var/cache/libvirt/qemu/capabilities && exec \"$@\"",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([dir.to_string_lossy().into_owned()])
        .collect(),
        None => Vec::new(),
    };
    let started = Instant::now();
    let mut launcher = match bin {
        Some(bin) => Launcher::start_binary(bin, tree, &wrapper, &args, Some("info"), None),
        None => Launcher::start_wrapped(tree, &wrapper, &args, Some("info")),
    };
    let socket = launcher.ready_socket();
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        if let Ok(Some(status)) = launcher.child.try_wait() {
            panic!("launcher exited ({status}); log:\n{}", launcher.log_text());
        }
        assert!(
            started.elapsed() < STEP,
            "not ready: {}",
            launcher.log_text()
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    let ready = started.elapsed();
    launcher.wait_ready(STEP);
    (launcher, ready)
}

/// VmRSS and the private dirty memory of `pid`, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let field = |text: &str, name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let smaps = fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    (field(&status, "VmRSS:"), field(&smaps, "Private_Dirty:"))
}

fn stop(mut launcher: Launcher) {
    launcher.signal("TERM");
    launcher.wait_exit(STEP);
}

// ---- --spawn-libvirt start ----

fn spawn_start() {
    if !Path::new(HOST_CACHE).is_dir() {
        println!(
            "--spawn-libvirt start: {HOST_CACHE} does not exist (scripts/setup-host.sh warms it); skipped"
        );
        return;
    }
    let starts = |runs: usize, cache: Option<&Path>, tag: &str| -> Vec<f64> {
        (0..runs)
            .map(|i| {
                let (launcher, ready) = start(&format!("start{tag}{i}"), cache);
                stop(launcher);
                ms(ready)
            })
            .collect()
    };
    let describe = |samples: &[f64]| {
        let mut sorted = samples.to_vec();
        sorted.sort_by(|a, b| a.total_cmp(b));
        format!(
            "p50 {:.1} ms, max {:.1} ms ({} runs)",
            median(samples.to_vec()),
            sorted.last().copied().unwrap_or(f64::NAN),
            samples.len()
        )
    };
    let warm = starts(7, None, "w");
    println!(
        "--spawn-libvirt exec -> ready socket, host's capabilities cache as it is: {}   [target <= 100 ms; Go 540 ms]",
        describe(&warm)
    );
    // Memory at ready, of the launcher process alone (its daemons are
    // processes of their own, as Go's figure is of its launcher).
    let (launcher, _) = start("startmem", None);
    let (rss, dirty) = memory_kib(launcher.pid());
    stop(launcher);
    println!(
        "--spawn-libvirt launcher RSS / private dirty at ready: {:.1} / {:.1} MiB   [Go 60.3 / 9.7 MiB]",
        rss as f64 / 1024.0,
        dirty as f64 / 1024.0
    );
    let shared: Vec<f64> = (0..7)
        .map(|i| {
            let (launcher, ready) = start_with(&format!("startup{i}"), None, &[]);
            stop(launcher);
            ms(ready)
        })
        .collect();
    println!(
        "exec -> ready socket, daemon already up (qemu:///system): {}   [Go 42.0 ms]",
        describe(&shared)
    );
    let stale_dir = TempTree::new("go-stale-cache");
    match stale_cache(&stale_dir.root) {
        Some(what) => {
            let stale = starts(5, Some(&stale_dir.root), "s");
            println!(
                "--spawn-libvirt exec -> ready socket, host cache with a stale entry ({what}): {}   [target <= 100 ms]",
                describe(&stale)
            );
        }
        None => println!(
            "--spawn-libvirt with a stale entry: no emulator besides {EMULATOR} is installed; nothing to be stale"
        ),
    }
    let empty = TempTree::new("go-empty-cache");
    let cold = starts(2, Some(&empty.root), "c");
    println!(
        "--spawn-libvirt exec -> ready socket, cold (empty cache: libvirt probes QEMU): {}   [libvirt's cost, reported]",
        describe(&cold)
    );
}

/// Copies the host's cache into `dir` with every entry of an emulator
/// other than x86_64's made stale, as a host daemon leaves it when QEMU's
/// module directory changed after its last probe of that emulator (a
/// qemu-system-i386 entry is made from x86_64's when the host has none).
/// Says which entry; `None` when no other emulator is installed.
fn stale_cache(dir: &Path) -> Option<String> {
    let mut stale = Vec::new();
    let mut x86_64 = None;
    for entry in fs::read_dir(HOST_CACHE).ok()?.flatten() {
        let path = entry.path();
        let Ok(xml) = fs::read_to_string(&path) else {
            continue;
        };
        let emulator = between(&xml, "<emulator>", "</emulator>").unwrap_or_default();
        let name = path.file_name()?.to_owned();
        if emulator == EMULATOR {
            x86_64 = Some(xml.clone());
            fs::write(dir.join(&name), &xml).ok()?;
        } else {
            fs::write(dir.join(&name), make_stale(&xml)).ok()?;
            stale.push(emulator.to_string());
        }
    }
    let i386 = "/usr/bin/qemu-system-i386";
    if stale.is_empty() && Path::new(i386).exists() {
        let xml = x86_64?.replace(
            &format!("<emulator>{EMULATOR}</emulator>"),
            &format!("<emulator>{i386}</emulator>"),
        );
        // libvirt names an entry by the SHA-256 of the binary's path.
        let out = Command::new("sh")
            .args(["-c", &format!("printf %s {i386} | sha256sum")])
            .output()
            .ok()?;
        let hash = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()?
            .to_string();
        fs::write(dir.join(format!("{hash}.xml")), make_stale(&xml)).ok()?;
        stale.push(i386.to_string());
    }
    (!stale.is_empty()).then(|| format!("{}: module directory time changed", stale.join(", ")))
}

fn make_stale(xml: &str) -> String {
    match between(xml, "<qemumoddirmtime>", "</qemumoddirmtime>") {
        Some(value) => xml.replacen(
            &format!("<qemumoddirmtime>{value}</qemumoddirmtime>"),
            &format!(
                "<qemumoddirmtime>{}</qemumoddirmtime>",
                value.parse::<u64>().unwrap_or(1).saturating_sub(1)
            ),
            1,
        ),
        None => xml.replacen("<qemuctime>", "<qemuctime>1", 1),
    }
}

fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = text.find(start)? + start.len();
    let to = text[from..].find(end)? + from;
    Some(&text[from..to])
}

// ---- sync -> Running and kill -> exit ----

/// Seconds since the epoch of a log line's RFC 3339 time
/// ("2026-11-30T14:37:18.114049Z ...").
fn log_time(line: &str) -> Option<f64> {
    let stamp = line.split_whitespace().next()?;
    let (date, time) = stamp.trim_end_matches('Z').split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':');
    let (h, min, s) = (
        t.next()?.parse::<f64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
    );
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days as f64 * 86_400.0 + h * 3600.0 + min * 60.0 + s)
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

struct KillSample {
    reply: f64,
    decision: Option<f64>,
    exit: f64,
}

/// `kill` on a launcher whose guest runs, timed to its reply, to the exit
/// decision in its log, and to the process's end (all in ms).
fn kill(launcher: &mut Launcher, client: &mut Client) -> KillSample {
    let sent = now_unix();
    let t = Instant::now();
    let reply = client.request_timeout("kill", Value::Null, STEP);
    let replied = t.elapsed();
    assert!(reply.get("return").is_some(), "{reply}");
    loop {
        if let Ok(Some(status)) = launcher.child.try_wait() {
            launcher.status = Some(status);
            break;
        }
        assert!(t.elapsed() < STEP, "no exit after kill");
        std::thread::sleep(Duration::from_micros(200));
    }
    let exited = t.elapsed();
    let decision = launcher
        .log_text()
        .lines()
        .find(|l| l.contains("exiting with status"))
        .and_then(log_time)
        .map(|at| (at - sent) * 1e3);
    KillSample {
        reply: ms(replied),
        decision,
        exit: ms(exited),
    }
}

fn sync_and_kill() {
    let rounds = 5;
    images();
    let mut running = Vec::new();
    let mut replies = Vec::new();
    // The bare calls go to daemons of the same kind: a launcher's own,
    // whose launcher runs no domain. Each round's launcher starts the first
    // domain of its fresh daemon, so the baseline is the first domain of a
    // fresh daemon too; a second create on that daemon (warm) shows what
    // the first start of a daemon costs on top.
    let mut bare_create = Vec::new();
    let mut bare_warm = Vec::new();
    let mut bare_destroy = Vec::new();
    let mut kills = Vec::new();
    let mut steps: HashMap<String, Vec<f64>> = HashMap::new();
    let mut step_order: Vec<String> = Vec::new();
    for round in 0..rounds {
        let name = format!("gosync{round}");
        let (mut launcher, _) = start(&name, None);
        let mut watcher = launcher.client();
        watcher.ok("subscribe", json!({"events": ["DOMAIN_LIFECYCLE"]}));
        let mut client = launcher.client();
        let opts = GuestOptions::new(&name);
        let vmi = guest_vmi(&opts);
        let t = Instant::now();
        let synced = client.request_timeout("sync", json!({ "vmi": vmi }), STEP);
        replies.push(ms(t.elapsed()));
        let reply = &synced["return"];
        assert!(reply.is_object(), "sync failed: {synced}");
        watcher.wait_event(STEP, "Started", lifecycle("Started", "Booted"));
        running.push(ms(t.elapsed()));
        if let Some(map) = reply["steps_ms"].as_object() {
            for (step, value) in map {
                if !step_order.contains(step) {
                    step_order.push(step.clone());
                }
                steps
                    .entry(step.clone())
                    .or_default()
                    .push(value.as_f64().unwrap_or(0.0));
            }
        }
        // Paused, so that its emulated guest's boot does not compete with
        // the bare calls for the CPU.
        client.ok("pause", Value::Null);
        // The same XML, created bare on the other daemon.
        let status = client.ok("query-status", Value::Null);
        let own_uri = status["libvirt"]["uri"].as_str().unwrap().to_string();
        let own = virt::connect::Connect::open(Some(&own_uri)).unwrap();
        let domain_name = format!("e2e_{name}");
        let xml = own
            .lookup_domain_by_name(&domain_name)
            .unwrap()
            .xml_desc(virt::sys::VIR_DOMAIN_XML_INACTIVE)
            .unwrap();
        drop(own);
        let bare_xml = xml.replace(
            &format!("<name>{domain_name}</name>"),
            &format!("<name>e2e_bare{round}</name>"),
        );
        let bare_xml = strip_uuid(&bare_xml);
        let (baseline, _) = start(&format!("gobare{round}"), None);
        let uri = baseline.client().ok("query-status", Value::Null)["libvirt"]["uri"]
            .as_str()
            .unwrap()
            .to_string();
        let conn = virt::connect::Connect::open(Some(&uri)).unwrap();
        for warm in [false, true] {
            let t = Instant::now();
            let dom = conn.create_domain_xml(&bare_xml, 0).unwrap();
            let took = ms(t.elapsed());
            let t = Instant::now();
            dom.destroy().unwrap();
            if warm {
                bare_warm.push(took);
            } else {
                bare_create.push(took);
                bare_destroy.push(ms(t.elapsed()));
            }
        }
        drop(conn);
        stop(baseline);
        client.ok("unpause", Value::Null);
        kills.push(kill(&mut launcher, &mut client));
    }

    let (ours, bare) = (median(running.clone()), median(bare_create.clone()));
    println!(
        "sync -> Running (Started event at the client), {rounds} rounds: p50 {ours:.0} ms (reply {:.0} ms); bare virDomainCreateXML of the same XML in the same run, first domain of a fresh daemon (as ours): p50 {bare:.0} ms; ratio {:.3}   [target <= 1.05; Go 271 ms vs our 301 ms, 0.90x]",
        median(replies.clone()),
        ours / bare
    );
    let warm = median(bare_warm.clone());
    println!(
        "  bare virDomainCreateXML, second domain of the same daemon (warm): p50 {warm:.0} ms; ratio of ours to it {:.3} (the first start of a fresh daemon costs {:.0} ms more)",
        ours / warm,
        bare - warm
    );
    let step_text: Vec<String> = step_order
        .iter()
        .map(|s| format!("{s} {:.2}", median(steps[s].clone())))
        .collect();
    let accounted: f64 = step_order.iter().map(|s| median(steps[s].clone())).sum();
    println!(
        "  the launcher's steps (p50, ms): {}; sync sent -> reply beyond them {:.2} ms; reply -> Started at the client {:.2} ms",
        step_text.join(", "),
        median(replies.clone()) - accounted,
        median(running.iter().zip(&replies).map(|(r, s)| r - s).collect())
    );
    let destroy = median(bare_destroy);
    let exit = median(kills.iter().map(|k| k.exit).collect());
    println!(
        "kill -> process exit, {rounds} rounds (guest just started): p50 {exit:.0} ms; bare virDomainDestroy in the same run: p50 {destroy:.0} ms; exit beyond destroy {:.0} ms   [target <= destroy + 50 ms; Go 1,220 ms]",
        exit - destroy
    );
    println!(
        "  kill -> reply (destroy and the state read after it) p50 {:.0} ms; -> exit decision {:.0} ms; -> process gone {exit:.0} ms",
        median(kills.iter().map(|k| k.reply).collect()),
        median(kills.iter().filter_map(|k| k.decision).collect())
    );
}

fn strip_uuid(xml: &str) -> String {
    match (xml.find("<uuid>"), xml.find("</uuid>")) {
        (Some(a), Some(b)) if b > a => format!("{}{}", &xml[..a], &xml[b + "</uuid>".len()..]),
        _ => xml.to_string(),
    }
}

// ---- the running guest: idle cost and queries ----

/// Context switches of every thread of `pid`, by thread id (with its
/// name).
fn switches(pid: u32) -> HashMap<u32, (String, u64)> {
    let mut out = HashMap::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let status = fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let mut name = String::new();
        let mut count = 0;
        for line in status.lines() {
            if let Some(v) = line.strip_prefix("Name:") {
                name = v.trim().to_string();
            } else if let Some(v) = line
                .strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                count += v.trim().parse::<u64>().unwrap_or(0);
            }
        }
        out.insert(tid, (name, count));
    }
    out
}

/// Wake-ups of each process over `window`: the context switches of its
/// threads (those that ended meanwhile count up to their last sample,
/// taken every 100 ms), and how many threads it started.
struct IdleCount {
    total: u64,
    by_thread: Vec<(String, u64)>,
    threads_started: usize,
}

fn count_wakeups(pids: &[u32], window: Duration) -> Vec<IdleCount> {
    let first: Vec<_> = pids.iter().map(|&p| switches(p)).collect();
    let mut last = first.clone();
    let started = Instant::now();
    while started.elapsed() < window {
        std::thread::sleep(Duration::from_millis(100));
        for (i, &pid) in pids.iter().enumerate() {
            for (tid, sample) in switches(pid) {
                last[i].insert(tid, sample);
            }
        }
    }
    pids.iter()
        .enumerate()
        .map(|(i, _)| {
            let mut by_name: HashMap<String, u64> = HashMap::new();
            let mut total = 0;
            let before: HashSet<u32> = first[i].keys().copied().collect();
            for (tid, (name, count)) in &last[i] {
                let delta = count - first[i].get(tid).map_or(0, |(_, c)| *c);
                total += delta;
                *by_name.entry(name.clone()).or_default() += delta;
            }
            let mut by_thread: Vec<(String, u64)> =
                by_name.into_iter().filter(|(_, n)| *n > 0).collect();
            by_thread.sort_by_key(|b| std::cmp::Reverse(b.1));
            IdleCount {
                total,
                by_thread,
                threads_started: last[i].keys().filter(|t| !before.contains(t)).count(),
            }
        })
        .collect()
}

fn per_minute(count: &IdleCount, window: Duration) -> String {
    let scale = 60.0 / window.as_secs_f64();
    let threads: Vec<String> = count
        .by_thread
        .iter()
        .take(6)
        .map(|(name, n)| format!("{name} {:.0}", *n as f64 * scale))
        .collect();
    format!(
        "{:.0} wake-ups/min ({}; {} threads started)",
        count.total as f64 * scale,
        if threads.is_empty() {
            "none".to_string()
        } else {
            threads.join(", ")
        },
        count.threads_started
    )
}

fn time_calls(client: &mut Client, command: &str, arguments: Value, n: usize) -> Vec<Duration> {
    let mut line = json!({"execute": command, "id": 1});
    if !arguments.is_null() {
        line["arguments"] = arguments;
    }
    let line = format!("{line}\n");
    (0..n)
        .map(|_| {
            let t = Instant::now();
            client.send_raw(line.as_bytes());
            let reply = client.read_reply(STEP);
            let took = t.elapsed();
            assert!(reply.get("return").is_some(), "{command}: {reply}");
            took
        })
        .collect()
}

/// Syncs the test guest into `launcher` and waits until its agent is
/// connected.
fn boot_guest(launcher: &Launcher, name: &str) {
    let mut watcher = launcher.client();
    watcher.ok("subscribe", Value::Null);
    let mut client = launcher.client();
    let synced = client.request_timeout(
        "sync",
        json!({ "vmi": guest_vmi(&GuestOptions::new(name)) }),
        STEP,
    );
    assert!(synced.get("return").is_some(), "{synced}");
    watcher.wait_event(BOOT, "AGENT_CONNECTED", named("AGENT_CONNECTED"));
}

fn running_guest() {
    let name = "goguest";
    let (launcher, _) = start(name, None);
    let (idle_launcher, _) = start("goidle", None);
    boot_guest(&launcher, name);
    // The static build (wire backend) beside it, when bench.sh built it.
    let wire = std::env::var_os("VL_STATIC_BIN")
        .map(std::path::PathBuf::from)
        .filter(|bin| bin.exists())
        .map(|bin| {
            let (guest, _) = start_bin(Some(&bin), "gowguest", None, &["--spawn-libvirt"]);
            let (idle, _) = start_bin(Some(&bin), "gowidle", None, &["--spawn-libvirt"]);
            boot_guest(&guest, "gowguest");
            (guest, idle)
        });
    // No client of any launcher during the window; all measured at once.
    let mut pids = vec![launcher.pid(), idle_launcher.pid()];
    if let Some((guest, idle)) = &wire {
        pids.extend([guest.pid(), idle.pid()]);
    }
    let window = Duration::from_secs(60);
    let counts = count_wakeups(&pids, window);
    let backends = if wire.is_some() { "virt backend, " } else { "" };
    println!(
        "idle, {backends}running guest (agent connected, polled), no client, 60 s: {}   [only the agent poller's timers]",
        per_minute(&counts[0], window)
    );
    println!(
        "idle, {backends}no guest, no client, 60 s: {}   [near zero]",
        per_minute(&counts[1], window)
    );
    if let Some((guest, idle)) = wire {
        println!(
            "idle, wire backend (static build), running guest, no client, 60 s: {}   [only the agent poller's timers]",
            per_minute(&counts[2], window)
        );
        println!(
            "idle, wire backend (static build), no guest, no client, 60 s: {}   [near zero]",
            per_minute(&counts[3], window)
        );
        let mut client = guest.client();
        client.ok("kill", Value::Null);
        drop(client);
        let mut guest = guest;
        guest.wait_exit(STEP);
        stop(idle);
    } else {
        println!("(VL_STATIC_BIN is not set: no wire-backend idle figures)");
    }
    stop(idle_launcher);
    let mut launcher = launcher;

    let mut client = launcher.client();
    let report =
        |client: &mut Client, label: &str, command: &str, args: Value, n: usize, target: &str| {
            time_calls(client, command, args.clone(), 20);
            let (p50, p99, _) = super::percentiles(time_calls(client, command, args, n));
            println!("{label} ({n} calls): p50 {p50:.0} us, p99 {p99:.0} us{target}");
        };
    report(
        &mut client,
        "ping, domain running",
        "ping",
        Value::Null,
        1000,
        "   [Go 86 us]",
    );
    let vmi = guest_vmi(&GuestOptions::new(name));
    report(
        &mut client,
        "re-sync (sync of the running guest's VMI: nothing to do)",
        "sync",
        json!({ "vmi": vmi }),
        200,
        "   [Go 1.37 ms]",
    );
    report(
        &mut client,
        "query-stats, running guest, cached",
        "query-stats",
        Value::Null,
        1000,
        "   [target <= 100 us; Go 116 us]",
    );
    report(
        &mut client,
        "query-stats, max_age_ms 0 (a fresh sample each call)",
        "query-stats",
        json!({"max_age_ms": 0}),
        200,
        "",
    );
    report(
        &mut client,
        "query-domain, running guest, cached",
        "query-domain",
        Value::Null,
        1000,
        "   [target <= 250 us; Go 1.04 ms]",
    );
    report(
        &mut client,
        "query-domain, max_age_ms 0 (a fresh read each call)",
        "query-domain",
        json!({"max_age_ms": 0}),
        200,
        "",
    );
    report(
        &mut client,
        "query-domain, fields [\"state\"]",
        "query-domain",
        json!({"fields": ["state"]}),
        1000,
        "",
    );
    let sample = kill(&mut launcher, &mut client);
    println!(
        "kill -> process exit, booted guest with its agent: {:.0} ms (reply {:.0} ms)",
        sample.exit, sample.reply
    );
}
