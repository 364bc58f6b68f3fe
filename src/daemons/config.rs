//! Configuration files for the launcher's own libvirt daemons.

use super::error::DaemonError;
use std::fs;
use std::path::{Path, PathBuf};

/// The libvirt daemon that runs QEMU domains: the modular `virtqemud`
/// where installed (as KubeVirt uses), else the monolithic `libvirtd`
/// (Debian 12 ships only that).
pub struct Daemon {
    pub name: &'static str,
    pub binary: PathBuf,
    /// Its read-write socket, inside /run/libvirt.
    pub socket: &'static str,
}

impl Daemon {
    pub fn find() -> Result<Daemon, DaemonError> {
        for (name, socket) in [
            ("virtqemud", "virtqemud-sock"),
            ("libvirtd", "libvirt-sock"),
        ] {
            if let Ok(binary) = super::find_binary(name) {
                return Ok(Daemon {
                    name,
                    binary,
                    socket,
                });
            }
        }
        Err(DaemonError::refused(
            "neither virtqemud nor libvirtd is installed (Debian: apt install libvirt-daemon libvirt-daemon-driver-qemu)",
        ))
    }
}

pub fn new_uuid() -> Result<String, DaemonError> {
    fs::read_to_string("/proc/sys/kernel/random/uuid")
        .map(|s| s.trim().to_string())
        .map_err(|e| DaemonError::os("cannot generate a host UUID", e))
}

fn quote(value: &str) -> String {
    format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Writes the daemon, QEMU driver and virtlogd configuration into `etc`
/// (which the daemons see as /etc/libvirt).
pub fn write_all(
    etc: &Path,
    daemon: &Daemon,
    host_uuid: &str,
    log_filters: Option<&str>,
    mode: super::DaemonMode,
) -> Result<(), DaemonError> {
    let write = |name: &str, body: String| {
        let path = etc.join(name);
        fs::write(&path, body)
            .map_err(|e| DaemonError::os(format!("cannot write {}", path.display()), e))
    };
    // With filters, the output takes every level so that the filters
    // decide what is logged (a "3:stderr" output would drop the debug and
    // info messages they ask for); what no filter names stays at warnings.
    let output_level = if log_filters.is_some() { 1 } else { 3 };
    let mut daemon_conf = format!(
        "# Written by virt-launcher for its own daemon; not used by anything else.\n\
         unix_sock_rw_perms = \"0700\"\n\
         auth_unix_rw = \"none\"\n\
         auth_unix_ro = \"none\"\n\
         log_outputs = \"{output_level}:stderr\"\n\
         log_level = 3\n\
         # The launcher is the only client and probes the daemon itself\n\
         # (every 30 s of silence); the daemon probes it only after a minute.\n\
         keepalive_interval = 60\n",
    );
    // A daemon per launcher, each with its own identity: two launchers on
    // one host must not look like the same host to a migration.
    daemon_conf.push_str(&format!("host_uuid = {}\n", quote(host_uuid)));
    if let Some(filters) = log_filters {
        daemon_conf.push_str(&format!("log_filters = {}\n", quote(filters)));
    }
    write(&format!("{}.conf", daemon.name), daemon_conf)?;
    let qemu_conf = match mode {
        super::DaemonMode::System => {
            "# Written by virt-launcher. QEMU runs as root without security labels,\n\
             # as inside a KubeVirt launcher pod's own mount namespace.\n\
             user = \"root\"\n\
             group = \"root\"\n\
             security_driver = \"none\"\n"
        }
        // Session mode: QEMU runs as the launcher's user, as the daemon
        // does; there is no other user to switch to.
        super::DaemonMode::Session => {
            "# Written by virt-launcher. Session mode: QEMU runs as the launcher's\n\
             # own unprivileged user, without security labels.\n\
             security_driver = \"none\"\n"
        }
    };
    write("qemu.conf", qemu_conf.into())?;
    write(
        "virtlogd.conf",
        "# Written by virt-launcher.\nlog_outputs = \"3:stderr\"\n".into(),
    )?;
    Ok(())
}

/// KubeVirt mode: the daemon's configuration as KubeVirt's launcher makes
/// it, a copy of the image's `/etc/libvirt/<daemon>.conf` in `runtime_dir`
/// with the log filters appended; returns its path.
pub fn write_pod_daemon_conf(
    runtime_dir: &Path,
    daemon: &Daemon,
    log_filters: Option<&str>,
) -> Result<PathBuf, DaemonError> {
    let source = Path::new("/etc/libvirt").join(format!("{}.conf", daemon.name));
    let mut conf = match fs::read_to_string(&source) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => {
            return Err(DaemonError::os(
                format!("cannot read {}", source.display()),
                e,
            ));
        }
    };
    if let Some(filters) = log_filters {
        if !conf.is_empty() && !conf.ends_with('\n') {
            conf.push('\n');
        }
        conf.push_str(&format!("log_filters = {}\n", quote(filters)));
    }
    let path = runtime_dir.join(format!("{}.conf", daemon.name));
    fs::write(&path, conf)
        .map_err(|e| DaemonError::os(format!("cannot write {}", path.display()), e))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchDir;

    #[test]
    fn config_files_quote_values() {
        let dir = ScratchDir::new("daemon-conf");
        let daemon = Daemon {
            name: "libvirtd",
            binary: PathBuf::from("/usr/sbin/libvirtd"),
            socket: "libvirt-sock",
        };
        write_all(
            &dir,
            &daemon,
            "u-u-i-d",
            Some("1:qemu \"x\""),
            super::super::DaemonMode::System,
        )
        .unwrap();
        let conf = fs::read_to_string(dir.join("libvirtd.conf")).unwrap();
        assert!(conf.contains("host_uuid = \"u-u-i-d\"\n"));
        assert!(conf.contains("log_filters = \"1:qemu \\\"x\\\"\"\n"));
        // The filters' debug messages reach the output.
        assert!(conf.contains("log_outputs = \"1:stderr\"\n"));
        assert!(
            fs::read_to_string(dir.join("qemu.conf"))
                .unwrap()
                .contains("security_driver = \"none\"")
        );
        assert!(dir.join("virtlogd.conf").exists());
        // Session mode: no user to switch QEMU to.
        write_all(&dir, &daemon, "u", None, super::super::DaemonMode::Session).unwrap();
        // Without filters: warnings and errors only.
        let conf = fs::read_to_string(dir.join("libvirtd.conf")).unwrap();
        assert!(conf.contains("log_outputs = \"3:stderr\"\n") && !conf.contains("log_filters"));
        let qemu = fs::read_to_string(dir.join("qemu.conf")).unwrap();
        assert!(!qemu.contains("user =") && qemu.contains("security_driver = \"none\""));
    }
}
