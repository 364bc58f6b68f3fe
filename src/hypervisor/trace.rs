//! `-vv`: every hypervisor call at trace level, with its arguments, its
//! outcome and how long it took, whatever backend is behind the trait:
//!
//! ```text
//! ... TRACE [job-pause] libvirt: virDomainSuspend(default_demo): ok in 0.213 ms
//! ... TRACE [manager] libvirt: virDomainGetState(default_demo): ok in 0.087 ms: Some(...)
//! ```
//!
//! The launcher wraps its hypervisor in [`Traced`] only when trace logging
//! is on for this module, so it costs nothing otherwise. A new trait method
//! needs one line here (the compiler says so, except for a method with a
//! default body, such as `domain_xml_and_status`, which must be forwarded
//! too so that the wrapped backend's own version runs).

use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    Affect, ConnectionId, DaemonVersions, DiskError, DomainStatus, GuestInfoKind, HvResult,
    Hypervisor, HypervisorInfo, MigrationRequest, RebootMode, Screenshot, Stat,
};

/// A hypervisor that logs every call it forwards.
pub struct Traced {
    inner: Arc<dyn Hypervisor>,
}

impl Traced {
    /// `inner` itself when trace logging is off for this module.
    pub fn wrap(inner: Arc<dyn Hypervisor>) -> Arc<dyn Hypervisor> {
        if log::log_enabled!(log::Level::Trace) {
            Arc::new(Traced { inner })
        } else {
            inner
        }
    }
}

/// Runs `call` and logs it as `api(args): ok in N ms[: value]` or
/// `api(args): failed in N ms: error`.
fn traced<T: Debug>(api: &str, args: String, call: impl FnOnce() -> HvResult<T>) -> HvResult<T> {
    let started = Instant::now();
    let result = call();
    let took = ms(started.elapsed());
    match &result {
        Ok(value) => match brief(value) {
            b if b.is_empty() => log::trace!("libvirt: {api}({args}): ok in {took} ms"),
            b => log::trace!("libvirt: {api}({args}): ok in {took} ms: {b}"),
        },
        Err(e) => log::trace!("libvirt: {api}({args}): failed in {took} ms: {e}"),
    }
    result
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

/// A short form of a result: long values (domain XML, statistics) are cut.
fn brief<T: Debug>(value: &T) -> String {
    let text = format!("{value:?}");
    if text == "()" {
        return String::new();
    }
    const MAX: usize = 200;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}... ({} bytes)", &text[..cut], text.len()),
        None => text,
    }
}

impl Hypervisor for Traced {
    fn info(&self) -> HypervisorInfo {
        self.inner.info()
    }

    fn domain_status(&self, name: &str) -> HvResult<Option<DomainStatus>> {
        traced("virDomainGetState", name.to_string(), || {
            self.inner.domain_status(name)
        })
    }

    fn define(&self, xml: &str) -> HvResult<()> {
        let size = format!("{} bytes of XML", xml.len());
        traced("virDomainDefineXMLFlags", size, || self.inner.define(xml))
    }

    fn undefine(&self, name: &str) -> HvResult<()> {
        traced("virDomainUndefineFlags", name.to_string(), || {
            self.inner.undefine(name)
        })
    }

    fn start(&self, name: &str, paused: bool) -> HvResult<()> {
        traced(
            "virDomainCreateWithFlags",
            format!("{name}, paused={paused}"),
            || self.inner.start(name, paused),
        )
    }

    fn suspend(&self, name: &str) -> HvResult<()> {
        traced("virDomainSuspend", name.to_string(), || {
            self.inner.suspend(name)
        })
    }

    fn resume(&self, name: &str) -> HvResult<()> {
        traced("virDomainResume", name.to_string(), || {
            self.inner.resume(name)
        })
    }

    fn shutdown_acpi(&self, name: &str) -> HvResult<()> {
        traced("virDomainShutdownFlags", name.to_string(), || {
            self.inner.shutdown_acpi(name)
        })
    }

    fn reboot(&self, name: &str, mode: RebootMode) -> HvResult<()> {
        traced("virDomainReboot", format!("{name}, {mode:?}"), || {
            self.inner.reboot(name, mode)
        })
    }

    fn reset(&self, name: &str) -> HvResult<()> {
        traced("virDomainReset", name.to_string(), || {
            self.inner.reset(name)
        })
    }

    fn destroy(&self, name: &str, graceful: bool) -> HvResult<()> {
        traced(
            "virDomainDestroyFlags",
            format!("{name}, graceful={graceful}"),
            || self.inner.destroy(name, graceful),
        )
    }

    fn attach_device(&self, name: &str, xml: &str, affect: Affect) -> HvResult<()> {
        traced(
            "virDomainAttachDeviceFlags",
            format!("{name}, {xml:?}, {affect:?}"),
            || self.inner.attach_device(name, xml, affect),
        )
    }

    fn detach_device(&self, name: &str, xml: &str, affect: Affect) -> HvResult<()> {
        traced(
            "virDomainDetachDeviceFlags",
            format!("{name}, {xml:?}, {affect:?}"),
            || self.inner.detach_device(name, xml, affect),
        )
    }

    fn update_device(&self, name: &str, xml: &str, affect: Affect) -> HvResult<()> {
        traced(
            "virDomainUpdateDeviceFlags",
            format!("{name}, {xml:?}, {affect:?}"),
            || self.inner.update_device(name, xml, affect),
        )
    }

    fn set_vcpus(&self, name: &str, count: u32, affect: Affect) -> HvResult<()> {
        traced(
            "virDomainSetVcpusFlags",
            format!("{name}, {count}, {affect:?}"),
            || self.inner.set_vcpus(name, count, affect),
        )
    }

    fn domain_xml(&self, name: &str) -> HvResult<(String, String)> {
        traced("virDomainGetXMLDesc", name.to_string(), || {
            self.inner.domain_xml(name)
        })
    }

    fn domain_xml_and_status(
        &self,
        name: &str,
    ) -> HvResult<((String, String), Option<DomainStatus>)> {
        traced(
            "virDomainGetXMLDesc+virDomainGetState",
            name.to_string(),
            || self.inner.domain_xml_and_status(name),
        )
    }

    fn stats(&self, name: &str) -> HvResult<Vec<Stat>> {
        traced("virDomainListGetStats", name.to_string(), || {
            self.inner.stats(name)
        })
    }

    fn agent_command(&self, name: &str, command: &str, timeout: Duration) -> HvResult<String> {
        traced(
            "virDomainQemuAgentCommand",
            format!("{name}, {command}, {timeout:?}"),
            || self.inner.agent_command(name, command, timeout),
        )
    }

    fn set_agent_timeout(&self, name: &str, timeout: Duration) -> HvResult<()> {
        traced(
            "virDomainAgentSetResponseTimeout",
            format!("{name}, {timeout:?}"),
            || self.inner.set_agent_timeout(name, timeout),
        )
    }

    fn guest_info(&self, name: &str, kinds: &[GuestInfoKind]) -> HvResult<Vec<Stat>> {
        traced(
            "virDomainGetGuestInfo",
            format!("{name}, {kinds:?}"),
            || self.inner.guest_info(name, kinds),
        )
    }

    fn sync_guest_time(&self, name: &str, timeout: Duration) -> HvResult<()> {
        traced("virDomainSetTime", format!("{name}, {timeout:?}"), || {
            self.inner.sync_guest_time(name, timeout)
        })
    }

    fn migratable_xml(&self, name: &str) -> HvResult<String> {
        traced("virDomainGetXMLDesc(MIGRATABLE)", name.to_string(), || {
            self.inner.migratable_xml(name)
        })
    }

    fn migrate(&self, name: &str, request: &MigrationRequest) -> HvResult<()> {
        let target = request.target_uri.as_str();
        traced(
            "virDomainMigrateToURI3",
            format!("{name}, {target}"),
            || self.inner.migrate(name, request),
        )
    }

    fn job_stats(&self, name: &str, completed: bool) -> HvResult<Vec<Stat>> {
        traced(
            "virDomainGetJobStats",
            format!("{name}, completed={completed}"),
            || self.inner.job_stats(name, completed),
        )
    }

    fn abort_job(&self, name: &str) -> HvResult<()> {
        traced("virDomainAbortJob", name.to_string(), || {
            self.inner.abort_job(name)
        })
    }

    fn migrate_start_post_copy(&self, name: &str) -> HvResult<()> {
        traced("virDomainMigrateStartPostCopy", name.to_string(), || {
            self.inner.migrate_start_post_copy(name)
        })
    }

    fn migrate_set_max_downtime(&self, name: &str, milliseconds: u64) -> HvResult<()> {
        traced(
            "virDomainMigrateSetMaxDowntime",
            format!("{name}, {milliseconds} ms"),
            || self.inner.migrate_set_max_downtime(name, milliseconds),
        )
    }

    fn hypervisor_version(&self) -> HvResult<u64> {
        traced("virConnectGetVersion", String::new(), || {
            self.inner.hypervisor_version()
        })
    }

    fn versions_at(&self, uri: &str) -> HvResult<DaemonVersions> {
        traced("virConnectGetVersion", uri.to_string(), || {
            self.inner.versions_at(uri)
        })
    }

    fn start_dirty_rate_calc(&self, name: &str, seconds: u32) -> HvResult<()> {
        traced(
            "virDomainStartDirtyRateCalc",
            format!("{name}, {seconds} s"),
            || self.inner.start_dirty_rate_calc(name, seconds),
        )
    }

    fn dirty_rate_stats(&self, name: &str) -> HvResult<Vec<Stat>> {
        traced(
            "virDomainListGetStats",
            format!("{name}, dirtyrate"),
            || self.inner.dirty_rate_stats(name),
        )
    }

    fn dump_memory(&self, name: &str, path: &Path) -> HvResult<()> {
        traced(
            "virDomainCoreDumpWithFormat",
            format!("{name}, {}", path.display()),
            || self.inner.dump_memory(name, path),
        )
    }

    fn screenshot(&self, name: &str, screen: u32) -> HvResult<Screenshot> {
        traced(
            "virDomainScreenshot",
            format!("{name}, screen {screen}"),
            || self.inner.screenshot(name, screen),
        )
    }

    fn disk_errors(&self, name: &str) -> HvResult<Vec<DiskError>> {
        traced("virDomainGetDiskErrors", name.to_string(), || {
            self.inner.disk_errors(name)
        })
    }

    fn backup_begin(
        &self,
        name: &str,
        backup_xml: &str,
        checkpoint_xml: Option<&str>,
    ) -> HvResult<()> {
        traced(
            "virDomainBackupBegin",
            format!("{name}, {backup_xml}"),
            || self.inner.backup_begin(name, backup_xml, checkpoint_xml),
        )
    }

    fn checkpoint_create(&self, name: &str, xml: &str, redefine: bool) -> HvResult<()> {
        traced(
            "virDomainCheckpointCreateXML",
            format!("{name}, redefine={redefine}, {xml}"),
            || self.inner.checkpoint_create(name, xml, redefine),
        )
    }

    fn checkpoint_names(&self, name: &str) -> HvResult<Vec<String>> {
        traced("virDomainListAllCheckpoints", name.to_string(), || {
            self.inner.checkpoint_names(name)
        })
    }

    fn checkpoint_xml(&self, name: &str, checkpoint: &str) -> HvResult<String> {
        traced(
            "virDomainCheckpointGetXMLDesc",
            format!("{name}, {checkpoint}"),
            || self.inner.checkpoint_xml(name, checkpoint),
        )
    }

    fn checkpoint_delete(&self, name: &str, checkpoint: &str, metadata_only: bool) -> HvResult<()> {
        traced(
            "virDomainCheckpointDelete",
            format!("{name}, {checkpoint}, metadata_only={metadata_only}"),
            || {
                self.inner
                    .checkpoint_delete(name, checkpoint, metadata_only)
            },
        )
    }

    fn reconnect(&self) -> HvResult<ConnectionId> {
        traced("virConnectOpen", self.inner.info().uri, || {
            self.inner.reconnect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_results_are_cut() {
        assert_eq!(brief(&()), "");
        assert_eq!(brief(&Some(3)), "Some(3)");
        let long = "x".repeat(1000);
        let cut = brief(&long);
        assert!(cut.len() < 300 && cut.ends_with("(1002 bytes)"), "{cut}");
    }
}
