//! The connection to libvirt, as the manager owns it. The manager learns of
//! a loss only from the hypervisor's `ConnectionClosed` event (sent once per
//! connection, whether libvirt or a failed call noticed first), reconnects
//! on a worker until it succeeds, then re-reads the domain's state: events
//! sent while the launcher was away are lost.

use serde::Serialize;

use super::errors::hypervisor_error;
use super::jobs::{JobOutput, JobResult, Observation, Operation};
use super::reply::JobValue;
use super::timers::Timer;
use super::{DomainManager, Phase};
use crate::convert::GUEST_AGENT_CHANNEL;
use crate::domxml::Domain;
use crate::events::EventKind;
use crate::hypervisor::{
    AgentChannelReason, AgentLifecycle, CloseReason, ConnectionId, DomainStatus, Hypervisor,
};

/// The manager's connection to libvirt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Link {
    /// The connection in use, or the one that was lost.
    pub(super) connection: ConnectionId,
    pub(super) reconnecting: bool,
}

impl Default for Link {
    fn default() -> Link {
        Link {
            connection: ConnectionId::FIRST,
            reconnecting: false,
        }
    }
}

impl Link {
    pub(super) fn is_up(&self) -> bool {
        !self.reconnecting
    }
}

/// LIBVIRT_DISCONNECTED's data (with why) and LIBVIRT_RECONNECTED's.
#[derive(Debug, Serialize)]
struct LibvirtLink {
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    uri: String,
}

impl DomainManager {
    pub(super) fn on_connection_lost(&mut self, connection: ConnectionId, reason: CloseReason) {
        if connection != self.link.connection {
            log::debug!(
                "manager: ignoring the close of connection {} (now {})",
                connection.0,
                self.link.connection.0
            );
            return;
        }
        if self.link.reconnecting || self.phase == Phase::Exiting {
            return;
        }
        let reason = reason.describe();
        log::warn!("manager: lost the libvirt connection ({reason}); reconnecting");
        self.link.reconnecting = true;
        self.publish(
            EventKind::LibvirtDisconnected,
            LibvirtLink {
                reason: Some(reason),
                uri: self.hypervisor.info().uri,
            },
        );
        self.start_reconnect();
    }

    pub(super) fn start_reconnect(&mut self) {
        if !self.link.reconnecting || self.jobs.is_running(Operation::Reconnect) {
            return;
        }
        self.jobs.spawn(
            Operation::Reconnect,
            None,
            self.timing.command,
            |hv| match hv.reconnect() {
                Ok(connection) => JobOutput {
                    result: Ok(JobValue::Empty),
                    observed: Observation::Connected(connection),
                },
                Err(e) => JobOutput::reply(Err(hypervisor_error(&e))),
            },
        );
    }

    pub(super) fn on_reconnect_done(&mut self, result: &JobResult) {
        if let Err(e) = result {
            log::debug!("manager: reconnect failed: {}", e.desc);
            self.timers.arm_in(Timer::Reconnect, self.timing.reconnect);
        }
    }

    /// A new connection is up.
    pub(super) fn on_reconnected(&mut self, connection: ConnectionId) {
        self.link = Link {
            connection,
            reconnecting: false,
        };
        log::info!("manager: reconnected to libvirt");
        self.publish(
            EventKind::LibvirtReconnected,
            LibvirtLink {
                reason: None,
                uri: self.hypervisor.info().uri,
            },
        );
        self.refresh_status();
        // The daemon may be another one now (restarted).
        self.hypervisor_version.forget();
        self.read_hypervisor_version();
    }

    /// Re-reads the domain's state and its guest agent channel's (at
    /// start, to adopt a domain that already exists, and after a
    /// reconnect): libvirt's events about them may have been missed.
    pub(super) fn refresh_status(&mut self) {
        let name = self.config.domain_name.clone();
        self.jobs.spawn(
            Operation::StatusRefresh,
            None,
            self.timing.command,
            move |hv| match hv.domain_status(&name) {
                Ok(status) => {
                    let agent = match status {
                        Some(s) if s.state.is_active() => agent_channel_state(hv, &name),
                        _ => None,
                    };
                    JobOutput {
                        result: Ok(JobValue::Empty),
                        observed: Observation::Refreshed { status, agent },
                    }
                }
                Err(e) => JobOutput::reply(Err(hypervisor_error(&e))),
            },
        );
    }

    /// Applies a refresh; one that an event overtook is read again.
    pub(super) fn on_refreshed(
        &mut self,
        status: Option<DomainStatus>,
        agent: Option<bool>,
        overtaken: bool,
    ) {
        if overtaken {
            log::debug!("manager: an event arrived during the refresh; reading again");
            self.refresh_status();
            return;
        }
        self.apply_observed_status(status);
        if let Some(connected) = agent
            && connected != self.agent.is_connected()
            && self.domain.status.state.is_active()
        {
            log::info!(
                "manager: the guest agent channel is {} (read from the domain)",
                if connected {
                    "connected"
                } else {
                    "disconnected"
                }
            );
            self.on_agent_lifecycle(AgentLifecycle {
                connected,
                reason: AgentChannelReason::StateRead,
            });
        }
    }
}

/// Whether the guest agent's channel is connected, from the domain's live
/// XML (`<target type='virtio' name='org.qemu.guest_agent.0'
/// state='connected'/>`); `None` when it cannot be told.
fn agent_channel_state(hv: &dyn Hypervisor, name: &str) -> Option<bool> {
    let (xml, _uuid) = match hv.domain_xml(name) {
        Ok(found) => found,
        Err(e) => {
            log::debug!("manager: cannot read the agent channel's state: {e}");
            return None;
        }
    };
    let domain = Domain::from_xml(&xml).ok()?;
    let state = domain
        .devices
        .channels
        .iter()
        .filter_map(|c| c.target.as_ref())
        .find(|t| t.name.as_deref() == Some(GUEST_AGENT_CHANNEL))?
        .state
        .clone()?;
    Some(state == "connected")
}
