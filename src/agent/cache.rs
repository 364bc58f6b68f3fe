//! The manager's copy of what the agent last reported. Queries are served
//! from here and never wait for the guest.

use serde_json::{Value, json};

use super::AgentData;
use super::model::{
    AgentVersion, FreezeStatus, GuestFilesystem, GuestLoad, GuestSystem, GuestUser,
};

/// KubeVirt truncates the user and filesystem lists of GetGuestInfo.
pub const GUEST_INFO_LIST_LIMIT: usize = 10;

#[derive(Debug, Default, Clone, PartialEq)]
pub struct GuestAgentCache {
    pub version: Option<AgentVersion>,
    pub filesystems: Vec<GuestFilesystem>,
    pub fsfreeze_status: Option<FreezeStatus>,
    pub system: GuestSystem,
    pub users: Vec<GuestUser>,
    pub load: Option<GuestLoad>,
}

impl GuestAgentCache {
    /// Stores fresh data. Returns true when the OS info, the interfaces or
    /// the freeze status changed: the changes KubeVirt tells virt-handler
    /// about, and the ones GUEST_INFO_CHANGED reports.
    pub fn apply(&mut self, data: AgentData) -> bool {
        match data {
            AgentData::Version(v) => {
                self.version = Some(v);
                false
            }
            AgentData::Filesystems(fs) => {
                self.filesystems = fs;
                false
            }
            AgentData::FsFreeze(status) => {
                let changed = self.fsfreeze_status != Some(status);
                self.fsfreeze_status = Some(status);
                changed
            }
            AgentData::System(system) => {
                let changed =
                    system.os != self.system.os || system.interfaces != self.system.interfaces;
                self.system = *system;
                changed
            }
            AgentData::Users(users) => {
                self.users = users;
                false
            }
            AgentData::Load(load) => {
                self.load = Some(load);
                false
            }
        }
    }

    /// The timezone as KubeVirt writes it: "name, offset-seconds".
    pub fn timezone_text(&self) -> String {
        self.system
            .timezone
            .as_ref()
            .map(|tz| format!("{}, {}", tz.zone, tz.offset))
            .unwrap_or_default()
    }

    /// `query-guest-info`, in the shape of KubeVirt's
    /// VirtualMachineInstanceGuestAgentInfo.
    pub fn guest_info(&self) -> Value {
        let mut info = json!({
            "guestAgentVersion": self.version.as_ref().map(|v| v.version.clone()).unwrap_or_default(),
            "supportedCommands": self.version.as_ref().map(|v| v.commands.clone()).unwrap_or_default(),
            "hostname": self.system.hostname.clone().unwrap_or_default(),
            "os": self.system.os.clone().unwrap_or_default(),
            "timezone": self.timezone_text(),
            "fsFreezeStatus": self.fsfreeze_status.map(FreezeStatus::as_str).unwrap_or_default(),
            "userList": self.users.iter().take(GUEST_INFO_LIST_LIMIT).collect::<Vec<_>>(),
            "fsInfo": { "disks": self.filesystems.iter().take(GUEST_INFO_LIST_LIMIT).collect::<Vec<_>>() },
        });
        if let Some(load) = &self.load {
            info["load"] = json!(load);
        }
        info
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::model::{GuestInterface, GuestOsInfo, GuestTimezone};

    #[test]
    fn only_os_interfaces_and_freeze_changes_count() {
        let mut cache = GuestAgentCache::default();
        let system = GuestSystem {
            hostname: Some("a".into()),
            os: Some(GuestOsInfo {
                id: "tg".into(),
                ..Default::default()
            }),
            timezone: Some(GuestTimezone {
                zone: "UTC".into(),
                offset: 0,
            }),
            interfaces: vec![GuestInterface {
                interface_name: "eth0".into(),
                ..Default::default()
            }],
        };
        assert!(cache.apply(AgentData::System(Box::new(system.clone()))));
        assert!(!cache.apply(AgentData::System(Box::new(system.clone()))));
        // A new hostname alone is stored quietly.
        let renamed = GuestSystem {
            hostname: Some("b".into()),
            ..system.clone()
        };
        assert!(!cache.apply(AgentData::System(Box::new(renamed))));
        assert_eq!(cache.system.hostname.as_deref(), Some("b"));
        let readdressed = GuestSystem {
            interfaces: vec![GuestInterface {
                interface_name: "eth0".into(),
                ip_address: "10.0.2.15".into(),
                ..Default::default()
            }],
            ..system
        };
        assert!(cache.apply(AgentData::System(Box::new(readdressed))));
        assert!(cache.apply(AgentData::FsFreeze(FreezeStatus::Thawed)));
        assert!(!cache.apply(AgentData::FsFreeze(FreezeStatus::Thawed)));
        assert!(cache.apply(AgentData::FsFreeze(FreezeStatus::Frozen)));
        assert!(!cache.apply(AgentData::Users(vec![])));
    }

    #[test]
    fn guest_info_truncates_lists_to_ten() {
        let mut cache = GuestAgentCache::default();
        cache.apply(AgentData::Users(
            (0..15)
                .map(|i| GuestUser {
                    user_name: format!("u{i}"),
                    ..Default::default()
                })
                .collect(),
        ));
        cache.apply(AgentData::Filesystems(
            (0..12)
                .map(|i| GuestFilesystem {
                    disk_name: format!("d{i}"),
                    ..Default::default()
                })
                .collect(),
        ));
        let info = cache.guest_info();
        assert_eq!(info["userList"].as_array().unwrap().len(), 10);
        assert_eq!(info["fsInfo"]["disks"].as_array().unwrap().len(), 10);
        assert_eq!(cache.users.len(), 15);
    }
}
