//! What an operator asks a running guest's launcher after day one, each a
//! read-only job: the QEMU version behind the daemon
//! (`query-qemu-version`), how fast the guest dirties its memory
//! (`query-dirty-rate`) and what its display shows (`screenshot`).

use std::time::Duration;

use serde_json::Value;

use super::DomainManager;
use super::errors::hypervisor_error;
use super::jobs::{JobOutput, Observation, Operation};
use super::reply::JobValue;
use crate::command::{MAX_DIRTY_RATE_SECONDS, ReplyTo};
use crate::hypervisor::state::dotted_version;
use crate::hypervisor::{DriverKind, HvResult, Hypervisor, Stat};
use crate::protocol::{CommandError, ErrorClass};
use crate::replies;

/// How often a finished measurement is looked for once its period is
/// over, and for how long (KubeVirt: every 200 ms for a second).
const DIRTY_RATE_POLL: Duration = Duration::from_millis(200);
const DIRTY_RATE_GRACE: Duration = Duration::from_secs(2);

/// libvirt's `virDomainDirtyRateStatus`.
const DIRTY_RATE_MEASURED: i64 = 2;

/// The hypervisor's version as `query-version` and a migration target's
/// address name it ("QEMU 7.2.22"). Read by a job rather than when the
/// connection opens (`HypervisorInfo` says why): right after the start, so
/// that a fresh daemon's probe of QEMU runs while the launcher already
/// answers, ahead of the first sync's define (which waits for the same
/// probe), and again after each reconnect (the daemon may be another).
#[derive(Default)]
pub(super) struct HypervisorVersion {
    /// The last version read.
    read: Option<String>,
    /// `query-version` replies waiting for the read.
    waiting: Vec<ReplyTo>,
    /// The launcher's daemons were given their CPUs back.
    released: bool,
}

impl HypervisorVersion {
    /// The version last read, if one was.
    pub(super) fn get(&self) -> Option<&str> {
        self.read.as_deref()
    }

    /// The connection changed: read it again.
    pub(super) fn forget(&mut self) {
        self.read = None;
    }
}

impl DomainManager {
    /// Starts the read of the hypervisor's version, unless it runs.
    pub(super) fn read_hypervisor_version(&mut self) {
        if self.jobs.is_running(Operation::ReadHypervisorVersion) {
            return;
        }
        let driver = self.hypervisor.info().driver;
        // A daemon of the launcher's own that started pinned to the CPU
        // its copied capabilities entry was made on validates that entry
        // (CPUID included) when it first builds its capabilities: on this
        // call, the first that needs them (daemons::capabilities). Once it
        // has answered (or failed: the pin must not outlive the start) the
        // daemon gets the launcher's CPUs back, from this worker rather
        // than the manager's thread.
        let daemons = if self.hypervisor_version.released {
            None
        } else {
            self.hypervisor_version.released = true;
            self.daemons.clone()
        };
        self.jobs.spawn(
            Operation::ReadHypervisorVersion,
            None,
            self.timing.command,
            move |hv| {
                let read = read_hypervisor(hv, driver);
                if let Some(daemons) = daemons {
                    daemons.release_start_cpu();
                    if read.is_ok() {
                        daemons.keep_capabilities();
                    }
                }
                match read {
                    Ok(version) => JobOutput {
                        result: Ok(JobValue::Empty),
                        observed: Observation::HypervisorVersion(version),
                    },
                    Err(e) => JobOutput::reply(Err(hypervisor_error(&e))),
                }
            },
        );
    }

    pub(super) fn on_hypervisor_version(&mut self, version: String) {
        if self.hypervisor_version.get() != Some(version.as_str()) {
            log::info!(
                "manager: the hypervisor is {version} ({} ms after the start)",
                self.started.elapsed().as_millis()
            );
        }
        self.hypervisor_version.read = Some(version.clone());
        for reply in std::mem::take(&mut self.hypervisor_version.waiting) {
            reply.send(Ok(self.query_version(version.clone()).into()));
        }
    }

    pub(super) fn on_hypervisor_version_failed(&mut self, e: &CommandError) {
        log::warn!("manager: cannot read the hypervisor's version: {}", e.desc);
        for reply in std::mem::take(&mut self.hypervisor_version.waiting) {
            reply.send(Err(CommandError {
                desc: format!("query-version: {}", e.desc),
                ..e.clone()
            }));
        }
    }

    /// `query-version`: at once once the hypervisor's version is read,
    /// else when it is (the read runs from the start).
    pub(super) fn answer_query_version(&mut self, reply: ReplyTo) {
        match self.hypervisor_version.get() {
            Some(version) => {
                let version = version.to_string();
                reply.send(Ok(self.query_version(version).into()));
            }
            None => {
                self.hypervisor_version.waiting.push(reply);
                self.read_hypervisor_version();
            }
        }
    }

    pub(super) fn query_qemu_version(&mut self, reply: ReplyTo) {
        let driver = self.hypervisor.info().driver;
        self.jobs.spawn(
            Operation::QueryQemuVersion,
            Some(reply),
            self.timing.command,
            move |hv| {
                JobOutput::reply(
                    read_hypervisor(hv, driver)
                        .map(|version| JobValue::Reply(replies::QemuVersion { version }.into()))
                        .map_err(|e| hypervisor_error(&e)),
                )
            },
        );
    }

    pub(super) fn query_dirty_rate(&mut self, seconds: u32, reply: ReplyTo) {
        let command = "query-dirty-rate";
        if self.migration_running_as_source() {
            return reply.send(Err(CommandError::invalid_state(format!(
                "{command}: a migration is running; QEMU measures no dirty rate then (KubeVirt skips it too), query-migration shows the migration's"
            ))));
        }
        if self.jobs.is_running(Operation::QueryDirtyRate) {
            return reply.send(Err(CommandError::new(
                ErrorClass::Busy,
                format!("{command}: a measurement is under way; retry when it completes"),
            )));
        }
        let name = self.config.domain_name.clone();
        // The measurement takes its period; the command's own deadline
        // comes on top.
        let timeout = self.timing.command + Duration::from_secs(u64::from(seconds));
        self.jobs
            .spawn(Operation::QueryDirtyRate, Some(reply), timeout, move |hv| {
                JobOutput::reply(
                    measure_dirty_rate(hv, &name, seconds).map(|rate| JobValue::Reply(rate.into())),
                )
            });
    }

    pub(super) fn screenshot(&mut self, reply: ReplyTo) {
        let name = self.config.domain_name.clone();
        self.jobs.spawn(
            Operation::Screenshot,
            Some(reply),
            self.timing.command,
            move |hv| {
                JobOutput::reply(
                    take_screenshot(hv, &name).map(|shot| JobValue::Reply(shot.into())),
                )
            },
        );
    }
}

/// Asks the daemon for its hypervisor's version (`virConnectGetVersion`),
/// named as `query-version`, GetQemuVersion and a migration target's
/// address name it: "QEMU 7.2.22".
pub(super) fn read_hypervisor(hv: &dyn Hypervisor, driver: DriverKind) -> HvResult<String> {
    hv.hypervisor_version()
        .map(|version| qemu_version(driver, version))
}

/// "QEMU 7.2.22", as KubeVirt's GetQemuVersion writes it (libvirt's test
/// driver: "TEST 0.0.2").
fn qemu_version(driver: DriverKind, version: u64) -> String {
    let driver = match driver {
        DriverKind::Qemu => "QEMU",
        DriverKind::Test => "TEST",
    };
    format!("{driver} {}", dotted_version(version))
}

fn stat<'a>(stats: &'a [Stat], name: &str) -> Option<&'a Value> {
    stats.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

/// Starts a measurement, waits its period and reads the result, as
/// KubeVirt's GetDomainDirtyRate does.
pub(super) fn measure_dirty_rate(
    hv: &dyn Hypervisor,
    name: &str,
    seconds: u32,
) -> Result<replies::DirtyRate, CommandError> {
    debug_assert!(seconds <= MAX_DIRTY_RATE_SECONDS);
    hv.start_dirty_rate_calc(name, seconds)
        .map_err(|e| hypervisor_error(&e))?;
    std::thread::sleep(Duration::from_secs(u64::from(seconds)));
    let give_up = std::time::Instant::now() + DIRTY_RATE_GRACE;
    loop {
        let stats = hv
            .dirty_rate_stats(name)
            .map_err(|e| hypervisor_error(&e))?;
        let status = stat(&stats, "dirtyrate.calc_status").and_then(Value::as_i64);
        if status == Some(DIRTY_RATE_MEASURED) {
            return dirty_rate_reply(name, &stats);
        }
        if std::time::Instant::now() >= give_up {
            let status = match status {
                Some(0) => "not started".to_string(),
                Some(1) => "still measuring".to_string(),
                Some(n) => format!("in status {n}"),
                None => "not reported".to_string(),
            };
            return Err(CommandError::new(
                ErrorClass::Timeout,
                format!(
                    "query-dirty-rate: the measurement is {status} {} s after its {seconds} s period",
                    DIRTY_RATE_GRACE.as_secs()
                ),
            ));
        }
        std::thread::sleep(DIRTY_RATE_POLL);
    }
}

fn dirty_rate_reply(name: &str, stats: &[Stat]) -> Result<replies::DirtyRate, CommandError> {
    let rate = stat(stats, "dirtyrate.megabytes_per_second")
        .and_then(Value::as_i64)
        .ok_or_else(|| {
            CommandError::internal(
                "query-dirty-rate: libvirt reported the measurement done but no dirtyrate.megabytes_per_second",
            )
        })?;
    let get = |key: &str| stat(stats, key).cloned().unwrap_or(Value::Null);
    Ok(replies::DirtyRate {
        calc_period_seconds: get("dirtyrate.calc_period"),
        calc_start_time: get("dirtyrate.calc_start_time"),
        domain: name.to_string(),
        megabytes_per_second: rate,
        mode: get("dirtyrate.calc_mode"),
    })
}

/// The primary display as PNG, refused when the domain has no display.
fn take_screenshot(hv: &dyn Hypervisor, name: &str) -> Result<replies::Screenshot, CommandError> {
    let (xml, _) = hv.domain_xml(name).map_err(|e| hypervisor_error(&e))?;
    let domain: crate::domxml::Domain = crate::domxml::read::from_str(&xml).map_err(|e| {
        CommandError::internal(format!("screenshot: the domain's XML does not read: {e}"))
    })?;
    let has_display = domain
        .devices
        .videos
        .iter()
        .any(|v| v.model.model_type != "none")
        || !domain.devices.graphics.is_empty();
    if !has_display {
        return Err(CommandError::invalid_state(
            "screenshot: the VMI has no graphics device (spec.domain.devices.autoattachGraphicsDevice is false), so there is no display to take a screenshot of",
        ));
    }
    // The primary display; KubeVirt takes no other.
    let shot = hv.screenshot(name, 0).map_err(|e| hypervisor_error(&e))?;
    let png = match shot.mime.as_str() {
        "image/x-portable-pixmap" => {
            let image = crate::png::parse_ppm(&shot.data).map_err(|e| {
                CommandError::internal(format!("screenshot: QEMU's image does not read: {e}"))
            })?;
            (crate::png::encode_png(&image), image.width, image.height)
        }
        // libvirt's test driver hands out a PNG of its own.
        "image/png" => {
            let (width, height) = crate::png::png_size(&shot.data).ok_or_else(|| {
                CommandError::internal("screenshot: libvirt's PNG has no image header")
            })?;
            (shot.data, width, height)
        }
        other => {
            return Err(CommandError::internal(format!(
                "screenshot: libvirt gave a {other} image; only PPM (QEMU's) and PNG are read"
            )));
        }
    };
    let (data, width, height) = png;
    Ok(replies::Screenshot {
        data: crate::encoding::base64_encode(&data),
        height,
        mime: "image/png",
        size_bytes: data.len(),
        width,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_written_as_kubevirt_writes_it() {
        assert_eq!(qemu_version(DriverKind::Qemu, 7_002_022), "QEMU 7.2.22");
        assert_eq!(qemu_version(DriverKind::Qemu, 10_001_000), "QEMU 10.1.0");
        assert_eq!(qemu_version(DriverKind::Test, 2), "TEST 0.0.2");
    }

    #[test]
    fn a_measured_rate_is_the_reply() {
        let stats: Vec<Stat> = vec![
            ("dirtyrate.calc_status".into(), Value::from(2)),
            (
                "dirtyrate.calc_start_time".into(),
                Value::from(1_700_000_000),
            ),
            ("dirtyrate.calc_period".into(), Value::from(1)),
            ("dirtyrate.calc_mode".into(), Value::from("page-sampling")),
            ("dirtyrate.megabytes_per_second".into(), Value::from(42)),
        ];
        assert_eq!(
            serde_json::to_string(&dirty_rate_reply("ns_vm", &stats).unwrap()).unwrap(),
            r#"{"calc_period_seconds":1,"calc_start_time":1700000000,"domain":"ns_vm","megabytes_per_second":42,"mode":"page-sampling"}"#
        );
        let err = dirty_rate_reply("ns_vm", &stats[..1]).unwrap_err();
        assert_eq!(err.class, ErrorClass::Internal);
    }
}
