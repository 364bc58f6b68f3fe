//! The guest-agent poller thread.
//!
//! It keeps the manager's picture of the guest fresh, as KubeVirt's agent
//! poller does: each kind of data on its own interval, polled once at
//! once when the agent connects, then after 10 s, doubling up to the
//! interval (fresh IPs soon after boot without permanent fast polling).
//! It runs only while the manager says the agent is there and the domain
//! runs. Every call goes through libvirt with a timeout, and on this
//! thread, so a hung agent never delays the manager. The calls that take
//! no timeout of their own (`virDomainGetGuestInfo`) wait as long as the
//! domain's agent response timeout, which libvirt keeps per domain across
//! agent reconnects and restarts: the poller sets it once each time it
//! starts polling, not before every call (each setting is an extra round
//! trip and a rewrite of the domain's status file in the daemon).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, select};

use super::model;
use super::{AgentData, AgentUpdate, PollKind, PollerControl};
use crate::config::AgentIntervals;
use crate::hypervisor::{GuestInfoKind, Hypervisor};
use crate::sink::Sink;
use crate::threads::{self, FatalSender};

/// The first repeat comes this soon; then the period doubles.
const INITIAL_INTERVAL: Duration = Duration::from_secs(10);
/// How long libvirt waits for the agent on each call.
pub const AGENT_TIMEOUT: Duration = Duration::from_secs(5);
/// At most one warning per kind this often when the agent keeps failing.
const WARN_EVERY: Duration = Duration::from_secs(60);

struct Entry {
    kind: PollKind,
    max: Duration,
    period: Duration,
    due: Instant,
    enabled: bool,
}

/// When each kind is next due. Pure, so it can be tested without a clock.
pub struct Schedule {
    entries: Vec<Entry>,
}

impl Schedule {
    pub fn new(intervals: &AgentIntervals, now: Instant) -> Schedule {
        let entry = |kind, max: Duration| Entry {
            kind,
            max,
            period: INITIAL_INTERVAL.min(max),
            due: now,
            enabled: true,
        };
        Schedule {
            entries: vec![
                entry(PollKind::Version, intervals.version),
                entry(PollKind::Filesystems, intervals.file),
                entry(PollKind::FsFreeze, intervals.fsfreeze),
                entry(PollKind::System, intervals.sys),
                entry(PollKind::Users, intervals.user),
                entry(PollKind::Load, intervals.sys),
            ],
        }
    }

    /// Everything due now, and the backoff starts over (agent connected).
    pub fn restart(&mut self, now: Instant) {
        for e in &mut self.entries {
            e.due = now;
            e.period = INITIAL_INTERVAL.min(e.max);
        }
    }

    /// Stops polling a kind the agent does not support.
    pub fn disable(&mut self, kind: PollKind) {
        for e in self.entries.iter_mut().filter(|e| e.kind == kind) {
            e.enabled = false;
        }
    }

    pub fn next_due(&self) -> Option<Instant> {
        self.entries
            .iter()
            .filter(|e| e.enabled)
            .map(|e| e.due)
            .min()
    }

    /// The kinds due at `now`, each rescheduled with its period doubled.
    pub fn take_due(&mut self, now: Instant) -> Vec<PollKind> {
        let mut due = Vec::new();
        for e in self
            .entries
            .iter_mut()
            .filter(|e| e.enabled && e.due <= now)
        {
            due.push(e.kind);
            e.due = crate::limits::later(now, e.period);
            e.period = e.period.saturating_mul(2).min(e.max);
        }
        due
    }
}

/// Starts the poller for `domain`; control it through the returned sender.
pub fn spawn(
    hypervisor: Arc<dyn Hypervisor>,
    domain: String,
    intervals: AgentIntervals,
    updates: Sink<AgentUpdate>,
    fatal: &FatalSender,
) -> std::io::Result<Sender<PollerControl>> {
    let (control_tx, control_rx) = crossbeam_channel::unbounded();
    threads::spawn_named("agent-poller", fatal, move || {
        Poller {
            hypervisor,
            domain,
            schedule: Schedule::new(&intervals, Instant::now()),
            updates,
            last_warning: Vec::new(),
            timeout_set: false,
        }
        .run(control_rx)
    })?;
    Ok(control_tx)
}

struct Poller {
    hypervisor: Arc<dyn Hypervisor>,
    domain: String,
    schedule: Schedule,
    updates: Sink<AgentUpdate>,
    /// When each kind last logged a warning, and how many it held back.
    last_warning: Vec<(PollKind, Instant, u32)>,
    /// Whether the domain's agent response timeout was set since polling
    /// last started (until it is, a guest-info poll sets it first).
    timeout_set: bool,
}

impl Poller {
    fn run(mut self, control: Receiver<PollerControl>) {
        let mut active = false;
        loop {
            let wait = match (active, self.schedule.next_due()) {
                (true, Some(due)) => due.saturating_duration_since(Instant::now()),
                _ => Duration::from_secs(3600),
            };
            select! {
                recv(control) -> msg => match msg {
                    Ok(PollerControl::Start) => {
                        if !active {
                            log::debug!("agent: poller started");
                            self.schedule.restart(Instant::now());
                            self.timeout_set = false;
                        }
                        active = true;
                    }
                    Ok(PollerControl::Stop) => {
                        if active {
                            log::debug!("agent: poller stopped");
                        }
                        active = false;
                    }
                    Err(_) => return,
                },
                default(wait) => {}
            }
            if !active {
                continue;
            }
            for kind in self.schedule.take_due(Instant::now()) {
                // A Stop that arrived meanwhile ends the round.
                if let Ok(PollerControl::Stop) = control.try_recv() {
                    active = false;
                    break;
                }
                let result = self.poll(kind);
                if let Err(e) = &result {
                    self.warn(kind, e);
                    if is_unsupported(e) {
                        log::info!(
                            "agent: the guest agent does not support {kind:?}; no longer polling it"
                        );
                        self.schedule.disable(kind);
                    }
                }
                if self.updates.send(AgentUpdate { kind, result }).is_err() {
                    return;
                }
            }
        }
    }

    fn poll(&mut self, kind: PollKind) -> Result<AgentData, String> {
        let hv = self.hypervisor.as_ref();
        let raw = |command: &str| {
            hv.agent_command(&self.domain, command, AGENT_TIMEOUT)
                .map_err(|e| e.to_string())
        };
        let timeout_set = &mut self.timeout_set;
        let domain = self.domain.as_str();
        let mut info = |kinds: &[GuestInfoKind]| {
            if !*timeout_set {
                hv.set_agent_timeout(domain, AGENT_TIMEOUT)
                    .map_err(|e| e.to_string())?;
                *timeout_set = true;
            }
            hv.guest_info(domain, kinds).map_err(|e| e.to_string())
        };
        match kind {
            PollKind::Version => model::parse_agent_version(&raw(r#"{"execute":"guest-info"}"#)?)
                .map(AgentData::Version),
            PollKind::Filesystems => {
                model::parse_filesystems(&raw(r#"{"execute":"guest-get-fsinfo"}"#)?)
                    .map(AgentData::Filesystems)
            }
            PollKind::FsFreeze => {
                model::parse_fsfreeze_status(&raw(r#"{"execute":"guest-fsfreeze-status"}"#)?)
                    .map(AgentData::FsFreeze)
            }
            PollKind::System => Ok(AgentData::System(Box::new(model::parse_system(info(&[
                GuestInfoKind::Hostname,
                GuestInfoKind::Os,
                GuestInfoKind::Timezone,
                GuestInfoKind::Interfaces,
            ])?)))),
            PollKind::Users => Ok(AgentData::Users(model::parse_users(info(&[
                GuestInfoKind::Users,
            ])?))),
            PollKind::Load => {
                model::parse_load(&raw(r#"{"execute":"guest-get-load"}"#)?).map(AgentData::Load)
            }
        }
    }

    /// Logs a failed poll at most once a minute per kind, so an absent or
    /// broken agent does not flood the log.
    fn warn(&mut self, kind: PollKind, error: &str) {
        let now = Instant::now();
        match self.last_warning.iter_mut().find(|(k, _, _)| *k == kind) {
            Some((_, at, held)) if now.duration_since(*at) < WARN_EVERY => {
                *held += 1;
                log::debug!("agent: {kind:?} poll failed: {error}");
            }
            Some((_, at, held)) => {
                log::warn!(
                    "agent: {kind:?} poll failed: {error} ({held} similar failures not logged)"
                );
                *at = now;
                *held = 0;
            }
            None => {
                log::warn!("agent: {kind:?} poll failed: {error}");
                self.last_warning.push((kind, now, 0));
            }
        }
    }
}

/// qemu-ga says "The command X has not been found" for commands it lacks;
/// libvirt says "not supported" for guest-info kinds it lacks.
fn is_unsupported(error: &str) -> bool {
    error.contains("has not been found")
        || error.contains("not supported")
        || error.contains("unsupported")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intervals() -> AgentIntervals {
        let s = Duration::from_secs;
        AgentIntervals {
            sys: s(120),
            file: s(300),
            user: s(10),
            version: s(300),
            fsfreeze: s(5),
        }
    }

    #[test]
    fn first_poll_at_once_then_10s_doubling_up_to_the_interval() {
        let t0 = Instant::now();
        let mut schedule = Schedule::new(&intervals(), t0);
        assert_eq!(schedule.take_due(t0).len(), 6);
        // The System poll (120 s) repeats at 10, 30, 70, 150, 270, 390 s.
        let mut system_times = Vec::new();
        let mut t = t0;
        while system_times.len() < 6 {
            t = schedule.next_due().unwrap();
            if schedule.take_due(t).contains(&PollKind::System) {
                system_times.push(t.duration_since(t0).as_secs());
            }
        }
        assert_eq!(system_times, vec![10, 30, 70, 150, 270, 390]);
        // fsfreeze (5 s interval) never waits longer than 5 s.
        let mut s = Schedule::new(&intervals(), t0);
        s.take_due(t0);
        let next = s
            .entries
            .iter()
            .find(|e| e.kind == PollKind::FsFreeze)
            .unwrap()
            .due;
        assert_eq!(next.duration_since(t0), Duration::from_secs(5));
        let _ = t;
    }

    #[test]
    fn restart_and_disable() {
        let t0 = Instant::now();
        let mut s = Schedule::new(&intervals(), t0);
        s.take_due(t0);
        s.disable(PollKind::Load);
        let later = t0 + Duration::from_secs(1000);
        s.restart(later);
        let due = s.take_due(later);
        assert_eq!(due.len(), 5);
        assert!(!due.contains(&PollKind::Load));
    }

    #[test]
    fn unsupported_detection() {
        assert!(is_unsupported(
            "virDomainQemuAgentCommand failed: internal error: unable to execute QEMU agent command 'guest-get-load': The command guest-get-load has not been found"
        ));
        assert!(!is_unsupported("Guest agent is not responding"));
    }
}
