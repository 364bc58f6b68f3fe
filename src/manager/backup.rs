//! `backup` and the checkpoints behind it: KubeVirt's changed block
//! tracking backups (VEP 25) through libvirt's backup API. Each backup
//! creates a checkpoint (a persistent dirty bitmap in every
//! changedBlockTracking disk's qcow2 image, and libvirt's record of it);
//! an incremental one copies only what changed since the checkpoint it
//! names. A push backup has libvirt write the disks to files; a pull
//! backup has QEMU serve them over NBD on a unix socket until
//! `backup-abort` ends it.
//!
//! The command returns once libvirt runs the job. `query-status` shows the
//! backup's progress (the job statistics, read every second) and outcome;
//! libvirt's JOB_COMPLETED event ends it (BACKUP_COMPLETED or
//! BACKUP_FAILED). The record of the last backup is kept in the private
//! directory, so a restarted launcher still reports it. A checkpoint
//! libvirt does not know (or whose bitmaps are broken) makes an
//! incremental backup fail with that said; it never silently becomes a
//! full one.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::DomainManager;
use super::errors::hypervisor_error;
use super::jobs::{JobOutput, Observation, Operation};
use super::reply::{BackupDisk, JobValue};
use super::timers::Timer;
use crate::command::{BackupRequest, BackupTarget, ReplyTo};
use crate::domxml::Domain;
use crate::events::EventKind;
use crate::hypervisor::{Hypervisor, HypervisorErrorKind, Stat};
use crate::protocol::CommandError;
use crate::replies;

/// The file in the private directory that holds the last backup's record.
pub(super) const RECORD: &str = "backup.json";

/// How often a running backup's progress is read.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// libvirt's `virDomainJobType` of a finished job.
const JOB_COMPLETED: i64 = 3;
const JOB_CANCELLED: i64 = 5;
/// `VIR_DOMAIN_JOB_OPERATION_BACKUP`.
const OPERATION_BACKUP: i64 = 9;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum BackupPhase {
    InProgress,
    Completed,
    Failed,
    Aborted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum BackupMode {
    Push,
    Pull,
}

/// How far a running backup is (libvirt's `disk_processed` of
/// `disk_total` bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct BackupProgress {
    pub(super) processed_bytes: u64,
    pub(super) total_bytes: u64,
}

/// The last backup, as `query-status` shows it and the record keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct BackupRecord {
    pub(super) mode: BackupMode,
    pub(super) checkpoint: String,
    pub(super) incremental: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) format: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) socket: Option<PathBuf>,
    /// Filled in once libvirt runs the job.
    pub(super) disks: Vec<BackupDisk>,
    pub(super) phase: BackupPhase,
    pub(super) started_ms: u64,
    pub(super) ended_ms: Option<u64>,
    pub(super) failure: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) progress: Option<BackupProgress>,
}

/// How long a completed push backup's files may stay open in QEMU before
/// the completion is reported anyway.
const TARGET_RELEASE_WAIT: Duration = Duration::from_secs(10);

/// Waits, up to `limit`, until no process holds QEMU's image locks on
/// `files` (a file that cannot be opened or probed counts as released).
fn wait_until_released(files: &[PathBuf], limit: Duration) {
    let deadline = Instant::now() + limit;
    for file in files {
        let Ok(opened) = std::fs::File::open(file) else {
            continue;
        };
        while crate::os::image_locked(&opened).unwrap_or(false) {
            if Instant::now() >= deadline {
                log::warn!(
                    "backup: {} is still open in QEMU {limit:?} after the job completed",
                    file.display()
                );
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[allow(clippy::cast_precision_loss)] // exact below 2^53 ms
fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

impl BackupRecord {
    fn end(&mut self, phase: BackupPhase, failure: Option<String>) {
        self.phase = phase;
        self.failure = failure;
        self.ended_ms = Some(now_ms());
        self.progress = None;
    }

    pub(super) fn to_status(&self) -> replies::BackupStatus {
        replies::BackupStatus {
            checkpoint: self.checkpoint.clone(),
            disks: serde_json::to_value(&self.disks).unwrap_or(Value::Null),
            ended: self.ended_ms.map(seconds),
            failure: self.failure.clone(),
            format: self.format.clone(),
            incremental: self.incremental.clone(),
            mode: serde_json::to_value(self.mode).unwrap_or(Value::Null),
            phase: serde_json::to_value(self.phase).unwrap_or(Value::Null),
            progress: self
                .progress
                .map(|p| serde_json::to_value(p).unwrap_or(Value::Null)),
            socket: self.socket.as_ref().map(|s| s.display().to_string()),
            started: seconds(self.started_ms),
        }
    }
}

/// The manager's backups: the last one's record, kept in the private dir.
#[derive(Debug)]
pub(super) struct BackupState {
    pub(super) last: Option<BackupRecord>,
    record: PathBuf,
}

impl BackupState {
    pub(super) fn load(private_dir: &Path) -> BackupState {
        let record = private_dir.join(RECORD);
        let last = crate::safe_fs::read_record::<BackupRecord>(&record, "a backup record");
        let mut state = BackupState { last, record };
        if let Some(last) = state.last.as_mut()
            && last.phase == BackupPhase::InProgress
        {
            last.end(
                BackupPhase::Failed,
                Some(
                    "the launcher restarted while the backup ran; whether libvirt finished it is not known"
                        .to_string(),
                ),
            );
            state.save();
        }
        state
    }

    pub(super) fn running(&self) -> Option<&BackupRecord> {
        self.last
            .as_ref()
            .filter(|r| r.phase == BackupPhase::InProgress)
    }

    fn save(&self) {
        let Some(last) = &self.last else { return };
        let written = serde_json::to_vec(last)
            .map_err(std::io::Error::other)
            .and_then(|bytes| {
                crate::safe_fs::replace_file(&self.record, "json.new", &bytes, 0o600)
            });
        if let Err(e) = written {
            log::warn!(
                "manager: cannot record the backup in {}: {e}; a restarted launcher will not know it",
                self.record.display()
            );
        }
    }
}

/// A disk of the domain as the backup sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DomainDisk {
    target: String,
    /// The VMI disk's name, from the `ua-` alias.
    volume: Option<String>,
    format: Option<String>,
}

/// The domain's disks, from its live XML.
pub(super) fn domain_disks(xml: &str) -> Result<Vec<DomainDisk>, CommandError> {
    let domain = Domain::from_xml(xml).map_err(|e| {
        CommandError::internal(format!("the domain XML libvirt gave does not read: {e}"))
    })?;
    Ok(domain
        .devices
        .disks
        .iter()
        .map(|d| DomainDisk {
            target: d.target.dev.clone(),
            volume: d
                .alias
                .as_ref()
                .and_then(|a| a.name.strip_prefix("ua-"))
                .map(str::to_string),
            format: d.driver.as_ref().and_then(|dr| dr.format.clone()),
        })
        .collect())
}

/// The disks that take part (the VMI's changedBlockTracking ones), each
/// checked to carry bitmaps (qcow2), as (volume, target).
fn tracked_disks(
    disks: &[DomainDisk],
    tracked: &[String],
) -> Result<Vec<(String, String)>, CommandError> {
    let mut out = Vec::new();
    for volume in tracked {
        let disk = disks
            .iter()
            .find(|d| d.volume.as_deref() == Some(volume.as_str()))
            .ok_or_else(|| {
                CommandError::invalid_state(format!(
                    "the domain has no disk for the VMI's changedBlockTracking disk {volume:?}"
                ))
            })?;
        if disk.format.as_deref() != Some("qcow2") {
            return Err(CommandError::invalid_state(format!(
                "disk {volume:?} ({}) is {}, not qcow2: it cannot carry the checkpoint's bitmap",
                disk.target,
                disk.format.as_deref().unwrap_or("of no known format")
            )));
        }
        out.push((volume.clone(), disk.target.clone()));
    }
    Ok(out)
}

/// `text` for an XML attribute (quoted with `'`) or element.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\'' => out.push_str("&apos;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// The `<domaincheckpoint>`: a bitmap in each tracked disk, none in the
/// others.
pub(super) fn checkpoint_xml(
    name: &str,
    creation_time: Option<u64>,
    disks: &[DomainDisk],
    tracked: &[(String, String)],
) -> String {
    let mut xml = format!("<domaincheckpoint><name>{}</name>", escape(name));
    if let Some(time) = creation_time {
        xml.push_str(&format!("<creationTime>{time}</creationTime>"));
    }
    xml.push_str("<disks>");
    for disk in disks {
        let kind = if tracked.iter().any(|(_, t)| *t == disk.target) {
            "bitmap"
        } else {
            "no"
        };
        xml.push_str(&format!(
            "<disk name='{}' checkpoint='{kind}'/>",
            escape(&disk.target)
        ));
    }
    xml.push_str("</disks></domaincheckpoint>");
    xml
}

/// The `<domainbackup>` of `request` over `tracked` (volume, target); the
/// other disks are left out of it.
pub(super) fn backup_xml(
    request: &BackupRequest,
    checkpoint: &str,
    disks: &[DomainDisk],
    tracked: &[(String, String)],
) -> (String, Vec<BackupDisk>) {
    let mode = match request.target {
        BackupTarget::Push { .. } => "push",
        BackupTarget::Pull { .. } => "pull",
    };
    let mut xml = format!("<domainbackup mode='{mode}'>");
    if let Some(since) = &request.incremental {
        xml.push_str(&format!("<incremental>{}</incremental>", escape(since)));
    }
    if let BackupTarget::Pull { socket } = &request.target {
        xml.push_str(&format!(
            "<server transport='unix' socket='{}'/>",
            escape(&socket.to_string_lossy())
        ));
    }
    xml.push_str("<disks>");
    let mut backed_up = Vec::new();
    for disk in disks {
        let Some((volume, _)) = tracked.iter().find(|(_, t)| *t == disk.target) else {
            xml.push_str(&format!(
                "<disk name='{}' backup='no'/>",
                escape(&disk.target)
            ));
            continue;
        };
        match &request.target {
            BackupTarget::Push { dir, format } => {
                let file = dir.join(format!("{checkpoint}-{volume}.{}", format.as_str()));
                xml.push_str(&format!(
                    "<disk name='{}' backup='yes' type='file'><driver type='{}'/><target file='{}'/></disk>",
                    escape(&disk.target),
                    format.as_str(),
                    escape(&file.to_string_lossy())
                ));
                backed_up.push(BackupDisk {
                    volume: volume.clone(),
                    target: disk.target.clone(),
                    file: Some(file),
                    export: None,
                });
            }
            BackupTarget::Pull { socket } => {
                // QEMU keeps the blocks the guest overwrites during the
                // export in a scratch image, beside the socket (libvirt
                // removes it when the backup ends).
                let scratch = socket.with_file_name(format!("{checkpoint}-{volume}.scratch"));
                xml.push_str(&format!(
                    "<disk name='{}' backup='yes' type='file' exportname='{}'><scratch file='{}'/></disk>",
                    escape(&disk.target),
                    escape(volume),
                    escape(&scratch.to_string_lossy())
                ));
                backed_up.push(BackupDisk {
                    volume: volume.clone(),
                    target: disk.target.clone(),
                    file: None,
                    export: Some(volume.clone()),
                });
            }
        }
    }
    xml.push_str("</disks></domainbackup>");
    (xml, backed_up)
}

/// Reads the domain's disks and starts the backup; the disks it backs up.
fn begin(
    hv: &dyn Hypervisor,
    name: &str,
    request: &BackupRequest,
    checkpoint: &str,
    tracked: &[String],
) -> Result<Vec<BackupDisk>, CommandError> {
    let (xml, _) = hv.domain_xml(name).map_err(|e| hypervisor_error(&e))?;
    let disks = domain_disks(&xml)?;
    let tracked = tracked_disks(&disks, tracked)?;
    let (backup, backed_up) = backup_xml(request, checkpoint, &disks, &tracked);
    let checkpoint = checkpoint_xml(checkpoint, None, &disks, &tracked);
    hv.backup_begin(name, &backup, Some(&checkpoint))
        .map_err(|e| match e.kind {
            HypervisorErrorKind::InvalidCheckpoint => CommandError::invalid_argument(format!(
                "arguments.incremental: checkpoint {:?} is invalid: {}; redefine it (redefine-checkpoint) or take a full backup",
                request.incremental.as_deref().unwrap_or(""),
                e.message
            ))
            .with_cause(e.to_string()),
            _ => hypervisor_error(&e),
        })?;
    Ok(backed_up)
}

/// "20261202-012345" (UTC), as checkpoint names default to.
fn stamp() -> String {
    crate::logging::rfc3339_utc(SystemTime::now())
        .chars()
        .take(19)
        .filter(|c| c.is_ascii_digit() || *c == 'T')
        .map(|c| if c == 'T' { '-' } else { c })
        .collect()
}

/// The figures of a backup job's statistics, when it reports them.
fn progress_of(stats: &[Stat]) -> Option<BackupProgress> {
    let get = |name: &str| {
        stats
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_u64())
    };
    Some(BackupProgress {
        processed_bytes: get("disk_processed")?,
        total_bytes: get("disk_total")?,
    })
}

impl DomainManager {
    /// The names of the applied VMI's disks with changedBlockTracking.
    fn tracked_volumes(&self) -> Vec<String> {
        // A launcher restarted beside the running domain knows the VMI
        // from the record the one before it kept, until the next sync.
        let recorded = match self.applied_vmi() {
            Some(_) => None,
            None => self.recorded_vmi(),
        };
        self.applied_vmi()
            .or(recorded.as_ref())
            .and_then(|vmi| vmi["spec"]["domain"]["devices"]["disks"].as_array())
            .into_iter()
            .flatten()
            .filter(|d| d["changedBlockTracking"].as_bool() == Some(true))
            .filter_map(|d| d["name"].as_str().map(str::to_string))
            .collect()
    }

    fn backup_precondition(&self, command: &str) -> Result<(), CommandError> {
        if self.phase == super::Phase::Exiting {
            return Err(CommandError::invalid_state(format!(
                "{command}: the launcher is exiting"
            )));
        }
        if !self.domain.status.state.is_active() {
            return Err(CommandError::invalid_state(format!(
                "{command}: the domain must be running or paused, but it is {} ({})",
                self.domain.status.state.as_str(),
                self.domain.status.reason.as_str()
            )));
        }
        Ok(())
    }

    pub(super) fn start_backup(&mut self, request: BackupRequest, reply: ReplyTo) {
        let command = "backup";
        if let Err(e) = self.backup_precondition(command) {
            return reply.send(Err(e));
        }
        if let Some(running) = self.backup.running() {
            return reply.send(Err(CommandError::invalid_state(format!(
                "{command}: backup {} is in progress; wait for BACKUP_COMPLETED or BACKUP_FAILED, or backup-abort it",
                running.checkpoint
            ))));
        }
        if self.migration_running_as_source() {
            return reply.send(Err(CommandError::invalid_state(format!(
                "{command}: a migration is running; wait for it or migrate-cancel it"
            ))));
        }
        let tracked = self.tracked_volumes();
        if tracked.is_empty() {
            return reply.send(Err(CommandError::invalid_state(format!(
                "{command}: the VMI has no disk with changedBlockTracking: true"
            ))));
        }
        let (mode, format, socket) = match &request.target {
            BackupTarget::Push { dir, format } => {
                if !dir.is_dir() {
                    return reply.send(Err(CommandError::invalid_argument(format!(
                        "arguments.target_dir: {} is not a directory",
                        dir.display()
                    ))));
                }
                (BackupMode::Push, Some(format.as_str().to_string()), None)
            }
            BackupTarget::Pull { socket } => {
                if socket.symlink_metadata().is_ok() {
                    return reply.send(Err(CommandError::invalid_argument(format!(
                        "arguments.socket: {} already exists",
                        socket.display()
                    ))));
                }
                (BackupMode::Pull, None, Some(socket.clone()))
            }
        };
        let checkpoint = request
            .checkpoint
            .clone()
            .unwrap_or_else(|| format!("backup-{}", stamp()));
        if let BackupTarget::Push { dir, format } = &request.target {
            for volume in &tracked {
                let file = dir.join(format!("{checkpoint}-{volume}.{}", format.as_str()));
                if file.symlink_metadata().is_ok() {
                    return reply.send(Err(CommandError::invalid_argument(format!(
                        "arguments.target_dir: {} already exists; a backup never writes over a file",
                        file.display()
                    ))));
                }
            }
        }
        self.backup.last = Some(BackupRecord {
            mode,
            checkpoint: checkpoint.clone(),
            incremental: request.incremental.clone(),
            format,
            socket,
            disks: Vec::new(),
            phase: BackupPhase::InProgress,
            started_ms: now_ms(),
            ended_ms: None,
            failure: None,
            progress: None,
        });
        self.backup.save();
        let name = self.config.domain_name.clone();
        self.jobs.spawn(
            Operation::Backup,
            Some(reply),
            self.timing.command,
            move |hv| {
                JobOutput::reply(
                    begin(hv, &name, &request, &checkpoint, &tracked)
                        .map(|disks| JobValue::BackupStarted { disks }),
                )
            },
        );
    }

    /// The backup job began (or did not): the reply is the record.
    pub(super) fn on_backup_begun(&mut self, result: &mut Result<JobValue, CommandError>) {
        let Some(record) = self.backup.last.as_mut() else {
            return;
        };
        match result {
            Ok(JobValue::BackupStarted { disks }) => {
                record.disks = std::mem::take(disks);
                let reply = record.to_status();
                self.backup.save();
                if self.backup.running().is_some() {
                    self.timers.arm_in(Timer::BackupProgress, PROGRESS_EVERY);
                }
                log::info!("manager: backup began: {reply:?}");
                *result = Ok(JobValue::Reply(reply.into()));
            }
            Ok(_) => {}
            Err(e) => {
                record.end(BackupPhase::Failed, Some(e.desc.clone()));
                self.backup.save();
            }
        }
    }

    pub(super) fn abort_backup(&mut self, reply: ReplyTo) {
        if self.backup.running().is_none() {
            return reply.send(Err(CommandError::invalid_state(
                "backup-abort: no backup is running",
            )));
        }
        let name = self.config.domain_name.clone();
        self.jobs.spawn(
            Operation::BackupAbort,
            Some(reply),
            self.timing.command,
            move |hv| {
                JobOutput::reply(
                    hv.abort_job(&name)
                        .map(|()| JobValue::Empty)
                        .map_err(|e| hypervisor_error(&e)),
                )
            },
        );
    }

    /// libvirt's JOB_COMPLETED: when it is the backup's, read how it ended.
    pub(super) fn on_backup_job_completed(&mut self, stats: &[Stat]) {
        let operation = stats
            .iter()
            .find(|(k, _)| k == "operation")
            .and_then(|(_, v)| v.as_i64());
        let Some(running) = self.backup.running() else {
            return;
        };
        if operation.is_some_and(|o| o != OPERATION_BACKUP) {
            return;
        }
        let files: Vec<PathBuf> = running
            .disks
            .iter()
            .filter_map(|d| d.file.clone())
            .collect();
        let name = self.config.domain_name.clone();
        let event_stats = stats.to_vec();
        self.jobs.spawn(
            Operation::BackupEnded,
            None,
            self.timing.command,
            move |hv| {
                // The event's statistics lack the job's type; the completed
                // job's statistics have it (as KubeVirt reads it).
                let stats = hv.job_stats(&name, true).unwrap_or(event_stats);
                // libvirt reports the job before QEMU has closed the files
                // it wrote: BACKUP_COMPLETED waits for that, so whoever
                // reads it can open them (qemu-img takes their locks).
                wait_until_released(&files, TARGET_RELEASE_WAIT);
                JobOutput {
                    result: Ok(JobValue::Empty),
                    observed: Observation::BackupEnded(stats),
                }
            },
        );
    }

    pub(super) fn on_backup_ended(&mut self, stats: &[Stat]) {
        self.timers.cancel(Timer::BackupProgress);
        let Some(record) = self.backup.last.as_mut() else {
            return;
        };
        if record.phase != BackupPhase::InProgress {
            return;
        }
        let get = |name: &str| stats.iter().find(|(k, _)| k == name).map(|(_, v)| v);
        let job_type = get("type").and_then(Value::as_i64);
        let message = get("errmsg").and_then(Value::as_str).map(str::to_string);
        let (phase, failure) = match (job_type, record.mode) {
            (Some(JOB_COMPLETED), _) => (BackupPhase::Completed, None),
            // Ending the export is how a pull backup ends.
            (Some(JOB_CANCELLED), BackupMode::Pull) => (BackupPhase::Completed, None),
            (Some(JOB_CANCELLED), BackupMode::Push) => (
                BackupPhase::Aborted,
                Some(message.unwrap_or_else(|| "aborted".to_string())),
            ),
            (other, _) => (
                BackupPhase::Failed,
                Some(message.unwrap_or_else(|| {
                    format!("libvirt ended the backup job as {other:?}, not completed")
                })),
            ),
        };
        record.end(phase, failure);
        let data = record.to_status();
        self.backup.save();
        log::info!("manager: backup ended: {data:?}");
        let kind = if phase == BackupPhase::Completed {
            EventKind::BackupCompleted
        } else {
            EventKind::BackupFailed
        };
        self.publish(kind, data);
    }

    pub(super) fn on_backup_progress_due(&mut self) {
        if self.backup.running().is_none() {
            return;
        }
        if !self.jobs.is_running(Operation::BackupProgress) {
            let name = self.config.domain_name.clone();
            self.jobs.spawn(
                Operation::BackupProgress,
                None,
                self.timing.command,
                move |hv| match hv.job_stats(&name, false) {
                    Ok(stats) => JobOutput {
                        result: Ok(JobValue::Empty),
                        observed: Observation::BackupJobStats(stats),
                    },
                    Err(e) => JobOutput::reply(Err(hypervisor_error(&e))),
                },
            );
        }
        self.timers.arm_in(Timer::BackupProgress, PROGRESS_EVERY);
    }

    pub(super) fn on_backup_progress(&mut self, stats: &[Stat]) {
        if let Some(record) = self.backup.last.as_mut()
            && record.phase == BackupPhase::InProgress
            && let Some(progress) = progress_of(stats)
        {
            record.progress = Some(progress);
        }
    }

    pub(super) fn query_checkpoints(&mut self, reply: ReplyTo) {
        let name = self.config.domain_name.clone();
        self.jobs.spawn(
            Operation::Checkpoint,
            Some(reply),
            self.timing.command,
            move |hv| {
                let listed = hv.checkpoint_names(&name).and_then(|names| {
                    names
                        .into_iter()
                        .map(|c| {
                            let xml = hv.checkpoint_xml(&name, &c)?;
                            Ok(replies::CheckpointXml { name: c, xml })
                        })
                        .collect::<Result<Vec<_>, _>>()
                });
                JobOutput::reply(
                    listed
                        .map(|checkpoints| {
                            JobValue::Reply(replies::Checkpoints { checkpoints }.into())
                        })
                        .map_err(|e| hypervisor_error(&e)),
                )
            },
        );
    }

    pub(super) fn redefine_checkpoint(
        &mut self,
        checkpoint: String,
        xml: Option<String>,
        creation_time: Option<u64>,
        reply: ReplyTo,
    ) {
        if let Err(e) = self.backup_precondition("redefine-checkpoint") {
            return reply.send(Err(e));
        }
        let tracked = self.tracked_volumes();
        if xml.is_none() && tracked.is_empty() {
            return reply.send(Err(CommandError::invalid_state(
                "redefine-checkpoint: the VMI has no disk with changedBlockTracking: true",
            )));
        }
        let name = self.config.domain_name.clone();
        self.jobs.spawn(
            Operation::Checkpoint,
            Some(reply),
            self.timing.command,
            move |hv| {
                JobOutput::reply(redefine(
                    hv,
                    &name,
                    &checkpoint,
                    xml,
                    creation_time,
                    &tracked,
                ))
            },
        );
    }

    pub(super) fn delete_checkpoint(
        &mut self,
        checkpoint: String,
        metadata_only: bool,
        reply: ReplyTo,
    ) {
        if let Some(running) = self.backup.running() {
            return reply.send(Err(CommandError::invalid_state(format!(
                "delete-checkpoint: backup {} is in progress",
                running.checkpoint
            ))));
        }
        let name = self.config.domain_name.clone();
        self.jobs.spawn(
            Operation::Checkpoint,
            Some(reply),
            self.timing.command,
            move |hv| {
                JobOutput::reply(
                    hv.checkpoint_delete(&name, &checkpoint, metadata_only)
                        .map(|()| JobValue::Empty)
                        .map_err(|e| hypervisor_error(&e)),
                )
            },
        );
    }
}

/// Redefines `checkpoint`: from `xml`, or over every tracked disk. An
/// invalid checkpoint is an answer (`valid: false`), not an error.
fn redefine(
    hv: &dyn Hypervisor,
    name: &str,
    checkpoint: &str,
    xml: Option<String>,
    creation_time: Option<u64>,
    tracked: &[String],
) -> Result<JobValue, CommandError> {
    let xml = match xml {
        Some(xml) => {
            if !xml.contains(&format!("<name>{checkpoint}</name>")) {
                return Err(CommandError::invalid_argument(format!(
                    "arguments.xml: names no checkpoint {checkpoint:?} (<name>{checkpoint}</name>)"
                )));
            }
            xml
        }
        None => {
            let (domain, _) = hv.domain_xml(name).map_err(|e| hypervisor_error(&e))?;
            let disks = domain_disks(&domain)?;
            let tracked = tracked_disks(&disks, tracked)?;
            // libvirt requires a redefined checkpoint's creation time;
            // without one given, now (it orders checkpoints only).
            let creation_time = creation_time.unwrap_or_else(|| now_ms() / 1000);
            checkpoint_xml(checkpoint, Some(creation_time), &disks, &tracked)
        }
    };
    let answer = match hv.checkpoint_create(name, &xml, true) {
        Ok(()) => replies::CheckpointValidity {
            checkpoint: checkpoint.to_string(),
            reason: None,
            valid: true,
        },
        Err(e) if e.kind == HypervisorErrorKind::InvalidCheckpoint => replies::CheckpointValidity {
            checkpoint: checkpoint.to_string(),
            reason: Some(e.message),
            valid: false,
        },
        Err(e) => return Err(hypervisor_error(&e)),
    };
    Ok(JobValue::Reply(answer.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::BackupFormat;
    use crate::scratch::ScratchDir;

    fn disks() -> Vec<DomainDisk> {
        vec![
            DomainDisk {
                target: "vda".into(),
                volume: Some("data".into()),
                format: Some("qcow2".into()),
            },
            DomainDisk {
                target: "sda".into(),
                volume: Some("cloudinit".into()),
                format: Some("raw".into()),
            },
        ]
    }

    #[test]
    fn the_xml_backs_up_and_tracks_only_the_tracked_disks() {
        let tracked = tracked_disks(&disks(), &["data".to_string()]).unwrap();
        assert_eq!(tracked, vec![("data".to_string(), "vda".to_string())]);
        let push = BackupRequest {
            target: BackupTarget::Push {
                dir: "/b".into(),
                format: BackupFormat::Raw,
            },
            checkpoint: None,
            incremental: Some("cp1".into()),
        };
        let (xml, backed_up) = backup_xml(&push, "cp2", &disks(), &tracked);
        assert_eq!(
            xml,
            "<domainbackup mode='push'><incremental>cp1</incremental><disks>\
             <disk name='vda' backup='yes' type='file'><driver type='raw'/><target file='/b/cp2-data.raw'/></disk>\
             <disk name='sda' backup='no'/></disks></domainbackup>"
        );
        assert_eq!(backed_up[0].file, Some(PathBuf::from("/b/cp2-data.raw")));
        let pull = BackupRequest {
            target: BackupTarget::Pull {
                socket: "/run/b.sock".into(),
            },
            checkpoint: None,
            incremental: None,
        };
        let (xml, backed_up) = backup_xml(&pull, "cp2", &disks(), &tracked);
        assert!(
            xml.starts_with(
                "<domainbackup mode='pull'><server transport='unix' socket='/run/b.sock'/>"
            ),
            "{xml}"
        );
        assert!(xml.contains("<disk name='vda' backup='yes' type='file' exportname='data'><scratch file='/run/cp2-data.scratch'/></disk>"), "{xml}");
        assert_eq!(backed_up[0].export.as_deref(), Some("data"));
        assert_eq!(
            checkpoint_xml("cp2", Some(7), &disks(), &tracked),
            "<domaincheckpoint><name>cp2</name><creationTime>7</creationTime><disks>\
             <disk name='vda' checkpoint='bitmap'/><disk name='sda' checkpoint='no'/></disks></domaincheckpoint>"
        );
    }

    #[test]
    fn a_tracked_disk_that_cannot_carry_a_bitmap_is_refused() {
        let err = tracked_disks(&disks(), &["cloudinit".to_string()]).unwrap_err();
        assert!(err.desc.contains("raw, not qcow2"), "{}", err.desc);
        let err = tracked_disks(&disks(), &["gone".to_string()]).unwrap_err();
        assert!(err.desc.contains("no disk"), "{}", err.desc);
    }

    #[test]
    fn a_backup_running_when_the_launcher_went_away_is_reported_failed() {
        let dir = ScratchDir::new("backup-record");
        let mut state = BackupState::load(&dir);
        assert!(state.last.is_none());
        state.last = Some(BackupRecord {
            mode: BackupMode::Push,
            checkpoint: "cp".into(),
            incremental: None,
            format: Some("qcow2".into()),
            socket: None,
            disks: Vec::new(),
            phase: BackupPhase::InProgress,
            started_ms: 1,
            ended_ms: None,
            failure: None,
            progress: None,
        });
        state.save();
        let again = BackupState::load(&dir);
        let last = again.last.clone().unwrap();
        assert_eq!(last.phase, BackupPhase::Failed);
        assert!(last.failure.unwrap().contains("restarted"));
        assert!(again.running().is_none());
    }

    #[test]
    fn progress_comes_from_the_job_statistics() {
        let stats: Vec<Stat> = vec![
            ("disk_total".into(), Value::from(1000u64)),
            ("disk_processed".into(), Value::from(250u64)),
        ];
        assert_eq!(
            progress_of(&stats),
            Some(BackupProgress {
                processed_bytes: 250,
                total_bytes: 1000
            })
        );
        assert_eq!(progress_of(&stats[..1]), None);
    }
}
