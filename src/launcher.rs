//! The main thread: parse flags, prepare directories, open libvirt, start
//! the threads, announce readiness, then wait for the manager's decision
//! to exit (or a thread's panic) and clean up.
//!
//! ```text
//!   signals ──────────┐
//!   libvirt-events ───┤ (HypervisorEvent; the wire backend: libvirt-rpc)
//!   agent-poller ─────┤ (AgentUpdate)
//!   server-accept     │
//!    └ client-N ──────┼─ ManagerRequest{command, reply} ──▶ manager ──▶ jobs (workers)
//!        └ events ◀───┼──────────── EventHub ◀──────────────┘   └▶ migration
//!   main ◀── ExitRequest / Fatal ───────────────────────────────┘
//! ```
//!
//! (docs/architecture.md has the whole picture.)

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, bounded, select, unbounded};

use crate::cli::{self, Action};
use crate::command::ReplyTo;
use crate::config::Config;
use crate::daemons::virtiofs::VirtiofsSlot;
use crate::daemons::{DaemonMode, LibvirtDaemons};
use crate::events::EventHub;
use crate::exit::ExitCode;
use crate::hypervisor::{self, Hypervisor, HypervisorErrorKind};
use crate::manager::{
    Control, DomainManager, ExitRequest, HostFacts, Inbox, ManagerInput, ManagerParts,
    UpgradeRequest,
};
use crate::server::socket::{CommandSocket, SocketNames};
use crate::server::{self, ServerShared};
use crate::signals;
use crate::threads::{self, Fatal};
use crate::upgrade::Inherited;
use crate::{dirs, lock, logging};
use std::os::fd::RawFd;

/// How long libvirt may take to accept the first connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
const CONNECT_RETRY: Duration = Duration::from_millis(500);
/// How long the readiness self-check may take.
const READY_TIMEOUT: Duration = Duration::from_secs(15);
/// How long subscribers get to receive the final events.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// A start-up failure: the exit code and a message a person can act on.
struct Failure {
    code: ExitCode,
    message: String,
}

impl Failure {
    fn new(code: ExitCode, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }
}

/// Runs the launcher with the process arguments; returns the exit status.
pub fn main(argv: Vec<std::ffi::OsString>) -> i32 {
    // virt-controller starts a KubeVirt pod with /usr/bin/virt-launcher-monitor
    // and KubeVirt's flags: called so, the launcher is in KubeVirt mode.
    let called_as_monitor = argv
        .first()
        .and_then(|arg0| std::path::Path::new(arg0).file_name())
        .is_some_and(|name| name == MONITOR_NAME);
    let action = match cli::parse(argv.into_iter().skip(1)) {
        Ok(action) => action,
        Err(e) => {
            eprintln!("virt-launcher: {e}");
            return ExitCode::Usage.code();
        }
    };
    let args = match action {
        Action::Help => {
            print!("{}", cli::help_text());
            return 0;
        }
        Action::Version => {
            println!("virt-launcher {}", env!("CARGO_PKG_VERSION"));
            return 0;
        }
        Action::GenerateMan => {
            print!("{}", cli::man::man_page());
            return 0;
        }
        Action::UpgradeCheck(file) => return crate::upgrade::self_check(&file),
        Action::Subcommand(subcommand) => return crate::client::run(subcommand),
        Action::Run(mut args) => {
            args.kubevirt.mode |= called_as_monitor;
            args
        }
    };
    if args.kubevirt.simulate_crash {
        eprintln!("virt-launcher: --simulate-crash: failing at once, as asked");
        return ExitCode::Internal.code();
    }
    let keep_after_failure = args.kubevirt.keep_after_failure;
    let config = match Config::resolve(*args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("virt-launcher: {e}");
            return ExitCode::Usage.code();
        }
    };
    logging::init(config.verbosity);
    // The running launcher's own path (what `upgrade` execs by default),
    // and what a launcher this one replaced passed on: read while the
    // process has one thread.
    crate::upgrade::remember_own_path();
    let inherited = crate::upgrade::Inherited::take_from_env();
    let code = match run(config, inherited) {
        Ok(code) => code.code(),
        Err(failure) => {
            log::error!("{}", failure.message);
            failure.code.code()
        }
    };
    if code != 0 && keep_after_failure {
        wait_for_termination(code);
    }
    code
}

/// The name virt-controller starts a KubeVirt pod's launcher by.
const MONITOR_NAME: &str = "virt-launcher-monitor";

/// `--keep-after-failure`: as KubeVirt's monitor, stays alive after a
/// failure (so the pod and its files can be inspected) until SIGTERM,
/// SIGINT or SIGKILL.
fn wait_for_termination(code: i32) {
    log::warn!("--keep-after-failure: exit status {code} withheld; waiting for SIGTERM or SIGINT");
    match signal_hook::iterator::Signals::new([libc::SIGTERM, libc::SIGINT]) {
        Ok(mut signals) => {
            let _ = signals.forever().next();
        }
        Err(e) => log::error!("--keep-after-failure: cannot wait for a signal: {e}"),
    }
}

fn run(config: Config, inherited: Inherited) -> Result<ExitCode, Failure> {
    let started = Instant::now();
    log::info!(
        "virt-launcher {} starting for VMI {} (uid {}), domain {}",
        env!("CARGO_PKG_VERSION"),
        config.vmi_ref(),
        config.uid,
        config.domain_name
    );
    // A non-root launcher with its own daemons enters its user namespace
    // now: the kernel allows that only while the process has one thread.
    if config.spawn_libvirt {
        let mode = DaemonMode::for_this_process();
        crate::daemons::enter_user_namespace_if_needed(mode).map_err(|e| {
            Failure::new(
                ExitCode::LibvirtUnavailable,
                format!("cannot start the launcher's libvirt daemons: {e}"),
            )
        })?;
        if mode == DaemonMode::Session {
            log::info!(
                "non-root mode: the libvirt daemons and QEMU run as this launcher's user (uid {}), in libvirt's session mode",
                crate::os::effective_ids().0
            );
        }
    }
    let (fatal_tx, fatal_rx) = unbounded::<Fatal>();
    // Signals first, so a SIGTERM during a slow start-up is not fatal.
    // The manager's inbox, before the manager: signals wait there.
    let (inbox, inbox_rx) = crate::manager::inbox::channel();
    let reporter = signals::StateReporter::default();
    signals::spawn(inbox.signals(), reporter.clone(), &fatal_tx)
        .map_err(|e| Failure::new(ExitCode::Internal, e))?;
    // A launcher that replaced another one: the stop signals were blocked
    // across the exec; the handlers are in place now, so a signal that
    // waited is delivered, and one the old launcher held is acted on.
    crate::upgrade::unblock_stop_signals();
    if let Some(signal) = inherited.pending_signal.and_then(signals::Signal::from_raw) {
        log::info!(
            "{} arrived during the hand-over from the previous launcher; acting on it",
            signal.name()
        );
        let _ = inbox.signals().send(signal);
    }

    // The directory locks come before anything touches the directories or
    // libvirt: a second launcher on the same directories stops here, at
    // once, with status 3.
    let locks =
        lock::acquire(&config.dirs).map_err(|e| Failure::new(ExitCode::Setup, e.to_string()))?;
    let outcome = run_locked(
        config,
        inherited,
        reporter,
        (inbox, inbox_rx),
        fatal_tx,
        fatal_rx,
        started,
    );
    locks.release();
    outcome
}

fn run_locked(
    config: Config,
    inherited: Inherited,
    reporter: signals::StateReporter,
    inbox: (Inbox, Receiver<ManagerInput>),
    fatal_tx: crossbeam_channel::Sender<Fatal>,
    fatal_rx: Receiver<Fatal>,
    started: Instant,
) -> Result<ExitCode, Failure> {
    dirs::prepare(&config).map_err(|e| Failure::new(ExitCode::Setup, e.to_string()))?;
    let mut config = config;
    if config.kubevirt.hook_sidecars > 0 {
        // As KubeVirt's launcher, every requested sidecar answers before
        // anything else starts; a signal meanwhile ends the wait.
        let collected = crate::kubevirt::hooks::collect(
            &config.kubevirt.hook_sidecars_dir,
            config.kubevirt.hook_sidecars,
            config.qemu_timeout,
            config.kubevirt.hook_timeout,
            |pause| !matches!(inbox.1.recv_timeout(pause), Ok(ManagerInput::Signal(_))),
        )
        .map_err(|e| Failure::new(ExitCode::Setup, e))?;
        match collected {
            Some(hooks) => config.hooks = Arc::new(hooks),
            None => {
                log::info!("signal received while waiting for the hook sidecars; exiting");
                return Ok(ExitCode::Ok);
            }
        }
    }

    if let Some(filters) = &config.libvirt_log_filters {
        // SAFETY: set_var is unsound only while another thread reads the
        // environment; only the signal thread runs, and it reads none.
        // libvirt reads this when it initialises, just below.
        unsafe { std::env::set_var("LIBVIRT_LOG_FILTERS", filters) };
    }
    hypervisor::backend::prepare().map_err(|e| Failure::new(ExitCode::Internal, e))?;

    // Whatever pod networking a sync sets up is removed when this guard
    // goes: after the daemons (and so QEMU) stopped, or on unwinding.
    let network = NetworkGuard(crate::network::NetworkSlot::default());
    // The filesystems' virtiofsd, stopped as the network is removed: once
    // QEMU is gone.
    let virtiofs = VirtiofsGuard(VirtiofsSlot::default());
    let daemons = if config.pod_daemons {
        let daemons =
            LibvirtDaemons::start_in_pod(config.libvirt_log_filters.as_deref(), &fatal_tx)
                .map_err(|e| {
                    Failure::new(
                        ExitCode::LibvirtUnavailable,
                        format!("cannot start the pod's libvirt daemons: {e}"),
                    )
                })?;
        log::info!(
            "libvirt daemons started as the pod's ({:.0} ms)",
            started.elapsed().as_secs_f64() * 1000.0
        );
        config.connect_uri = daemons.uri.clone();
        Some(Arc::new(daemons))
    } else if let Some(handed) = config
        .spawn_libvirt
        .then_some(inherited.state.as_deref())
        .flatten()
        .and_then(|path| crate::upgrade::HandoverState::read(path).ok())
        .and_then(|state| state.daemons)
    {
        // The launcher this one replaced (`upgrade`) handed its daemons
        // over: they, their namespace and QEMU run on.
        let daemons =
            LibvirtDaemons::adopt(&config.dirs.private, &handed, &fatal_tx).map_err(|e| {
                Failure::new(
                    ExitCode::LibvirtUnavailable,
                    format!("cannot take over the previous launcher's libvirt daemons: {e}"),
                )
            })?;
        log::info!(
            "libvirt daemons taken over in {} (init pid {})",
            daemons.runtime_dir.display(),
            handed.init_pid
        );
        config.connect_uri = daemons.uri.clone();
        Some(Arc::new(daemons))
    } else if config.spawn_libvirt {
        let daemons = LibvirtDaemons::start(
            &config.dirs.private,
            config.backend_storage_dir.as_deref(),
            config.libvirt_log_filters.as_deref(),
            &fatal_tx,
        )
        .map_err(|e| {
            Failure::new(
                ExitCode::LibvirtUnavailable,
                format!("cannot start the launcher's libvirt daemons: {e}"),
            )
        })?;
        log::info!(
            "libvirt daemons started in {} ({:.0} ms)",
            daemons.runtime_dir.display(),
            started.elapsed().as_secs_f64() * 1000.0
        );
        config.connect_uri = daemons.uri.clone();
        Some(Arc::new(daemons))
    } else {
        None
    };
    let outcome = run_with_libvirt(
        config,
        inherited,
        daemons.clone(),
        network.0.clone(),
        virtiofs.0.clone(),
        reporter,
        inbox,
        fatal_tx,
        fatal_rx,
        started,
    );
    if let Some(daemons) = daemons {
        daemons.stop();
    }
    drop(virtiofs);
    drop(network);
    outcome
}

/// Removes the launcher's pod networking when dropped.
struct NetworkGuard(crate::network::NetworkSlot);

impl Drop for NetworkGuard {
    fn drop(&mut self) {
        crate::network::teardown(&self.0);
    }
}

/// Stops the filesystems' virtiofsd when dropped.
struct VirtiofsGuard(VirtiofsSlot);

impl Drop for VirtiofsGuard {
    fn drop(&mut self) {
        crate::daemons::virtiofs::stop(&self.0);
    }
}

#[allow(clippy::too_many_arguments)]
fn run_with_libvirt(
    config: Config,
    inherited: Inherited,
    daemons: Option<Arc<LibvirtDaemons>>,
    network: crate::network::NetworkSlot,
    virtiofs: VirtiofsSlot,
    reporter: signals::StateReporter,
    (inbox, inbox_rx): (Inbox, Receiver<ManagerInput>),
    fatal_tx: crossbeam_channel::Sender<Fatal>,
    fatal_rx: Receiver<Fatal>,
    started: Instant,
) -> Result<ExitCode, Failure> {
    let connected = connect_with_retry(&config, &inbox, &inbox_rx).map_err(|mut f| {
        if let Some(said) = daemons.as_ref().and_then(|d| d.last_error()) {
            f.message.push_str(&format!(" The launcher's libvirt daemon last said: {said}"));
            if said.contains("Failed to parse user") || said.contains("Failed to parse group") {
                f.message.push_str(
                    " (the QEMU driver needs the libvirt-qemu user and group to exist; see docs/running.md's one-time host set-up)",
                );
            }
        }
        f
    })?;
    let hypervisor = match connected {
        Some(hv) => crate::hypervisor::trace::Traced::wrap(hv),
        None => return Ok(ExitCode::Ok),
    };
    let info = hypervisor.info();
    // The hypervisor's version follows from the manager once the daemon
    // has answered it (`HypervisorInfo` says why not now); so does the
    // release of a daemon started pinned (`daemons::capabilities`).
    log::info!(
        "connected to {} (libvirt {}; {} backend)",
        info.uri,
        info.daemon_version,
        info.backend
    );
    let loop_running = hypervisor::backend::start_events(&fatal_tx)
        .map_err(|e| Failure::new(ExitCode::Internal, e))?;

    // In KubeVirt mode virt-handler's gRPC has KubeVirt's socket names and
    // the JSON protocol a socket of its own beside it.
    let json_names = if config.kubevirt.mode {
        SocketNames::JSON_BESIDE_GRPC
    } else {
        SocketNames::LAUNCHER
    };
    // After an upgrade the sockets are the previous launcher's, still
    // listening at their ready names.
    let mut socket = match inherited.json {
        Some(fd) => CommandSocket::inherited(&config.dirs.share, json_names, fd),
        None => CommandSocket::bind(&config.dirs.share, json_names)
            .map_err(|e| Failure::new(ExitCode::Setup, e.to_string()))?,
    };
    let listener = socket
        .take_listener()
        .ok_or_else(|| Failure::new(ExitCode::Internal, "socket listener missing"))?;
    let mut grpc_socket = None;
    if config.kubevirt.mode {
        let bound = match inherited.grpc {
            Some(fd) => Ok(CommandSocket::inherited(
                &config.dirs.share,
                SocketNames::LAUNCHER,
                fd,
            )),
            None => CommandSocket::bind(&config.dirs.share, SocketNames::LAUNCHER),
        };
        match bound {
            Ok(bound) => grpc_socket = Some(bound),
            Err(e) => {
                socket.remove();
                return Err(Failure::new(ExitCode::Setup, e.to_string()));
            }
        }
    }
    let outcome = serve(
        Arc::new(config),
        hypervisor,
        daemons,
        network,
        virtiofs,
        reporter,
        listener,
        (&socket, grpc_socket.as_mut()),
        inherited.state,
        loop_running,
        (inbox, inbox_rx),
        fatal_tx,
        fatal_rx,
        started,
    );
    socket.remove();
    if let Some(grpc_socket) = &grpc_socket {
        grpc_socket.remove();
    }
    outcome
}

/// Opens libvirt, retrying every 500 ms for up to 15 s. `None` when a
/// signal asked the launcher to stop meanwhile (it waits in the manager's
/// inbox, where the libvirt events go too).
fn connect_with_retry(
    config: &Config,
    inbox: &Inbox,
    inbox_rx: &Receiver<ManagerInput>,
) -> Result<Option<Arc<dyn Hypervisor>>, Failure> {
    let events = inbox.hypervisor_events();
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let opening = Instant::now();
        let opened =
            hypervisor::backend::connect(&config.connect_uri, &config.domain_name, events.clone());
        log::trace!(
            "libvirt: virConnectOpen({}): {} in {:.3} ms",
            config.connect_uri,
            match &opened {
                Ok(_) => "ok".to_string(),
                Err(e) => e.to_string(),
            },
            opening.elapsed().as_secs_f64() * 1000.0
        );
        match opened {
            Ok(hv) => return Ok(Some(hv)),
            // Retrying cannot help a URI this build cannot use.
            Err(e) if e.kind == HypervisorErrorKind::Unsupported => {
                return Err(Failure::new(
                    ExitCode::LibvirtUnavailable,
                    format!("cannot use libvirt at {}: {e}", config.connect_uri),
                ));
            }
            Err(e) if Instant::now() >= deadline => {
                return Err(Failure::new(
                    ExitCode::LibvirtUnavailable,
                    format!(
                        "cannot connect to libvirt at {} after {attempts} attempts in {} s: {e}. Is the libvirt daemon running (or use --spawn-libvirt, or --connect test:///default to try without one)?",
                        config.connect_uri,
                        CONNECT_TIMEOUT.as_secs()
                    ),
                ));
            }
            Err(e) => {
                log::debug!("libvirt not reachable yet ({e}); retrying");
                // Until a connection opens, only the signal watcher feeds
                // the inbox.
                match inbox_rx.recv_timeout(CONNECT_RETRY) {
                    Ok(ManagerInput::Signal(_)) => {
                        log::info!("signal received while connecting to libvirt; exiting");
                        return Ok(None);
                    }
                    Ok(_) | Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => {
                        return Err(Failure::new(
                            ExitCode::Internal,
                            "the manager's inbox closed",
                        ));
                    }
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn serve(
    config: Arc<Config>,
    hypervisor: Arc<dyn Hypervisor>,
    daemons: Option<Arc<LibvirtDaemons>>,
    network: crate::network::NetworkSlot,
    virtiofs: VirtiofsSlot,
    reporter: signals::StateReporter,
    listener: std::os::unix::net::UnixListener,
    (socket, grpc_socket): (&CommandSocket, Option<&mut CommandSocket>),
    resumed_from: Option<std::path::PathBuf>,
    loop_running: Receiver<()>,
    (inbox, inbox_rx): (Inbox, Receiver<ManagerInput>),
    fatal_tx: crossbeam_channel::Sender<Fatal>,
    fatal_rx: Receiver<Fatal>,
    started: Instant,
) -> Result<ExitCode, Failure> {
    // What the launcher this one replaced handed over (`upgrade`).
    let resumed = resumed_from.as_ref().and_then(|path| {
        crate::upgrade::HandoverState::read(path)
            .map_err(|e| log::warn!("upgrade: {e}"))
            .ok()
    });
    // Its events' numbering goes on here.
    let hub = Arc::new(EventHub::resumed(
        resumed.as_ref().and_then(|state| state.events.clone()),
    ));
    // SIGUSR1 logs the manager's answer to query-status; SIGUSR2 asks it
    // for upgrade.
    reporter.connect(inbox.requests());
    let (exit_tx, exit_rx) = unbounded::<ExitRequest>();
    let (upgrade_tx, upgrade_rx) = unbounded::<UpgradeRequest>();
    let listeners: Vec<(&str, RawFd)> = std::iter::once(("json", socket.fd))
        .chain(grpc_socket.as_ref().map(|g| ("grpc", g.fd)))
        .collect();
    // Where libvirt writes the domain's QEMU log (a guest panic's details).
    let qemu_log = daemons.as_ref().map_or_else(
        || std::path::PathBuf::from(format!("/var/log/libvirt/qemu/{}.log", config.domain_name)),
        |d| d.qemu_log(&config.domain_name),
    );

    let poller = crate::agent::poller::spawn(
        hypervisor.clone(),
        config.domain_name.clone(),
        config.agent_intervals,
        inbox.agent_updates(),
        &fatal_tx,
    )
    .map_err(|e| {
        Failure::new(
            ExitCode::Internal,
            format!("cannot start the agent poller: {e}"),
        )
    })?;
    let own_daemons = daemons.clone();
    let manager = DomainManager::new(ManagerParts {
        config: config.clone(),
        hypervisor,
        hub: hub.clone(),
        host: HostFacts::probe(config.ovmf_path.as_deref()),
        daemons,
        poller: Some(poller),
        exit: exit_tx,
        upgrade: upgrade_tx,
        fatal: fatal_tx.clone(),
        network,
        virtiofs,
        inbox: inbox.clone(),
        resumed: resumed.clone(),
    });
    threads::spawn_named("manager", &fatal_tx, move || manager.run(inbox_rx))
        .map_err(|e| Failure::new(ExitCode::Internal, format!("cannot start the manager: {e}")))?;

    let mut shared = ServerShared::new(
        config.vmi_ref(),
        config.max_line_bytes,
        config.max_clients,
        inbox.requests(),
        hub.clone(),
        fatal_tx.clone(),
    );
    shared.idle_timeout = config.client_idle_timeout;
    let shared = Arc::new(shared);
    server::spawn_acceptor(listener, shared.clone())
        .map_err(|e| Failure::new(ExitCode::Internal, format!("cannot start the server: {e}")))?;
    let mut grpc_ready = None;
    let (k8s_events_tx, k8s_events_rx) = crate::kubevirt::notify::k8s_event_queue();
    if let Some(grpc_socket) = grpc_socket {
        let listener = grpc_socket
            .take_listener()
            .ok_or_else(|| Failure::new(ExitCode::Internal, "gRPC socket listener missing"))?;
        let handler = crate::kubevirt::cmd_handler(inbox.requests(), config.clone(), k8s_events_tx);
        crate::grpc::spawn_acceptor(
            listener,
            handler,
            crate::grpc::Limits::default(),
            fatal_tx.clone(),
        )
        .map_err(|e| {
            Failure::new(
                ExitCode::Internal,
                format!("cannot start the gRPC server: {e}"),
            )
        })?;
        grpc_ready = Some(&*grpc_socket);
    }

    // Ready = the event loop dispatches and a ping through the real socket
    // reaches the manager and comes back.
    loop_running.recv_timeout(READY_TIMEOUT).map_err(|_| {
        Failure::new(
            ExitCode::Internal,
            "libvirt's event loop did not start within 15 s",
        )
    })?;
    server::self_ping(socket.current_path(), READY_TIMEOUT).map_err(|e| {
        Failure::new(
            ExitCode::Setup,
            format!("the command socket does not answer: {e}"),
        )
    })?;
    // Ready before the rename, so nobody who finds launcher-sock sees
    // "ready": false or the Initializing phase.
    shared.ready.store(true, Ordering::Release);
    let (ack_tx, ack_rx) = bounded(1);
    let _ = inbox.send(ManagerInput::Control(Control::Ready { ack: ack_tx }));
    ack_rx.recv_timeout(READY_TIMEOUT).map_err(|_| {
        Failure::new(
            ExitCode::Internal,
            "the domain manager did not acknowledge readiness",
        )
    })?;
    socket
        .mark_ready()
        .map_err(|e| Failure::new(ExitCode::Setup, e.to_string()))?;
    // virt-handler looks only for the gRPC socket's ready name: it is
    // renamed last, once a version negotiation and a ping through it work.
    let mut notifier = None;
    if let Some(grpc_socket) = grpc_ready {
        crate::kubevirt::self_ping(grpc_socket.current_path(), READY_TIMEOUT).map_err(|e| {
            Failure::new(
                ExitCode::Setup,
                format!("the gRPC command socket does not answer: {e}"),
            )
        })?;
        grpc_socket
            .mark_ready()
            .map_err(|e| Failure::new(ExitCode::Setup, e.to_string()))?;
        notifier = Some(
            crate::kubevirt::notify::Notifier::spawn(
                &config,
                hub.clone(),
                inbox.requests(),
                k8s_events_rx,
                qemu_log,
                &fatal_tx,
            )
            .map_err(|e| {
                Failure::new(
                    ExitCode::Internal,
                    format!("cannot start the domain notifier: {e}"),
                )
            })?,
        );
    }
    log::info!(
        "ready: {} ({:.1} ms after start)",
        grpc_ready.unwrap_or(socket).paths.ready.display(),
        started.elapsed().as_secs_f64() * 1000.0
    );

    if let Some(path) = resumed_from {
        report_resumed(&path, resumed.as_ref());
    }
    let mut standalone = None;
    // A launcher that took over from another one finds its domain running:
    // the standalone VMI was synced by the first launcher.
    if let Some(vmi) = config.standalone_vmi.clone().filter(|_| !socket.inherited) {
        let (reply, answer) = ReplyTo::channel();
        let _ = inbox.send(ManagerInput::Control(Control::SyncStandalone {
            vmi,
            reply,
        }));
        standalone = Some(answer);
    }

    let never = crossbeam_channel::never();
    let code = loop {
        let standalone_rx = standalone.as_ref().unwrap_or(&never);
        select! {
            recv(exit_rx) -> msg => {
                let request = msg.unwrap_or(ExitRequest {
                    code: ExitCode::Internal,
                    reason: "the manager stopped without a decision".into(),
                });
                log::info!("exiting with status {}: {}", request.code.code(), request.reason);
                break request.code;
            }
            recv(upgrade_rx) -> msg => {
                if let Ok(request) = msg {
                    hand_over(request, &config, &listeners, own_daemons.as_deref(), &shared, &inbox);
                }
            }
            recv(fatal_rx) -> msg => {
                let fatal = msg.unwrap_or(Fatal { thread: "?".into(), message: "unknown".into() });
                log::error!(
                    "exiting with status {}: thread {} failed: {}",
                    ExitCode::Internal.code(), fatal.thread, fatal.message
                );
                break ExitCode::Internal;
            }
            recv(standalone_rx) -> msg => {
                standalone = None;
                match msg {
                    Ok(Ok(reply)) => log::info!(
                        "standalone VMI synced: {}",
                        serde_json::Value::Object(reply.into_object())
                    ),
                    Ok(Err(e)) => {
                        log::error!("exiting with status {}: the --vmi VMI could not be synced: {e}",
                            ExitCode::StandaloneSyncFailed.code());
                        break ExitCode::StandaloneSyncFailed;
                    }
                    Err(_) => {}
                }
            }
        }
    };
    // The hook sidecars hear that the domain is gone (KubeVirt calls them
    // before its final notification too).
    for failed in config.hooks.shutdown() {
        log::warn!("hooks: {failed}");
    }
    // virt-handler learns that the domain is gone from the notifier's
    // last event, sent before anything is torn down.
    if let Some(notifier) = notifier {
        notifier.finish(DRAIN_TIMEOUT);
    }
    // Answer every request already read, and let subscribers receive the
    // final events, before the socket goes.
    let draining = Instant::now();
    if !shared.in_flight.wait_idle(DRAIN_TIMEOUT) {
        log::warn!("some requests were still unanswered after 2 s");
    }
    if !hub.drain(DRAIN_TIMEOUT) {
        log::warn!("a subscriber did not take its last events within 2 s");
    }
    server::flush_warnings();
    crate::grpc::server::flush_warnings();
    log::debug!(
        "replies and events drained in {:.1} ms",
        draining.elapsed().as_secs_f64() * 1e3
    );
    Ok(code)
}

/// How long the upgrade's reply may take to reach its client before the
/// exec.
const REPLY_BEFORE_EXEC: Duration = Duration::from_millis(500);

/// `upgrade`, agreed to by the manager: writes the state, checks the new
/// binary, answers, and execs it. Returns only when the hand-over was
/// given up (the manager is told, and the launcher goes on).
fn hand_over(
    request: UpgradeRequest,
    config: &Config,
    listeners: &[(&str, RawFd)],
    daemons: Option<&LibvirtDaemons>,
    shared: &ServerShared,
    inbox: &Inbox,
) {
    let UpgradeRequest {
        binary,
        mut state,
        reply,
    } = request;
    let give_up = |reply: Option<crate::command::ReplyTo>, class, why: String| {
        log::warn!("upgrade refused: {why}");
        // The manager hears first: a request the client sends once it has
        // the answer arrives after this, on the same inbox.
        let _ = inbox.send(ManagerInput::Control(Control::UpgradeAborted));
        if let Some(reply) = reply {
            reply.send(Err(crate::protocol::CommandError::new(class, why)));
        }
    };
    use crate::protocol::ErrorClass;
    let Some(binary) = binary.or_else(crate::upgrade::own_path) else {
        return give_up(
            Some(reply),
            ErrorClass::Internal,
            "upgrade: the launcher's own path is unknown; give arguments.binary".into(),
        );
    };
    let state_path = match state.write(&config.dirs.private) {
        Ok(path) => path,
        Err(e) => {
            return give_up(
                Some(reply),
                ErrorClass::Internal,
                format!(
                    "upgrade: cannot write the hand-over state in {}: {e}",
                    config.dirs.private.display()
                ),
            );
        }
    };
    let checking = Instant::now();
    let version = match crate::upgrade::check_binary(&binary, &state_path) {
        Ok(version) => version,
        Err(why) => {
            let _ = std::fs::remove_file(&state_path);
            return give_up(
                Some(reply),
                ErrorClass::InvalidArgument,
                format!(
                    "upgrade: {} cannot take over, nothing changed: {why}",
                    binary.display()
                ),
            );
        }
    };
    log::info!(
        "upgrade: {} ({version}) passed its check in {:.1} ms; handing over",
        binary.display(),
        checking.elapsed().as_secs_f64() * 1e3
    );
    reply.send(Ok(crate::replies::Upgrading {
        binary: binary.clone(),
        version,
        state_file: state_path.clone(),
    }
    .into()));
    // The reply (and any other already read) reaches its client before the
    // process is replaced.
    shared.in_flight.wait_idle(REPLY_BEFORE_EXEC);
    server::flush_warnings();
    log::logger().flush();
    // The hand-over's time counts from here (the check is not part of it).
    state.handed_over_at_us = crate::upgrade::now_us();
    // The daemons as they are now (one may have been restarted meanwhile).
    let daemons = daemons.filter(|_| state.daemons.is_some());
    if let Some(daemons) = daemons {
        match daemons.handover() {
            Ok(now) => state.daemons = Some(now),
            Err(why) => {
                let _ = std::fs::remove_file(&state_path);
                return give_up(None, ErrorClass::Unavailable, format!("upgrade: {why}"));
            }
        }
    }
    // The events' numbering goes on in the new launcher; one published
    // from here to the exec is only logged.
    state.events = Some(shared.hub.seal_for_handover());
    if let Err(e) = state.write(&config.dirs.private) {
        log::warn!("upgrade: cannot note the hand-over's start: {e}");
    }
    let inherit = state
        .daemons
        .as_ref()
        .map(LibvirtDaemons::handover_fds)
        .unwrap_or_default();
    let error = match daemons {
        // From the thread that forked the daemons and their namespace's
        // init, so that none of them gets its parent-death signal.
        Some(daemons) => crate::upgrade::exec(&binary, listeners, &inherit, &state_path, &|c| {
            daemons.exec(c)
        }),
        None => crate::upgrade::exec(
            &binary,
            listeners,
            &[],
            &state_path,
            &crate::upgrade::exec_now,
        ),
    };
    let _ = std::fs::remove_file(&state_path);
    shared.hub.unseal();
    give_up(
        None,
        ErrorClass::Internal,
        format!("upgrade: cannot exec {}: {error}", binary.display()),
    );
}

/// The launcher resumed from a hand-over: says how long it took (from the
/// old launcher's last request to this one's readiness) and removes the
/// state file.
fn report_resumed(path: &std::path::Path, state: Option<&crate::upgrade::HandoverState>) {
    match state {
        Some(state) => log::info!(
            "upgrade: resumed from virt-launcher {} (phase {}, domain {}); hand-over took {:.1} ms",
            state.from,
            state.phase,
            state.domain_state,
            crate::upgrade::now_us().saturating_sub(state.handed_over_at_us) as f64 / 1e3
        ),
        None => log::warn!("upgrade: resumed without a readable hand-over state"),
    }
    let _ = std::fs::remove_file(path);
}
