//! `query-stats` from a cache. libvirt's bulk statistics of a running QEMU
//! domain cost milliseconds (libvirt asks QEMU's monitor for the balloon,
//! block and vCPU figures); a client polling them should not pay that on
//! every call. So the last sample is kept and answered at once, and while
//! clients keep asking, a job takes a new sample every `REFRESH` in the
//! background (KubeVirt's launcher refreshes every 3.25 s). Nobody asking
//! for `IDLE_STOP` stops the refresher: no wake-ups for nobody. A client
//! that needs a newer sample says how old it may be (`max_age_ms`; 0 for a
//! fresh one) and waits for a sample taken for it.
//!
//! Every event about the domain (it started, paused, stopped, a device
//! came or went, ...) drops the sample: a reply never shows statistics
//! from before such an event. A sample read while an event arrived is not
//! kept either (it may predate the event).

use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::DomainManager;
use super::errors::hypervisor_error;
use super::jobs::{JobOutput, Observation, Operation};
use super::reply::{JobValue, StatsSample};
use super::timers::Timer;
use crate::command::ReplyTo;
use crate::hypervisor::{Hypervisor, Stat};

use crate::replies::StatsReply;

/// How often the refresher takes a sample while clients ask.
pub(super) const REFRESH: Duration = Duration::from_secs(3);
/// How old a sample a query without `max_age_ms` accepts: a refresh is
/// due every `REFRESH`; the margin covers a refresh still under way.
pub(super) const DEFAULT_MAX_AGE: Duration = Duration::from_secs(5);
/// The refresher stops after this long without a `query-stats`.
pub(super) const IDLE_STOP: Duration = Duration::from_secs(60);

/// The manager's statistics cache and its refresher.
#[derive(Debug, Default)]
pub(super) struct StatsCache {
    sample: Option<StatsSample>,
    /// When a client last asked; the refresher runs while this is recent.
    last_asked: Option<Instant>,
    /// Counts the events that dropped the sample; a sample read across
    /// one is not kept.
    generation: u64,
}

impl StatsCache {
    /// The domain changed: what was sampled before may be wrong now.
    pub(super) fn invalidate(&mut self) {
        self.sample = None;
        self.generation += 1;
    }

    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// Keeps a sample read by a job that started at `generation`, unless an
    /// event came in between or a newer sample is already kept.
    pub(super) fn store(&mut self, sample: StatsSample, generation: u64) {
        if generation != self.generation {
            return;
        }
        if self
            .sample
            .as_ref()
            .is_some_and(|kept| kept.taken > sample.taken)
        {
            return;
        }
        self.sample = Some(sample);
    }

    /// The kept sample, if it is at most `max_age` old at `now`.
    pub(super) fn fresh(&self, max_age: Duration, now: Instant) -> Option<&StatsSample> {
        self.sample
            .as_ref()
            .filter(|s| now.saturating_duration_since(s.taken) <= max_age)
    }

    fn asked_within(&self, idle_stop: Duration, now: Instant) -> bool {
        self.last_asked
            .is_some_and(|at| now.saturating_duration_since(at) < idle_stop)
    }
}

/// The reply: the domain, its statistics, and how old they are.
pub(super) fn stats_reply(domain: &str, sample: &StatsSample, now: Instant) -> StatsReply {
    StatsReply {
        age_ms: age_ms(sample.taken, now),
        domain: domain.to_string(),
        stats: sample.encoded.clone(),
    }
}

/// Milliseconds from `then` to `now`, as replies show ages.
pub(super) fn age_ms(then: Instant, now: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(then).as_millis()).unwrap_or(u64::MAX)
}

/// Reads the statistics (a job's work).
pub(super) fn sample_stats(
    hv: &dyn Hypervisor,
    name: &str,
) -> Result<StatsSample, crate::protocol::CommandError> {
    let stats: Vec<Stat> = hv.stats(name).map_err(|e| hypervisor_error(&e))?;
    let stats: Map<String, Value> = stats.into_iter().collect();
    Ok(StatsSample::new(&stats, Instant::now()))
}

impl DomainManager {
    /// `query-stats`, once the command's state checks passed.
    pub(super) fn query_stats(&mut self, max_age: Option<Duration>, reply: ReplyTo) {
        let now = Instant::now();
        self.stats.last_asked = Some(now);
        self.keep_refreshing_stats(now);
        let max_age = max_age.unwrap_or(self.timing.stats_max_age);
        if let Some(sample) = self.stats.fresh(max_age, now) {
            return reply.send(Ok(stats_reply(&self.config.domain_name, sample, now).into()));
        }
        let name = self.config.domain_name.clone();
        let generation = self.stats.generation();
        self.jobs.spawn(
            Operation::QueryStats,
            Some(reply),
            self.timing.command,
            move |hv| stats_job(hv, name, generation),
        );
    }

    /// Arms the refresher unless it runs already (a refresh job or its
    /// timer).
    fn keep_refreshing_stats(&mut self, now: Instant) {
        if self.timers.next_of(Timer::StatsRefresh).is_some()
            || self.jobs.is_running(Operation::StatsRefresh)
        {
            return;
        }
        // Without a sample, the query that armed the refresher is taking
        // one now: the next is due a period later.
        let due = self.stats.sample.as_ref().map_or(now, |s| s.taken) + self.timing.stats_refresh;
        let due = due.max(now);
        self.timers.arm(Timer::StatsRefresh, due);
    }

    /// The refresher's timer: take a sample, unless nobody asked for a
    /// while (then stop until somebody does) or there is no domain.
    pub(super) fn on_stats_refresh_due(&mut self) {
        let now = Instant::now();
        if !self.stats.asked_within(self.timing.stats_idle_stop, now) {
            log::debug!(
                "manager: nobody asked for statistics for {} s; stopping their refresh",
                self.timing.stats_idle_stop.as_secs()
            );
            return;
        }
        if !self.domain.defined && !self.domain.status.state.is_active() {
            return;
        }
        if !self.link.is_up() {
            // Refreshed again once a client asks after the reconnect.
            return;
        }
        let name = self.config.domain_name.clone();
        let generation = self.stats.generation();
        self.jobs.spawn(
            Operation::StatsRefresh,
            None,
            self.timing.command,
            move |hv| stats_job(hv, name, generation),
        );
    }

    /// A sample a job took (for a client or the refresher).
    pub(super) fn on_stats_sampled(&mut self, sample: StatsSample, generation: u64) {
        self.stats.store(sample, generation);
    }

    /// After a refresh job: the next one in `REFRESH`, while clients ask.
    pub(super) fn after_stats_refresh(&mut self) {
        let now = Instant::now();
        if self.stats.asked_within(self.timing.stats_idle_stop, now) {
            self.timers
                .arm(Timer::StatsRefresh, now + self.timing.stats_refresh);
        }
    }
}

fn stats_job(hv: &dyn Hypervisor, name: String, generation: u64) -> JobOutput {
    match sample_stats(hv, &name) {
        Ok(sample) => {
            let now = Instant::now();
            JobOutput {
                result: Ok(JobValue::Reply(stats_reply(&name, &sample, now).into())),
                observed: Observation::StatsSample { sample, generation },
            }
        }
        Err(e) => JobOutput::reply(Err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: Instant) -> StatsSample {
        let mut stats = Map::new();
        stats.insert("state.state".into(), Value::from(1));
        StatsSample::new(&stats, at)
    }

    #[test]
    fn a_sample_is_served_while_young_enough() {
        let t0 = Instant::now();
        let mut cache = StatsCache::default();
        assert!(cache.fresh(DEFAULT_MAX_AGE, t0).is_none());
        cache.store(sample(t0), cache.generation());
        let later = t0 + Duration::from_millis(1500);
        assert!(cache.fresh(DEFAULT_MAX_AGE, later).is_some());
        assert!(cache.fresh(Duration::from_millis(1000), later).is_none());
        assert!(cache.fresh(Duration::ZERO, later).is_none());
        let reply = stats_reply("ns_vm", cache.fresh(DEFAULT_MAX_AGE, later).unwrap(), later);
        assert_eq!(
            serde_json::to_string(&reply).unwrap(),
            r#"{"age_ms":1500,"domain":"ns_vm","stats":{"state.state":1}}"#
        );
    }

    #[test]
    fn an_event_drops_the_sample_and_what_was_read_across_it() {
        let t0 = Instant::now();
        let mut cache = StatsCache::default();
        let before = cache.generation();
        cache.store(sample(t0), before);
        cache.invalidate();
        assert!(cache.fresh(DEFAULT_MAX_AGE, t0).is_none());
        // A job that started before the event reports after it.
        cache.store(sample(t0 + Duration::from_millis(1)), before);
        assert!(cache.fresh(DEFAULT_MAX_AGE, t0).is_none());
        cache.store(sample(t0 + Duration::from_millis(2)), cache.generation());
        assert!(
            cache
                .fresh(DEFAULT_MAX_AGE, t0 + Duration::from_millis(2))
                .is_some()
        );
    }

    #[test]
    fn an_older_sample_never_replaces_a_newer_one() {
        let t0 = Instant::now();
        let mut cache = StatsCache::default();
        let generation = cache.generation();
        cache.store(sample(t0 + Duration::from_secs(2)), generation);
        cache.store(sample(t0), generation);
        assert_eq!(
            cache
                .fresh(DEFAULT_MAX_AGE, t0 + Duration::from_secs(2))
                .map(|s| s.taken),
            Some(t0 + Duration::from_secs(2))
        );
    }

    #[test]
    fn the_refresher_stops_when_nobody_asks() {
        let t0 = Instant::now();
        let mut cache = StatsCache::default();
        assert!(!cache.asked_within(IDLE_STOP, t0));
        cache.last_asked = Some(t0);
        assert!(cache.asked_within(IDLE_STOP, t0 + IDLE_STOP - Duration::from_millis(1)));
        assert!(!cache.asked_within(IDLE_STOP, t0 + IDLE_STOP));
    }
}
