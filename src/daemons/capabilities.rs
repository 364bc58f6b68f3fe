//! libvirt's QEMU capabilities cache, for the launcher's own daemon.
//!
//! A fresh daemon knows nothing about QEMU: before it answers
//! `virConnectGetVersion` or defines a domain it probes every QEMU binary
//! it finds (seconds each) unless its cache holds a valid entry for it.
//! Copying the host daemon's cache (`/var/cache/libvirt/qemu/capabilities`,
//! warmed by scripts/setup-host.sh) saves that, but three things made a
//! copied cache cost a full probe anyway, each seen on the test machines:
//!
//! 1. **Another emulator's stale entry.** libvirt validates the entry of
//!    every emulator it finds (`qemu-system-<arch>` on its `PATH`) when it
//!    builds its capabilities, so a stale `qemu-system-i386` entry (the
//!    host daemon never looked at it again after QEMU's module directory
//!    changed) costs a probe of a binary the launcher never runs. The
//!    daemons see only the emulator the launcher runs
//!    (`qemu-system-x86_64`, as a KubeVirt launcher image holds only its
//!    own QEMU): the others are covered with /dev/null in their mount
//!    namespace (`hidden_emulators`), which libvirt skips as not
//!    executable; in a pod, which has no mount namespace to give, a link
//!    to `false` ahead of each on the daemon's PATH, which libvirt fails
//!    to probe at once and skips (`shadow_other_emulators`).
//! 2. **The core the entry was made on.** libvirt 9.0 records the host's
//!    CPUID in every entry and finds an entry stale when the CPUID it
//!    reads at start differs; leaf 0x1f carries the x2APIC id of the core
//!    that executed it. A daemon starting on another core than the host
//!    daemon did re-probes everything (one start in two on a 2-core
//!    host). So the daemon starts on the core the entry was made on
//!    (`Seeded::start_cpu`) and gets the launcher's CPUs back once it has
//!    answered the launcher's first `virConnectGetVersion` (libvirt checks
//!    the entry when it first builds its capabilities, after it reported
//!    ready; the manager reads the version on a worker right after the
//!    start, see `manager::diagnostics::HypervisorVersion`, and a define
//!    racing it validates the same entry under the same cache lock).
//! 3. **A stale entry of the emulator itself.** What libvirt checks first
//!    (`virQEMUCapsIsValid`): the binary's ctime (`qemuctime`), the module
//!    directory's mtime (`qemumoddirmtime`) and the kernel
//!    (`kernelVersion`); an entry that fails them is not copied and the
//!    start is logged as cold. Checks this module cannot make (libvirt's
//!    own version and ctime, the microcode) are left to libvirt, which
//!    re-probes if they fail.

use super::error::DaemonError;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The host daemon's cache.
const HOST_CACHE: &str = "/var/cache/libvirt/qemu/capabilities";
/// Where a daemon keeps its entries under its `/var/cache/libvirt`: the
/// system daemon's `/var/cache/libvirt/qemu/capabilities`, or in session
/// mode `$XDG_CACHE_HOME/libvirt/qemu/cache/capabilities` with
/// `XDG_CACHE_HOME=/var/cache`.
const SYSTEM_DIR: &str = "qemu/capabilities";
const SESSION_DIR: &str = "qemu/cache/capabilities";
/// The emulator the launcher's domains run (x86_64 guests only, see
/// `vmi::types`).
pub const EMULATOR: &str = "qemu-system-x86_64";
/// Where QEMU's modules live, by distribution (libvirt's QEMU_MODDIR is
/// fixed at its build).
const MODULE_DIRS: [&str; 3] = [
    "/usr/lib/x86_64-linux-gnu/qemu",
    "/usr/lib64/qemu",
    "/usr/lib/qemu",
];

/// What seeding the daemon's cache found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Seeded {
    /// The emulator's entry was copied.
    pub copied: bool,
    /// From which cache directory.
    pub from: Option<PathBuf>,
    /// Why the start will be cold (no entry, or a stale one).
    pub cold: Option<String>,
    /// The CPU the entry was made on, to start the daemon on.
    pub start_cpu: Option<usize>,
}

/// Copies a valid entry for the launcher's emulator into `cache` (the
/// daemon's /var/cache/libvirt): the host daemon's; in session mode first
/// the user's own session cache ([`user_session_cache`]), since the host's
/// entry was probed as root, with KVM, and libvirt finds it stale for a
/// user who may not open /dev/kvm (nor may that user read it: it is 0600).
pub fn seed(cache: &Path, session: bool) -> Seeded {
    let Some(emulator) = find_in_path(EMULATOR) else {
        return Seeded {
            cold: Some(format!("{EMULATOR} is not on PATH")),
            ..Seeded::default()
        };
    };
    let host = Host::read();
    if !session {
        return seed_from(
            Path::new(HOST_CACHE),
            &emulator,
            &cache.join(SYSTEM_DIR),
            &host,
        );
    }
    let target = cache.join(SESSION_DIR);
    let mut why = Vec::new();
    for source in user_session_cache()
        .into_iter()
        .chain(std::iter::once(PathBuf::from(HOST_CACHE)))
    {
        let seeded = seed_from(&source, &emulator, &target, &host);
        match seeded.cold {
            None => return seeded,
            Some(cold) => why.push(cold),
        }
    }
    Seeded {
        cold: Some(why.join("; ")),
        ..Seeded::default()
    }
}

/// The QEMU capabilities cache of this user's own libvirt session daemon
/// (`qemu:///session`): `$XDG_CACHE_HOME`, else `$HOME/.cache`, then
/// `libvirt/qemu/cache/capabilities`, as libvirt finds it.
pub fn user_session_cache() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("libvirt").join(SESSION_DIR))
}

/// After a cold start in session mode: copies the entry the daemon just
/// probed (in its `cache`, the daemon's /var/cache/libvirt) into the
/// user's session cache, where this user's next launcher (or session
/// daemon) finds it. Returns where it went.
pub fn keep_for_user(cache: &Path) -> Result<PathBuf, DaemonError> {
    let dir = user_session_cache()
        .ok_or_else(|| DaemonError::refused("neither XDG_CACHE_HOME nor HOME is set"))?;
    let emulator = find_in_path(EMULATOR)
        .ok_or_else(|| DaemonError::Refused(format!("{EMULATOR} is not on PATH")))?;
    keep_in(&cache.join(SESSION_DIR), &emulator, &dir)
}

fn keep_in(probed: &Path, emulator: &Path, dir: &Path) -> Result<PathBuf, DaemonError> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let (file, xml) = entry_for(probed, emulator).0.ok_or_else(|| {
        DaemonError::Refused(format!(
            "the daemon's cache {} has no entry",
            probed.display()
        ))
    })?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| DaemonError::os(format!("cannot create {}", dir.display()), e))?;
    // Written aside and renamed: a session daemon reading the directory
    // never sees half an entry.
    let temp = dir.join(format!(".{}.virt-launcher", file.to_string_lossy()));
    let written = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)
        .and_then(|mut f| std::io::Write::write_all(&mut f, xml.as_bytes()))
        .and_then(|()| fs::rename(&temp, dir.join(&file)));
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(DaemonError::os(
            format!("cannot write into {}", dir.display()),
            e,
        ));
    }
    Ok(dir.to_path_buf())
}

/// Facts about the host that an entry must match.
#[derive(Debug, Clone, Default)]
pub struct Host {
    /// `uname -r` and `uname -v`, as libvirt joins them.
    pub kernel: String,
    /// (logical CPU, APIC id) pairs from /proc/cpuinfo.
    pub apic_ids: Vec<(usize, u32)>,
}

impl Host {
    pub fn read() -> Host {
        let read = |p: &str| {
            fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        Host {
            kernel: format!(
                "{} {}",
                read("/proc/sys/kernel/osrelease"),
                read("/proc/sys/kernel/version")
            ),
            apic_ids: apic_ids(&fs::read_to_string("/proc/cpuinfo").unwrap_or_default()),
        }
    }
}

/// `seed` from one cache directory into the daemon's `target` directory,
/// with the emulator's path and the host's facts given (for tests).
pub fn seed_from(source: &Path, emulator: &Path, target: &Path, host: &Host) -> Seeded {
    let (found, unreadable) = entry_for(source, emulator);
    let Some((file, xml)) = found else {
        return Seeded {
            cold: Some(format!(
                "the cache {} has no entry for {}{}",
                source.display(),
                emulator.display(),
                if unreadable > 0 {
                    format!(
                        " that this user may read ({unreadable} entries are not readable by uid {})",
                        crate::os::effective_ids().0
                    )
                } else {
                    String::new()
                }
            )),
            ..Seeded::default()
        };
    };
    if let Some(stale) = staleness(&xml, emulator, host) {
        return Seeded {
            cold: Some(format!(
                "the entry for {} in {} is stale ({stale})",
                emulator.display(),
                source.display()
            )),
            ..Seeded::default()
        };
    }
    let target = target.to_path_buf();
    let copied = fs::create_dir_all(&target)
        .and_then(|()| fs::write(target.join(&file), &xml))
        .map_err(|e| log::warn!("daemons: cannot seed the capabilities cache: {e}"))
        .is_ok();
    let start_cpu = probe_apic_id(&xml).and_then(|apic| {
        host.apic_ids
            .iter()
            .find(|(_, id)| *id == apic)
            .map(|(cpu, _)| *cpu)
    });
    Seeded {
        copied,
        from: Some(source.to_path_buf()),
        cold: (!copied).then(|| "the entry could not be copied".to_string()),
        start_cpu,
    }
}

/// The entry (file name and XML) whose `<emulator>` is `emulator`, and how
/// many entries could not be read.
type Entry = (std::ffi::OsString, String);
fn entry_for(cache: &Path, emulator: &Path) -> (Option<Entry>, usize) {
    let wanted = emulator.to_string_lossy();
    let Ok(entries) = fs::read_dir(cache) else {
        return (None, 0);
    };
    let mut unreadable = 0;
    let found = entries.flatten().find_map(|entry| {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "xml") {
            return None;
        }
        let Ok(xml) = fs::read_to_string(&path) else {
            unreadable += 1;
            return None;
        };
        (element(&xml, "emulator")? == wanted).then(|| (entry.file_name(), xml))
    });
    (found, unreadable)
}

/// Why libvirt would find the entry stale, as far as the launcher can
/// tell; `None` if it looks valid.
fn staleness(xml: &str, emulator: &Path, host: &Host) -> Option<String> {
    let number = |name: &str| element(xml, name).and_then(|v| v.trim().parse::<i64>().ok());
    match (number("qemuctime"), fs::metadata(emulator)) {
        (Some(recorded), Ok(meta)) if recorded != meta.ctime() => {
            return Some(format!(
                "{} changed since it was probed",
                emulator.display()
            ));
        }
        (None, _) => return Some("the entry records no qemuctime".into()),
        _ => {}
    }
    if let Some(recorded) = number("qemumoddirmtime")
        && let Some(meta) = MODULE_DIRS.iter().find_map(|d| fs::metadata(d).ok())
        && recorded != meta.mtime()
    {
        return Some("QEMU's module directory changed since it was probed".into());
    }
    if let Some(kernel) = element(xml, "kernelVersion")
        && !host.kernel.trim().is_empty()
        && kernel != host.kernel
    {
        return Some(format!(
            "probed on kernel {kernel:?}, running {:?}",
            host.kernel
        ));
    }
    None
}

/// The APIC id of the core whose CPUID the entry recorded: EDX of leaf
/// 0x1f (else 0xb), subleaf 0. libvirt leaves out all-zero leaves, so a
/// missing leaf means id 0 (on CPUs that have it; elsewhere any core
/// reads the same).
fn probe_apic_id(xml: &str) -> Option<u32> {
    xml.contains("<cpudata").then(|| {
        ["0x0000001f", "0x0000000b"]
            .iter()
            .find_map(|leaf| cpuid_edx(xml, leaf))
            .unwrap_or(0)
    })
}

fn cpuid_edx(xml: &str, leaf: &str) -> Option<u32> {
    xml.lines()
        .map(str::trim)
        .filter(|l| l.starts_with("<cpuid "))
        .find(|l| {
            attribute(l, "eax_in") == Some(leaf) && attribute(l, "ecx_in") == Some("0x00000000")
        })
        .and_then(|l| attribute(l, "edx"))
        .and_then(|v| u32::from_str_radix(v.trim_start_matches("0x"), 16).ok())
}

fn attribute<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let start = tag.find(&format!(" {name}='"))? + name.len() + 3;
    let end = tag[start..].find('\'')? + start;
    Some(&tag[start..end])
}

fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{name}>"))? + start;
    Some(&xml[start..end])
}

/// (logical CPU, APIC id) for each processor in /proc/cpuinfo.
fn apic_ids(cpuinfo: &str) -> Vec<(usize, u32)> {
    let mut out = Vec::new();
    let mut cpu = None;
    for line in cpuinfo.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match key.trim() {
            "processor" => cpu = value.trim().parse().ok(),
            "apicid" => {
                if let (Some(c), Ok(id)) = (cpu, value.trim().parse()) {
                    out.push((c, id));
                }
            }
            _ => {}
        }
    }
    out
}

/// `name` in the directories of PATH, as libvirt finds binaries.
fn find_in_path(name: &str) -> Option<PathBuf> {
    path_dirs()
        .into_iter()
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn path_dirs() -> Vec<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_else(|_| "/bin:/usr/bin".to_string());
    std::env::split_paths(&path).collect()
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
}

/// Every other `qemu-system-*` binary the daemon would find on PATH (by
/// its real path, once each): what to hide from it.
pub fn hidden_emulators() -> Vec<PathBuf> {
    let mut hidden: Vec<PathBuf> = Vec::new();
    for (_, real) in other_emulators(&path_dirs()) {
        if !hidden.contains(&real) {
            hidden.push(real);
        }
    }
    hidden.sort_unstable();
    hidden
}

/// The `qemu-system-*` binaries in `dirs` other than the launcher's
/// emulator: each by the name libvirt looks it up by and its real path.
fn other_emulators(dirs: &[PathBuf]) -> Vec<(String, PathBuf)> {
    let keep = dirs
        .iter()
        .map(|d| d.join(EMULATOR))
        .find(|p| is_executable(p))
        .and_then(|p| fs::canonicalize(p).ok());
    let mut others = Vec::new();
    for dir in dirs {
        let Ok(entries) = fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if !name.starts_with("qemu-system-") || !is_executable(&path) {
                continue;
            }
            let Ok(real) = fs::canonicalize(&path) else {
                continue;
            };
            if Some(&real) != keep.as_ref() {
                others.push((name, real));
            }
        }
    }
    others.sort_unstable();
    others
}

/// In a pod the daemon gets no mount namespace to hide the other
/// emulators in (see `hidden_emulators`), so it is given a PATH that
/// finds each of them first in `dir` as a link to `false`: libvirt's probe
/// of it fails at once and libvirt skips that emulator (it logs the failed
/// probe) instead of probing the real one for seconds. The PATH to give
/// the daemon; `None` when there is nothing to hide.
pub fn shadow_other_emulators(dir: &Path) -> Result<Option<String>, String> {
    shadow_in(dir, path_dirs())
}

/// `false`, on PATH or where coreutils puts it (a launcher may run with
/// an empty PATH).
fn false_program() -> Option<PathBuf> {
    find_in_path("false").or_else(|| {
        ["/usr/bin/false", "/bin/false"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| is_executable(p))
    })
}

/// `shadow_other_emulators` for a PATH of `dirs`.
fn shadow_in(dir: &Path, dirs: Vec<PathBuf>) -> Result<Option<String>, String> {
    let mut names: Vec<String> = other_emulators(&dirs).into_iter().map(|(n, _)| n).collect();
    names.dedup();
    if names.is_empty() {
        return Ok(None);
    }
    let Some(false_bin) = false_program() else {
        return Err("no `false` program to shadow the other QEMU emulators with".into());
    };
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for name in &names {
        let link = dir.join(name);
        std::os::unix::fs::symlink(&false_bin, &link).map_err(|e| {
            format!(
                "cannot link {} to {}: {e}",
                link.display(),
                false_bin.display()
            )
        })?;
    }
    let path = std::env::join_paths(std::iter::once(dir.to_path_buf()).chain(dirs))
        .map_err(|e| format!("cannot make the daemon's PATH: {e}"))?;
    Ok(Some(path.to_string_lossy().into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchDir;
    use std::os::unix::fs::PermissionsExt;

    const CPUINFO: &str = "processor\t: 0\napicid\t\t: 0\ninitial apicid\t: 0\n\nprocessor\t: 1\napicid\t\t: 1\ninitial apicid\t: 1\n";

    fn entry(emulator: &Path, ctime: i64, kernel: &str, edx_1f: Option<u32>) -> String {
        let leaf = edx_1f.map_or(String::new(), |edx| {
            format!(
                "    <cpuid eax_in='0x0000001f' ecx_in='0x00000000' eax='0x00000000' ebx='0x00000000' ecx='0x00000000' edx='0x{edx:08x}'/>\n"
            )
        });
        format!(
            "<qemuCaps>\n  <emulator>{}</emulator>\n  <qemuctime>{ctime}</qemuctime>\n  <selfctime>1</selfctime>\n  <kernelVersion>{kernel}</kernelVersion>\n  <cpudata arch='x86'>\n    <cpuid eax_in='0x00000001' ecx_in='0x00000000' eax='0x000a0671' ebx='0x00020800' ecx='0x81202000' edx='0x0f8bfbff'/>\n{leaf}  </cpudata>\n</qemuCaps>\n",
            emulator.display()
        )
    }

    /// A scratch dir with the cache's `host` directory in it.
    fn cache_dirs() -> ScratchDir {
        let dirs = ScratchDir::new("caps");
        fs::create_dir_all(dirs.join("host")).unwrap();
        dirs
    }

    fn host() -> Host {
        Host {
            kernel: "6.1.0 #1 SMP".into(),
            apic_ids: apic_ids(CPUINFO),
        }
    }

    /// An executable file at `path`.
    fn executable(path: &Path) {
        fs::write(path, "#!/bin/sh\n").unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn the_other_emulators_are_found_first_as_false_on_the_pods_path() {
        let scratch = ScratchDir::new("shadow-emulators");
        let bin = scratch.join("bin");
        fs::create_dir_all(&bin).unwrap();
        executable(&bin.join(EMULATOR));
        executable(&bin.join("qemu-system-i386"));
        executable(&bin.join("qemu-system-aarch64"));
        fs::write(bin.join("qemu-system-arm"), "not executable").unwrap();
        let shadow = scratch.join("hidden");
        let path = shadow_in(&shadow, vec![bin.clone()]).unwrap().unwrap();
        let dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
        assert_eq!(dirs, [shadow.clone(), bin.clone()]);
        // How libvirt finds each: the first executable of that name.
        let found = |name: &str| {
            dirs.iter()
                .map(|d| d.join(name))
                .find(|p| is_executable(p))
                .unwrap()
        };
        assert_eq!(found(EMULATOR), bin.join(EMULATOR));
        let false_bin = fs::canonicalize(false_program().unwrap()).unwrap();
        for other in ["qemu-system-i386", "qemu-system-aarch64"] {
            assert_eq!(fs::canonicalize(found(other)).unwrap(), false_bin);
        }
        assert!(!shadow.join("qemu-system-arm").exists());
        // Nothing to hide: the daemon keeps the launcher's PATH.
        let alone = scratch.join("alone");
        fs::create_dir_all(&alone).unwrap();
        executable(&alone.join(EMULATOR));
        assert_eq!(
            shadow_in(&scratch.join("hidden2"), vec![alone]).unwrap(),
            None
        );
    }

    #[test]
    fn cpuinfo_gives_each_cores_apic_id() {
        assert_eq!(apic_ids(CPUINFO), vec![(0, 0), (1, 1)]);
    }

    #[test]
    fn a_valid_entry_is_copied_with_the_core_it_was_made_on() {
        let dirs = cache_dirs();
        // Any executable file stands for QEMU; its ctime is what counts.
        let emulator = dirs.join("qemu-system-x86_64");
        fs::write(&emulator, "").unwrap();
        let ctime = fs::metadata(&emulator).unwrap().ctime();
        let xml = entry(&emulator, ctime, "6.1.0 #1 SMP", Some(1));
        fs::write(dirs.join("host/abc.xml"), &xml).unwrap();
        fs::write(
            dirs.join("host/other.xml"),
            entry(Path::new("/usr/bin/qemu-system-i386"), 5, "x", None),
        )
        .unwrap();
        let seeded = seed_from(
            &dirs.join("host"),
            &emulator,
            &dirs.join("cache/qemu/capabilities"),
            &host(),
        );
        assert_eq!(
            seeded,
            Seeded {
                copied: true,
                from: Some(dirs.join("host")),
                cold: None,
                start_cpu: Some(1)
            }
        );
        let copied: Vec<_> = fs::read_dir(dirs.join("cache/qemu/capabilities"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(copied, ["abc.xml"], "only the emulator's entry");
        // Made on the core with APIC id 0: libvirt wrote no 0x1f leaf.
        let xml0 = entry(&emulator, ctime, "6.1.0 #1 SMP", None);
        assert_eq!(probe_apic_id(&xml0), Some(0));
    }

    #[test]
    fn a_probed_session_entry_is_kept_for_the_users_next_start() {
        let dirs = cache_dirs();
        let emulator = dirs.join("qemu-system-x86_64");
        fs::write(&emulator, "").unwrap();
        let ctime = fs::metadata(&emulator).unwrap().ctime();
        // What the session daemon wrote after probing (no KVM: no cpudata).
        let probed = dirs.join("daemon/qemu/cache/capabilities");
        fs::create_dir_all(&probed).unwrap();
        let xml = entry(&emulator, ctime, "6.1.0 #1 SMP", None)
            .replace("<cpudata arch='x86'>", "<cpudata-not-here>");
        fs::write(probed.join("abc.xml"), &xml).unwrap();
        let user = dirs.join("home/.cache/libvirt/qemu/cache/capabilities");
        assert_eq!(
            keep_in(&probed, &emulator, &user).map_err(|e| e.to_string()),
            Ok(user.clone())
        );
        let meta = fs::metadata(user.join("abc.xml")).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert_eq!(
            fs::metadata(&user).unwrap().mode() & 0o777,
            0o700,
            "the user's cache is private"
        );
        // The next start copies it into its daemon's session directory.
        let next = dirs.join("next/qemu/cache/capabilities");
        let seeded = seed_from(&user, &emulator, &next, &host());
        assert_eq!(seeded.cold, None);
        assert_eq!(seeded.from, Some(user.clone()));
        assert_eq!(fs::read_to_string(next.join("abc.xml")).unwrap(), xml);
        // Nothing to keep when the daemon has no entry.
        let err = keep_in(&dirs.join("none"), &emulator, &user).unwrap_err();
        assert!(err.to_string().contains("has no entry"), "{err}");
    }

    #[test]
    fn stale_or_missing_entries_make_a_cold_start_and_say_why() {
        let dirs = cache_dirs();
        let emulator = dirs.join("qemu-system-x86_64");
        fs::write(&emulator, "").unwrap();
        let ctime = fs::metadata(&emulator).unwrap().ctime();
        let cache = dirs.join("cache/qemu/capabilities");
        let missing = seed_from(&dirs.join("host"), &emulator, &cache, &host());
        assert!(!missing.copied);
        assert!(missing.cold.unwrap().contains("has no entry"));
        fs::write(
            dirs.join("host/a.xml"),
            entry(&emulator, ctime - 5, "6.1.0 #1 SMP", None),
        )
        .unwrap();
        let changed = seed_from(&dirs.join("host"), &emulator, &cache, &host());
        assert!(
            changed
                .cold
                .unwrap()
                .contains("changed since it was probed")
        );
        fs::write(
            dirs.join("host/a.xml"),
            entry(&emulator, ctime, "5.10.0 #1 SMP", None),
        )
        .unwrap();
        let kernel = seed_from(&dirs.join("host"), &emulator, &cache, &host());
        assert!(
            kernel
                .cold
                .unwrap()
                .contains("probed on kernel \"5.10.0 #1 SMP\"")
        );
        assert!(!cache.join("a.xml").exists());
    }
}
