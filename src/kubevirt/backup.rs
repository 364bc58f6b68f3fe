//! KubeVirt's `BackupVirtualMachine` and `RedefineCheckpoint` (VEP 25):
//! the JSON payloads virt-handler sends (`BackupOptions`,
//! `BackupCheckpoint`) read into the manager's `backup`, `backup-abort`
//! and `redefine-checkpoint` commands, named and laid out as KubeVirt's
//! launcher names them (storage/backup.go): the checkpoint is
//! `<backupName>-<start time>`, a push backup writes into
//! `<targetPath>/<vmi>/<checkpoint>/`, a pull backup serves NBD on
//! `<share>/sockets/backup-nbd-sock`.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};

use super::api::GoTime;

/// KubeVirt's `backup/v1alpha1.BackupOptions` (the export tunnel's fields
/// are not read: this launcher has no export tunnel).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct BackupOptions {
    backup_name: String,
    cmd: String,
    mode: String,
    backup_start_time: Option<GoTime>,
    incremental: Option<String>,
    target_path: Option<String>,
    skip_quiesce: bool,
}

/// KubeVirt's `backup/v1alpha1.BackupCheckpoint`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct BackupCheckpoint {
    name: String,
    creation_time: Option<GoTime>,
}

/// What a `BackupVirtualMachine` asks of the manager.
#[derive(Debug, PartialEq)]
pub enum BackupCall {
    /// Start backup `checkpoint` (the `backup` command's `arguments`);
    /// `make_dir` is the push backup's directory, made first; `quiesce`:
    /// freeze the guest's filesystems while libvirt starts the job.
    Start {
        checkpoint: String,
        arguments: Value,
        make_dir: Option<PathBuf>,
        quiesce: bool,
    },
    /// Abort the running backup, which must be `checkpoint`.
    Abort { checkpoint: String },
}

/// `2006-01-02_15-04-05` (UTC), KubeVirt's time in a checkpoint's name.
fn backup_time(time: &GoTime) -> String {
    time.as_str()
        .trim_end_matches('Z')
        .replace('T', "_")
        .replace(':', "-")
}

/// The call `options` (a `BackupRequest`'s JSON) asks for, or the message
/// KubeVirt's launcher answers for it.
pub fn backup_call(options: &[u8], vmi_name: &str, share: &Path) -> Result<BackupCall, String> {
    if options.is_empty() {
        return Err("backup options object not present in command server request".to_string());
    }
    let options: BackupOptions = serde_json::from_slice(options).map_err(|e| {
        format!("no valid backup options object present in command server request: {e}")
    })?;
    let checkpoint = |options: &BackupOptions| -> Result<String, String> {
        if options.backup_name.is_empty() {
            return Err("backup name wasn't provided".to_string());
        }
        let time = options
            .backup_start_time
            .as_ref()
            .ok_or("backup start time wasn't provided")?;
        Ok(format!("{}-{}", options.backup_name, backup_time(time)))
    };
    match options.cmd.as_str() {
        "Start" => {
            if !matches!(options.mode.as_str(), "Push" | "Pull") {
                return Err("unknown backup mode: only Push and Pull are supported".to_string());
            }
            let target = options
                .target_path
                .as_deref()
                .ok_or("backup targetPath wasn't provided")?;
            let checkpoint = checkpoint(&options)?;
            let mut arguments = json!({ "checkpoint": checkpoint });
            if let Some(since) = options.incremental.as_deref().filter(|s| !s.is_empty()) {
                arguments["incremental"] = json!(since);
            }
            let mut make_dir = None;
            if options.mode == "Push" {
                let dir = Path::new(target).join(vmi_name).join(&checkpoint);
                arguments["target_dir"] = json!(dir);
                make_dir = Some(dir);
            } else {
                arguments["mode"] = json!("pull");
                arguments["socket"] = json!(share.join("sockets").join("backup-nbd-sock"));
            }
            Ok(BackupCall::Start {
                checkpoint,
                arguments,
                make_dir,
                quiesce: !options.skip_quiesce,
            })
        }
        "Abort" => Ok(BackupCall::Abort {
            checkpoint: checkpoint(&options)?,
        }),
        "Export" => Err(
            "backup Export (the TLS export tunnel of a pull backup) is not supported by this launcher"
                .to_string(),
        ),
        _ => Err("cmd unsupported, backup command only supports start or abort".to_string()),
    }
}

/// The `redefine-checkpoint` arguments for a `RedefineCheckpointRequest`'s
/// checkpoint JSON, or KubeVirt's message for a bad one.
pub fn redefine_arguments(checkpoint: &[u8]) -> Result<(String, Value), String> {
    let checkpoint: BackupCheckpoint = serde_json::from_slice(checkpoint)
        .map_err(|e| format!("Redefine checkpoint failed: invalid checkpoint info: {e}"))?;
    if checkpoint.name.is_empty() {
        return Err("Redefine checkpoint failed: invalid checkpoint info: no name".to_string());
    }
    let mut arguments = json!({ "name": checkpoint.name });
    if let Some(time) = &checkpoint.creation_time
        && let Ok(seconds) = u64::try_from(time.unix_seconds())
    {
        arguments["creation_time"] = json!(seconds);
    }
    Ok((checkpoint.name, arguments))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_backup_is_named_and_placed_as_kubevirts_launcher_does() {
        let options = br#"{"backupName":"nightly","cmd":"Start","mode":"Push",
            "backupStartTime":"2026-12-02T04:05:06Z","incremental":"nightly-2026-12-01_04-05-06",
            "targetPath":"/backups"}"#;
        let call = backup_call(options, "vm1", Path::new("/var/run/kubevirt")).unwrap();
        assert_eq!(
            call,
            BackupCall::Start {
                checkpoint: "nightly-2026-12-02_04-05-06".into(),
                arguments: json!({
                    "checkpoint": "nightly-2026-12-02_04-05-06",
                    "incremental": "nightly-2026-12-01_04-05-06",
                    "target_dir": "/backups/vm1/nightly-2026-12-02_04-05-06",
                }),
                make_dir: Some("/backups/vm1/nightly-2026-12-02_04-05-06".into()),
                quiesce: true,
            }
        );
    }

    #[test]
    fn a_pull_backup_serves_on_the_share_directorys_socket() {
        let options = br#"{"backupName":"b","cmd":"Start","mode":"Pull","skipQuiesce":true,
            "backupStartTime":"2026-12-02T04:05:06+01:00","targetPath":"/scratch"}"#;
        let Ok(BackupCall::Start {
            arguments,
            make_dir,
            quiesce,
            ..
        }) = backup_call(options, "vm1", Path::new("/var/run/kubevirt"))
        else {
            panic!("not a start");
        };
        assert_eq!(
            arguments,
            json!({
                "checkpoint": "b-2026-12-02_03-05-06",
                "mode": "pull",
                "socket": "/var/run/kubevirt/sockets/backup-nbd-sock",
            })
        );
        assert_eq!((make_dir, quiesce), (None, false));
    }

    #[test]
    fn bad_options_get_kubevirts_messages() {
        let share = Path::new("/s");
        let message = |o: &[u8]| backup_call(o, "vm", share).unwrap_err();
        assert!(message(b"").contains("not present"));
        assert!(message(b"[1]").contains("no valid backup options"));
        assert!(message(br#"{"cmd":"Start","mode":"Sideways"}"#).contains("only Push and Pull"));
        assert!(
            message(br#"{"cmd":"Start","mode":"Push","backupName":"b"}"#).contains("targetPath")
        );
        assert!(
            message(br#"{"cmd":"Start","mode":"Push","backupName":"b","targetPath":"/t"}"#)
                .contains("start time")
        );
        assert!(message(br#"{"cmd":"Export","mode":"Pull"}"#).contains("not supported"));
        assert!(message(br#"{"cmd":"Restart"}"#).contains("only supports start or abort"));
        assert_eq!(
            backup_call(
                br#"{"cmd":"Abort","backupName":"b","backupStartTime":"2026-12-02T04:05:06Z"}"#,
                "vm",
                share
            ),
            Ok(BackupCall::Abort {
                checkpoint: "b-2026-12-02_04-05-06".into()
            })
        );
    }

    #[test]
    fn a_checkpoint_to_redefine_carries_its_name_and_creation_time() {
        assert_eq!(
            redefine_arguments(br#"{"name":"c1","creationTime":"1970-01-01T00:01:40Z"}"#),
            Ok((
                "c1".to_string(),
                json!({"name": "c1", "creation_time": 100})
            ))
        );
        assert_eq!(
            redefine_arguments(br#"{"name":"c1"}"#),
            Ok(("c1".to_string(), json!({"name": "c1"})))
        );
        assert!(
            redefine_arguments(b"{}")
                .unwrap_err()
                .contains("invalid checkpoint info")
        );
        assert!(
            redefine_arguments(b"nope")
                .unwrap_err()
                .contains("invalid checkpoint info")
        );
    }
}
