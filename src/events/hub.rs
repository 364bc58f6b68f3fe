//! Fan-out of events to subscribed connections.
//!
//! The manager publishes each event once; every subscriber has its own
//! bounded queue. A subscriber that falls behind loses its oldest events
//! and is told how many with `EVENTS_DROPPED`; publishing never blocks, so
//! a slow or dead client cannot stall the manager.
//!
//! Each published event gets the next number (`seq`), and the hub keeps the
//! last [`RETAINED_EVENTS`] of them, so that a client that reconnects (after
//! an upgrade closed its connection, say) subscribes `since` the last number
//! it saw and misses nothing still retained. The numbers and the retained
//! events go to the new launcher of an upgrade ([`EventsHandover`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError, bounded};

use super::{Event, EventKind};

/// Events a subscriber may have queued before the oldest are dropped.
pub const SUBSCRIBER_QUEUE_LEN: usize = 256;

/// Published events kept for `subscribe`'s `since`: as many as a
/// subscriber's queue holds, so a replay always fits in it.
pub const RETAINED_EVENTS: usize = SUBSCRIBER_QUEUE_LEN;

/// Why a subscription was not made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubscribeRefusal {
    /// The launcher is exiting.
    Closed,
    /// `since` names an event this launcher never published (the client
    /// saw another launcher's events: one that restarted, not upgraded).
    SinceAhead { since: u64, last: u64 },
}

/// The hub's numbering and retained events, handed to the new launcher of
/// an upgrade.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EventsHandover {
    /// The number the next event gets.
    pub next_seq: u64,
    /// The retained events' lines, oldest first (each names its `seq`).
    pub retained: Vec<String>,
}

struct Subscription {
    id: u64,
    filter: Option<Vec<EventKind>>,
    tx: Sender<Event>,
    /// A receiver clone, used only to pop the oldest event on overflow.
    oldest: Receiver<Event>,
    dropped: Arc<AtomicU64>,
}

/// What a connection's event writer reads from.
pub struct SubscriberQueue {
    pub id: u64,
    /// The number of the last event published when it subscribed: every
    /// later one is queued for it (or counted as dropped).
    pub last_seq: u64,
    pub events: Receiver<Event>,
    /// Events dropped since the writer last reported it.
    pub dropped: Arc<AtomicU64>,
    /// Dropped when the writer exits; `EventHub::drain` waits for that.
    pub _alive: Sender<()>,
}

pub struct EventHub {
    inner: Mutex<HubState>,
    alive_rx: Receiver<()>,
}

struct HubState {
    next_id: u64,
    subscriptions: Vec<Subscription>,
    alive_tx: Option<Sender<()>>,
    /// The number the next published event gets.
    next_seq: u64,
    /// The last published events, oldest first.
    retained: VecDeque<Event>,
    /// Handed over to a new launcher: events published from now on are
    /// not numbered nor delivered (the exec is moments away).
    sealed: bool,
}

impl Default for EventHub {
    fn default() -> Self {
        Self::new()
    }
}

impl EventHub {
    pub fn new() -> EventHub {
        Self::resumed(None)
    }

    /// A hub that goes on from what the launcher before an upgrade handed
    /// over: its numbering, and its retained events for `since`.
    pub fn resumed(handover: Option<EventsHandover>) -> EventHub {
        let (alive_tx, alive_rx) = bounded(0);
        let (next_seq, retained) = match handover {
            Some(handover) => (
                handover.next_seq.max(1),
                handover
                    .retained
                    .iter()
                    .filter_map(|line| Event::from_published_line(line))
                    .filter(|event| event.seq < handover.next_seq)
                    .collect(),
            ),
            None => (1, VecDeque::new()),
        };
        EventHub {
            inner: Mutex::new(HubState {
                next_id: 1,
                subscriptions: Vec::new(),
                alive_tx: Some(alive_tx),
                next_seq,
                retained,
                sealed: false,
            }),
            alive_rx,
        }
    }

    fn state(&self) -> MutexGuard<'_, HubState> {
        // A panic while holding this lock cannot leave the list
        // inconsistent (every mutation is a single push/retain), so a
        // poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a subscriber, or `None` once the hub is closed.
    pub fn subscribe(&self, filter: Option<Vec<EventKind>>) -> Option<SubscriberQueue> {
        self.subscribe_since(filter, None).ok()
    }

    /// Adds a subscriber whose queue starts with the retained events after
    /// number `since` that its filter takes; those no longer retained are
    /// counted as dropped.
    pub fn subscribe_since(
        &self,
        filter: Option<Vec<EventKind>>,
        since: Option<u64>,
    ) -> Result<SubscriberQueue, SubscribeRefusal> {
        let mut state = self.state();
        let alive = state.alive_tx.clone().ok_or(SubscribeRefusal::Closed)?;
        let last = state.next_seq - 1;
        if let Some(since) = since
            && since > last
        {
            return Err(SubscribeRefusal::SinceAhead { since, last });
        }
        let id = state.next_id;
        state.next_id += 1;
        let (tx, rx) = bounded(SUBSCRIBER_QUEUE_LEN);
        let dropped = Arc::new(AtomicU64::new(0));
        if let Some(since) = since {
            let oldest = state.retained.front().map_or(state.next_seq, |e| e.seq);
            dropped.store(oldest.saturating_sub(since + 1), Ordering::Relaxed);
            for event in state.retained.iter().filter(|e| e.seq > since) {
                if filter.as_ref().is_none_or(|f| f.contains(&event.kind)) {
                    // Fits: the queue holds as many as are retained.
                    let _ = tx.try_send(event.clone());
                }
            }
        }
        state.subscriptions.push(Subscription {
            id,
            filter,
            tx,
            oldest: rx.clone(),
            dropped: dropped.clone(),
        });
        Ok(SubscriberQueue {
            id,
            last_seq: last,
            events: rx,
            dropped,
            _alive: alive,
        })
    }

    /// The number of the last event published (0: none yet).
    pub fn last_seq(&self) -> u64 {
        self.state().next_seq - 1
    }

    /// The numbering and retained events for the new launcher of an
    /// upgrade. The hub is sealed until [`EventHub::unseal`]: an event
    /// published after this could not be handed over.
    pub fn seal_for_handover(&self) -> EventsHandover {
        let mut state = self.state();
        state.sealed = true;
        EventsHandover {
            next_seq: state.next_seq,
            retained: state.retained.iter().map(|e| e.line.to_string()).collect(),
        }
    }

    /// The upgrade was given up: events are published again.
    pub fn unseal(&self) {
        self.state().sealed = false;
    }

    /// Replaces a subscriber's filter (a second `subscribe` on the same
    /// connection).
    pub fn set_filter(&self, id: u64, filter: Option<Vec<EventKind>>) {
        if let Some(s) = self.state().subscriptions.iter_mut().find(|s| s.id == id) {
            s.filter = filter;
        }
    }

    /// Removes a subscriber; its writer drains what is queued and stops.
    pub fn unsubscribe(&self, id: u64) {
        self.state().subscriptions.retain(|s| s.id != id);
    }

    pub fn subscriber_count(&self) -> usize {
        self.state().subscriptions.len()
    }

    /// Queues an event for every subscriber that wants it.
    pub fn publish(&self, mut event: Event) {
        let mut state = self.state();
        if state.sealed {
            log::info!(
                "event (during the hand-over, not delivered) {}",
                event.line.trim_end()
            );
            return;
        }
        event.seq = state.next_seq;
        state.next_seq += 1;
        event.line = numbered_line(&event.line, event.seq).into();
        log::info!("event {}", event.line.trim_end());
        if state.retained.len() == RETAINED_EVENTS {
            state.retained.pop_front();
        }
        state.retained.push_back(event.clone());
        for sub in &state.subscriptions {
            if let Some(filter) = &sub.filter
                && !filter.contains(&event.kind)
            {
                continue;
            }
            let mut pending = event.clone();
            loop {
                match sub.tx.try_send(pending) {
                    Ok(()) => break,
                    Err(TrySendError::Full(back)) => {
                        // Make room by dropping the oldest queued event.
                        if sub.oldest.try_recv().is_ok() {
                            sub.dropped.fetch_add(1, Ordering::Relaxed);
                        }
                        pending = back;
                    }
                    Err(TrySendError::Disconnected(_)) => break,
                }
            }
        }
    }

    /// Stops accepting subscribers, lets every writer send what it has
    /// queued, and waits up to `timeout` for them to finish. Returns false
    /// if some writer was still busy (a client not reading).
    pub fn drain(&self, timeout: Duration) -> bool {
        {
            let mut state = self.state();
            state.subscriptions.clear();
            state.alive_tx = None;
        }
        matches!(
            self.alive_rx.recv_timeout(timeout),
            Err(RecvTimeoutError::Disconnected)
        )
    }
}

/// The event line with its number first: `{"seq":N,"event":...}`.
fn numbered_line(line: &str, seq: u64) -> String {
    match line.strip_prefix('{') {
        Some(rest) => format!("{{\"seq\":{seq},{rest}"),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(kind: EventKind, n: u64) -> Event {
        Event::new(kind, &json!({ "n": n }))
    }

    fn n_of(e: &Event) -> u64 {
        let v: serde_json::Value = serde_json::from_str(&e.line).unwrap();
        v["data"]["n"].as_u64().unwrap()
    }

    #[test]
    fn filters_and_fan_out() {
        let hub = EventHub::new();
        let all = hub.subscribe(None).unwrap();
        let only_agent = hub
            .subscribe(Some(vec![EventKind::AgentConnected]))
            .unwrap();
        hub.publish(event(EventKind::DomainLifecycle, 1));
        hub.publish(event(EventKind::AgentConnected, 2));
        assert_eq!(all.events.len(), 2);
        assert_eq!(only_agent.events.len(), 1);
        assert_eq!(n_of(&only_agent.events.recv().unwrap()), 2);
    }

    #[test]
    fn overflow_drops_oldest_and_counts() {
        let hub = EventHub::new();
        let sub = hub.subscribe(None).unwrap();
        let total = SUBSCRIBER_QUEUE_LEN as u64 + 10;
        for n in 0..total {
            hub.publish(event(EventKind::DomainLifecycle, n));
        }
        assert_eq!(sub.dropped.load(Ordering::Relaxed), 10);
        assert_eq!(sub.events.len(), SUBSCRIBER_QUEUE_LEN);
        // The oldest were dropped: the first one left is number 10.
        assert_eq!(n_of(&sub.events.recv().unwrap()), 10);
    }

    fn seq_of(e: &Event) -> u64 {
        let v: serde_json::Value = serde_json::from_str(&e.line).unwrap();
        v["seq"].as_u64().unwrap()
    }

    #[test]
    fn events_are_numbered_and_a_late_subscriber_gets_those_since_its_number() {
        let hub = EventHub::new();
        assert_eq!(hub.last_seq(), 0);
        hub.publish(event(EventKind::DomainLifecycle, 1));
        hub.publish(event(EventKind::AgentConnected, 2));
        hub.publish(event(EventKind::DomainLifecycle, 3));
        assert_eq!(hub.last_seq(), 3);
        let sub = hub
            .subscribe_since(Some(vec![EventKind::DomainLifecycle]), Some(1))
            .unwrap();
        assert_eq!(sub.last_seq, 3);
        assert_eq!(sub.dropped.load(Ordering::Relaxed), 0);
        // After number 1, the filter takes number 3 only.
        let replayed = sub.events.try_recv().unwrap();
        assert_eq!((seq_of(&replayed), n_of(&replayed)), (3, 3));
        assert!(sub.events.try_recv().is_err());
        hub.publish(event(EventKind::DomainLifecycle, 4));
        assert_eq!(seq_of(&sub.events.try_recv().unwrap()), 4);
        // Without since, nothing old.
        let fresh = hub.subscribe(None).unwrap();
        assert!(fresh.events.try_recv().is_err());
        assert_eq!(
            hub.subscribe_since(None, Some(5)).err(),
            Some(SubscribeRefusal::SinceAhead { since: 5, last: 4 })
        );
    }

    #[test]
    fn events_no_longer_retained_are_counted_as_dropped() {
        let hub = EventHub::new();
        let total = RETAINED_EVENTS as u64 + 5;
        for n in 1..=total {
            hub.publish(event(EventKind::DomainLifecycle, n));
        }
        let sub = hub.subscribe_since(None, Some(2)).unwrap();
        // Numbers 3 to 5 are gone; 6 on are replayed.
        assert_eq!(sub.dropped.load(Ordering::Relaxed), 3);
        assert_eq!(sub.events.len(), RETAINED_EVENTS);
        assert_eq!(seq_of(&sub.events.recv().unwrap()), 6);
    }

    #[test]
    fn a_handed_over_hub_goes_on_numbering_and_replays() {
        let old = EventHub::new();
        old.publish(event(EventKind::DomainLifecycle, 1));
        old.publish(event(EventKind::AgentConnected, 2));
        let handover = old.seal_for_handover();
        // Sealed: not numbered, not retained.
        old.publish(event(EventKind::DomainLifecycle, 99));
        assert_eq!(old.last_seq(), 2);
        let text = serde_json::to_string(&handover).unwrap();
        let new = EventHub::resumed(Some(serde_json::from_str(&text).unwrap()));
        assert_eq!(new.last_seq(), 2);
        let sub = new.subscribe_since(None, Some(1)).unwrap();
        let replayed = sub.events.try_recv().unwrap();
        assert_eq!(replayed.kind, EventKind::AgentConnected);
        assert_eq!((seq_of(&replayed), n_of(&replayed)), (2, 2));
        new.publish(event(EventKind::DomainLifecycle, 3));
        assert_eq!(seq_of(&sub.events.try_recv().unwrap()), 3);
        // Given up: the old hub publishes again.
        old.unseal();
        old.publish(event(EventKind::DomainLifecycle, 4));
        assert_eq!(old.last_seq(), 3);
    }

    #[test]
    fn unsubscribe_stops_delivery() {
        let hub = EventHub::new();
        let sub = hub.subscribe(None).unwrap();
        hub.unsubscribe(sub.id);
        hub.publish(event(EventKind::DomainLifecycle, 1));
        assert!(sub.events.try_recv().is_err());
        assert_eq!(hub.subscriber_count(), 0);
    }

    #[test]
    fn drain_waits_for_writers() {
        let hub = Arc::new(EventHub::new());
        let sub = hub.subscribe(None).unwrap();
        hub.publish(event(EventKind::DomainLifecycle, 1));
        let writer = std::thread::spawn(move || {
            // Own the whole queue (a closure would capture only `events`),
            // as the real writer does.
            let sub = sub;
            let mut got = Vec::new();
            while let Ok(e) = sub.events.recv() {
                got.push(n_of(&e));
            }
            got
        });
        assert!(hub.drain(Duration::from_secs(5)));
        assert_eq!(writer.join().unwrap(), vec![1]);
        assert!(hub.subscribe(None).is_none());
    }

    #[test]
    fn drain_times_out_on_stuck_writer() {
        let hub = EventHub::new();
        let _stuck = hub.subscribe(None).unwrap();
        assert!(!hub.drain(Duration::from_millis(50)));
    }
}
