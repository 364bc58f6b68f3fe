//! `query-vm-stats`: what KubeVirt's `GetVMStats` collects for its VM
//! statistics, in one call: the domain's statistics (the `query-stats`
//! sample), the dirty rate (`query-dirty-rate`'s measurement) and the
//! guest agent's raw answers to the commands KubeVirt asks (load, CPU and
//! disk statistics, time, vCPUs, memory blocks, users, OS, disks, host
//! name, time zone, routes, interfaces), each with its age.
//!
//! Every part is cached for as long as KubeVirt's launcher keeps it (the
//! agent's answers for 20 s to 30 min by command, the dirty rate for
//! 3 s, the domain statistics as `query-stats` keeps them): a reply reads
//! only what is older than that, in one job, and a part that fails is an
//! `error` in its place (and in `errors`), not a failed command.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::DomainManager;
use super::diagnostics::measure_dirty_rate;
use super::guest::agent_request;
use super::jobs::{JobOutput, Operation};
use super::reply::{JobValue, VmStatsRead};
use super::stats::{age_ms, sample_stats};
use crate::command::{ReplyTo, VmStatsQuery};
use crate::hypervisor::Hypervisor;
use crate::replies::{AgedStats, AgentReturn, DirtyRate, Part, VmStats};

/// How long KubeVirt's launcher keeps the answer to each guest agent
/// command GetVMStats may ask (manager.go's agentDataCommandTTLs).
const AGENT_COMMANDS: [(&str, Duration); 14] = [
    ("guest-get-load", Duration::from_secs(20)),
    ("guest-get-cpustats", Duration::from_secs(20)),
    ("guest-get-diskstats", Duration::from_secs(20)),
    ("guest-get-time", Duration::from_secs(60)),
    ("guest-get-vcpus", Duration::from_secs(60)),
    ("guest-get-memory-block-info", Duration::from_secs(60)),
    ("guest-get-users", Duration::from_secs(60)),
    ("guest-get-osinfo", Duration::from_secs(300)),
    ("guest-get-disks", Duration::from_secs(300)),
    ("guest-get-host-name", Duration::from_secs(300)),
    ("guest-get-timezone", Duration::from_secs(300)),
    ("guest-network-get-route", Duration::from_secs(300)),
    ("guest-network-get-interfaces", Duration::from_secs(300)),
    ("guest-get-memory-blocks", Duration::from_secs(1800)),
];

/// How long a dirty rate measurement is reused (KubeVirt: 3 s).
const DIRTY_RATE_TTL: Duration = Duration::from_secs(3);

/// How long each agent command may take.
const AGENT_TIMEOUT: Duration = Duration::from_secs(5);

/// A part of the reply and when it was read.
#[derive(Debug, Clone, PartialEq)]
struct Kept<T> {
    value: T,
    taken: Instant,
}

/// The agent's answers and the dirty rate, as last read.
#[derive(Debug, Default)]
pub(super) struct VmStatsCache {
    agent: HashMap<&'static str, Kept<Value>>,
    dirty_rate: Option<Kept<DirtyRate>>,
}

impl VmStatsCache {
    /// The domain changed (stopped, restarted): what the guest said
    /// before may be wrong now.
    pub(super) fn invalidate(&mut self) {
        self.agent.clear();
        self.dirty_rate = None;
    }
}

fn ttl_of(command: &str) -> Duration {
    AGENT_COMMANDS
        .iter()
        .find(|(c, _)| *c == command)
        .map_or(Duration::ZERO, |(_, ttl)| *ttl)
}

/// The `return` of an agent's raw reply, or its error.
fn agent_return(raw: &str) -> Result<Value, String> {
    let reply: Value =
        serde_json::from_str(raw).map_err(|e| format!("the agent's reply is not JSON: {e}"))?;
    if let Some(ret) = reply.get("return") {
        return Ok(ret.clone());
    }
    match reply.get("error") {
        Some(error) => Err(format!(
            "the agent refused: {}",
            error["desc"].as_str().unwrap_or("no description")
        )),
        None => Err(format!("the agent's reply has no return: {raw}")),
    }
}

impl DomainManager {
    pub(super) fn query_vm_stats(&mut self, query: VmStatsQuery, reply: ReplyTo) {
        let now = Instant::now();
        let name = self.config.domain_name.clone();
        let agent_connected = self.agent.is_connected();
        let fetch_agent: Vec<&'static str> = if agent_connected {
            query
                .agent
                .iter()
                .copied()
                .filter(|c| {
                    self.vm_stats
                        .agent
                        .get(c)
                        .is_none_or(|k| now.saturating_duration_since(k.taken) > ttl_of(c))
                })
                .collect()
        } else {
            Vec::new()
        };
        let sample_stats_now =
            query.domain_stats && self.stats.fresh(self.timing.stats_max_age, now).is_none();
        let generation = self.stats.generation();
        let measure = query.dirty_rate
            && !self.migration_running_as_source()
            && self
                .vm_stats
                .dirty_rate
                .as_ref()
                .is_none_or(|k| now.saturating_duration_since(k.taken) > DIRTY_RATE_TTL);
        if fetch_agent.is_empty() && !sample_stats_now && !measure {
            let read = VmStatsRead {
                query,
                agent: Vec::new(),
                stats: None,
                dirty_rate: None,
                taken: now,
            };
            return reply.send(Ok(self.vm_stats_reply(read).into()));
        }
        let seconds = query.dirty_rate_seconds;
        let timeout = self.timing.command + Duration::from_secs(u64::from(seconds));
        self.jobs
            .spawn(Operation::QueryVmStats, Some(reply), timeout, move |hv| {
                let read = read_vm_stats(
                    hv,
                    &name,
                    query,
                    &fetch_agent,
                    sample_stats_now.then_some(generation),
                    measure.then_some(seconds),
                );
                JobOutput::reply(Ok(JobValue::VmStats(Box::new(read))))
            });
    }

    /// Keeps what a job read and answers from the caches.
    pub(super) fn vm_stats_reply(&mut self, read: VmStatsRead) -> VmStats {
        let VmStatsRead {
            query,
            agent,
            stats,
            dirty_rate,
            taken,
        } = read;
        let mut fresh_errors: HashMap<&'static str, String> = HashMap::new();
        for (command, result) in agent {
            match result {
                Ok(value) => {
                    self.vm_stats.agent.insert(command, Kept { value, taken });
                }
                Err(e) => {
                    fresh_errors.insert(command, e);
                }
            }
        }
        let mut stats_error = None;
        if let Some((result, generation)) = stats {
            match result {
                Ok(sample) => self.on_stats_sampled(sample, generation),
                Err(e) => stats_error = Some(e),
            }
        }
        let mut dirty_rate_error = None;
        match dirty_rate {
            Some(Ok(value)) => self.vm_stats.dirty_rate = Some(Kept { value, taken }),
            Some(Err(e)) => dirty_rate_error = Some(e),
            None => {}
        }

        let now = Instant::now();
        let mut errors = Vec::new();
        // Each part that was not read says why, and so does `errors`.
        let mut failed = |what: String, e: &str| {
            errors.push(format!("{what}: {e}"));
            e.to_string()
        };
        let domain_stats = query.domain_stats.then(|| {
            match (
                stats_error,
                self.stats.fresh(self.timing.stats_max_age, now),
            ) {
                (None, Some(sample)) => Part::Read(AgedStats {
                    age_ms: age_ms(sample.taken, now),
                    stats: sample.encoded.clone(),
                }),
                (Some(e), _) => Part::Failed {
                    error: failed("domain stats".into(), &e),
                },
                // Dropped by an event while it was read.
                (None, None) => Part::Failed {
                    error: failed(
                        "domain stats".into(),
                        "the domain changed while its statistics were read; ask again",
                    ),
                },
            }
        });
        let dirty_rate = query.dirty_rate.then(|| {
            if self.migration_running_as_source() {
                Part::Failed {
                    error: failed(
                        "dirty rate".into(),
                        "skipped: a migration is running (query-migration has its dirty rate)",
                    ),
                }
            } else if let Some(e) = dirty_rate_error {
                Part::Failed {
                    error: failed("dirty rate".into(), &e),
                }
            } else if let Some(kept) = &self.vm_stats.dirty_rate {
                Part::Read(kept.value.aged(age_ms(kept.taken, now)))
            } else {
                Part::Failed {
                    error: failed("dirty rate".into(), "not measured"),
                }
            }
        });
        let mut agent = None;
        let mut guest_agent_version = None;
        if !query.agent.is_empty() {
            let mut parts = BTreeMap::new();
            for command in &query.agent {
                let what = format!("agent {command}");
                let part = if !self.agent.is_connected() {
                    Part::Failed {
                        error: failed(what, "the guest agent is not connected"),
                    }
                } else if let Some(e) = fresh_errors.remove(command) {
                    Part::Failed {
                        error: failed(what, &e),
                    }
                } else if let Some(kept) = self.vm_stats.agent.get(command) {
                    Part::Read(AgentReturn {
                        age_ms: age_ms(kept.taken, now),
                        value: kept.value.clone(),
                    })
                } else {
                    Part::Failed {
                        error: failed(what, "not read"),
                    }
                };
                parts.insert((*command).to_string(), part);
            }
            guest_agent_version = Some(
                self.agent
                    .cache()
                    .version
                    .as_ref()
                    .map(|v| v.version.clone()),
            );
            agent = Some(parts);
        }
        VmStats {
            agent,
            dirty_rate,
            domain: self.config.domain_name.clone(),
            domain_stats,
            errors,
            guest_agent_version,
        }
    }
}

/// The job: the agent commands one after the other, the statistics and
/// the dirty rate.
fn read_vm_stats(
    hv: &dyn Hypervisor,
    name: &str,
    query: VmStatsQuery,
    agent: &[&'static str],
    stats_generation: Option<u64>,
    measure_seconds: Option<u32>,
) -> VmStatsRead {
    let agent = agent
        .iter()
        .map(|command| {
            let request = agent_request(command);
            let result = hv
                .agent_command(name, &request, AGENT_TIMEOUT)
                .map_err(|e| e.to_string())
                .and_then(|raw| agent_return(&raw));
            (*command, result)
        })
        .collect();
    let stats =
        stats_generation.map(|generation| (sample_stats(hv, name).map_err(|e| e.desc), generation));
    let dirty_rate =
        measure_seconds.map(|seconds| measure_dirty_rate(hv, name, seconds).map_err(|e| e.desc));
    VmStatsRead {
        query,
        agent,
        stats,
        dirty_rate,
        taken: Instant::now(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agents_reply_is_its_return_or_its_error() {
        assert_eq!(
            agent_return(r#"{"return":{"seconds":5}}"#).map(|v| v.to_string()),
            Ok(r#"{"seconds":5}"#.to_string())
        );
        let err = agent_return(
            r#"{"error":{"class":"CommandNotFound","desc":"The command guest-get-load has not been found"}}"#,
        )
        .unwrap_err();
        assert_eq!(
            err,
            "the agent refused: The command guest-get-load has not been found"
        );
        assert!(agent_return("nope").is_err());
        assert!(agent_return("{}").is_err());
    }

    #[test]
    fn every_agent_command_has_kubevirts_time_to_live() {
        for command in crate::command::VM_STATS_AGENT_COMMANDS {
            assert!(ttl_of(command) > Duration::ZERO, "{command}");
        }
        assert_eq!(ttl_of("guest-get-load"), Duration::from_secs(20));
        assert_eq!(ttl_of("guest-get-memory-blocks"), Duration::from_secs(1800));
        assert_eq!(ttl_of("guest-exec"), Duration::ZERO);
    }
}
