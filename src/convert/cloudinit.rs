//! Cloud-init NoCloud and ConfigDrive ISO contents (KubeVirt:
//! pkg/cloud-init/cloud-init.go).

use std::path::PathBuf;

use serde::Serialize;
use serde_json::{Value, json};

use super::metadata::firmware_uuid;
use super::{ConvertContext, ConvertError, paths};
use crate::disks::iso9660::IsoFile;
use crate::disks::{IsoContents, SecretFile};
use crate::encoding::base64_decode;
use crate::vmi::{CloudInitSource, VirtualMachineInstance};

/// Which cloud-init data source a volume is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataSource {
    NoCloud,
    ConfigDrive,
}

impl DataSource {
    /// The volume label cloud-init looks for.
    pub(crate) fn volume_id(self) -> &'static str {
        match self {
            DataSource::NoCloud => "cidata",
            DataSource::ConfigDrive => "config-2",
        }
    }

    fn field(self) -> &'static str {
        match self {
            DataSource::NoCloud => "cloudInitNoCloud",
            DataSource::ConfigDrive => "cloudInitConfigDrive",
        }
    }

    /// Where user-data, meta-data and network data go inside the image.
    fn layout(self) -> [&'static str; 3] {
        match self {
            DataSource::NoCloud => ["user-data", "meta-data", "network-config"],
            DataSource::ConfigDrive => [
                "openstack/latest/user_data",
                "openstack/latest/meta_data.json",
                "openstack/latest/network_data.json",
            ],
        }
    }
}

/// NoCloud meta-data as KubeVirt writes it (`NoCloudMetadata`).
#[derive(Serialize)]
struct NoCloudMetadata<'a> {
    #[serde(rename = "instance-id")]
    instance_id: &'a str,
    #[serde(rename = "local-hostname")]
    local_hostname: &'a str,
}

/// ConfigDrive meta_data.json as KubeVirt writes it (`ConfigDriveMetadata`).
#[derive(Serialize)]
struct ConfigDriveMetadata<'a> {
    instance_id: String,
    hostname: &'a str,
    uuid: &'a str,
}

/// The files of the cloud-init ISO. Inline and base64 data are resolved now;
/// `secretRef`s are read from `<private>/secret/<volume>` when the plan runs.
pub(crate) fn contents(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
    source: &CloudInitSource,
    data_source: DataSource,
    volume: &str,
    volume_index: usize,
) -> Result<IsoContents, ConvertError> {
    let path = format!("spec.volumes[{volume_index}].{}", data_source.field());
    let [user_file, meta_file, network_file] = data_source.layout();
    let secret_dir = paths::cloud_init_secret_dir(ctx, volume);
    let secret = |iso_path: &str, names: [&str; 2]| SecretFile {
        iso_path: iso_path.to_string(),
        dir: secret_dir.clone(),
        names: names.iter().map(|n| n.to_string()).collect(),
    };
    let mut files = Vec::new();
    let mut secrets = Vec::new();

    let user_data = inline_data(
        &source.user_data,
        &source.user_data_base64,
        &path,
        "userData",
    )?;
    match (user_data, &source.user_data_secret_ref) {
        (Some(_), Some(_)) => {
            return Err(ConvertError::new(
                &path,
                "set either userData(Base64) or secretRef, not both",
            ));
        }
        (Some(data), None) => files.push(file(user_file, data)),
        (None, Some(_)) => secrets.push(secret(user_file, ["userdata", "userData"])),
        // KubeVirt always writes a user-data file, empty if need be.
        (None, None) => files.push(file(user_file, Vec::new())),
    }
    let network_data = inline_data(
        &source.network_data,
        &source.network_data_base64,
        &path,
        "networkData",
    )?;
    match (network_data, &source.network_data_secret_ref) {
        (Some(_), Some(_)) => {
            return Err(ConvertError::new(
                &path,
                "set either networkData(Base64) or networkDataSecretRef, not both",
            ));
        }
        (Some(data), None) => files.push(file(network_file, data)),
        (None, Some(_)) => secrets.push(secret(network_file, ["networkdata", "networkData"])),
        (None, None) => {}
    }
    let has_user_data = files.first().is_some_and(|f| !f.data.is_empty());
    if !has_user_data && files.len() < 2 && secrets.is_empty() {
        return Err(ConvertError::new(
            &path,
            "userData, userDataBase64, secretRef, networkData, networkDataBase64 or networkDataSecretRef is required",
        ));
    }
    let meta_data = match &source.meta_data {
        Some(custom) => custom.clone().into_bytes(),
        None => generated_meta_data(vmi, ctx, data_source)?,
    };
    files.push(file(meta_file, meta_data));
    files.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    Ok(if secrets.is_empty() {
        IsoContents::Files(files)
    } else {
        IsoContents::FilesWithSecrets { files, secrets }
    })
}

/// The ISO of the VMI's first cloud-init volume, the one KubeVirt hands its
/// hook sidecars (`ReadCloudInitVolumeDataSource`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudInitIso {
    pub path: PathBuf,
    pub volume: String,
    data_source: DataSource,
}

pub(crate) fn first_iso(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
) -> Option<CloudInitIso> {
    vmi.spec.volumes.iter().find_map(|v| {
        let (data_source, path) = if v.cloud_init_no_cloud.is_some() {
            (DataSource::NoCloud, paths::no_cloud_iso(ctx))
        } else if v.cloud_init_config_drive.is_some() {
            (DataSource::ConfigDrive, paths::config_drive_iso(ctx))
        } else {
            return None;
        };
        Some(CloudInitIso {
            path,
            volume: v.name.clone(),
            data_source,
        })
    })
}

impl CloudInitIso {
    /// KubeVirt's `CloudInitData` of the ISO's `files`, as its JSON has it
    /// (Go's field names; the meta-data as its metadata object).
    pub fn hook_data(&self, files: &[IsoFile]) -> Value {
        let [user, meta, network] = self.data_source.layout();
        let text = |name: &str| {
            files
                .iter()
                .find(|f| f.path == name)
                .map(|f| String::from_utf8_lossy(&f.data).into_owned())
                .unwrap_or_default()
        };
        let meta_data: Value = serde_json::from_str(&text(meta)).unwrap_or(Value::Null);
        let (source, no_cloud, config_drive) = match self.data_source {
            DataSource::NoCloud => ("noCloud", meta_data, Value::Null),
            DataSource::ConfigDrive => ("configDrive", Value::Null, meta_data),
        };
        json!({
            "DataSource": source,
            "NoCloudMetaData": no_cloud,
            "ConfigDriveMetaData": config_drive,
            "UserData": text(user),
            "NetworkData": text(network),
            "DevicesData": null,
            "VolumeName": self.volume,
        })
    }

    /// The ISO's files with what a hook returned: its user data, its
    /// network data (no file when empty, as KubeVirt writes it) and, when
    /// it returned a changed one, its meta-data object as JSON.
    pub fn apply_hook_data(&self, mut files: Vec<IsoFile>, data: &Value) -> Vec<IsoFile> {
        let [user, meta, network] = self.data_source.layout();
        let key = match self.data_source {
            DataSource::NoCloud => "NoCloudMetaData",
            DataSource::ConfigDrive => "ConfigDriveMetaData",
        };
        let meta_data = &data[key];
        // Rewritten only when the hook changed it.
        let meta_changed = meta_data.is_object() && *meta_data != self.hook_data(&files)[key];
        let text = |v: &Value| v.as_str().unwrap_or_default().as_bytes().to_vec();
        let mut set = |name: &str, bytes: Option<Vec<u8>>| {
            files.retain(|f| f.path != name);
            if let Some(bytes) = bytes {
                files.push(file(name, bytes));
            }
        };
        set(user, Some(text(&data["UserData"])));
        let network_data = text(&data["NetworkData"]);
        set(network, (!network_data.is_empty()).then_some(network_data));
        if meta_changed {
            set(meta, serde_json::to_vec(meta_data).ok());
        }
        files.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        files
    }
}

fn file(path: &str, data: Vec<u8>) -> IsoFile {
    IsoFile {
        path: path.to_string(),
        data,
    }
}

/// `<field>` wins over `<field>Base64`, as in KubeVirt's readRawOrBase64Data.
fn inline_data(
    raw: &Option<String>,
    base64: &Option<String>,
    path: &str,
    field: &str,
) -> Result<Option<Vec<u8>>, ConvertError> {
    match (
        raw.as_deref().filter(|r| !r.is_empty()),
        base64.as_deref().filter(|b| !b.is_empty()),
    ) {
        (Some(raw), _) => Ok(Some(raw.as_bytes().to_vec())),
        (None, Some(encoded)) => base64_decode(encoded)
            .map(Some)
            .map_err(|err| ConvertError::new(format!("{path}.{field}Base64"), err)),
        (None, None) => Ok(None),
    }
}

fn generated_meta_data(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
    data_source: DataSource,
) -> Result<Vec<u8>, ConvertError> {
    let uuid = firmware_uuid(vmi, ctx)?;
    let host = hostname(vmi, ctx);
    let json = match data_source {
        DataSource::NoCloud => serde_json::to_vec(&NoCloudMetadata {
            instance_id: &uuid,
            local_hostname: &host,
        }),
        DataSource::ConfigDrive => serde_json::to_vec(&ConfigDriveMetadata {
            instance_id: format!("{}.{}", ctx.name, ctx.namespace),
            hostname: &host,
            uuid: &uuid,
        }),
    };
    json.map_err(|err| {
        ConvertError::new(
            "spec.volumes",
            format!("cannot encode cloud-init meta-data: {err}"),
        )
    })
}

/// `spec.hostname`, else the VMI name, cut to a DNS label (KubeVirt:
/// pkg/util/net/dns `SanitizeHostname`).
fn hostname(vmi: &VirtualMachineInstance, ctx: &ConvertContext) -> String {
    let name = vmi
        .spec
        .hostname
        .as_deref()
        .filter(|h| !h.is_empty())
        .unwrap_or(&ctx.name);
    name.chars().take(63).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{convert_err, convert_ok};
    use crate::disks::{DiskStep, IsoContents};

    fn iso_contents(spec: serde_json::Value) -> (String, IsoContents) {
        let plan = convert_ok(spec).disk_plan;
        plan.steps
            .into_iter()
            .find_map(|step| match step {
                DiskStep::WriteIso { path, contents, .. } => {
                    Some((path.to_string_lossy().into_owned(), contents))
                }
                _ => None,
            })
            .unwrap_or_else(|| panic!("no ISO planned"))
    }

    fn files(contents: &IsoContents) -> Vec<(String, String)> {
        let files = match contents {
            IsoContents::Files(files) | IsoContents::FilesWithSecrets { files, .. } => files,
            IsoContents::Dir(_) => panic!("unexpected dir"),
        };
        files
            .iter()
            .map(|f| {
                (
                    f.path.clone(),
                    String::from_utf8_lossy(&f.data).into_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn no_cloud_layout() {
        let spec = json!({"domain": {"firmware": {"uuid": "5a9f3a2e-1c4b-5d6e-8f90-123456789abc"}},
            "hostname": "web-1",
            "volumes": [{"name": "ci", "cloudInitNoCloud": {"userDataBase64": "I2Nsb3VkLWNvbmZpZw==",
                "networkData": "version: 2\n"}}]});
        let (path, contents) = iso_contents(spec);
        assert_eq!(
            path,
            "/var/run/kubevirt-ephemeral-disks/cloud-init-data/default/testvmi/noCloud.iso"
        );
        assert_eq!(
            files(&contents),
            [
                (
                    "meta-data".to_string(),
                    "{\"instance-id\":\"5a9f3a2e-1c4b-5d6e-8f90-123456789abc\",\"local-hostname\":\"web-1\"}".to_string()
                ),
                ("network-config".to_string(), "version: 2\n".to_string()),
                ("user-data".to_string(), "#cloud-config".to_string()),
            ]
        );
    }

    #[test]
    fn config_drive_layout_and_secret_refs() {
        let spec = json!({"volumes": [{"name": "ci", "cloudInitConfigDrive": {"secretRef": {"name": "s"}}}]});
        let (path, contents) = iso_contents(spec);
        assert!(
            path.ends_with("/cloud-init-data/default/testvmi/configdrive.iso"),
            "{path}"
        );
        let names: Vec<String> = files(&contents).into_iter().map(|(p, _)| p).collect();
        assert_eq!(names, ["openstack/latest/meta_data.json"]);
        let IsoContents::FilesWithSecrets { secrets, .. } = contents else {
            panic!("secretRef must be read at prepare time");
        };
        assert_eq!(secrets[0].iso_path, "openstack/latest/user_data");
        assert_eq!(
            secrets[0].dir.to_string_lossy(),
            "/var/run/kubevirt-private/secret/ci"
        );
        assert_eq!(secrets[0].names, ["userdata", "userData"]);
    }

    #[test]
    fn errors() {
        let empty = convert_err(json!({"volumes": [{"name": "ci", "cloudInitNoCloud": {}}]}));
        assert!(
            empty.starts_with("spec.volumes[0].cloudInitNoCloud: userData, userDataBase64"),
            "{empty}"
        );
        let bad = convert_err(
            json!({"volumes": [{"name": "ci", "cloudInitNoCloud": {"userDataBase64": "%%%"}}]}),
        );
        assert!(
            bad.starts_with("spec.volumes[0].cloudInitNoCloud.userDataBase64: invalid base64"),
            "{bad}"
        );
    }

    /// What a PreCloudInitIso hook sees of the first cloud-init volume, and
    /// how its answer becomes the ISO's files (config drive layout).
    #[test]
    fn hook_data_is_kubevirts_cloud_init_data_and_the_answer_becomes_the_files() {
        let spec = json!({
            "domain": {"devices": {"disks": [{"name": "ci", "disk": {}}]}},
            "volumes": [{"name": "ci", "cloudInitConfigDrive": {
                "userData": "#cloud-config\n", "networkData": "version: 2\n"}}]
        });
        let conversion = convert_ok(spec);
        let iso = conversion.cloud_init.expect("the first cloud-init volume");
        assert_eq!(iso.volume, "ci");
        let contents = conversion
            .disk_plan
            .steps
            .into_iter()
            .find_map(|step| match step {
                DiskStep::WriteIso { path, contents, .. } if path == iso.path => Some(contents),
                _ => None,
            })
            .expect("its ISO is planned");
        let IsoContents::Files(files) = contents else {
            panic!("inline data")
        };
        let data = iso.hook_data(&files);
        assert_eq!(data["DataSource"], "configDrive");
        assert_eq!(data["UserData"], "#cloud-config\n");
        assert_eq!(data["NetworkData"], "version: 2\n");
        assert_eq!(data["VolumeName"], "ci");
        assert!(data["NoCloudMetaData"].is_null());
        assert_eq!(
            data["ConfigDriveMetaData"]["instance_id"],
            "testvmi.default"
        );
        // Unchanged: the same files, byte for byte.
        assert_eq!(iso.apply_hook_data(files.clone(), &data), files);
        let mut changed = data.clone();
        changed["UserData"] = json!("#cloud-config\nhostname: hooked\n");
        changed["NetworkData"] = json!("");
        changed["ConfigDriveMetaData"]["hostname"] = json!("hooked");
        let after = iso.apply_hook_data(files, &changed);
        let text = |name: &str| {
            after
                .iter()
                .find(|f| f.path == name)
                .map(|f| String::from_utf8(f.data.clone()).unwrap())
        };
        assert_eq!(
            text("openstack/latest/user_data").as_deref(),
            Some("#cloud-config\nhostname: hooked\n")
        );
        assert_eq!(text("openstack/latest/network_data.json"), None);
        let meta: serde_json::Value =
            serde_json::from_str(&text("openstack/latest/meta_data.json").unwrap()).unwrap();
        assert_eq!(meta["hostname"], "hooked");
    }
}
