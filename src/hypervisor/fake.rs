//! An in-memory `Hypervisor` for the domain manager's unit tests: one
//! domain that starts, pauses, powers off and crashes as libvirt's QEMU
//! driver would, sending the lifecycle events libvirt sends; plus scripted
//! failures, calls held until a test releases them, a guest agent, and a
//! connection that can be lost and regained. It needs no libvirt, so the
//! manager's decisions are tested in milliseconds.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, bounded};

use super::state::{
    AgentChannelReason, CloseReason, DefinedDetail, ResumedDetail, ShutdownDetail, StartedDetail,
    StoppedDetail, SuspendedDetail, UndefinedDetail,
};
use super::{
    Affect, AgentLifecycle, ConnectionId, DaemonVersions, DiskError, DomainState, DomainStatus,
    DriverKind, GuestInfoKind, HvResult, Hypervisor, HypervisorError, HypervisorErrorKind,
    HypervisorEvent, HypervisorInfo, LifecycleEvent, MigrationRequest, RebootMode, Screenshot,
    Stat, StateReason,
};
use crate::sink::Sink;

/// What the guest does when the ACPI power button is pressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcpiGuest {
    PowersOff,
    Ignores,
}

/// What the guest does when a device is unplugged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetachGuest {
    /// Lets it go at once (libvirt's device-removed event follows).
    Releases,
    /// Keeps it (until `release_device`).
    Keeps,
}

/// The one domain the fake knows.
#[derive(Debug, Clone)]
struct FakeDomain {
    name: String,
    xml: String,
    status: DomainStatus,
    persistent: bool,
}

struct FakeState {
    driver: DriverKind,
    domain: Option<FakeDomain>,
    acpi: AcpiGuest,
    detach: DetachGuest,
    /// The guest agent's end of its channel is open.
    agent: bool,
    connection: ConnectionId,
    connected: bool,
    /// Reconnect attempts that fail before one succeeds.
    reconnect_failures: u32,
    /// Scripted failures, by operation: the next calls fail with these.
    failures: HashMap<&'static str, VecDeque<HypervisorError>>,
    /// Calls held until their gate opens, by operation.
    holds: HashMap<&'static str, Receiver<()>>,
    /// Every call made, by operation.
    calls: Vec<&'static str>,
    /// Raw replies for agent commands, in order; `{"return":{}}` after.
    agent_replies: VecDeque<String>,
    /// What a dirty rate measurement finds, in MiB/s; `None` until one
    /// was started.
    dirty_rate: u64,
    dirty_rate_started: bool,
    /// What `job_stats` reports for the running job.
    job_stats: Vec<Stat>,
    /// The domain's checkpoints (name, XML), oldest first.
    checkpoints: Vec<(String, String)>,
    /// The XML of the backup job that runs, if one does.
    backup: Option<String>,
    /// libvirt's `virDomainJobType` of the last job that ended.
    completed_job_type: i64,
    /// The disks with an I/O error (`pause_on_disk_errors`).
    disk_errors: Vec<DiskError>,
}

pub struct FakeHypervisor {
    state: Mutex<FakeState>,
    events: Sink<HypervisorEvent>,
}

/// Keeps a held call waiting until `release` (or drop).
pub struct Gate(#[allow(dead_code)] Sender<()>);

impl Gate {
    pub fn release(self) {}
}

impl FakeHypervisor {
    pub fn new(driver: DriverKind, events: Sink<HypervisorEvent>) -> FakeHypervisor {
        FakeHypervisor {
            state: Mutex::new(FakeState {
                driver,
                domain: None,
                acpi: AcpiGuest::PowersOff,
                detach: DetachGuest::Releases,
                agent: false,
                connection: ConnectionId::FIRST,
                connected: true,
                reconnect_failures: 0,
                failures: HashMap::new(),
                holds: HashMap::new(),
                calls: Vec::new(),
                agent_replies: VecDeque::new(),
                dirty_rate: 0,
                dirty_rate_started: false,
                job_stats: Vec::new(),
                checkpoints: Vec::new(),
                backup: None,
                completed_job_type: 0,
                disk_errors: Vec::new(),
            }),
            events,
        }
    }

    fn state(&self) -> MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn send(&self, event: HypervisorEvent) {
        let _ = self.events.send(event);
    }

    fn lifecycle(&self, event: LifecycleEvent) {
        self.send(HypervisorEvent::Lifecycle(event));
    }

    // ---- scripting ----

    pub fn set_acpi(&self, acpi: AcpiGuest) {
        self.state().acpi = acpi;
    }

    pub fn set_detach(&self, detach: DetachGuest) {
        self.state().detach = detach;
    }

    /// The XML of the backup job that runs, if one does.
    pub fn running_backup(&self) -> Option<String> {
        self.state().backup.clone()
    }

    /// The names of the checkpoints libvirt would list.
    pub fn checkpoint_list(&self) -> Vec<String> {
        self.state()
            .checkpoints
            .iter()
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// The running backup ends as libvirt ends one: the completed job's
    /// type (`VIR_DOMAIN_JOB_COMPLETED` 3, `_FAILED` 4, `_CANCELLED` 5)
    /// is kept and JOB_COMPLETED is sent.
    pub fn end_backup(&self, job_type: i64) {
        {
            let mut state = self.state();
            state.backup = None;
            state.completed_job_type = job_type;
        }
        self.send(HypervisorEvent::JobCompleted {
            stats: vec![("operation".to_string(), 9.into())],
        });
    }

    /// The running guest meets I/O errors on these disks and QEMU pauses
    /// it, as a disk with `error_policy='stop'` does.
    pub fn pause_on_disk_errors(&self, errors: Vec<DiskError>) {
        {
            let mut state = self.state();
            if let Some(domain) = state.domain.as_mut() {
                domain.status = DomainStatus::new(DomainState::Paused, StateReason::IOError);
            }
            state.disk_errors = errors;
        }
        self.lifecycle(LifecycleEvent::Suspended(SuspendedDetail::IOError));
    }

    /// The guest finally lets a device go that it kept.
    pub fn release_device(&self, alias: &str) {
        if let Some(domain) = self.state().domain.as_mut() {
            domain.xml = without_device(&domain.xml, alias);
        }
        self.send(HypervisorEvent::DeviceRemoved {
            alias: alias.to_string(),
        });
    }

    /// The guest lets a kept device go, and libvirt's event about it is
    /// lost (a full queue, a reconnect).
    pub fn release_device_without_event(&self, alias: &str) {
        if let Some(domain) = self.state().domain.as_mut() {
            domain.xml = without_device(&domain.xml, alias);
        }
    }

    /// The domain's XML as the fake holds it (devices plugged in and out).
    pub fn xml(&self) -> String {
        self.state()
            .domain
            .as_ref()
            .map(|d| d.xml.clone())
            .unwrap_or_default()
    }

    /// The next call of `operation` fails with `kind`.
    pub fn fail_next(&self, operation: &'static str, kind: HypervisorErrorKind) {
        let error = HypervisorError::new(kind, operation, format!("scripted {kind:?} failure"));
        self.state()
            .failures
            .entry(operation)
            .or_default()
            .push_back(error);
    }

    /// The next call of `operation` waits until the returned gate is
    /// released.
    pub fn hold(&self, operation: &'static str) -> Gate {
        let (tx, rx) = bounded(0);
        self.state().holds.insert(operation, rx);
        Gate(tx)
    }

    /// How many times `operation` was called.
    pub fn calls(&self, operation: &str) -> usize {
        self.state()
            .calls
            .iter()
            .filter(|c| **c == operation)
            .count()
    }

    /// The next reconnect attempts that fail.
    pub fn fail_reconnects(&self, count: u32) {
        self.state().reconnect_failures = count;
    }

    /// What `job_stats` reports for the running job from now on.
    pub fn set_job_stats(&self, stats: Vec<Stat>) {
        self.state().job_stats = stats;
    }

    /// What the next dirty rate measurement finds.
    pub fn set_dirty_rate(&self, megabytes_per_second: u64) {
        self.state().dirty_rate = megabytes_per_second;
    }

    pub fn queue_agent_reply(&self, raw: &str) {
        self.state().agent_replies.push_back(raw.to_string());
    }

    /// The domain as it is, or `None`.
    pub fn status(&self) -> Option<DomainStatus> {
        self.state().domain.as_ref().map(|d| d.status)
    }

    pub fn is_defined(&self) -> bool {
        self.state().domain.as_ref().is_some_and(|d| d.persistent)
    }

    // ---- what happens to the domain without the launcher asking ----

    /// A domain that already runs (adopted by a launcher that starts).
    pub fn preexisting(&self, name: &str, status: DomainStatus, agent: bool) {
        let mut state = self.state();
        state.domain = Some(FakeDomain {
            name: name.to_string(),
            xml: format!("<domain type='test'><name>{name}</name></domain>"),
            status,
            persistent: true,
        });
        state.agent = agent;
    }

    /// The guest agent opens (or closes) its channel.
    pub fn agent_channel(&self, connected: bool) {
        self.state().agent = connected;
        self.send(HypervisorEvent::AgentLifecycle(AgentLifecycle {
            connected,
            reason: AgentChannelReason::Channel,
        }));
    }

    /// The guest agent connects while the launcher is not listening (the
    /// event is lost, as it is while libvirt is unreachable).
    pub fn agent_connects_unheard(&self) {
        self.state().agent = true;
    }

    /// The domain stops without the launcher asking: QEMU crashed, the
    /// guest powered off, someone destroyed it, it migrated away.
    pub fn stops(&self, detail: StoppedDetail) {
        self.stop(detail, true);
    }

    /// As `stops`, while libvirt is unreachable: no event reaches the
    /// launcher.
    pub fn stops_unheard(&self, detail: StoppedDetail) {
        self.stop(detail, false);
    }

    /// The guest rebooted by itself.
    pub fn guest_reboots(&self) {
        self.send(HypervisorEvent::Reboot);
    }

    /// A device appears in the running domain without the launcher asking
    /// (someone's `virsh attach-device`): its element joins the domain's
    /// XML and libvirt's device-added event names `alias`.
    pub fn device_appears(&self, alias: &str, element: &str) {
        if let Some(domain) = self.state().domain.as_mut() {
            domain.xml = match domain.xml.rfind("</devices>") {
                Some(at) => format!("{}{element}{}", &domain.xml[..at], &domain.xml[at..]),
                None => domain.xml.replace(
                    "</domain>",
                    &format!("<devices>{element}</devices></domain>"),
                ),
            };
        }
        self.send(HypervisorEvent::DeviceAdded {
            alias: alias.to_string(),
        });
    }

    /// The daemon goes away: the connection closes (libvirt's close
    /// callback) and calls fail until a reconnect.
    pub fn lose_connection(&self) {
        let connection = {
            let mut state = self.state();
            state.connected = false;
            state.connection
        };
        self.send(HypervisorEvent::ConnectionClosed {
            connection,
            reason: CloseReason::Eof,
        });
    }

    /// News of an old connection's close arriving late.
    pub fn stale_close(&self, connection: ConnectionId) {
        self.send(HypervisorEvent::ConnectionClosed {
            connection,
            reason: CloseReason::Eof,
        });
    }

    fn stop(&self, detail: StoppedDetail, heard: bool) {
        let stopped = {
            let mut state = self.state();
            state.agent = false;
            let Some(domain) = state.domain.as_mut() else {
                return;
            };
            let reason = LifecycleEvent::Stopped(detail)
                .status()
                .map(|s| s.reason)
                .unwrap_or(StateReason::Unknown);
            domain.status = DomainStatus::new(DomainState::Shutoff, reason);
            if !domain.persistent {
                state.domain = None;
            }
            true
        };
        if stopped && heard {
            self.lifecycle(LifecycleEvent::Stopped(detail));
        }
    }

    // ---- the calls' common part ----

    /// Records the call, waits if it is held, and fails it if scripted
    /// (or if the connection is down).
    fn enter(&self, operation: &'static str) -> HvResult<()> {
        let hold = {
            let mut state = self.state();
            state.calls.push(operation);
            state.holds.remove(operation)
        };
        if let Some(gate) = hold {
            // Released by a send, or by the gate's drop.
            let _ = gate.recv_timeout(Duration::from_secs(30));
        }
        let mut state = self.state();
        if let Some(error) = state
            .failures
            .get_mut(operation)
            .and_then(VecDeque::pop_front)
        {
            if error.kind == HypervisorErrorKind::ConnectionLost && state.connected {
                // A call found the connection dead: reported once, as a
                // backend must.
                state.connected = false;
                let connection = state.connection;
                drop(state);
                self.send(HypervisorEvent::ConnectionClosed {
                    connection,
                    reason: CloseReason::CallFailed,
                });
            }
            return Err(error);
        }
        if !state.connected {
            return Err(HypervisorError::not_connected(operation));
        }
        Ok(())
    }

    /// The domain called `name`, or NoDomain.
    fn with_domain<T>(
        &self,
        operation: &'static str,
        name: &str,
        f: impl FnOnce(&mut FakeDomain) -> HvResult<T>,
    ) -> HvResult<T> {
        self.enter(operation)?;
        let mut state = self.state();
        match state.domain.as_mut().filter(|d| d.name == name) {
            Some(domain) => f(domain),
            None => Err(HypervisorError::new(
                HypervisorErrorKind::NoDomain,
                operation,
                format!("Domain not found: no domain with matching name '{name}'"),
            )),
        }
    }
}

fn invalid(operation: &'static str, message: &str) -> HypervisorError {
    HypervisorError::new(
        HypervisorErrorKind::InvalidOperation,
        operation,
        format!("Requested operation is not valid: {message}"),
    )
}

/// `xml` with `state='…'` on the guest agent channel's target (added, with
/// the channel, when the definition has none).
fn with_agent_channel_state(xml: &str, state: &str) -> String {
    for quote in ['"', '\''] {
        let name = format!("name={quote}org.qemu.guest_agent.0{quote}");
        if xml.contains(&name) {
            return xml.replacen(&name, &format!("{name} state={quote}{state}{quote}"), 1);
        }
    }
    let channel = format!(
        "<channel type='unix'><target type='virtio' name='org.qemu.guest_agent.0' state='{state}'/></channel>"
    );
    match xml.rfind("</devices>") {
        Some(at) => format!("{}{channel}{}", &xml[..at], &xml[at..]),
        None => xml.replace(
            "</domain>",
            &format!("<devices>{channel}</devices></domain>"),
        ),
    }
}

/// The alias a device element names, if any.
fn alias_of(device: &str) -> Option<String> {
    let start = device.find("<alias name=")? + "<alias name=".len();
    let quote = device[start..].chars().next()?;
    let rest = &device[start + 1..];
    Some(rest[..rest.find(quote)?].to_string())
}

/// `xml` with `device` added at the end of `<devices>`.
fn with_device(xml: &str, device: &str) -> String {
    match xml.rfind("</devices>") {
        Some(at) => format!("{}{device}{}", &xml[..at], &xml[at..]),
        None => xml.replace(
            "</domain>",
            &format!("<devices>{device}</devices></domain>"),
        ),
    }
}

/// `xml` without the device element whose alias is `alias`.
fn without_device(xml: &str, alias: &str) -> String {
    let Some(at) = [
        format!("<alias name=\"{alias}\""),
        format!("<alias name='{alias}'"),
    ]
    .iter()
    .find_map(|needle| xml.find(needle.as_str())) else {
        return xml.to_string();
    };
    let kinds = ["disk", "interface", "hostdev", "memory"];
    let Some((start, kind)) = kinds
        .iter()
        .filter_map(|k| xml[..at].rfind(&format!("<{k} ")).map(|i| (i, *k)))
        .max_by_key(|(i, _)| *i)
    else {
        return xml.to_string();
    };
    let close = format!("</{kind}>");
    match xml[at..].find(&close) {
        Some(end) => format!("{}{}", &xml[..start], &xml[at + end + close.len()..]),
        None => xml.to_string(),
    }
}

fn domain_name_of(xml: &str) -> Option<String> {
    let start = xml.find("<name>")? + "<name>".len();
    let end = xml[start..].find("</name>")? + start;
    Some(xml[start..end].to_string())
}

impl Hypervisor for FakeHypervisor {
    fn info(&self) -> HypervisorInfo {
        HypervisorInfo {
            uri: "fake:///".into(),
            driver: self.state().driver,
            backend: "fake",
            library_version: None,
            daemon_version: "0.0.0".into(),
        }
    }

    fn domain_status(&self, name: &str) -> HvResult<Option<DomainStatus>> {
        self.enter("domain_status")?;
        Ok(self
            .state()
            .domain
            .as_ref()
            .filter(|d| d.name == name)
            .map(|d| d.status))
    }

    fn define(&self, xml: &str) -> HvResult<()> {
        self.enter("define")?;
        let name = domain_name_of(xml).ok_or_else(|| {
            HypervisorError::new(
                HypervisorErrorKind::InvalidDefinition,
                "define",
                "XML error: no <name>",
            )
        })?;
        let detail = {
            let mut state = self.state();
            match state.domain.as_mut() {
                Some(domain) => {
                    domain.xml = xml.to_string();
                    let detail = if domain.persistent {
                        DefinedDetail::Updated
                    } else {
                        DefinedDetail::Added
                    };
                    domain.persistent = true;
                    detail
                }
                None => {
                    state.domain = Some(FakeDomain {
                        name,
                        xml: xml.to_string(),
                        status: DomainStatus::new(DomainState::Shutoff, StateReason::Unknown),
                        persistent: true,
                    });
                    DefinedDetail::Added
                }
            }
        };
        self.lifecycle(LifecycleEvent::Defined(detail));
        Ok(())
    }

    fn undefine(&self, name: &str) -> HvResult<()> {
        self.with_domain("undefine", name, |d| {
            if !d.persistent {
                return Err(invalid("undefine", "cannot undefine transient domain"));
            }
            d.persistent = false;
            Ok(())
        })?;
        let mut state = self.state();
        if state
            .domain
            .as_ref()
            .is_some_and(|d| !d.status.state.is_active())
        {
            state.domain = None;
        }
        drop(state);
        self.lifecycle(LifecycleEvent::Undefined(UndefinedDetail::Removed));
        Ok(())
    }

    fn start(&self, name: &str, paused: bool) -> HvResult<()> {
        self.with_domain("start", name, |d| {
            if d.status.state.is_active() {
                return Err(invalid("start", "domain is already running"));
            }
            d.status = if paused {
                DomainStatus::new(DomainState::Paused, StateReason::User)
            } else {
                DomainStatus::new(DomainState::Running, StateReason::Booted)
            };
            Ok(())
        })?;
        self.lifecycle(LifecycleEvent::Started(StartedDetail::Booted));
        if paused {
            self.lifecycle(LifecycleEvent::Suspended(SuspendedDetail::Paused));
        }
        Ok(())
    }

    fn suspend(&self, name: &str) -> HvResult<()> {
        self.with_domain("suspend", name, |d| {
            if d.status.state != DomainState::Running {
                return Err(invalid("suspend", "domain is not running"));
            }
            d.status = DomainStatus::new(DomainState::Paused, StateReason::User);
            Ok(())
        })?;
        self.lifecycle(LifecycleEvent::Suspended(SuspendedDetail::Paused));
        Ok(())
    }

    fn resume(&self, name: &str) -> HvResult<()> {
        self.with_domain("resume", name, |d| {
            if d.status.state != DomainState::Paused {
                return Err(invalid("resume", "domain is not paused"));
            }
            d.status = DomainStatus::new(DomainState::Running, StateReason::Unpaused);
            Ok(())
        })?;
        self.lifecycle(LifecycleEvent::Resumed(ResumedDetail::Unpaused));
        Ok(())
    }

    fn shutdown_acpi(&self, name: &str) -> HvResult<()> {
        let acpi = self.state().acpi;
        self.with_domain("shutdown_acpi", name, |d| {
            if !d.status.state.is_active() {
                return Err(invalid("shutdown_acpi", "domain is not running"));
            }
            if d.status.state == DomainState::Paused {
                return Err(invalid("shutdown_acpi", "domain is paused"));
            }
            Ok(())
        })?;
        if acpi == AcpiGuest::PowersOff {
            self.lifecycle(LifecycleEvent::Shutdown(ShutdownDetail::Guest));
            self.stops(StoppedDetail::Shutdown);
        }
        Ok(())
    }

    fn reboot(&self, name: &str, mode: RebootMode) -> HvResult<()> {
        let agent = self.state().agent;
        self.with_domain("reboot", name, |d| {
            if !d.status.state.is_active() {
                return Err(invalid("reboot", "domain is not running"));
            }
            if mode == RebootMode::GuestAgent && !agent {
                return Err(HypervisorError::new(
                    HypervisorErrorKind::AgentUnavailable,
                    "reboot",
                    "Guest agent is not responding: QEMU guest agent is not connected",
                ));
            }
            Ok(())
        })?;
        self.send(HypervisorEvent::Reboot);
        Ok(())
    }

    fn reset(&self, name: &str) -> HvResult<()> {
        self.with_domain("reset", name, |d| {
            if !d.status.state.is_active() {
                return Err(invalid("reset", "domain is not running"));
            }
            Ok(())
        })
    }

    fn destroy(&self, name: &str, _graceful: bool) -> HvResult<()> {
        self.with_domain("destroy", name, |d| {
            if !d.status.state.is_active() {
                return Err(invalid("destroy", "domain is not running"));
            }
            Ok(())
        })?;
        self.stops(StoppedDetail::Destroyed);
        Ok(())
    }

    fn domain_xml(&self, name: &str) -> HvResult<(String, String)> {
        let agent = self.state().agent;
        self.with_domain("domain_xml", name, |d| {
            let xml = if d.status.state.is_active() {
                // Live XML: the agent channel's target says whether the
                // agent's end is open.
                let state = if agent { "connected" } else { "disconnected" };
                with_agent_channel_state(&d.xml, state)
            } else {
                d.xml.clone()
            };
            Ok((xml, "00000000-0000-4000-8000-000000000001".to_string()))
        })
    }

    fn stats(&self, name: &str) -> HvResult<Vec<Stat>> {
        self.with_domain("stats", name, |d| {
            let state = match d.status.state {
                DomainState::Running => 1,
                DomainState::Paused => 3,
                _ => 5,
            };
            Ok(vec![("state.state".to_string(), state.into())])
        })
    }

    fn attach_device(&self, name: &str, xml: &str, _affect: Affect) -> HvResult<()> {
        self.with_domain("attach_device", name, |d| {
            d.xml = with_device(&d.xml, xml);
            Ok(())
        })?;
        if let Some(alias) = alias_of(xml) {
            self.send(HypervisorEvent::DeviceAdded { alias });
        }
        Ok(())
    }

    fn detach_device(&self, name: &str, xml: &str, _affect: Affect) -> HvResult<()> {
        let releases = self.state().detach == DetachGuest::Releases;
        self.with_domain("detach_device", name, |_| Ok(()))?;
        if releases && let Some(alias) = alias_of(xml) {
            self.release_device(&alias);
        }
        Ok(())
    }

    fn update_device(&self, name: &str, _xml: &str, _affect: Affect) -> HvResult<()> {
        self.with_domain("update_device", name, |_| Ok(()))
    }

    fn set_vcpus(&self, name: &str, _count: u32, _affect: Affect) -> HvResult<()> {
        self.with_domain("set_vcpus", name, |_| Ok(()))
    }

    fn agent_command(&self, name: &str, _command: &str, _timeout: Duration) -> HvResult<String> {
        let agent = self.state().agent;
        self.with_domain("agent_command", name, |d| {
            if !d.status.state.is_active() {
                return Err(invalid("agent_command", "domain is not running"));
            }
            if !agent {
                return Err(HypervisorError::new(
                    HypervisorErrorKind::AgentUnavailable,
                    "agent_command",
                    "Guest agent is not responding: QEMU guest agent is not connected",
                ));
            }
            Ok(())
        })?;
        Ok(self
            .state()
            .agent_replies
            .pop_front()
            .unwrap_or_else(|| r#"{"return":{}}"#.to_string()))
    }

    fn set_agent_timeout(&self, name: &str, _timeout: Duration) -> HvResult<()> {
        self.with_domain("set_agent_timeout", name, |_| Ok(()))
    }

    fn guest_info(&self, name: &str, _kinds: &[GuestInfoKind]) -> HvResult<Vec<Stat>> {
        self.with_domain("guest_info", name, |_| Ok(Vec::new()))
    }

    fn sync_guest_time(&self, name: &str, _timeout: Duration) -> HvResult<()> {
        self.with_domain("sync_guest_time", name, |_| Ok(()))
    }

    fn migratable_xml(&self, name: &str) -> HvResult<String> {
        self.with_domain("migratable_xml", name, |d| Ok(d.xml.clone()))
    }

    fn migrate(&self, _name: &str, _request: &MigrationRequest) -> HvResult<()> {
        self.enter("migrate")?;
        Err(HypervisorError::new(
            HypervisorErrorKind::Unsupported,
            "migrate",
            "the fake hypervisor cannot migrate",
        ))
    }

    fn job_stats(&self, _name: &str, completed: bool) -> HvResult<Vec<Stat>> {
        self.enter("job_stats")?;
        let state = self.state();
        if completed {
            return Ok(vec![
                ("operation".to_string(), 9.into()),
                ("type".to_string(), state.completed_job_type.into()),
            ]);
        }
        Ok(state.job_stats.clone())
    }

    fn abort_job(&self, _name: &str) -> HvResult<()> {
        self.enter("abort_job")?;
        if self.state().backup.is_some() {
            self.end_backup(5);
        }
        Ok(())
    }

    fn migrate_start_post_copy(&self, _name: &str) -> HvResult<()> {
        self.enter("migrate_start_post_copy")
    }

    fn migrate_set_max_downtime(&self, _name: &str, _milliseconds: u64) -> HvResult<()> {
        self.enter("migrate_set_max_downtime")
    }

    fn hypervisor_version(&self) -> HvResult<u64> {
        self.enter("hypervisor_version")?;
        Ok(7_002_022)
    }

    fn versions_at(&self, _uri: &str) -> HvResult<DaemonVersions> {
        self.enter("versions_at")?;
        Ok(DaemonVersions {
            libvirt: "9.0.0".into(),
            hypervisor: "QEMU 7.2.22".into(),
        })
    }

    fn start_dirty_rate_calc(&self, name: &str, _seconds: u32) -> HvResult<()> {
        self.with_domain("start_dirty_rate_calc", name, |d| {
            if d.status.state != DomainState::Running {
                return Err(invalid("start_dirty_rate_calc", "domain is not running"));
            }
            Ok(())
        })?;
        self.state().dirty_rate_started = true;
        Ok(())
    }

    fn disk_errors(&self, name: &str) -> HvResult<Vec<DiskError>> {
        self.with_domain("disk_errors", name, |_| Ok(()))?;
        Ok(self.state().disk_errors.clone())
    }

    fn dirty_rate_stats(&self, name: &str) -> HvResult<Vec<Stat>> {
        self.with_domain("dirty_rate_stats", name, |_| Ok(()))?;
        let state = self.state();
        // libvirt's calc_status: 0 unstarted, 2 measured.
        if !state.dirty_rate_started {
            return Ok(vec![("dirtyrate.calc_status".to_string(), 0.into())]);
        }
        Ok(vec![
            ("dirtyrate.calc_status".to_string(), 2.into()),
            (
                "dirtyrate.calc_start_time".to_string(),
                1_700_000_000i64.into(),
            ),
            ("dirtyrate.calc_period".to_string(), 1.into()),
            ("dirtyrate.calc_mode".to_string(), "page-sampling".into()),
            (
                "dirtyrate.megabytes_per_second".to_string(),
                state.dirty_rate.into(),
            ),
        ])
    }

    fn dump_memory(&self, name: &str, path: &Path) -> HvResult<()> {
        self.with_domain("dump_memory", name, |d| {
            if !d.status.state.is_active() {
                return Err(invalid("dump_memory", "domain is not running"));
            }
            Ok(())
        })?;
        // An ELF header's magic, as QEMU's dump starts.
        std::fs::write(path, b"\x7fELF").map_err(|e| {
            HypervisorError::new(
                HypervisorErrorKind::Other,
                "dump_memory",
                format!("cannot write {}: {e}", path.display()),
            )
        })
    }

    fn screenshot(&self, name: &str, _screen: u32) -> HvResult<Screenshot> {
        self.with_domain("screenshot", name, |d| {
            if !d.status.state.is_active() {
                return Err(invalid("screenshot", "domain is not running"));
            }
            Ok(())
        })?;
        // A 2x1 image: one red pixel, one blue.
        Ok(Screenshot {
            mime: "image/x-portable-pixmap".into(),
            data: b"P6\n2 1\n255\n\xff\x00\x00\x00\x00\xff".to_vec(),
        })
    }

    fn backup_begin(
        &self,
        name: &str,
        backup_xml: &str,
        checkpoint_xml: Option<&str>,
    ) -> HvResult<()> {
        let op = "backup_begin";
        self.with_domain(op, name, |d| {
            if !d.status.state.is_active() {
                return Err(invalid(op, "domain is not running"));
            }
            Ok(())
        })?;
        let mut state = self.state();
        if state.backup.is_some() {
            return Err(invalid(op, "domain has an active job"));
        }
        if let Some(since) = element_text(backup_xml, "incremental")
            && !state.checkpoints.iter().any(|(n, _)| *n == since)
        {
            return Err(HypervisorError::new(
                HypervisorErrorKind::InvalidCheckpoint,
                op,
                format!("no domain checkpoint with matching name '{since}'"),
            ));
        }
        if let Some(xml) = checkpoint_xml {
            let name = element_text(xml, "name").unwrap_or_default();
            state.checkpoints.push((name, xml.to_string()));
        }
        state.backup = Some(backup_xml.to_string());
        Ok(())
    }

    fn checkpoint_create(&self, name: &str, xml: &str, redefine: bool) -> HvResult<()> {
        let op = "checkpoint_create";
        self.with_domain(op, name, |_| Ok(()))?;
        let checkpoint = element_text(xml, "name").unwrap_or_default();
        let mut state = self.state();
        // The fake's images carry a bitmap for every checkpoint created
        // through it and never deleted; a redefined one must be one of them.
        if redefine && !xml.contains("bitmap") {
            return Err(HypervisorError::new(
                HypervisorErrorKind::InvalidCheckpoint,
                op,
                format!("missing or broken bitmap '{checkpoint}'"),
            ));
        }
        state.checkpoints.retain(|(n, _)| *n != checkpoint);
        state.checkpoints.push((checkpoint, xml.to_string()));
        Ok(())
    }

    fn checkpoint_names(&self, name: &str) -> HvResult<Vec<String>> {
        self.with_domain("checkpoint_names", name, |_| Ok(()))?;
        Ok(self.checkpoint_list())
    }

    fn checkpoint_xml(&self, name: &str, checkpoint: &str) -> HvResult<String> {
        let op = "checkpoint_xml";
        self.with_domain(op, name, |_| Ok(()))?;
        self.state()
            .checkpoints
            .iter()
            .find(|(n, _)| n == checkpoint)
            .map(|(_, xml)| xml.clone())
            .ok_or_else(|| no_checkpoint(op, checkpoint))
    }

    fn checkpoint_delete(
        &self,
        name: &str,
        checkpoint: &str,
        _metadata_only: bool,
    ) -> HvResult<()> {
        let op = "checkpoint_delete";
        self.with_domain(op, name, |_| Ok(()))?;
        let mut state = self.state();
        let before = state.checkpoints.len();
        state.checkpoints.retain(|(n, _)| n != checkpoint);
        if state.checkpoints.len() == before {
            return Err(no_checkpoint(op, checkpoint));
        }
        Ok(())
    }

    fn reconnect(&self) -> HvResult<ConnectionId> {
        {
            let mut state = self.state();
            state.calls.push("reconnect");
            if state.reconnect_failures > 0 {
                state.reconnect_failures -= 1;
                return Err(HypervisorError::new(
                    HypervisorErrorKind::ConnectionLost,
                    "virConnectOpen",
                    "Failed to connect socket: Connection refused",
                ));
            }
            state.connection = state.connection.next();
            state.connected = true;
        }
        Ok(self.state().connection)
    }
}

fn no_checkpoint(op: &'static str, checkpoint: &str) -> HypervisorError {
    HypervisorError::new(
        HypervisorErrorKind::InvalidCheckpoint,
        op,
        format!("no domain checkpoint with matching name '{checkpoint}'"),
    )
}

/// The text of the first `<tag>` element of `xml` (enough for the backup
/// and checkpoint XML the manager writes).
fn element_text(xml: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{tag}>"))? + start;
    Some(xml[start..end].to_string())
}
