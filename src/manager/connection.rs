//! The connection to libvirt, as the manager owns it. The manager learns of
//! a loss only from the hypervisor's `ConnectionClosed` event (sent once per
//! connection, whether libvirt or a failed call noticed first), reconnects
//! on a worker until it succeeds, then re-reads the domain's state: events
//! sent while the launcher was away are lost.

use serde_json::json;

use super::errors::hypervisor_error;
use super::jobs::{JobOutput, JobResult, Observation, Operation};
use super::reply::JobValue;
use super::timers::Timer;
use super::{DomainManager, Phase};
use crate::events::EventKind;
use crate::hypervisor::{CloseReason, ConnectionId};

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
            json!({ "uri": self.hypervisor.info().uri, "reason": reason }),
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
            json!({ "uri": self.hypervisor.info().uri }),
        );
        self.refresh_status();
    }

    /// Re-reads the domain's state (at start, to adopt a domain that
    /// already exists, and after a reconnect).
    pub(super) fn refresh_status(&mut self) {
        let name = self.config.domain_name.clone();
        self.jobs.spawn(
            Operation::StatusRefresh,
            None,
            self.timing.command,
            move |hv| match hv.domain_status(&name) {
                Ok(status) => JobOutput {
                    result: Ok(JobValue::Empty),
                    observed: Observation::Status(status),
                },
                Err(e) => JobOutput::reply(Err(hypervisor_error(&e))),
            },
        );
    }
}
