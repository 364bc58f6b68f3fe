//! `memory-dump`: the guest's memory written to a file as an ELF core, as
//! KubeVirt's memory dump does it (`virDomainCoreDumpWithFormat`, raw
//! format, memory only). It runs in the background: the command returns
//! at once, a job waits for libvirt, `query-status` shows the dump's
//! progress (libvirt's job statistics, sampled every second while it
//! runs) and its outcome, and MEMORY_DUMP_COMPLETED or MEMORY_DUMP_FAILED
//! says when it ended. One dump at a time.
//!
//! The record of the last dump is kept in the private directory, as
//! KubeVirt keeps it in the domain's metadata, so a restarted launcher
//! still reports it. A dump that was running when the launcher went away
//! is reported failed: whether libvirt finished it is not known.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::DomainManager;
use super::errors::hypervisor_error;
use super::jobs::{JobOutput, Observation, Operation};
use super::reply::JobValue;
use super::timers::Timer;
use crate::command::{DumpTarget, ReplyTo};
use crate::events::EventKind;
use crate::hypervisor::Stat;
use crate::protocol::{CommandError, Return};
use crate::replies::{MemoryDumpProgress, MemoryDumpStatus};

/// The file in the private directory that holds the last dump's record.
pub(super) const RECORD: &str = "memory-dump.json";

/// How often a running dump's progress is read.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum DumpPhase {
    InProgress,
    Completed,
    Failed,
}

impl DumpPhase {
    fn as_str(self) -> &'static str {
        match self {
            DumpPhase::InProgress => "InProgress",
            DumpPhase::Completed => "Completed",
            DumpPhase::Failed => "Failed",
        }
    }
}

/// How far a running dump is, from libvirt's job statistics.
pub(super) type DumpProgress = MemoryDumpProgress;

/// The last dump, as `query-status` shows it and the record keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct DumpRecord {
    pub(super) path: PathBuf,
    pub(super) phase: DumpPhase,
    /// Milliseconds since the epoch (integers, so the record reads back
    /// exactly; replies show seconds).
    pub(super) started_ms: u64,
    pub(super) ended_ms: Option<u64>,
    pub(super) size_bytes: Option<u64>,
    pub(super) failure: Option<String>,
    /// Only while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) progress: Option<DumpProgress>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Milliseconds as the seconds replies show.
#[allow(clippy::cast_precision_loss)] // exact below 2^53 ms (285,000 years)
fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

impl DumpRecord {
    fn started(path: PathBuf) -> DumpRecord {
        DumpRecord {
            path,
            phase: DumpPhase::InProgress,
            started_ms: now_ms(),
            ended_ms: None,
            size_bytes: None,
            failure: None,
            progress: None,
        }
    }

    fn end(&mut self, outcome: Result<u64, String>) {
        self.ended_ms = Some(now_ms());
        self.progress = None;
        match outcome {
            Ok(size) => {
                self.phase = DumpPhase::Completed;
                self.size_bytes = Some(size);
            }
            Err(why) => {
                self.phase = DumpPhase::Failed;
                self.failure = Some(why);
            }
        }
    }

    /// As `query-status` shows it: times in seconds since the epoch.
    pub(super) fn status(&self) -> MemoryDumpStatus {
        MemoryDumpStatus {
            ended: self.ended_ms.map(seconds),
            failure: self.failure.clone(),
            path: self.path.clone(),
            phase: self.phase.as_str(),
            progress: self.progress,
            size_bytes: self.size_bytes,
            started: seconds(self.started_ms),
        }
    }
}

/// MEMORY_DUMP_COMPLETED's data.
#[derive(Debug, Serialize)]
struct DumpCompleted {
    ended: Option<f64>,
    path: PathBuf,
    size_bytes: Option<u64>,
    started: f64,
}

/// MEMORY_DUMP_FAILED's data.
#[derive(Debug, Serialize)]
struct DumpFailed {
    ended: Option<f64>,
    path: PathBuf,
    reason: Option<String>,
    started: f64,
}

/// The manager's memory dump: the last one's record, kept in `dir`.
#[derive(Debug)]
pub(super) struct MemoryDumpState {
    pub(super) last: Option<DumpRecord>,
    record: PathBuf,
}

impl MemoryDumpState {
    /// Reads what an earlier launcher recorded in `private_dir`.
    pub(super) fn load(private_dir: &Path) -> MemoryDumpState {
        let record = private_dir.join(RECORD);
        let last = crate::safe_fs::read_record::<DumpRecord>(&record, "a memory dump record");
        let mut state = MemoryDumpState { last, record };
        if let Some(last) = state.last.as_mut()
            && last.phase == DumpPhase::InProgress
        {
            last.end(Err(
                "the launcher restarted while the dump ran; whether libvirt finished it is not known"
                    .to_string(),
            ));
            state.save();
        }
        state
    }

    pub(super) fn running(&self) -> Option<&DumpRecord> {
        self.last
            .as_ref()
            .filter(|r| r.phase == DumpPhase::InProgress)
    }

    /// Writes the record (a whole new file renamed over the old one, so a
    /// crash leaves one or the other).
    fn save(&self) {
        let Some(last) = &self.last else { return };
        let written = serde_json::to_vec(last)
            .map_err(std::io::Error::other)
            .and_then(|bytes| {
                crate::safe_fs::replace_file(&self.record, "json.new", &bytes, 0o600)
            });
        if let Err(e) = written {
            log::warn!(
                "manager: cannot record the memory dump in {}: {e}; a restarted launcher will not know it",
                self.record.display()
            );
        }
    }
}

/// The figures of a dump job's statistics (libvirt's
/// `VIR_DOMAIN_JOB_MEMORY_*`), when it reports them.
fn progress_of(stats: &[Stat]) -> Option<DumpProgress> {
    let get = |name: &str| {
        stats
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_u64())
    };
    Some(DumpProgress {
        memory_processed: get("memory_processed")?,
        memory_total: get("memory_total")?,
    })
}

impl DomainManager {
    pub(super) fn start_memory_dump(&mut self, target: DumpTarget, reply: ReplyTo) {
        reply.send(self.begin_memory_dump(target));
    }

    /// Where a dump into the VMI's memoryDump volume `volume` goes, named
    /// as virt-handler names it: `<vmi>-<volume>-<UTC time>.memory.dump`
    /// in the volume's directory under the hotplug directory.
    fn volume_dump_path(&self, volume: &str) -> Result<PathBuf, CommandError> {
        let command = "memory-dump";
        let declared = self.applied_vmi().is_some_and(|vmi| {
            vmi["spec"]["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|v| v["name"] == volume && v.get("memoryDump").is_some_and(|m| !m.is_null()))
        });
        if !declared {
            return Err(CommandError::invalid_argument(format!(
                "arguments.volume: the VMI has no memoryDump volume {volume:?}; sync a VMI that has it first"
            )));
        }
        let dir = self.config.dirs.hotplug_disks.join(volume);
        if !dir.is_dir() {
            return Err(CommandError::invalid_state(format!(
                "{command}: the memoryDump volume {volume:?} is not mounted at {} yet",
                dir.display()
            )));
        }
        // 2026-11-30T14:22:05.123456Z -> 20261130-142205, Go's
        // "20060102-150405" as virt-handler formats it.
        let stamp: String = crate::logging::rfc3339_utc(SystemTime::now())
            .chars()
            .take(19)
            .filter(|c| c.is_ascii_digit() || *c == 'T')
            .map(|c| if c == 'T' { '-' } else { c })
            .collect();
        Ok(dir.join(format!("{}-{volume}-{stamp}.memory.dump", self.config.name)))
    }

    fn begin_memory_dump(&mut self, target: DumpTarget) -> Result<Return, CommandError> {
        let command = "memory-dump";
        if let Some(running) = self.memory_dump.running() {
            return Err(CommandError::invalid_state(format!(
                "{command}: a dump to {} is in progress; wait for MEMORY_DUMP_COMPLETED or MEMORY_DUMP_FAILED",
                running.path.display()
            )));
        }
        if self.migration_running_as_source() {
            return Err(CommandError::invalid_state(format!(
                "{command}: a migration is running; wait for it or migrate-cancel it"
            )));
        }
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
        let path = match target {
            DumpTarget::Path(path) => path,
            DumpTarget::Volume(volume) => self.volume_dump_path(&volume)?,
        };
        let record = DumpRecord::started(path.clone());
        let reply = record.status();
        self.memory_dump.last = Some(record);
        self.memory_dump.save();
        let name = self.config.domain_name.clone();
        self.jobs.spawn(
            Operation::MemoryDump,
            None,
            self.timing.command,
            move |hv| {
                let dumped = hv
                    .dump_memory(&name, &path)
                    .map_err(|e| hypervisor_error(&e));
                JobOutput::reply(dumped.and_then(|()| {
                    std::fs::metadata(&path)
                        .map(|m| JobValue::Dumped {
                            size_bytes: m.len(),
                        })
                        .map_err(|e| {
                            CommandError::internal(format!(
                                "libvirt reported the dump written, but {} cannot be read: {e}",
                                path.display()
                            ))
                        })
                }))
            },
        );
        self.timers
            .arm_in(Timer::MemoryDumpProgress, PROGRESS_EVERY);
        log::info!(
            "manager: dumping the guest's memory to {}",
            reply.path.display()
        );
        Ok(reply.into())
    }

    /// The dump job ended: record the outcome and say so.
    pub(super) fn on_memory_dump_finished(&mut self, result: &Result<JobValue, CommandError>) {
        self.timers.cancel(Timer::MemoryDumpProgress);
        let outcome = match result {
            Ok(JobValue::Dumped { size_bytes }) => Ok(*size_bytes),
            Ok(_) => Ok(0),
            Err(e) => Err(e.desc.clone()),
        };
        let Some(record) = self.memory_dump.last.as_mut() else {
            return;
        };
        record.end(outcome);
        let record = record.clone();
        self.memory_dump.save();
        let ended = record.ended_ms.map(seconds);
        let started = seconds(record.started_ms);
        log::info!(
            "manager: memory dump to {} ended: {}",
            record.path.display(),
            record.phase.as_str()
        );
        match record.phase {
            DumpPhase::Completed => self.publish(
                EventKind::MemoryDumpCompleted,
                DumpCompleted {
                    ended,
                    path: record.path,
                    size_bytes: record.size_bytes,
                    started,
                },
            ),
            _ => self.publish(
                EventKind::MemoryDumpFailed,
                DumpFailed {
                    ended,
                    path: record.path,
                    reason: record.failure,
                    started,
                },
            ),
        }
    }

    /// The progress timer: read the running dump's job statistics.
    pub(super) fn on_memory_dump_progress_due(&mut self) {
        if self.memory_dump.running().is_none() {
            return;
        }
        if !self.jobs.is_running(Operation::MemoryDumpProgress) {
            let name = self.config.domain_name.clone();
            self.jobs.spawn(
                Operation::MemoryDumpProgress,
                None,
                self.timing.command,
                move |hv| match hv.job_stats(&name, false) {
                    Ok(stats) => JobOutput {
                        result: Ok(JobValue::Empty),
                        observed: Observation::JobStats(stats),
                    },
                    Err(e) => JobOutput::reply(Err(hypervisor_error(&e))),
                },
            );
        }
        self.timers
            .arm_in(Timer::MemoryDumpProgress, PROGRESS_EVERY);
    }

    pub(super) fn on_memory_dump_progress(&mut self, stats: &[Stat]) {
        if let Some(record) = self.memory_dump.last.as_mut()
            && record.phase == DumpPhase::InProgress
            && let Some(progress) = progress_of(stats)
        {
            record.progress = Some(progress);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchDir;
    use serde_json::Value;

    #[test]
    fn the_record_survives_a_restart_and_a_running_dump_is_reported_failed() {
        let dir = ScratchDir::new("dump-record");
        let mut state = MemoryDumpState::load(&dir);
        assert!(state.last.is_none());
        state.last = Some(DumpRecord::started(dir.join("a.dump")));
        state.save();
        // A launcher that restarts now does not know how the dump ended.
        let again = MemoryDumpState::load(&dir);
        let last = again.last.clone().unwrap();
        assert_eq!(last.phase, DumpPhase::Failed);
        assert!(last.failure.unwrap().contains("restarted"));
        assert!(again.running().is_none());
        // A finished one is kept as it was.
        let mut state = again;
        let mut record = DumpRecord::started(dir.join("b.dump"));
        record.end(Ok(4096));
        state.last = Some(record.clone());
        state.save();
        assert_eq!(MemoryDumpState::load(&dir).last, Some(record));
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.join(RECORD)).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        // A record that does not read is ignored.
        std::fs::write(dir.join(RECORD), b"{").unwrap();
        assert!(MemoryDumpState::load(&dir).last.is_none());
    }

    #[test]
    fn progress_comes_from_the_job_statistics() {
        let stats: Vec<Stat> = vec![
            ("type".into(), Value::from(2)),
            ("memory_total".into(), Value::from(201_326_592u64)),
            ("memory_processed".into(), Value::from(50_331_648u64)),
        ];
        assert_eq!(
            progress_of(&stats),
            Some(DumpProgress {
                memory_processed: 50_331_648,
                memory_total: 201_326_592
            })
        );
        assert_eq!(progress_of(&stats[..1]), None);
    }
}
