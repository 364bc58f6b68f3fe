//! Downward metrics: the vhostmd metrics page a guest reads about itself
//! and its host, on a disk (`spec.volumes[].downwardMetrics`) or through
//! a virtio-serial channel (`spec.domain.devices.downwardMetrics`).
//!
//! In KubeVirt, virt-handler writes the disk every 5 s and serves the
//! channel, asking the launcher for the domain's statistics. Here the
//! launcher answers both itself, in two threads of its own that ask the
//! domain manager as a client would (`query-stats`, `query-qemu-version`,
//! over the manager's inbox), so the manager stays the one owner of the
//! domain's state and never waits on them:
//!
//! - `metrics-disk` rewrites the disk image every [`REFRESH`] while the
//!   domain runs, if the image is there (a sync of a VMI with the volume
//!   creates it before the domain is defined, as KubeVirt's launcher does);
//! - `metrics-channel` connects to the channel's socket, where QEMU
//!   listens once a domain with the channel runs, and answers the guest's
//!   requests until QEMU closes it; then it waits for the next QEMU.
//!
//! Neither exists until a domain that uses it runs ([`Threads`]): without
//! downward metrics nothing of this runs or wakes.
//!
//! The page's format is in [`page`], the channel's protocol in
//! [`channel`], the figures in [`report`] and [`host`].

pub mod channel;
pub mod host;
pub mod page;
pub mod report;

use std::io;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::command::{DomainCommand, ManagerCommand, ManagerRequest, ReplyTo};
use crate::sink::Sink;
use crate::threads::FatalSender;

use host::HostSources;
use report::VmFigures;

/// The channel's virtio-serial port name (KubeVirt's
/// `DownwardMetricsSerialDeviceName`).
pub const CHANNEL_NAME: &str = "org.github.vhostmd.1";
/// How often the disk is rewritten (virt-handler's `refreshDuration`).
pub const REFRESH: Duration = Duration::from_secs(5);
/// How long a thread waits for the manager's answer (KubeVirt drops
/// statistics that took longer than its collector's timeout).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// The disk image: KubeVirt's `config.DownwardMetricDisk`
/// (`/var/run/kubevirt-private/downwardapi-disks/vhostmd0`) under the
/// launcher's private directory.
pub fn disk_path(private_dir: &Path) -> PathBuf {
    private_dir.join("downwardapi-disks").join("vhostmd0")
}

/// The channel's socket: KubeVirt's `DownwardMetricsChannelSocket`
/// (`/var/run/kubevirt-private/downwardmetrics-channel/downwardmetrics.sock`).
pub fn channel_socket(private_dir: &Path) -> PathBuf {
    private_dir
        .join("downwardmetrics-channel")
        .join("downwardmetrics.sock")
}

/// Where the page's figures come from.
#[derive(Debug, Clone)]
pub struct Collector {
    /// The manager's requests, as a client sends them.
    requests: Sink<ManagerRequest>,
    host: HostSources,
    host_name: String,
}

impl Collector {
    pub fn new(requests: Sink<ManagerRequest>) -> Collector {
        Collector {
            requests,
            host: HostSources::system(),
            host_name: host_name(),
        }
    }

    /// The page now, with statistics at most `max_age` old, if the domain
    /// runs and the manager answered.
    pub fn page(&self, max_age: Duration) -> Option<Vec<page::Metric>> {
        let vm = self.vm_figures(max_age)?;
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        Some(report::report(&self.host_name, &vm, &self.host, now))
    }

    fn vm_figures(&self, max_age: Duration) -> Option<VmFigures> {
        let stats = self.ask(DomainCommand::QueryStats {
            max_age: Some(max_age),
        })?;
        let stats = stats.as_stats()?.stats.to_value();
        let stats = stats.as_object()?.clone();
        // Running (1) or paused (3), as KubeVirt's collector wants a
        // running VMI.
        let state = stats.get("state.state").and_then(serde_json::Value::as_u64);
        if !matches!(state, Some(1 | 3)) {
            return None;
        }
        let version = self.ask(DomainCommand::QueryQemuVersion)?;
        let qemu_version = version.as_qemu_version()?.version.clone();
        Some(VmFigures {
            stats,
            qemu_version,
        })
    }

    fn ask(&self, command: DomainCommand) -> Option<crate::replies::Return> {
        let (reply, answer) = ReplyTo::channel();
        self.requests
            .send(ManagerRequest {
                command: ManagerCommand::Domain(command),
                reply,
            })
            .ok()?;
        match answer.recv_timeout(ANSWER_TIMEOUT) {
            Ok(Ok(value)) => Some(value),
            Ok(Err(e)) => {
                log::debug!("metrics: the manager answered {e}");
                None
            }
            Err(_) => {
                log::debug!("metrics: no answer from the manager");
                None
            }
        }
    }
}

/// The host's name for the page's `HostName`: `NODE_NAME` when set (the
/// Kubernetes node, as virt-handler reports it; a pod gets it from the
/// downward API), else the kernel's host name.
fn host_name() -> String {
    std::env::var("NODE_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|n| n.trim().to_string())
        })
        .unwrap_or_default()
}

/// The disk and channel threads of one launcher, each started the first
/// time a domain that uses it runs (the manager tells [`Threads::domain_runs`]),
/// so a launcher whose VMI has neither a `downwardMetrics` volume nor the
/// device runs neither and nothing wakes for them. Once started, a thread
/// stays: the disk is rewritten every [`REFRESH`] (virt-handler's refresh)
/// and the channel's socket looked at again as often while no QEMU listens.
pub struct Threads {
    private_dir: PathBuf,
    collector: Collector,
    fatal: FatalSender,
    disk: bool,
    channel: bool,
}

impl Threads {
    pub fn new(private_dir: &Path, collector: Collector, fatal: FatalSender) -> Threads {
        Threads {
            private_dir: private_dir.to_path_buf(),
            collector,
            fatal,
            disk: false,
            channel: false,
        }
    }

    /// A domain runs: the threads its downward metrics need start, if not
    /// yet running. A domain uses the disk when its image is there (a sync
    /// of a VMI with the volume creates it before the domain is defined)
    /// and the channel when QEMU's socket is (QEMU binds it before the
    /// domain runs).
    pub fn domain_runs(&mut self) {
        if !self.disk && disk_path(&self.private_dir).exists() {
            let disk = disk_path(&self.private_dir);
            let collector = self.collector.clone();
            match crate::threads::spawn_named("metrics-disk", &self.fatal, move || {
                refresh_disk(&disk, &collector, REFRESH)
            }) {
                Ok(_) => self.disk = true,
                Err(e) => log::warn!("metrics: cannot start the disk's thread: {e}"),
            }
        }
        if !self.channel && channel_socket(&self.private_dir).exists() {
            let socket = channel_socket(&self.private_dir);
            let collector = self.collector.clone();
            match crate::threads::spawn_named("metrics-channel", &self.fatal, move || {
                serve_channel(&socket, &collector, REFRESH)
            }) {
                Ok(_) => self.channel = true,
                Err(e) => log::warn!("metrics: cannot start the channel's thread: {e}"),
            }
        }
    }

    /// Which threads run: (disk, channel).
    pub fn running(&self) -> (bool, bool) {
        (self.disk, self.channel)
    }
}

/// The disk thread: every `period`, the page written to the image, while
/// there is one and the domain runs.
fn refresh_disk(path: &Path, collector: &Collector, period: Duration) {
    let mut failing = false;
    loop {
        std::thread::sleep(period);
        // The statistics refresher's samples (taken every few seconds
        // while someone asks) are fresh enough for a page every `period`.
        match write_page(path, collector, period) {
            Ok(_) => failing = false,
            Err(e) => {
                if !failing {
                    log::warn!("metrics: cannot write {}: {e}", path.display());
                }
                failing = true;
            }
        }
    }
}

/// Writes the page to the image at `path`; whether it did (not when there
/// is no image or no running domain).
fn write_page(path: &Path, collector: &Collector, max_age: Duration) -> io::Result<bool> {
    let file = match crate::safe_fs::open_existing_file(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let Some(metrics) = collector.page(max_age) else {
        return Ok(false);
    };
    page::write_disk(&file, &page::disk_body(&metrics))?;
    Ok(true)
}

/// The channel thread: connected to QEMU's socket whenever one listens
/// there, looking again every `period` when none does.
fn serve_channel(socket: &Path, collector: &Collector, period: Duration) {
    loop {
        match UnixStream::connect(socket) {
            Ok(stream) => {
                log::info!("metrics: serving the guest's {CHANNEL_NAME} channel");
                // Each answer as fresh as requests may come.
                let page = || {
                    collector
                        .page(channel::MIN_REQUEST_GAP)
                        .map(|m| page::to_xml(&m))
                };
                match channel::serve(stream, channel::MIN_REQUEST_GAP, page) {
                    Ok(()) => log::info!("metrics: QEMU closed the {CHANNEL_NAME} channel"),
                    Err(e) => log::warn!("metrics: the {CHANNEL_NAME} channel failed: {e}"),
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
                ) => {}
            Err(e) => log::debug!("metrics: cannot connect to {}: {e}", socket.display()),
        }
        std::thread::sleep(period);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{ManagerCommand, ManagerRequest};
    use crate::protocol::Encoded;
    use crate::replies::{QemuVersion, Return, StatsReply};
    use crate::scratch::ScratchDir;
    use crossbeam_channel::unbounded;
    use serde_json::json;

    /// A collector whose manager answers with `stats` from a thread, and
    /// the ages of statistics it was asked for.
    fn collector_answering(
        stats: serde_json::Value,
    ) -> (Collector, crossbeam_channel::Receiver<Option<Duration>>) {
        let (tx, rx) = unbounded::<ManagerRequest>();
        let (asked_tx, asked_rx) = unbounded();
        std::thread::spawn(move || {
            for request in rx {
                let answer: Return = match request.command {
                    ManagerCommand::Domain(DomainCommand::QueryStats { max_age }) => {
                        let _ = asked_tx.send(max_age);
                        StatsReply {
                            age_ms: 0,
                            domain: "e2e_vm".into(),
                            stats: Encoded::new(&stats),
                        }
                        .into()
                    }
                    ManagerCommand::Domain(DomainCommand::QueryQemuVersion) => QemuVersion {
                        version: "QEMU 7.2.22".into(),
                    }
                    .into(),
                    other => panic!("{other:?}"),
                };
                request.reply.send(Ok(answer));
            }
        });
        let mut collector = Collector::new(Sink::from(tx));
        collector.host_name = "node-1".into();
        (collector, asked_rx)
    }

    #[test]
    fn the_page_is_made_from_the_managers_answers() {
        let (collector, asked) = collector_answering(json!({
            "state.state": 1, "vcpu.maximum": 1, "vcpu.0.state": 1,
            "vcpu.0.time": 2_000_000_000u64, "balloon.current": 196_608}));
        let metrics = collector.page(Duration::from_secs(1)).unwrap();
        assert_eq!(asked.try_recv(), Ok(Some(Duration::from_secs(1))));
        let xml = page::to_xml(&metrics);
        for part in [
            "<name>HostName</name>\n    <value>node-1</value>",
            "<name>VirtProductInfo</name>\n    <value>QEMU 7.2.22</value>",
            "<name>TotalCPUTime</name>\n    <value>2.000000</value>",
            "<name>ResourceMemoryLimit</name>\n    <value>196608</value>",
        ] {
            assert!(xml.contains(part), "{part} not in {xml}");
        }
    }

    #[test]
    fn a_stopped_domain_or_a_gone_manager_has_no_page() {
        let (collector, _) = collector_answering(json!({"state.state": 5}));
        assert!(collector.page(REFRESH).is_none());
        let (tx, rx) = unbounded::<ManagerRequest>();
        drop(rx);
        assert!(Collector::new(Sink::from(tx)).page(REFRESH).is_none());
    }

    #[test]
    fn no_thread_runs_until_a_running_domain_uses_downward_metrics() {
        let dir = ScratchDir::new("metrics-threads");
        let (collector, asked) = collector_answering(json!({"state.state": 1}));
        let (fatal, _fatal_rx) = unbounded();
        let mut threads = Threads::new(&dir, collector, fatal);
        // A domain without the volume or the device: nothing starts.
        threads.domain_runs();
        assert_eq!(threads.running(), (false, false));
        // A domain with the volume: the disk's thread, which writes the
        // page into the image.
        let disk = disk_path(&dir);
        std::fs::create_dir_all(disk.parent().unwrap()).unwrap();
        let file = std::fs::File::create(&disk).unwrap();
        page::init_disk(&file).unwrap();
        threads.domain_runs();
        assert_eq!(threads.running(), (true, false));
        assert_eq!(
            asked.recv_timeout(REFRESH * 3),
            Ok(Some(REFRESH)),
            "the disk's thread did not ask for the statistics"
        );
        // The device's socket: the channel's thread too, once.
        let socket = channel_socket(&dir);
        std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
        std::fs::write(&socket, b"").unwrap();
        threads.domain_runs();
        threads.domain_runs();
        assert_eq!(threads.running(), (true, true));
    }

    #[test]
    fn the_disk_gets_the_page_only_where_an_image_is() {
        let dir = ScratchDir::new("metrics-write");
        let path = dir.join("vhostmd0");
        let (collector, _) = collector_answering(json!({"state.state": 1}));
        assert!(!write_page(&path, &collector, REFRESH).unwrap());
        let file = std::fs::File::create(&path).unwrap();
        page::init_disk(&file).unwrap();
        assert!(write_page(&path, &collector, REFRESH).unwrap());
        let image = std::fs::read(&path).unwrap();
        match page::read_disk(&image) {
            Ok(page::DiskRead::Page(text)) => {
                assert!(text.contains("<value>node-1</value>"), "{text}")
            }
            other => panic!("{other:?}"),
        }
    }
}
