//! The operating-system calls the launcher makes itself, where `std` has no
//! safe equivalent: namespaces, mounts, process attributes, signals, child
//! reaping and waiting on file descriptors here, and pod networking's
//! sockets, taps and netlink in [`net`]. Each function wraps one system
//! call behind a safe signature, and every `unsafe` block says why it is
//! sound. Outside this module only `hypervisor::ffi` (libvirt) makes raw
//! calls; other modules use only `libc`'s constants.
//!
//! Functions documented as *async-signal-safe* make their system call and
//! nothing else (no allocation, no lock), so they may also run in a child
//! between fork and exec; [`before_exec`] is the only way this module lets
//! code run there.

pub mod net;

use std::ffi::CStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

/// The result of a system call that returns -1 and sets errno on failure.
fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A process id as the kernel takes it. Refuses 0 and values above
/// `i32::MAX`, which kill(2) would read as "my process group" or "every
/// process group": a caller's bad pid must never widen a signal.
fn process_id(pid: u32) -> io::Result<libc::pid_t> {
    match libc::pid_t::try_from(pid) {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{pid} is not a process id"),
        )),
    }
}

/// A kind of Linux namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Namespace {
    Mount,
    Pid,
    Network,
    User,
}

impl Namespace {
    fn clone_flag(self) -> libc::c_int {
        match self {
            Namespace::Mount => libc::CLONE_NEWNS,
            Namespace::Pid => libc::CLONE_NEWPID,
            Namespace::Network => libc::CLONE_NEWNET,
            Namespace::User => libc::CLONE_NEWUSER,
        }
    }

    /// Its name under /proc/PID/ns/.
    pub fn proc_name(self) -> &'static str {
        match self {
            Namespace::Mount => "mnt",
            Namespace::Pid => "pid",
            Namespace::Network => "net",
            Namespace::User => "user",
        }
    }

    /// Opens process `pid`'s namespace of this kind. The open file keeps
    /// the namespace (and its identity) alive, and can be given to
    /// [`setns`].
    pub fn open_of(self, pid: u32) -> io::Result<File> {
        File::open(format!("/proc/{pid}/ns/{}", self.proc_name()))
    }

    /// Opens the calling thread's own namespace of this kind (for a PID
    /// namespace: the one the thread itself lives in).
    pub fn open_own(self) -> io::Result<File> {
        File::open(format!("/proc/thread-self/ns/{}", self.proc_name()))
    }

    /// The identity the kernel shows for process `pid`'s namespace of this
    /// kind, e.g. `pid:[4026532301]`.
    pub fn identity_of(self, pid: u32) -> io::Result<String> {
        std::fs::read_link(format!("/proc/{pid}/ns/{}", self.proc_name()))
            .map(|p| p.to_string_lossy().into_owned())
    }
}

/// unshare(2): gives the calling thread a new namespace of kind `ns`. For
/// a PID namespace only the thread's future children enter it (the first
/// becomes its PID 1); a mount namespace needs a single-threaded caller.
/// Async-signal-safe.
pub fn unshare(ns: Namespace) -> io::Result<()> {
    // SAFETY: unshare(2) takes only a flags integer and touches no memory
    // of ours.
    check(unsafe { libc::unshare(ns.clone_flag()) }).map(drop)
}

/// The size of a memory page in bytes (4096 if the system will not say).
pub fn page_size() -> u64 {
    // SAFETY: sysconf only reads a system setting.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|&s| s > 0).unwrap_or(4096)
}

/// The calling process's effective user and group ids.
pub fn effective_ids() -> (u32, u32) {
    // SAFETY: geteuid(2) and getegid(2) take no arguments and cannot fail.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// The uid and gid of the user named `name` (a NUL-terminated C string),
/// from the passwd database; `None` when there is no such user.
pub fn user_ids(name: &std::ffi::CStr) -> Option<(u32, u32)> {
    // SAFETY: getpwnam takes a NUL-terminated name and returns a pointer
    // into static storage (or null); the fields are copied at once, and
    // the launcher calls it from one job at a time.
    unsafe {
        let entry = libc::getpwnam(name.as_ptr());
        if entry.is_null() {
            None
        } else {
            Some(((*entry).pw_uid, (*entry).pw_gid))
        }
    }
}

/// The open-file limit (RLIMIT_NOFILE) as (soft, hard); `None` when it
/// cannot be read. Async-signal-safe: it may run in a child before exec.
pub fn file_limit() -> Option<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct on this stack frame only.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    Some((limit.rlim_cur, limit.rlim_max))
}

/// Sets the open-file limit (RLIMIT_NOFILE); false when the kernel
/// refuses (raising the hard limit needs CAP_SYS_RESOURCE).
/// Async-signal-safe: it may run in a child before exec.
pub fn set_file_limit(soft: u64, hard: u64) -> bool {
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads the struct on this stack frame only.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 }
}

/// The hard limit on locked memory (RLIMIT_MEMLOCK) in bytes, which the
/// daemons and QEMU inherit; `None` when unlimited. Only a process with
/// CAP_SYS_RESOURCE (in the initial user namespace) may raise it.
pub fn memlock_hard_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes one rlimit into `limit`, which lives
    // across the call.
    let ret = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) };
    if ret != 0 || limit.rlim_max == libc::RLIM_INFINITY {
        return None;
    }
    Some(limit.rlim_max)
}

/// Whether another open file description holds a lock on QEMU's image
/// locking bytes of `file` (QEMU's raw driver locks bytes 100 and up with
/// open file description locks while an image is open). libvirt reports
/// a backup job completed before QEMU closes the backup's target files.
#[allow(clippy::cast_possible_truncation)] // lock types and SEEK_SET: 0..=2
pub fn image_locked(file: &File) -> io::Result<bool> {
    // SAFETY: flock is plain data; all-zero is a valid value of it.
    let mut probe: libc::flock = unsafe { std::mem::zeroed() };
    probe.l_type = libc::F_WRLCK as libc::c_short;
    probe.l_whence = libc::SEEK_SET as libc::c_short;
    probe.l_start = QEMU_LOCK_BYTES.0;
    probe.l_len = QEMU_LOCK_BYTES.1;
    // SAFETY: the descriptor is open for the call (borrowed from `file`);
    // F_OFD_GETLK reads and writes `probe`, which lives across the call.
    let ret = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut probe) };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(probe.l_type != libc::F_UNLCK as libc::c_short)
}

/// Whether the file system under `path` takes `O_DIRECT` opens, as QEMU
/// and KubeVirt's launcher check it (`checkDirectIOFlag`): an open with the
/// flag that fails with EINVAL while one without it works means no; any
/// other failure is returned. A missing `path` is created for the check
/// and removed again when `create` is set (a block device is never
/// created). Opens only, no read: quick on any local file system.
pub fn supports_direct_io(path: &std::path::Path, create: bool) -> io::Result<bool> {
    use std::os::unix::fs::OpenOptionsExt;
    let created = create && !path.exists();
    // The open with O_DIRECT may create the file before it fails.
    let open = |direct: bool| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(created)
            .create_new(created && direct)
            .create(created)
            .mode(0o600)
            // O_NONBLOCK: a FIFO where an image should be must not hold the job.
            .custom_flags(libc::O_NONBLOCK | if direct { libc::O_DIRECT } else { 0 })
            .open(path)
    };
    let result = match open(true) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => open(false).map(|_| false),
        Err(e) => Err(e),
    };
    if created && result.is_ok() {
        let _ = std::fs::remove_file(path);
    }
    result
}

/// QEMU's lock bytes: 100 + permission for what it uses, 200 + permission
/// for what it does not share (block/file-posix.c), as (start, length).
const QEMU_LOCK_BYTES: (libc::off_t, libc::off_t) = (100, 200);

/// Moves the calling process into a new user namespace in which its user
/// and group ids are the same as outside (`uid uid 1`), with every
/// capability there, over namespaces it then creates, and none over
/// anything outside. The kernel allows this only to a single-threaded
/// process (else EINVAL). Supplementary groups stay as they are but can
/// no longer be changed (setgroups is denied, as the kernel requires for
/// an unprivileged gid_map).
pub fn enter_user_namespace() -> io::Result<()> {
    let (uid, gid) = effective_ids();
    unshare(Namespace::User)?;
    std::fs::write("/proc/self/setgroups", "deny")?;
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))
}

/// Whether this process, with its effective ids, may create entries in
/// directory `dir` (faccessat(2) with W_OK|X_OK and AT_EACCESS).
pub fn may_write_dir(dir: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `path` is a NUL-terminated string that outlives the call;
    // faccessat(2) only reads it.
    let ret = unsafe {
        libc::faccessat(
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::W_OK | libc::X_OK,
            libc::AT_EACCESS,
        )
    };
    ret == 0
}

/// The header and data of capget(2)/capset(2), version 3 (two 32-bit
/// words per set).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Makes capability `cap` (which the caller must have in its permitted
/// set) inheritable and ambient, so that a program the caller executes
/// keeps it although its user id is not 0 (capabilities(7)). Only for a
/// child between fork and exec: it changes the calling thread.
/// Async-signal-safe.
pub fn keep_capability_across_exec(cap: u32) -> io::Result<()> {
    let (word, bit) = ((cap / 32) as usize, 1u32 << (cap % 32));
    if word > 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no such capability",
        ));
    }
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capget(2) reads the header and writes two CapData records,
    // both valid for the call (version 3 uses exactly two).
    let got = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    if got != 0 {
        return Err(io::Error::last_os_error());
    }
    data[word].inheritable |= bit;
    // SAFETY: as above; capset(2) only reads them.
    let set = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    if set != 0 {
        return Err(io::Error::last_os_error());
    }
    let cap = libc::c_ulong::from(cap);
    // SAFETY: PR_CAP_AMBIENT_RAISE takes a capability number by value; the
    // unused arguments are zero as prctl(2) asks.
    check(unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
            cap,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    })
    .map(drop)
}

/// setns(2): moves the calling thread into the namespace open as
/// `namespace` (for a PID namespace: its future children). Joining a
/// mount namespace needs a single-threaded caller. Async-signal-safe.
pub fn setns(namespace: BorrowedFd<'_>, ns: Namespace) -> io::Result<()> {
    // SAFETY: the descriptor is borrowed, so it stays open for the call;
    // setns(2) reads nothing else from us.
    check(unsafe { libc::setns(namespace.as_raw_fd(), ns.clone_flag()) }).map(drop)
}

/// mount(2) without filesystem data.
fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
) -> io::Result<()> {
    let ptr = |s: Option<&CStr>| s.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: every pointer is either null (allowed by mount(2) for these
    // arguments) or a NUL-terminated string that outlives the call; data
    // is null, so the kernel reads no options.
    check(unsafe {
        libc::mount(
            ptr(source),
            target.as_ptr(),
            ptr(fstype),
            flags,
            std::ptr::null(),
        )
    })
    .map(drop)
}

/// Makes every mount under `root` private in the calling thread's mount
/// namespace, so that mounts made afterwards do not propagate to the
/// namespace it was copied from. Async-signal-safe.
pub fn make_mounts_private(root: &CStr) -> io::Result<()> {
    mount(None, root, None, libc::MS_REC | libc::MS_PRIVATE)
}

/// Bind-mounts directory `source` over `target`. Async-signal-safe.
pub fn bind_mount(source: &CStr, target: &CStr) -> io::Result<()> {
    mount(Some(source), target, None, libc::MS_BIND)
}

/// Gives the calling (single-threaded) process a mount namespace of its
/// own in which directory `dir` is read-only: mounts made here do not
/// propagate back, and the rest of the tree stays as it was (the original
/// namespace's later mounts still arrive). Async-signal-safe.
pub fn read_only_view(dir: &CStr) -> io::Result<()> {
    unshare(Namespace::Mount)?;
    mount(None, c"/", None, libc::MS_REC | libc::MS_SLAVE)?;
    mount(Some(dir), dir, None, libc::MS_BIND | libc::MS_REC)?;
    mount(
        None,
        dir,
        None,
        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
    )
}

/// Mounts a proc filesystem of the caller's PID namespace on `target`.
/// Async-signal-safe.
pub fn mount_proc(target: &CStr) -> io::Result<()> {
    mount(
        Some(c"proc"),
        target,
        Some(c"proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
    )
}

/// prctl(PR_SET_PDEATHSIG): the kernel sends `signal` to the calling
/// process when the *thread* that created it ends (for a launcher child
/// spawned from the main thread: when the launcher ends). Survives exec.
/// Async-signal-safe.
pub fn set_parent_death_signal(signal: libc::c_int) -> io::Result<()> {
    let signal = libc::c_ulong::try_from(signal)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "negative signal number"))?;
    // SAFETY: PR_SET_PDEATHSIG takes a signal number by value; the unused
    // arguments are zero as prctl(2) asks.
    check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal, 0, 0, 0) }).map(drop)
}

/// prctl(PR_SET_NAME): the calling thread's name in `ps` and
/// /proc/PID/comm (the kernel keeps the first 15 bytes).
pub fn set_process_name(name: &CStr) -> io::Result<()> {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string that outlives the
    // call (the kernel copies at most 16 bytes of it).
    check(unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0) }).map(drop)
}

/// prctl(PR_SET_CHILD_SUBREAPER): the orphans among this process's
/// descendants (a process whose parent ended, such as QEMU after libvirt's
/// double fork) are handed to this process instead of PID 1.
pub fn set_child_subreaper() -> io::Result<()> {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes a flag by value; the unused
    // arguments are zero as prctl(2) asks.
    check(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }).map(drop)
}

/// waitpid(-1): waits for any child to end and reaps it. Its pid and its
/// status as a shell gives it (the exit code, or 128 + the signal that
/// ended it); `None` when no child is left.
pub fn wait_any_child() -> io::Result<Option<(u32, i32)>> {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid(2) writes only the status integer given.
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        if pid == -1 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ECHILD) => return Ok(None),
                _ => return Err(e),
            }
        }
        let code = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else if libc::WIFSIGNALED(status) {
            128 + libc::WTERMSIG(status)
        } else {
            continue;
        };
        return Ok(Some((pid.unsigned_abs(), code)));
    }
}

/// kill(2): sends `signal` to process `pid`. Refuses pids that kill(2)
/// would read as a process group.
pub fn send_signal(pid: u32, signal: libc::c_int) -> io::Result<()> {
    let pid = process_id(pid)?;
    // SAFETY: kill(2) with a positive pid and a signal number touches no
    // memory of ours.
    check(unsafe { libc::kill(pid, signal) }).map(drop)
}

/// Waits for child `pid` (of any thread of this process) to exit: its
/// status, described as `std::process::ExitStatus` shows one. For a child
/// this process did not fork itself (a launcher that took over from the
/// one it replaced, `upgrade`).
pub fn wait_pid(pid: u32) -> io::Result<String> {
    let pid = process_id(pid)?;
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid(2) writes only the status integer given.
        let ret = unsafe { libc::waitpid(pid, &mut status, 0) };
        if ret == -1 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(if libc::WIFEXITED(status) {
            format!("exit status: {}", libc::WEXITSTATUS(status))
        } else if libc::WIFSIGNALED(status) {
            format!("signal: {}", libc::WTERMSIG(status))
        } else {
            format!("wait status: {status}")
        });
    }
}

/// A process referred to by a pidfd: a signal sent through it reaches that
/// process or nobody, even after its pid has been reused.
pub struct PidFd(OwnedFd);

impl PidFd {
    /// pidfd_open(2). Open it while the process cannot have been reaped
    /// (it is an unreaped child of ours), or the pid may already name
    /// another process.
    pub fn open(pid: u32) -> io::Result<PidFd> {
        let pid = process_id(pid)?;
        // SAFETY: pidfd_open(2) takes a pid and flags by value and returns
        // a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = libc::c_int::try_from(fd)
            .map_err(|_| io::Error::other("pidfd_open returned an impossible descriptor"))?;
        // SAFETY: the kernel just returned this descriptor to us; nothing
        // else owns it.
        Ok(PidFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// pidfd_send_signal(2).
    pub fn send_signal(&self, signal: libc::c_int) -> io::Result<()> {
        // SAFETY: the descriptor is open for the call; a null siginfo asks
        // the kernel to fill in the same values kill(2) would.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// SIGCHLD as a readable descriptor (signalfd(2)), for a single-threaded
/// process that waits on other descriptors too. Creating it blocks SIGCHLD
/// in the calling thread; a child would inherit that mask, so use it only
/// in a process that starts no programs.
pub struct ChildExitSignals(File);

impl ChildExitSignals {
    pub fn new() -> io::Result<ChildExitSignals> {
        // SAFETY: sigset_t is plain data; sigemptyset initialises it before
        // any other use.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid, exclusively borrowed sigset_t for both
        // calls; SIGCHLD is a valid signal number.
        unsafe {
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGCHLD);
        }
        // SAFETY: `set` is initialised; the old mask is not asked for.
        let ret = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if ret != 0 {
            return Err(io::Error::from_raw_os_error(ret));
        }
        // SAFETY: -1 asks for a new descriptor; `set` is initialised and
        // read only during the call.
        let fd =
            check(unsafe { libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) })?;
        // SAFETY: the kernel just returned this descriptor to us; nothing
        // else owns it.
        Ok(ChildExitSignals(unsafe { File::from_raw_fd(fd) }))
    }

    /// Consumes the pending notifications (the children themselves are
    /// collected by [`reap_exited_children`]).
    pub fn clear(&self) {
        let mut buf = [0u8; 8 * std::mem::size_of::<libc::signalfd_siginfo>()];
        while matches!((&self.0).read(&mut buf), Ok(n) if n > 0) {}
    }
}

impl AsFd for ChildExitSignals {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Collects every child that has exited, without blocking; returns how
/// many were collected.
pub fn reap_exited_children() -> usize {
    let mut reaped = 0;
    loop {
        let mut status = 0;
        // SAFETY: waitpid(2) writes only the status integer we own.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid > 0 {
            reaped += 1;
            continue;
        }
        if pid == -1 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        // 0: children left, none exited; -1 (ECHILD): no children.
        return reaped;
    }
}

/// poll(2): waits until one of `fds` is readable, at end of file or in
/// error, or until `timeout` (`None`: no limit) passes. Returns, for each
/// descriptor, whether it is ready; all false on timeout.
pub fn wait_readable(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> io::Result<Vec<bool>> {
    let mut polled: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let timeout_ms = match timeout {
        None => -1,
        Some(t) => libc::c_int::try_from(t.as_millis()).unwrap_or(libc::c_int::MAX),
    };
    let count = libc::nfds_t::try_from(polled.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too many descriptors"))?;
    loop {
        // SAFETY: `polled` is a valid array of `count` pollfd entries that
        // the kernel may write `revents` into during the call; the
        // descriptors are borrowed, so they stay open.
        match check(unsafe { libc::poll(polled.as_mut_ptr(), count, timeout_ms) }) {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(polled
        .iter()
        .map(|p| p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0)
        .collect())
}

/// A set of CPUs, as sched_setaffinity(2) takes it.
#[derive(Clone, Copy)]
pub struct CpuSet(libc::cpu_set_t);

impl CpuSet {
    /// The set holding only `cpu`; `None` when `cpu` is beyond what the
    /// set can hold.
    pub fn single(cpu: usize) -> Option<CpuSet> {
        if cpu >= libc::CPU_SETSIZE as usize {
            return None;
        }
        // SAFETY: cpu_set_t is a plain bit array; all zeros is the empty
        // set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: CPU_SET writes one bit inside the set (checked above).
        unsafe { libc::CPU_SET(cpu, &mut set) };
        Some(CpuSet(set))
    }

    pub fn contains(&self, cpu: usize) -> bool {
        // SAFETY: CPU_ISSET reads one bit of the set, in bounds below.
        cpu < libc::CPU_SETSIZE as usize && unsafe { libc::CPU_ISSET(cpu, &self.0) }
    }
}

impl std::fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| self.contains(c))
            .collect();
        write!(f, "CpuSet({cpus:?})")
    }
}

/// The CPUs thread `tid` (0: the calling thread) may run on.
pub fn cpu_affinity(tid: u32) -> io::Result<CpuSet> {
    let tid = libc::pid_t::try_from(tid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "bad thread id"))?;
    // SAFETY: all zeros is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most the size given into the set.
    check(unsafe {
        libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set)
    })?;
    Ok(CpuSet(set))
}

/// Lets thread `tid` (0: the calling thread) run only on `cpus`.
/// Async-signal-safe.
pub fn set_cpu_affinity(tid: u32, cpus: &CpuSet) -> io::Result<()> {
    let tid = libc::pid_t::try_from(tid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "bad thread id"))?;
    // SAFETY: the kernel reads the set, whose size is given.
    check(unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &cpus.0) })
        .map(drop)
}

/// One step a child takes between fork and exec. The menu is fixed so that
/// every step is async-signal-safe by construction.
pub enum BeforeExec {
    /// Join the namespace open as this file (see [`setns`]).
    JoinNamespace(Arc<File>, Namespace),
    /// Ask for this signal when the spawning thread ends (see
    /// [`set_parent_death_signal`]).
    ParentDeathSignal(libc::c_int),
    /// Keep this capability across the exec (see
    /// [`keep_capability_across_exec`]).
    KeepCapability(u32),
    /// Run only on these CPUs (see [`set_cpu_affinity`]).
    CpuAffinity(CpuSet),
    /// See this directory read-only (see [`read_only_view`]).
    ReadOnlyView(std::ffi::CString),
}

/// Makes `command`'s child take `steps`, in order, just before exec; the
/// spawn fails with the first step's error.
pub fn before_exec(command: &mut Command, steps: Vec<BeforeExec>) {
    let hook = move || -> io::Result<()> {
        for step in &steps {
            match step {
                BeforeExec::JoinNamespace(file, ns) => setns(file.as_fd(), *ns)?,
                BeforeExec::ParentDeathSignal(signal) => set_parent_death_signal(*signal)?,
                BeforeExec::KeepCapability(cap) => keep_capability_across_exec(*cap)?,
                BeforeExec::CpuAffinity(cpus) => set_cpu_affinity(0, cpus)?,
                BeforeExec::ReadOnlyView(dir) => read_only_view(dir)?,
            }
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child, where only
    // async-signal-safe work is sound. It iterates over a vector built
    // before the fork (no allocation) and makes only the async-signal-safe
    // calls above; `io::Error::last_os_error` only reads errno.
    unsafe {
        command.pre_exec(hook);
    }
}

/// Blocks (`block`) or unblocks `signals` in the calling thread. The mask
/// survives `execve` (`upgrade`).
pub fn mask_signals(signals: &[libc::c_int], block: bool) {
    // SAFETY: sigemptyset/sigaddset write only the set given;
    // pthread_sigmask reads it and changes this thread's mask, the old
    // mask not wanted.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &signal in signals {
            libc::sigaddset(&mut set, signal);
        }
        let how = if block {
            libc::SIG_BLOCK
        } else {
            libc::SIG_UNBLOCK
        };
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    }
}

/// Whether descriptor `fd` is a listening socket.
pub fn is_listening_socket(fd: std::os::fd::RawFd) -> bool {
    let mut value: libc::c_int = 0;
    // The size of an int (4) fits any socklen_t.
    let mut len: libc::socklen_t = 4;
    // SAFETY: getsockopt writes at most `len` bytes into `value`; a
    // descriptor that is not open or not a socket fails.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    rc == 0 && value != 0
}

/// Sets or clears descriptor `fd`'s close-on-exec flag; false on failure.
pub fn set_cloexec(fd: std::os::fd::RawFd, on: bool) -> bool {
    // SAFETY: fcntl on a descriptor number; one that is not open fails
    // with EBADF.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags < 0 {
            return false;
        }
        let flags = if on {
            flags | libc::FD_CLOEXEC
        } else {
            flags & !libc::FD_CLOEXEC
        };
        libc::fcntl(fd, libc::F_SETFD, flags) == 0
    }
}

/// Writes one byte to `fd`, ignoring any failure: *async-signal-safe*, for
/// a signal handler waking a reader (a full pipe already holds a wake-up).
pub fn write_byte_signal_safe(fd: std::os::fd::RawFd, byte: u8) {
    // SAFETY: write(2) of one byte from a local; a bad or closed
    // descriptor is an error return, not undefined behaviour.
    unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
}

#[cfg(test)]
mod tests {
    #[test]
    #[allow(clippy::cast_possible_truncation)] // as in image_locked
    fn a_lock_on_qemus_bytes_by_another_description_is_seen_and_gone_once_closed() {
        let path = std::env::temp_dir().join(format!("vl-os-lock-{}", std::process::id()));
        std::fs::write(&path, [0u8; 512]).unwrap();
        let probe = File::open(&path).unwrap();
        assert!(!image_locked(&probe).unwrap(), "nobody holds it yet");
        let holder = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        // A shared lock on one permission byte, as QEMU takes them.
        // SAFETY: flock is plain data; all-zero is a valid value of it.
        let mut lock: libc::flock = unsafe { std::mem::zeroed() };
        lock.l_type = libc::F_RDLCK as libc::c_short;
        lock.l_whence = libc::SEEK_SET as libc::c_short;
        lock.l_start = 201;
        lock.l_len = 1;
        // SAFETY: the holder's descriptor is open for the call; F_OFD_SETLK
        // only reads `lock`, which lives across it.
        let ret = unsafe { libc::fcntl(holder.as_raw_fd(), libc::F_OFD_SETLK, &lock) };
        assert_eq!(ret, 0, "{}", io::Error::last_os_error());
        assert!(image_locked(&probe).unwrap(), "the holder's lock is seen");
        drop(holder);
        assert!(!image_locked(&probe).unwrap(), "closing releases it");
        let _ = std::fs::remove_file(&path);
    }

    use super::*;

    #[test]
    fn pids_that_would_widen_a_signal_are_refused() {
        for pid in [0, u32::MAX, 1 << 31] {
            let err = send_signal(pid, 0).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{pid}");
            assert!(PidFd::open(pid).is_err());
        }
        // Signal 0 checks that the process exists: this one does.
        send_signal(std::process::id(), 0).unwrap();
    }

    #[test]
    fn cpu_affinity_round_trips() {
        let own = cpu_affinity(0).unwrap();
        let cpu = (0..libc::CPU_SETSIZE as usize)
            .find(|&c| own.contains(c))
            .unwrap();
        let one = CpuSet::single(cpu).unwrap();
        assert!(one.contains(cpu) && !one.contains(cpu + 1));
        assert!(CpuSet::single(1 << 20).is_none());
        // On a thread of its own, so no other test is pinned.
        std::thread::spawn(move || {
            set_cpu_affinity(0, &one).unwrap();
            assert_eq!(
                format!("{:?}", cpu_affinity(0).unwrap()),
                format!("CpuSet([{cpu}])")
            );
            set_cpu_affinity(0, &own).unwrap();
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_pidfd_reaches_its_process() {
        // Signal 0 only checks that the process is there.
        let own = PidFd::open(std::process::id()).unwrap();
        own.send_signal(0).unwrap();
    }

    #[test]
    fn wait_readable_sees_data_end_of_file_and_timeouts() {
        let (reader, mut writer) = io::pipe().unwrap();
        let t = std::time::Instant::now();
        let ready = wait_readable(&[reader.as_fd()], Some(Duration::from_millis(20))).unwrap();
        assert_eq!(ready, vec![false]);
        assert!(t.elapsed() >= Duration::from_millis(15));
        io::Write::write_all(&mut writer, b"x").unwrap();
        assert_eq!(wait_readable(&[reader.as_fd()], None).unwrap(), vec![true]);
        drop(writer);
        assert_eq!(wait_readable(&[reader.as_fd()], None).unwrap(), vec![true]);
    }

    #[test]
    fn namespaces_have_proc_names_and_identities() {
        let own = Namespace::Pid.identity_of(std::process::id()).unwrap();
        assert!(own.starts_with("pid:["), "{own}");
        assert!(Namespace::Mount.open_own().is_ok());
        assert_eq!(Namespace::Network.proc_name(), "net");
        assert_eq!(Namespace::User.proc_name(), "user");
    }
}
