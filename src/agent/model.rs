//! What the guest agent tells about the guest, in KubeVirt's shapes (the
//! field names of VirtualMachineInstanceGuestAgentInfo and friends), and
//! the parsers from libvirt's typed parameters and qemu-ga's raw JSON.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::hypervisor::Stat;

// Deserialize: the KubeVirt front end reads the JSON replies back.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GuestOsInfo {
    pub name: String,
    pub kernel_release: String,
    pub version: String,
    pub pretty_name: String,
    pub version_id: String,
    pub kernel_version: String,
    pub machine: String,
    pub id: String,
}

// Deserialize: the KubeVirt front end reads the JSON replies back.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GuestInterface {
    pub interface_name: String,
    pub mac: String,
    /// The primary address: the first IPv4 address, else the first one.
    pub ip_address: String,
    /// All addresses, IPv4 first.
    pub ip_addresses: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GuestUser {
    pub user_name: String,
    pub domain: String,
    /// Seconds since the epoch.
    pub login_time: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GuestDisk {
    pub serial: String,
    pub bus_type: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GuestFilesystem {
    pub disk_name: String,
    pub mount_point: String,
    pub file_system_type: String,
    pub used_bytes: u64,
    pub total_bytes: u64,
    pub disk: Vec<GuestDisk>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GuestTimezone {
    pub zone: String,
    pub offset: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SupportedCommand {
    pub name: String,
    pub enabled: bool,
}

/// The guest's load averages (`guest-get-load`, newer agents only).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GuestLoad {
    pub load1: f64,
    pub load5: f64,
    pub load15: f64,
}

/// `guest-info`: the agent's version and the commands it supports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentVersion {
    pub version: String,
    pub commands: Vec<SupportedCommand>,
}

/// Hostname, OS, timezone and interfaces (one `virDomainGetGuestInfo`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GuestSystem {
    pub hostname: Option<String>,
    pub os: Option<GuestOsInfo>,
    pub timezone: Option<GuestTimezone>,
    pub interfaces: Vec<GuestInterface>,
}

/// Typed parameters by name.
struct Params(BTreeMap<String, Value>);

impl Params {
    fn new(stats: Vec<Stat>) -> Params {
        Params(stats.into_iter().collect())
    }

    fn str(&self, key: &str) -> String {
        self.0
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    }

    fn int(&self, key: &str) -> Option<i64> {
        self.0.get(key).and_then(Value::as_i64)
    }

    fn num(&self, key: &str) -> Option<f64> {
        self.0.get(key).and_then(Value::as_f64)
    }

    fn count(&self, key: &str) -> usize {
        self.0
            .get(key)
            .and_then(Value::as_u64)
            .unwrap_or(0)
            .min(1024) as usize
    }

    fn has_prefix(&self, prefix: &str) -> bool {
        self.0.keys().any(|k| k.starts_with(prefix))
    }
}

/// Parses the `hostname`, `os.*`, `timezone.*` and `if.*` parameters.
pub fn parse_system(stats: Vec<Stat>) -> GuestSystem {
    let p = Params::new(stats);
    let hostname = p.0.contains_key("hostname").then(|| p.str("hostname"));
    let os = p.has_prefix("os.").then(|| GuestOsInfo {
        name: p.str("os.name"),
        kernel_release: p.str("os.kernel-release"),
        version: p.str("os.version"),
        pretty_name: p.str("os.pretty-name"),
        version_id: p.str("os.version-id"),
        kernel_version: p.str("os.kernel-version"),
        machine: p.str("os.machine"),
        id: p.str("os.id"),
    });
    let timezone = p.has_prefix("timezone.").then(|| GuestTimezone {
        zone: p.str("timezone.name"),
        offset: p.int("timezone.offset").unwrap_or(0),
    });
    let mut interfaces = Vec::new();
    for i in 0..p.count("if.count") {
        let name = p.str(&format!("if.{i}.name"));
        if name == "lo" {
            continue;
        }
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for a in 0..p.count(&format!("if.{i}.addr.count")) {
            let addr = p.str(&format!("if.{i}.addr.{a}.addr"));
            if addr.is_empty() {
                continue;
            }
            match p.str(&format!("if.{i}.addr.{a}.type")).as_str() {
                "ipv4" => v4.push(addr),
                _ => v6.push(addr),
            }
        }
        v4.extend(v6);
        interfaces.push(GuestInterface {
            interface_name: name,
            mac: p.str(&format!("if.{i}.hwaddr")),
            ip_address: v4.first().cloned().unwrap_or_default(),
            ip_addresses: v4,
        });
    }
    GuestSystem {
        hostname,
        os,
        timezone,
        interfaces,
    }
}

/// Parses the `user.*` parameters (login time arrives in milliseconds).
pub fn parse_users(stats: Vec<Stat>) -> Vec<GuestUser> {
    let p = Params::new(stats);
    (0..p.count("user.count"))
        .map(|i| GuestUser {
            user_name: p.str(&format!("user.{i}.name")),
            domain: p.str(&format!("user.{i}.domain")),
            login_time: p.num(&format!("user.{i}.login-time")).unwrap_or(0.0) / 1000.0,
        })
        .collect()
}

/// The `return` member of a raw agent reply.
fn agent_return(raw: &str) -> Result<Value, String> {
    let mut value: Value =
        serde_json::from_str(raw).map_err(|e| format!("agent reply is not JSON: {e}"))?;
    match value.get_mut("return") {
        Some(ret) => Ok(ret.take()),
        None => Err(format!("agent reply has no \"return\": {raw}")),
    }
}

/// Parses a `guest-info` reply.
pub fn parse_agent_version(raw: &str) -> Result<AgentVersion, String> {
    let ret = agent_return(raw)?;
    let version = ret["version"].as_str().unwrap_or_default().to_string();
    let commands = ret["supported_commands"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|c| SupportedCommand {
                    name: c["name"].as_str().unwrap_or_default().to_string(),
                    enabled: c["enabled"].as_bool().unwrap_or(false),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(AgentVersion { version, commands })
}

/// Parses a `guest-get-fsinfo` reply.
pub fn parse_filesystems(raw: &str) -> Result<Vec<GuestFilesystem>, String> {
    let ret = agent_return(raw)?;
    let list = ret
        .as_array()
        .ok_or_else(|| "guest-get-fsinfo did not return a list".to_string())?;
    Ok(list
        .iter()
        .map(|fs| GuestFilesystem {
            disk_name: fs["name"].as_str().unwrap_or_default().to_string(),
            mount_point: fs["mountpoint"].as_str().unwrap_or_default().to_string(),
            file_system_type: fs["type"].as_str().unwrap_or_default().to_string(),
            used_bytes: fs["used-bytes"].as_u64().unwrap_or(0),
            total_bytes: fs["total-bytes"].as_u64().unwrap_or(0),
            disk: fs["disk"]
                .as_array()
                .map(|disks| {
                    disks
                        .iter()
                        .map(|d| GuestDisk {
                            serial: d["serial"].as_str().unwrap_or_default().to_string(),
                            bus_type: d["bus-type"].as_str().unwrap_or_default().to_string(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect())
}

/// The guest's filesystems, as `guest-fsfreeze-status` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreezeStatus {
    Thawed,
    Frozen,
}

impl FreezeStatus {
    /// The agent's word for it, which the wire repeats.
    pub fn as_str(self) -> &'static str {
        match self {
            FreezeStatus::Thawed => "thawed",
            FreezeStatus::Frozen => "frozen",
        }
    }

    /// From the `return` value of `guest-fsfreeze-status`.
    pub fn from_agent(value: &Value) -> Result<FreezeStatus, String> {
        match value.as_str() {
            Some("thawed") => Ok(FreezeStatus::Thawed),
            Some("frozen") => Ok(FreezeStatus::Frozen),
            _ => Err(format!("unexpected fsfreeze status {value}")),
        }
    }
}

/// Parses a `guest-fsfreeze-status` reply.
pub fn parse_fsfreeze_status(raw: &str) -> Result<FreezeStatus, String> {
    FreezeStatus::from_agent(&agent_return(raw)?)
}

/// Parses a `guest-get-load` reply.
pub fn parse_load(raw: &str) -> Result<GuestLoad, String> {
    let ret = agent_return(raw)?;
    Ok(GuestLoad {
        load1: ret["load1"].as_f64().unwrap_or(0.0),
        load5: ret["load5"].as_f64().unwrap_or(0.0),
        load15: ret["load15"].as_f64().unwrap_or(0.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stats(pairs: &[(&str, Value)]) -> Vec<Stat> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn system_info_drops_lo_and_puts_ipv4_first() {
        let sys = parse_system(stats(&[
            ("hostname", json!("tg-a")),
            ("os.id", json!("tg-guest")),
            ("os.name", json!("tg")),
            ("os.kernel-release", json!("6.1.0-57-cloud-amd64")),
            ("timezone.name", json!("UTC")),
            ("timezone.offset", json!(0)),
            ("if.count", json!(2)),
            ("if.0.name", json!("lo")),
            ("if.0.addr.count", json!(1)),
            ("if.0.addr.0.type", json!("ipv4")),
            ("if.0.addr.0.addr", json!("127.0.0.1")),
            ("if.1.name", json!("eth0")),
            ("if.1.hwaddr", json!("52:54:00:12:34:56")),
            ("if.1.addr.count", json!(2)),
            ("if.1.addr.0.type", json!("ipv6")),
            ("if.1.addr.0.addr", json!("fe80::1")),
            ("if.1.addr.1.type", json!("ipv4")),
            ("if.1.addr.1.addr", json!("10.0.2.15")),
        ]));
        assert_eq!(sys.hostname.as_deref(), Some("tg-a"));
        let os = sys.os.unwrap();
        assert_eq!(
            (os.id.as_str(), os.kernel_release.as_str()),
            ("tg-guest", "6.1.0-57-cloud-amd64")
        );
        assert_eq!(
            sys.timezone,
            Some(GuestTimezone {
                zone: "UTC".into(),
                offset: 0
            })
        );
        assert_eq!(sys.interfaces.len(), 1);
        let eth0 = &sys.interfaces[0];
        assert_eq!(eth0.interface_name, "eth0");
        assert_eq!(eth0.mac, "52:54:00:12:34:56");
        assert_eq!(eth0.ip_address, "10.0.2.15");
        assert_eq!(eth0.ip_addresses, vec!["10.0.2.15", "fe80::1"]);
    }

    #[test]
    fn absent_sections_stay_none() {
        let sys = parse_system(Vec::new());
        assert_eq!(sys, GuestSystem::default());
    }

    #[test]
    fn users_login_time_in_seconds() {
        let users = parse_users(stats(&[
            ("user.count", json!(1)),
            ("user.0.name", json!("root")),
            ("user.0.login-time", json!(1796008066000u64)),
        ]));
        assert_eq!(
            users,
            vec![GuestUser {
                user_name: "root".into(),
                domain: String::new(),
                login_time: 1796008066.0
            }]
        );
    }

    #[test]
    fn raw_agent_replies() {
        let v = parse_agent_version(
            r#"{"return":{"version":"7.2.22","supported_commands":[{"enabled":true,"name":"guest-ping","success-response":true}]}}"#,
        )
        .unwrap();
        assert_eq!(v.version, "7.2.22");
        assert_eq!(
            v.commands,
            vec![SupportedCommand {
                name: "guest-ping".into(),
                enabled: true
            }]
        );
        let fs = parse_filesystems(
            r#"{"return":[{"name":"vdb","mountpoint":"/mnt/data","type":"ext4","used-bytes":1024,"total-bytes":4096,"disk":[{"serial":"data1","bus-type":"virtio"}]}]}"#,
        )
        .unwrap();
        assert_eq!(fs[0].mount_point, "/mnt/data");
        assert_eq!(fs[0].disk[0].serial, "data1");
        assert_eq!(
            parse_fsfreeze_status(r#"{"return":"frozen"}"#).unwrap(),
            FreezeStatus::Frozen
        );
        assert_eq!(
            parse_fsfreeze_status(r#"{"return":"thawed"}"#).map(FreezeStatus::as_str),
            Ok("thawed")
        );
        assert!(parse_fsfreeze_status(r#"{"error":{}}"#).is_err());
        assert!(parse_fsfreeze_status(r#"{"return":"melting"}"#).is_err());
        assert!(parse_agent_version("not json").is_err());
    }
}
