//! The notify client: tells virt-handler about the domain through the
//! notify socket virt-handler serves in the pod
//! (`<kubevirt-share-dir>/domain-notify-pipe.sock`), as KubeVirt's launcher
//! does: `ADDED` once the domain exists, `MODIFIED` on every change that
//! shows in KubeVirt's `api.Domain` (state, devices, the guest agent's
//! interfaces and OS), and last a `MODIFIED` of a domain that no longer
//! exists, with its deletion time set: that is virt-handler's sign that
//! the domain is gone (KubeVirt's launcher sends no `DELETED` either).
//!
//! The notifier is a thread of its own that reads the domain through the
//! manager like any client: a notify socket that is missing or stops
//! answering delays only the notifications, never the manager. It keeps
//! only the latest domain to send, retries every second while virt-handler
//! cannot be reached, and reconnects.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded, select};

use super::api;
use super::proto::methods::NOTIFY_DOMAIN_EVENT_PATH;
use super::proto::notify::DomainEventRequest;
use super::service::ManagerClient;
use crate::command::ManagerRequest;
use crate::config::Config;
use crate::events::{EventHub, EventKind};
use crate::grpc::Client;
use crate::sink::Sink;
use crate::threads::{self, FatalSender};

/// virt-handler's notify socket, in the share directory.
pub const NOTIFY_SOCKET_NAME: &str = "domain-notify-pipe.sock";
/// How long one notification may take (KubeVirt's send timeout).
const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// How soon a notification that could not be sent is tried again.
const RETRY: Duration = Duration::from_secs(1);

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
        };
        threads::spawn_named("kubevirt-notify", fatal, move || {
            // The domain as it is now: a launcher that adopted a running
            // domain tells virt-handler at once.
            state.refresh();
            loop {
                let retry = if state.pending.is_some() {
                    crossbeam_channel::after(RETRY)
                } else {
                    crossbeam_channel::never()
                };
                select! {
                    recv(subscription.events) -> event => match event {
                        Ok(_) => {
                            // Every queued change is covered by one read.
                            while subscription.events.try_recv().is_ok() {}
                            state.refresh();
                        }
                        Err(_) => break,
                    },
                    recv(retry) -> _ => state.send_pending(),
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
}

impl NotifyState {
    /// Reads the domain and queues what virt-handler has not seen.
    fn refresh(&mut self) {
        match self.reader.read_domain() {
            Ok(Some(domain)) => {
                let mut domain = domain.for_notification();
                // Notifications carry the agent's freeze status too
                // (GetDomain does not, as in KubeVirt).
                domain.status.fs_freeze_status.status = self.reader.fs_freeze_status();
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

    fn queue_deleted(&mut self) {
        let mut domain = api::Domain::non_existent(&self.domain_name, &self.uid);
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
        if !self.deleted {
            self.queue_deleted();
        } else {
            self.send_pending();
        }
    }
}
