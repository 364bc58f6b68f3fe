//! Guest-agent commands and the agent cache: queries are answered from
//! what the poller last reported; commands that must reach the agent run
//! as jobs with their own timeouts. With no agent connected, every guest
//! command is refused at once (Unavailable) instead of waiting.

use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use serde::Serialize;
use serde_json::Value;

use super::errors::hypervisor_error;
use super::jobs::{JobOutput, JobResult, Observation, Operation};
use super::reply::{Executed, Frozen, JobValue};
use super::timers::Timer;
use super::{DomainManager, Phase};
use crate::agent::cache::GuestAgentCache;
use crate::agent::model::FreezeStatus;
use crate::agent::poller::AGENT_TIMEOUT;
use crate::agent::{AgentData, AgentUpdate, PollerControl};
use crate::command::{GuestCommand, GuestExecArgs, ReplyTo};
use crate::events::EventKind;
use crate::hypervisor::{
    AgentLifecycle, DomainState, Hypervisor, HypervisorError, HypervisorErrorKind,
};
use crate::protocol::{CommandError, ErrorClass, Return};
use crate::replies;
use crate::replies::GuestReport;

/// The guest agent as the manager knows it.
pub(super) struct AgentState {
    /// The agent's channel is connected (AGENT_CONNECTED since the domain
    /// started).
    connected: bool,
    /// What the agent last reported.
    cache: GuestAgentCache,
    /// The agent poller, and whether it was last told to poll.
    poller: Option<Sender<PollerControl>>,
    polling: bool,
}

impl AgentState {
    pub(super) fn new(poller: Option<Sender<PollerControl>>) -> AgentState {
        AgentState {
            connected: false,
            cache: GuestAgentCache::default(),
            poller,
            polling: false,
        }
    }

    /// The agent's channel is connected.
    pub(super) fn is_connected(&self) -> bool {
        self.connected
    }

    /// What the agent last reported.
    pub(super) fn cache(&self) -> &GuestAgentCache {
        &self.cache
    }

    /// The guest's filesystems were frozen when the agent last said.
    pub(super) fn filesystems_frozen(&self) -> bool {
        self.cache.fsfreeze_status == Some(FreezeStatus::Frozen)
    }

    /// libvirt (an event, or the live XML) says the channel connected or
    /// disconnected.
    fn channel_changed(&mut self, connected: bool) {
        self.connected = connected;
    }

    /// The domain stopped: its agent went with it. What it last reported
    /// stays (KubeVirt's launcher keeps it in the stopped domain's status).
    pub(super) fn domain_stopped(&mut self) {
        self.connected = false;
    }

    /// A new boot of the domain: what an earlier boot's agent reported is
    /// no longer the guest's.
    pub(super) fn domain_started(&mut self) {
        self.cache = GuestAgentCache::default();
    }

    /// What KubeVirt shows of the agent's last report in the domain's
    /// status (`query-domain`'s `guest`), whether or not the agent is
    /// connected now.
    pub(super) fn last_report(&self) -> GuestReport {
        GuestReport {
            fs_freeze_status: self.cache.fsfreeze_status.map(FreezeStatus::as_str),
            interfaces: self.cache.system.interfaces.clone(),
            os: self.cache.system.os.clone(),
        }
    }

    /// Takes in what a poll read; true when what KubeVirt reports (OS,
    /// interfaces, freeze status) changed.
    fn take_report(&mut self, data: AgentData) -> bool {
        self.cache.apply(data)
    }

    /// Polls only while the agent is connected and the domain runs; the
    /// poller is told only when that changes.
    fn steer_poller(&mut self, domain_running: bool) {
        let want = self.connected && domain_running;
        if want != self.polling {
            self.polling = want;
            if let Some(poller) = &self.poller {
                let _ = poller.send(if want {
                    PollerControl::Start
                } else {
                    PollerControl::Stop
                });
            }
        }
    }
}

/// What became of a request to set the guest's clock.
pub(super) enum TimeSync {
    Started,
    AlreadyRunning,
    NoAgent,
}

/// How many times, a second apart, the guest clock is set after unpause.
const TIME_SYNC_ATTEMPTS: u32 = 10;

/// The wire error for a failed agent call. libvirt reports both "no agent"
/// and "the agent did not answer in time" as AGENT_UNRESPONSIVE; the
/// manager knows which from the agent lifecycle events.
fn agent_error(
    e: &HypervisorError,
    command: &str,
    timeout: Duration,
    connected: bool,
) -> CommandError {
    match e.kind {
        HypervisorErrorKind::AgentUnavailable
            if connected && !e.message.contains("not connected") =>
        {
            CommandError::new(
                ErrorClass::Timeout,
                format!(
                    "{command}: the guest agent did not answer within {} s",
                    timeout.as_secs()
                ),
            )
            .with_cause(e.to_string())
        }
        HypervisorErrorKind::AgentUnavailable => CommandError::new(
            ErrorClass::Unavailable,
            format!("{command}: the guest agent is not connected"),
        )
        .with_cause(e.to_string()),
        HypervisorErrorKind::Other if e.message.contains("agent is in frozen state") => {
            CommandError::invalid_state(format!(
                "{command}: the guest's filesystems are frozen and the agent refuses most commands until unfreeze"
            ))
            .with_cause(e.to_string())
        }
        HypervisorErrorKind::Other
            if e.message.contains("unable to execute QEMU agent command") =>
        {
            CommandError::new(
                ErrorClass::InvalidArgument,
                format!("{command}: the guest agent refused: {}", e.message),
            )
            .with_cause(e.to_string())
        }
        _ => hypervisor_error(e),
    }
}

/// A request line to the guest agent.
#[derive(Debug, Serialize)]
struct AgentRequest<'a, A> {
    #[serde(skip_serializing_if = "Option::is_none")]
    arguments: Option<A>,
    execute: &'a str,
}

/// The request line of the agent's `execute`, with `arguments`.
fn agent_request_with(execute: &str, arguments: Option<impl Serialize>) -> String {
    serde_json::to_string(&AgentRequest { arguments, execute }).unwrap_or_default()
}

/// The request line of the agent's `execute`, without arguments.
pub(super) fn agent_request(execute: &str) -> String {
    agent_request_with(execute, None::<()>)
}

#[derive(Debug, Serialize)]
struct ExecArguments<'a> {
    arg: &'a [String],
    #[serde(rename = "capture-output")]
    capture_output: bool,
    path: &'a str,
}

#[derive(Debug, Serialize)]
struct PidArgument {
    pid: i64,
}

fn agent_call(
    hv: &dyn Hypervisor,
    name: &str,
    command: &str,
    request: &str,
    timeout: Duration,
) -> Result<Value, CommandError> {
    let raw = hv
        .agent_command(name, request, timeout)
        .map_err(|e| agent_error(&e, command, timeout, true))?;
    let mut reply: Value = serde_json::from_str(&raw).map_err(|e| {
        CommandError::internal(format!("{command}: the agent's reply is not JSON: {e}"))
    })?;
    Ok(reply
        .get_mut("return")
        .map(Value::take)
        .unwrap_or(Value::Null))
}

impl DomainManager {
    /// Guest-agent commands: refused at once while no agent is connected;
    /// queries answered from the cache, the rest run as jobs.
    pub(super) fn run_guest_command(&mut self, command: GuestCommand, reply: ReplyTo) {
        if !self.agent.is_connected() {
            return reply.send(Err(CommandError::new(
                ErrorClass::Unavailable,
                format!(
                    "{}: the guest agent is not connected (no AGENT_CONNECTED since the domain started, or it disconnected)",
                    command.name()
                ),
            )));
        }
        let cache = self.agent.cache();
        match command {
            GuestCommand::QueryGuestInfo => reply.send(Ok(Return::GuestInfo(cache.guest_info()))),
            GuestCommand::QueryUsers => reply.send(Ok(replies::Users {
                users: cache.users.clone(),
            }
            .into())),
            GuestCommand::QueryFilesystems => reply.send(Ok(replies::Filesystems {
                filesystems: cache.filesystems.clone(),
            }
            .into())),
            GuestCommand::QueryInterfaces => reply.send(Ok(replies::Interfaces {
                interfaces: cache.system.interfaces.clone(),
                network: crate::network::report(&self.network),
            }
            .into())),
            GuestCommand::QueryOsInfo => reply.send(Ok(replies::OsInfo {
                hostname: cache.system.hostname.clone(),
                os: cache.system.os.clone(),
                timezone: cache.timezone_text(),
            }
            .into())),
            GuestCommand::Ping { timeout_seconds } => self.start_guest_ping(timeout_seconds, reply),
            GuestCommand::Exec(args) => self.start_guest_exec(args, reply),
            GuestCommand::Freeze {
                unfreeze_timeout_seconds,
            } => self.start_freeze(unfreeze_timeout_seconds, reply),
            GuestCommand::Unfreeze => self.start_unfreeze(Some(reply)),
        }
    }

    fn start_guest_ping(&mut self, timeout_seconds: u64, reply: ReplyTo) {
        let name = self.config.domain_name.clone();
        let timeout = Duration::from_secs(timeout_seconds);
        self.jobs.spawn(
            Operation::GuestPing,
            Some(reply),
            timeout.saturating_add(Duration::from_secs(5)),
            move |hv| {
                JobOutput::reply(
                    agent_call(
                        hv,
                        &name,
                        "guest-ping",
                        &agent_request("guest-ping"),
                        timeout,
                    )
                    .map(|_| JobValue::Empty),
                )
            },
        );
    }

    fn start_guest_exec(&mut self, args: GuestExecArgs, reply: ReplyTo) {
        let name = self.config.domain_name.clone();
        let timeout = Duration::from_secs(args.timeout_seconds);
        self.jobs.spawn(
            Operation::GuestExec,
            Some(reply),
            timeout.saturating_add(AGENT_TIMEOUT * 2),
            move |hv| {
                JobOutput::reply(exec_in_guest(hv, &name, &args, timeout).map(JobValue::Executed))
            },
        );
    }

    fn start_freeze(&mut self, unfreeze_timeout_seconds: u64, reply: ReplyTo) {
        if matches!(self.phase.now(), Phase::ShuttingDown | Phase::Exiting) {
            return reply.send(Err(CommandError::invalid_state(
                "freeze: the domain is being stopped; a frozen guest could not shut down cleanly",
            )));
        }
        if self.migration_running_as_source() {
            return reply.send(Err(CommandError::invalid_state(
                "freeze: a migration is running",
            )));
        }
        if let Err(busy) = self.jobs.ensure_idle("freeze") {
            return reply.send(Err(busy));
        }
        let name = self.config.domain_name.clone();
        let timeout = self.timing.command;
        self.jobs
            .spawn(Operation::Freeze, Some(reply), timeout, move |hv| {
                let status = |hv: &dyn Hypervisor| {
                    agent_call(
                        hv,
                        &name,
                        "freeze",
                        &agent_request("guest-fsfreeze-status"),
                        AGENT_TIMEOUT,
                    )
                };
                // As KubeVirt: freezing frozen filesystems is a no-op.
                let already = match status(hv) {
                    Ok(value) => FreezeStatus::from_agent(&value) == Ok(FreezeStatus::Frozen),
                    Err(e) => return JobOutput::reply(Err(e)),
                };
                let frozen = if already {
                    0
                } else {
                    match agent_call(
                        hv,
                        &name,
                        "freeze",
                        &agent_request("guest-fsfreeze-freeze"),
                        timeout,
                    ) {
                        Ok(count) => count.as_u64().unwrap_or(0),
                        Err(e) => return JobOutput::reply(Err(e)),
                    }
                };
                JobOutput {
                    result: Ok(JobValue::Frozen(Frozen {
                        already_frozen: already,
                        frozen_filesystems: frozen,
                        unfreeze_timeout_seconds,
                    })),
                    observed: Observation::FsFreeze(FreezeStatus::Frozen),
                }
            });
    }

    /// Thaws, for `unfreeze` (with a reply) or the safety timer (without).
    pub(super) fn start_unfreeze(&mut self, reply: Option<ReplyTo>) {
        self.timers.cancel(Timer::AutoThaw);
        let operation = match reply {
            Some(_) => Operation::Unfreeze,
            None => Operation::AutoThaw,
        };
        let name = self.config.domain_name.clone();
        let timeout = self.timing.command;
        self.jobs.spawn(operation, reply, timeout, move |hv| {
            match agent_call(
                hv,
                &name,
                "unfreeze",
                &agent_request("guest-fsfreeze-thaw"),
                timeout,
            ) {
                Ok(count) => JobOutput {
                    result: Ok(JobValue::Thawed {
                        thawed_filesystems: count.as_u64().unwrap_or(0),
                    }),
                    observed: Observation::FsFreeze(FreezeStatus::Thawed),
                },
                Err(e) => JobOutput::reply(Err(e)),
            }
        });
    }

    pub(super) fn on_freeze_done(&mut self, result: &JobResult) {
        if let Ok(JobValue::Frozen(frozen)) = result {
            // The latest freeze decides: 0 means no automatic thaw, even
            // if an earlier freeze armed one.
            let seconds = frozen.unfreeze_timeout_seconds;
            if seconds > 0 {
                self.timers
                    .arm_in(Timer::AutoThaw, Duration::from_secs(seconds));
            } else {
                self.timers.cancel(Timer::AutoThaw);
            }
        }
    }

    pub(super) fn on_auto_thaw(&mut self) {
        log::warn!("manager: the freeze timeout ran out; thawing the guest's filesystems");
        self.start_unfreeze(None);
    }

    /// After unpause the guest's clock is behind by the pause; set it from
    /// the host through the agent, retrying while the agent catches up.
    pub(super) fn start_guest_time_sync(&mut self) -> TimeSync {
        if !self.agent.is_connected() {
            return TimeSync::NoAgent;
        }
        if self.jobs.is_running(Operation::GuestTimeSync) {
            return TimeSync::AlreadyRunning;
        }
        let name = self.config.domain_name.clone();
        self.jobs.spawn(
            Operation::GuestTimeSync,
            None,
            Duration::from_secs(u64::from(TIME_SYNC_ATTEMPTS) * 7),
            move |hv| {
                let mut last = None;
                for attempt in 0..TIME_SYNC_ATTEMPTS {
                    match hv.sync_guest_time(&name, AGENT_TIMEOUT) {
                        Ok(()) => {
                            log::info!("manager: guest clock set from the host after unpause");
                            return JobOutput::reply(Ok(JobValue::Empty));
                        }
                        Err(e)
                            if matches!(
                                e.kind,
                                HypervisorErrorKind::Unsupported | HypervisorErrorKind::NoDomain
                            ) =>
                        {
                            return JobOutput::reply(Err(hypervisor_error(&e)));
                        }
                        Err(e) => last = Some(e),
                    }
                    if attempt + 1 < TIME_SYNC_ATTEMPTS {
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
                let e = last
                    .map(|e| hypervisor_error(&e))
                    .unwrap_or_else(|| CommandError::internal("no attempt"));
                JobOutput::reply(Err(e))
            },
        );
        TimeSync::Started
    }

    /// The agent's channel connected or disconnected.
    pub(super) fn on_agent_lifecycle(&mut self, agent: AgentLifecycle) {
        self.agent.channel_changed(agent.connected);
        self.update_poller();
        let kind = if agent.connected {
            EventKind::AgentConnected
        } else {
            EventKind::AgentDisconnected
        };
        self.publish(
            kind,
            AgentChanged {
                domain: &self.config.domain_name,
                reason: agent.reason.describe(),
            },
        );
    }

    /// Applies a poll result; tells subscribers when what KubeVirt reports
    /// (OS, interfaces, freeze status) changed.
    pub(super) fn handle_agent_update(&mut self, update: AgentUpdate) {
        match update.result {
            Ok(data) => self.apply_agent_data(data),
            Err(e) => log::debug!("manager: agent poll {:?} failed: {e}", update.kind),
        }
    }

    pub(super) fn apply_agent_data(&mut self, data: AgentData) {
        if self.agent.take_report(data) {
            let cache = self.agent.cache();
            self.publish(
                EventKind::GuestInfoChanged,
                GuestInfoChanged {
                    domain: &self.config.domain_name,
                    fs_freeze_status: cache.fsfreeze_status.map(FreezeStatus::as_str),
                    interfaces: &cache.system.interfaces,
                    os: &cache.system.os,
                },
            );
        }
    }

    /// Polls only while the agent is connected and the domain runs.
    pub(super) fn update_poller(&mut self) {
        let domain_running = self.domain.status.state == DomainState::Running;
        self.agent.steer_poller(domain_running);
    }
}

/// AGENT_CONNECTED's and AGENT_DISCONNECTED's data.
#[derive(Debug, Serialize)]
struct AgentChanged<'a> {
    domain: &'a str,
    reason: &'static str,
}

/// GUEST_INFO_CHANGED's data: what KubeVirt reports of the guest.
#[derive(Debug, Serialize)]
struct GuestInfoChanged<'a> {
    domain: &'a str,
    #[serde(rename = "fsFreezeStatus")]
    fs_freeze_status: Option<&'static str>,
    #[serde(serialize_with = "crate::replies::sorted")]
    interfaces: &'a [crate::agent::model::GuestInterface],
    #[serde(serialize_with = "crate::replies::sorted")]
    os: &'a Option<crate::agent::model::GuestOsInfo>,
}

/// `guest-exec` with captured output, then `guest-exec-status` until the
/// process exits or `timeout` passes. The agent protocol offers no way to
/// wait, so the worker asks again with a growing pause.
fn exec_in_guest(
    hv: &dyn Hypervisor,
    name: &str,
    args: &GuestExecArgs,
    timeout: Duration,
) -> Result<Executed, CommandError> {
    let started = Instant::now();
    let request = agent_request_with(
        "guest-exec",
        Some(ExecArguments {
            arg: &args.args,
            capture_output: true,
            path: &args.command,
        }),
    );
    let ret = agent_call(hv, name, "guest-exec", &request, AGENT_TIMEOUT)?;
    let pid = ret["pid"].as_i64().ok_or_else(|| {
        CommandError::internal(format!("guest-exec: no pid in the agent's reply {ret}"))
    })?;
    let deadline = crate::limits::later(started, timeout);
    let mut pause = Duration::from_millis(20);
    loop {
        let status = agent_call(
            hv,
            name,
            "guest-exec",
            &agent_request_with("guest-exec-status", Some(PidArgument { pid })),
            AGENT_TIMEOUT,
        )?;
        if status["exited"].as_bool() == Some(true) {
            let text = |key: &str| -> Result<String, CommandError> {
                match status[key].as_str() {
                    Some(b64) => crate::encoding::base64_decode(b64)
                        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
                        .map_err(|e| CommandError::internal(format!("guest-exec: bad {key}: {e}"))),
                    None => Ok(String::new()),
                }
            };
            return Ok(Executed {
                elapsed_seconds: started.elapsed().as_secs_f64(),
                exit_code: status["exitcode"].as_i64(),
                pid,
                signal: status["signal"].as_i64(),
                stderr: text("err-data")?,
                stderr_truncated: status["err-truncated"].as_bool().unwrap_or(false),
                stdout: text("out-data")?,
                stdout_truncated: status["out-truncated"].as_bool().unwrap_or(false),
            });
        }
        if Instant::now() >= deadline {
            return Err(CommandError::new(
                ErrorClass::Timeout,
                format!(
                    "guest-exec: {} (guest pid {pid}) still running after {} s; it keeps running in the guest",
                    args.command,
                    timeout.as_secs()
                ),
            ));
        }
        std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}
