//! `query-domain` from a cache: the live domain XML libvirt last returned,
//! its parsed form and that form as JSON, kept until something changes the
//! domain. Reading the XML, parsing it and turning it into JSON costs far
//! more than the answer itself; the domain changes only when an event says
//! so or when the launcher changes it.
//!
//! What drops the cache: every event libvirt sends about the domain
//! (lifecycle, device added or removed, guest agent channel, reboot, job
//! completed), every job that may have changed the domain (sync and its
//! live changes, pause, kill, ...; every job but the read-only ones), each
//! report of a migration, and a lost or regained libvirt connection. A read
//! that such a change overtook is answered to its client but not kept. So a
//! reply never predates a change the launcher was told of. A change libvirt
//! makes without an event the launcher listens to (a balloon resize asked
//! from outside, say) is seen once the cache is older than
//! `DEFAULT_MAX_AGE`; a client that needs more says `max_age_ms`.
//!
//! The state and reason in a reply come from the launcher's own view (kept
//! by the same events), so a cached reply shows the current state; a fresh
//! read shows the state libvirt reported with the XML.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::DomainManager;
use super::errors::hypervisor_error;
use super::hotplug::VolumeStatus;
use super::jobs::{JobOutput, Observation, Operation};
use super::reply::{DomainRead, JobValue, LiveDomain};
use crate::command::{DomainFields, DomainQuery, ReplyTo};
use crate::domxml::Domain;
use crate::domxml::write::{Node, to_node};
use crate::hypervisor::{DiskError, DomainState, DomainStatus, Hypervisor, StateReason};
use crate::protocol::{CommandError, Encoded};
use crate::replies::{DiskErrorReply, DomainReply};

/// How old a cached read a query without `max_age_ms` accepts.
pub(super) const DEFAULT_MAX_AGE: Duration = Duration::from_secs(5);

#[derive(Debug, Default)]
pub(super) struct DomainCache {
    live: Option<Arc<LiveDomain>>,
    /// Counts the changes that dropped the cache; a read that started
    /// before one is not kept.
    generation: u64,
}

impl DomainCache {
    /// Something changed (or may have changed) the domain.
    pub(super) fn invalidate(&mut self) {
        self.live = None;
        self.generation += 1;
    }

    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// Keeps a read that started at `generation`, unless a change came in
    /// between.
    pub(super) fn store(&mut self, live: Arc<LiveDomain>, generation: u64) {
        if generation == self.generation {
            self.live = Some(live);
        }
    }

    /// The cached read, if it is at most `max_age` old at `now`.
    pub(super) fn fresh(&self, max_age: Duration, now: Instant) -> Option<&Arc<LiveDomain>> {
        self.live
            .as_ref()
            .filter(|l| now.saturating_duration_since(l.read) <= max_age)
    }
}

/// The reply's fields from a read (when the fields need one), the state
/// the pod network's report and the volumes (from the read, when asked).
pub(super) fn domain_reply(
    name: &str,
    live: Option<&LiveDomain>,
    status: DomainStatus,
    fields: DomainFields,
    network: impl FnOnce() -> Value,
    volumes: Option<Vec<VolumeStatus>>,
    now: Instant,
) -> DomainReply {
    let (state, reason) = match fields.state {
        true => (Some(status.state.as_str()), Some(status.reason.as_str())),
        false => (None, None),
    };
    let mut reply = DomainReply {
        age_ms: None,
        disk_errors: None,
        guest: None,
        name: name.to_string(),
        network: fields.network.then(network),
        reason,
        spec: None,
        state,
        uuid: None,
        volumes,
        xml: None,
    };
    if let Some(live) = live {
        reply.uuid = fields.uuid.then(|| live.uuid.clone());
        reply.spec = fields.spec.then(|| live.spec.clone());
        reply.xml = fields.xml.then(|| live.xml_json.clone());
        if fields.state && !live.disk_errors.is_empty() {
            reply.disk_errors = Some(disk_error_replies(&live.domain, &live.disk_errors));
        }
        let age = now.saturating_duration_since(live.read);
        reply.age_ms = Some(u64::try_from(age.as_millis()).unwrap_or(u64::MAX));
    }
    reply
}

/// Each disk error with the VMI volume behind its disk (the disk's
/// `ua-` alias, as KubeVirt's `GetVolumeNameByTarget` finds it).
fn disk_error_replies(domain: &Domain, errors: &[DiskError]) -> Vec<DiskErrorReply> {
    errors
        .iter()
        .map(|e| {
            let volume = domain
                .devices
                .disks
                .iter()
                .find(|d| d.target.dev == e.target)
                .and_then(|d| d.alias.as_ref()?.name.strip_prefix("ua-"))
                .unwrap_or_default();
            DiskErrorReply {
                error: e.kind.as_str(),
                target: e.target.clone(),
                volume: volume.to_string(),
            }
        })
        .collect()
}

/// The domain's JSON form as replies carry it: through a JSON tree, so
/// that its keys come sorted as in every other reply object. The tree
/// comes from the domain XML writer's (`domxml::write`), which gives what
/// `serde_json::to_value` gives without instantiating serde_json's
/// serializer for every domain type again.
fn encode_spec(domain: &Domain) -> Encoded {
    let spec = to_node(domain).map_or(Value::Null, Node::into_json);
    Encoded::new(&spec)
}

/// Reads the live domain: XML, UUID and state, and parses the XML.
fn read_domain(
    hv: &dyn Hypervisor,
    name: &str,
) -> Result<(LiveDomain, Option<DomainStatus>), CommandError> {
    let ((xml, uuid), status) = hv
        .domain_xml_and_status(name)
        .map_err(|e| hypervisor_error(&e))?;
    let domain = Domain::from_xml(&xml).map_err(|e| {
        CommandError::internal(format!("cannot parse the domain XML libvirt returned: {e}"))
    })?;
    // Which disks paused the guest: KubeVirt names their volumes to the
    // user. A failure to say is logged, not the read's failure.
    let paused_by_io_error =
        status.is_some_and(|s| s.state == DomainState::Paused && s.reason == StateReason::IOError);
    let disk_errors = match paused_by_io_error {
        true => hv.disk_errors(name).unwrap_or_else(|e| {
            log::warn!("cannot read which disks paused the domain: {e}");
            Vec::new()
        }),
        false => Vec::new(),
    };
    let live = LiveDomain {
        uuid,
        spec: encode_spec(&domain),
        xml_json: Encoded::new(&xml),
        xml,
        domain: Arc::new(domain),
        disk_errors,
        read: Instant::now(),
    };
    Ok((live, status))
}

impl DomainManager {
    /// `query-domain`, once the command's state checks passed.
    pub(super) fn query_domain(&mut self, query: DomainQuery, reply: ReplyTo) {
        let now = Instant::now();
        let max_age = query.max_age.unwrap_or(self.timing.domain_max_age);
        if !query.fields.need_xml() {
            return reply.send(Ok(self
                .domain_reply(None, self.domain.status, query.fields, now)
                .into()));
        }
        if let Some(live) = self.domain_cache.fresh(max_age, now).cloned() {
            let status = self.domain.status;
            return reply.send(Ok(self
                .domain_reply(Some(&live), status, query.fields, now)
                .into()));
        }
        let name = self.config.domain_name.clone();
        let generation = self.domain_cache.generation();
        let fields = query.fields;
        self.jobs.spawn(
            Operation::QueryDomain,
            Some(reply),
            self.timing.command,
            move |hv| match read_domain(hv, &name) {
                Ok((live, status)) => JobOutput {
                    result: Ok(JobValue::Described(Box::new(DomainRead {
                        live,
                        status,
                        generation,
                        fields,
                    }))),
                    observed: Observation::Status(status),
                },
                Err(e) => JobOutput::reply(Err(e)),
            },
        );
    }

    /// The reply to a query-domain job: its read is kept (unless a change
    /// overtook it) and answered with the state read with it.
    pub(super) fn on_domain_read(&mut self, read: DomainRead) -> DomainReply {
        let live = Arc::new(read.live);
        self.domain_cache.store(live.clone(), read.generation);
        let status = read.status.unwrap_or(DomainStatus::NON_EXISTENT);
        self.domain_reply(Some(&live), status, read.fields, Instant::now())
    }

    fn domain_reply(
        &mut self,
        live: Option<&LiveDomain>,
        status: DomainStatus,
        fields: DomainFields,
        now: Instant,
    ) -> DomainReply {
        // The volumes of the read, with the phases of those in transition
        // (which the manager keeps: current even when the read is cached).
        let volumes = match live {
            Some(live) if fields.volumes => {
                let listed =
                    super::hotplug::live_volumes(&live.domain, &self.config.dirs.hotplug_disks);
                Some(self.volume_statuses(listed))
            }
            _ => None,
        };
        let network = &self.network;
        let mut reply = domain_reply(
            &self.config.domain_name,
            live,
            status,
            fields,
            || crate::network::report(network),
            volumes,
            now,
        );
        reply.guest = fields.guest.then(|| self.agent.last_report());
        reply
    }

    /// Drops what the caches hold about the domain: it changed, or may
    /// have.
    pub(super) fn domain_changed(&mut self) {
        self.domain_cache.invalidate();
        self.stats.invalidate();
        self.vm_stats.invalidate();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hypervisor::{DomainState, StateReason};

    fn live(at: Instant) -> Arc<LiveDomain> {
        let xml = "<domain type='test'><name>ns_vm</name></domain>".to_string();
        let domain = Domain::from_xml(&xml).unwrap();
        Arc::new(LiveDomain {
            uuid: "u".into(),
            spec: encode_spec(&domain),
            xml_json: Encoded::new(&xml),
            domain: Arc::new(domain),
            xml,
            disk_errors: Vec::new(),
            read: at,
        })
    }

    #[test]
    fn a_read_is_kept_until_a_change_and_not_across_one() {
        let t0 = Instant::now();
        let mut cache = DomainCache::default();
        let before = cache.generation();
        cache.store(live(t0), before);
        assert!(cache.fresh(DEFAULT_MAX_AGE, t0).is_some());
        assert!(
            cache
                .fresh(Duration::ZERO, t0 + Duration::from_millis(1))
                .is_none()
        );
        assert!(
            cache
                .fresh(
                    DEFAULT_MAX_AGE,
                    t0 + DEFAULT_MAX_AGE + Duration::from_millis(1)
                )
                .is_none()
        );
        cache.invalidate();
        assert!(cache.fresh(DEFAULT_MAX_AGE, t0).is_none());
        // Started before the change, finished after it: not kept.
        cache.store(live(t0), before);
        assert!(cache.fresh(DEFAULT_MAX_AGE, t0).is_none());
    }

    #[test]
    fn replies_carry_what_was_asked() {
        let t0 = Instant::now();
        let running = DomainStatus::new(DomainState::Running, StateReason::Booted);
        let read = live(t0);
        let all = domain_reply(
            "ns_vm",
            Some(&read),
            running,
            DomainFields::ALL,
            || Value::Array(Vec::new()),
            None,
            t0 + Duration::from_millis(7),
        );
        let line = serde_json::to_string(&all).unwrap();
        let all = crate::protocol::Return::from(all).into_object();
        // The encoded members are written as the values they encode.
        assert_eq!(serde_json::to_string(&all).unwrap(), line);
        assert_eq!(all["spec"], serde_json::to_value(&*read.domain).unwrap());
        assert_eq!(all["xml"], read.xml.as_str());
        let mut keys: Vec<&str> = all.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "age_ms", "name", "network", "reason", "spec", "state", "uuid", "xml"
            ]
        );
        assert_eq!(all["age_ms"], 7);
        assert_eq!(all["state"], "Running");
        let state_only = DomainFields {
            uuid: false,
            state: true,
            xml: false,
            spec: false,
            network: false,
            volumes: false,
            guest: false,
        };
        let reply = domain_reply(
            "ns_vm",
            None,
            running,
            state_only,
            || panic!("not asked"),
            None,
            t0,
        );
        assert_eq!(
            serde_json::to_string(&reply).unwrap(),
            r#"{"name":"ns_vm","reason":"Booted","state":"Running"}"#
        );
    }
}
