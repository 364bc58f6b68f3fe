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

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::DomainManager;
use super::diagnostics::measure_dirty_rate;
use super::jobs::{JobOutput, Operation};
use super::reply::JobValue;
use super::stats::{StatsSample, sample_stats};
use crate::command::{ReplyTo, VmStatsQuery};
use crate::hypervisor::Hypervisor;
use crate::protocol::Return;

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
struct Kept {
    value: Value,
    taken: Instant,
}

/// The agent's answers and the dirty rate, as last read.
#[derive(Debug, Default)]
pub(super) struct VmStatsCache {
    agent: HashMap<&'static str, Kept>,
    dirty_rate: Option<Kept>,
}

impl VmStatsCache {
    /// The domain changed (stopped, restarted): what the guest said
    /// before may be wrong now.
    pub(super) fn invalidate(&mut self) {
        self.agent.clear();
        self.dirty_rate = None;
    }
}

/// What a job read for a `query-vm-stats`.
#[derive(Debug, PartialEq)]
pub struct VmStatsRead {
    query: VmStatsQuery,
    agent: Vec<(&'static str, Result<Value, String>)>,
    stats: Option<(Result<StatsSample, String>, u64)>,
    dirty_rate: Option<Result<Value, String>>,
    taken: Instant,
}

fn ttl_of(command: &str) -> Duration {
    AGENT_COMMANDS
        .iter()
        .find(|(c, _)| *c == command)
        .map_or(Duration::ZERO, |(_, ttl)| *ttl)
}

fn age_ms(taken: Instant, now: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(taken).as_millis()).unwrap_or(u64::MAX)
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
        let agent_connected = self.agent.connected;
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
            return reply.send(Ok(self.vm_stats_reply(read)));
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
    pub(super) fn vm_stats_reply(&mut self, read: VmStatsRead) -> Return {
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
        let mut reply = Map::new();
        reply.insert("domain".into(), json!(self.config.domain_name));
        if query.domain_stats {
            let part = match (
                stats_error,
                self.stats.fresh(self.timing.stats_max_age, now),
            ) {
                (None, Some(sample)) => {
                    json!({ "stats": sample.encoded, "age_ms": age_ms(sample.taken, now) })
                }
                (Some(e), _) => {
                    errors.push(format!("domain stats: {e}"));
                    json!({ "error": e })
                }
                // Dropped by an event while it was read.
                (None, None) => {
                    let e = "the domain changed while its statistics were read; ask again";
                    errors.push(format!("domain stats: {e}"));
                    json!({ "error": e })
                }
            };
            reply.insert("domain_stats".into(), part);
        }
        if query.dirty_rate {
            let part = if self.migration_running_as_source() {
                let e = "skipped: a migration is running (query-migration has its dirty rate)";
                errors.push(format!("dirty rate: {e}"));
                json!({ "error": e })
            } else if let Some(e) = dirty_rate_error {
                errors.push(format!("dirty rate: {e}"));
                json!({ "error": e })
            } else if let Some(kept) = &self.vm_stats.dirty_rate {
                let mut part = kept.value.clone();
                part["age_ms"] = json!(age_ms(kept.taken, now));
                part
            } else {
                let e = "not measured";
                errors.push(format!("dirty rate: {e}"));
                json!({ "error": e })
            };
            reply.insert("dirty_rate".into(), part);
        }
        if !query.agent.is_empty() {
            let mut agent = Map::new();
            for command in &query.agent {
                let part = if !self.agent.connected {
                    let e = "the guest agent is not connected";
                    errors.push(format!("agent {command}: {e}"));
                    json!({ "error": e })
                } else if let Some(e) = fresh_errors.remove(command) {
                    errors.push(format!("agent {command}: {e}"));
                    json!({ "error": e })
                } else if let Some(kept) = self.vm_stats.agent.get(command) {
                    json!({ "return": kept.value, "age_ms": age_ms(kept.taken, now) })
                } else {
                    let e = "not read";
                    errors.push(format!("agent {command}: {e}"));
                    json!({ "error": e })
                };
                agent.insert((*command).to_string(), part);
            }
            reply.insert(
                "guest_agent_version".into(),
                json!(self.agent.cache.version.as_ref().map(|v| v.version.clone())),
            );
            reply.insert("agent".into(), Value::Object(agent));
        }
        reply.insert("errors".into(), json!(errors));
        reply.into()
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
            let request = json!({ "execute": command }).to_string();
            let result = hv
                .agent_command(name, &request, AGENT_TIMEOUT)
                .map_err(|e| e.to_string())
                .and_then(|raw| agent_return(&raw));
            (*command, result)
        })
        .collect();
    let stats =
        stats_generation.map(|generation| (sample_stats(hv, name).map_err(|e| e.desc), generation));
    let dirty_rate = measure_seconds.map(|seconds| {
        measure_dirty_rate(hv, name, seconds)
            .map(|ret| {
                let mut value = Value::Object(ret.into_object());
                if let Some(map) = value.as_object_mut() {
                    map.remove("domain");
                }
                value
            })
            .map_err(|e| e.desc)
    });
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
            agent_return(r#"{"return":{"seconds":5}}"#),
            Ok(json!({"seconds": 5}))
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
