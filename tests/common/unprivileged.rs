//! Unprivileged users for the non-root tests: each test makes its own
//! (useradd, as root) and removes it when done (userdel), and starts
//! launchers and clients as that user with no capabilities.

#![allow(dead_code)]

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::{Launcher, TempTree, launcher_bin};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A system user made for one test, removed on drop.
pub struct TestUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// useradd and userdel lock /etc/passwd; tests running at once retry.
fn run_locked_tool(program: &str, args: &[&str]) -> std::process::Output {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = Command::new(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {program} (setup-host.sh installs it): {e}"));
        // 10: cannot lock /etc/passwd (useradd and userdel both).
        if out.status.code() != Some(10) || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl TestUser {
    /// Creates a fresh unprivileged user (no home, no login shell, its
    /// own group, no supplementary group).
    pub fn create(tag: &str) -> TestUser {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        // At most 32 characters.
        let name = format!("vl{tag}{}x{n}", std::process::id());
        assert!(name.len() <= 32, "user name too long: {name}");
        let out = run_locked_tool(
            "useradd",
            &[
                "--system",
                "--user-group",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                &name,
            ],
        );
        assert!(
            out.status.success(),
            "useradd {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let id = |flag: &str| -> u32 {
            let out = Command::new("id")
                .args([flag, &name])
                .output()
                .expect("run id");
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("id {flag} {name}: {out:?}"))
        };
        let user = TestUser {
            uid: id("-u"),
            gid: id("-g"),
            name,
        };
        assert_ne!(user.uid, 0);
        user
    }

    /// Gives `path` (recursively) to this user.
    pub fn give(&self, path: &Path) {
        let ok = Command::new("chown")
            .arg("-R")
            .arg(format!("{}:{}", self.uid, self.gid))
            .arg(path)
            .status()
            .expect("run chown")
            .success();
        assert!(ok, "chown {}", path.display());
    }

    /// `program` run as this user: its uid and gid, no supplementary
    /// groups, no capabilities (std drops the groups when it sets the
    /// uid; a non-zero uid keeps no capability).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new(program);
        command.uid(self.uid).gid(self.gid);
        command
    }

    /// Fails the test with a clear reason unless this user can read
    /// `path` (e.g. the test guest under target/, whose parent
    /// directories must be searchable by everyone).
    pub fn assert_can_read(&self, path: &Path) {
        let ok = self
            .command("test")
            .arg("-r")
            .arg(path)
            .status()
            .expect("run test")
            .success();
        assert!(
            ok,
            "{} is not readable by an unprivileged user; the non-root tests need the checkout and target/ \
             to be readable by everyone (chmod o+rX on the path)",
            path.display()
        );
    }

    /// Runs `virt-launcher ARGS` as this user; returns status, stdout and
    /// stderr.
    pub fn virt_launcher(&self, args: &[&str]) -> (i32, String, String) {
        let out = self
            .command(launcher_bin())
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run virt-launcher");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// The pids of this user's processes that are alive (not zombies).
    pub fn live_processes(&self) -> Vec<super::processes::Process> {
        super::processes::all_processes()
            .into_iter()
            .filter(|p| !p.has_exited() && process_uid(p.pid) == Some(self.uid))
            .collect()
    }
}

/// Read and write access to a device node for one user alone, as an entry
/// of the node's POSIX access ACL (everyone else keeps what the mode
/// gives), taken back on drop: a test can then run both sides of "the
/// user can open it" on the same host.
pub struct DeviceGrant {
    node: std::ffi::CString,
    mode: u32,
}

/// The access ACL's extended attribute and its entry tags (linux/posix_acl.h,
/// posix_acl_xattr.h).
const ACL_XATTR: &std::ffi::CStr = c"system.posix_acl_access";
const ACL_VERSION: u32 = 2;
const ACL_USER_OBJ: u16 = 0x01;
const ACL_USER: u16 = 0x02;
const ACL_GROUP_OBJ: u16 = 0x04;
const ACL_MASK: u16 = 0x10;
const ACL_OTHER: u16 = 0x20;
const ACL_UNDEFINED_ID: u32 = u32::MAX;

impl TestUser {
    /// Lets this user read and write the device node `node` until the
    /// grant is dropped.
    pub fn grant_device(&self, node: &Path) -> DeviceGrant {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(node)
            .unwrap_or_else(|e| panic!("{}: {e}", node.display()))
            .permissions()
            .mode()
            & 0o7777;
        let bits = |shift: u32| u16::try_from((mode >> shift) & 0o7).unwrap_or(0);
        let mut acl = ACL_VERSION.to_le_bytes().to_vec();
        for (tag, perm, id) in [
            (ACL_USER_OBJ, bits(6), ACL_UNDEFINED_ID),
            (ACL_USER, 0o6, self.uid),
            (ACL_GROUP_OBJ, bits(3), ACL_UNDEFINED_ID),
            (ACL_MASK, 0o6 | bits(3), ACL_UNDEFINED_ID),
            (ACL_OTHER, bits(0), ACL_UNDEFINED_ID),
        ] {
            acl.extend_from_slice(&tag.to_le_bytes());
            acl.extend_from_slice(&perm.to_le_bytes());
            acl.extend_from_slice(&id.to_le_bytes());
        }
        let path = std::ffi::CString::new(node.as_os_str().as_bytes()).expect("a path without NUL");
        // SAFETY: both strings are NUL-terminated and live through the
        // call; `acl` is `acl.len()` readable bytes.
        let set = unsafe {
            libc::setxattr(
                path.as_ptr(),
                ACL_XATTR.as_ptr(),
                acl.as_ptr().cast(),
                acl.len(),
                0,
            )
        };
        assert_eq!(
            set,
            0,
            "setting an ACL entry on {} for uid {}: {}",
            node.display(),
            self.uid,
            std::io::Error::last_os_error()
        );
        DeviceGrant { node: path, mode }
    }
}

impl Drop for DeviceGrant {
    fn drop(&mut self) {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::PermissionsExt;
        // SAFETY: both strings are NUL-terminated and live through the call.
        let removed = unsafe { libc::removexattr(self.node.as_ptr(), ACL_XATTR.as_ptr()) };
        // The ACL's mask became the mode's group bits: put the mode back.
        let path = Path::new(std::ffi::OsStr::from_bytes(self.node.as_bytes()));
        let restored = std::fs::set_permissions(path, std::fs::Permissions::from_mode(self.mode));
        if (removed != 0 || restored.is_err()) && !std::thread::panicking() {
            panic!(
                "could not take back the ACL entry on {} (mode {:o}): {} {restored:?}",
                path.display(),
                self.mode,
                std::io::Error::last_os_error()
            );
        }
    }
}

/// The real uid of process `pid`.
pub fn process_uid(pid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

impl Drop for TestUser {
    fn drop(&mut self) {
        // Nothing of a test may outlive it; a process left over would also
        // keep userdel from removing the user.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.live_processes().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let left = self.live_processes();
        for p in &left {
            let _ = Command::new("kill")
                .args(["-KILL", &p.pid.to_string()])
                .status();
        }
        let out = run_locked_tool("userdel", &[&self.name]);
        if !out.status.success() {
            let forced = run_locked_tool("userdel", &["--force", &self.name]);
            if !forced.status.success() && !std::thread::panicking() {
                panic!(
                    "userdel {}: {}",
                    self.name,
                    String::from_utf8_lossy(&forced.stderr)
                );
            }
        }
        if !left.is_empty() && !std::thread::panicking() {
            panic!(
                "processes of test user {} outlived the test: {:?}",
                self.name,
                left.iter().map(|p| (&p.pid, &p.comm)).collect::<Vec<_>>()
            );
        }
    }
}

impl Launcher {
    /// Starts a launcher as `user` with exactly `args` plus the directory
    /// flags; `tree` is given to the user first.
    pub fn start_as(user: &TestUser, tree: TempTree, args: &[String]) -> Launcher {
        user.give(&tree.root);
        let rust_log = std::env::var("VL_TEST_LOG").unwrap_or_else(|_| "debug".into());
        Launcher::start_with(tree, &[], args, Some(&rust_log), Some((user.uid, user.gid)))
    }
}
