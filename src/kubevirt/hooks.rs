//! KubeVirt's hook sidecars (`pkg/hooks`): containers beside the launcher
//! that change the domain XML before it is defined (`OnDefineDomain`), the
//! cloud-init data before its ISO is written (`PreCloudInitIso`), and are
//! told when the domain is gone (`Shutdown`, v1alpha3). Each serves gRPC on
//! a unix socket in a subdirectory of the hooks directory (its container's
//! own, in KubeVirt's pod: `/var/run/kubevirt-hooks/<container>/*.sock`).
//!
//! At start-up the launcher waits for `--hook-sidecars` of them, as
//! KubeVirt's does, and asks each for its `Info`: the newest version both
//! speak, the hook points it wants and their priorities. The calls are
//! made by whoever needs them (the sync job on a worker thread, the main
//! thread at exit), never by the domain manager, and each is bounded by
//! `--hook-timeout`, so a sidecar that is gone or hangs costs a clear error
//! and never a hung launcher.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::proto::hooks::*;
use crate::grpc::{CallError, Client};

/// Where KubeVirt's pod mounts the sidecars' sockets (`--hooks-dir`).
pub const DEFAULT_DIR: &str = "/var/run/kubevirt-hooks";
/// The versions this launcher speaks, newest first: a sidecar is called
/// with the newest it offers, as KubeVirt does.
const VERSIONS: [&str; 3] = ["v1alpha3", "v1alpha2", "v1alpha1"];
/// How often the directory is looked at while sidecars are missing
/// (KubeVirt's 300 ms).
const POLL: Duration = Duration::from_millis(300);

/// One sidecar, as its `Info` described it.
#[derive(Debug, Clone)]
pub struct Sidecar {
    pub socket: PathBuf,
    pub name: String,
    pub version: &'static str,
    pub hook_points: Vec<HookPoint>,
}

/// The sidecars collected at start-up (none without `--hook-sidecars`).
#[derive(Debug, Clone, Default)]
pub struct HookSidecars {
    pub sidecars: Vec<Sidecar>,
    /// `--hook-timeout`: the most one call may take.
    pub timeout: Duration,
}

/// Why a hook failed: the sidecar could not be called (or refused), or
/// what it returned is unusable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookError {
    Call(String),
    BadResult(String),
}

/// Waits until `count` sidecars answered `Info` in `dir`'s subdirectories,
/// for at most `wait_for`. `pause` sleeps between looks and says whether
/// to go on (false: the launcher is asked to stop; `Ok(None)`).
pub fn collect(
    dir: &Path,
    count: u32,
    wait_for: Duration,
    call_timeout: Duration,
    mut pause: impl FnMut(Duration) -> bool,
) -> Result<Option<HookSidecars>, String> {
    let deadline = crate::limits::later(Instant::now(), wait_for);
    let mut found: Vec<Sidecar> = Vec::new();
    let wanted = usize::try_from(count).unwrap_or(usize::MAX);
    while found.len() < wanted {
        for socket in sockets(dir)? {
            if found.iter().any(|s| s.socket == socket) {
                continue;
            }
            match info(&socket, call_timeout)? {
                Some(sidecar) => {
                    log::info!(
                        "hooks: sidecar {:?} at {} speaks {} for {}",
                        sidecar.name,
                        socket.display(),
                        sidecar.version,
                        describe_points(&sidecar.hook_points)
                    );
                    found.push(sidecar);
                }
                None => log::debug!("hooks: {} does not answer yet", socket.display()),
            }
        }
        if found.len() >= wanted {
            break;
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{} of the {count} hook sidecars (--hook-sidecars) answered in {}/*/ within {} s (--qemu-timeout){}",
                found.len(),
                dir.display(),
                wait_for.as_secs(),
                if found.is_empty() {
                    String::new()
                } else {
                    let names: Vec<String> = found
                        .iter()
                        .map(|s| format!("{:?} at {}", s.name, s.socket.display()))
                        .collect();
                    format!(": {}", names.join(", "))
                }
            ));
        }
        if !pause(POLL) {
            return Ok(None);
        }
    }
    Ok(Some(HookSidecars {
        sidecars: found,
        timeout: call_timeout,
    }))
}

fn describe_points(points: &[HookPoint]) -> String {
    let points: Vec<String> = points
        .iter()
        .map(|p| format!("{} (priority {})", p.name, p.priority))
        .collect();
    points.join(", ")
}

/// The files in `dir`'s subdirectories, in name order.
fn sockets(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let listed = |dir: &Path| -> Result<Vec<(PathBuf, bool)>, String> {
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| {
            format!(
                "cannot read the hook sidecars' directory {}: {e}",
                dir.display()
            )
        })? {
            let entry = entry.map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            entries.push((entry.path(), is_dir));
        }
        entries.sort();
        Ok(entries)
    };
    let mut sockets = Vec::new();
    for (sub, is_dir) in listed(dir)? {
        if is_dir {
            sockets.extend(
                listed(&sub)?
                    .into_iter()
                    .filter(|(_, is_dir)| !is_dir)
                    .map(|(path, _)| path),
            );
        }
    }
    Ok(sockets)
}

/// Asks the sidecar at `socket` what it is; `None` while nothing listens.
fn info(socket: &Path, timeout: Duration) -> Result<Option<Sidecar>, String> {
    let answer = match Client::new(socket).call(INFO_PATH, &InfoParams::default().encode(), timeout)
    {
        Ok(answer) => answer,
        Err(CallError::Connect { .. }) => return Ok(None),
        Err(e) => return Err(format!("hook sidecar {}: Info: {e}", socket.display())),
    };
    let info = InfoResult::decode(&answer)
        .map_err(|e| format!("hook sidecar {}: Info: {e}", socket.display()))?;
    let version = VERSIONS
        .into_iter()
        .find(|v| info.versions.iter().any(|offered| offered == v))
        .ok_or_else(|| {
            format!(
                "hook sidecar {:?} at {} offers versions {:?}; this launcher speaks v1alpha1, v1alpha2 and v1alpha3",
                info.name,
                socket.display(),
                info.versions
            )
        })?;
    Ok(Some(Sidecar {
        socket: socket.to_path_buf(),
        name: info.name,
        version,
        hook_points: info.hook_points,
    }))
}

impl HookSidecars {
    pub fn is_empty(&self) -> bool {
        self.sidecars.is_empty()
    }

    /// The sidecars subscribed to `point`, highest priority first, equal
    /// priorities in the order they were found. (KubeVirt's info.proto
    /// says priority orders the hooks; its manager at d923fdb815 sorts
    /// only each sidecar's own list of points, so there the order found
    /// is the only order.)
    fn subscribed(&self, point: &str) -> Vec<&Sidecar> {
        let mut subscribed: Vec<(i32, &Sidecar)> = self
            .sidecars
            .iter()
            .filter_map(|s| {
                let p = s.hook_points.iter().find(|p| p.name == point)?;
                Some((p.priority, s))
            })
            .collect();
        subscribed.sort_by_key(|(priority, _)| std::cmp::Reverse(*priority));
        subscribed.into_iter().map(|(_, s)| s).collect()
    }

    fn call(&self, sidecar: &Sidecar, method: &str, request: &[u8]) -> Result<Vec<u8>, HookError> {
        Client::new(&sidecar.socket)
            .call(
                &callback_path(sidecar.version, method),
                request,
                self.timeout,
            )
            .map_err(|e| {
                let why = match e {
                    CallError::TimedOut => {
                        format!("no answer within {:?} (--hook-timeout)", self.timeout)
                    }
                    other => other.to_string(),
                };
                HookError::Call(sidecar.error(method, &why))
            })
    }

    /// Passes the domain XML through every `OnDefineDomain` hook in turn;
    /// `check` says whether what one returned is still a domain this
    /// launcher can define.
    pub fn on_define_domain(
        &self,
        mut xml: String,
        vmi: &[u8],
        check: impl Fn(&str) -> Result<(), String>,
    ) -> Result<String, HookError> {
        for sidecar in self.subscribed(ON_DEFINE_DOMAIN) {
            let request = OnDefineDomainParams {
                domain_xml: xml.into_bytes(),
                vmi: vmi.to_vec(),
            };
            let answer = self.call(sidecar, ON_DEFINE_DOMAIN, &request.encode())?;
            let bad = |why: String| HookError::BadResult(sidecar.error(ON_DEFINE_DOMAIN, &why));
            let result = OnDefineDomainResult::decode(&answer).map_err(|e| bad(e.to_string()))?;
            xml = String::from_utf8(result.domain_xml)
                .map_err(|_| bad("the domain XML returned is not UTF-8".into()))?;
            check(&xml).map_err(|e| bad(format!("the domain XML returned: {e}")))?;
            log::info!(
                "hooks: {ON_DEFINE_DOMAIN} of sidecar {:?} changed the domain XML",
                sidecar.name
            );
        }
        Ok(xml)
    }

    /// Passes KubeVirt's `CloudInitData` (JSON) through every
    /// `PreCloudInitIso` hook of v1alpha2 and later, each getting the one
    /// before's result. (KubeVirt's manager returns after the first.) A
    /// result without user data and meta-data is read as the legacy
    /// `CloudInitNoCloudSource` answer, as KubeVirt reads it.
    pub fn pre_cloud_init_iso(&self, mut data: Value, vmi: &[u8]) -> Result<Value, HookError> {
        for sidecar in self.subscribed(PRE_CLOUD_INIT_ISO) {
            if sidecar.version == "v1alpha1" {
                continue;
            }
            let legacy = json!({"userData": data["UserData"], "networkData": data["NetworkData"]});
            let request = PreCloudInitIsoParams {
                cloud_init_no_cloud_source: legacy.to_string().into_bytes(),
                vmi: vmi.to_vec(),
                cloud_init_data: data.to_string().into_bytes(),
            };
            let answer = self.call(sidecar, PRE_CLOUD_INIT_ISO, &request.encode())?;
            let bad = |why: String| HookError::BadResult(sidecar.error(PRE_CLOUD_INIT_ISO, &why));
            let result = PreCloudInitIsoResult::decode(&answer).map_err(|e| bad(e.to_string()))?;
            let returned: Value =
                serde_json::from_slice(&result.cloud_init_data).unwrap_or(Value::Null);
            let valid = returned["UserData"].as_str().is_some_and(|u| !u.is_empty())
                && (!returned["NoCloudMetaData"].is_null()
                    || !returned["ConfigDriveMetaData"].is_null());
            data = if valid {
                returned
            } else {
                let legacy: Value = serde_json::from_slice(&result.cloud_init_no_cloud_source)
                    .map_err(|e| {
                        bad(format!(
                            "neither cloudInitData nor cloudInitNoCloudSource is usable: {e}"
                        ))
                    })?;
                json!({
                    "DataSource": data["DataSource"],
                    "UserData": legacy["userData"],
                    "NetworkData": legacy["networkData"],
                    "VolumeName": data["VolumeName"],
                })
            };
            log::info!(
                "hooks: {PRE_CLOUD_INIT_ISO} of sidecar {:?} returned the cloud-init data",
                sidecar.name
            );
        }
        Ok(data)
    }

    /// Tells every v1alpha3 sidecar subscribed to `Shutdown` that the
    /// domain is gone; returns what failed.
    pub fn shutdown(&self) -> Vec<HookError> {
        self.subscribed(SHUTDOWN)
            .into_iter()
            .filter(|s| s.version == "v1alpha3")
            .filter_map(|s| {
                self.call(s, SHUTDOWN, &ShutdownParams::default().encode())
                    .err()
            })
            .collect()
    }
}

impl Sidecar {
    fn error(&self, method: &str, why: &str) -> String {
        format!(
            "hook sidecar {:?} ({}): {method}: {why}",
            self.name,
            self.socket.display()
        )
    }
}

impl std::fmt::Display for HookError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HookError::Call(why) | HookError::BadResult(why) => f.write_str(why),
        }
    }
}
