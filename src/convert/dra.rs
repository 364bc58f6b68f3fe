//! Devices of resource claims (dynamic resource allocation, DRA): the
//! `gpus` and `hostDevices` with `claimName` and `requestName` instead of a
//! device plugin's `deviceName` (KubeVirt: pkg/dra/utils.go,
//! virtwrap/device/hostdevice/dra).
//!
//! The DRA driver publishes what it allocated as metadata files that
//! Kubernetes mounts into the pod (KEP-5304), under KubeVirt's
//! `/var/run/kubernetes.io/dra-device-attributes` (`--dra-metadata-dir`):
//! `resourceclaims/<resourceClaimName>/<request>/*-metadata.json` for a
//! claim the VMI names, `resourceclaimtemplates/<claim>/<request>/…` for one
//! made from a template. A file is a stream of JSON objects, one per API
//! version; the first `metadata.resource.k8s.io/v1alpha1` one is read. Its
//! request's only device carries `mdevUUID` (a mediated device; looked for
//! first, as a vGPU may also expose its parent's PCI address) or
//! `resource.kubernetes.io/pciBusID` (a PCI device).
//!
//! [`detect_dra_devices`] reads the files before the conversion (which
//! reads no file); the conversion turns each into a `<hostdev>`, or names
//! the field and why its device is not known.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use serde_json::Value;

use crate::vmi::{ResourceClaim, VirtualMachineInstance};

/// KubeVirt's `DefaultMetadataBasePath`.
pub const DEFAULT_DRA_METADATA_DIR: &str = "/var/run/kubernetes.io/dra-device-attributes";

const API_VERSION: &str = "metadata.resource.k8s.io/v1alpha1";
const PCI_BUS_ID: &str = "resource.kubernetes.io/pciBusID";
const MDEV_UUID: &str = "mdevUUID";
/// A metadata file is a few objects; anything larger is not one.
const MAX_METADATA_BYTES: u64 = 1 << 20;

/// The device a claim's request was allocated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DraDevice {
    /// A PCI address, "0000:81:00.0".
    Pci(String),
    /// A mediated device's UUID.
    Mdev(String),
}

/// (claim name, request name) → the device, or why it is not known.
pub type DraDevices = BTreeMap<(String, String), Result<DraDevice, String>>;

/// The claim and request a GPU or host device names, when it names both.
pub(crate) fn claim_of<'a>(
    claim_name: &'a Option<String>,
    request_name: &'a Option<String>,
) -> Option<(&'a str, &'a str)> {
    Some((claim_name.as_deref()?, request_name.as_deref()?))
}

/// Reads the metadata of every claim the VMI's GPUs and host devices name,
/// under `base` (KubeVirt's [`DEFAULT_DRA_METADATA_DIR`]).
pub fn detect_dra_devices(vmi: &VirtualMachineInstance, base: &Path) -> DraDevices {
    let devices = &vmi.spec.domain.devices;
    let claims = devices
        .gpus
        .iter()
        .filter(|g| g.device_name.is_empty())
        .filter_map(|g| claim_of(&g.claim_name, &g.request_name))
        .chain(
            devices
                .host_devices
                .iter()
                .filter(|h| h.device_name.is_empty())
                .filter_map(|h| claim_of(&h.claim_name, &h.request_name)),
        );
    let mut found = DraDevices::new();
    for (claim, request) in claims {
        let device = resolve(base, &vmi.spec.resource_claims, claim, request);
        found.insert((claim.to_string(), request.to_string()), device);
    }
    found
}

fn resolve(
    base: &Path,
    claims: &[ResourceClaim],
    claim: &str,
    request: &str,
) -> Result<DraDevice, String> {
    let entry = claims
        .iter()
        .find(|c| c.name == claim)
        .ok_or_else(|| format!("claim {claim:?} is not in spec.resourceClaims"))?;
    let dir = match entry.resource_claim_name.as_deref() {
        Some(name) if !name.is_empty() => base.join("resourceclaims").join(name),
        _ => base.join("resourceclaimtemplates").join(claim),
    }
    .join(request);
    let entries = std::fs::read_dir(&dir).map_err(|e| {
        format!(
            "the DRA driver's metadata of claim {claim:?} request {request:?} is not in {} ({e}; --dra-metadata-dir names the directory)",
            dir.display()
        )
    })?;
    let mut files: Vec<std::path::PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().ends_with("-metadata.json"))
        })
        .collect();
    files.sort();
    let file = match &files[..] {
        [one] => one,
        [] => {
            return Err(format!(
                "no *-metadata.json for claim {claim:?} request {request:?} in {}",
                dir.display()
            ));
        }
        more => {
            return Err(format!(
                "{} metadata files for claim {claim:?} request {request:?} in {}; KubeVirt supports exactly one driver per request",
                more.len(),
                dir.display()
            ));
        }
    };
    let text = read_bounded(file)?;
    device_of(&text, request).map_err(|why| format!("{}: {why}", file.display()))
}

fn read_bounded(file: &Path) -> Result<String, String> {
    let opened = std::fs::File::open(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut text = String::new();
    opened
        .take(MAX_METADATA_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    if text.len() as u64 > MAX_METADATA_BYTES {
        return Err(format!(
            "{}: larger than {MAX_METADATA_BYTES} bytes, not a DRA metadata file",
            file.display()
        ));
    }
    Ok(text)
}

/// The device of `request` in a metadata stream.
fn device_of(text: &str, request: &str) -> Result<DraDevice, String> {
    let mut unknown = Vec::new();
    let mut metadata = None;
    for object in serde_json::Deserializer::from_str(text).into_iter::<Value>() {
        let object = object.map_err(|e| format!("not a stream of JSON objects: {e}"))?;
        match object.get("apiVersion").and_then(Value::as_str) {
            None | Some("") => return Err("an object has no apiVersion".to_string()),
            Some(API_VERSION) => {
                metadata = Some(object);
                break;
            }
            Some(other) => unknown.push(other.to_string()),
        }
    }
    let metadata = metadata.ok_or_else(|| {
        if unknown.is_empty() {
            "no metadata object".to_string()
        } else {
            format!("no {API_VERSION} object (only {})", unknown.join(", "))
        }
    })?;
    let requests = metadata
        .get("requests")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let found = requests
        .iter()
        .find(|r| r.get("name").and_then(Value::as_str) == Some(request))
        .ok_or_else(|| {
            let names: Vec<&str> = requests
                .iter()
                .filter_map(|r| r.get("name").and_then(Value::as_str))
                .collect();
            format!("request {request:?} is not in the metadata (its requests: {names:?})")
        })?;
    let devices = found
        .get("devices")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let device = match devices {
        [one] => one,
        [] => return Err(format!("request {request:?} has no device")),
        more => {
            return Err(format!(
                "request {request:?} has {} devices; KubeVirt supports exactly one device per request",
                more.len()
            ));
        }
    };
    let attribute = |name: &str| {
        device
            .get("attributes")
            .and_then(|a| a.get(name))
            .and_then(|a| a.get("string"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    if let Some(uuid) = attribute(MDEV_UUID) {
        return Ok(DraDevice::Mdev(uuid));
    }
    if let Some(address) = attribute(PCI_BUS_ID) {
        return Ok(DraDevice::Pci(address));
    }
    Err(format!(
        "the device of request {request:?} has neither {MDEV_UUID} nor {PCI_BUS_ID}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchDir;

    fn metadata(request: &str, attributes: Value) -> String {
        serde_json::json!({
            "apiVersion": API_VERSION, "kind": "DeviceMetadata",
            "metadata": {"name": "claim"},
            "requests": [{"name": request, "devices": [
                {"driver": "gpu.example.com", "pool": "node1", "name": "gpu-0", "attributes": attributes}]}]
        })
        .to_string()
    }

    #[test]
    fn a_stream_gives_the_device_of_the_first_known_version() {
        let pci = serde_json::json!({PCI_BUS_ID: {"string": "0000:81:00.0"}});
        let stream = format!(
            "{}\n{}",
            serde_json::json!({"apiVersion": "metadata.resource.k8s.io/v9"}),
            metadata("gpu", pci.clone())
        );
        assert_eq!(
            device_of(&stream, "gpu"),
            Ok(DraDevice::Pci("0000:81:00.0".into()))
        );
        // A vGPU may also expose its parent's PCI address: the UUID wins.
        let both = serde_json::json!({PCI_BUS_ID: {"string": "0000:81:00.0"},
            MDEV_UUID: {"string": "6fd8a4b0-7b04-4a0b-9a5d-7f3fe2a0a001"}});
        assert_eq!(
            device_of(&metadata("gpu", both), "gpu"),
            Ok(DraDevice::Mdev(
                "6fd8a4b0-7b04-4a0b-9a5d-7f3fe2a0a001".into()
            ))
        );
        assert_eq!(
            device_of(&metadata("gpu", pci.clone()), "other"),
            Err("request \"other\" is not in the metadata (its requests: [\"gpu\"])".into())
        );
        assert_eq!(
            device_of(&metadata("gpu", serde_json::json!({})), "gpu"),
            Err("the device of request \"gpu\" has neither mdevUUID nor resource.kubernetes.io/pciBusID".into())
        );
        assert!(
            device_of("{\"apiVersion\": \"x/v1\"}", "gpu")
                .unwrap_err()
                .starts_with("no metadata.resource.k8s.io/v1alpha1 object (only x/v1)")
        );
        assert!(device_of("not json", "gpu").is_err());
        assert!(device_of("{}", "gpu").is_err());
    }

    #[test]
    fn claims_are_found_where_kubevirt_looks() {
        let base = ScratchDir::new("dra-metadata");
        let vmi = crate::convert::test_support::vmi_with(serde_json::json!({
            "resourceClaims": [{"name": "named", "resourceClaimName": "pod-claim-1"},
                               {"name": "templated", "resourceClaimTemplateName": "tmpl"}],
            "domain": {"devices": {
                "gpus": [{"name": "g1", "claimName": "named", "requestName": "gpu"}],
                "hostDevices": [{"name": "h1", "claimName": "templated", "requestName": "nic"},
                                {"name": "h2", "claimName": "absent", "requestName": "x"},
                                {"name": "plugin", "deviceName": "vendor.com/dev"}]}}
        }));
        let put = |dir: &str, text: &str| {
            let dir = base.join(dir);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("gpu.example.com-metadata.json"), text).unwrap();
        };
        put(
            "resourceclaims/pod-claim-1/gpu",
            &metadata(
                "gpu",
                serde_json::json!({PCI_BUS_ID: {"string": "0000:81:00.0"}}),
            ),
        );
        let found = detect_dra_devices(&vmi, &base);
        assert_eq!(found.len(), 3, "{found:?}");
        assert_eq!(
            found[&("named".into(), "gpu".into())],
            Ok(DraDevice::Pci("0000:81:00.0".into()))
        );
        let missing = found[&("templated".into(), "nic".into())]
            .clone()
            .unwrap_err();
        assert!(
            missing.starts_with(&format!(
                "the DRA driver's metadata of claim \"templated\" request \"nic\" is not in {}/resourceclaimtemplates/templated/nic (",
                base.display()
            )),
            "{missing}"
        );
        assert_eq!(
            found[&("absent".into(), "x".into())],
            Err("claim \"absent\" is not in spec.resourceClaims".into())
        );
        put(
            "resourceclaimtemplates/templated/nic",
            &metadata("nic", serde_json::json!({MDEV_UUID: {"string": "u-1"}})),
        );
        let dir = base.join("resourceclaimtemplates/templated/nic");
        std::fs::write(dir.join("other-metadata.json"), "{}").unwrap();
        let two = detect_dra_devices(&vmi, &base)[&("templated".into(), "nic".into())]
            .clone()
            .unwrap_err();
        assert!(two.starts_with("2 metadata files"), "{two}");
    }
}
