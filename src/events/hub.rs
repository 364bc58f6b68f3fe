//! Fan-out of events to subscribed connections.
//!
//! The manager publishes each event once; every subscriber has its own
//! bounded queue. A subscriber that falls behind loses its oldest events
//! and is told how many with `EVENTS_DROPPED`; publishing never blocks, so
//! a slow or dead client cannot stall the manager.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError, bounded};

use super::{Event, EventKind};

/// Events a subscriber may have queued before the oldest are dropped.
pub const SUBSCRIBER_QUEUE_LEN: usize = 256;

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
}

impl Default for EventHub {
    fn default() -> Self {
        Self::new()
    }
}

impl EventHub {
    pub fn new() -> EventHub {
        let (alive_tx, alive_rx) = bounded(0);
        EventHub {
            inner: Mutex::new(HubState {
                next_id: 1,
                subscriptions: Vec::new(),
                alive_tx: Some(alive_tx),
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
        let mut state = self.state();
        let alive = state.alive_tx.clone()?;
        let id = state.next_id;
        state.next_id += 1;
        let (tx, rx) = bounded(SUBSCRIBER_QUEUE_LEN);
        let dropped = Arc::new(AtomicU64::new(0));
        state.subscriptions.push(Subscription {
            id,
            filter,
            tx,
            oldest: rx.clone(),
            dropped: dropped.clone(),
        });
        Some(SubscriberQueue {
            id,
            events: rx,
            dropped,
            _alive: alive,
        })
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
    pub fn publish(&self, event: Event) {
        log::info!("event {}", event.line.trim_end());
        let state = self.state();
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
