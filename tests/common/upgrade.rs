//! Helpers for `upgrade` (tests/upgrade.rs, the bench's upgrade
//! section): a client that pings every 10 ms across hand-overs, a watch on
//! the socket file, and the launcher's own hand-over figures.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::Launcher;

/// What the pinging client saw.
#[derive(Debug, Default)]
pub struct PingTally {
    pub answered: u64,
    /// Connections closed under the client (the exec), each followed by a
    /// reconnect.
    pub closed: u64,
    /// `connect` or the greeting failed: must never happen.
    pub failed_connects: Vec<String>,
    /// Replies that were not `{"return":{},"id":N}` for the ping sent.
    pub wrong: Vec<String>,
    /// The longest time from a closed connection to the next answered ping.
    pub longest_gap: Duration,
}

/// A client that pings every 10 ms, reconnecting when its connection is
/// closed, until stopped.
pub struct Pinger {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<PingTally>,
}

fn connect(socket: &Path) -> Result<BufReader<UnixStream>, String> {
    let stream = UnixStream::connect(socket).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream);
    let mut hello = String::new();
    match reader.read_line(&mut hello) {
        Ok(n) if n > 0 && hello.contains("\"hello\"") => Ok(reader),
        Ok(_) => Err(format!("no greeting: {hello:?}")),
        Err(e) => Err(format!("greeting: {e}")),
    }
}

impl Pinger {
    pub fn start(socket: PathBuf) -> Pinger {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut tally = PingTally::default();
            let mut id = 0u64;
            let mut closed_at: Option<Instant> = None;
            'connections: while !stopping.load(Ordering::Relaxed) {
                let mut reader = match connect(&socket) {
                    Ok(r) => r,
                    Err(e) => {
                        tally.failed_connects.push(e);
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                };
                while !stopping.load(Ordering::Relaxed) {
                    id += 1;
                    let request = format!("{{\"execute\":\"ping\",\"id\":{id}}}\n");
                    if reader.get_mut().write_all(request.as_bytes()).is_err() {
                        tally.closed += 1;
                        closed_at.get_or_insert_with(Instant::now);
                        continue 'connections;
                    }
                    let mut line = String::new();
                    match reader.read_line(&mut line) {
                        Ok(n) if n > 0 => {
                            let reply: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
                            if reply == json!({"return": {}, "id": id}) {
                                tally.answered += 1;
                                if let Some(at) = closed_at.take() {
                                    tally.longest_gap = tally.longest_gap.max(at.elapsed());
                                }
                            } else {
                                tally.wrong.push(line);
                            }
                        }
                        // EOF or a reset: the connection was closed.
                        _ => {
                            tally.closed += 1;
                            closed_at.get_or_insert_with(Instant::now);
                            continue 'connections;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            tally
        });
        Pinger { stop, handle }
    }

    pub fn finish(self) -> PingTally {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("pinger panicked")
    }
}

/// Checks every millisecond that the socket file is there; counts the
/// times it was not.
pub struct SocketWatch {
    stop: Arc<AtomicBool>,
    missing: Arc<AtomicU64>,
    handle: JoinHandle<()>,
}

impl SocketWatch {
    pub fn start(socket: PathBuf) -> SocketWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let missing = Arc::new(AtomicU64::new(0));
        let (stopping, counting) = (stop.clone(), missing.clone());
        let handle = std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                if std::fs::symlink_metadata(&socket).is_err() {
                    counting.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        SocketWatch {
            stop,
            missing,
            handle,
        }
    }

    pub fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.handle.join();
        self.missing.load(Ordering::Relaxed)
    }
}

/// How many times the launcher has resumed from a hand-over.
pub fn resumed(launcher: &Launcher) -> usize {
    launcher.log_text().matches("upgrade: resumed from").count()
}

/// Waits until the launcher has resumed `count` times.
pub fn wait_resumed(launcher: &mut Launcher, count: usize, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while resumed(launcher) < count {
        if let Ok(Some(status)) = launcher.child.try_wait() {
            panic!("the launcher exited ({status}) during the hand-over");
        }
        assert!(
            Instant::now() < deadline,
            "hand-over {count} did not finish; log:\n{}",
            launcher.log_text()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The hand-over times the launcher logged (exec -> the new launcher
/// ready), in milliseconds.
pub fn hand_over_ms(launcher: &Launcher) -> Vec<f64> {
    launcher
        .log_text()
        .lines()
        .filter_map(|l| l.split("hand-over took ").nth(1))
        .filter_map(|rest| rest.trim_end_matches(" ms").trim().parse().ok())
        .collect()
}
