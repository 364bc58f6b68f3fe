//! The launcher's configuration: the command line, resolved. This is where
//! the VMI identity is settled (flags, else the --vmi file) and the
//! standalone VMI is read.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::cli::{Args, UsageError};

/// The backend-storage directory in KubeVirt mode with the pod's own
/// daemons and no `--backend-storage-dir`: the NVRAM store is then
/// `/var/lib/libvirt/qemu/nvram/<name>_VARS.fd`, where KubeVirt's pod
/// mounts the PVC's `nvram` subPath.
pub const KUBEVIRT_POD_BACKEND_STORAGE: &str = "/var/lib/libvirt/qemu";

/// How often the guest-agent poller refreshes each kind of data
/// (`--qemu-agent-*-interval`, `--qemu-fsfreeze-status-interval`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentIntervals {
    pub sys: Duration,
    pub file: Duration,
    pub user: Duration,
    pub version: Duration,
    pub fsfreeze: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dirs {
    pub share: PathBuf,
    pub private: PathBuf,
    pub ephemeral: PathBuf,
    pub container_disks: PathBuf,
    pub hotplug_disks: PathBuf,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The libvirt domain: `<namespace>_<name>`.
    pub domain_name: String,
    pub dirs: Dirs,
    /// The URI to connect to, unless the launcher spawns its own daemon.
    pub connect_uri: String,
    pub qemu_timeout: Duration,
    /// --grace-period-seconds; None: the VMI's terminationGracePeriodSeconds.
    pub grace_period: Option<Duration>,
    pub standalone_vmi: Option<Value>,
    pub allow_emulation: bool,
    pub force_emulation: bool,
    pub spawn_libvirt: bool,
    /// The launcher does not run as root (non-root mode with
    /// --spawn-libvirt).
    pub nonroot: bool,
    pub pod_network: crate::cli::PodNetworkMode,
    pub resolv_conf: std::path::PathBuf,
    pub max_clients: usize,
    pub max_line_bytes: usize,
    /// None: idle connections are never closed.
    pub client_idle_timeout: Option<Duration>,
    pub libvirt_log_filters: Option<String>,
    pub verbosity: u8,
    pub agent_intervals: AgentIntervals,
    /// --service-account-dir.
    pub service_account_dir: PathBuf,
    /// --ovmf-path; None searches the usual directories.
    pub ovmf_path: Option<PathBuf>,
    /// --cpuset-file; None reads the cgroup's.
    pub cpuset_file: Option<PathBuf>,
    /// --vhost-vsock-device.
    pub vhost_vsock_device: PathBuf,
    /// --dra-metadata-dir.
    pub dra_metadata_dir: PathBuf,
    /// --backend-storage-dir.
    pub backend_storage_dir: Option<PathBuf>,
    /// KubeVirt mode and KubeVirt's own flags (`--kubevirt`).
    pub kubevirt: crate::cli::KubevirtArgs,
    /// The hook sidecars collected at start-up (`--hook-sidecars`).
    pub hooks: std::sync::Arc<crate::kubevirt::hooks::HookSidecars>,
    /// KubeVirt mode without --connect or --spawn-libvirt: the launcher
    /// starts its daemons as plain children, as in KubeVirt's pod.
    pub pod_daemons: bool,
}

impl Config {
    /// Whether QEMU runs as this launcher's unprivileged user: its own
    /// daemons in non-root mode, or a session daemon behind --connect.
    pub fn qemu_unprivileged(&self) -> bool {
        self.nonroot && (self.spawn_libvirt || self.connect_uri.contains("/session"))
    }

    /// `namespace/name`, as KubeVirt writes a VMI reference.
    pub fn vmi_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    pub fn resolve(args: Args) -> Result<Config, UsageError> {
        let standalone_vmi = match &args.vmi_file {
            Some(path) => Some(read_vmi_file(path)?),
            None => None,
        };
        let from_vmi = |field: &str| -> Option<String> {
            standalone_vmi
                .as_ref()
                .and_then(|v| v.get("metadata"))
                .and_then(|m| m.get(field))
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let pick = |flag: &Option<String>,
                    field: &str,
                    flag_name: &str|
         -> Result<Option<String>, UsageError> {
            match (flag, from_vmi(field)) {
                (Some(f), Some(v)) if *f != v => Err(UsageError(format!(
                    "--{flag_name} \"{f}\" does not match metadata.{field} \"{v}\" in the --vmi file"
                ))),
                (Some(f), _) => Ok(Some(f.clone())),
                (None, v) => Ok(v),
            }
        };
        let name = pick(&args.name, "name", "name")?.ok_or_else(|| {
            UsageError("--name is required (or a --vmi file with metadata.name)".into())
        })?;
        let namespace = pick(&args.namespace, "namespace", "namespace")?.ok_or_else(|| {
            UsageError("--namespace is required (or a --vmi file with metadata.namespace)".into())
        })?;
        validate_k8s_name("--name", &name)?;
        validate_k8s_name("--namespace", &namespace)?;
        let uid = match pick(&args.uid, "uid", "uid")? {
            Some(uid) => uid,
            None => generate_uid()?,
        };
        if uid.contains('/') || uid == "." || uid == ".." {
            return Err(UsageError(format!(
                "--uid: invalid value \"{uid}\": it names a directory and must not contain '/'"
            )));
        }
        let nonroot = !running_as_root();
        if nonroot && args.spawn_libvirt && args.pod_network == crate::cli::PodNetworkMode::Setup {
            return Err(UsageError(
                "--pod-network=setup: a non-root launcher with --spawn-libvirt cannot create network devices \
                 (it has no CAP_NET_ADMIN, and runs in a user namespace of its own); \
                 create the taps beforehand, owned by this user, and use --pod-network=existing (or auto)"
                    .into(),
            ));
        }
        // KubeVirt mode without --connect or --spawn-libvirt: the daemons
        // start as KubeVirt's pod starts them (as root in system mode, as a
        // non-root pod's user in session mode).
        let pod_daemons = args.kubevirt.mode && !args.spawn_libvirt && args.connect.is_none();
        // KubeVirt's launcher reads its log verbosity from the environment.
        let verbosity = match std::env::var("VIRT_LAUNCHER_LOG_VERBOSITY") {
            Ok(level) => {
                let level = crate::cli::parse_klog_level(level.trim())
                    .map_err(|why| UsageError(format!("VIRT_LAUNCHER_LOG_VERBOSITY: {why}")))?;
                args.verbosity.max(crate::cli::klog_verbosity(level))
            }
            Err(_) => args.verbosity,
        };
        let connect_uri = args.connect.clone().unwrap_or_else(|| {
            if running_as_root() {
                "qemu:///system".to_string()
            } else {
                "qemu:///session".to_string()
            }
        });
        Ok(Config {
            domain_name: format!("{namespace}_{name}"),
            namespace,
            name,
            uid,
            dirs: Dirs {
                share: args.kubevirt_share_dir,
                private: args.private_dir,
                ephemeral: args.ephemeral_disk_dir,
                container_disks: args.container_disk_dir,
                hotplug_disks: args.hotplug_disk_dir,
            },
            connect_uri,
            qemu_timeout: args.qemu_timeout,
            grace_period: args.grace_period_seconds.map(Duration::from_secs),
            standalone_vmi,
            allow_emulation: args.allow_emulation,
            force_emulation: args.force_emulation,
            spawn_libvirt: args.spawn_libvirt,
            nonroot,
            pod_network: args.pod_network,
            resolv_conf: args.resolv_conf,
            max_clients: args.max_clients,
            max_line_bytes: args.max_line_bytes,
            client_idle_timeout: args.client_idle_timeout,
            libvirt_log_filters: args.libvirt_log_filters,
            verbosity,
            agent_intervals: args.agent_intervals,
            service_account_dir: args.service_account_dir,
            ovmf_path: args.ovmf_path,
            cpuset_file: args.cpuset_file,
            vhost_vsock_device: args.vhost_vsock_device,
            dra_metadata_dir: args.dra_metadata_dir,
            // In KubeVirt's pod, virt-controller mounts the backend-storage
            // PVC's `nvram` subPath at libvirt's own NVRAM directory
            // (`PathForNVram`) and its `swtpm` ones at libvirt's swtpm
            // directories, which the pod's daemons use as they are: the
            // PVC's root is, as far as the NVRAM store is concerned,
            // libvirt's qemu directory.
            backend_storage_dir: args
                .backend_storage_dir
                .or_else(|| pod_daemons.then(|| PathBuf::from(KUBEVIRT_POD_BACKEND_STORAGE))),
            kubevirt: args.kubevirt,
            hooks: Default::default(),
            pod_daemons,
        })
    }
}

fn read_vmi_file(path: &PathBuf) -> Result<Value, UsageError> {
    let text = fs::read_to_string(path)
        .map_err(|e| UsageError(format!("--vmi {}: cannot read: {e}", path.display())))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| UsageError(format!("--vmi {}: not valid JSON: {e}", path.display())))?;
    if !value.is_object() {
        return Err(UsageError(format!(
            "--vmi {}: expected a VirtualMachineInstance object",
            path.display()
        )));
    }
    Ok(value)
}

/// Kubernetes object names: lower-case letters, digits, '-' and '.', so
/// that `<namespace>_<name>` splits back unambiguously.
fn validate_k8s_name(flag: &str, value: &str) -> Result<(), UsageError> {
    let ok = !value.is_empty()
        && value.len() <= 253
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !value.starts_with(['-', '.'])
        && !value.ends_with(['-', '.']);
    if ok {
        Ok(())
    } else {
        Err(UsageError(format!(
            "{flag}: invalid value \"{value}\": a Kubernetes name is lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
        )))
    }
}

fn generate_uid() -> Result<String, UsageError> {
    fs::read_to_string("/proc/sys/kernel/random/uuid")
        .map(|s| s.trim().to_string())
        .map_err(|e| {
            UsageError(format!(
                "--uid not given and no UID could be generated: {e}"
            ))
        })
}

pub fn running_as_root() -> bool {
    fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Action, parse};

    fn args(argv: &[&str]) -> Args {
        match parse(argv.iter().copied()) {
            Ok(Action::Run(a)) => *a,
            other => panic!("{other:?}"),
        }
    }

    fn temp_file(tag: &str, body: &str) -> PathBuf {
        let path =
            std::env::temp_dir().join(format!("vl-config-{tag}-{}.json", std::process::id()));
        fs::write(&path, body).unwrap();
        path
    }

    #[test]
    fn kubevirts_pod_keeps_persistent_efi_where_its_backend_storage_is_mounted() {
        let base = ["--name", "vm", "--namespace", "ns", "--uid", "u1"];
        let with = |more: &[&str]| {
            let argv: Vec<&str> = base.iter().chain(more).copied().collect();
            Config::resolve(args(&argv))
        };
        assert_eq!(with(&[]).unwrap().backend_storage_dir, None);
        let given = with(&["--kubevirt", "--backend-storage-dir", "/srv/state"]).unwrap();
        assert_eq!(given.backend_storage_dir, Some(PathBuf::from("/srv/state")));
        // The pod's own daemons need root; as another user the mode is
        // refused (errors_name_the_flag's concern).
        if running_as_root() {
            let pod = with(&["--kubevirt"]).unwrap();
            assert!(pod.pod_daemons);
            assert_eq!(
                pod.backend_storage_dir,
                Some(PathBuf::from("/var/lib/libvirt/qemu"))
            );
        }
        let spawned = with(&["--kubevirt", "--spawn-libvirt"]).unwrap();
        assert_eq!(spawned.backend_storage_dir, None);
    }

    #[test]
    fn identity_from_flags() {
        let c =
            Config::resolve(args(&["--name", "vm", "--namespace", "ns", "--uid", "u1"])).unwrap();
        assert_eq!(c.domain_name, "ns_vm");
        assert_eq!(c.vmi_ref(), "ns/vm");
        assert_eq!(c.uid, "u1");
    }

    #[test]
    fn identity_from_vmi_file_and_mismatch() {
        let path = temp_file(
            "ident",
            r#"{"metadata":{"name":"demo","namespace":"default","uid":"abc"},"spec":{}}"#,
        );
        let p = path.to_str().unwrap();
        let c = Config::resolve(args(&["--vmi", p])).unwrap();
        assert_eq!(
            (c.namespace.as_str(), c.name.as_str(), c.uid.as_str()),
            ("default", "demo", "abc")
        );
        assert!(c.standalone_vmi.is_some());
        let err = Config::resolve(args(&["--vmi", p, "--name", "other"])).unwrap_err();
        assert!(
            err.0
                .contains("--name \"other\" does not match metadata.name \"demo\""),
            "{}",
            err.0
        );
        fs::remove_file(path).unwrap();
    }

    #[test]
    fn errors_name_the_flag() {
        assert!(
            Config::resolve(args(&["--namespace", "ns"]))
                .unwrap_err()
                .0
                .contains("--name is required")
        );
        assert!(
            Config::resolve(args(&["--name", "Bad_Name", "--namespace", "ns"]))
                .unwrap_err()
                .0
                .starts_with("--name: invalid value")
        );
        let err = Config::resolve(args(&["--vmi", "/nonexistent/vmi.json"])).unwrap_err();
        assert!(
            err.0
                .starts_with("--vmi /nonexistent/vmi.json: cannot read"),
            "{}",
            err.0
        );
        let path = temp_file("bad", "{not json");
        let err = Config::resolve(args(&["--vmi", path.to_str().unwrap()])).unwrap_err();
        assert!(err.0.contains("not valid JSON"));
        fs::remove_file(path).unwrap();
        let err = Config::resolve(args(&["--name", "a", "--namespace", "b", "--uid", "x/y"]))
            .unwrap_err();
        assert!(err.0.starts_with("--uid"));
    }

    #[test]
    fn uid_is_generated_when_absent() {
        let c = Config::resolve(args(&["--name", "vm", "--namespace", "ns"])).unwrap();
        assert_eq!(c.uid.len(), 36);
    }
}
