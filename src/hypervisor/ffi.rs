//! Every raw libvirt call the `virt` crate does not wrap safely: the event
//! implementation, domain event and close callbacks, and typed-parameter
//! results (bulk stats, job statistics, guest info).
//!
//! Callbacks run on the libvirt event-loop thread. They only copy data out
//! of libvirt's arguments and send it to the manager's inbox, which never
//! blocks a sender; they never call into libvirt (apart from
//! `virDomainGetName`, a plain accessor of the domain object that does no
//! I/O).

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::ptr;

use crossbeam_channel::Sender;
use serde_json::Value;
use virt::connect::Connect;
use virt::domain::Domain;
use virt::error::Error;
use virt::sys;

use super::{AgentLifecycle, CloseReason, HypervisorEvent, LifecycleEvent, LossReporter, Stat};
use crate::sink::Sink;

/// Registers libvirt's default event loop implementation. Must run before
/// any connection is opened.
pub fn register_default_event_impl() -> Result<(), Error> {
    // SAFETY: no arguments; libvirt documents it as callable once at start.
    if unsafe { sys::virEventRegisterDefaultImpl() } < 0 {
        return Err(Error::last_error());
    }
    Ok(())
}

/// Runs one iteration of the default event loop (blocks until something
/// happens).
pub fn run_default_event_loop_once() -> Result<(), Error> {
    // SAFETY: the default implementation was registered at start-up.
    if unsafe { sys::virEventRunDefaultImpl() } < 0 {
        return Err(Error::last_error());
    }
    Ok(())
}

/// Arms a one-shot timer on the event loop that sends `()` when the loop
/// dispatches it: proof that the loop is running.
pub fn notify_when_loop_runs(tx: Sender<()>) -> Result<(), Error> {
    unsafe extern "C" fn fire(timer: c_int, opaque: *mut c_void) {
        // SAFETY: opaque is the Box<Sender<()>> leaked below; libvirt keeps
        // it alive until `free_sender` runs after removal.
        let tx = unsafe { &*(opaque as *const Sender<()>) };
        let _ = tx.try_send(());
        // SAFETY: removing the timer that is running is allowed; libvirt
        // frees the opaque later through the free callback.
        unsafe { sys::virEventRemoveTimeout(timer) };
    }
    unsafe extern "C" fn free_sender(opaque: *mut c_void) {
        // SAFETY: created by Box::into_raw below, freed exactly once here.
        drop(unsafe { Box::from_raw(opaque as *mut Sender<()>) });
    }
    let opaque = Box::into_raw(Box::new(tx)) as *mut c_void;
    // SAFETY: callbacks match libvirt's signatures; opaque ownership passes
    // to libvirt on success.
    let id = unsafe { sys::virEventAddTimeout(0, Some(fire), opaque, Some(free_sender)) };
    if id < 0 {
        // SAFETY: libvirt did not take ownership on failure.
        drop(unsafe { Box::from_raw(opaque as *mut Sender<()>) });
        return Err(Error::last_error());
    }
    Ok(())
}

/// Where a callback delivers what it copied: events for one domain name.
struct EventSink {
    domain: CString,
    tx: Sink<HypervisorEvent>,
}

impl EventSink {
    /// True when the callback's domain is the launcher's.
    ///
    /// # Safety
    /// `dom` must be the domain pointer libvirt passed to the callback.
    unsafe fn is_ours(&self, dom: sys::virDomainPtr) -> bool {
        if dom.is_null() {
            return false;
        }
        // SAFETY: accessor on a valid domain; returns a string owned by it.
        let name = unsafe { sys::virDomainGetName(dom) };
        // SAFETY: non-null names are NUL-terminated and live for the call.
        !name.is_null() && unsafe { CStr::from_ptr(name) } == self.domain.as_c_str()
    }

    fn deliver(&self, event: HypervisorEvent) {
        // The manager's inbox never blocks a sender; `Closed` means the
        // manager has exited and nothing is listening any more.
        let _ = self.tx.send(event);
    }
}

unsafe extern "C" fn free_sink(opaque: *mut c_void) {
    // SAFETY: every registration leaks its own Box<EventSink>; libvirt calls
    // this exactly once when the registration goes away.
    drop(unsafe { Box::from_raw(opaque as *mut EventSink) });
}

/// # Safety
/// Only called by libvirt with the opaque registered below.
unsafe fn sink<'a>(opaque: *mut c_void) -> &'a EventSink {
    // SAFETY: see free_sink; the sink outlives every callback invocation.
    unsafe { &*(opaque as *const EventSink) }
}

unsafe extern "C" fn on_lifecycle(
    _conn: sys::virConnectPtr,
    dom: sys::virDomainPtr,
    event: c_int,
    detail: c_int,
    opaque: *mut c_void,
) -> c_int {
    // SAFETY: libvirt calls this with the opaque registered in
    // `register_domain_events`, alive until it calls `free_sink`.
    let sink = unsafe { sink(opaque) };
    // SAFETY: `dom` is the domain libvirt passed to this call.
    let ours = unsafe { sink.is_ours(dom) };
    if ours {
        sink.deliver(HypervisorEvent::Lifecycle(LifecycleEvent::from_libvirt(
            event, detail,
        )));
    }
    0
}

unsafe extern "C" fn on_agent_lifecycle(
    _conn: sys::virConnectPtr,
    dom: sys::virDomainPtr,
    state: c_int,
    reason: c_int,
    opaque: *mut c_void,
) {
    // SAFETY: libvirt calls this with the opaque registered in
    // `register_domain_events`, alive until it calls `free_sink`.
    let sink = unsafe { sink(opaque) };
    // SAFETY: `dom` is the domain libvirt passed to this call.
    let ours = unsafe { sink.is_ours(dom) };
    if ours {
        sink.deliver(HypervisorEvent::AgentLifecycle(
            AgentLifecycle::from_libvirt(state, reason),
        ));
    }
}

unsafe extern "C" fn on_reboot(
    _conn: sys::virConnectPtr,
    dom: sys::virDomainPtr,
    opaque: *mut c_void,
) {
    // SAFETY: libvirt calls this with the opaque registered in
    // `register_domain_events`, alive until it calls `free_sink`.
    let sink = unsafe { sink(opaque) };
    // SAFETY: `dom` is the domain libvirt passed to this call.
    let ours = unsafe { sink.is_ours(dom) };
    if ours {
        sink.deliver(HypervisorEvent::Reboot);
    }
}

unsafe extern "C" fn on_device_added(
    _conn: sys::virConnectPtr,
    dom: sys::virDomainPtr,
    alias: *const c_char,
    opaque: *mut c_void,
) {
    // SAFETY: libvirt calls this with the opaque registered in
    // `register_domain_events`, alive until it calls `free_sink`.
    let sink = unsafe { sink(opaque) };
    // SAFETY: `dom` is the domain libvirt passed to this call.
    let ours = unsafe { sink.is_ours(dom) };
    if ours {
        // SAFETY: libvirt passes a NUL-terminated alias valid for the call.
        let alias = unsafe { alias_string(alias) };
        sink.deliver(HypervisorEvent::DeviceAdded { alias });
    }
}

/// The device alias a device event carries ("" when libvirt gives none).
///
/// # Safety
/// `alias` must be null or a NUL-terminated string valid for the call.
unsafe fn alias_string(alias: *const c_char) -> String {
    if alias.is_null() {
        String::new()
    } else {
        // SAFETY: the caller vouches for the string.
        unsafe { CStr::from_ptr(alias) }
            .to_string_lossy()
            .into_owned()
    }
}

unsafe extern "C" fn on_device_removed(
    _conn: sys::virConnectPtr,
    dom: sys::virDomainPtr,
    alias: *const c_char,
    opaque: *mut c_void,
) {
    // SAFETY: libvirt calls this with the opaque registered in
    // `register_domain_events`, alive until it calls `free_sink`.
    let sink = unsafe { sink(opaque) };
    // SAFETY: `dom` is the domain libvirt passed to this call.
    let ours = unsafe { sink.is_ours(dom) };
    if ours {
        // SAFETY: libvirt passes a NUL-terminated alias valid for the call.
        let alias = unsafe { alias_string(alias) };
        sink.deliver(HypervisorEvent::DeviceRemoved { alias });
    }
}

unsafe extern "C" fn on_job_completed(
    _conn: sys::virConnectPtr,
    dom: sys::virDomainPtr,
    params: sys::virTypedParameterPtr,
    nparams: c_int,
    opaque: *mut c_void,
) {
    // SAFETY: libvirt calls this with the opaque registered in
    // `register_domain_events`, alive until it calls `free_sink`.
    let sink = unsafe { sink(opaque) };
    // SAFETY: `dom` is the domain libvirt passed to this call.
    let ours = unsafe { sink.is_ours(dom) };
    if ours {
        // SAFETY: libvirt passes `nparams` valid parameters for the call.
        let stats = unsafe { typed_params(params, nparams) };
        sink.deliver(HypervisorEvent::JobCompleted { stats });
    }
}

/// libvirt's event ids are an unsigned enum that its API takes as `int`;
/// every one is small.
fn event_id(id: c_uint) -> c_int {
    c_int::try_from(id).unwrap_or(-1)
}

/// Registers the domain event callbacks the launcher listens to, for any
/// domain, delivering only those of `domain_name`. Returns the callback ids.
pub fn register_domain_events(
    conn: &Connect,
    domain_name: &str,
    tx: &Sink<HypervisorEvent>,
) -> Result<Vec<c_int>, Error> {
    // libvirt takes every callback as the generic type and casts it back by
    // event id, so each specific signature is transmuted to it.
    type Generic = unsafe extern "C" fn(sys::virConnectPtr, sys::virDomainPtr, *mut c_void);
    type LifecycleFn = unsafe extern "C" fn(
        sys::virConnectPtr,
        sys::virDomainPtr,
        c_int,
        c_int,
        *mut c_void,
    ) -> c_int;
    type AgentFn =
        unsafe extern "C" fn(sys::virConnectPtr, sys::virDomainPtr, c_int, c_int, *mut c_void);
    type DeviceFn =
        unsafe extern "C" fn(sys::virConnectPtr, sys::virDomainPtr, *const c_char, *mut c_void);
    type JobFn = unsafe extern "C" fn(
        sys::virConnectPtr,
        sys::virDomainPtr,
        sys::virTypedParameterPtr,
        c_int,
        *mut c_void,
    );
    // SAFETY: function pointers of the same ABI; libvirt calls each with the
    // signature its event id documents.
    let callbacks: [(c_int, Generic); 6] = unsafe {
        [
            (
                event_id(sys::VIR_DOMAIN_EVENT_ID_LIFECYCLE),
                std::mem::transmute::<LifecycleFn, Generic>(on_lifecycle),
            ),
            (
                event_id(sys::VIR_DOMAIN_EVENT_ID_REBOOT),
                on_reboot as Generic,
            ),
            (
                event_id(sys::VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED),
                std::mem::transmute::<DeviceFn, Generic>(on_device_removed),
            ),
            (
                event_id(sys::VIR_DOMAIN_EVENT_ID_DEVICE_ADDED),
                std::mem::transmute::<DeviceFn, Generic>(on_device_added),
            ),
            (
                event_id(sys::VIR_DOMAIN_EVENT_ID_AGENT_LIFECYCLE),
                std::mem::transmute::<AgentFn, Generic>(on_agent_lifecycle),
            ),
            (
                event_id(sys::VIR_DOMAIN_EVENT_ID_JOB_COMPLETED),
                std::mem::transmute::<JobFn, Generic>(on_job_completed),
            ),
        ]
    };
    let domain = CString::new(domain_name)?;
    let mut ids = Vec::with_capacity(callbacks.len());
    for (event_id, callback) in callbacks {
        let sink = Box::new(EventSink {
            domain: domain.clone(),
            tx: tx.clone(),
        });
        let opaque = Box::into_raw(sink) as *mut c_void;
        // SAFETY: valid connection; opaque ownership passes to libvirt on
        // success and is released through free_sink.
        let id = unsafe {
            sys::virConnectDomainEventRegisterAny(
                conn.as_ptr(),
                ptr::null_mut(),
                event_id,
                Some(callback),
                opaque,
                Some(free_sink),
            )
        };
        if id < 0 {
            let error = Error::last_error();
            // SAFETY: libvirt did not take ownership on failure.
            drop(unsafe { Box::from_raw(opaque as *mut EventSink) });
            // Leave nothing half-registered.
            deregister_domain_events(conn, &ids);
            return Err(error);
        }
        ids.push(id);
    }
    Ok(ids)
}

/// Removes the domain event callbacks `register_domain_events` returned.
/// libvirt then frees their sinks and drops the references they hold on
/// the connection; without this an old connection is never freed. On a
/// dead connection libvirt still removes them locally and only fails to
/// tell the daemon, so failures are logged and otherwise ignored.
pub fn deregister_domain_events(conn: &Connect, ids: &[c_int]) {
    for &id in ids {
        // SAFETY: valid connection; `id` came from a successful
        // registration on it and is deregistered once.
        if unsafe { sys::virConnectDomainEventDeregisterAny(conn.as_ptr(), id) } < 0 {
            log::debug!(
                "hypervisor: deregistering event callback {id}: {}",
                Error::last_error()
            );
        }
    }
}

/// What the close callback reports through (see `LossReporter`).
pub type CloseSink = LossReporter;

unsafe extern "C" fn on_close(_conn: sys::virConnectPtr, reason: c_int, opaque: *mut c_void) {
    // SAFETY: opaque is the Box<CloseSink> registered below, alive until
    // libvirt calls free_close_sink.
    let sink = unsafe { &*(opaque as *const CloseSink) };
    sink.report(CloseReason::from_libvirt(reason));
}

unsafe extern "C" fn free_close_sink(opaque: *mut c_void) {
    // SAFETY: created by Box::into_raw below, freed once by libvirt.
    drop(unsafe { Box::from_raw(opaque as *mut CloseSink) });
}

/// Asks libvirt to report when the connection closes. Drivers without a
/// daemon (test:///) never close and may not support it.
pub fn register_close_callback(conn: &Connect, sink: CloseSink) -> Result<(), Error> {
    let opaque = Box::into_raw(Box::new(sink)) as *mut c_void;
    // SAFETY: valid connection; ownership of opaque passes to libvirt.
    let rc = unsafe {
        sys::virConnectRegisterCloseCallback(
            conn.as_ptr(),
            Some(on_close),
            opaque,
            Some(free_close_sink),
        )
    };
    if rc < 0 {
        // SAFETY: libvirt did not take ownership on failure.
        drop(unsafe { Box::from_raw(opaque as *mut CloseSink) });
        return Err(Error::last_error());
    }
    Ok(())
}

/// Removes the close callback, so libvirt frees its sink and drops the
/// reference it holds on the connection. Failures are logged (see
/// `deregister_domain_events`).
pub fn unregister_close_callback(conn: &Connect) {
    // SAFETY: valid connection; on_close is the callback registered on it.
    if unsafe { sys::virConnectUnregisterCloseCallback(conn.as_ptr(), Some(on_close)) } < 0 {
        log::debug!(
            "hypervisor: unregistering the close callback: {}",
            Error::last_error()
        );
    }
}

/// Bulk statistics of one domain (`virDomainListGetStats`).
pub fn domain_stats(dom: &Domain, stats: c_uint, flags: c_uint) -> Result<Vec<Stat>, Error> {
    // SAFETY: a NULL-terminated array holding one valid domain pointer.
    let mut doms = [unsafe { dom.as_ptr() }, ptr::null_mut()];
    let mut records: *mut sys::virDomainStatsRecordPtr = ptr::null_mut();
    // SAFETY: valid arguments; on success libvirt returns an array we free.
    let n = unsafe { sys::virDomainListGetStats(doms.as_mut_ptr(), stats, &mut records, flags) };
    if n < 0 {
        return Err(Error::last_error());
    }
    let mut out = Vec::new();
    if !records.is_null() {
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: libvirt returned n records.
            let record = unsafe { *records.add(i) };
            if record.is_null() {
                continue;
            }
            // SAFETY: a valid record with nparams parameters.
            out.extend(unsafe { typed_params((*record).params, (*record).nparams) });
        }
        // SAFETY: frees the array libvirt allocated, once.
        unsafe { sys::virDomainStatsRecordListFree(records) };
    }
    Ok(out)
}

/// Copies typed parameters into (name, JSON value) pairs.
///
/// # Safety
/// `params` must point to `n` valid parameters (or be null).
unsafe fn typed_params(params: sys::virTypedParameterPtr, n: c_int) -> Vec<Stat> {
    if params.is_null() || n <= 0 {
        return Vec::new();
    }
    // Positive: checked above.
    let n = usize::try_from(n).unwrap_or(0);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: within the n parameters the caller vouches for.
        let p = unsafe { &*params.add(i) };
        // SAFETY: `field` is a NUL-terminated array inside the struct.
        let name = unsafe { CStr::from_ptr(p.field.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: the union member read matches the parameter's type tag.
        let value = unsafe {
            match p.type_.cast_unsigned() {
                sys::VIR_TYPED_PARAM_INT => Value::from(p.value.i),
                sys::VIR_TYPED_PARAM_UINT => Value::from(p.value.ui),
                sys::VIR_TYPED_PARAM_LLONG => Value::from(p.value.l),
                sys::VIR_TYPED_PARAM_ULLONG => Value::from(p.value.ul),
                sys::VIR_TYPED_PARAM_DOUBLE => Value::from(p.value.d),
                sys::VIR_TYPED_PARAM_BOOLEAN => Value::from(p.value.b != 0),
                sys::VIR_TYPED_PARAM_STRING if !p.value.s.is_null() => {
                    Value::from(CStr::from_ptr(p.value.s).to_string_lossy().into_owned())
                }
                _ => Value::Null,
            }
        };
        out.push((name, value));
    }
    out
}

/// `virDomainGetState`, with its error reported (the `virt` crate's wrapper
/// discards it and returns an unknown state instead).
pub fn domain_state(dom: &Domain) -> Result<(c_int, c_int), Error> {
    let mut state: c_int = -1;
    let mut reason: c_int = -1;
    // SAFETY: valid domain and out-pointers.
    if unsafe { sys::virDomainGetState(dom.as_ptr(), &mut state, &mut reason, 0) } < 0 {
        return Err(Error::last_error());
    }
    Ok((state, reason))
}

/// `virDomainAgentSetResponseTimeout`: how long libvirt waits for the
/// guest agent on calls that take no timeout of their own (seconds > 0).
pub fn agent_set_response_timeout(dom: &Domain, seconds: c_int) -> Result<(), Error> {
    // SAFETY: valid domain; plain integer arguments.
    let rc = unsafe { sys::virDomainAgentSetResponseTimeout(dom.as_ptr(), seconds, 0) };
    if rc < 0 {
        return Err(Error::last_error());
    }
    Ok(())
}

/// `virDomainGetGuestInfo`: what the guest agent reports, as typed
/// parameters (`os.id`, `hostname`, `if.0.name`, `user.0.login-time`, ...).
pub fn guest_info(dom: &Domain, types: c_uint) -> Result<Vec<Stat>, Error> {
    let mut params: sys::virTypedParameterPtr = ptr::null_mut();
    let mut nparams: c_int = 0;
    // SAFETY: valid domain and out-pointers; on success libvirt allocates
    // the parameter array, freed below.
    let rc =
        unsafe { sys::virDomainGetGuestInfo(dom.as_ptr(), types, &mut params, &mut nparams, 0) };
    if rc < 0 {
        return Err(Error::last_error());
    }
    // SAFETY: libvirt returned nparams valid parameters.
    let out = unsafe { typed_params(params, nparams) };
    // SAFETY: frees what libvirt allocated, once.
    unsafe { sys::virTypedParamsFree(params, nparams) };
    Ok(out)
}

/// Typed parameters built with libvirt's own helpers, so libvirt owns and
/// frees every string in them.
struct TypedParams {
    params: sys::virTypedParameterPtr,
    count: c_int,
    capacity: c_int,
}

impl TypedParams {
    fn new() -> TypedParams {
        TypedParams {
            params: ptr::null_mut(),
            count: 0,
            capacity: 0,
        }
    }

    fn add_string(&mut self, name: &CStr, value: &str) -> Result<(), Error> {
        let value = CString::new(value)?;
        // SAFETY: the helper grows the array it owns; strings are copied.
        let rc = unsafe {
            sys::virTypedParamsAddString(
                &mut self.params,
                &mut self.count,
                &mut self.capacity,
                name.as_ptr(),
                value.as_ptr(),
            )
        };
        if rc < 0 {
            Err(Error::last_error())
        } else {
            Ok(())
        }
    }

    fn add_ullong(&mut self, name: &CStr, value: u64) -> Result<(), Error> {
        // SAFETY: as above.
        let rc = unsafe {
            sys::virTypedParamsAddULLong(
                &mut self.params,
                &mut self.count,
                &mut self.capacity,
                name.as_ptr(),
                value,
            )
        };
        if rc < 0 {
            Err(Error::last_error())
        } else {
            Ok(())
        }
    }

    fn add_int(&mut self, name: &CStr, value: c_int) -> Result<(), Error> {
        // SAFETY: as above.
        let rc = unsafe {
            sys::virTypedParamsAddInt(
                &mut self.params,
                &mut self.count,
                &mut self.capacity,
                name.as_ptr(),
                value,
            )
        };
        if rc < 0 {
            Err(Error::last_error())
        } else {
            Ok(())
        }
    }

    fn add_string_list(&mut self, name: &CStr, values: &[String]) -> Result<(), Error> {
        let owned = values
            .iter()
            .map(|v| CString::new(v.as_str()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut pointers: Vec<*const c_char> = owned.iter().map(|s| s.as_ptr()).collect();
        pointers.push(ptr::null());
        // SAFETY: a NULL-terminated list of valid strings, copied by libvirt.
        let rc = unsafe {
            sys::virTypedParamsAddStringList(
                &mut self.params,
                &mut self.count,
                &mut self.capacity,
                name.as_ptr(),
                pointers.as_mut_ptr(),
            )
        };
        if rc < 0 {
            Err(Error::last_error())
        } else {
            Ok(())
        }
    }
}

impl Drop for TypedParams {
    fn drop(&mut self) {
        if !self.params.is_null() {
            // SAFETY: allocated by the virTypedParamsAdd* helpers.
            unsafe { sys::virTypedParamsFree(self.params, self.count) };
        }
    }
}

/// What `virDomainMigrateToURI3` is given.
pub struct MigrateArgs<'a> {
    pub dconn_uri: &'a str,
    pub uri: Option<&'a str>,
    pub dest_xml: Option<&'a str>,
    pub bandwidth_mib: Option<u64>,
    pub disks_uri: Option<&'a str>,
    pub migrate_disks: &'a [String],
    pub parallel_connections: Option<u32>,
    pub compression: Option<&'a str>,
    pub flags: c_uint,
}

/// Peer-to-peer migration of `dom`; blocks until it completes or fails.
pub fn migrate(dom: &Domain, args: &MigrateArgs) -> Result<(), Error> {
    let mut params = TypedParams::new();
    if let Some(uri) = args.uri {
        params.add_string(sys::VIR_MIGRATE_PARAM_URI, uri)?;
    }
    if let Some(xml) = args.dest_xml {
        params.add_string(sys::VIR_MIGRATE_PARAM_DEST_XML, xml)?;
        params.add_string(sys::VIR_MIGRATE_PARAM_PERSIST_XML, xml)?;
    }
    if let Some(bandwidth) = args.bandwidth_mib {
        params.add_ullong(sys::VIR_MIGRATE_PARAM_BANDWIDTH, bandwidth)?;
    }
    if let Some(uri) = args.disks_uri {
        params.add_string(sys::VIR_MIGRATE_PARAM_DISKS_URI, uri)?;
    }
    if !args.migrate_disks.is_empty() {
        params.add_string_list(sys::VIR_MIGRATE_PARAM_MIGRATE_DISKS, args.migrate_disks)?;
    }
    if let Some(connections) = args.parallel_connections {
        let connections = c_int::try_from(connections).unwrap_or(c_int::MAX);
        params.add_int(sys::VIR_MIGRATE_PARAM_PARALLEL_CONNECTIONS, connections)?;
    }
    if let Some(method) = args.compression {
        params.add_string(sys::VIR_MIGRATE_PARAM_COMPRESSION, method)?;
    }
    let dconn = CString::new(args.dconn_uri)?;
    // SAFETY: valid domain, URI and parameter array.
    let rc = unsafe {
        sys::virDomainMigrateToURI3(
            dom.as_ptr(),
            dconn.as_ptr(),
            params.params,
            c_uint::try_from(params.count).unwrap_or(0),
            args.flags,
        )
    };
    if rc < 0 {
        Err(Error::last_error())
    } else {
        Ok(())
    }
}

/// `virDomainGetJobStats`: the running job's (or, with COMPLETED, the last
/// finished job's) statistics, with the job type as `type`.
pub fn job_stats(dom: &Domain, completed: bool) -> Result<Vec<Stat>, Error> {
    let mut job_type: c_int = 0;
    let mut params: sys::virTypedParameterPtr = ptr::null_mut();
    let mut nparams: c_int = 0;
    let flags = if completed {
        sys::VIR_DOMAIN_JOB_STATS_COMPLETED
    } else {
        0
    };
    // SAFETY: valid domain and out-pointers; libvirt allocates params.
    let rc = unsafe {
        sys::virDomainGetJobStats(
            dom.as_ptr(),
            &mut job_type,
            &mut params,
            &mut nparams,
            flags,
        )
    };
    if rc < 0 {
        return Err(Error::last_error());
    }
    // SAFETY: libvirt returned nparams valid parameters.
    let mut out = unsafe { typed_params(params, nparams) };
    // SAFETY: frees what libvirt allocated.
    unsafe { sys::virTypedParamsFree(params, nparams) };
    out.push(("type".to_string(), Value::from(job_type)));
    Ok(out)
}

pub fn abort_job(dom: &Domain) -> Result<(), Error> {
    // SAFETY: valid domain.
    if unsafe { sys::virDomainAbortJob(dom.as_ptr()) } < 0 {
        return Err(Error::last_error());
    }
    Ok(())
}

pub fn migrate_start_post_copy(dom: &Domain) -> Result<(), Error> {
    // SAFETY: valid domain.
    if unsafe { sys::virDomainMigrateStartPostCopy(dom.as_ptr(), 0) } < 0 {
        return Err(Error::last_error());
    }
    Ok(())
}

pub fn migrate_set_max_downtime(dom: &Domain, ms: u64) -> Result<(), Error> {
    // SAFETY: valid domain.
    if unsafe { sys::virDomainMigrateSetMaxDowntime(dom.as_ptr(), ms, 0) } < 0 {
        return Err(Error::last_error());
    }
    Ok(())
}

/// `virDomainStartDirtyRateCalc` by page sampling, as KubeVirt measures.
pub fn start_dirty_rate_calc(dom: &Domain, seconds: c_int) -> Result<(), Error> {
    // SAFETY: valid domain; plain integer arguments.
    let rc = unsafe {
        sys::virDomainStartDirtyRateCalc(
            dom.as_ptr(),
            seconds,
            sys::VIR_DOMAIN_DIRTYRATE_MODE_PAGE_SAMPLING,
        )
    };
    if rc < 0 {
        return Err(Error::last_error());
    }
    Ok(())
}

/// libvirt's `virDomainDiskError`, which the `virt` crate's bindings
/// lack (as they lack `virDomainGetDiskErrors`).
#[repr(C)]
struct VirDomainDiskError {
    disk: *mut c_char,
    error: c_int,
}

unsafe extern "C" {
    fn virDomainGetDiskErrors(
        dom: sys::virDomainPtr,
        errors: *mut VirDomainDiskError,
        maxerrors: c_uint,
        flags: c_uint,
    ) -> c_int;
}

/// `virDomainGetDiskErrors`: (target, libvirt's error code) of every disk
/// with an error. Asks how many first, as libvirt documents.
pub fn disk_errors(dom: &Domain) -> Result<Vec<(String, c_int)>, Error> {
    // SAFETY: valid domain; a null array with 0 asks for the count.
    let count = unsafe { virDomainGetDiskErrors(dom.as_ptr(), ptr::null_mut(), 0, 0) };
    if count < 0 {
        return Err(Error::last_error());
    }
    let Ok(count) = usize::try_from(count) else {
        return Ok(Vec::new());
    };
    if count == 0 {
        return Ok(Vec::new());
    }
    let mut errors: Vec<VirDomainDiskError> = (0..count)
        .map(|_| VirDomainDiskError {
            disk: ptr::null_mut(),
            error: 0,
        })
        .collect();
    let max = c_uint::try_from(errors.len()).unwrap_or(c_uint::MAX);
    // SAFETY: valid domain; `errors` has room for `max` entries, which
    // libvirt fills (allocating each disk string) and counts in `filled`.
    let filled = unsafe { virDomainGetDiskErrors(dom.as_ptr(), errors.as_mut_ptr(), max, 0) };
    if filled < 0 {
        return Err(Error::last_error());
    }
    let filled = usize::try_from(filled).unwrap_or(0).min(errors.len());
    Ok(errors
        .into_iter()
        .take(filled)
        // SAFETY: each filled entry's disk is a string libvirt allocated,
        // taken (and freed) once here.
        .filter_map(|e| unsafe { take_string(e.disk) }.map(|disk| (disk, e.error)))
        .collect())
}

/// A string libvirt allocated, copied out and freed.
///
/// # Safety
/// `ptr` is null or a NUL-terminated string from libvirt's allocator.
unsafe fn take_string(ptr: *mut c_char) -> Option<String> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated, as the caller promises.
    let text = unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: allocated by libvirt, freed once here.
    unsafe { libc::free(ptr as *mut c_void) };
    Some(text)
}

/// `virDomainBackupBegin`; `checkpoint_xml` may be absent (no checkpoint).
pub fn backup_begin(
    dom: &Domain,
    backup_xml: &str,
    checkpoint_xml: Option<&str>,
) -> Result<(), Error> {
    let backup = CString::new(backup_xml)?;
    let checkpoint = checkpoint_xml.map(CString::new).transpose()?;
    let checkpoint_ptr = checkpoint.as_ref().map_or(ptr::null(), |c| c.as_ptr());
    // SAFETY: valid domain; both strings outlive the call.
    let rc = unsafe { sys::virDomainBackupBegin(dom.as_ptr(), backup.as_ptr(), checkpoint_ptr, 0) };
    if rc < 0 {
        return Err(Error::last_error());
    }
    Ok(())
}

/// `virDomainCheckpointCreateXML` with `flags`; the handle is freed.
pub fn checkpoint_create(dom: &Domain, xml: &str, flags: c_uint) -> Result<(), Error> {
    let xml = CString::new(xml)?;
    // SAFETY: valid domain and string.
    let checkpoint =
        unsafe { sys::virDomainCheckpointCreateXML(dom.as_ptr(), xml.as_ptr(), flags) };
    if checkpoint.is_null() {
        return Err(Error::last_error());
    }
    // SAFETY: a handle libvirt returned, freed once.
    unsafe { sys::virDomainCheckpointFree(checkpoint) };
    Ok(())
}

/// The names of the domain's checkpoints, parents first.
pub fn checkpoint_names(dom: &Domain) -> Result<Vec<String>, Error> {
    let mut list: *mut sys::virDomainCheckpointPtr = ptr::null_mut();
    // SAFETY: valid domain and out-pointer; libvirt allocates the list.
    let n = unsafe {
        sys::virDomainListAllCheckpoints(
            dom.as_ptr(),
            &mut list,
            sys::VIR_DOMAIN_CHECKPOINT_LIST_TOPOLOGICAL,
        )
    };
    if n < 0 {
        return Err(Error::last_error());
    }
    let mut names = Vec::new();
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: libvirt returned n valid handles.
        let checkpoint = unsafe { *list.add(i) };
        // SAFETY: a valid handle; the name belongs to it.
        let name = unsafe { sys::virDomainCheckpointGetName(checkpoint) };
        if !name.is_null() {
            // SAFETY: NUL-terminated, alive until the handle is freed.
            names.push(
                unsafe { CStr::from_ptr(name) }
                    .to_string_lossy()
                    .into_owned(),
            );
        }
        // SAFETY: each handle is freed once.
        unsafe { sys::virDomainCheckpointFree(checkpoint) };
    }
    if !list.is_null() {
        // SAFETY: the array libvirt allocated.
        unsafe { libc::free(list as *mut c_void) };
    }
    Ok(names)
}

/// Runs `call` on the checkpoint `name` of `dom`, freeing the handle after.
fn with_checkpoint<T>(
    dom: &Domain,
    name: &str,
    call: impl FnOnce(sys::virDomainCheckpointPtr) -> Result<T, Error>,
) -> Result<T, Error> {
    let name = CString::new(name)?;
    // SAFETY: valid domain and string.
    let checkpoint =
        unsafe { sys::virDomainCheckpointLookupByName(dom.as_ptr(), name.as_ptr(), 0) };
    if checkpoint.is_null() {
        return Err(Error::last_error());
    }
    let result = call(checkpoint);
    // SAFETY: the handle looked up above, freed once.
    unsafe { sys::virDomainCheckpointFree(checkpoint) };
    result
}

/// A checkpoint's XML without the domain definition.
pub fn checkpoint_xml(dom: &Domain, name: &str) -> Result<String, Error> {
    with_checkpoint(dom, name, |checkpoint| {
        // SAFETY: a valid handle.
        let xml = unsafe {
            sys::virDomainCheckpointGetXMLDesc(checkpoint, sys::VIR_DOMAIN_CHECKPOINT_XML_NO_DOMAIN)
        };
        // SAFETY: null or a string libvirt allocated for the caller.
        unsafe { take_string(xml) }.ok_or_else(Error::last_error)
    })
}

/// `virDomainCheckpointDelete`.
pub fn checkpoint_delete(dom: &Domain, name: &str, flags: c_uint) -> Result<(), Error> {
    with_checkpoint(dom, name, |checkpoint| {
        // SAFETY: a valid handle.
        if unsafe { sys::virDomainCheckpointDelete(checkpoint, flags) } < 0 {
            return Err(Error::last_error());
        }
        Ok(())
    })
}
