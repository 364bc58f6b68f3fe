//! The manager's timers: deadlines it waits for on its inbox (`recv_timeout`), so no
//! thread ever polls.

use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    /// No domain was started within --qemu-timeout.
    QemuTimeout,
    /// Re-send the ACPI power button during a graceful stop.
    RepeatAcpi,
    /// The grace period after a signal ran out (or a forced stop to retry).
    GraceDeadline,
    /// Try to reconnect to libvirt.
    Reconnect,
    /// A job saw the domain stopped; libvirt's Stopped event (the final
    /// event subscribers get) did not follow in time, so exit without it.
    FinalEvent,
    /// The freeze's safety timeout: thaw the guest's filesystems.
    AutoThaw,
    /// Clean-up before exit took too long; exit anyway.
    ExitNow,
    /// Take a new sample of the domain's statistics (while clients ask).
    StatsRefresh,
    /// Read a running memory dump's progress.
    MemoryDumpProgress,
    /// Read a running backup's progress.
    BackupProgress,
}

#[derive(Default)]
pub struct Timers {
    armed: Vec<(Instant, Timer)>,
}

impl Timers {
    /// Arms `timer` to fire at `at`, replacing an earlier arming of it.
    pub fn arm(&mut self, timer: Timer, at: Instant) {
        self.cancel(timer);
        self.armed.push((at, timer));
    }

    /// Arms `timer` to fire after `delay`; a delay too long for an
    /// `Instant` fires as late as one can say ([`crate::limits::later`]).
    pub fn arm_in(&mut self, timer: Timer, delay: Duration) {
        self.arm(timer, crate::limits::deadline_in(delay));
    }

    pub fn cancel(&mut self, timer: Timer) {
        self.armed.retain(|(_, t)| *t != timer);
    }

    /// When `timer` fires, if armed.
    pub fn next_of(&self, timer: Timer) -> Option<Instant> {
        self.armed
            .iter()
            .find(|(_, t)| *t == timer)
            .map(|(at, _)| *at)
    }

    pub fn next(&self) -> Option<Instant> {
        self.armed.iter().map(|(at, _)| *at).min()
    }

    /// Removes and returns the timers due at `now`, earliest first.
    pub fn take_due(&mut self, now: Instant) -> Vec<Timer> {
        // Timers due at the same instant fire in the order they were armed.
        let mut due: Vec<(Instant, usize, Timer)> = Vec::new();
        self.armed.retain(|&(at, t)| {
            if at <= now {
                due.push((at, due.len(), t));
                false
            } else {
                true
            }
        });
        due.sort_unstable_by_key(|&(at, armed, _)| (at, armed));
        due.into_iter().map(|(_, _, t)| t).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arm_replace_cancel_and_take_due() {
        let mut timers = Timers::default();
        let now = Instant::now();
        timers.arm(Timer::GraceDeadline, now + Duration::from_secs(30));
        timers.arm(Timer::RepeatAcpi, now + Duration::from_secs(5));
        timers.arm(Timer::QemuTimeout, now + Duration::from_secs(1));
        timers.arm(Timer::QemuTimeout, now + Duration::from_secs(2));
        assert_eq!(timers.next(), Some(now + Duration::from_secs(2)));
        timers.cancel(Timer::QemuTimeout);
        assert_eq!(timers.next(), Some(now + Duration::from_secs(5)));
        assert!(timers.take_due(now).is_empty());
        assert_eq!(
            timers.take_due(now + Duration::from_secs(40)),
            vec![Timer::RepeatAcpi, Timer::GraceDeadline]
        );
        assert_eq!(timers.next(), None);
    }
}
