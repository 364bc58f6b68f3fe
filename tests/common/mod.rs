//! Test harness: runs the real `virt-launcher` binary in a private
//! directory tree and talks to it only through its socket, as a user would.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub mod daemon;
pub mod diff;
pub mod examples;
pub mod fleet;
pub mod guest;
pub mod hook_sidecar;
pub mod kubevirt;
pub mod needs;
pub mod podnet;
pub mod processes;
pub mod unprivileged;
pub mod upgrade;

// Not every suite asks for something.
#[allow(unused_imports)]
pub use needs::{Need, require};
use serde_json::{Value, json};

/// The binary cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_virt-launcher");

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// The launcher binary under test: `VL_LAUNCHER_BIN` (e.g. the static
/// musl build), else the one cargo built.
pub fn launcher_bin() -> PathBuf {
    match std::env::var_os("VL_LAUNCHER_BIN").filter(|v| !v.is_empty()) {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(BIN),
    }
}

/// The backend the binary under test should report: `VL_LAUNCHER_BACKEND`,
/// else, for cargo's own binary, the one its features select. `None` for
/// another binary whose backend was not stated.
pub fn expected_backend() -> Option<String> {
    if let Ok(backend) = std::env::var("VL_LAUNCHER_BACKEND") {
        return Some(backend);
    }
    if std::env::var_os("VL_LAUNCHER_BIN").is_some_and(|v| !v.is_empty()) {
        return None;
    }
    let wire = cfg!(feature = "wire") || !cfg!(feature = "virt");
    Some(if wire { "wire" } else { "virt" }.to_string())
}

/// libvirt's test driver as the tests reach it: `VL_TEST_URI`, else the
/// in-process `test:///default`. The wire backend needs
/// `test+unix:///default` (the test driver served by the host's libvirtd),
/// whose state every connection to that daemon shares: hence
/// `unique_name`.
pub fn test_uri() -> String {
    std::env::var("VL_TEST_URI")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| IN_PROCESS_TEST_URI.to_string())
}

/// libvirt's in-process test driver (the `virt` backend only).
pub const IN_PROCESS_TEST_URI: &str = "test:///default";

/// A VMI name no other test (of this process or another) uses.
pub fn unique_name(stem: &str) -> String {
    format!(
        "{stem}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A fresh directory tree under the system temp dir, removed on drop.
pub struct TempTree {
    pub root: PathBuf,
}

impl TempTree {
    pub fn new(tag: &str) -> TempTree {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("vl-{tag}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).expect("create temp tree");
        TempTree { root }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }
}

impl Drop for TempTree {
    fn drop(&mut self) {
        if std::env::var_os("VL_KEEP_TEMP").is_none() {
            let _ = fs::remove_dir_all(&self.root);
        }
    }
}

/// The flags that put every launcher directory inside `tree`.
pub fn dir_flags(tree: &TempTree) -> Vec<String> {
    let p = |s: &str| tree.path(s).to_string_lossy().into_owned();
    vec![
        "--kubevirt-share-dir".into(),
        p("share"),
        "--private-dir".into(),
        p("private"),
        "--ephemeral-disk-dir".into(),
        p("ephemeral"),
        "--container-disk-dir".into(),
        p("container-disks"),
        "--hotplug-disk-dir".into(),
        p("hotplug-disks"),
    ]
}

pub struct Launcher {
    pub child: Child,
    pub tree: TempTree,
    pub log: PathBuf,
    pub status: Option<ExitStatus>,
    /// The VMI's name and namespace, as given with --name/--namespace.
    pub name: String,
    pub namespace: String,
}

impl Launcher {
    /// Starts a launcher on the test driver (`test_uri()`) with `extra`
    /// flags, for the VMI default/demo on the in-process driver (each
    /// launcher has its own), default/demo-<unique> on a daemon's driver
    /// (shared by every test): [`Launcher::demo_vmi`] is its VMI either way.
    pub fn start_test(extra: &[&str]) -> Launcher {
        let uri = test_uri();
        let name = if uri == IN_PROCESS_TEST_URI {
            "demo".to_string()
        } else {
            unique_name("demo")
        };
        let mut args: Vec<String> = vec![
            "--connect".into(),
            uri,
            "--name".into(),
            name,
            "--namespace".into(),
            "default".into(),
            "--uid".into(),
            "0b5ae8d6-51a0-4b0e-9a6e-000000000001".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Launcher::start_in(TempTree::new("launcher"), &args)
    }

    /// Starts a launcher with exactly `args` plus the directory flags.
    pub fn start_in(tree: TempTree, args: &[String]) -> Launcher {
        let rust_log = std::env::var("VL_TEST_LOG").unwrap_or_else(|_| "debug".into());
        Launcher::start_wrapped(tree, &[], args, Some(&rust_log))
    }

    /// Like `start_in`, with `RUST_LOG` set to `rust_log` or unset.
    pub fn start_in_env(tree: TempTree, args: &[String], rust_log: Option<&str>) -> Launcher {
        Launcher::start_wrapped(tree, &[], args, rust_log)
    }

    /// Like [`Launcher::start_in_env`], the launcher run by `wrapper` (for
    /// example `ip netns exec NS`, which execs it: same process).
    pub fn start_wrapped(
        tree: TempTree,
        wrapper: &[String],
        args: &[String],
        rust_log: Option<&str>,
    ) -> Launcher {
        Launcher::start_with(tree, wrapper, args, rust_log, None)
    }

    /// The general case: `wrapper` (or nothing), `RUST_LOG`, and the
    /// (uid, gid) to run as (`None`: the test's own user), running the
    /// binary under test ([`launcher_bin`]).
    pub fn start_with(
        tree: TempTree,
        wrapper: &[String],
        args: &[String],
        rust_log: Option<&str>,
        user: Option<(u32, u32)>,
    ) -> Launcher {
        Launcher::start_binary(&launcher_bin(), tree, wrapper, args, rust_log, user)
    }

    /// Like [`Launcher::start_with`], running the binary at `bin` (the
    /// benchmarks run two builds side by side).
    pub fn start_binary(
        bin: &Path,
        tree: TempTree,
        wrapper: &[String],
        args: &[String],
        rust_log: Option<&str>,
        user: Option<(u32, u32)>,
    ) -> Launcher {
        let log = tree.path("launcher.log");
        let log_file = fs::File::create(&log).expect("create log");
        let flag = |name: &str| {
            args.iter()
                .position(|a| a == name)
                .and_then(|i| args.get(i + 1))
                .cloned()
                .unwrap_or_default()
        };
        let (name, namespace) = (flag("--name"), flag("--namespace"));
        let mut full = dir_flags(&tree);
        full.extend(args.iter().cloned());
        let bin = bin.to_string_lossy().into_owned();
        let (program, mut argv) = match wrapper.split_first() {
            Some((first, rest)) => (first.clone(), rest.to_vec()),
            None => (bin.clone(), Vec::new()),
        };
        if !wrapper.is_empty() {
            argv.push(bin);
        }
        argv.extend(full);
        let mut command = Command::new(program);
        if let Some((uid, gid)) = user {
            use std::os::unix::process::CommandExt;
            command.uid(uid).gid(gid);
        }
        match rust_log {
            Some(filter) => command.env("RUST_LOG", filter),
            None => command.env_remove("RUST_LOG"),
        };
        let child = command
            .args(&argv)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("spawn virt-launcher");
        Launcher {
            child,
            tree,
            log,
            status: None,
            name,
            namespace,
        }
    }

    /// `namespace/name`, as the launcher reports its VMI.
    pub fn vmi_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The libvirt domain's name, `namespace_name`.
    pub fn domain_name(&self) -> String {
        format!("{}_{}", self.namespace, self.name)
    }

    /// The demo VMI under this launcher's name and namespace.
    pub fn demo_vmi(&self) -> Value {
        demo_vmi_named(&self.name, &self.namespace)
    }

    pub fn sockets_dir(&self) -> PathBuf {
        self.tree.path("share/sockets")
    }

    pub fn ready_socket(&self) -> PathBuf {
        self.sockets_dir().join("launcher-sock")
    }

    pub fn init_socket(&self) -> PathBuf {
        self.sockets_dir().join("launcher-init-sock")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for `launcher-sock` to appear (readiness by rename) and accept
    /// connections (a stale file of that name may exist before).
    pub fn wait_ready(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while UnixStream::connect(self.ready_socket()).is_err() {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "launcher exited ({status}) before ready; log:\n{}",
                    self.log_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "launcher not ready within {timeout:?}; log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.ready_socket())
    }

    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([format!("-{signal}"), self.pid().to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -{signal} failed");
    }

    /// Waits for the process to exit; panics with the log if it does not.
    pub fn wait_exit(&mut self, timeout: Duration) -> i32 {
        if let Some(status) = self.status {
            return status.code().unwrap_or(-1);
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                self.status = Some(status);
                return status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "launcher did not exit within {timeout:?}; log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        if self.status.is_none() {
            // Stop the guest through the launcher first: a killed launcher
            // on a shared daemon (no --spawn-libvirt) leaves its QEMU
            // running.
            // A launcher that is exiting on its own (a test's last
            // command was `kill`) may still accept and then close: a
            // failed write means nothing is left to stop.
            if let Ok(mut client) = Client::try_connect(&self.ready_socket()) {
                let sent = client.writer.write_all(b"{\"execute\":\"kill\"}\n").is_ok();
                // No domain to kill: nothing to wait for.
                let killed = sent
                    && client
                        .read_line(Duration::from_secs(5))
                        .is_some_and(|reply| reply.get("return").is_some());
                let wait = if killed {
                    Duration::from_secs(15)
                } else {
                    Duration::ZERO
                };
                let deadline = Instant::now() + wait;
                while Instant::now() < deadline {
                    if let Ok(Some(_)) = self.child.try_wait() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "---- launcher log ({}) ----\n{}",
                self.log.display(),
                self.log_text()
            );
        }
    }
}

/// A test on an event line.
pub type EventPredicate = dyn Fn(&Value) -> bool;

/// A line client that keeps events apart from replies.
pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    pub hello: Value,
    events: VecDeque<Value>,
    next_id: u64,
}

impl Client {
    pub fn connect(path: &Path) -> Client {
        match Client::try_connect(path) {
            Ok(c) => c,
            Err(first_line) => panic!("no greeting from {}: {first_line}", path.display()),
        }
    }

    /// Connects; `Err` carries the first line when it is not a greeting
    /// (a Busy refusal).
    pub fn try_connect(path: &Path) -> Result<Client, Value> {
        let stream = UnixStream::connect(path)
            .map_err(|e| Value::String(format!("connect {}: {e}", path.display())))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        let writer = stream.try_clone().expect("clone");
        let mut client = Client {
            reader: BufReader::new(stream),
            writer,
            hello: Value::Null,
            events: VecDeque::new(),
            next_id: 1,
        };
        client.hello = client
            .read_line(Duration::from_secs(10))
            .unwrap_or(Value::Null);
        if client.hello.get("hello").is_none() {
            return Err(client.hello);
        }
        Ok(client)
    }

    /// Reads one line as JSON, or None on timeout/EOF.
    pub fn read_line(&mut self, timeout: Duration) -> Option<Value> {
        self.reader
            .get_ref()
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .ok()?;
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => None,
            Ok(_) => {
                assert!(line.ends_with('\n'), "line without newline: {line:?}");
                assert_eq!(line.matches('\n').count(), 1);
                Some(
                    serde_json::from_str(&line)
                        .unwrap_or_else(|e| panic!("bad JSON {line:?}: {e}")),
                )
            }
            Err(_) => None,
        }
    }

    /// Reads one line exactly as the server wrote it (newline included).
    pub fn read_raw_line(&mut self, timeout: Duration) -> String {
        self.read_raw_line_within(timeout)
            .unwrap_or_else(|| panic!("no line within {timeout:?}"))
    }

    /// One raw line, or None on timeout or EOF.
    pub fn read_raw_line_within(&mut self, timeout: Duration) -> Option<String> {
        self.reader
            .get_ref()
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .ok()?;
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line),
        }
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).expect("write");
    }

    /// Reads lines until a reply (not an event) arrives.
    pub fn read_reply(&mut self, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .read_line(left)
                .unwrap_or_else(|| panic!("no reply within {timeout:?}"));
            if line.get("event").is_some() {
                self.events.push_back(line);
                continue;
            }
            return line;
        }
    }

    /// Sends a command with a fresh numeric id and returns the reply line.
    pub fn request(&mut self, execute: &str, arguments: Value) -> Value {
        self.request_timeout(execute, arguments, Duration::from_secs(60))
    }

    pub fn request_timeout(&mut self, execute: &str, arguments: Value, timeout: Duration) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut req = json!({ "execute": execute, "id": id });
        if !arguments.is_null() {
            req["arguments"] = arguments;
        }
        let mut line = serde_json::to_string(&req).expect("encode");
        line.push('\n');
        self.send_raw(line.as_bytes());
        let reply = self.read_reply(timeout);
        assert_eq!(reply["id"], json!(id), "reply out of order: {reply}");
        reply
    }

    /// The `return` object of a command that must succeed.
    pub fn ok(&mut self, execute: &str, arguments: Value) -> Value {
        let reply = self.request(execute, arguments);
        assert!(reply.get("return").is_some(), "{execute} failed: {reply}");
        reply["return"].clone()
    }

    /// The error class of a command that must fail.
    pub fn err_class(&mut self, execute: &str, arguments: Value) -> (String, String) {
        let reply = self.request(execute, arguments);
        let err = reply
            .get("error")
            .unwrap_or_else(|| panic!("{execute} should fail: {reply}"));
        (
            err["class"].as_str().unwrap_or("").to_string(),
            err["desc"].as_str().unwrap_or("").to_string(),
        )
    }

    /// The next event, from those already read or the socket.
    pub fn next_event(&mut self, timeout: Duration) -> Option<Value> {
        if let Some(e) = self.events.pop_front() {
            return Some(e);
        }
        let line = self.read_line(timeout)?;
        assert!(line.get("event").is_some(), "expected an event, got {line}");
        Some(line)
    }

    /// Waits for an event matching `pred`, returning it (earlier events
    /// are kept in `seen`).
    pub fn wait_event(
        &mut self,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_event(left) {
                Some(e) if pred(&e) => return e,
                Some(e) => seen.push(e),
                None => panic!("no {what} event within {timeout:?}; saw: {seen:?}"),
            }
        }
    }

    /// Waits until every predicate has matched some event, in any order;
    /// returns the matching events in the predicates' order.
    pub fn wait_events(
        &mut self,
        timeout: Duration,
        what: &[(&str, &EventPredicate)],
    ) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        let mut found: Vec<Option<Value>> = vec![None; what.len()];
        let mut seen = Vec::new();
        while found.iter().any(Option::is_none) {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(event) = self.next_event(left) else {
                let missing: Vec<&str> = what
                    .iter()
                    .zip(&found)
                    .filter(|(_, f)| f.is_none())
                    .map(|((name, _), _)| *name)
                    .collect();
                panic!("no {missing:?} within {timeout:?}; saw: {seen:?}");
            };
            match what
                .iter()
                .zip(&found)
                .position(|((_, pred), f)| f.is_none() && pred(&event))
            {
                Some(i) => found[i] = Some(event),
                None => seen.push(event),
            }
        }
        found.into_iter().flatten().collect()
    }

    /// Whether the server closed the connection (EOF) within `timeout`.
    pub fn closed_within(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut buf = [0u8; 4096];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let _ = self.reader.get_ref().set_read_timeout(Some(left));
            match self.reader.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    return false;
                }
                Err(_) => return true,
            }
        }
    }
}

pub fn lifecycle(event: &str, detail: &str) -> impl Fn(&Value) -> bool {
    let (event, detail) = (event.to_string(), detail.to_string());
    move |e| {
        e["event"] == "DOMAIN_LIFECYCLE"
            && e["data"]["event"] == event.as_str()
            && e["data"]["detail"] == detail.as_str()
    }
}

pub fn named(name: &str) -> impl Fn(&Value) -> bool {
    let name = name.to_string();
    move |e| e["event"] == name.as_str()
}

/// The demo VMI, default/demo, as [`Launcher::start_test`] names it on
/// the in-process test driver.
pub fn demo_vmi() -> Value {
    demo_vmi_named("demo", "default")
}

/// A small VMI for the test driver: no files needed beyond what the
/// launcher creates.
pub fn demo_vmi_named(name: &str, namespace: &str) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "domain": {
                "cpu": {"cores": 1},
                "memory": {"guest": "128Mi"},
                "devices": {"autoattachGraphicsDevice": false}
            }
        }
    })
}
