//! The notify client: tells virt-handler about the domain through the
//! notify socket virt-handler serves in the pod
//! (`<kubevirt-share-dir>/domain-notify-pipe.sock`), as KubeVirt's launcher
//! does: `ADDED` once the domain exists (on libvirt's definition of a new
//! domain, shut off, before it starts, as KubeVirt's launcher, which
//! defines before it starts), `MODIFIED` on every change that shows in
//! KubeVirt's `api.Domain` (state, devices, the guest agent's interfaces
//! and OS, whose last report stays once the guest stops), and last a
//! `MODIFIED` of a domain that no longer exists, with its deletion time
//! set: that is virt-handler's sign that
//! the domain is gone (KubeVirt's launcher sends no `DELETED` either).
//!
//! It also reports the Kubernetes events KubeVirt's launcher reports
//! (`HandleK8SEvent`, see `k8s_events`): a guest panic from the event hub,
//! a failed `GuestPing` from the gRPC service through a queue.
//!
//! The notifier is a thread of its own that reads the domain through the
//! manager like any client: a notify socket that is missing or stops
//! answering delays only the notifications, never the manager. It keeps
//! only the latest domain to send, retries every second while virt-handler
//! cannot be reached, and reconnects.

use std::collections::VecDeque;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError, bounded, select};

use super::api;
use super::k8s_events::{self, K8sEvent, PanicInfo, VmiRef};
use super::proto::methods::{NOTIFY_DOMAIN_EVENT_PATH, NOTIFY_K8S_EVENT_PATH};
use super::proto::notify::{DomainEventRequest, K8sEventRequest};
use super::service::ManagerClient;
use crate::command::ManagerRequest;
use crate::config::Config;
use crate::events::{EventHub, EventKind};
use crate::grpc::Client;
use crate::hypervisor::state::DefinedDetail;
use crate::hypervisor::{DomainState, DomainStatus as LauncherStatus, LifecycleEvent, StateReason};
use crate::replies::DiskErrorReply;
use crate::sink::Sink;
use crate::threads::{self, FatalSender};

/// virt-handler's notify socket, in the share directory.
pub const NOTIFY_SOCKET_NAME: &str = "domain-notify-pipe.sock";
/// How long one notification may take (KubeVirt's send timeout).
const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// How soon a notification that could not be sent is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// Kubernetes events waiting for the notifier; more are dropped (with a
/// log line) rather than ever block their sender.
const K8S_QUEUE_LEN: usize = 32;

/// Where the gRPC service queues Kubernetes events for the notifier.
#[derive(Clone)]
pub struct K8sEventSender(Sender<K8sEvent>);

impl K8sEventSender {
    /// Queues `event`; never blocks.
    pub fn send(&self, event: K8sEvent) {
        match self.0.try_send(event) {
            Ok(()) => {}
            Err(TrySendError::Full(event)) => log::warn!(
                "kubevirt: too many Kubernetes events waiting; dropped {} {}",
                event.reason,
                event.message
            ),
            // No notifier (the launcher is exiting): nobody to tell.
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

/// The queue between the gRPC service and the notifier.
pub fn k8s_event_queue() -> (K8sEventSender, Receiver<K8sEvent>) {
    let (tx, rx) = bounded(K8S_QUEUE_LEN);
    (K8sEventSender(tx), rx)
}

/// The events after which the domain virt-handler sees may have changed.
const CHANGES: [EventKind; 13] = [
    EventKind::DomainLifecycle,
    EventKind::DomainReboot,
    EventKind::AgentConnected,
    EventKind::AgentDisconnected,
    EventKind::DeviceAdded,
    EventKind::DeviceRemoved,
    EventKind::VolumeStatusChanged,
    EventKind::JobCompleted,
    EventKind::GuestInfoChanged,
    EventKind::LibvirtReconnected,
    EventKind::MigrationStarted,
    EventKind::MigrationCompleted,
    EventKind::MigrationFailed,
];

/// Whether a `Defined` lifecycle event's line says the domain is shut off
/// with no particular reason: a new definition, not yet started.
fn defined_shut_off(line: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(line).is_ok_and(|event| {
        event["data"]["state"] == "Shutoff" && event["data"]["reason"] == "Unknown"
    })
}

/// The running notifier thread.
pub struct Notifier {
    finish: Sender<()>,
    done: Receiver<()>,
}

impl Notifier {
    pub fn spawn(
        config: &Arc<Config>,
        hub: Arc<EventHub>,
        manager: Sink<ManagerRequest>,
        k8s_events: Receiver<K8sEvent>,
        qemu_log: PathBuf,
        fatal: &FatalSender,
    ) -> io::Result<Notifier> {
        let subscription = hub
            .subscribe(Some(CHANGES.to_vec()))
            .ok_or_else(|| io::Error::other("the event hub is closed"))?;
        let (finish_tx, finish_rx) = bounded(1);
        let (done_tx, done_rx) = bounded(1);
        let mut state = NotifyState {
            reader: ManagerClient::new(manager, config.clone()),
            client: Client::new(config.dirs.share.join(NOTIFY_SOCKET_NAME)),
            domain_name: config.domain_name.clone(),
            uid: config.uid.clone(),
            added: false,
            deleted: false,
            last_sent: None,
            pending: None,
            last_status: None,
            vmi: VmiRef {
                namespace: config.namespace.clone(),
                name: config.name.clone(),
                uid: config.uid.clone(),
            },
            qemu_log,
            panic_reported: false,
            k8s_pending: VecDeque::new(),
            io_errors_reported: false,
        };
        threads::spawn_named("kubevirt-notify", fatal, move || {
            // The domain as it is now: a launcher that adopted a running
            // domain tells virt-handler at once.
            state.refresh();
            loop {
                let retry = if state.pending.is_some() || !state.k8s_pending.is_empty() {
                    crossbeam_channel::after(RETRY)
                } else {
                    crossbeam_channel::never()
                };
                select! {
                    recv(subscription.events) -> event => match event {
                        Ok(event) => {
                            // Every queued change is covered by one read,
                            // after the domain's definition, if that is
                            // among them (KubeVirt's ADDED).
                            let mut defined = state.note(&event);
                            while let Ok(event) = subscription.events.try_recv() {
                                defined |= state.note(&event);
                            }
                            if defined {
                                state.announce_defined();
                            }
                            state.refresh();
                            state.send_k8s_pending();
                        }
                        Err(_) => break,
                    },
                    recv(k8s_events) -> event => if let Ok(event) = event {
                        state.k8s_pending.push_back(event);
                        state.send_k8s_pending();
                    },
                    recv(retry) -> _ => {
                        state.send_pending();
                        state.send_k8s_pending();
                    }
                    recv(finish_rx) -> _ => break,
                }
            }
            state.finish();
            let _ = done_tx.send(());
        })?;
        Ok(Notifier {
            finish: finish_tx,
            done: done_rx,
        })
    }

    /// Sends the last notification (the domain is gone) and waits up to
    /// `timeout` for it.
    pub fn finish(self, timeout: Duration) {
        let _ = self.finish.try_send(());
        if self.done.recv_timeout(timeout).is_err() {
            log::warn!("kubevirt: the final domain notification was not sent within {timeout:?}");
        }
    }
}

struct NotifyState {
    reader: ManagerClient,
    client: Client,
    domain_name: String,
    uid: String,
    /// `ADDED` was sent.
    added: bool,
    /// The domain's deletion was sent.
    deleted: bool,
    /// The JSON of the last domain sent, to send only changes.
    last_sent: Option<String>,
    /// A notification not sent yet: (event type, domain JSON).
    pending: Option<(&'static str, String)>,
    /// The status of the last domain read, whose guest agent part the
    /// domain's last notification keeps once the domain is gone.
    last_status: Option<api::DomainStatus>,
    /// The VMI the Kubernetes events are about.
    vmi: VmiRef,
    /// The domain's QEMU log, where libvirt writes a panic's details.
    qemu_log: PathBuf,
    /// A panic that stopped the guest was reported (KubeVirt reports it
    /// once).
    panic_reported: bool,
    /// Kubernetes events not sent yet, oldest first.
    k8s_pending: VecDeque<K8sEvent>,
    /// The disks' I/O errors that paused the guest were reported (until
    /// it runs again).
    io_errors_reported: bool,
}

impl NotifyState {
    /// Queues the Kubernetes event a hub event stands for, if any. True
    /// when the event is libvirt's definition of a new domain that is shut
    /// off (`Defined`/`Added`), which KubeVirt's notifier reports as
    /// `ADDED` before the domain starts.
    fn note(&mut self, event: &crate::events::Event) -> bool {
        if let Some(LifecycleEvent::Defined(DefinedDetail::Added)) = event.lifecycle {
            return defined_shut_off(&event.line);
        }
        let Some(stopped_the_guest) = event.lifecycle.and_then(k8s_events::panic_of_lifecycle)
        else {
            return false;
        };
        if stopped_the_guest && self.panic_reported {
            return false;
        }
        self.panic_reported |= stopped_the_guest;
        let info = PanicInfo::from_log(&self.qemu_log);
        let event = K8sEvent::guest_panicked(info.as_ref());
        log::info!("kubevirt: guest panic detected: {}", event.message);
        if self.k8s_pending.len() < K8S_QUEUE_LEN {
            self.k8s_pending.push_back(event);
        }
        false
    }

    /// The domain was just defined, shut off: virt-handler's first word of
    /// it is `ADDED` with that state (`Shutoff`/`Unknown`), as KubeVirt's
    /// launcher, which defines the domain before it starts it, sends it.
    /// The domain is read now (it may be starting already; its spec is the
    /// one read), with the state the definition left; the read that follows
    /// tells the state it is in now.
    fn announce_defined(&mut self) {
        if self.added || self.pending.is_some() {
            return;
        }
        let Ok(Some(read)) = self.reader.read_domain_for_notify() else {
            return;
        };
        let mut domain = read.domain.for_notification();
        domain.set_status(LauncherStatus::new(
            DomainState::Shutoff,
            StateReason::Unknown,
        ));
        domain.status.fs_freeze_status.status = read.fs_freeze_status;
        let Ok(json) = serde_json::to_string(&domain) else {
            return;
        };
        self.deleted = false;
        self.pending = Some(("ADDED", json));
        self.send_pending();
    }

    /// Sends the queued Kubernetes events, oldest first, until one fails
    /// (it is tried again a second later).
    fn send_k8s_pending(&mut self) {
        while let Some(event) = self.k8s_pending.front() {
            let request = K8sEventRequest {
                event_json: event.to_json(&self.vmi),
            };
            match self
                .client
                .call(NOTIFY_K8S_EVENT_PATH, &request.encode(), SEND_TIMEOUT)
            {
                Ok(reply) => {
                    // virt-handler refuses an event for a VMI it does not
                    // know: that is final, not retried.
                    if let Ok(response) = super::proto::notify::Response::decode(&reply)
                        && !response.success
                    {
                        log::warn!(
                            "kubevirt: virt-handler refused the event {}: {}",
                            event.reason,
                            response.message
                        );
                    }
                    self.k8s_pending.pop_front();
                }
                Err(e) => {
                    log::debug!(
                        "kubevirt: cannot send the event {} to virt-handler: {e}; retrying",
                        event.reason
                    );
                    return;
                }
            }
        }
    }

    /// Reads the domain and queues what virt-handler has not seen.
    fn refresh(&mut self) {
        match self.reader.read_domain_for_notify() {
            Ok(Some(read)) => {
                self.note_disk_errors(&read.domain, &read.disk_errors);
                let mut domain = read.domain.for_notification();
                // Notifications carry the agent's freeze status too
                // (GetDomain does not, as in KubeVirt).
                domain.status.fs_freeze_status.status = read.fs_freeze_status;
                // What the agent last reported goes into the domain's
                // last notification too, once it is gone.
                self.last_status = Some(domain.status.clone());
                let Ok(json) = serde_json::to_string(&domain) else {
                    return;
                };
                if self.last_sent.as_deref() == Some(json.as_str()) {
                    return;
                }
                let kind = if self.added { "MODIFIED" } else { "ADDED" };
                self.deleted = false;
                self.pending = Some((kind, json));
                self.send_pending();
            }
            Ok(None) => {
                if self.added && !self.deleted {
                    self.queue_deleted();
                }
            }
            Err(e) => log::debug!("kubevirt: cannot read the domain to notify: {e}"),
        }
    }

    /// Queues an `IOerror` event per disk when I/O errors paused the
    /// guest, once per such pause.
    fn note_disk_errors(&mut self, domain: &api::Domain, disk_errors: &[DiskErrorReply]) {
        if domain.status.reason != api::StateChangeReason::IoError {
            self.io_errors_reported = false;
            return;
        }
        if self.io_errors_reported || disk_errors.is_empty() {
            return;
        }
        self.io_errors_reported = true;
        for disk in disk_errors {
            let event = K8sEvent::io_error(disk);
            log::warn!("kubevirt: {}", event.message);
            if self.k8s_pending.len() < K8S_QUEUE_LEN {
                self.k8s_pending.push_back(event);
            }
        }
    }

    fn queue_deleted(&mut self) {
        let mut domain = api::Domain::non_existent(&self.domain_name, &self.uid);
        // As KubeVirt's notifier, which keeps the agent's last report in
        // every domain it sends.
        if let Some(last) = &self.last_status {
            domain.status.interfaces = last.interfaces.clone();
            domain.status.os_info = last.os_info.clone();
            domain.status.fs_freeze_status = last.fs_freeze_status.clone();
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        domain.mark_deleted(api::GoTime::from_unix(now));
        if let Ok(json) = serde_json::to_string(&domain) {
            self.deleted = true;
            self.pending = Some(("MODIFIED", json));
            self.send_pending();
        }
    }

    fn send_pending(&mut self) {
        let Some((kind, json)) = self.pending.take() else {
            return;
        };
        let request = DomainEventRequest {
            domain_json: json.clone().into_bytes(),
            status_json: Vec::new(),
            event_type: kind.to_string(),
        };
        let started = Instant::now();
        match self
            .client
            .call(NOTIFY_DOMAIN_EVENT_PATH, &request.encode(), SEND_TIMEOUT)
        {
            Ok(_) => {
                log::debug!(
                    "kubevirt: notified virt-handler: {kind} ({:.1} ms)",
                    started.elapsed().as_secs_f64() * 1e3
                );
                if kind == "ADDED" {
                    self.added = true;
                }
                self.last_sent = Some(json);
            }
            Err(e) => {
                log::debug!("kubevirt: cannot notify virt-handler ({kind}): {e}; retrying");
                self.pending = Some((kind, json));
            }
        }
    }

    /// At exit: the domain is gone, whatever virt-handler saw last.
    fn finish(&mut self) {
        self.send_k8s_pending();
        if !self.deleted {
            self.queue_deleted();
        } else {
            self.send_pending();
        }
    }
}
