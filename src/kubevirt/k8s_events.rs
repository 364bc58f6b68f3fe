//! The Kubernetes events KubeVirt's launcher reports through virt-handler
//! (`Notify.HandleK8SEvent`), which virt-handler records on the VMI:
//!
//! - `Warning GuestPanicked`: libvirt's `Crashed` lifecycle event (the
//!   guest signalled a panic through its panic device). The message is
//!   what the QEMU log says about the panic (`GuestPanicked:
//!   type=hyper-v`, with the BSOD arguments for Hyper-V), else
//!   `GuestPanicked (details unavailable)`. Sent once per launcher for a
//!   panic that stops the guest; a `Crashloaded` one (the guest's kdump
//!   took over) each time.
//! - `Warning GuestAgentPingFailed`: a `GuestPing` that failed.
//! - `Warning IOerror`: the guest was paused by an I/O error, one event
//!   per disk libvirt names (`virDomainGetDiskErrors`), with the volume
//!   behind it. Sent once each time the guest is paused so; KubeVirt's
//!   launcher repeats it on every domain event while the guest stays
//!   paused, which Kubernetes folds into one event with a count.
//!
//! KubeVirt's launcher sends one more this one does not:
//! `AccessCredentialsSyncSuccess` (the VMI's access credentials, which
//! this launcher does not apply).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::hypervisor::state::CrashedDetail;
use crate::hypervisor::{DiskErrorKind, LifecycleEvent};
use crate::replies::DiskErrorReply;

/// How much of the end of the QEMU log is searched for the panic's line
/// (libvirt writes it last, when the panic happens).
const LOG_TAIL_BYTES: u64 = 64 * 1024;

/// One event, as `k8sv1.Event`'s type, reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct K8sEvent {
    pub severity: Severity,
    pub reason: &'static str,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Warning,
}

impl Severity {
    fn as_str(self) -> &'static str {
        match self {
            Severity::Warning => "Warning",
        }
    }
}

/// The VMI the events are about (`involvedObject`): virt-handler records
/// an event only on the VMI with this namespace, name and uid.
#[derive(Debug, Clone)]
pub struct VmiRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl K8sEvent {
    pub fn guest_agent_ping_failed(vmi_name: &str) -> K8sEvent {
        K8sEvent {
            severity: Severity::Warning,
            reason: "GuestAgentPingFailed",
            message: format!("GuestAgentPing probe failed for VMI {vmi_name}"),
        }
    }

    /// KubeVirt's words for a disk's I/O error (notify-client's
    /// `eventCallback`).
    pub fn io_error(disk: &DiskErrorReply) -> K8sEvent {
        let message = if disk.error == DiskErrorKind::NoSpace.as_str() {
            format!(
                "VM Paused due to not enough space on volume: {}",
                disk.volume
            )
        } else {
            format!("VM Paused due to IO error at the volume: {}", disk.volume)
        };
        K8sEvent {
            severity: Severity::Warning,
            reason: "IOerror",
            message,
        }
    }

    pub fn guest_panicked(info: Option<&PanicInfo>) -> K8sEvent {
        K8sEvent {
            severity: Severity::Warning,
            reason: "GuestPanicked",
            message: info.map_or_else(
                || "GuestPanicked (details unavailable)".to_string(),
                PanicInfo::message,
            ),
        }
    }

    /// `k8sv1.Event` as JSON, as Go's encoding/json writes it.
    pub fn to_json(&self, vmi: &VmiRef) -> Vec<u8> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct ObjectReference<'a> {
            kind: &'a str,
            namespace: &'a str,
            name: &'a str,
            uid: &'a str,
            api_version: &'a str,
        }
        #[derive(Serialize)]
        struct Metadata {
            #[serde(rename = "creationTimestamp")]
            creation_timestamp: Option<String>,
        }
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Event<'a> {
            metadata: Metadata,
            involved_object: ObjectReference<'a>,
            reason: &'a str,
            message: &'a str,
            source: Value,
            first_timestamp: Option<String>,
            last_timestamp: Option<String>,
            #[serde(rename = "type")]
            event_type: &'a str,
            event_time: Option<String>,
            reporting_component: &'a str,
            reporting_instance: &'a str,
        }
        let event = Event {
            metadata: Metadata {
                creation_timestamp: None,
            },
            involved_object: ObjectReference {
                kind: "VirtualMachineInstance",
                namespace: &vmi.namespace,
                name: &vmi.name,
                uid: &vmi.uid,
                api_version: "kubevirt.io/v1",
            },
            reason: self.reason,
            message: &self.message,
            source: Value::Object(Default::default()),
            first_timestamp: None,
            last_timestamp: None,
            event_type: self.severity.as_str(),
            event_time: None,
            reporting_component: "",
            reporting_instance: "",
        };
        serde_json::to_vec(&event).unwrap_or_default()
    }
}

/// What the guest said about its panic, from libvirt's line in the QEMU
/// log (`panic hyper-v: arg1='0x5a', arg2='0x1', ...`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PanicInfo {
    pub panic_type: String,
    pub args: [u64; 5],
}

impl PanicInfo {
    /// KubeVirt's `FormatGuestPanicInfo`.
    fn message(&self) -> String {
        if self.panic_type == "hyper-v" {
            let [a, b, c, d, e] = self.args;
            format!("GuestPanicked: '{a:#x}', '{b:#x}', '{c:#x}', '{d:#x}', '{e:#x}'")
        } else {
            format!("GuestPanicked: type={}", self.panic_type)
        }
    }

    /// One log line: `panic TYPE: arg1=0x.., ...`, anywhere in the line.
    pub fn parse_line(line: &str) -> Option<PanicInfo> {
        let at = line.find("panic")?;
        let rest = line[at + "panic".len()..].strip_prefix(char::is_whitespace)?;
        let rest = rest.trim_start();
        let (panic_type, args) = rest.split_once(':')?;
        if panic_type.is_empty() || panic_type.contains(char::is_whitespace) {
            return None;
        }
        let mut info = PanicInfo {
            panic_type: panic_type.to_string(),
            args: [0; 5],
        };
        for arg in args.split(',') {
            let Some((key, value)) = arg.trim().split_once('=') else {
                continue;
            };
            let Some(index) = key
                .strip_prefix("arg")
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| (1..=5).contains(n))
            else {
                continue;
            };
            let hex = value.trim_matches(|c| c == '\'' || c == '"');
            let Some(digits) = hex.strip_prefix("0x").or_else(|| hex.strip_prefix("0X")) else {
                continue;
            };
            info.args[index - 1] = u64::from_str_radix(digits, 16).unwrap_or(0);
        }
        Some(info)
    }

    /// The last panic line of the QEMU log at `path`; `None` when the log
    /// cannot be read or says nothing about a panic (a pvpanic device
    /// gives no details).
    pub fn from_log(path: &Path) -> Option<PanicInfo> {
        let mut file = File::open(path).ok()?;
        let size = file.metadata().ok()?.len();
        file.seek(SeekFrom::Start(size.saturating_sub(LOG_TAIL_BYTES)))
            .ok()?;
        let mut tail = Vec::new();
        file.take(LOG_TAIL_BYTES).read_to_end(&mut tail).ok()?;
        String::from_utf8_lossy(&tail)
            .lines()
            .rev()
            .find_map(PanicInfo::parse_line)
    }
}

/// Whether a lifecycle event is a guest panic: `Some(true)` for one that
/// stopped the guest (`Panicked`), `Some(false)` for one its kdump handled
/// (`Crashloaded`), `None` for any other event.
pub fn panic_of_lifecycle(event: LifecycleEvent) -> Option<bool> {
    match event {
        LifecycleEvent::Crashed(CrashedDetail::Crashloaded) => Some(false),
        LifecycleEvent::Crashed(_) => Some(true),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vmi() -> VmiRef {
        VmiRef {
            namespace: "ns".into(),
            name: "vm1".into(),
            uid: "u-1".into(),
        }
    }

    #[test]
    fn the_event_is_kubernetes_event_json_as_go_writes_it() {
        let json = K8sEvent::guest_agent_ping_failed("vm1").to_json(&vmi());
        assert_eq!(
            String::from_utf8(json).unwrap(),
            r#"{"metadata":{"creationTimestamp":null},"involvedObject":{"kind":"VirtualMachineInstance","namespace":"ns","name":"vm1","uid":"u-1","apiVersion":"kubevirt.io/v1"},"reason":"GuestAgentPingFailed","message":"GuestAgentPing probe failed for VMI vm1","source":{},"firstTimestamp":null,"lastTimestamp":null,"type":"Warning","eventTime":null,"reportingComponent":"","reportingInstance":""}"#
        );
    }

    #[test]
    fn panic_lines_of_the_qemu_log_as_kubevirt_reads_them() {
        let hyperv = PanicInfo::parse_line(
            "2024-09-30 16:30:49.506+0000: panic hyper-v: arg1='0x5a', arg2='0x1', arg3='0x0', arg4='0x0', arg5='0x10'",
        )
        .unwrap();
        assert_eq!(hyperv.panic_type, "hyper-v");
        assert_eq!(hyperv.args, [0x5a, 1, 0, 0, 0x10]);
        assert_eq!(
            K8sEvent::guest_panicked(Some(&hyperv)).message,
            "GuestPanicked: '0x5a', '0x1', '0x0', '0x0', '0x10'"
        );
        let s390 = PanicInfo::parse_line("panic s390: core='0' psw-mask='0x1'").unwrap();
        assert_eq!(
            K8sEvent::guest_panicked(Some(&s390)).message,
            "GuestPanicked: type=s390"
        );
        assert_eq!(PanicInfo::parse_line("kernel: no panic here"), None);
        assert_eq!(PanicInfo::parse_line("panic: nothing"), None);
        assert_eq!(
            K8sEvent::guest_panicked(None).message,
            "GuestPanicked (details unavailable)"
        );
    }

    #[test]
    fn the_last_panic_in_the_log_counts_and_a_missing_log_gives_none() {
        let dir = std::env::temp_dir().join(format!("vl-panic-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("d.log");
        std::fs::write(
            &log,
            "start\npanic hyper-v: arg1='0x1'\nmore\npanic hyper-v: arg1='0x2'\nshutting down\n",
        )
        .unwrap();
        assert_eq!(PanicInfo::from_log(&log).unwrap().args[0], 2);
        assert_eq!(PanicInfo::from_log(&dir.join("none.log")), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn io_errors_name_the_volume_in_kubevirts_words() {
        let disk = |error: DiskErrorKind| DiskErrorReply {
            error: error.as_str(),
            target: "vdb".into(),
            volume: "data".into(),
        };
        let full = K8sEvent::io_error(&disk(DiskErrorKind::NoSpace));
        assert_eq!(
            (full.severity, full.reason, full.message.as_str()),
            (
                Severity::Warning,
                "IOerror",
                "VM Paused due to not enough space on volume: data"
            )
        );
        assert_eq!(
            K8sEvent::io_error(&disk(DiskErrorKind::Unspecified)).message,
            "VM Paused due to IO error at the volume: data"
        );
    }

    #[test]
    fn only_crashed_lifecycle_events_are_panics() {
        use crate::hypervisor::state::StoppedDetail;
        let panicked = LifecycleEvent::Crashed(CrashedDetail::Panicked);
        assert_eq!(panic_of_lifecycle(panicked), Some(true));
        let kdump = LifecycleEvent::Crashed(CrashedDetail::Crashloaded);
        assert_eq!(panic_of_lifecycle(kdump), Some(false));
        let stopped = LifecycleEvent::Stopped(StoppedDetail::Crashed);
        assert_eq!(panic_of_lifecycle(stopped), None);
    }
}
