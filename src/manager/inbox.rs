//! The manager's inbox: every input the domain manager acts on, from every
//! thread, arrives on this one channel, in the order it was sent.
//!
//! One channel rather than one per input: the manager thread waits on a
//! single receiver, so a request wakes it with one unregistration instead
//! of one per channel (`query-domain` and `ping` round trips are mostly
//! that wake-up), and no input can overtake another sent before it.

use crossbeam_channel::{Receiver, Sender, unbounded};

use super::Control;
use super::hotplug::Progress;
use super::jobs::JobDone;
use crate::agent::AgentUpdate;
use crate::command::ManagerRequest;
use crate::hypervisor::HypervisorEvent;
use crate::migration::MigrationUpdate;
use crate::signals::Signal;
use crate::sink::{Closed, Sink};

/// One input of the domain manager.
pub enum ManagerInput {
    /// A client's command (connection threads, the SIGUSR1 reporter).
    Request(ManagerRequest),
    /// From libvirt: lifecycle, agent, device and job events, a lost
    /// connection.
    Hypervisor(HypervisorEvent),
    /// A guest-agent poll result.
    Agent(AgentUpdate),
    /// SIGTERM and friends, from the signal watcher.
    Signal(Signal),
    /// From the main thread.
    Control(Control),
    /// A job the manager started on a worker has finished (boxed: a job's
    /// output is the largest input by far, and every slot of the channel
    /// is as large as the largest input).
    JobDone(Box<JobDone>),
    /// The source migration worker's progress and outcome.
    Migration(MigrationUpdate),
    /// The live-update worker's per-volume progress.
    Hotplug(Progress),
    /// Ends the manager's loop. The launcher never sends it (its process
    /// exit ends every thread); a test that runs a manager does, to join it.
    Stop,
}

/// The sending side, cloned into every thread that feeds the manager.
#[derive(Debug, Clone)]
pub struct Inbox(Sender<ManagerInput>);

/// A new inbox and the receiver the manager thread reads.
pub fn channel() -> (Inbox, Receiver<ManagerInput>) {
    let (tx, rx) = unbounded();
    (Inbox(tx), rx)
}

impl Inbox {
    /// Sends `input` (dropped, `Closed`, when the manager has stopped).
    pub fn send(&self, input: ManagerInput) -> Result<(), Closed> {
        self.0.send(input).map_err(|_| Closed)
    }

    pub fn requests(&self) -> Sink<ManagerRequest> {
        Sink::wrapping(self.0.clone(), ManagerInput::Request)
    }

    pub fn hypervisor_events(&self) -> Sink<HypervisorEvent> {
        Sink::wrapping(self.0.clone(), ManagerInput::Hypervisor)
    }

    pub fn agent_updates(&self) -> Sink<AgentUpdate> {
        Sink::wrapping(self.0.clone(), ManagerInput::Agent)
    }

    pub fn signals(&self) -> Sink<Signal> {
        Sink::wrapping(self.0.clone(), ManagerInput::Signal)
    }

    pub(super) fn job_completions(&self) -> Sink<JobDone> {
        Sink::wrapping(self.0.clone(), |done| ManagerInput::JobDone(Box::new(done)))
    }

    pub(super) fn migration_updates(&self) -> Sink<MigrationUpdate> {
        Sink::wrapping(self.0.clone(), ManagerInput::Migration)
    }

    pub(super) fn hotplug_progress(&self) -> Sink<Progress> {
        Sink::wrapping(self.0.clone(), ManagerInput::Hotplug)
    }
}
