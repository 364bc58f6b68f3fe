//! What a test needs beyond Rust, a C linker and libvirt's library, and
//! whether it runs: [`require`] at the top of each such test.
//!
//! `VL_TESTS` says which tests run:
//! - unset: a test runs when what it needs is here, and is skipped
//!   otherwise, with one line per test binary naming what is missing and
//!   how to ask for it;
//! - `fast` (`scripts/test.sh --fast`): the tests that need root, QEMU, the
//!   host's libvirt daemon or the test guest are skipped even where those
//!   are here, so the fast tier is the same on every machine; a test that
//!   needs only a program runs where the program is;
//! - `all` (`scripts/test.sh`, and so `.ci/run`): every test runs, and one
//!   whose prerequisite is missing fails naming it, so that nothing is
//!   skipped in CI.

use std::collections::HashSet;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Something a test needs that a machine with only Rust, a C linker and
/// libvirt's library does not have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Need {
    /// Running as root (the launcher's own libvirt daemons in system mode,
    /// users made for a test, mounts, network namespaces).
    Root,
    /// QEMU and libvirt's daemons, to boot a guest.
    Qemu,
    /// The host's libvirt daemon, running (qemu:///system,
    /// test+unix:///default).
    HostLibvirtd,
    /// The test guest (scripts/build-test-guest.sh, which needs Debian's
    /// packages); asked for, it is built if it is not there.
    TestGuest,
    /// A program on PATH (socat, qemu-img, isoinfo, ...).
    Program(&'static str),
    /// KubeVirt's virt-handler client, `kvhandler` ([`kvhandler_path`]).
    Kvhandler,
    /// KubeVirt's own launcher, `virt-launcher-go`, and its
    /// `run-go-launcher.sh`, beside `kvhandler` ([`go_launcher_script`]).
    GoLauncher,
    /// libvirt's test driver for the launcher under test: in-process in
    /// the default build (libvirt's library), or a daemon's
    /// (`VL_TEST_URI=test+unix:///default`). A build without libvirt's
    /// library (`--no-default-features --features wire`) has no
    /// in-process one.
    TestDriver,
}

/// Which tests `VL_TESTS` asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Asked {
    /// Unset: what can run here.
    Available,
    /// `fast`: nothing that needs root, QEMU, libvirtd or the test guest.
    Fast,
    /// `all`: everything; a missing prerequisite fails.
    All,
}

fn asked() -> Asked {
    match std::env::var("VL_TESTS").as_deref() {
        Err(_) | Ok("") => Asked::Available,
        Ok("fast") => Asked::Fast,
        Ok("all") => Asked::All,
        Ok(other) => panic!("VL_TESTS={other}: expected `all`, `fast` or nothing"),
    }
}

impl Need {
    fn name(self) -> String {
        match self {
            Need::Root => "root".into(),
            Need::Qemu => "QEMU".into(),
            Need::HostLibvirtd => "the host's libvirtd".into(),
            Need::TestGuest => "the test guest".into(),
            Need::Program(program) => program.into(),
            Need::Kvhandler => "kvhandler".into(),
            Need::GoLauncher => "KubeVirt's launcher (virt-launcher-go)".into(),
            Need::TestDriver => "libvirt's test driver".into(),
        }
    }

    /// What the fast tier leaves out wherever it is.
    fn slow(self) -> bool {
        matches!(
            self,
            Need::Root | Need::Qemu | Need::HostLibvirtd | Need::TestGuest
        )
    }

    /// `Err` says what is missing.
    fn check(self, asked: Asked) -> Result<(), String> {
        match self {
            Need::Root => {
                // SAFETY: geteuid has no preconditions and cannot fail.
                let euid = unsafe { libc::geteuid() };
                if euid == 0 {
                    Ok(())
                } else {
                    Err(format!("running as uid {euid}, not root"))
                }
            }
            Need::Qemu => {
                // Where the launcher looks for libvirt's daemons
                // (src/daemons), and the emulator as libvirt finds it.
                let daemon_dirs = ["/usr/sbin", "/usr/bin", "/usr/local/sbin"];
                let mut missing: Vec<&str> = ["libvirtd", "virtlogd"]
                    .into_iter()
                    .filter(|daemon| !daemon_dirs.iter().any(|dir| Path::new(dir).join(daemon).is_file()))
                    .collect();
                if on_path("qemu-system-x86_64").is_none() {
                    missing.push("qemu-system-x86_64");
                }
                if missing.is_empty() {
                    Ok(())
                } else {
                    Err(format!("no {} installed", missing.join(", ")))
                }
            }
            Need::HostLibvirtd => ["/run/libvirt/libvirt-sock", "/var/run/libvirt/libvirt-sock"]
                .into_iter()
                .find(|socket| UnixStream::connect(socket).is_ok())
                .map(|_| ())
                .ok_or_else(|| {
                    "no libvirtd answers on /run/libvirt/libvirt-sock (scripts/setup-host.sh starts it)"
                        .into()
                }),
            // Asked for, guest::images() builds it (and fails if it cannot).
            Need::TestGuest if asked == Asked::All => Ok(()),
            Need::TestGuest => {
                let stamp =
                    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-guest/.stamp");
                if stamp.exists() {
                    Ok(())
                } else {
                    Err("target/test-guest is not built (scripts/build-test-guest.sh)".into())
                }
            }
            Need::Program(program) => match on_path(program) {
                Some(_) => Ok(()),
                None => Err(format!("no {program} on PATH")),
            },
            Need::Kvhandler => {
                let path = kvhandler_path();
                if path.is_file() {
                    Ok(())
                } else {
                    Err(format!(
                        "kvhandler is not at {} (set VL_KVHANDLER)",
                        path.display()
                    ))
                }
            }
            Need::TestDriver => {
                let daemons = std::env::var("VL_TEST_URI").is_ok_and(|uri| !uri.is_empty());
                let wire = std::env::var("VL_LAUNCHER_BACKEND").as_deref() == Ok("wire")
                    || cfg!(feature = "wire")
                    || !cfg!(feature = "virt");
                if daemons || !wire {
                    Ok(())
                } else {
                    Err("the launcher under test is a build without libvirt's library (the wire \
                         backend), which has no in-process test driver: build with libvirt-dev, \
                         or set VL_TEST_URI=test+unix:///default with a host libvirtd"
                        .into())
                }
            }
            Need::GoLauncher => {
                let script = go_launcher_script();
                if script.is_file() && script.with_file_name("virt-launcher-go").is_file() {
                    Ok(())
                } else {
                    Err(format!(
                        "KubeVirt's launcher is not beside {} (virt-launcher-go, run-go-launcher.sh)",
                        script.display()
                    ))
                }
            }
        }
    }
}

/// Whether the test that calls it runs: `true` when it may go on, `false`
/// when it should return at once (skipped, said in one line per test
/// binary). Asked for with `VL_TESTS=all`, a missing need fails the test.
#[must_use]
pub fn require(needs: &[Need]) -> bool {
    let asked = asked();
    let names: Vec<String> = needs.iter().map(|need| need.name()).collect();
    let needs_text = names.join(", ");
    if asked == Asked::Fast && needs.iter().any(|need| need.slow()) {
        skipped(
            "skipping the tests that need root, QEMU, the host's libvirtd or the test guest \
             (VL_TESTS=fast, the fast tier)",
        );
        return false;
    }
    let missing: Vec<String> = needs
        .iter()
        .filter_map(|need| need.check(asked).err())
        .collect();
    if missing.is_empty() {
        return true;
    }
    let missing = missing.join("; ");
    assert!(
        asked != Asked::All,
        "this test needs {needs_text}, and VL_TESTS=all asks for every test: {missing}"
    );
    skipped(&format!(
        "skipping the tests that need {needs_text}: {missing}"
    ));
    false
}

/// Says `what` once per test binary, on the real standard error (a
/// passing test's output is captured and never shown).
fn skipped(what: &str) {
    static SAID: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut said = SAID.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if !said
        .get_or_insert_with(HashSet::new)
        .insert(what.to_string())
    {
        return;
    }
    let suite = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.file_stem()?.to_string_lossy().into_owned()))
        .map(|stem| match stem.rsplit_once('-') {
            Some((name, _hash)) => name.to_string(),
            None => stem,
        })
        .unwrap_or_default();
    let line =
        format!("tests/{suite}.rs: {what}; VL_TESTS=all runs them (scripts/test.sh sets it)\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// `program` as a command finds it on PATH.
pub fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// KubeVirt's `kvhandler` (virt-handler's gRPC client and notify server):
/// `VL_KVHANDLER`, else `../shared/kubevirt/kvhandler` beside the
/// repository.
pub fn kvhandler_path() -> PathBuf {
    std::env::var_os("VL_KVHANDLER")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/kubevirt/kvhandler")
        })
}

/// KubeVirt's `run-go-launcher.sh`, beside `kvhandler`: runs its own
/// launcher (`virt-launcher-go`) as in its pod.
pub fn go_launcher_script() -> PathBuf {
    kvhandler_path().with_file_name("run-go-launcher.sh")
}
