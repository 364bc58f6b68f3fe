//! The passt binding (KubeVirt's `binding: {name: passt}` plugin) when
//! libvirt cannot run passt itself. libvirt writes `<backend
//! type='passt'/>` from 9.2 on; Debian 12's libvirt 9.0 refuses it ("Invalid
//! value for attribute 'type' in element 'backend'"). QEMU 7.2 has `-netdev
//! stream`, the way passt attaches to QEMU, so with an older libvirt the
//! launcher starts `passt` in its own (the pod's) network namespace, one
//! per interface, listening on `<private-dir>/passt/<interface>.sock`, and
//! the converter adds QEMU's `-netdev stream` and `-device` for it through
//! `<qemu:commandline>` (`convert::network`).
//!
//! passt forwards the VMI's `ports` (`-t`, `-u`), or every port when none
//! are listed, as KubeVirt does; it answers the guest's DHCP, NDP and
//! DHCPv6 itself with the pod interface's address. `--no-map-gw`: the
//! pod's gateway stays the cluster's router (passt would otherwise map it
//! to the pod's loopback).
//!
//! Lifetime: passt runs in the foreground as a child of the launcher. With
//! `--spawn-libvirt` it is started in the daemons' PID namespace
//! (`crate::daemons`), which dies with the launcher, so even a SIGKILLed
//! launcher leaves no passt behind. On every other exit path the network
//! teardown stops it (SIGTERM, then SIGKILL) and removes its socket.
//!
//! Ownership: started as root, passt drops to user `nobody` before it
//! binds its socket, so the socket's directory belongs to `nobody`; the
//! socket itself is then opened to every user (0666, in a 0755 directory)
//! so that QEMU connects whatever user it runs as (libvirt's DAC labels
//! know nothing of a socket named only on QEMU's command line).

use std::fmt;
use std::fs;
use std::io::{self, BufRead, BufReader};
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::error::StepError;
use super::setup::NetworkError;
use crate::vmi::{Interface, PortProtocol};

/// How long passt may take to bind its socket.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long passt may take to exit after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// Where passt may be installed.
const CANDIDATES: [&str; 2] = ["/usr/bin/passt", "/usr/local/bin/passt"];

/// What one passt interface needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasstPlan {
    /// The VMI's interface name.
    pub name: String,
    /// passt's `-t` and `-u` specs: "all", "none" or a port list.
    pub tcp: String,
    pub udp: String,
    /// Whether libvirt runs passt (≥ 9.2); otherwise the launcher does,
    /// listening on `socket`.
    pub by_libvirt: bool,
    pub socket: PathBuf,
}

/// passt's `-t`/`-u` specs for `interface`: its listed ports and port
/// ranges, or every port when none are listed (as KubeVirt does).
pub fn port_specs(interface: &Interface) -> (String, String) {
    if interface.ports.is_empty() && interface.port_ranges.is_empty() {
        return ("all".to_string(), "all".to_string());
    }
    let spec = |protocol: PortProtocol| {
        let listed: Vec<String> = interface
            .ports
            .iter()
            .filter(|p| p.protocol.unwrap_or(PortProtocol::Tcp) == protocol)
            .map(|p| p.port.to_string())
            .chain(
                interface
                    .port_ranges
                    .iter()
                    .filter(|r| r.protocol == protocol)
                    .map(|r| format!("{}-{}", r.start, r.end)),
            )
            .collect();
        if listed.is_empty() {
            "none".to_string()
        } else {
            listed.join(",")
        }
    };
    (spec(PortProtocol::Tcp), spec(PortProtocol::Udp))
}

/// The installed passt, if any.
pub fn find_binary() -> Option<&'static Path> {
    CANDIDATES.iter().map(Path::new).find(|p| p.exists())
}

/// Starts a process in the right place (the daemons' PID namespace with
/// `--spawn-libvirt`).
#[derive(Clone)]
pub struct Spawner(pub Arc<dyn Fn(Command) -> io::Result<Child> + Send + Sync>);

impl fmt::Debug for Spawner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Spawner")
    }
}

/// A passt interface of the running VMI, and the passt the launcher runs
/// for it (none when libvirt runs it).
#[derive(Debug)]
pub struct ActivePasst {
    pub plan: PasstPlan,
    process: Option<Child>,
    pid: Option<u32>,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl ActivePasst {
    /// Only reported: libvirt runs passt.
    pub fn by_libvirt(plan: &PasstPlan) -> ActivePasst {
        ActivePasst {
            plan: plan.clone(),
            process: None,
            pid: None,
            stderr: Arc::default(),
        }
    }

    pub fn report(&self) -> Value {
        json!({
            "name": self.plan.name,
            "binding": "passt",
            "passt": {
                "runBy": if self.plan.by_libvirt { "libvirt" } else { "launcher" },
                "socket": (!self.plan.by_libvirt).then(|| self.plan.socket.to_string_lossy().into_owned()),
                "pid": self.pid,
                "tcpPorts": self.plan.tcp,
                "udpPorts": self.plan.udp,
            },
        })
    }

    /// Stops passt (SIGTERM, then SIGKILL) and removes its socket.
    pub fn stop(&mut self) {
        let Some(mut child) = self.process.take() else {
            return;
        };
        let name = &self.plan.name;
        if let Ok(None) = child.try_wait() {
            let _ = crate::os::send_signal(child.id(), libc::SIGTERM);
            let deadline = Instant::now() + STOP_GRACE;
            while let Ok(None) = child.try_wait() {
                if Instant::now() >= deadline {
                    log::warn!("network: passt of interface {name:?} ignored SIGTERM; killing it");
                    let _ = child.kill();
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        match child.wait() {
            Ok(status) => log::info!("network: passt of interface {name:?} stopped ({status})"),
            Err(e) => log::warn!("network: passt of interface {name:?}: {e}"),
        }
        remove_socket(&self.plan.socket);
    }
}

impl Drop for ActivePasst {
    fn drop(&mut self) {
        self.stop();
    }
}

fn remove_socket(socket: &Path) {
    if let Err(e) = fs::remove_file(socket)
        && e.kind() != io::ErrorKind::NotFound
    {
        log::warn!("network: cannot remove {}: {e}", socket.display());
    }
    if let Some(dir) = socket.parent() {
        // Only when empty: another interface's socket may still be there.
        let _ = fs::remove_dir(dir);
    }
}

/// The uid and gid of `nobody`, as which passt runs when started as root.
fn nobody() -> Option<(u32, u32)> {
    crate::os::user_ids(c"nobody")
}

/// Starts passt for `plan` (not `by_libvirt`) and waits until its socket
/// is there.
pub fn start(plan: &PasstPlan, spawner: Option<&Spawner>) -> Result<ActivePasst, NetworkError> {
    let fail = |cause: StepError| NetworkError {
        interface: plan.name.clone(),
        cause,
    };
    let binary = find_binary().ok_or_else(|| {
        fail(StepError::Refused(
            "the passt binding needs passt, which is not installed on this host (Debian: apt-get install passt)"
                .to_string(),
        ))
    })?;
    let dir = plan.socket.parent().ok_or_else(|| {
        fail(StepError::Refused(format!(
            "{} has no directory",
            plan.socket.display()
        )))
    })?;
    fs::create_dir_all(dir)
        .map_err(|e| fail(StepError::os(format!("cannot create {}", dir.display()), e)))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).map_err(|e| {
        fail(StepError::os(
            format!("cannot open {} to QEMU", dir.display()),
            e,
        ))
    })?;
    if crate::os::effective_ids().0 == 0 {
        let (uid, gid) = nobody().ok_or_else(|| {
            fail(StepError::Refused(
                "passt runs as user nobody, which this host lacks".to_string(),
            ))
        })?;
        chown(dir, Some(uid), Some(gid)).map_err(|e| {
            fail(StepError::os(
                format!("cannot give {} to nobody", dir.display()),
                e,
            ))
        })?;
    }
    check_file_limit(plan).map_err(fail)?;
    remove_socket_file_only(&plan.socket);
    let mut command = Command::new(binary);
    command
        .args(["--foreground", "--quiet", "--socket"])
        .arg(&plan.socket)
        .args(["--tcp-ports", &plan.tcp, "--udp-ports", &plan.udp])
        // The pod's gateway is a cluster router, not this pod's loopback
        // (passt's default maps it there, for desktop use).
        .arg("--no-map-gw")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    raise_file_limit(&mut command);
    let mut child = match spawner {
        Some(spawner) => (spawner.0)(command),
        None => command.spawn(),
    }
    .map_err(|e| {
        fail(StepError::os(
            format!("cannot start {}", binary.display()),
            e,
        ))
    })?;
    let pid = child.id();
    let stderr: Arc<Mutex<Vec<String>>> = Arc::default();
    if let Some(pipe) = child.stderr.take() {
        let lines = stderr.clone();
        let name = plan.name.clone();
        let _ = std::thread::Builder::new()
            .name(format!("passt-{}", plan.name))
            .spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    // It tries syslog first, which a pod has not.
                    if line.starts_with("Failed to send") || line.trim().is_empty() {
                        continue;
                    }
                    log::info!("passt[{name}]: {line}");
                    if let Ok(mut kept) = lines.lock()
                        && kept.len() < 20
                    {
                        kept.push(line);
                    }
                }
            });
    }
    let mut active = ActivePasst {
        plan: plan.clone(),
        process: Some(child),
        pid: Some(pid),
        stderr,
    };
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if plan.socket.exists() {
            break;
        }
        let exited = active
            .process
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten());
        if let Some(status) = exited {
            // Let the reader catch the last words.
            std::thread::sleep(Duration::from_millis(50));
            let said = active
                .stderr
                .lock()
                .map(|l| l.join("; "))
                .unwrap_or_default();
            return Err(fail(StepError::Refused(format!(
                "passt exited at start ({status}): {said}"
            ))));
        }
        if Instant::now() >= deadline {
            active.stop();
            return Err(fail(StepError::Refused(format!(
                "passt did not create {} within {} s",
                plan.socket.display(),
                READY_TIMEOUT.as_secs()
            ))));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // QEMU may run as another user than passt (nobody when started as
    // root): connecting needs write permission on the socket.
    fs::set_permissions(&plan.socket, fs::Permissions::from_mode(0o666)).map_err(|e| {
        fail(StepError::os(
            format!("cannot open {} to QEMU", plan.socket.display()),
            e,
        ))
    })?;
    log::info!(
        "network: passt for interface {:?} (pid {pid}) listens on {} (tcp ports {}, udp ports {}); the launcher runs it because libvirt < 9.2 cannot",
        plan.name,
        plan.socket.display(),
        plan.tcp,
        plan.udp
    );
    Ok(active)
}

/// Forwarding every port ("all") binds a socket per port below the
/// ephemeral range, per protocol: refused up front, with what to do, when
/// the open-file limit cannot hold them (passt would only say "Too many
/// open files").
fn check_file_limit(plan: &PasstPlan) -> Result<(), StepError> {
    let all = [&plan.tcp, &plan.udp]
        .iter()
        .filter(|spec| spec.as_str() == "all")
        .count() as u64;
    if all == 0 {
        return Ok(());
    }
    let first_ephemeral: u64 = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(32768);
    let needed = all * first_ephemeral.saturating_sub(1) + 64;
    let Some((soft, mut hard)) = crate::os::file_limit() else {
        return Ok(());
    };
    // Root may raise it if it holds CAP_SYS_RESOURCE.
    if hard < needed && crate::os::effective_ids().0 == 0 && crate::os::set_file_limit(soft, needed)
    {
        hard = needed;
    }
    if hard < needed {
        return Err(StepError::Refused(format!(
            "no ports are listed, so passt forwards every port to the guest (as KubeVirt does), which takes about {needed} open files; this launcher may open at most {hard} (hard RLIMIT_NOFILE) and cannot raise it. List the ports the guest serves in the interface's ports or portRanges, or raise the launcher's open-file limit"
        )));
    }
    Ok(())
}

/// passt binds a socket per forwarded port and protocol: "all" is some
/// 65,000 of them, more than a usual limit of open files. Its limit is
/// raised to the hard limit, and as root to the kernel's maximum
/// (fs.nr_open).
fn raise_file_limit(command: &mut Command) {
    let root = crate::os::effective_ids().0 == 0;
    let ceiling: libc::rlim_t = if root {
        fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(1 << 20)
    } else {
        libc::RLIM_INFINITY
    };
    let hook = move || -> io::Result<()> {
        // Both calls are async-signal-safe and allocate nothing.
        let Some((_, hard)) = crate::os::file_limit() else {
            return Ok(());
        };
        if root && hard < ceiling && crate::os::set_file_limit(ceiling, ceiling) {
            return Ok(());
        }
        // No CAP_SYS_RESOURCE: the hard limit stays. Not fatal: passt
        // says which ports it could not bind.
        let _ = crate::os::set_file_limit(hard, hard);
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec and makes only
    // the async-signal-safe calls above; it allocates nothing.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(command, hook);
    }
}

fn remove_socket_file_only(socket: &Path) {
    if let Err(e) = fs::remove_file(socket)
        && e.kind() != io::ErrorKind::NotFound
    {
        log::warn!("network: cannot remove a stale {}: {e}", socket.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn interface(value: Value) -> Interface {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn ports_are_forwarded_as_listed_or_all() {
        let none = interface(json!({"name": "a", "binding": {"name": "passt"}}));
        assert_eq!(port_specs(&none), ("all".into(), "all".into()));
        let listed = interface(json!({"name": "a", "binding": {"name": "passt"},
            "ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}, {"port": 443, "protocol": "TCP"}]}));
        assert_eq!(port_specs(&listed), ("80,443".into(), "53".into()));
        let tcp_only = interface(json!({"name": "a", "binding": {"name": "passt"},
            "ports": [{"port": 22}]}));
        assert_eq!(port_specs(&tcp_only), ("22".into(), "none".into()));
    }
}
