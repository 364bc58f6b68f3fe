//! The threads jobs run on. A worker that finished its job waits for the
//! next one, for up to `idle_exit`, instead of ending: starting a thread is
//! dear (under musl, which maps, protects and unmaps every stack anew, a
//! large share of a fresh `query-domain` on the test driver:
//! docs/figures.md), and every fresh query, state read and statistics
//! refresh is a job. Workers are started only when none is idle, so a slow
//! job (a migration, a sync that waits for libvirt) never holds up another.
//!
//! `idle` counts the idle workers nobody has claimed yet. A job claims one
//! by decrementing it and then sends itself on the shared channel (any
//! idle worker may take it); a worker whose wait runs out decrements it
//! for itself and ends, unless the count is zero: then a job has claimed
//! it and is on its way, and the worker takes it.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, unbounded};

use crate::threads::{self, FatalSender};

/// How long a worker waits for another job before it ends.
pub const IDLE_EXIT: Duration = Duration::from_secs(60);

/// Work for a worker, with the label its log lines carry (`job-sync`).
struct Task {
    label: String,
    work: Box<dyn FnOnce() + Send>,
}

impl Task {
    fn run(self) {
        crate::logging::set_thread_label(Some(self.label));
        (self.work)();
        crate::logging::set_thread_label(None);
    }
}

pub struct WorkerPool {
    tasks_tx: Sender<Task>,
    tasks_rx: Receiver<Task>,
    idle: Arc<AtomicUsize>,
    fatal: FatalSender,
    idle_exit: Duration,
}

impl WorkerPool {
    pub fn new(fatal: FatalSender, idle_exit: Duration) -> WorkerPool {
        let (tasks_tx, tasks_rx) = unbounded();
        WorkerPool {
            tasks_tx,
            tasks_rx,
            idle: Arc::new(AtomicUsize::new(0)),
            fatal,
            idle_exit,
        }
    }

    /// Runs `work` on an idle worker, or on a new one when none is idle.
    pub fn run(&self, label: String, work: impl FnOnce() + Send + 'static) -> io::Result<()> {
        let task = Task {
            label,
            work: Box::new(work),
        };
        if claim(&self.idle) {
            // The claimed worker holds the receiving side until it has
            // taken a task, so the send finds a receiver.
            return self
                .tasks_tx
                .send(task)
                .map_err(|_| io::Error::other("the job workers' channel is closed"));
        }
        let tasks = self.tasks_rx.clone();
        let idle = self.idle.clone();
        let idle_exit = self.idle_exit;
        threads::spawn_named("job-worker", &self.fatal, move || {
            work_until_idle(task, &tasks, &idle, idle_exit);
        })
        .map(drop)
    }

    /// Idle workers not yet claimed.
    #[cfg(test)]
    pub fn idle_workers(&self) -> usize {
        self.idle.load(Ordering::SeqCst)
    }
}

/// Takes one unclaimed idle worker, if there is one.
fn claim(idle: &AtomicUsize) -> bool {
    idle.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

fn work_until_idle(first: Task, tasks: &Receiver<Task>, idle: &AtomicUsize, idle_exit: Duration) {
    let mut task = first;
    loop {
        task.run();
        idle.fetch_add(1, Ordering::SeqCst);
        task = match tasks.recv_timeout(idle_exit) {
            Ok(next) => next,
            // The pool is gone (the manager ended).
            Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {
                if claim(idle) {
                    return;
                }
                // A job claimed this worker as the wait ran out: its task
                // is on the channel (or about to be).
                match tasks.recv() {
                    Ok(next) => next,
                    Err(_) => return,
                }
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::bounded;
    use std::thread::ThreadId;

    fn pool(idle_exit: Duration) -> WorkerPool {
        let (fatal, _) = unbounded();
        WorkerPool::new(fatal, idle_exit)
    }

    fn run_and_report(pool: &WorkerPool) -> ThreadId {
        let (tx, rx) = bounded(1);
        pool.run("job-test".into(), move || {
            let _ = tx.send(std::thread::current().id());
        })
        .unwrap();
        rx.recv_timeout(Duration::from_secs(10)).unwrap()
    }

    fn wait_idle(pool: &WorkerPool, n: usize) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while pool.idle_workers() != n {
            assert!(std::time::Instant::now() < deadline, "never {n} idle");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_job_after_another_runs_on_the_same_thread() {
        let pool = pool(IDLE_EXIT);
        let first = run_and_report(&pool);
        wait_idle(&pool, 1);
        let second = run_and_report(&pool);
        assert_eq!(first, second);
        wait_idle(&pool, 1);
    }

    #[test]
    fn a_busy_worker_does_not_hold_up_the_next_job() {
        let pool = pool(IDLE_EXIT);
        let (release_tx, release_rx) = bounded::<()>(1);
        let (done_tx, done_rx) = bounded(2);
        let slow_done = done_tx.clone();
        pool.run("job-slow".into(), move || {
            let _ = release_rx.recv();
            let _ = slow_done.send("slow");
        })
        .unwrap();
        pool.run("job-fast".into(), move || {
            let _ = done_tx.send("fast");
        })
        .unwrap();
        assert_eq!(done_rx.recv_timeout(Duration::from_secs(10)), Ok("fast"));
        release_tx.send(()).unwrap();
        assert_eq!(done_rx.recv_timeout(Duration::from_secs(10)), Ok("slow"));
        wait_idle(&pool, 2);
    }

    #[test]
    fn an_idle_worker_ends_and_a_new_one_takes_the_next_job() {
        let pool = pool(Duration::from_millis(20));
        let first = run_and_report(&pool);
        // Idle, then gone after its wait ran out.
        wait_idle(&pool, 0);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(pool.idle_workers(), 0);
        let second = run_and_report(&pool);
        assert_ne!(first, second);
    }

    #[test]
    fn many_jobs_at_once_all_run_whatever_the_timing() {
        // A short idle wait makes claims race with workers ending.
        let pool = pool(Duration::from_millis(1));
        let (tx, rx) = unbounded();
        for round in 0..200 {
            let tx = tx.clone();
            pool.run(format!("job-{round}"), move || {
                let _ = tx.send(round);
            })
            .unwrap();
            if round % 7 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let mut seen: Vec<i32> = (0..200)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..200).collect::<Vec<_>>());
    }
}
