//! The manager's decisions, tested against the fake hypervisor: a real
//! manager thread with the launcher's channels, driven as the server and
//! the signal thread drive it, watched through its events and its exit
//! decision. No libvirt, no files beyond a temporary directory tree.

mod caches;
mod commands;
mod connection;
mod consistency;
mod day2;
mod hotplug;
mod stops;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, unbounded};
use serde_json::{Map, Value, json};

use super::{
    Control, DomainManager, ExitRequest, HostFacts, Inbox, ManagerInput, ManagerParts, Timing,
};
use crate::command::{Command, ManagerRequest, ReplyTo};
use crate::config::Config;
use crate::convert::UserNetBackend;
use crate::events::{EventHub, SubscriberQueue};
use crate::exit::ExitCode;
use crate::hypervisor::DriverKind;
use crate::hypervisor::fake::FakeHypervisor;
use crate::protocol::{CommandError, CommandResult, ErrorClass};
use crate::scratch::ScratchDir;
use crate::signals::Signal;

/// Long enough for anything a test waits for on a loaded machine; a
/// passing test waits for far less.
const WAIT: Duration = Duration::from_secs(10);

/// The manager's waits, shortened.
fn quick_timing() -> Timing {
    Timing {
        command: Duration::from_secs(5),
        final_event: Duration::from_millis(200),
        exit_cleanup: Duration::from_secs(2),
        reconnect: Duration::from_millis(20),
        acpi_repeat: Duration::from_millis(100),
        destroy_retry: Duration::from_millis(100),
        detach: Duration::from_millis(300),
        stats_refresh: Duration::from_millis(100),
        stats_max_age: Duration::from_secs(5),
        stats_idle_stop: Duration::from_millis(500),
        domain_max_age: Duration::from_secs(5),
    }
}

/// What a test does to the fake before the manager starts.
type BeforeStart = Box<dyn FnOnce(&FakeHypervisor)>;

/// How a test's launcher is set up.
struct Setup {
    driver: DriverKind,
    /// Extra flags (e.g. --grace-period-seconds 1).
    flags: Vec<String>,
    /// Runs on the fake before the manager starts (a domain to adopt).
    before_start: Option<BeforeStart>,
    timing: Timing,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            driver: DriverKind::Test,
            flags: Vec::new(),
            before_start: None,
            timing: quick_timing(),
        }
    }
}

impl Setup {
    fn flags(mut self, flags: &[&str]) -> Setup {
        self.flags.extend(flags.iter().map(|f| f.to_string()));
        self
    }

    fn driver(mut self, driver: DriverKind) -> Setup {
        self.driver = driver;
        self
    }

    fn command_timeout(mut self, timeout: Duration) -> Setup {
        self.timing.command = timeout;
        self
    }

    /// Changes the manager's waits (the caches' intervals, say).
    fn timing(mut self, change: impl FnOnce(&mut Timing)) -> Setup {
        change(&mut self.timing);
        self
    }

    fn before_start(mut self, f: impl FnOnce(&FakeHypervisor) + 'static) -> Setup {
        self.before_start = Some(Box::new(f));
        self
    }
}

/// A manager on a fake hypervisor, not yet running.
struct Built {
    manager: DomainManager,
    fake: Arc<FakeHypervisor>,
    events: SubscriberQueue,
    exit: Receiver<ExitRequest>,
    /// The manager's inbox, both ends: the harness feeds it, and a test
    /// that drives the manager by hand reads its job completions there.
    inbox: Inbox,
    inbox_rx: Receiver<ManagerInput>,
    dirs: ScratchDir,
}

fn build(setup: Setup) -> Built {
    let dirs = ScratchDir::new("manager");
    let dir = |name: &str| dirs.join(name).to_string_lossy().into_owned();
    let mut argv: Vec<String> = vec![
        "--name".into(),
        "vm".into(),
        "--namespace".into(),
        "ns".into(),
        "--uid".into(),
        "u-1".into(),
        "--connect".into(),
        "test:///default".into(),
        "--kubevirt-share-dir".into(),
        dir("share"),
        "--private-dir".into(),
        dir("private"),
        "--ephemeral-disk-dir".into(),
        dir("ephemeral"),
        "--container-disk-dir".into(),
        dir("container-disks"),
        "--hotplug-disk-dir".into(),
        dir("hotplug-disks"),
    ];
    argv.extend(setup.flags);
    let args = match crate::cli::parse(argv.iter().map(String::as_str)) {
        Ok(crate::cli::Action::Run(args)) => *args,
        other => panic!("test flags do not parse: {other:?}"),
    };
    let config = Arc::new(Config::resolve(args).unwrap());
    let (inbox, inbox_rx) = super::inbox::channel();
    let fake = Arc::new(FakeHypervisor::new(setup.driver, inbox.hypervisor_events()));
    if let Some(before) = setup.before_start {
        before(&fake);
    }
    let hub = Arc::new(EventHub::new());
    let events = hub.subscribe(None).unwrap();
    let (exit_tx, exit) = unbounded();
    let (fatal, _fatal_rx) = unbounded();
    let mut manager = DomainManager::new(ManagerParts {
        config,
        hypervisor: fake.clone(),
        hub,
        host: HostFacts {
            kvm: Ok(()),
            ovmf: None,
            user_net_backend: UserNetBackend::Slirp,
        },
        daemons: None,
        poller: None,
        exit: exit_tx,
        upgrade: unbounded().0,
        fatal,
        network: crate::network::NetworkSlot::default(),
        virtiofs: Default::default(),
        inbox: inbox.clone(),
        resumed: None,
    });
    manager.timing = setup.timing;
    Built {
        manager,
        fake,
        events,
        exit,
        inbox,
        inbox_rx,
        dirs,
    }
}

/// A manager thread on a fake hypervisor, and the channels that drive it.
struct Harness {
    fake: Arc<FakeHypervisor>,
    /// The manager's inbox: requests, signals and control messages.
    inbox: Inbox,
    exit: Receiver<ExitRequest>,
    events: SubscriberQueue,
    dirs: ScratchDir,
    thread: Option<JoinHandle<()>>,
}

const DOMAIN: &str = "ns_vm";

impl Harness {
    fn start() -> Harness {
        Harness::with(Setup::default())
    }

    fn with(setup: Setup) -> Harness {
        let built = build(setup);
        let Built {
            manager,
            fake,
            events,
            exit,
            inbox,
            inbox_rx,
            dirs,
        } = built;
        let thread = std::thread::spawn(move || manager.run(inbox_rx));
        let harness = Harness {
            fake,
            inbox,
            exit,
            events,
            dirs,
            thread: Some(thread),
        };
        let (ack, acked) = crossbeam_channel::bounded(1);
        assert!(
            harness
                .inbox
                .send(ManagerInput::Control(Control::Ready { ack }))
                .is_ok()
        );
        acked
            .recv_timeout(WAIT)
            .expect("the manager acknowledges readiness");
        harness
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dirs.join(rel)
    }

    /// Sends a command as a client would (parsed from its name) and waits
    /// for its reply.
    fn request(&self, name: &str, arguments: Value) -> CommandResult {
        let arguments = match arguments {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => panic!("arguments must be an object: {other}"),
        };
        let command = match Command::parse(name, arguments) {
            Ok(Command::Manager(command)) => command,
            other => panic!("{name} is not a manager command: {other:?}"),
        };
        let answer = self.send(command);
        answer
            .recv_timeout(WAIT)
            .unwrap_or_else(|_| panic!("no reply to {name}"))
    }

    /// Sends a command without waiting; the reply arrives on the receiver.
    fn send(&self, command: crate::command::ManagerCommand) -> Receiver<CommandResult> {
        let (reply, answer) = ReplyTo::channel();
        assert!(
            self.inbox
                .send(ManagerInput::Request(ManagerRequest { command, reply }))
                .is_ok()
        );
        answer
    }

    fn send_named(&self, name: &str) -> Receiver<CommandResult> {
        match Command::parse(name, Map::new()) {
            Ok(Command::Manager(command)) => self.send(command),
            other => panic!("{name} is not a manager command: {other:?}"),
        }
    }

    fn ok(&self, name: &str, arguments: Value) -> Map<String, Value> {
        self.request(name, arguments)
            .map(crate::protocol::Return::into_object)
            .unwrap_or_else(|e| panic!("{name} failed: {e}"))
    }

    fn err(&self, name: &str, arguments: Value) -> CommandError {
        match self.request(name, arguments) {
            Ok(reply) => panic!("{name} should fail, returned {reply:?}"),
            Err(e) => e,
        }
    }

    fn status(&self) -> Value {
        Value::Object(self.ok("query-status", Value::Null))
    }

    /// Syncs the small VMI and checks it started.
    fn sync(&self) -> Map<String, Value> {
        let reply = self.ok("sync", json!({ "vmi": vmi() }));
        assert_eq!(reply["action"], "defined-and-started", "{reply:?}");
        self.lifecycle("Started", "Booted");
        reply
    }

    /// Waits for the next event matching `pred`, skipping others.
    fn event(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + WAIT;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(event) = self.events.events.recv_timeout(left) else {
                panic!("no {what} event within {WAIT:?}; saw {seen:?}");
            };
            let line: Value = serde_json::from_str(&event.line).unwrap();
            if pred(&line) {
                return line;
            }
            seen.push(line);
        }
    }

    fn named(&self, name: &str) -> Value {
        self.event(name, |e| e["event"] == name)
    }

    fn lifecycle(&self, event: &str, detail: &str) -> Value {
        self.event(&format!("{event}/{detail}"), |e| {
            e["event"] == "DOMAIN_LIFECYCLE"
                && e["data"]["event"] == event
                && e["data"]["detail"] == detail
        })
    }

    /// The events published so far and not yet read, by name.
    fn pending_events(&self) -> Vec<Value> {
        self.events
            .events
            .try_iter()
            .map(|e| serde_json::from_str(&e.line).unwrap())
            .collect()
    }

    /// The manager's exit decision.
    fn exit(&self) -> ExitRequest {
        self.exit
            .recv_timeout(WAIT)
            .expect("the manager decides to exit")
    }

    fn exit_code(&self) -> ExitCode {
        self.exit().code
    }

    fn no_exit_within(&self, wait: Duration) {
        if let Ok(decision) = self.exit.recv_timeout(wait) {
            panic!("unexpected exit: {decision:?}");
        }
    }

    fn signal(&self, signal: Signal) {
        assert!(self.inbox.send(ManagerInput::Signal(signal)).is_ok());
    }

    /// Polls query-status until `pred` holds.
    fn wait_status(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let status = self.status();
            if pred(&status) {
                return status;
            }
            assert!(Instant::now() < deadline, "{what} not reached: {status}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = self.inbox.send(ManagerInput::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The test VMI: one vCPU, a cloud-init disk (an ISO the launcher writes
/// itself), nothing that needs a host resource.
fn vmi() -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm", "namespace": "ns"},
        "spec": {
            "domain": {
                "cpu": {"cores": 1},
                "memory": {"guest": "128Mi"},
                "devices": {
                    "autoattachGraphicsDevice": false,
                    "disks": [{"name": "cloudinit", "disk": {"bus": "virtio"}}]
                }
            },
            "volumes": [{"name": "cloudinit", "cloudInitNoCloud": {
                "userData": "#cloud-config\nhostname: vm\n"
            }}]
        }
    })
}

/// Every regular file under `dir`.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn class(e: &CommandError) -> ErrorClass {
    e.class
}
