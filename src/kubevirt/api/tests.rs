//! The conversions against what KubeVirt's own launcher answered for the
//! same domain (testdata/go-launcher/, made by scripts/kubevirt-capture.sh:
//! each `NAME.get-domain.json` was read through virt-handler's client at
//! the moment `NAME.xml` and `NAME.state` were read from libvirt). The
//! same XML, state and guest agent data go through this module, and the
//! JSON is compared field by field; a difference prints its path.

use std::fs;

use serde_json::{Map, Value, json};

use super::*;
use crate::agent::AgentData;
use crate::agent::cache::GuestAgentCache;
use crate::agent::model::{
    FreezeStatus, GuestInterface, GuestLoad, parse_agent_version, parse_filesystems,
    parse_fsfreeze_status, parse_system, parse_users,
};
use crate::hypervisor::{DomainState, DomainStatus as LauncherStatus, Stat, StateReason};

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/src/kubevirt/api/testdata/go-launcher/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn fixture_json(name: &str) -> Value {
    serde_json::from_str(&fixture(name)).unwrap()
}

/// kvhandler's `{"ok":true,"result":...}`.
fn result(name: &str) -> Value {
    let reply = fixture_json(name);
    assert_eq!(reply["ok"], json!(true), "{name}: {reply}");
    reply["result"].clone()
}

/// The paths where two JSON trees differ, with both values.
fn diff(path: &str, ours: &Value, theirs: &Value, out: &mut Vec<String>) {
    match (ours, theirs) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                match b.get(key) {
                    Some(other) => diff(&format!("{path}/{key}"), value, other, out),
                    None => out.push(format!("{path}/{key}: only ours ({value})")),
                }
            }
            for (key, value) in b {
                if !a.contains_key(key) {
                    out.push(format!("{path}/{key}: only KubeVirt's ({value})"));
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            if a.len() != b.len() {
                out.push(format!("{path}: {} items, KubeVirt's {}", a.len(), b.len()));
            }
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff(&format!("{path}/{i}"), x, y, out);
            }
        }
        _ if ours == theirs => {}
        _ => out.push(format!("{path}: ours {ours}, KubeVirt's {theirs}")),
    }
}

#[track_caller]
fn assert_same(what: &str, ours: &Value, theirs: &Value) {
    let mut differences = Vec::new();
    diff("", ours, theirs, &mut differences);
    assert!(
        differences.is_empty(),
        "{what} differs from KubeVirt's launcher:\n  {}",
        differences.join("\n  ")
    );
}

/// `value` as JSON text read back, as a peer would read it (so numbers
/// compare by how they are written).
fn as_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::from_str(&serde_json::to_string(value).unwrap()).unwrap()
}

/// `virsh domstate --reason`'s words as the libvirt numbers behind them
/// (only the ones the capture meets).
fn libvirt_status(words: &str) -> LauncherStatus {
    let words = words.trim();
    let (state, reason) = words
        .strip_suffix(')')
        .and_then(|w| w.split_once(" ("))
        .unwrap_or_else(|| panic!("state {words:?}"));
    let (state, reasons): (i32, &[&str]) = match state {
        "running" => (
            1,
            &[
                "unknown",
                "booted",
                "migrated",
                "restored",
                "from snapshot",
                "unpaused",
            ],
        ),
        "paused" => (3, &["unknown", "user"]),
        "shut off" => (5, &["unknown", "shutdown", "destroyed"]),
        other => panic!("state {other:?}"),
    };
    let reason = reasons.iter().position(|r| *r == reason).unwrap();
    LauncherStatus::from_libvirt(state, i32::try_from(reason).unwrap())
}

/// `virsh guestinfo` / `virsh domstats` lines (`key : value`,
/// `  key=value`) as the typed parameters libvirt returned: numbers where
/// libvirt's parameter is a number.
fn typed_params(text: &str, separator: char, numeric: impl Fn(&str) -> bool) -> Vec<Stat> {
    text.lines()
        .filter_map(|line| line.split_once(separator))
        .map(|(key, value)| {
            let (key, value) = (key.trim(), value.trim());
            let typed = match value.parse::<u64>() {
                Ok(n) if numeric(key) => json!(n),
                _ => match value.parse::<i64>() {
                    Ok(n) if numeric(key) => json!(n),
                    _ => json!(value),
                },
            };
            (key.to_string(), typed)
        })
        .collect()
}

fn guestinfo_params() -> Vec<Stat> {
    typed_params(&fixture("running.guestinfo"), ':', |key| {
        ["count", "offset", "login-time", "prefix", "-bytes"]
            .iter()
            .any(|end| key.ends_with(end))
    })
}

/// The guest agent data the launcher would hold, from the agent's own
/// answers captured beside KubeVirt's.
fn agent_cache(freeze: &str) -> GuestAgentCache {
    let mut cache = GuestAgentCache::default();
    let version = parse_agent_version(&fixture("running.agent.guest-info.json")).unwrap();
    cache.apply(AgentData::Version(version));
    let filesystems = parse_filesystems(&fixture("running.agent.guest-get-fsinfo.json")).unwrap();
    cache.apply(AgentData::Filesystems(filesystems));
    cache.apply(AgentData::FsFreeze(parse_fsfreeze_status(freeze).unwrap()));
    cache.apply(AgentData::System(Box::new(
        parse_system(guestinfo_params()),
    )));
    cache.apply(AgentData::Users(parse_users(guestinfo_params())));
    cache
}

/// What a launcher knows of the VMI for the metadata: its uid and grace
/// period (the capture's VMI and flags).
fn vmi_metadata() -> KubeVirtMetadata {
    let vmi = fixture_json("vmi.json");
    KubeVirtMetadata {
        uid: vmi["metadata"]["uid"].as_str().unwrap().to_string(),
        grace_period: Some(GracePeriodMetadata {
            deletion_grace_period_seconds: vmi["spec"]["terminationGracePeriodSeconds"]
                .as_i64()
                .unwrap(),
            ..GracePeriodMetadata::default()
        }),
        ..KubeVirtMetadata::default()
    }
}

/// The metadata KubeVirt's launcher had at `snapshot`: the VMI's, and
/// after the pause a migration end time. Its notifier takes a
/// suspended-by-pause event for the end of an incoming migration and
/// records `Migration.EndTimestamp` in its metadata cache (a time only
/// that process knows, so it is taken from its answer). Whoever keeps this
/// launcher's metadata decides whether to copy that; the conversion puts
/// whatever metadata it is given.
fn metadata_at(snapshot: &str, theirs: &Value) -> KubeVirtMetadata {
    let mut metadata = vmi_metadata();
    if snapshot != "running" {
        let migration = &theirs["Spec"]["Metadata"]["KubeVirt"]["Migration"];
        let migration: MigrationMetadata = serde_json::from_value(migration.clone()).unwrap();
        assert!(migration.end_timestamp.is_some() && migration.uid.is_empty());
        metadata.migration = Some(migration);
    }
    metadata
}

fn live_domain(snapshot: &str, metadata: KubeVirtMetadata) -> Domain {
    let status = libvirt_status(&fixture(&format!("{snapshot}.state")));
    let xml = fixture(&format!("{snapshot}.xml"));
    let mut domain = Domain::from_live(&xml, status, metadata).unwrap();
    domain.set_guest_info(&agent_cache(r#"{"return":"thawed"}"#));
    domain
}

#[test]
fn get_domain_matches_kubevirts_launcher_in_every_state() {
    for snapshot in ["running", "paused", "frozen", "killed"] {
        let theirs = result(&format!("{snapshot}.get-domain.json"));
        assert_eq!(theirs["exists"], json!(true));
        let theirs = &theirs["domain"];
        let ours = as_json(&live_domain(snapshot, metadata_at(snapshot, theirs)));
        assert_same(&format!("GetDomain ({snapshot})"), &ours, theirs);
    }
}

#[test]
fn kubevirts_domain_json_reads_back_unchanged() {
    for snapshot in ["running", "killed"] {
        let theirs = result(&format!("{snapshot}.get-domain.json"))["domain"].clone();
        let read: Domain = serde_json::from_value(theirs.clone()).unwrap();
        assert_same(&format!("{snapshot} read back"), &as_json(&read), &theirs);
    }
}

#[test]
fn notifications_carry_the_uid_and_the_freeze_status() {
    // The last notification while paused, and the one after the freeze.
    let events: Vec<Value> = fixture("notify.jsonl")
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let last_with = |status: &str, freeze: &str| {
        events
            .iter()
            .rev()
            .find(|e| {
                e["event"] == "domain"
                    && e["domain"]["Status"]["Status"] == status
                    && e["domain"]["Status"]["FSFreezeStatus"]["Status"] == freeze
            })
            .unwrap_or_else(|| panic!("no {status}/{freeze} event"))
    };
    for (snapshot, status, freeze) in [
        ("paused", "Paused", FreezeStatus::Thawed),
        ("frozen", "Running", FreezeStatus::Frozen),
    ] {
        let event = last_with(status, freeze.as_str());
        assert_eq!(event["type"], "MODIFIED");
        let metadata = metadata_at(snapshot, &event["domain"]);
        let mut domain = live_domain(snapshot, metadata).for_notification();
        domain.set_fs_freeze(Some(freeze));
        assert_same(
            &format!("the {status} notification"),
            &as_json(&domain),
            &event["domain"],
        );
    }
}

#[test]
fn the_last_notification_says_the_domain_is_gone() {
    let last: Value = fixture("notify.jsonl")
        .lines()
        .last()
        .map(|line| serde_json::from_str(line).unwrap())
        .unwrap();
    assert_eq!(last["type"], "MODIFIED");
    let theirs = &last["domain"];
    let vmi_uid = vmi_metadata().uid;
    let mut domain = Domain::non_existent("e2e_kvcap", &vmi_uid);
    // When the domain went away: only the Go process knew.
    let deleted_at = theirs["ObjectMeta"]["deletionTimestamp"].as_str().unwrap();
    domain.mark_deleted(GoTime::parse(deleted_at).unwrap());
    // KubeVirt's notifier still shows the agent's last report (frozen, as
    // the guest was when it was killed).
    domain.set_guest_info(&agent_cache(r#"{"return":"thawed"}"#));
    domain.set_fs_freeze(Some(FreezeStatus::Frozen));
    assert_same("the last notification", &as_json(&domain), theirs);
}

#[test]
fn get_domain_stats_matches_kubevirts_launcher() {
    let theirs = result("running.get-domain-stats.json");
    assert_eq!(theirs["exists"], json!(true));
    let mut theirs = theirs["stats"].clone();
    let bulk: Map<String, Value> = typed_params(&fixture("running.domstats"), '=', |key| {
        !key.ends_with(".name") && !key.ends_with(".path") && key != "dirtyrate.calc_mode"
    })
    .into_iter()
    .collect();
    let xml = fixture("running.xml");
    let spec = DomainSpec::from_xml(&xml).unwrap();
    let host_cpus: usize = fixture("host-cpus").trim().parse().unwrap();
    let sources = StatsSources {
        name: &spec.name,
        uuid: &spec.uuid,
        bulk: &bulk,
        domain: Some(&spec),
        host_cpus: Some(host_cpus),
        load: None,
        migration: None,
    };
    let mut ours = as_json(&DomainStats::from_sources(&sources));
    // The counters move between the two reads (KubeVirt's answer, then
    // `virsh domstats`): their values are not compared, whether each was
    // reported is.
    for stats in [&mut ours, &mut theirs] {
        forget_counters(stats);
    }
    assert_same("GetDomainStats", &ours, &theirs);
}

/// Zeroes the values that count time, requests and guest memory use.
fn forget_counters(stats: &mut Value) {
    let zero = |object: &mut Value, keys: &[&str]| {
        for key in keys {
            if let Some(v) = object.get_mut(*key) {
                *v = json!(0);
            }
        }
    };
    zero(&mut stats["Cpu"], &["Time", "User", "System"]);
    zero(
        &mut stats["Memory"],
        &[
            "Unused",
            "Cached",
            "Available",
            "RSS",
            "SwapIn",
            "SwapOut",
            "MajorFault",
            "MinorFault",
            "Usable",
        ],
    );
    for vcpu in stats["Vcpu"].as_array_mut().into_iter().flatten() {
        zero(vcpu, &["Time", "Wait", "Delay"]);
    }
    for block in stats["Block"].as_array_mut().into_iter().flatten() {
        zero(
            block,
            &[
                "RdReqs",
                "RdBytes",
                "RdTimes",
                "WrReqs",
                "WrBytes",
                "WrTimes",
                "FlReqs",
                "FlTimes",
                "Allocation",
                "Physical",
            ],
        );
    }
    for net in stats["Net"].as_array_mut().into_iter().flatten() {
        zero(
            net,
            &[
                "RxBytes", "RxPkts", "RxErrs", "RxDrop", "TxBytes", "TxPkts", "TxErrs", "TxDrop",
            ],
        );
    }
}

#[test]
fn guest_info_users_and_filesystems_match_kubevirts_launcher() {
    let cache = agent_cache(&fixture("running.agent.guest-fsfreeze-status.json"));
    assert_same(
        "GetGuestInfo",
        &as_json(&GuestAgentInfo::from_agent(&cache)),
        &result("running.get-guest-info.json"),
    );
    // virt-handler's client wraps the launcher's lists in `items`.
    assert_same(
        "GetUsers",
        &as_json(&guest_users(&cache)),
        &result("running.get-users.json")["items"],
    );
    assert_same(
        "GetFilesystems",
        &as_json(&guest_filesystems(&cache)),
        &result("running.get-filesystems.json")["items"],
    );
    let frozen = agent_cache(r#"{"return":"frozen"}"#);
    assert_same(
        "GetGuestInfo (frozen)",
        &as_json(&GuestAgentInfo::from_agent(&frozen)),
        &result("frozen.get-guest-info.json"),
    );
}

#[test]
fn states_and_reasons_are_kubevirts_words() {
    let word = |state: i32, reason: i32| {
        let status = LauncherStatus::from_libvirt(state, reason);
        let ours = (
            LifeCycle::from_state(status.state),
            StateChangeReason::from_status(status),
        );
        // The launcher's status and libvirt's numbers say the same.
        assert_eq!(ours.0, LifeCycle::from_libvirt(state), "{state}/{reason}");
        assert_eq!(
            ours.1,
            StateChangeReason::from_libvirt(state, reason),
            "{state}/{reason}"
        );
        format!("{}/{}", ours.0.as_str(), ours.1.as_str())
    };
    // A running domain's reason is always Unknown in KubeVirt's tables.
    assert_eq!(word(1, 1), "Running/Unknown");
    assert_eq!(word(1, 5), "Running/Unknown");
    assert_eq!(word(3, 1), "Paused/User");
    assert_eq!(word(3, 11), "Paused/StartingUp");
    assert_eq!(word(3, 12), "Paused/Postcopy");
    // Missing from KubeVirt's tables: the empty word.
    assert_eq!(word(3, 14), "Paused/");
    assert_eq!(word(5, 8), "Shutoff/");
    assert_eq!(word(4, 1), "ShuttingDown/User");
    assert_eq!(word(5, 2), "Shutoff/Destroyed");
    assert_eq!(word(5, 1), "Shutoff/Shutdown");
    assert_eq!(word(6, 1), "Crashed/Panicked");
    assert_eq!(word(7, 1), "PMSuspended/Unknown");
    assert_eq!(LifeCycle::from_libvirt(9).as_str(), "");
    assert_eq!(
        StateChangeReason::from_status(LauncherStatus::NON_EXISTENT).as_str(),
        "NonExistent"
    );
    assert_eq!(
        StateChangeReason::from_status(LauncherStatus::new(
            DomainState::NoState,
            StateReason::Unknown
        ))
        .as_str(),
        "Unknown"
    );
}

#[test]
fn a_gone_domain_is_named_and_non_existent() {
    let domain = Domain::non_existent("e2e_kvcap", "6a1e3f52-8c1d-4c7e-9a43-2f0d5b9e7c11");
    let json = as_json(&domain);
    assert_eq!(
        json["ObjectMeta"],
        json!({"name": "kvcap", "namespace": "e2e", "uid": "6a1e3f52-8c1d-4c7e-9a43-2f0d5b9e7c11"})
    );
    assert_eq!(json["Status"]["Status"], "NoState");
    assert_eq!(json["Status"]["Reason"], "NonExistent");
    // Go's zero values: an empty spec is written in full.
    assert_eq!(json["Spec"]["XMLName"], json!({"Space": "", "Local": ""}));
    assert_eq!(json["Spec"]["Memory"], json!({"Value": 0, "Unit": ""}));
    assert_eq!(json["Spec"]["Devices"]["Disks"], Value::Null);
    assert_eq!(
        json["Spec"]["Metadata"]["KubeVirt"]["UID"],
        "6a1e3f52-8c1d-4c7e-9a43-2f0d5b9e7c11"
    );
    assert_eq!(split_domain_name("novm"), ("default", "novm"));
}

#[test]
fn interfaces_and_load_are_kubevirts_shapes() {
    let mut cache = GuestAgentCache::default();
    let mut system = parse_system(Vec::new());
    system.interfaces = vec![
        GuestInterface {
            interface_name: "eth0".into(),
            mac: "52:54:00:7e:57:01".into(),
            ip_address: "10.0.2.15".into(),
            ip_addresses: vec!["10.0.2.15".into(), "fe80::1".into()],
        },
        GuestInterface {
            interface_name: "eth1".into(),
            mac: "52:54:00:7e:57:02".into(),
            ..GuestInterface::default()
        },
    ];
    cache.apply(AgentData::System(Box::new(system)));
    let mut domain = Domain::reference("e2e", "vm");
    domain.set_guest_info(&cache);
    assert_eq!(
        as_json(&domain.status)["Interfaces"],
        json!([
            {"Mac": "52:54:00:7e:57:01", "Ip": "10.0.2.15", "IPs": ["10.0.2.15", "fe80::1"], "InterfaceName": "eth0"},
            {"Mac": "52:54:00:7e:57:02", "Ip": "", "IPs": null, "InterfaceName": "eth1"},
        ])
    );
    let load = LoadStats::from_agent(Some(&GuestLoad {
        load1: 0.5,
        load5: 1.0,
        load15: 0.0,
    }));
    assert_eq!(
        as_json(&load),
        json!({"Load1mSet": true, "Load1m": 0.5, "Load5mSet": true, "Load5m": 1, "Load15mSet": true, "Load15m": 0})
    );
}

#[test]
fn net_statistics_name_the_interface_alias() {
    let xml = r#"<domain type='qemu'><name>e2e_vm</name>
      <devices><interface type='ethernet'><mac address='52:54:00:7e:57:01'/>
        <target dev='tap0' managed='no'/><model type='virtio-non-transitional'/>
        <alias name='ua-default'/></interface></devices></domain>"#;
    let spec = DomainSpec::from_xml(xml).unwrap();
    let bulk: Map<String, Value> = [
        ("net.count", json!(2)),
        ("net.0.name", json!("tap0")),
        ("net.0.rx.bytes", json!(1234)),
        ("net.1.name", json!("other")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let stats = DomainStats::from_sources(&StatsSources {
        name: "e2e_vm",
        uuid: "",
        bulk: &bulk,
        domain: Some(&spec),
        host_cpus: None,
        load: None,
        migration: None,
    });
    assert_eq!(
        (stats.net[0].alias_set, stats.net[0].alias.as_str()),
        (true, "default")
    );
    assert_eq!(
        (stats.net[0].rx_bytes_set, stats.net[0].rx_bytes),
        (true, 1234)
    );
    assert!(!stats.net[0].tx_bytes_set);
    assert_eq!(
        (stats.net[1].alias_set, stats.net[1].alias.as_str()),
        (false, "")
    );
    // Without the host's CPU count, no CPU map.
    assert!(!stats.cpu_map_set);
    assert_eq!(as_json(&stats)["CPUMap"], Value::Null);
    let interface = &spec.devices.interfaces.as_ref().unwrap()[0];
    assert_eq!(interface.xml_name, XmlName::local("interface"));
    assert_eq!(interface.mac.as_ref().unwrap().mac, "52:54:00:7e:57:01");
}

#[test]
fn cpu_sets_follow_libvirts_syntax() {
    assert_eq!(cpu_set("0-3,^2", 4), Some(vec![true, true, false, true]));
    assert_eq!(cpu_set("1", 2), Some(vec![false, true]));
    assert_eq!(cpu_set("0-1000000000000", 2), Some(vec![true, true]));
    assert_eq!(cpu_set("3-1", 4), None);
    assert_eq!(cpu_set("x", 4), None);
    let xml = r#"<domain type='qemu'><name>e2e_vm</name><vcpu placement='static'>2</vcpu>
      <cputune><vcpupin vcpu='1' cpuset='1'/></cputune></domain>"#;
    let spec = DomainSpec::from_xml(xml).unwrap();
    assert_eq!(cpu_map(&spec, 2), vec![vec![true, true], vec![false, true]]);
}

#[test]
fn bad_xml_is_an_error_naming_where() {
    for (xml, expected) in [
        ("<domain><memory>lots</memory></domain>", "/domain/memory"),
        ("not xml", "outside the root element"),
        ("<domain><devices><disk><target dev='vda'/>", "not closed"),
    ] {
        let err = Domain::from_live(
            xml,
            LauncherStatus::NON_EXISTENT,
            KubeVirtMetadata::default(),
        )
        .unwrap_err();
        assert!(
            err.message.contains("api.DomainSpec") && err.message.contains(expected),
            "{xml}: {}",
            err.message
        );
    }
}

#[test]
fn metadata_times_read_from_xml_become_utc_seconds() {
    let xml = r#"<domain type='qemu'><name>e2e_vm</name><metadata>
      <kubevirt:kubevirt xmlns:kubevirt="http://kubevirt.io">
        <kubevirt:uid>u1</kubevirt:uid>
        <kubevirt:graceperiod>
          <kubevirt:deletionGracePeriodSeconds>30</kubevirt:deletionGracePeriodSeconds>
          <kubevirt:deletionTimestamp>2026-12-01T22:50:42.123456789+01:00</kubevirt:deletionTimestamp>
        </kubevirt:graceperiod>
        <kubevirt:migration><kubevirt:failed>true</kubevirt:failed><kubevirt:mode>PostCopy</kubevirt:mode></kubevirt:migration>
      </kubevirt:kubevirt></metadata></domain>"#;
    let spec = DomainSpec::from_xml(xml).unwrap();
    let kubevirt = &spec.metadata.kubevirt;
    assert_eq!(kubevirt.uid, "u1");
    let grace = kubevirt.grace_period.as_ref().unwrap();
    assert_eq!(grace.deletion_grace_period_seconds, 30);
    assert_eq!(
        grace.deletion_timestamp.as_ref().map(GoTime::as_str),
        Some("2026-12-01T21:50:42Z")
    );
    let migration = kubevirt.migration.as_ref().unwrap();
    assert!(migration.failed);
    assert_eq!(migration.mode, "PostCopy");
}
