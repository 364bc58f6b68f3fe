//! The `Hypervisor` implementation on libvirt, through the `virt` crate.
//!
//! One connection is shared by the manager and its workers (libvirt
//! connections are thread-safe). When the daemon goes away the connection
//! is reported lost (once, see `ffi::CloseSink`); `reconnect` releases it
//! and opens a new one with the event callbacks registered again, as
//! KubeVirt's launcher does after a virtqemud restart.

use std::ffi::c_int;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use virt::connect::Connect;
use virt::domain::Domain;
use virt::stream::Stream;
use virt::sys;

use super::ffi;
use super::state::{LibvirtError, dotted_version};
use super::{
    Affect, CloseReason, ConnectionId, DaemonVersions, DiskError, DiskErrorKind, DomainStatus,
    DriverKind, GuestInfoKind, HvResult, Hypervisor, HypervisorError, HypervisorErrorKind,
    HypervisorEvent, HypervisorInfo, MAX_SCREENSHOT_BYTES, MigrationRequest, RebootMode,
    Screenshot, Stat, screenshot_too_large,
};
use crate::sink::Sink;

/// Seconds of silence after which libvirt probes the daemon, and how many
/// probes may go unanswered before it closes the connection: a hung
/// daemon is noticed within about two minutes and every pending call on it
/// then fails instead of hanging (clients get `Timeout` from the job's own
/// deadline long before). libvirt's timer fires every interval, so the
/// interval is what an idle launcher pays in wake-ups: libvirt's default of
/// 5 s would be 12 a minute for nobody.
const KEEPALIVE_INTERVAL_SECONDS: i32 = 30;
const KEEPALIVE_COUNT: u32 = 3;

pub struct LibvirtHypervisor {
    uri: String,
    domain_name: String,
    events: Sink<HypervisorEvent>,
    conn: RwLock<Option<Registered>>,
    info: RwLock<HypervisorInfo>,
    /// The id of the connection calls may use; 0 while there is none or
    /// once it is known dead (shared with its close callback).
    live: Arc<AtomicU64>,
    /// The id the next connection gets.
    next_id: AtomicU64,
}

/// The current connection is alive (an RPC error came from elsewhere).
struct Alive;

/// One open connection and what the launcher registered on it. Each
/// registration holds a reference on the connection inside libvirt, so the
/// connection is freed only once `release` has removed them all.
struct Registered {
    id: ConnectionId,
    conn: Connect,
    event_callbacks: Vec<c_int>,
    close_callback: bool,
    /// The handle of the domain looked up last on this connection. A
    /// handle is a name and a UUID, and the daemon finds the domain by
    /// its UUID on every call, so it stays good across stops, starts and
    /// redefinitions with the same UUID: a call then costs one round trip
    /// instead of two (lookup, call). For the agent poller that halves
    /// the wake-ups each poll costs. A handle whose domain is gone is
    /// dropped and looked up again (see `with_domain`).
    domain: Mutex<Option<(String, Domain)>>,
}

impl Registered {
    /// Deregisters the callbacks (libvirt frees their data and drops their
    /// references) and closes the launcher's own handle.
    fn release(self) {
        ffi::deregister_domain_events(&self.conn, &self.event_callbacks);
        if self.close_callback {
            ffi::unregister_close_callback(&self.conn);
        }
        log::debug!("hypervisor: released connection {}", self.id.0);
        // Dropping the handle closes it; workers still holding a clone
        // close theirs when their call returns.
    }
}

impl LibvirtHypervisor {
    /// Opens the connection once (the caller retries) and registers the
    /// domain event callbacks for `domain_name`.
    pub fn connect(
        uri: &str,
        domain_name: &str,
        events: Sink<HypervisorEvent>,
    ) -> HvResult<LibvirtHypervisor> {
        // Live from the start: the daemon may close the connection while
        // it is still being opened.
        let id = ConnectionId::FIRST;
        let live = Arc::new(AtomicU64::new(id.0));
        let (registered, info) = open(uri, domain_name, &events, id, &live)?;
        Ok(LibvirtHypervisor {
            uri: uri.to_string(),
            domain_name: domain_name.to_string(),
            events,
            conn: RwLock::new(Some(registered)),
            info: RwLock::new(info),
            live,
            next_id: AtomicU64::new(id.next().0),
        })
    }

    /// A handle on the current connection (a new reference, so the lock is
    /// not held during the call).
    fn connection(&self, operation: &'static str) -> HvResult<Connect> {
        if self.live.load(Ordering::Acquire) == 0 {
            return Err(HypervisorError::not_connected(operation));
        }
        match self.conn.read() {
            Ok(guard) => guard
                .as_ref()
                .map(|r| r.conn.clone())
                .ok_or_else(|| HypervisorError::not_connected(operation)),
            Err(_) => Err(HypervisorError::new(
                HypervisorErrorKind::Other,
                operation,
                "connection lock poisoned by a panicked thread",
            )),
        }
    }

    /// A handle on domain `name`, and whether it came from the cache
    /// (`Registered::domain`) rather than from a lookup just now.
    fn domain(&self, name: &str, operation: &'static str) -> HvResult<(Domain, bool)> {
        if self.live.load(Ordering::Acquire) == 0 {
            return Err(HypervisorError::not_connected(operation));
        }
        let guard = self.conn.read().map_err(|_| {
            HypervisorError::new(
                HypervisorErrorKind::Other,
                operation,
                "connection lock poisoned by a panicked thread",
            )
        })?;
        let registered = guard
            .as_ref()
            .ok_or_else(|| HypervisorError::not_connected(operation))?;
        if let Ok(cached) = registered.domain.lock()
            && let Some((_, dom)) = cached.as_ref().filter(|(n, _)| n == name)
        {
            return Ok((dom.clone(), true));
        }
        let (id, conn) = (registered.id, registered.conn.clone());
        // Not under the lock during the round trip.
        drop(guard);
        let dom = conn
            .lookup_domain_by_name(name)
            .map_err(|e| self.error(operation, e))?;
        if let Ok(guard) = self.conn.read()
            && let Some(registered) = guard.as_ref().filter(|r| r.id == id)
            && let Ok(mut cached) = registered.domain.lock()
        {
            *cached = Some((name.to_string(), dom.clone()));
        }
        Ok((dom, false))
    }

    /// Drops the cached handle of domain `name` (its domain is gone).
    fn forget_domain(&self, name: &str) {
        if let Ok(guard) = self.conn.read()
            && let Some(registered) = guard.as_ref()
            && let Ok(mut cached) = registered.domain.lock()
            && cached.as_ref().is_some_and(|(n, _)| n == name)
        {
            *cached = None;
        }
    }

    /// Converts a libvirt error, reporting a dead connection so that the
    /// next call fails fast and the manager reconnects.
    fn error(&self, operation: &'static str, e: virt::error::Error) -> HypervisorError {
        let mut err = convert_error(operation, &e);
        if err.kind == HypervisorErrorKind::ConnectionLost {
            // RPC errors also come from connections the daemon makes (a
            // peer-to-peer migration's link to the target daemon); only a
            // dead connection of ours is a lost connection.
            match self.current_if_dead() {
                Ok(Some(id)) => self.report_lost(id),
                // Between connections: the loss is already known.
                Ok(None) => {}
                Err(Alive) => err.kind = HypervisorErrorKind::Other,
            }
        }
        err
    }

    /// The current connection's id if it is dead (virConnectIsAlive: a
    /// local check, no round trip), `None` if there is none.
    fn current_if_dead(&self) -> Result<Option<ConnectionId>, Alive> {
        match self.conn.read() {
            Ok(guard) => match guard.as_ref() {
                Some(r) if r.conn.is_alive().unwrap_or(false) => Err(Alive),
                Some(r) => Ok(Some(r.id)),
                None => Ok(None),
            },
            Err(_) => Err(Alive),
        }
    }

    /// Marks connection `id` dead and tells the manager, once.
    fn report_lost(&self, id: ConnectionId) {
        let sink = ffi::CloseSink {
            tx: self.events.clone(),
            connection: id,
            live: self.live.clone(),
        };
        sink.report(CloseReason::CallFailed);
    }

    /// Sets how long libvirt waits for the domain's guest agent on calls
    /// that take no timeout of their own (by default: forever). The test
    /// driver does not implement it, and has no agent to wait for.
    fn set_agent_timeout_on(&self, dom: &Domain, timeout: Duration) -> HvResult<()> {
        let seconds = i32::try_from(timeout.as_secs().max(1)).unwrap_or(i32::MAX);
        match ffi::agent_set_response_timeout(dom, seconds) {
            Ok(()) => Ok(()),
            Err(e) if e.code().to_raw() == sys::VIR_ERR_NO_SUPPORT => Ok(()),
            Err(e) => Err(self.error("virDomainAgentSetResponseTimeout", e)),
        }
    }

    fn with_domain<T>(
        &self,
        name: &str,
        operation: &'static str,
        call: impl Fn(&Domain) -> Result<T, virt::error::Error>,
    ) -> HvResult<T> {
        self.with_domain_hv(name, operation, |d| {
            call(d).map_err(|e| self.error(operation, e))
        })
    }

    /// `with_domain` for calls that make several libvirt calls and
    /// convert their errors themselves.
    fn with_domain_hv<T>(
        &self,
        name: &str,
        operation: &'static str,
        call: impl Fn(&Domain) -> HvResult<T>,
    ) -> HvResult<T> {
        let (dom, cached) = self.domain(name, operation)?;
        match call(&dom) {
            // The cached handle's domain is gone; one of that name may
            // have been defined since with another UUID. The call did
            // nothing, so it is made again on a fresh lookup.
            Err(e) if cached && e.kind == HypervisorErrorKind::NoDomain => {
                self.forget_domain(name);
                let (dom, _) = self.domain(name, operation)?;
                call(&dom)
            }
            result => result,
        }
    }
}

/// Opens connection `id` and registers what the launcher listens to.
fn open(
    uri: &str,
    domain_name: &str,
    events: &Sink<HypervisorEvent>,
    id: ConnectionId,
    live: &Arc<AtomicU64>,
) -> HvResult<(Registered, HypervisorInfo)> {
    let op = "virConnectOpen";
    let conn = Connect::open(Some(uri)).map_err(|e| convert_error(op, &e))?;
    let info = read_info(uri, &conn)?;
    let mut registered = Registered {
        id,
        conn,
        event_callbacks: Vec::new(),
        close_callback: false,
        domain: Mutex::new(None),
    };
    if info.driver == DriverKind::Qemu {
        // Remote drivers only; the in-process test driver has no keepalive.
        if let Err(e) = registered
            .conn
            .set_keep_alive(KEEPALIVE_INTERVAL_SECONDS, KEEPALIVE_COUNT)
        {
            log::warn!("hypervisor: could not enable libvirt keepalive: {e}");
        }
        let sink = ffi::CloseSink {
            tx: events.clone(),
            connection: id,
            live: live.clone(),
        };
        if let Err(e) = ffi::register_close_callback(&registered.conn, sink) {
            registered.release();
            return Err(convert_error("virConnectRegisterCloseCallback", &e));
        }
        registered.close_callback = true;
    }
    match ffi::register_domain_events(&registered.conn, domain_name, events) {
        Ok(ids) => registered.event_callbacks = ids,
        Err(e) => {
            registered.release();
            return Err(convert_error("virConnectDomainEventRegisterAny", &e));
        }
    }
    Ok((registered, info))
}

fn read_info(uri: &str, conn: &Connect) -> HvResult<HypervisorInfo> {
    let driver_name = conn
        .driver_type()
        .map_err(|e| convert_error("virConnectGetType", &e))?;
    let driver = match driver_name.to_ascii_uppercase().as_str() {
        "QEMU" => DriverKind::Qemu,
        "TEST" => DriverKind::Test,
        other => {
            return Err(HypervisorError::new(
                HypervisorErrorKind::Unsupported,
                "virConnectGetType",
                format!(
                    "{uri} is a {other} connection; virt-launcher runs QEMU domains (qemu:///system, qemu:///session) or libvirt's test driver (test:///default)"
                ),
            ));
        }
    };
    let library = Connect::version().map_err(|e| convert_error("virGetVersion", &e))?;
    let daemon = conn
        .lib_version()
        .map_err(|e| convert_error("virConnectGetLibVersion", &e))?;
    // Not virConnectGetVersion: see `HypervisorInfo`.
    Ok(HypervisorInfo {
        uri: uri.to_string(),
        driver,
        backend: "virt",
        library_version: Some(dotted_version(library.into())),
        daemon_version: dotted_version(daemon.into()),
    })
}

fn convert_error(operation: &'static str, e: &virt::error::Error) -> HypervisorError {
    let number = |n: u32| i32::try_from(n).unwrap_or(-1);
    let error = LibvirtError {
        code: number(e.code().to_raw()),
        domain: number(e.domain().to_raw()),
        message: e.message(),
    };
    // An RPC error is this backend's own connection failing.
    let kind =
        HypervisorErrorKind::from_libvirt(error, operation, HypervisorErrorKind::ConnectionLost);
    HypervisorError::new(kind, operation, e.message().to_string())
}

impl Hypervisor for LibvirtHypervisor {
    fn info(&self) -> HypervisorInfo {
        match self.info.read() {
            Ok(info) => info.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn domain_status(&self, name: &str) -> HvResult<Option<DomainStatus>> {
        let op = "virDomainGetState";
        match self.with_domain(name, op, ffi::domain_state) {
            Ok((state, reason)) => Ok(Some(DomainStatus::from_libvirt(state, reason))),
            // Not defined, or undefined between the lookup and the query.
            Err(e) if e.kind == HypervisorErrorKind::NoDomain => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn define(&self, xml: &str) -> HvResult<()> {
        let op = "virDomainDefineXMLFlags";
        let conn = self.connection(op)?;
        // No VIR_DOMAIN_DEFINE_VALIDATE: see `Hypervisor::define`.
        conn.define_domain_xml_flags(xml, 0)
            .map(drop)
            .map_err(|e| self.error(op, e))
    }

    fn undefine(&self, name: &str) -> HvResult<()> {
        // Keep NVRAM like KubeVirt, so an EFI guest's variables survive.
        // The test driver has no NVRAM and rejects the flag.
        let flags = match self.info().driver {
            DriverKind::Test => 0,
            DriverKind::Qemu => sys::VIR_DOMAIN_UNDEFINE_KEEP_NVRAM,
        };
        self.with_domain(name, "virDomainUndefineFlags", |d| d.undefine_flags(flags))
    }

    fn start(&self, name: &str, paused: bool) -> HvResult<()> {
        let flags = if paused {
            sys::VIR_DOMAIN_START_PAUSED
        } else {
            0
        };
        self.with_domain(name, "virDomainCreateWithFlags", |d| {
            d.create_with_flags(flags)
        })
        .map(drop)
    }

    fn suspend(&self, name: &str) -> HvResult<()> {
        self.with_domain(name, "virDomainSuspend", |d| d.suspend())
            .map(drop)
    }

    fn resume(&self, name: &str) -> HvResult<()> {
        self.with_domain(name, "virDomainResume", |d| d.resume())
            .map(drop)
    }

    fn shutdown_acpi(&self, name: &str) -> HvResult<()> {
        // The test driver has no ACPI and rejects the flag; its plain
        // shutdown behaves like a guest that honours the power button.
        let flags = match self.info().driver {
            DriverKind::Test => 0,
            DriverKind::Qemu => sys::VIR_DOMAIN_SHUTDOWN_ACPI_POWER_BTN,
        };
        self.with_domain(name, "virDomainShutdownFlags", |d| d.shutdown_flags(flags))
            .map(drop)
    }

    fn reboot(&self, name: &str, mode: RebootMode) -> HvResult<()> {
        let flags = match mode {
            RebootMode::GuestAgent => sys::VIR_DOMAIN_REBOOT_GUEST_AGENT,
            RebootMode::Acpi => sys::VIR_DOMAIN_REBOOT_ACPI_POWER_BTN,
        };
        self.with_domain(name, "virDomainReboot", |d| d.reboot(flags))
            .map(drop)
    }

    fn reset(&self, name: &str) -> HvResult<()> {
        self.with_domain(name, "virDomainReset", |d| d.reset())
            .map(drop)
    }

    fn destroy(&self, name: &str, graceful: bool) -> HvResult<()> {
        let flags = if graceful {
            sys::VIR_DOMAIN_DESTROY_GRACEFUL
        } else {
            0
        };
        self.with_domain(name, "virDomainDestroyFlags", |d| d.destroy_flags(flags))
    }

    fn domain_xml(&self, name: &str) -> HvResult<(String, String)> {
        self.with_domain(name, "virDomainGetXMLDesc", |d| {
            Ok((d.xml_desc(0)?, d.uuid_string()?))
        })
    }

    fn stats(&self, name: &str) -> HvResult<Vec<Stat>> {
        let wanted = sys::VIR_DOMAIN_STATS_STATE
            | sys::VIR_DOMAIN_STATS_CPU_TOTAL
            | sys::VIR_DOMAIN_STATS_BALLOON
            | sys::VIR_DOMAIN_STATS_VCPU
            | sys::VIR_DOMAIN_STATS_INTERFACE
            | sys::VIR_DOMAIN_STATS_BLOCK
            // As KubeVirt's GetDomainStats asks: the last dirty rate
            // measurement's state (`dirtyrate.calc_*`), which virt-handler
            // reads in `DirtyRate`.
            | sys::VIR_DOMAIN_STATS_DIRTYRATE;
        // NOWAIT: report what is available rather than queue behind a
        // running job (a migration holds the domain's job lock).
        let flags = sys::VIR_CONNECT_GET_ALL_DOMAINS_STATS_NOWAIT;
        self.with_domain(name, "virDomainListGetStats", |d| {
            ffi::domain_stats(d, wanted, flags)
        })
    }

    fn attach_device(&self, name: &str, xml: &str, affect: Affect) -> HvResult<()> {
        self.with_domain(name, "virDomainAttachDeviceFlags", |d| {
            d.attach_device_flags(xml, affect.flags())
        })
    }

    fn detach_device(&self, name: &str, xml: &str, affect: Affect) -> HvResult<()> {
        self.with_domain(name, "virDomainDetachDeviceFlags", |d| {
            d.detach_device_flags(xml, affect.flags())
        })
    }

    fn update_device(&self, name: &str, xml: &str, affect: Affect) -> HvResult<()> {
        self.with_domain(name, "virDomainUpdateDeviceFlags", |d| {
            d.update_device_flags(xml, affect.flags())
        })
    }

    fn set_vcpus(&self, name: &str, count: u32, affect: Affect) -> HvResult<()> {
        self.with_domain(name, "virDomainSetVcpusFlags", |d| {
            d.set_vcpus_flags(count, affect.flags())
        })
    }

    fn agent_command(&self, name: &str, command: &str, timeout: Duration) -> HvResult<String> {
        let seconds = i32::try_from(timeout.as_secs().max(1)).unwrap_or(i32::MAX);
        self.with_domain(name, "virDomainQemuAgentCommand", |d| {
            d.qemu_agent_command(command, seconds, 0)
        })
    }

    fn set_agent_timeout(&self, name: &str, timeout: Duration) -> HvResult<()> {
        self.with_domain_hv(name, "virDomainAgentSetResponseTimeout", |dom| {
            self.set_agent_timeout_on(dom, timeout)
        })
    }

    fn guest_info(&self, name: &str, kinds: &[GuestInfoKind]) -> HvResult<Vec<Stat>> {
        let types = kinds.iter().fold(0, |acc, kind| {
            acc | match kind {
                GuestInfoKind::Users => sys::VIR_DOMAIN_GUEST_INFO_USERS,
                GuestInfoKind::Os => sys::VIR_DOMAIN_GUEST_INFO_OS,
                GuestInfoKind::Timezone => sys::VIR_DOMAIN_GUEST_INFO_TIMEZONE,
                GuestInfoKind::Hostname => sys::VIR_DOMAIN_GUEST_INFO_HOSTNAME,
                GuestInfoKind::Filesystems => sys::VIR_DOMAIN_GUEST_INFO_FILESYSTEM,
                GuestInfoKind::Interfaces => sys::VIR_DOMAIN_GUEST_INFO_INTERFACES,
            }
        });
        self.with_domain_hv(name, "virDomainGetGuestInfo", |dom| {
            ffi::guest_info(dom, types).map_err(|e| self.error("virDomainGetGuestInfo", e))
        })
    }

    fn sync_guest_time(&self, name: &str, timeout: Duration) -> HvResult<()> {
        self.with_domain_hv(name, "virDomainSetTime", |dom| {
            self.set_agent_timeout_on(dom, timeout)?;
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            let seconds = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
            // Below 10^9, so it fits.
            let nanos = i32::try_from(now.subsec_nanos()).unwrap_or(0);
            dom.set_time(seconds, nanos, 0)
                .map(drop)
                .map_err(|e| self.error("virDomainSetTime", e))
        })
    }

    fn migratable_xml(&self, name: &str) -> HvResult<String> {
        self.with_domain(name, "virDomainGetXMLDesc", |d| {
            d.xml_desc(sys::VIR_DOMAIN_XML_MIGRATABLE | sys::VIR_DOMAIN_XML_SECURE)
        })
    }

    fn migrate(&self, name: &str, request: &MigrationRequest) -> HvResult<()> {
        let mut flags =
            sys::VIR_MIGRATE_LIVE | sys::VIR_MIGRATE_PEER2PEER | sys::VIR_MIGRATE_PERSIST_DEST;
        if !request.block_disks.is_empty() {
            flags |= sys::VIR_MIGRATE_NON_SHARED_INC;
        }
        if request.auto_converge {
            flags |= sys::VIR_MIGRATE_AUTO_CONVERGE;
        }
        if request.post_copy {
            flags |= sys::VIR_MIGRATE_POSTCOPY;
        }
        if request.unsafe_migration {
            flags |= sys::VIR_MIGRATE_UNSAFE;
        }
        if request.parallel_connections.is_some() {
            flags |= sys::VIR_MIGRATE_PARALLEL;
        }
        if request.compression.is_some() {
            flags |= sys::VIR_MIGRATE_COMPRESSED;
        }
        let args = ffi::MigrateArgs {
            dconn_uri: &request.target_uri,
            uri: request.migration_uri.as_deref(),
            dest_xml: request.dest_xml.as_deref(),
            bandwidth_mib: request.bandwidth_mib_per_s,
            disks_uri: request.disks_uri.as_deref(),
            migrate_disks: &request.block_disks,
            parallel_connections: request.parallel_connections,
            compression: request.compression.as_deref(),
            flags,
        };
        let op = "virDomainMigrateToURI3";
        let info = self.info();
        if info.driver == DriverKind::Test {
            // A second test:///default connection is another, empty, test
            // driver: ask on ours (which refuses migration anyway).
            return self.with_domain(name, op, |d| ffi::migrate(d, &args));
        }
        // The call blocks for the whole migration, so it gets a connection
        // of its own. On the shared one, libvirt's client sends other
        // threads' calls through the thread that is waiting for a reply,
        // and libvirt 9.0 was seen leaving a queued call unsent until its
        // next keepalive tick (30 s): the migration monitor's job-stats,
        // abort and post-copy calls must not wait for that.
        // (Dropping the handles at the end closes that connection.)
        let conn = Connect::open(Some(&info.uri)).map_err(|e| convert_error(op, &e))?;
        let dom = conn
            .lookup_domain_by_name(name)
            .map_err(|e| self.error(op, e))?;
        ffi::migrate(&dom, &args).map_err(|e| self.error(op, e))
    }

    fn job_stats(&self, name: &str, completed: bool) -> HvResult<Vec<Stat>> {
        self.with_domain(name, "virDomainGetJobStats", |d| {
            ffi::job_stats(d, completed)
        })
    }

    fn abort_job(&self, name: &str) -> HvResult<()> {
        self.with_domain(name, "virDomainAbortJob", ffi::abort_job)
    }

    fn migrate_start_post_copy(&self, name: &str) -> HvResult<()> {
        self.with_domain(
            name,
            "virDomainMigrateStartPostCopy",
            ffi::migrate_start_post_copy,
        )
    }

    fn migrate_set_max_downtime(&self, name: &str, milliseconds: u64) -> HvResult<()> {
        self.with_domain(name, "virDomainMigrateSetMaxDowntime", |d| {
            ffi::migrate_set_max_downtime(d, milliseconds)
        })
    }

    fn hypervisor_version(&self) -> HvResult<u64> {
        let op = "virConnectGetVersion";
        let conn = self.connection(op)?;
        conn.hyp_version()
            .map(u64::from)
            .map_err(|e| self.error(op, e))
    }

    fn versions_at(&self, uri: &str) -> HvResult<DaemonVersions> {
        // Closed when dropped, on return.
        let conn = Connect::open(Some(uri)).map_err(|e| convert_error("virConnectOpen", &e))?;
        let driver = conn
            .driver_type()
            .map_err(|e| convert_error("virConnectGetType", &e))?;
        let daemon = conn
            .lib_version()
            .map_err(|e| convert_error("virConnectGetLibVersion", &e))?;
        let hypervisor = conn
            .hyp_version()
            .map_err(|e| convert_error("virConnectGetVersion", &e))?;
        Ok(DaemonVersions {
            libvirt: dotted_version(daemon.into()),
            hypervisor: format!("{driver} {}", dotted_version(hypervisor.into())),
        })
    }

    fn start_dirty_rate_calc(&self, name: &str, seconds: u32) -> HvResult<()> {
        let seconds = c_int::try_from(seconds).unwrap_or(c_int::MAX);
        self.with_domain(name, "virDomainStartDirtyRateCalc", |d| {
            ffi::start_dirty_rate_calc(d, seconds)
        })
    }

    fn dirty_rate_stats(&self, name: &str) -> HvResult<Vec<Stat>> {
        self.with_domain(name, "virDomainListGetStats", |d| {
            ffi::domain_stats(d, sys::VIR_DOMAIN_STATS_DIRTYRATE, 0)
        })
    }

    fn dump_memory(&self, name: &str, path: &Path) -> HvResult<()> {
        let op = "virDomainCoreDumpWithFormat";
        let to = path.to_str().ok_or_else(|| {
            HypervisorError::new(
                HypervisorErrorKind::Other,
                op,
                format!("{} is not valid UTF-8", path.display()),
            )
        })?;
        self.with_domain(name, op, |d| {
            d.core_dump_with_format(
                to,
                sys::VIR_DOMAIN_CORE_DUMP_FORMAT_RAW,
                sys::VIR_DUMP_MEMORY_ONLY,
            )
        })
    }

    fn disk_errors(&self, name: &str) -> HvResult<Vec<DiskError>> {
        let errors = self.with_domain(name, "virDomainGetDiskErrors", ffi::disk_errors)?;
        Ok(errors
            .into_iter()
            .filter_map(|(target, code)| {
                DiskErrorKind::from_code(i64::from(code)).map(|kind| DiskError { target, kind })
            })
            .collect())
    }

    fn screenshot(&self, name: &str, screen: u32) -> HvResult<Screenshot> {
        let op = "virDomainScreenshot";
        let conn = self.connection(op)?;
        self.with_domain_hv(name, op, |dom| {
            let stream = Stream::new(&conn, 0).map_err(|e| self.error("virStreamNew", e))?;
            let mime = dom
                .screenshot(&stream, screen, 0)
                .map_err(|e| self.error(op, e))?;
            let mut data = Vec::new();
            let mut buf = vec![0u8; 256 * 1024];
            loop {
                match stream.recv(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let n = usize::try_from(n).unwrap_or(0).min(buf.len());
                        data.extend_from_slice(&buf[..n]);
                        if data.len() > MAX_SCREENSHOT_BYTES {
                            let _ = stream.abort();
                            return Err(screenshot_too_large(op));
                        }
                    }
                    Err(e) => {
                        let err = self.error("virStreamRecv", e);
                        let _ = stream.abort();
                        return Err(err);
                    }
                }
            }
            stream
                .finish()
                .map_err(|e| self.error("virStreamFinish", e))?;
            Ok(Screenshot { mime, data })
        })
    }

    fn backup_begin(
        &self,
        name: &str,
        backup_xml: &str,
        checkpoint_xml: Option<&str>,
    ) -> HvResult<()> {
        self.with_domain(name, "virDomainBackupBegin", |d| {
            ffi::backup_begin(d, backup_xml, checkpoint_xml)
        })
    }

    fn checkpoint_create(&self, name: &str, xml: &str, redefine: bool) -> HvResult<()> {
        let flags = if redefine {
            sys::VIR_DOMAIN_CHECKPOINT_CREATE_REDEFINE
                | sys::VIR_DOMAIN_CHECKPOINT_CREATE_REDEFINE_VALIDATE
        } else {
            0
        };
        self.with_domain(name, "virDomainCheckpointCreateXML", |d| {
            ffi::checkpoint_create(d, xml, flags)
        })
    }

    fn checkpoint_names(&self, name: &str) -> HvResult<Vec<String>> {
        self.with_domain(name, "virDomainListAllCheckpoints", ffi::checkpoint_names)
    }

    fn checkpoint_xml(&self, name: &str, checkpoint: &str) -> HvResult<String> {
        self.with_domain(name, "virDomainCheckpointGetXMLDesc", |d| {
            ffi::checkpoint_xml(d, checkpoint)
        })
    }

    fn checkpoint_delete(&self, name: &str, checkpoint: &str, metadata_only: bool) -> HvResult<()> {
        let flags = if metadata_only {
            sys::VIR_DOMAIN_CHECKPOINT_DELETE_METADATA_ONLY
        } else {
            0
        };
        self.with_domain(name, "virDomainCheckpointDelete", |d| {
            ffi::checkpoint_delete(d, checkpoint, flags)
        })
    }

    fn reconnect(&self) -> HvResult<ConnectionId> {
        let poisoned = || {
            HypervisorError::new(
                HypervisorErrorKind::Other,
                "reconnect",
                "connection lock poisoned by a panicked thread",
            )
        };
        // Release the old connection before opening the new one: its
        // callbacks hold references that would keep it (its socket, its
        // sinks) alive forever, and they must not report on a connection
        // that is no longer the launcher's.
        self.live.store(0, Ordering::Release);
        let old = self.conn.write().map_err(|_| poisoned())?.take();
        if let Some(old) = old {
            old.release();
        }
        let id = ConnectionId(self.next_id.fetch_add(1, Ordering::AcqRel));
        // Calls keep failing as not connected until the new connection is
        // in place; a close while it opens is reported.
        self.live.store(id.0, Ordering::Release);
        let (registered, info) =
            match open(&self.uri, &self.domain_name, &self.events, id, &self.live) {
                Ok(opened) => opened,
                Err(e) => {
                    let _ =
                        self.live
                            .compare_exchange(id.0, 0, Ordering::AcqRel, Ordering::Acquire);
                    return Err(e);
                }
            };
        if let Ok(mut guard) = self.info.write() {
            *guard = info;
        }
        *self.conn.write().map_err(|_| poisoned())? = Some(registered);
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hypervisor::DomainState;

    fn domain_xml(name: &str, uuid: &str) -> String {
        format!(
            "<domain type='test'><name>{name}</name><uuid>{uuid}</uuid><memory>65536</memory>\
             <os><type>hvm</type></os></domain>"
        )
    }

    /// The cached handle names the domain by UUID: a domain of the same
    /// name defined again with another UUID is still found, and one that
    /// is gone is reported gone.
    #[test]
    fn a_domain_redefined_with_another_uuid_is_found_through_the_cached_handle() {
        // The test driver in this process queues events on libvirt's
        // event loop, which must be registered before a connection opens.
        static EVENT_LOOP: std::sync::Once = std::sync::Once::new();
        EVENT_LOOP.call_once(|| {
            virt::error::clear_error_callback();
            crate::hypervisor::event_loop::register().expect("register the event loop");
            let (fatal, _) = crossbeam_channel::unbounded();
            let running = crate::hypervisor::event_loop::spawn(&fatal).expect("event loop");
            running
                .recv_timeout(Duration::from_secs(10))
                .expect("event loop runs");
        });
        let name = "handle-cache";
        let (events, _rx) = crossbeam_channel::unbounded();
        let hv =
            LibvirtHypervisor::connect("test:///default", name, events.into()).expect("connect");
        assert!(hv.domain_status(name).unwrap().is_none());

        hv.define(&domain_xml(name, "0b0c5a2e-8d1c-4d51-9a5e-5f1b7d3c0001"))
            .unwrap();
        hv.start(name, false).unwrap();
        assert_eq!(
            hv.domain_status(name).unwrap().unwrap().state,
            DomainState::Running
        );
        let (first, _) = hv.domain_xml(name).unwrap();

        hv.destroy(name, false).unwrap();
        hv.undefine(name).unwrap();
        assert!(hv.domain_status(name).unwrap().is_none());
        hv.define(&domain_xml(name, "0b0c5a2e-8d1c-4d51-9a5e-5f1b7d3c0002"))
            .unwrap();
        hv.start(name, false).unwrap();
        assert_eq!(
            hv.domain_status(name).unwrap().unwrap().state,
            DomainState::Running
        );
        let (xml, _) = hv.domain_xml(name).unwrap();
        assert!(
            xml.contains("0b0c5a2e-8d1c-4d51-9a5e-5f1b7d3c0002"),
            "{xml}"
        );
        assert!(
            first.contains("0b0c5a2e-8d1c-4d51-9a5e-5f1b7d3c0001"),
            "{first}"
        );

        hv.destroy(name, false).unwrap();
        hv.undefine(name).unwrap();
        assert!(hv.domain_status(name).unwrap().is_none());
        assert_eq!(
            hv.suspend(name).unwrap_err().kind,
            HypervisorErrorKind::NoDomain
        );
    }
}
