//! `WireHypervisor`: the `Hypervisor` trait on libvirt's RPC protocol.
//!
//! It behaves like the `virt` backend call for call: the same libvirt
//! procedures with the same flags, the same error kinds from the same
//! libvirt error codes (the daemon's messages pass through unchanged),
//! the same `Stat` values from typed parameters, and events and states
//! built by the same constructors in `hypervisor::state`. So the launcher
//! above it cannot tell which backend it runs on, except by asking.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::client::{Client, ClientOptions, CloseReason, Listener, PendingCall, RpcError};
use super::codec::{
    DecodeResult, Decoder, DomainRef, Encoder, TypedParam, TypedValue, decode_domain,
};
use super::procedures::{
    self as proc, Procedure, auth, event_ids, events, features, flags, limits, migrate_params,
};
use super::uri::{self, Environment, Target};
use crate::hypervisor::state::{LibvirtError, dotted_version};
use crate::hypervisor::{
    Affect, AgentLifecycle, CloseReason as LibvirtCloseReason, ConnectionId, DaemonVersions,
    DiskError, DiskErrorKind, DomainStatus, DriverKind, GuestInfoKind, HvResult, Hypervisor,
    HypervisorError, HypervisorErrorKind, HypervisorEvent, HypervisorInfo, LifecycleEvent,
    LossReporter, MAX_SCREENSHOT_BYTES, MigrationRequest, RebootMode, Screenshot, Stat,
};
use crate::sink::Sink;

/// Extra time a guest-agent call gets beyond the agent timeout it passes
/// to libvirt, so libvirt's own timeout answers first.
const AGENT_DEADLINE_MARGIN: Duration = Duration::from_secs(10);

pub struct WireHypervisor {
    uri: String,
    target: Target,
    domain_name: String,
    events: Sink<HypervisorEvent>,
    options: ClientOptions,
    conn: RwLock<Option<Arc<Client>>>,
    info: RwLock<HypervisorInfo>,
    /// The id of the connection calls may use; 0 while there is none or
    /// once it is known dead (see `LossReporter`).
    live: Arc<AtomicU64>,
    /// The id of the newest connection, and the id the next one gets.
    current: AtomicU64,
    /// The domain looked up last. A domain reference is a name and a
    /// UUID, and the daemon finds the domain by its UUID on every call, so
    /// it stays good across stops, starts and redefinitions with the same
    /// UUID: a call then costs one round trip instead of two (lookup,
    /// call), as in the `virt` backend. A reference whose domain is gone
    /// is dropped and looked up again (see `call_on_domain`); a reconnect
    /// drops it too.
    domain: Mutex<Option<DomainRef>>,
}

impl WireHypervisor {
    /// Opens the connection once (the caller retries) and registers the
    /// domain event callbacks for `domain_name`.
    pub fn connect(
        uri: &str,
        domain_name: &str,
        events: Sink<HypervisorEvent>,
    ) -> HvResult<WireHypervisor> {
        WireHypervisor::connect_with(
            uri,
            domain_name,
            events,
            &Environment::of_this_process(),
            ClientOptions::default(),
        )
    }

    /// `connect` with the process environment and keepalive settings given
    /// (tests use short keepalive intervals).
    pub fn connect_with(
        uri: &str,
        domain_name: &str,
        events: Sink<HypervisorEvent>,
        env: &Environment,
        options: ClientOptions,
    ) -> HvResult<WireHypervisor> {
        let target = uri::resolve(uri, env).map_err(|e| {
            HypervisorError::new(HypervisorErrorKind::Unsupported, "virConnectOpen", e)
        })?;
        // Live from the start: the daemon may report the connection closed
        // while it is still being opened.
        let id = ConnectionId::FIRST;
        let live = Arc::new(AtomicU64::new(id.0));
        let reporter = LossReporter {
            tx: events.clone(),
            connection: id,
            live: live.clone(),
        };
        let (client, info) = open(uri, &target, domain_name, reporter, options)?;
        Ok(WireHypervisor {
            uri: uri.to_string(),
            target,
            domain_name: domain_name.to_string(),
            events,
            options,
            conn: RwLock::new(Some(client)),
            info: RwLock::new(info),
            live,
            current: AtomicU64::new(id.0),
            domain: Mutex::new(None),
        })
    }

    fn connection(&self, operation: &'static str) -> HvResult<Arc<Client>> {
        if self.live.load(Ordering::Acquire) == 0 {
            return Err(HypervisorError::not_connected(operation));
        }
        match self.conn.read() {
            Ok(guard) => guard
                .clone()
                .ok_or_else(|| HypervisorError::not_connected(operation)),
            Err(_) => Err(HypervisorError::new(
                HypervisorErrorKind::Other,
                operation,
                "connection lock poisoned by a panicked thread",
            )),
        }
    }

    /// Converts a failed call, noting a lost connection so that the next
    /// call fails fast and the manager reconnects.
    fn error(&self, operation: &'static str, e: RpcError) -> HypervisorError {
        let err = convert_error(operation, e);
        if err.kind == HypervisorErrorKind::ConnectionLost {
            self.reporter(ConnectionId(self.current.load(Ordering::Acquire)))
                .report(LibvirtCloseReason::CallFailed);
        }
        err
    }

    fn reporter(&self, connection: ConnectionId) -> LossReporter {
        LossReporter {
            tx: self.events.clone(),
            connection,
            live: self.live.clone(),
        }
    }

    /// Whether calls may use the connection (for tests).
    #[cfg(test)]
    fn is_connected(&self) -> bool {
        self.live.load(Ordering::Acquire) != 0
            && self
                .conn
                .read()
                .map(|c| c.as_ref().is_some_and(|c| c.is_open()))
                .unwrap_or(false)
    }

    fn lookup(&self, client: &Client, name: &str, operation: &'static str) -> HvResult<DomainRef> {
        let mut args = Encoder::new();
        args.string(name);
        let reply = client
            .call(
                &proc::DOMAIN_LOOKUP_BY_NAME,
                &args.into_bytes(),
                proc::DOMAIN_LOOKUP_BY_NAME.deadline,
            )
            .map_err(|e| self.error(operation, e))?;
        decode_reply(operation, &reply, decode_domain)
    }

    /// A reference to domain `name`, and whether it came from the cache
    /// (`WireHypervisor::domain`) rather than from a lookup just now.
    fn domain_ref(
        &self,
        client: &Client,
        name: &str,
        operation: &'static str,
    ) -> HvResult<(DomainRef, bool)> {
        if let Ok(cached) = self.domain.lock()
            && let Some(dom) = cached.as_ref().filter(|d| d.name == name)
        {
            return Ok((dom.clone(), true));
        }
        let dom = self.lookup(client, name, operation)?;
        if let Ok(mut cached) = self.domain.lock() {
            *cached = Some(dom.clone());
        }
        Ok((dom, false))
    }

    /// Drops the cached reference to domain `name` (its domain is gone).
    fn forget_domain(&self, name: &str) {
        if let Ok(mut cached) = self.domain.lock()
            && cached.as_ref().is_some_and(|d| d.name == name)
        {
            *cached = None;
        }
    }

    /// Runs `attempt` (one call or several) with a reference to domain
    /// `name`; returns its outcome and the reference. Calls through a
    /// cached reference that the daemon answers with "no domain" (`gone`)
    /// did nothing: the domain may have been defined again with another
    /// UUID, so the attempt is made once more on a fresh lookup.
    fn on_domain<T>(
        &self,
        client: &Client,
        name: &str,
        operation: &'static str,
        attempt: impl Fn(&DomainRef) -> T,
        gone: impl Fn(&T) -> bool,
    ) -> HvResult<(T, DomainRef)> {
        let (dom, cached) = self.domain_ref(client, name, operation)?;
        let outcome = attempt(&dom);
        if cached && gone(&outcome) {
            self.forget_domain(name);
            let (dom, _) = self.domain_ref(client, name, operation)?;
            return Ok((attempt(&dom), dom));
        }
        Ok((outcome, dom))
    }

    /// Calls `procedure` with the arguments `encode` writes for a
    /// reference to domain `name` (see `on_domain`); returns the reply and
    /// the reference.
    fn call_on_domain(
        &self,
        client: &Client,
        name: &str,
        procedure: &Procedure,
        deadline: Duration,
        encode: impl Fn(&DomainRef, &mut Encoder),
    ) -> HvResult<(Vec<u8>, DomainRef)> {
        let op = procedure.api;
        let attempt = |dom: &DomainRef| {
            let mut e = Encoder::new();
            encode(dom, &mut e);
            client
                .call(procedure, &e.into_bytes(), deadline)
                .map_err(|e| self.error(op, e))
        };
        let (reply, dom) = self.on_domain(client, name, op, attempt, no_domain)?;
        reply.map(|reply| (reply, dom))
    }

    /// Calls `procedure` on domain `name` with what `args` encodes after
    /// the domain; `ret` decodes the reply.
    fn domain_call<T>(
        &self,
        name: &str,
        procedure: &Procedure,
        args: impl FnOnce(&mut Encoder),
        ret: impl FnOnce(&DomainRef, &mut Decoder) -> DecodeResult<T>,
    ) -> HvResult<T> {
        self.domain_call_within(name, procedure, procedure.deadline, args, ret)
    }

    fn domain_call_within<T>(
        &self,
        name: &str,
        procedure: &Procedure,
        deadline: Duration,
        args: impl FnOnce(&mut Encoder),
        ret: impl FnOnce(&DomainRef, &mut Decoder) -> DecodeResult<T>,
    ) -> HvResult<T> {
        let op = procedure.api;
        let client = self.connection(op)?;
        let mut e = Encoder::new();
        args(&mut e);
        // XDR items are whole 4-byte units: the arguments follow the
        // domain as they are.
        let args = e.into_bytes();
        let (reply, dom) = self.call_on_domain(&client, name, procedure, deadline, |dom, e| {
            dom.encode(e);
            e.fixed_opaque(&args);
        })?;
        decode_reply(op, &reply, |d| ret(&dom, d))
    }

    /// Sets how long libvirt waits for the domain's guest agent on calls
    /// that take no timeout of their own (by default: forever). The test
    /// driver does not implement it, and has no agent to wait for.
    fn set_agent_timeout_of(&self, name: &str, timeout: Duration) -> HvResult<()> {
        let seconds = i32::try_from(timeout.as_secs().max(1)).unwrap_or(i32::MAX);
        let set = self.domain_call(
            name,
            &proc::DOMAIN_AGENT_SET_RESPONSE_TIMEOUT,
            |e| {
                e.i32(seconds).u32(0);
            },
            |_, d| d.i32().map(drop),
        );
        match set {
            Err(e) if e.kind == HypervisorErrorKind::Unsupported => Ok(()),
            other => other,
        }
    }

    /// `virDomainListGetStats` of domain `name`: the `wanted` groups.
    fn domain_stats(&self, name: &str, wanted: u32, call_flags: u32) -> HvResult<Vec<Stat>> {
        let op = proc::CONNECT_GET_ALL_DOMAIN_STATS.api;
        let client = self.connection(op)?;
        let (reply, _) = self.call_on_domain(
            &client,
            name,
            &proc::CONNECT_GET_ALL_DOMAIN_STATS,
            proc::CONNECT_GET_ALL_DOMAIN_STATS.deadline,
            |dom, e| {
                // doms<>: a list of one.
                e.u32(1);
                dom.encode(e);
                e.u32(wanted).u32(call_flags);
            },
        )?;
        decode_reply(op, &reply, |d| {
            // A record is at least a domain (name, UUID, id) and a count.
            let records = d.array_len(limits::DOMAIN_LIST_MAX, 28)?;
            let mut out = Vec::new();
            for _ in 0..records {
                decode_domain(d)?;
                out.extend(d.typed_params(limits::GET_ALL_DOMAIN_STATS_MAX)?);
            }
            Ok(out)
        })
    }

    fn domain_action(
        &self,
        name: &str,
        procedure: &Procedure,
        args: impl FnOnce(&mut Encoder),
    ) -> HvResult<()> {
        self.domain_call(name, procedure, args, |_, _| Ok(()))
    }
}

/// Whether a call failed because the daemon has no such domain.
fn no_domain<T>(result: &HvResult<T>) -> bool {
    result
        .as_ref()
        .is_err_and(|e| e.kind == HypervisorErrorKind::NoDomain)
}

/// Decodes a whole reply payload; anything left over or missing is an
/// `Other` (Internal) error naming the call.
fn decode_reply<T>(
    operation: &'static str,
    reply: &[u8],
    decode: impl FnOnce(&mut Decoder) -> DecodeResult<T>,
) -> HvResult<T> {
    let mut d = Decoder::new(reply);
    decode(&mut d)
        .and_then(|v| d.finish().map(|()| v))
        .map_err(|e| {
            HypervisorError::new(
                HypervisorErrorKind::Other,
                operation,
                format!("the daemon's reply does not decode: {e}"),
            )
        })
}

/// One call on a connection without a domain.
fn call(
    client: &Client,
    procedure: &Procedure,
    args: impl FnOnce(&mut Encoder),
) -> Result<Vec<u8>, RpcError> {
    let mut e = Encoder::new();
    args(&mut e);
    client.call(procedure, &e.into_bytes(), procedure.deadline)
}

/// Opens the connection (`handshake`), then reads the facts and registers
/// for events.
fn open(
    uri: &str,
    target: &Target,
    domain_name: &str,
    reporter: LossReporter,
    options: ClientOptions,
) -> HvResult<(Arc<Client>, HypervisorInfo)> {
    let router = EventRouter {
        domain: domain_name.to_string(),
        tx: reporter.tx.clone(),
        reporter,
    };
    let (client, keepalive) = handshake(target, options, Box::new(router))?;
    let failed = |operation: &'static str| move |e: RpcError| convert_error(operation, e);
    let supports = |feature: i32| -> HvResult<bool> {
        let reply = call(&client, &proc::CONNECT_SUPPORTS_FEATURE, |e| {
            e.i32(feature);
        })
        .map_err(failed(proc::CONNECT_SUPPORTS_FEATURE.api))?;
        decode_reply(proc::CONNECT_SUPPORTS_FEATURE.api, &reply, |d| d.i32()).map(|v| v != 0)
    };
    if !supports(features::REMOTE_EVENT_CALLBACK)? {
        return Err(HypervisorError::new(
            HypervisorErrorKind::Unsupported,
            "virConnectOpen",
            "the daemon is too old for per-callback events (libvirt 1.2.1 or later is needed)",
        ));
    }
    if supports(features::REMOTE_CLOSE_CALLBACK)? {
        call(&client, &proc::CONNECT_REGISTER_CLOSE_CALLBACK, |_| {})
            .map_err(failed(proc::CONNECT_REGISTER_CLOSE_CALLBACK.api))?;
    }
    let info = read_info(uri, &client)?;
    for event_id in [
        event_ids::LIFECYCLE,
        event_ids::REBOOT,
        event_ids::DEVICE_REMOVED,
        event_ids::DEVICE_ADDED,
        event_ids::AGENT_LIFECYCLE,
        event_ids::JOB_COMPLETED,
    ] {
        let api = proc::CONNECT_DOMAIN_EVENT_CALLBACK_REGISTER_ANY.api;
        // Any domain: the launcher's may not exist yet. Events of other
        // domains are dropped by the router.
        let reply = call(
            &client,
            &proc::CONNECT_DOMAIN_EVENT_CALLBACK_REGISTER_ANY,
            |e| {
                e.i32(event_id).u32(0);
            },
        )
        .map_err(failed(api))?;
        decode_reply(api, &reply, |d| d.i32())?;
    }
    if keepalive {
        client.enable_keepalive();
    }
    Ok((Arc::new(client), info))
}

/// Connects to the daemon's socket and opens the connection as libvirt's
/// remote driver does: authentication, keepalive support asked (which also
/// tells the daemon to probe this client), open. Returns the client and
/// whether the daemon speaks keepalive.
fn handshake(
    target: &Target,
    options: ClientOptions,
    listener: Box<dyn Listener>,
) -> HvResult<(Client, bool)> {
    let op = "virConnectOpen";
    let client = Client::connect(&target.socket, options, listener).map_err(|e| {
        HypervisorError::new(
            HypervisorErrorKind::ConnectionLost,
            op,
            format!(
                "cannot connect to the libvirt daemon's socket {}: {e}",
                target.socket.display()
            ),
        )
    })?;
    let failed = |operation: &'static str| move |e: RpcError| convert_error(operation, e);

    let reply = call(&client, &proc::AUTH_LIST, |_| {}).map_err(failed(op))?;
    let methods = decode_reply(op, &reply, |d| {
        let n = d.array_len(limits::AUTH_TYPE_LIST_MAX, 4)?;
        (0..n).map(|_| d.u32()).collect::<DecodeResult<Vec<u32>>>()
    })?;
    if !methods.is_empty() && !methods.contains(&auth::NONE) {
        if methods.contains(&auth::POLKIT) {
            call(&client, &proc::AUTH_POLKIT, |_| {}).map_err(failed(op))?;
        } else {
            return Err(HypervisorError::new(
                HypervisorErrorKind::Unsupported,
                op,
                format!(
                    "the daemon at {} requires SASL authentication, which this build does not implement; use a unix socket whose auth is none or polkit",
                    target.socket.display()
                ),
            ));
        }
    }
    let supports = |feature: i32| -> HvResult<bool> {
        let reply = call(&client, &proc::CONNECT_SUPPORTS_FEATURE, |e| {
            e.i32(feature);
        })
        .map_err(failed(proc::CONNECT_SUPPORTS_FEATURE.api))?;
        decode_reply(proc::CONNECT_SUPPORTS_FEATURE.api, &reply, |d| d.i32()).map(|v| v != 0)
    };
    // Asking also tells the daemon to probe this client with keepalives.
    let keepalive = supports(features::PROGRAM_KEEPALIVE)?;
    call(&client, &proc::CONNECT_OPEN, |e| {
        e.opt_string(Some(&target.name)).u32(0);
    })
    .map_err(failed(op))?;
    Ok((client, keepalive))
}

fn read_info(uri: &str, client: &Client) -> HvResult<HypervisorInfo> {
    let simple = |procedure: &Procedure| -> HvResult<Vec<u8>> {
        call(client, procedure, |_| {}).map_err(|e| convert_error(procedure.api, e))
    };
    let driver_name = decode_reply(
        proc::CONNECT_GET_TYPE.api,
        &simple(&proc::CONNECT_GET_TYPE)?,
        |d| d.string(),
    )?;
    let driver = match driver_name.to_ascii_uppercase().as_str() {
        "QEMU" => DriverKind::Qemu,
        "TEST" => DriverKind::Test,
        other => {
            return Err(HypervisorError::new(
                HypervisorErrorKind::Unsupported,
                proc::CONNECT_GET_TYPE.api,
                format!(
                    "{uri} is a {other} connection; virt-launcher runs QEMU domains (qemu:///system, qemu:///session) or libvirt's test driver (test+unix:///default)"
                ),
            ));
        }
    };
    let daemon = decode_reply(
        proc::CONNECT_GET_LIB_VERSION.api,
        &simple(&proc::CONNECT_GET_LIB_VERSION)?,
        |d| d.u64(),
    )?;
    // Not virConnectGetVersion: see `HypervisorInfo`.
    Ok(HypervisorInfo {
        uri: uri.to_string(),
        driver,
        backend: "wire",
        library_version: None,
        daemon_version: dotted_version(daemon),
    })
}

/// The same kinds the `virt` backend derives from the same libvirt codes.
fn convert_error(operation: &'static str, e: RpcError) -> HypervisorError {
    let (kind, message) = match e {
        RpcError::Remote(remote) => {
            let error = LibvirtError {
                code: remote.code,
                domain: remote.domain,
                message: &remote.message,
            };
            // The daemon answered, so our connection works: an RPC error
            // here comes from a connection the daemon made (a peer-to-peer
            // migration's link to the target).
            let kind =
                HypervisorErrorKind::from_libvirt(error, operation, HypervisorErrorKind::Other);
            (kind, remote.message)
        }
        RpcError::ConnectionLost(why) => (HypervisorErrorKind::ConnectionLost, why),
        RpcError::Timeout(waited) => (
            HypervisorErrorKind::Timeout,
            format!(
                "the libvirt daemon did not answer within {} s",
                waited.as_secs()
            ),
        ),
        RpcError::Protocol(what) => (HypervisorErrorKind::Other, what),
    };
    HypervisorError::new(kind, operation, message)
}

/// Turns the daemon's event messages into `HypervisorEvent`s for the
/// launcher's domain. Runs on the RPC reader thread: decode, send (the
/// manager's inbox never blocks), return.
struct EventRouter {
    domain: String,
    tx: Sink<HypervisorEvent>,
    /// Reports this connection's loss (once, see `LossReporter`).
    reporter: LossReporter,
}

impl EventRouter {
    fn deliver(&self, event: HypervisorEvent) {
        // The manager's inbox never blocks a sender; `Closed` means the
        // manager has exited and nothing is listening any more.
        let _ = self.tx.send(event);
    }
}

impl Listener for EventRouter {
    fn event(&mut self, procedure: i32, payload: &[u8]) {
        match decode_event(procedure, payload, self.reporter.connection) {
            Ok(Some((Some(domain), event))) if domain.name == self.domain => self.deliver(event),
            Ok(Some((Some(_other_domain), _))) => {}
            Ok(Some((None, HypervisorEvent::ConnectionClosed { reason, .. }))) => {
                self.reporter.report(reason)
            }
            Ok(Some((None, event))) => self.deliver(event),
            Ok(None) => log::warn!(
                "events: ignoring event procedure {procedure} from the daemon: this client never registered for it"
            ),
            Err(e) => log::warn!(
                "events: ignoring event procedure {procedure} from the daemon, which does not decode: {e}"
            ),
        }
    }

    fn closed(&mut self, reason: CloseReason, _detail: &str) {
        self.reporter
            .report(LibvirtCloseReason::from_libvirt(reason.libvirt_code()));
    }
}

/// An event message: its domain (None for connection events) and what it
/// means; `None` for a procedure this client does not know.
type DecodedEvent = Option<(Option<DomainRef>, HypervisorEvent)>;

fn decode_event(
    procedure: i32,
    payload: &[u8],
    connection: ConnectionId,
) -> DecodeResult<DecodedEvent> {
    let mut d = Decoder::new(payload);
    let decoded = match procedure {
        events::LIFECYCLE => {
            let _callback = d.i32()?;
            let dom = decode_domain(&mut d)?;
            let event = d.i32()?;
            let detail = d.i32()?;
            Some((
                Some(dom),
                HypervisorEvent::Lifecycle(LifecycleEvent::from_libvirt(event, detail)),
            ))
        }
        events::REBOOT => {
            let _callback = d.i32()?;
            Some((Some(decode_domain(&mut d)?), HypervisorEvent::Reboot))
        }
        events::DEVICE_ADDED => {
            let _callback = d.i32()?;
            let dom = decode_domain(&mut d)?;
            let alias = d.string()?;
            Some((Some(dom), HypervisorEvent::DeviceAdded { alias }))
        }
        events::DEVICE_REMOVED => {
            let _callback = d.i32()?;
            let dom = decode_domain(&mut d)?;
            let alias = d.string()?;
            Some((Some(dom), HypervisorEvent::DeviceRemoved { alias }))
        }
        events::AGENT_LIFECYCLE => {
            let _callback = d.i32()?;
            let dom = decode_domain(&mut d)?;
            let state = d.i32()?;
            let reason = d.i32()?;
            Some((
                Some(dom),
                HypervisorEvent::AgentLifecycle(AgentLifecycle::from_libvirt(state, reason)),
            ))
        }
        events::JOB_COMPLETED => {
            let _callback = d.i32()?;
            let dom = decode_domain(&mut d)?;
            let stats = d.typed_params(limits::JOB_STATS_MAX)?;
            Some((Some(dom), HypervisorEvent::JobCompleted { stats }))
        }
        events::CONNECTION_CLOSED => {
            let reason = d.i32()?;
            Some((
                None,
                HypervisorEvent::ConnectionClosed {
                    connection,
                    reason: LibvirtCloseReason::from_libvirt(reason),
                },
            ))
        }
        _ => return Ok(None),
    };
    d.finish()?;
    Ok(decoded)
}

fn guest_info_types(kinds: &[GuestInfoKind]) -> u32 {
    kinds.iter().fold(0, |acc, kind| {
        acc | match kind {
            GuestInfoKind::Users => flags::GUEST_INFO_USERS,
            GuestInfoKind::Os => flags::GUEST_INFO_OS,
            GuestInfoKind::Timezone => flags::GUEST_INFO_TIMEZONE,
            GuestInfoKind::Hostname => flags::GUEST_INFO_HOSTNAME,
            GuestInfoKind::Filesystems => flags::GUEST_INFO_FILESYSTEM,
            GuestInfoKind::Interfaces => flags::GUEST_INFO_INTERFACES,
        }
    })
}

fn migration_flags(request: &MigrationRequest) -> u32 {
    let mut f = flags::MIGRATE_LIVE | flags::MIGRATE_PEER2PEER | flags::MIGRATE_PERSIST_DEST;
    if !request.block_disks.is_empty() {
        f |= flags::MIGRATE_NON_SHARED_INC;
    }
    if request.auto_converge {
        f |= flags::MIGRATE_AUTO_CONVERGE;
    }
    if request.post_copy {
        f |= flags::MIGRATE_POSTCOPY;
    }
    if request.unsafe_migration {
        f |= flags::MIGRATE_UNSAFE;
    }
    if request.parallel_connections.is_some() {
        f |= flags::MIGRATE_PARALLEL;
    }
    if request.compression.is_some() {
        f |= flags::MIGRATE_COMPRESSED;
    }
    f
}

/// The migration's typed parameters, as the `virt` backend builds them.
fn migration_params(request: &MigrationRequest) -> Vec<TypedParam> {
    let mut params = Vec::new();
    if let Some(uri) = &request.migration_uri {
        params.push(TypedParam::string(migrate_params::URI, uri));
    }
    if let Some(xml) = &request.dest_xml {
        params.push(TypedParam::string(migrate_params::DEST_XML, xml));
        params.push(TypedParam::string(migrate_params::PERSIST_XML, xml));
    }
    if let Some(bandwidth) = request.bandwidth_mib_per_s {
        params.push(TypedParam::ullong(migrate_params::BANDWIDTH, bandwidth));
    }
    if let Some(uri) = &request.disks_uri {
        params.push(TypedParam::string(migrate_params::DISKS_URI, uri));
    }
    // A string list is the same name repeated.
    for disk in &request.block_disks {
        params.push(TypedParam::string(migrate_params::MIGRATE_DISKS, disk));
    }
    if let Some(connections) = request.parallel_connections {
        params.push(TypedParam {
            name: migrate_params::PARALLEL_CONNECTIONS.to_string(),
            value: TypedValue::Int(i32::try_from(connections).unwrap_or(i32::MAX)),
        });
    }
    if let Some(method) = &request.compression {
        params.push(TypedParam::string(migrate_params::COMPRESSION, method));
    }
    params
}

impl Hypervisor for WireHypervisor {
    fn info(&self) -> HypervisorInfo {
        match self.info.read() {
            Ok(info) => info.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn domain_status(&self, name: &str) -> HvResult<Option<DomainStatus>> {
        let result = self.domain_call(
            name,
            &proc::DOMAIN_GET_STATE,
            |e| {
                e.u32(0);
            },
            |_, d| {
                let state = d.i32()?;
                let reason = d.i32()?;
                Ok(DomainStatus::from_libvirt(state, reason))
            },
        );
        match result {
            Ok(status) => Ok(Some(status)),
            // Not defined, or undefined between the lookup and the query.
            Err(e) if e.kind == HypervisorErrorKind::NoDomain => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn define(&self, xml: &str) -> HvResult<()> {
        let op = proc::DOMAIN_DEFINE_XML_FLAGS.api;
        let client = self.connection(op)?;
        call(&client, &proc::DOMAIN_DEFINE_XML_FLAGS, |e| {
            // No VALIDATE flag: see `Hypervisor::define`.
            e.string(xml).u32(0);
        })
        .map_err(|e| self.error(op, e))
        .and_then(|reply| decode_reply(op, &reply, decode_domain))
        .map(drop)
    }

    fn undefine(&self, name: &str) -> HvResult<()> {
        // Keep NVRAM like KubeVirt; the test driver rejects the flag.
        let f = match self.info().driver {
            DriverKind::Test => 0,
            DriverKind::Qemu => flags::DOMAIN_UNDEFINE_KEEP_NVRAM,
        };
        self.domain_action(name, &proc::DOMAIN_UNDEFINE_FLAGS, |e| {
            e.u32(f);
        })
    }

    fn start(&self, name: &str, paused: bool) -> HvResult<()> {
        let f = if paused {
            flags::DOMAIN_START_PAUSED
        } else {
            0
        };
        self.domain_call(
            name,
            &proc::DOMAIN_CREATE_WITH_FLAGS,
            |e| {
                e.u32(f);
            },
            |_, d| decode_domain(d).map(drop),
        )
    }

    fn suspend(&self, name: &str) -> HvResult<()> {
        self.domain_action(name, &proc::DOMAIN_SUSPEND, |_| {})
    }

    fn resume(&self, name: &str) -> HvResult<()> {
        self.domain_action(name, &proc::DOMAIN_RESUME, |_| {})
    }

    fn shutdown_acpi(&self, name: &str) -> HvResult<()> {
        // The test driver has no ACPI and rejects the flag.
        let f = match self.info().driver {
            DriverKind::Test => 0,
            DriverKind::Qemu => flags::DOMAIN_SHUTDOWN_ACPI_POWER_BTN,
        };
        self.domain_action(name, &proc::DOMAIN_SHUTDOWN_FLAGS, |e| {
            e.u32(f);
        })
    }

    fn reboot(&self, name: &str, mode: RebootMode) -> HvResult<()> {
        let f = match mode {
            RebootMode::GuestAgent => flags::DOMAIN_REBOOT_GUEST_AGENT,
            RebootMode::Acpi => flags::DOMAIN_REBOOT_ACPI_POWER_BTN,
        };
        self.domain_action(name, &proc::DOMAIN_REBOOT, |e| {
            e.u32(f);
        })
    }

    fn reset(&self, name: &str) -> HvResult<()> {
        self.domain_action(name, &proc::DOMAIN_RESET, |e| {
            e.u32(0);
        })
    }

    fn destroy(&self, name: &str, graceful: bool) -> HvResult<()> {
        let f = if graceful {
            flags::DOMAIN_DESTROY_GRACEFUL
        } else {
            0
        };
        self.domain_action(name, &proc::DOMAIN_DESTROY_FLAGS, |e| {
            e.u32(f);
        })
    }

    fn domain_xml(&self, name: &str) -> HvResult<(String, String)> {
        self.domain_call(
            name,
            &proc::DOMAIN_GET_XML_DESC,
            |e| {
                e.u32(0);
            },
            |dom, d| Ok((d.string()?, dom.uuid_string())),
        )
    }

    fn domain_xml_and_status(
        &self,
        name: &str,
    ) -> HvResult<((String, String), Option<DomainStatus>)> {
        let xml_call = &proc::DOMAIN_GET_XML_DESC;
        let state_call = &proc::DOMAIN_GET_STATE;
        let client = self.connection(xml_call.api)?;
        // Both calls go out before either reply is awaited: the daemon
        // answers them in parallel, one round trip instead of two.
        let both = |dom: &DomainRef| {
            let send = |procedure: &Procedure| {
                let mut e = Encoder::new();
                dom.encode(&mut e);
                e.u32(0);
                client.send_call(procedure, &e.into_bytes())
            };
            let (xml, state) = (send(xml_call), send(state_call));
            let wait = |pending: Result<PendingCall, RpcError>, procedure: &Procedure| {
                pending
                    .and_then(|p| client.wait_reply(p, procedure.deadline))
                    .map_err(|e| self.error(procedure.api, e))
            };
            (wait(xml, xml_call), wait(state, state_call))
        };
        let ((xml, state), dom) =
            self.on_domain(&client, name, xml_call.api, both, |(xml, state)| {
                no_domain(xml) || no_domain(state)
            })?;
        let xml = decode_reply(xml_call.api, &xml?, |d| d.string())?;
        let status = match state {
            Ok(reply) => Some(decode_reply(state_call.api, &reply, |d| {
                Ok(DomainStatus::from_libvirt(d.i32()?, d.i32()?))
            })?),
            // Undefined between the two calls.
            Err(e) if e.kind == HypervisorErrorKind::NoDomain => None,
            Err(e) => return Err(e),
        };
        Ok(((xml, dom.uuid_string()), status))
    }

    fn stats(&self, name: &str) -> HvResult<Vec<Stat>> {
        let wanted = flags::DOMAIN_STATS_STATE
            | flags::DOMAIN_STATS_CPU_TOTAL
            | flags::DOMAIN_STATS_BALLOON
            | flags::DOMAIN_STATS_VCPU
            | flags::DOMAIN_STATS_INTERFACE
            | flags::DOMAIN_STATS_BLOCK
            // As KubeVirt's GetDomainStats asks (`dirtyrate.calc_*`).
            | flags::DOMAIN_STATS_DIRTYRATE;
        // NOWAIT: what is available rather than queue behind a running
        // job.
        self.domain_stats(name, wanted, flags::GET_ALL_DOMAINS_STATS_NOWAIT)
    }

    fn attach_device(&self, name: &str, xml: &str, affect: Affect) -> HvResult<()> {
        self.domain_action(name, &proc::DOMAIN_ATTACH_DEVICE_FLAGS, |e| {
            e.string(xml).u32(affect.flags());
        })
    }

    fn detach_device(&self, name: &str, xml: &str, affect: Affect) -> HvResult<()> {
        self.domain_action(name, &proc::DOMAIN_DETACH_DEVICE_FLAGS, |e| {
            e.string(xml).u32(affect.flags());
        })
    }

    fn update_device(&self, name: &str, xml: &str, affect: Affect) -> HvResult<()> {
        self.domain_action(name, &proc::DOMAIN_UPDATE_DEVICE_FLAGS, |e| {
            e.string(xml).u32(affect.flags());
        })
    }

    fn set_vcpus(&self, name: &str, count: u32, affect: Affect) -> HvResult<()> {
        self.domain_action(name, &proc::DOMAIN_SET_VCPUS_FLAGS, |e| {
            e.u32(count).u32(affect.flags());
        })
    }

    fn agent_command(&self, name: &str, command: &str, timeout: Duration) -> HvResult<String> {
        let seconds = i32::try_from(timeout.as_secs().max(1)).unwrap_or(i32::MAX);
        let op = proc::QEMU_DOMAIN_AGENT_COMMAND.api;
        let result = self.domain_call_within(
            name,
            &proc::QEMU_DOMAIN_AGENT_COMMAND,
            timeout + AGENT_DEADLINE_MARGIN,
            |e| {
                e.string(command).i32(seconds).u32(0);
            },
            |_, d| d.opt_string(),
        )?;
        result.ok_or_else(|| {
            HypervisorError::new(
                HypervisorErrorKind::Other,
                op,
                "the daemon returned no result for the agent command",
            )
        })
    }

    fn set_agent_timeout(&self, name: &str, timeout: Duration) -> HvResult<()> {
        self.set_agent_timeout_of(name, timeout)
    }

    fn guest_info(&self, name: &str, kinds: &[GuestInfoKind]) -> HvResult<Vec<Stat>> {
        let types = guest_info_types(kinds);
        self.domain_call(
            name,
            &proc::DOMAIN_GET_GUEST_INFO,
            |e| {
                e.u32(types).u32(0);
            },
            |_, d| d.typed_params(limits::GUEST_INFO_PARAMS_MAX),
        )
    }

    fn sync_guest_time(&self, name: &str, timeout: Duration) -> HvResult<()> {
        self.set_agent_timeout_of(name, timeout)?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let seconds = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
        self.domain_action(name, &proc::DOMAIN_SET_TIME, |e| {
            e.i64(seconds).u32(now.subsec_nanos()).u32(0);
        })
    }

    fn migratable_xml(&self, name: &str) -> HvResult<String> {
        self.domain_call(
            name,
            &proc::DOMAIN_GET_XML_DESC,
            |e| {
                e.u32(flags::DOMAIN_XML_MIGRATABLE | flags::DOMAIN_XML_SECURE);
            },
            |_, d| d.string(),
        )
    }

    fn migrate(&self, name: &str, request: &MigrationRequest) -> HvResult<()> {
        let params = migration_params(request);
        let f = migration_flags(request);
        self.domain_call(
            name,
            &proc::DOMAIN_MIGRATE_PERFORM3_PARAMS,
            |e| {
                e.opt_string(Some(&request.target_uri))
                    .typed_params(&params)
                    // No cookie: the source daemon runs the whole protocol.
                    .opaque(&[])
                    .u32(f);
            },
            |_, d| d.opaque(limits::MIGRATE_COOKIE_MAX).map(drop),
        )
    }

    fn job_stats(&self, name: &str, completed: bool) -> HvResult<Vec<Stat>> {
        let f = if completed {
            flags::DOMAIN_JOB_STATS_COMPLETED
        } else {
            0
        };
        self.domain_call(
            name,
            &proc::DOMAIN_GET_JOB_STATS,
            |e| {
                e.u32(f);
            },
            |_, d| {
                let job_type = d.i32()?;
                let mut out = d.typed_params(limits::JOB_STATS_MAX)?;
                out.push(("type".to_string(), Value::from(job_type)));
                Ok(out)
            },
        )
    }

    fn abort_job(&self, name: &str) -> HvResult<()> {
        self.domain_action(name, &proc::DOMAIN_ABORT_JOB, |_| {})
    }

    fn migrate_start_post_copy(&self, name: &str) -> HvResult<()> {
        self.domain_action(name, &proc::DOMAIN_MIGRATE_START_POST_COPY, |e| {
            e.u32(0);
        })
    }

    fn migrate_set_max_downtime(&self, name: &str, milliseconds: u64) -> HvResult<()> {
        self.domain_action(name, &proc::DOMAIN_MIGRATE_SET_MAX_DOWNTIME, |e| {
            e.u64(milliseconds).u32(0);
        })
    }

    fn hypervisor_version(&self) -> HvResult<u64> {
        let op = proc::CONNECT_GET_VERSION.api;
        let client = self.connection(op)?;
        let reply =
            call(&client, &proc::CONNECT_GET_VERSION, |_| {}).map_err(|e| self.error(op, e))?;
        decode_reply(op, &reply, |d| d.u64())
    }

    fn versions_at(&self, uri: &str) -> HvResult<DaemonVersions> {
        let target = uri::resolve(uri, &Environment::of_this_process()).map_err(|e| {
            HypervisorError::new(HypervisorErrorKind::Unsupported, "virConnectOpen", e)
        })?;
        // Nothing is registered on it, so nothing arrives but its close.
        struct Unheard;
        impl Listener for Unheard {
            fn event(&mut self, _procedure: i32, _payload: &[u8]) {}
            fn closed(&mut self, _reason: CloseReason, _detail: &str) {}
        }
        let (client, _) = handshake(&target, self.options, Box::new(Unheard))?;
        let simple = |procedure: &Procedure| -> HvResult<Vec<u8>> {
            call(&client, procedure, |_| {}).map_err(|e| convert_error(procedure.api, e))
        };
        let read = (|| {
            let driver = decode_reply(
                proc::CONNECT_GET_TYPE.api,
                &simple(&proc::CONNECT_GET_TYPE)?,
                |d| d.string(),
            )?;
            let daemon = decode_reply(
                proc::CONNECT_GET_LIB_VERSION.api,
                &simple(&proc::CONNECT_GET_LIB_VERSION)?,
                |d| d.u64(),
            )?;
            let hypervisor = decode_reply(
                proc::CONNECT_GET_VERSION.api,
                &simple(&proc::CONNECT_GET_VERSION)?,
                |d| d.u64(),
            )?;
            Ok(DaemonVersions {
                libvirt: dotted_version(daemon),
                hypervisor: format!("{driver} {}", dotted_version(hypervisor)),
            })
        })();
        // As libvirt's client closes: the daemon then ends the connection.
        if let Err(e) = call(&client, &proc::CONNECT_CLOSE, |_| {}) {
            log::debug!("hypervisor: closing the connection to {uri}: {e}");
        }
        client.close();
        read
    }

    fn start_dirty_rate_calc(&self, name: &str, seconds: u32) -> HvResult<()> {
        let seconds = i32::try_from(seconds).unwrap_or(i32::MAX);
        self.domain_action(name, &proc::DOMAIN_START_DIRTY_RATE_CALC, |e| {
            e.i32(seconds)
                .u32(flags::DOMAIN_DIRTYRATE_MODE_PAGE_SAMPLING);
        })
    }

    fn dirty_rate_stats(&self, name: &str) -> HvResult<Vec<Stat>> {
        self.domain_stats(name, flags::DOMAIN_STATS_DIRTYRATE, 0)
    }

    fn dump_memory(&self, name: &str, path: &Path) -> HvResult<()> {
        let op = proc::DOMAIN_CORE_DUMP_WITH_FORMAT.api;
        let to = path.to_str().ok_or_else(|| {
            HypervisorError::new(
                HypervisorErrorKind::Other,
                op,
                format!("{} is not valid UTF-8", path.display()),
            )
        })?;
        self.domain_action(name, &proc::DOMAIN_CORE_DUMP_WITH_FORMAT, |e| {
            e.string(to)
                .u32(flags::DOMAIN_CORE_DUMP_FORMAT_RAW)
                .u32(flags::DUMP_MEMORY_ONLY);
        })
    }

    fn disk_errors(&self, name: &str) -> HvResult<Vec<DiskError>> {
        // One call with room for as many as the protocol carries: the
        // daemon fills what there is (remote_domain_get_disk_errors_ret:
        // errors<>, then their count).
        self.domain_call(
            name,
            &proc::DOMAIN_GET_DISK_ERRORS,
            |e| {
                let room = u32::try_from(limits::DOMAIN_DISK_ERRORS_MAX).unwrap_or(u32::MAX);
                e.u32(room).u32(0);
            },
            |_, d| {
                // An entry is at least an empty string and a code.
                let len = d.array_len(limits::DOMAIN_DISK_ERRORS_MAX, 8)?;
                let mut errors = Vec::with_capacity(len);
                for _ in 0..len {
                    let target = d.string()?;
                    let code = d.i32()?;
                    if let Some(kind) = DiskErrorKind::from_code(i64::from(code)) {
                        errors.push(DiskError { target, kind });
                    }
                }
                let _count = d.i32()?;
                Ok(errors)
            },
        )
    }

    fn screenshot(&self, name: &str, screen: u32) -> HvResult<Screenshot> {
        let procedure = &proc::DOMAIN_SCREENSHOT;
        let op = procedure.api;
        let client = self.connection(op)?;
        let attempt = |dom: &DomainRef| {
            let mut e = Encoder::new();
            dom.encode(&mut e);
            e.u32(screen).u32(0);
            client
                .call_reading_stream(
                    procedure,
                    &e.into_bytes(),
                    procedure.deadline,
                    MAX_SCREENSHOT_BYTES,
                )
                .map_err(|e| self.error(op, e))
        };
        let (streamed, _) = self.on_domain(&client, name, op, attempt, no_domain)?;
        let streamed = streamed?;
        let mime = decode_reply(op, &streamed.reply, |d| d.opt_string())?;
        Ok(Screenshot {
            // libvirt's own client fails on a missing MIME type too.
            mime: mime.ok_or_else(|| {
                HypervisorError::new(
                    HypervisorErrorKind::Other,
                    op,
                    "the daemon named no MIME type for the screenshot",
                )
            })?,
            data: streamed.data,
        })
    }

    fn backup_begin(
        &self,
        name: &str,
        backup_xml: &str,
        checkpoint_xml: Option<&str>,
    ) -> HvResult<()> {
        self.domain_action(name, &proc::DOMAIN_BACKUP_BEGIN, |e| {
            e.string(backup_xml).opt_string(checkpoint_xml).u32(0);
        })
    }

    fn checkpoint_create(&self, name: &str, xml: &str, redefine: bool) -> HvResult<()> {
        let f = if redefine {
            flags::DOMAIN_CHECKPOINT_CREATE_REDEFINE
                | flags::DOMAIN_CHECKPOINT_CREATE_REDEFINE_VALIDATE
        } else {
            0
        };
        // The reply is the new checkpoint's reference (its name and the
        // domain), which the launcher does not need but must read whole.
        self.domain_call(
            name,
            &proc::DOMAIN_CHECKPOINT_CREATE_XML,
            |e| {
                e.string(xml).u32(f);
            },
            |_, d| {
                d.string()?;
                decode_domain(d)?;
                Ok(())
            },
        )
    }

    fn checkpoint_names(&self, name: &str) -> HvResult<Vec<String>> {
        self.domain_call(
            name,
            &proc::DOMAIN_LIST_ALL_CHECKPOINTS,
            |e| {
                // need_results: 1, then the flags.
                e.i32(1).u32(flags::DOMAIN_CHECKPOINT_LIST_TOPOLOGICAL);
            },
            |_, d| {
                // A checkpoint reference: its name, then the domain's (name,
                // UUID, id).
                let n = d.array_len(limits::DOMAIN_CHECKPOINT_LIST_MAX, 28)?;
                let mut names = Vec::with_capacity(n);
                for _ in 0..n {
                    names.push(d.string()?);
                    decode_domain(d)?;
                }
                d.i32()?;
                Ok(names)
            },
        )
    }

    fn checkpoint_xml(&self, name: &str, checkpoint: &str) -> HvResult<String> {
        let procedure = &proc::DOMAIN_CHECKPOINT_GET_XML_DESC;
        let op = procedure.api;
        let client = self.connection(op)?;
        let (reply, _) =
            self.call_on_domain(&client, name, procedure, procedure.deadline, |dom, e| {
                e.string(checkpoint);
                dom.encode(e);
                e.u32(flags::DOMAIN_CHECKPOINT_XML_NO_DOMAIN);
            })?;
        decode_reply(op, &reply, |d| d.string())
    }

    fn checkpoint_delete(&self, name: &str, checkpoint: &str, metadata_only: bool) -> HvResult<()> {
        let procedure = &proc::DOMAIN_CHECKPOINT_DELETE;
        let op = procedure.api;
        let f = if metadata_only {
            flags::DOMAIN_CHECKPOINT_DELETE_METADATA_ONLY
        } else {
            0
        };
        let client = self.connection(op)?;
        let (reply, _) =
            self.call_on_domain(&client, name, procedure, procedure.deadline, |dom, e| {
                e.string(checkpoint);
                dom.encode(e);
                e.u32(f);
            })?;
        decode_reply(op, &reply, |_| Ok(()))
    }

    fn reconnect(&self) -> HvResult<ConnectionId> {
        let poisoned = || {
            HypervisorError::new(
                HypervisorErrorKind::Other,
                "reconnect",
                "connection lock poisoned by a panicked thread",
            )
        };
        // The old connection goes first: calls meanwhile fail at once as
        // not connected, and its reporter no longer reports (the live
        // connection is the new one from here on).
        let old = self.conn.write().map_err(|_| poisoned())?.take();
        if let Some(old) = old {
            old.close();
        }
        // The daemon may have restarted with the domain defined anew.
        if let Ok(mut cached) = self.domain.lock() {
            *cached = None;
        }
        let id = ConnectionId(self.current.load(Ordering::Acquire)).next();
        self.current.store(id.0, Ordering::Release);
        self.live.store(id.0, Ordering::Release);
        let opened = open(
            &self.uri,
            &self.target,
            &self.domain_name,
            self.reporter(id),
            self.options,
        );
        let (client, info) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                let _ = self
                    .live
                    .compare_exchange(id.0, 0, Ordering::AcqRel, Ordering::Acquire);
                return Err(e);
            }
        };
        if let Ok(mut guard) = self.info.write() {
            *guard = info;
        }
        *self.conn.write().map_err(|_| poisoned())? = Some(client);
        Ok(id)
    }
}

#[cfg(test)]
mod tests;
