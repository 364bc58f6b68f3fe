//! Which socket a libvirt URI reaches, and what name the daemon is asked
//! to open on it: the part of libvirt's remote driver that a client
//! without the library must do itself.
//!
//! | URI | socket | opened as |
//! |---|---|---|
//! | `qemu:///system`, `qemu+unix:///system` | `/run/libvirt/virtqemud-sock`, else `libvirt-sock` | `qemu:///system` |
//! | `qemu:///session` | `$XDG_RUNTIME_DIR/libvirt/virtqemud-sock`, else `libvirt-sock` | `qemu:///session` |
//! | `test+unix:///default` | `/run/libvirt/libvirt-sock` | `test:///default` |
//! | any of them with `?socket=PATH` | `PATH` | the same, without `socket` |
//!
//! `mode=legacy` or `mode=direct` picks libvirtd's or virtqemud's socket
//! as libvirt's client does. `test:///default` without `+unix` is libvirt's
//! in-process driver, which needs the library: refused with a pointer to
//! `test+unix:///default`.

use std::path::{Path, PathBuf};

/// Where to connect and what to open there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub socket: PathBuf,
    /// The URI given to REMOTE_PROC_CONNECT_OPEN.
    pub name: String,
}

/// What socket resolution needs to know about the process.
#[derive(Debug, Clone)]
pub struct Environment {
    pub root: bool,
    pub xdg_runtime_dir: Option<PathBuf>,
    pub home: Option<PathBuf>,
    /// The system daemons' runtime directory (`/run/libvirt`).
    pub system_runtime_dir: PathBuf,
}

impl Environment {
    pub fn of_this_process() -> Environment {
        Environment {
            root: crate::config::running_as_root(),
            xdg_runtime_dir: std::env::var_os("XDG_RUNTIME_DIR")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            home: std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            system_runtime_dir: PathBuf::from("/var/run/libvirt"),
        }
    }

    /// A session daemon's directory, as libvirt computes it.
    fn session_runtime_dir(&self) -> Result<PathBuf, String> {
        if let Some(dir) = &self.xdg_runtime_dir {
            return Ok(dir.join("libvirt"));
        }
        match &self.home {
            Some(home) => Ok(home.join(".cache/libvirt")),
            None => Err(
                "neither XDG_RUNTIME_DIR nor HOME is set, so the session daemon's socket cannot be found; give it with ?socket=PATH".into(),
            ),
        }
    }
}

/// Which daemon's socket to use when both might exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Auto,
    /// libvirtd (or virtproxyd): `libvirt-sock`.
    Legacy,
    /// The driver's own daemon: `virtqemud-sock`.
    Direct,
}

pub fn resolve(uri: &str, env: &Environment) -> Result<Target, String> {
    resolve_with(uri, env, &|p: &Path| p.exists())
}

fn resolve_with(
    uri: &str,
    env: &Environment,
    exists: &dyn Fn(&Path) -> bool,
) -> Result<Target, String> {
    let (scheme, rest) = uri.split_once("://").ok_or_else(|| {
        format!("{uri:?} is not a libvirt URI (driver://path, e.g. qemu:///system)")
    })?;
    let (driver, transport) = match scheme.split_once('+') {
        Some((d, t)) => (d, Some(t)),
        None => (scheme, None),
    };
    let (authority_and_path, query) = match rest.split_once('?') {
        Some((a, q)) => (a, Some(q)),
        None => (rest, None),
    };
    let (host, path) = match authority_and_path.find('/') {
        Some(i) => authority_and_path.split_at(i),
        None => (authority_and_path, ""),
    };
    if !host.is_empty() {
        return Err(format!(
            "{uri}: this build reaches libvirt only on this host, over its unix socket (no host part; use e.g. {driver}:///{})",
            path.trim_start_matches('/')
        ));
    }
    match transport {
        None | Some("unix") => {}
        Some(other) => {
            return Err(format!(
                "{uri}: transport {other:?} is not supported by this build, which speaks libvirt's protocol over unix sockets only ({driver}+unix or {driver}://)"
            ));
        }
    }

    let mut socket = None;
    let mut mode = Mode::Auto;
    let mut kept = Vec::new();
    for pair in query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "socket" => socket = Some(PathBuf::from(percent_decode(value)?)),
            "mode" => {
                mode = match value {
                    "auto" => Mode::Auto,
                    "legacy" => Mode::Legacy,
                    "direct" => Mode::Direct,
                    other => {
                        return Err(format!(
                            "{uri}: mode={other} is not one of auto, legacy, direct"
                        ));
                    }
                }
            }
            _ => kept.push(pair),
        }
    }
    let mut name = format!("{driver}://{path}");
    if !kept.is_empty() {
        name.push('?');
        name.push_str(&kept.join("&"));
    }

    let daemon_dir = match (driver, path) {
        ("qemu", "/system") => env.system_runtime_dir.clone(),
        // A socket given explicitly (a non-root launcher's own daemon)
        // needs no session directory.
        ("qemu", "/session") if socket.is_some() => PathBuf::new(),
        ("qemu", "/session") => env.session_runtime_dir()?,
        ("qemu", other) => {
            return Err(format!(
                "{uri}: the QEMU driver has /system and /session, not {other:?}"
            ));
        }
        ("test", _) if transport.is_none() => {
            return Err(format!(
                "{uri} is libvirt's in-process test driver, which needs the libvirt library; this build (wire backend) talks to daemons only: use test+unix://{path} (the same driver, served by a running libvirtd)"
            ));
        }
        ("test", _) if env.root => env.system_runtime_dir.clone(),
        ("test", _) => env.session_runtime_dir()?,
        (other, _) => {
            return Err(format!(
                "{uri}: driver {other:?} is not supported; virt-launcher runs QEMU domains (qemu:///system, qemu:///session) or libvirt's test driver (test+unix:///default)"
            ));
        }
    };
    let socket = match socket {
        Some(explicit) => explicit,
        None => {
            let legacy = daemon_dir.join("libvirt-sock");
            let direct = daemon_dir.join("virtqemud-sock");
            match (driver, mode) {
                // The test driver has no daemon of its own.
                ("test", _) | (_, Mode::Legacy) => legacy,
                (_, Mode::Direct) => direct,
                (_, Mode::Auto) if exists(&direct) => direct,
                (_, Mode::Auto) => legacy,
            }
        }
    };
    Ok(Target { socket, name })
}

/// Decodes `%XX` escapes in a URI query value.
fn percent_decode(value: &str) -> Result<String, String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = value
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad %-escape in {value:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{value:?} is not UTF-8 once decoded"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(root: bool) -> Environment {
        Environment {
            root,
            xdg_runtime_dir: Some(PathBuf::from("/run/user/1000")),
            home: Some(PathBuf::from("/home/u")),
            system_runtime_dir: PathBuf::from("/var/run/libvirt"),
        }
    }

    fn target(uri: &str, root: bool, virtqemud: bool) -> Result<Target, String> {
        resolve_with(uri, &env(root), &|p: &Path| {
            virtqemud && p.ends_with("virtqemud-sock")
        })
    }

    #[test]
    fn system_prefers_virtqemud_and_falls_back_to_libvirtd() {
        let t = target("qemu:///system", true, false).unwrap();
        assert_eq!(t.socket, Path::new("/var/run/libvirt/libvirt-sock"));
        assert_eq!(t.name, "qemu:///system");
        let t = target("qemu+unix:///system", true, true).unwrap();
        assert_eq!(t.socket, Path::new("/var/run/libvirt/virtqemud-sock"));
        assert_eq!(t.name, "qemu:///system");
        let t = target("qemu:///system?mode=legacy", true, true).unwrap();
        assert_eq!(t.socket, Path::new("/var/run/libvirt/libvirt-sock"));
        let t = target("qemu:///system?mode=direct", true, false).unwrap();
        assert_eq!(t.socket, Path::new("/var/run/libvirt/virtqemud-sock"));
    }

    #[test]
    fn session_lives_under_the_users_runtime_dir() {
        let t = target("qemu:///session", false, false).unwrap();
        assert_eq!(t.socket, Path::new("/run/user/1000/libvirt/libvirt-sock"));
        assert_eq!(t.name, "qemu:///session");
        let mut e = env(false);
        e.xdg_runtime_dir = None;
        let t = resolve_with("qemu:///session", &e, &|_: &Path| false).unwrap();
        assert_eq!(t.socket, Path::new("/home/u/.cache/libvirt/libvirt-sock"));
        // Neither variable is needed when the socket is given, as a
        // non-root launcher names its own daemon's.
        e.home = None;
        assert!(resolve_with("qemu:///session", &e, &|_: &Path| false).is_err());
        let t = resolve_with(
            "qemu+unix:///session?socket=/p/run/libvirt-sock",
            &e,
            &|_: &Path| false,
        )
        .unwrap();
        assert_eq!(t.socket, Path::new("/p/run/libvirt-sock"));
        assert_eq!(t.name, "qemu:///session");
    }

    #[test]
    fn a_socket_parameter_wins_and_is_not_sent_to_the_daemon() {
        let t = target(
            "qemu+unix:///system?socket=/tmp/vl%20x/private/libvirt/run/libvirt-sock",
            true,
            true,
        )
        .unwrap();
        assert_eq!(
            t.socket,
            Path::new("/tmp/vl x/private/libvirt/run/libvirt-sock")
        );
        assert_eq!(t.name, "qemu:///system");
        let t = target("test+unix:///default?socket=/s&x=1", true, false).unwrap();
        assert_eq!(t.socket, Path::new("/s"));
        assert_eq!(t.name, "test:///default?x=1");
    }

    #[test]
    fn the_test_driver_is_reached_through_libvirtd() {
        let t = target("test+unix:///default", true, true).unwrap();
        assert_eq!(t.socket, Path::new("/var/run/libvirt/libvirt-sock"));
        assert_eq!(t.name, "test:///default");
    }

    #[test]
    fn what_this_build_cannot_reach_is_refused_clearly() {
        let e = target("test:///default", true, false).unwrap_err();
        assert!(e.contains("use test+unix:///default"), "{e}");
        let e = target("qemu+ssh://host/system", true, false).unwrap_err();
        assert!(e.contains("only on this host"), "{e}");
        let e = target("qemu+tcp:///system", true, false).unwrap_err();
        assert!(e.contains("transport \"tcp\""), "{e}");
        let e = target("lxc:///", true, false).unwrap_err();
        assert!(e.contains("driver \"lxc\""), "{e}");
        let e = target("qemu:///embed", true, false).unwrap_err();
        assert!(e.contains("/system and /session"), "{e}");
        let e = target("nonsense", true, false).unwrap_err();
        assert!(e.contains("not a libvirt URI"), "{e}");
        let e = target("qemu:///system?socket=%zz", true, false).unwrap_err();
        assert!(e.contains("bad %-escape"), "{e}");
    }
}
