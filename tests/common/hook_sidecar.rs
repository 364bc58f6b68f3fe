//! A hook sidecar of our own, speaking KubeVirt's hook protocol
//! (`pkg/hooks`: `Info` and the `Callbacks` of v1alpha1 to v1alpha3) on a
//! unix socket, with the crate's own gRPC server. It does what KubeVirt's
//! example sidecars do: `cmd/sidecars/smbios` (the base board's
//! manufacturer from the VMI's annotation
//! `smbios.vm.kubevirt.io/baseBoardManufacturer`, and
//! `<smbios mode='sysinfo'/>`) and `cmd/sidecars/cloudinit` (the user
//! data replaced), and can hang or report every call it gets.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use virt_launcher::grpc::{self, Handler, Status};
use virt_launcher::kubevirt::proto::hooks::*;

/// KubeVirt's smbios example reads the manufacturer from this annotation.
pub const MANUFACTURER_ANNOTATION: &str = "smbios.vm.kubevirt.io/baseBoardManufacturer";

/// What one sidecar answers.
#[derive(Clone)]
pub struct Behaviour {
    pub name: String,
    pub version: String,
    /// Hook points and their priorities.
    pub points: Vec<(String, i32)>,
    /// Replaces the cloud-init user data (the cloudinit example's is
    /// `#cloud-config\n`).
    pub user_data: Option<String>,
    /// Overrides the annotation's manufacturer.
    pub manufacturer: Option<String>,
    /// Answers no callback, ever.
    pub hang: bool,
    /// Returns this instead of the domain XML.
    pub broken_xml: Option<String>,
}

impl Behaviour {
    pub fn new(name: &str, points: &[(&str, i32)]) -> Behaviour {
        Behaviour {
            name: name.into(),
            version: "v1alpha3".into(),
            points: points.iter().map(|(p, n)| (p.to_string(), *n)).collect(),
            user_data: None,
            manufacturer: None,
            hang: false,
            broken_xml: None,
        }
    }
}

/// The calls every sidecar of a test got, in order: `"<name> <Method>"`.
pub type CallLog = Arc<Mutex<Vec<String>>>;

struct Sidecar {
    behaviour: Behaviour,
    log: CallLog,
}

/// A running sidecar; its socket is `<dir>/<container>/<name>.sock`.
pub struct Running {
    pub socket: PathBuf,
}

impl Running {
    /// As if its container died: nothing listens any more.
    pub fn kill(&self) {
        std::fs::remove_file(&self.socket).unwrap();
    }
}

/// Starts a sidecar listening in `dir/<container>/`, as KubeVirt's pod
/// gives each sidecar container its own subdirectory.
pub fn start(dir: &Path, container: &str, behaviour: Behaviour, log: &CallLog) -> Running {
    let sub = dir.join(container);
    std::fs::create_dir_all(&sub).unwrap();
    let socket = sub.join(format!("{}.sock", behaviour.name));
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let (fatal, _) = crossbeam_channel::unbounded();
    let handler = Arc::new(Sidecar {
        behaviour,
        log: log.clone(),
    });
    grpc::spawn_acceptor(listener, handler, grpc::Limits::default(), fatal).unwrap();
    Running { socket }
}

fn bad(e: impl std::fmt::Display) -> Status {
    Status::new(grpc::Code::InvalidArgument, e.to_string())
}

impl Handler for Sidecar {
    fn call(&self, method: &str, request: &[u8]) -> Result<Vec<u8>, Status> {
        let b = &self.behaviour;
        if method == INFO_PATH {
            return Ok(InfoResult {
                name: b.name.clone(),
                hook_points: b
                    .points
                    .iter()
                    .map(|(name, priority)| HookPoint {
                        name: name.clone(),
                        priority: *priority,
                    })
                    .collect(),
                versions: vec![b.version.clone()],
            }
            .encode());
        }
        let Some(callback) =
            method.strip_prefix(&format!("/kubevirt.hooks.{}.Callbacks/", b.version))
        else {
            return Err(Status::unimplemented(method));
        };
        self.log
            .lock()
            .unwrap()
            .push(format!("{} {callback}", b.name));
        if b.hang {
            std::thread::sleep(Duration::from_secs(3600));
        }
        match callback {
            "OnDefineDomain" => {
                let params = OnDefineDomainParams::decode(request).map_err(bad)?;
                let xml = String::from_utf8(params.domain_xml).map_err(bad)?;
                let vmi: Value = serde_json::from_slice(&params.vmi).map_err(bad)?;
                let domain_xml = match &b.broken_xml {
                    Some(broken) => broken.clone(),
                    None => smbios(&xml, &vmi, b.manufacturer.as_deref()),
                };
                Ok(OnDefineDomainResult {
                    domain_xml: domain_xml.into_bytes(),
                }
                .encode())
            }
            "PreCloudInitIso" => {
                let params = PreCloudInitIsoParams::decode(request).map_err(bad)?;
                let mut data: Value =
                    serde_json::from_slice(&params.cloud_init_data).map_err(bad)?;
                if let Some(user_data) = &b.user_data {
                    data["UserData"] = Value::String(user_data.clone());
                }
                Ok(PreCloudInitIsoResult {
                    cloud_init_data: data.to_string().into_bytes(),
                    ..Default::default()
                }
                .encode())
            }
            "Shutdown" => Ok(ShutdownResult::default().encode()),
            other => Err(Status::unimplemented(other)),
        }
    }
}

/// What KubeVirt's smbios example does to the domain XML: the base board's
/// manufacturer from the VMI's annotation (or `manufacturer`), in the
/// first `<sysinfo>`, and `<smbios mode='sysinfo'/>` in `<os>`; the XML
/// unchanged without either.
fn smbios(xml: &str, vmi: &Value, manufacturer: Option<&str>) -> String {
    let Some(manufacturer) =
        manufacturer.or(vmi["metadata"]["annotations"][MANUFACTURER_ANNOTATION].as_str())
    else {
        return xml.to_string();
    };
    let board =
        format!("<baseBoard><entry name=\"manufacturer\">{manufacturer}</entry></baseBoard>");
    let mut xml = xml.to_string();
    // An earlier hook's base board is replaced, as the example replaces it.
    if let (Some(start), Some(end)) = (xml.find("<baseBoard>"), xml.find("</baseBoard>")) {
        xml.replace_range(start..end + "</baseBoard>".len(), "");
    }
    match xml.find("</sysinfo>") {
        Some(at) => xml.insert_str(at, &board),
        None => {
            let at = xml.rfind("</domain>").unwrap();
            xml.insert_str(at, &format!("<sysinfo type=\"smbios\">{board}</sysinfo>"));
        }
    }
    if !xml.contains("<smbios ") {
        let at = xml.find("</os>").unwrap();
        xml.insert_str(at, "<smbios mode=\"sysinfo\"/>");
    }
    xml
}
