//! What a launcher leaves in the process table. A launcher's tree is the
//! launcher itself, every process in its daemons' PID namespace (its
//! init, virtlogd, the libvirt daemon, QEMU, helpers), the QEMU of its
//! domain (found by name) and anything whose command line names the
//! launcher's directories.

#![allow(dead_code)]

use std::fs::{self, File};
use std::time::{Duration, Instant};

use super::Launcher;

/// One process from /proc.
#[derive(Debug, Clone)]
pub struct Process {
    pub pid: u32,
    pub ppid: u32,
    pub state: char,
    /// The kernel's task flags (stat field 9).
    pub flags: u64,
    pub start_time: u64,
    pub comm: String,
    pub cmdline: String,
    /// `pid:[inode]`, or empty when unreadable (a zombie).
    pub pid_ns: String,
}

impl Process {
    pub fn read(pid: u32) -> Option<Process> {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // "pid (comm) S ppid ...": comm may hold spaces and parentheses.
        let open = stat.find('(')?;
        let close = stat.rfind(')')?;
        let comm = stat[open + 1..close].to_string();
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let state = fields.first()?.chars().next()?;
        let ppid = fields.get(1)?.parse().ok()?;
        let flags = fields.get(6)?.parse().ok()?;
        // Field 22 of stat, the 20th after the comm.
        let start_time = fields.get(19)?.parse().ok()?;
        let cmdline = fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .unwrap_or_default();
        let pid_ns = fs::read_link(format!("/proc/{pid}/ns/pid"))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        Some(Process {
            pid,
            ppid,
            state,
            flags,
            start_time,
            comm,
            cmdline,
            pid_ns,
        })
    }

    /// Runs a QEMU system emulator: the program, not only an argument,
    /// names one (the daemons' init has the emulators it hides in its
    /// arguments).
    pub fn runs_qemu(&self) -> bool {
        self.cmdline
            .split(' ')
            .next()
            .is_some_and(|program| program.contains("qemu-system"))
    }

    /// Exited, waiting to be reaped: it runs nothing and holds no memory.
    pub fn is_zombie(&self) -> bool {
        self.state == 'Z' || self.state == 'X'
    }

    /// Dead or dying: a zombie, or a task already in exit (PF_EXITING),
    /// which runs no code of its own any more. The init of a PID
    /// namespace stays in exit until every member has been reaped, and
    /// members whose parent was the launcher are reaped by whatever reaps
    /// the launcher's orphans (the host's init or a subreaper).
    pub fn has_exited(&self) -> bool {
        const PF_EXITING: u64 = 0x4;
        self.is_zombie() || self.flags & PF_EXITING != 0
    }
}

/// Every process in /proc.
pub fn all_processes() -> Vec<Process> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(Process::read)
        .collect()
}

/// Every live process descended from `pid` (children, their children...).
pub fn descendants(pid: u32) -> Vec<Process> {
    let all = all_processes();
    let mut found: Vec<Process> = Vec::new();
    let mut parents = vec![pid];
    while let Some(parent) = parents.pop() {
        for child in all.iter().filter(|p| p.ppid == parent && !p.is_zombie()) {
            parents.push(child.pid);
            found.push(child.clone());
        }
    }
    found
}

/// The init of `launcher`'s daemons' PID namespace (its child named
/// vl-pidns-init), once it exists.
pub fn daemons_init(launcher_pid: u32) -> Option<Process> {
    all_processes()
        .into_iter()
        .find(|p| p.ppid == launcher_pid && p.comm == "vl-pidns-init" && !p.is_zombie())
}

/// The QEMU processes of `domain` that run in `launcher`'s daemons'
/// namespace (two launchers in a migration run QEMUs of the same name).
pub fn launcher_qemu_pids(launcher: &Launcher, domain: &str) -> Vec<u32> {
    let init = daemons_init(launcher.pid()).expect("the launcher has no daemons' namespace");
    let needle = format!("guest={domain},");
    all_processes()
        .into_iter()
        .filter(|p| p.pid_ns == init.pid_ns && p.runs_qemu() && p.cmdline.contains(&needle))
        .map(|p| p.pid)
        .collect()
}

/// A launcher's tree, as seen before it is killed.
pub struct ProcessTree {
    launcher_pid: u32,
    /// The daemons' PID namespace, held open so that its identity cannot
    /// be reused by another launcher's namespace while we look for it.
    _pid_ns: File,
    pid_ns: String,
    /// `guest=<domain>,` when the domain's name is this launcher's alone
    /// (in a migration both launchers' QEMUs carry it).
    domain_needle: Option<String>,
    tree_root: String,
    /// (pid, start time) of every member at the snapshot.
    known: Vec<(u32, u64)>,
    /// The QEMU processes of the tree at the snapshot.
    pub qemu: Vec<u32>,
}

impl ProcessTree {
    /// The tree of `launcher`, which runs (or is starting) `domain`: a
    /// name no other running launcher uses, or `None`.
    pub fn of(launcher: &Launcher, domain: Option<&str>) -> ProcessTree {
        let init = daemons_init(launcher.pid()).expect("the launcher has no daemons' namespace");
        let pid_ns = File::open(format!("/proc/{}/ns/pid", init.pid)).expect("open the namespace");
        let mut tree = ProcessTree {
            launcher_pid: launcher.pid(),
            _pid_ns: pid_ns,
            pid_ns: init.pid_ns.clone(),
            domain_needle: domain.map(|d| format!("guest={d},")),
            tree_root: launcher.tree.root.to_string_lossy().into_owned(),
            known: Vec::new(),
            qemu: Vec::new(),
        };
        let launcher_self = Process::read(launcher.pid()).expect("the launcher runs");
        let members: Vec<Process> = std::iter::once(launcher_self)
            .chain(tree.members())
            .collect();
        tree.qemu = members
            .iter()
            .filter(|p| p.runs_qemu())
            .map(|p| p.pid)
            .collect();
        tree.known = members.iter().map(|p| (p.pid, p.start_time)).collect();
        tree
    }

    fn belongs(&self, p: &Process) -> bool {
        p.pid == self.launcher_pid
            || self
                .known
                .iter()
                .any(|&(pid, start)| pid == p.pid && start == p.start_time)
            || p.pid_ns == self.pid_ns
            || self
                .domain_needle
                .as_ref()
                .is_some_and(|n| p.cmdline.contains(n))
            || p.cmdline.contains(&self.tree_root)
    }

    /// The tree's processes that are still alive (not exited).
    pub fn members(&self) -> Vec<Process> {
        self.in_process_table()
            .into_iter()
            .filter(|p| !p.has_exited())
            .collect()
    }

    /// The tree's processes still in the process table, zombies and
    /// exiting ones included.
    pub fn in_process_table(&self) -> Vec<Process> {
        all_processes()
            .into_iter()
            .filter(|p| self.belongs(p))
            .collect()
    }

    /// How many processes the tree had at the snapshot, the launcher
    /// included.
    pub fn size(&self) -> usize {
        self.known.len()
    }

    /// Waits until no process of the tree is alive (polling every 5 ms);
    /// returns the time from `since`. Panics with the survivors after
    /// `timeout`.
    pub fn wait_gone(&self, since: Instant, timeout: Duration) -> Duration {
        self.wait_until_empty(since, timeout, Self::members)
    }

    /// Waits until no process of the tree is even in the process table
    /// (every zombie reaped). How long that takes depends on who reaps the
    /// launcher's orphans.
    pub fn wait_reaped(&self, since: Instant, timeout: Duration) -> Duration {
        self.wait_until_empty(since, timeout, Self::in_process_table)
    }

    fn wait_until_empty(
        &self,
        since: Instant,
        timeout: Duration,
        list: fn(&Self) -> Vec<Process>,
    ) -> Duration {
        loop {
            let left = list(self);
            if left.is_empty() {
                return since.elapsed();
            }
            if since.elapsed() > timeout {
                let list: Vec<String> = left
                    .iter()
                    .map(|p| format!("{} {} ({}) {}", p.pid, p.comm, p.state, p.cmdline))
                    .collect();
                panic!(
                    "{} processes of the launcher's tree left {timeout:?} after it was killed (pid comm (state) command line):\n{}",
                    left.len(),
                    list.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
