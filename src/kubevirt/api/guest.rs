//! What `GetGuestInfo`, `GetUsers` and `GetFilesystems` return: KubeVirt's
//! `v1` types (kubevirt.io/api/core/v1), whose JSON tags are camelCase
//! and mostly `omitempty`, built from the guest agent's data the launcher
//! keeps (`crate::agent::cache::GuestAgentCache`).

use serde::{Deserialize, Serialize};

use super::gojson::serialize_float;
use crate::agent::cache::{GUEST_INFO_LIST_LIMIT, GuestAgentCache};
use crate::agent::model::{FreezeStatus, GuestFilesystem, GuestOsInfo, GuestUser};

/// `v1.VirtualMachineInstanceGuestAgentInfo`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GuestAgentInfo {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(rename = "apiVersion", skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(rename = "guestAgentVersion", skip_serializing_if = "String::is_empty")]
    pub guest_agent_version: String,
    #[serde(rename = "supportedCommands", skip_serializing_if = "Vec::is_empty")]
    pub supported_commands: Vec<GuestAgentCommandInfo>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    /// `omitempty` on a struct omits nothing in Go: always written.
    pub os: GuestOsInfoV1,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub timezone: String,
    #[serde(rename = "userList", skip_serializing_if = "Vec::is_empty")]
    pub user_list: Vec<GuestOsUser>,
    #[serde(rename = "fsInfo")]
    pub fs_info: FileSystemInfo,
    #[serde(rename = "fsFreezeStatus", skip_serializing_if = "String::is_empty")]
    pub fs_freeze_status: String,
}

/// `v1.GuestAgentCommandInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GuestAgentCommandInfo {
    pub name: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub enabled: bool,
}

/// `v1.VirtualMachineInstanceGuestOSInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GuestOsInfoV1 {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(rename = "kernelRelease", skip_serializing_if = "String::is_empty")]
    pub kernel_release: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(rename = "prettyName", skip_serializing_if = "String::is_empty")]
    pub pretty_name: String,
    #[serde(rename = "versionId", skip_serializing_if = "String::is_empty")]
    pub version_id: String,
    #[serde(rename = "kernelVersion", skip_serializing_if = "String::is_empty")]
    pub kernel_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub machine: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub id: String,
}

/// `v1.VirtualMachineInstanceGuestOSUser`: `GetUsers` answers a JSON list
/// of these.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GuestOsUser {
    #[serde(rename = "userName")]
    pub user_name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub domain: String,
    /// Seconds since the epoch, with a fraction.
    #[serde(
        rename = "loginTime",
        skip_serializing_if = "is_zero",
        serialize_with = "serialize_float"
    )]
    pub login_time: f64,
}

fn is_zero(value: &f64) -> bool {
    *value == 0.0
}

/// `v1.VirtualMachineInstanceFileSystemInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FileSystemInfo {
    /// No `omitempty`: `null` when the agent reported none.
    pub disks: Option<Vec<FileSystem>>,
}

/// `v1.VirtualMachineInstanceFileSystem`: `GetFilesystems` answers a JSON
/// list of these.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FileSystem {
    #[serde(rename = "diskName")]
    pub disk_name: String,
    #[serde(rename = "mountPoint")]
    pub mount_point: String,
    #[serde(rename = "fileSystemType")]
    pub file_system_type: String,
    #[serde(rename = "usedBytes")]
    pub used_bytes: u64,
    #[serde(rename = "totalBytes")]
    pub total_bytes: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub disk: Vec<FileSystemDisk>,
}

/// `v1.VirtualMachineInstanceFileSystemDisk`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FileSystemDisk {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub serial: String,
    #[serde(rename = "busType")]
    pub bus_type: String,
}

impl GuestAgentInfo {
    /// `GetGuestInfo`, as KubeVirt's launcher builds it: the user and
    /// filesystem lists cut to their first ten, and the timezone written
    /// `"zone, offset"` even before the agent told it (`", 0"`).
    pub fn from_agent(agent: &GuestAgentCache) -> GuestAgentInfo {
        let (version, commands) = agent
            .version
            .as_ref()
            .map(|v| (v.version.clone(), v.commands.as_slice()))
            .unwrap_or_default();
        let timezone = agent
            .system
            .timezone
            .as_ref()
            .map(|tz| (tz.zone.as_str(), tz.offset))
            .unwrap_or(("", 0));
        let filesystems: Vec<FileSystem> = agent
            .filesystems
            .iter()
            .take(GUEST_INFO_LIST_LIMIT)
            .map(file_system)
            .collect();
        GuestAgentInfo {
            guest_agent_version: version,
            supported_commands: commands
                .iter()
                .map(|c| GuestAgentCommandInfo {
                    name: c.name.clone(),
                    enabled: c.enabled,
                })
                .collect(),
            hostname: agent.system.hostname.clone().unwrap_or_default(),
            os: agent.system.os.as_ref().map(os_info_v1).unwrap_or_default(),
            timezone: format!("{}, {}", timezone.0, timezone.1),
            user_list: agent
                .users
                .iter()
                .take(GUEST_INFO_LIST_LIMIT)
                .map(guest_user)
                .collect(),
            fs_info: FileSystemInfo {
                disks: (!filesystems.is_empty()).then_some(filesystems),
            },
            fs_freeze_status: agent
                .fsfreeze_status
                .map(FreezeStatus::as_str)
                .unwrap_or_default()
                .to_string(),
            ..GuestAgentInfo::default()
        }
    }
}

/// `GetUsers`: every user the agent reported.
pub fn guest_users(agent: &GuestAgentCache) -> Vec<GuestOsUser> {
    agent.users.iter().map(guest_user).collect()
}

/// `GetFilesystems`: every filesystem the agent reported.
pub fn guest_filesystems(agent: &GuestAgentCache) -> Vec<FileSystem> {
    agent.filesystems.iter().map(file_system).collect()
}

fn guest_user(user: &GuestUser) -> GuestOsUser {
    GuestOsUser {
        user_name: user.user_name.clone(),
        domain: user.domain.clone(),
        login_time: user.login_time,
    }
}

fn file_system(fs: &GuestFilesystem) -> FileSystem {
    FileSystem {
        disk_name: fs.disk_name.clone(),
        mount_point: fs.mount_point.clone(),
        file_system_type: fs.file_system_type.clone(),
        used_bytes: fs.used_bytes,
        total_bytes: fs.total_bytes,
        disk: fs
            .disk
            .iter()
            .map(|d| FileSystemDisk {
                serial: d.serial.clone(),
                bus_type: d.bus_type.clone(),
            })
            .collect(),
    }
}

fn os_info_v1(os: &GuestOsInfo) -> GuestOsInfoV1 {
    GuestOsInfoV1 {
        name: os.name.clone(),
        kernel_release: os.kernel_release.clone(),
        version: os.version.clone(),
        pretty_name: os.pretty_name.clone(),
        version_id: os.version_id.clone(),
        kernel_version: os.kernel_version.clone(),
        machine: os.machine.clone(),
        id: os.id.clone(),
    }
}
