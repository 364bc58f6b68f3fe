//! KubeVirt's live migration contract, as its launcher keeps it: where the
//! source sends the domain (the unix sockets virt-handler's migration
//! proxy serves in the share directory), which disks it copies (decided
//! from the VMI's volumes), virt-handler's `MigrationOptions`, and the
//! migration metadata virt-handler reads back in `api.Domain`.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::api::{GoTime, MigrationMetadata};
use crate::domxml::Domain;
use crate::migration::{
    AbortStatus, KubeVirtMigration, MigrationOptions, MigrationPhase, MigrationStatus,
    TargetAddress,
};
use crate::vmi::Quantity;

/// virt-handler's proxy ports: the guest's memory and the copied disks
/// (`LibvirtDirectMigrationPort`, `LibvirtBlockMigrationPort`).
pub const DIRECT_MIGRATION_PORT: u16 = 49152;
pub const BLOCK_MIGRATION_PORT: u16 = 49153;

/// `<share>/migrationproxy/<key>-source.sock`, KubeVirt's `SourceUnixFile`:
/// where virt-handler's source proxy listens for the pod, and, with the
/// same path inside the target pod, where the target's QEMU listens.
pub fn proxy_socket(share_dir: &Path, key: &str) -> String {
    share_dir
        .join("migrationproxy")
        .join(format!("{key}-source.sock"))
        .display()
        .to_string()
}

/// The directory the proxy sockets live in; the target makes it.
pub fn proxy_dir(share_dir: &Path) -> std::path::PathBuf {
    share_dir.join("migrationproxy")
}

/// Where the source sends a VMI with uid `uid`: the target's libvirt
/// daemon through the `<uid>` proxy (`session` for a non-root VMI), the
/// memory through `<uid>-49152`, the disks through `<uid>-49153`.
pub fn target_address(share_dir: &Path, uid: &str, non_root: bool) -> TargetAddress {
    let daemon = if non_root { "session" } else { "system" };
    let key = |port: u16| format!("{uid}-{port}");
    TargetAddress {
        libvirt_uri: format!(
            "qemu+unix:///{daemon}?socket={}",
            proxy_socket(share_dir, uid)
        ),
        migration_uri: Some(format!(
            "unix://{}",
            proxy_socket(share_dir, &key(DIRECT_MIGRATION_PORT))
        )),
        disks_uri: Some(format!(
            "unix://{}",
            proxy_socket(share_dir, &key(BLOCK_MIGRATION_PORT))
        )),
        paths: None,
        stack: None,
    }
}

/// virt-handler's `cmdclient.MigrationOptions` as Go's JSON writes it.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct HandlerMigrationOptions {
    pub bandwidth: Option<Value>,
    pub progress_timeout: i64,
    #[serde(rename = "CompletionTimeoutPerGiB")]
    pub completion_timeout_per_gib: i64,
    pub max_downtime_ms: u64,
    pub unsafe_migration: bool,
    pub allow_auto_converge: bool,
    pub allow_post_copy: bool,
    pub parallel_migration_threads: Option<u32>,
    pub compression: Option<String>,
}

impl HandlerMigrationOptions {
    pub fn parse(json: &[u8]) -> Result<HandlerMigrationOptions, String> {
        serde_json::from_slice(json).map_err(|e| format!("cannot read the migration options: {e}"))
    }

    /// The bandwidth cap in MiB/s (KubeVirt's `QuantityToMebiByte`); 0 is
    /// no limit.
    fn bandwidth_mib_per_s(&self) -> Result<u64, String> {
        let text = match &self.bandwidth {
            None | Some(Value::Null) => return Ok(0),
            Some(Value::String(text)) => text.clone(),
            Some(Value::Number(n)) => n.to_string(),
            Some(other) => return Err(format!("bandwidth {other} is not a quantity")),
        };
        let quantity = Quantity::parse(&text).map_err(|e| format!("bandwidth {text:?}: {e}"))?;
        if quantity.is_negative() {
            return Err(format!("bandwidth {text:?} is negative"));
        }
        let bytes = quantity
            .floor()
            .map_err(|e| format!("bandwidth {text:?}: {e}"))?;
        Ok(u64::try_from(bytes).unwrap_or(0) >> 20)
    }

    /// The manager's options for this migration.
    pub fn into_options(
        self,
        target: TargetAddress,
        kubevirt: KubeVirtMigration,
    ) -> Result<MigrationOptions, String> {
        let bandwidth = self.bandwidth_mib_per_s()?;
        // The compression methods KubeVirt's launcher knows; others are
        // left off with a warning, as it does.
        let compression = match self.compression.as_deref() {
            None | Some("") | Some("None") => None,
            Some("Zstd") | Some("zstd") => Some("zstd".to_string()),
            Some(other) => {
                log::warn!(
                    "kubevirt: unsupported migration compression {other:?}; not compressing"
                );
                None
            }
        };
        let seconds = |s: i64| u64::try_from(s).unwrap_or(0);
        Ok(MigrationOptions {
            target,
            bandwidth_mib_per_s: Some(bandwidth).filter(|b| *b > 0),
            completion_timeout_per_gib: seconds(self.completion_timeout_per_gib),
            progress_timeout: seconds(self.progress_timeout),
            max_downtime_ms: Some(self.max_downtime_ms).filter(|ms| *ms > 0),
            allow_auto_converge: self.allow_auto_converge,
            allow_post_copy: self.allow_post_copy,
            unsafe_migration: self.unsafe_migration,
            kubevirt: Some(KubeVirtMigration {
                parallel_connections: self.parallel_migration_threads,
                compression,
                ..kubevirt
            }),
        })
    }
}

/// Whether KubeVirt runs this VMI's QEMU unprivileged (`IsNonRoot`: a
/// runtime user other than root).
pub fn vmi_is_non_root(vmi: &Value) -> bool {
    vmi.pointer("/status/runtimeUser")
        .and_then(Value::as_u64)
        .is_some_and(|user| user != 0)
}

/// The volumes of the VMI by how a migration treats them (KubeVirt's
/// `classifyVolumesForMigration`): shared ones stay, generated ones
/// (cloud-init, config and container disks) are copied.
struct VolumeClasses {
    shared: Vec<String>,
    generated: Vec<String>,
}

fn classify_volumes(vmi: &Value) -> VolumeClasses {
    let migrated: Vec<&str> = vmi
        .pointer("/status/migratedVolumes")
        .and_then(Value::as_array)
        .map(|v| {
            v.iter()
                .filter_map(|m| m.get("volumeName").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    let mut classes = VolumeClasses {
        shared: Vec::new(),
        generated: Vec::new(),
    };
    let volumes = vmi
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for volume in volumes {
        let Some(name) = volume.get("name").and_then(Value::as_str) else {
            continue;
        };
        let has = |key: &str| volume.get(key).is_some_and(|v| !v.is_null());
        let moving = migrated.contains(&name);
        if has("persistentVolumeClaim") || has("dataVolume") {
            if !moving {
                classes.shared.push(name.to_string());
            }
        } else if has("hostDisk") {
            let shared = volume
                .pointer("/hostDisk/shared")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            if !moving && shared {
                classes.shared.push(name.to_string());
            }
        } else if [
            "configMap",
            "secret",
            "downwardAPI",
            "serviceAccount",
            "cloudInitNoCloud",
            "cloudInitConfigDrive",
            "containerDisk",
        ]
        .iter()
        .any(|key| has(key))
        {
            classes.generated.push(name.to_string());
        }
    }
    classes
}

/// The target devices of the disks a migration copies (KubeVirt's
/// `getDiskTargetsForMigration`): file and block disks that are not
/// CD-ROMs, not shared volumes, and writable unless generated. A disk's
/// volume is its alias without `ua-`.
pub fn disks_to_copy(vmi: &Value, domain_xml: &str) -> Result<Vec<String>, String> {
    let domain = Domain::from_xml(domain_xml)
        .map_err(|e| format!("cannot read the domain XML for its disks: {e}"))?;
    let classes = classify_volumes(vmi);
    Ok(domain
        .devices
        .disks
        .iter()
        .filter(|disk| disk.device.as_deref() != Some("cdrom"))
        .filter(|disk| matches!(disk.disk_type.as_str(), "file" | "block"))
        .filter(|disk| {
            let alias = disk.alias.as_ref().map(|a| a.name.as_str()).unwrap_or("");
            let volume = alias.strip_prefix("ua-").unwrap_or(alias);
            let generated = classes.generated.iter().any(|v| v == volume);
            let shared = classes.shared.iter().any(|v| v == volume);
            (disk.readonly.is_none() || generated) && !shared
        })
        .map(|disk| disk.target.dev.clone())
        .collect())
}

/// The migration part of `api.Domain`'s KubeVirt metadata, from a
/// `query-migration` record: what virt-handler reads to follow a
/// migration (started, ended, failed and why, a cancel's status).
pub fn metadata(record: &MigrationStatus) -> MigrationMetadata {
    // metav1.Time has whole seconds; a time past i64 is no time.
    let time = |seconds: f64| {
        format!("{:.0}", seconds.floor())
            .parse::<i64>()
            .ok()
            .map(GoTime::from_unix)
    };
    let failed = matches!(
        record.phase,
        MigrationPhase::Failed | MigrationPhase::Cancelled
    );
    let abort = match record.abort {
        None => "",
        Some(AbortStatus::Aborting) => "Aborting",
        Some(AbortStatus::Succeeded) => "Succeeded",
        Some(AbortStatus::Failed) => "Failed",
    };
    let failure_reason = if !failed {
        String::new()
    } else if record.abort == Some(AbortStatus::Succeeded) {
        // KubeVirt's launcher words an aborted migration so.
        "Live migration has been aborted".to_string()
    } else {
        record.failure.clone().unwrap_or_default()
    };
    MigrationMetadata {
        uid: record.migration_uid.clone().unwrap_or_default(),
        start_timestamp: time(record.started),
        end_timestamp: record.ended.and_then(time),
        failed,
        failure_reason,
        abort_status: abort.to_string(),
        mode: match record.mode {
            "post-copy" => "PostCopy",
            _ => "PreCopy",
        }
        .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migration::Role;
    use serde_json::json;

    #[test]
    fn the_source_dials_virt_handlers_proxy_sockets() {
        let address = target_address(Path::new("/var/run/kubevirt"), "u1", false);
        assert_eq!(
            address.libvirt_uri,
            "qemu+unix:///system?socket=/var/run/kubevirt/migrationproxy/u1-source.sock"
        );
        assert_eq!(
            address.migration_uri.as_deref(),
            Some("unix:///var/run/kubevirt/migrationproxy/u1-49152-source.sock")
        );
        assert_eq!(
            address.disks_uri.as_deref(),
            Some("unix:///var/run/kubevirt/migrationproxy/u1-49153-source.sock")
        );
        let address = target_address(Path::new("/s"), "u1", true);
        assert!(address.libvirt_uri.starts_with("qemu+unix:///session?"));
    }

    #[test]
    fn handler_options_become_the_managers() {
        let go = br#"{"Bandwidth":"64Mi","ProgressTimeout":150,"CompletionTimeoutPerGiB":800,"MaxDowntimeMs":300,"UnsafeMigration":false,"AllowAutoConverge":true,"AllowPostCopy":true,"ParallelMigrationThreads":4,"AllowWorkloadDisruption":false,"StallDetectorOptions":null,"Compression":"Zstd","DowntimeTuning":null}"#;
        let target = target_address(Path::new("/s"), "u", false);
        let options = HandlerMigrationOptions::parse(go)
            .unwrap()
            .into_options(target, KubeVirtMigration::default())
            .unwrap();
        assert_eq!(options.bandwidth_mib_per_s, Some(64));
        assert_eq!(
            (options.progress_timeout, options.completion_timeout_per_gib),
            (150, 800)
        );
        assert_eq!(options.max_downtime_ms, Some(300));
        assert!(options.allow_auto_converge && options.allow_post_copy);
        let kubevirt = options.kubevirt.unwrap();
        assert_eq!(kubevirt.parallel_connections, Some(4));
        assert_eq!(kubevirt.compression.as_deref(), Some("zstd"));
        // Go's zero values: no limit, no extras.
        let target = target_address(Path::new("/s"), "u", false);
        let options = HandlerMigrationOptions::parse(br#"{"Bandwidth":"0"}"#)
            .unwrap()
            .into_options(target, KubeVirtMigration::default())
            .unwrap();
        assert_eq!(options.bandwidth_mib_per_s, None);
        assert_eq!(options.max_downtime_ms, None);
        let kubevirt = options.kubevirt.unwrap();
        assert_eq!(
            (kubevirt.parallel_connections, kubevirt.compression),
            (None, None)
        );
        assert!(HandlerMigrationOptions::parse(b"[").is_err());
        let bad = HandlerMigrationOptions::parse(br#"{"Bandwidth":"lots"}"#)
            .unwrap()
            .into_options(
                target_address(Path::new("/s"), "u", false),
                KubeVirtMigration::default(),
            );
        assert!(bad.unwrap_err().contains("bandwidth"));
    }

    #[test]
    fn copies_generated_and_local_disks_but_not_shared_ones() {
        let vmi = json!({"spec": {"volumes": [
            {"name": "root", "containerDisk": {"image": "x"}},
            {"name": "ci", "cloudInitNoCloud": {"userData": "x"}},
            {"name": "pvc", "persistentVolumeClaim": {"claimName": "c"}},
            {"name": "moved", "dataVolume": {"name": "d"}},
            {"name": "scratch", "emptyDisk": {"capacity": "1Gi"}},
            {"name": "host", "hostDisk": {"path": "/h", "shared": true}},
        ]}, "status": {"migratedVolumes": [{"volumeName": "moved"}]}});
        let disk = |dev: &str, alias: &str, extra: &str| {
            format!(
                "<disk type='file' device='disk'><source file='/d/{dev}'/><target dev='{dev}' bus='virtio'/>{extra}<alias name='ua-{alias}'/></disk>"
            )
        };
        let xml = format!(
            "<domain type='kvm'><name>x</name><memory>1</memory><os><type>hvm</type></os><devices>{}{}{}{}{}{}<disk type='file' device='cdrom'><target dev='sda' bus='sata'/><readonly/><alias name='ua-cd'/></disk></devices></domain>",
            disk("vda", "root", ""),
            disk("vdb", "ci", "<readonly/>"),
            disk("vdc", "pvc", ""),
            disk("vdd", "moved", ""),
            disk("vde", "scratch", ""),
            disk("vdf", "host", ""),
        );
        assert_eq!(
            disks_to_copy(&vmi, &xml).unwrap(),
            vec!["vda", "vdb", "vdd", "vde"]
        );
        assert!(disks_to_copy(&vmi, "<nope").is_err());
    }

    #[test]
    fn metadata_follows_the_record() {
        let running = MigrationStatus {
            abort: None,
            completed: None,
            elapsed_seconds: 1.0,
            ended: None,
            failure: None,
            migration_uid: Some("m1".into()),
            mode: "pre-copy",
            phase: MigrationPhase::Running,
            progress: None,
            role: Role::Source,
            started: 1700000000.5,
            target_uri: None,
        };
        let m = metadata(&running);
        assert_eq!(m.uid, "m1");
        assert!(m.start_timestamp.is_some() && m.end_timestamp.is_none());
        assert!(!m.failed && m.abort_status.is_empty());
        assert_eq!(m.mode, "PreCopy");
        let aborted = MigrationStatus {
            phase: MigrationPhase::Cancelled,
            started: 1.0,
            ended: Some(2.0),
            mode: "post-copy",
            failure: Some("cancelled by migrate-cancel".into()),
            migration_uid: None,
            abort: Some(AbortStatus::Succeeded),
            ..running
        };
        let m = metadata(&aborted);
        assert!(m.failed && m.end_timestamp.is_some());
        assert_eq!(m.failure_reason, "Live migration has been aborted");
        assert_eq!(
            (m.abort_status.as_str(), m.mode.as_str()),
            ("Succeeded", "PostCopy")
        );
    }
}
