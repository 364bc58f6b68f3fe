//! The private mount namespace the launcher's libvirt daemons run in.
//!
//! A privileged libvirt daemon uses fixed host paths (/run/libvirt,
//! /var/lib/libvirt, ...). A pod gives each launcher its own copies; on a
//! bare host the same isolation comes from a mount namespace in which the
//! launcher's private directories are bind-mounted over those paths. The
//! first daemon creates the namespace; the launcher keeps a handle on it
//! (an open /proc/PID/ns/mnt), so restarted daemons join the same one.
//!
//! The code here runs in the forked child before exec, where only
//! async-signal-safe calls are allowed: everything is prepared (as C
//! strings) beforehand, and the hooks only make system calls.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

/// One bind mount: `source` (a launcher directory) over `target` (the
/// fixed path the daemon expects).
pub struct BindMount {
    source: CString,
    target: CString,
}

impl BindMount {
    pub fn new(source: &Path, target: &Path) -> io::Result<BindMount> {
        let c = |p: &Path| {
            CString::new(p.as_os_str().as_encoded_bytes())
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
        };
        Ok(BindMount {
            source: c(source)?,
            target: c(target)?,
        })
    }
}

/// How a daemon's process enters the namespace.
pub enum Entry {
    /// Create the namespace and set up the bind mounts.
    Create(Vec<BindMount>),
    /// Join the namespace held open by this file.
    Join(RawFd),
}

/// Makes `command` enter the namespace, start its own process group (so a
/// Ctrl-C at the launcher's terminal does not kill the daemon before the
/// launcher stops it in order) and die with the launcher.
pub fn prepare(command: &mut Command, entry: Entry) {
    command.process_group(0);
    // SAFETY: the hook only calls async-signal-safe system calls on data
    // prepared before the fork; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            match &entry {
                Entry::Create(mounts) => {
                    if libc::unshare(libc::CLONE_NEWNS) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    // Keep the binds below from propagating to the host.
                    let root = c"/";
                    if libc::mount(
                        std::ptr::null(),
                        root.as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    ) != 0
                    {
                        return Err(io::Error::last_os_error());
                    }
                    for m in mounts {
                        if libc::mount(
                            m.source.as_ptr(),
                            m.target.as_ptr(),
                            std::ptr::null(),
                            libc::MS_BIND,
                            std::ptr::null(),
                        ) != 0
                        {
                            return Err(io::Error::last_os_error());
                        }
                    }
                }
                Entry::Join(fd) => {
                    if libc::setns(*fd, libc::CLONE_NEWNS) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
            }
            // The daemon must not outlive a launcher that was killed.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Opens the mount namespace of process `pid`, keeping it alive.
pub fn hold(pid: u32) -> io::Result<File> {
    File::open(format!("/proc/{pid}/ns/mnt"))
}

pub fn raw(file: &File) -> RawFd {
    file.as_raw_fd()
}

/// Sends `signal` to process `pid`.
pub fn send_signal(pid: u32, signal: i32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    // SAFETY: kill(2) with a positive pid we started.
    if unsafe { libc::kill(pid, signal) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
