//! The messages against KubeVirt's .proto files and against bytes Go's
//! protobuf wrote and read.
//!
//! The request vectors below are what `kvhandler` (KubeVirt's own
//! cmd-client, ../shared/kubevirt) sent: it was pointed at a throwaway
//! fake server that answered HTTP/2's SETTINGS and `CmdInfo.Info` and
//! saved each call's DATA payload (the 5-byte gRPC prefix dropped here).
//! The response vectors are what our encoder writes; the same fake served
//! them to `kvhandler`, and the comment beside each says what Go's client
//! made of them.

use std::collections::BTreeMap;
use std::fmt::Debug;

use super::cmd::*;
use super::hooks::*;
use super::info::{CmdInfoRequest, CmdInfoResponse};
use super::message::{MAX_DEPTH, Message};
use super::methods::{
    CMD_INFO_PATH, CmdMethod, CmdRequest, LauncherMethod, NOTIFY_DOMAIN_EVENT_PATH,
    NOTIFY_K8S_EVENT_PATH,
};
use super::notify::{DomainEventRequest, K8sEventRequest, Response as NotifyResponse};
use super::wire::{DecodeError, DecodeErrorKind, Reader, Value, WireType, Writer};

const CMD_PROTO: &str = include_str!("schema/cmd.proto");
const INFO_PROTO: &str = include_str!("schema/info.proto");
const NOTIFY_PROTO: &str = include_str!("schema/notify.proto");
const HOOKS_INFO_PROTO: &str = include_str!("schema/hooks_info.proto");
/// The hooks' Callbacks versions, oldest first.
const HOOKS_CALLBACKS_PROTOS: [&str; 3] = [
    include_str!("schema/hooks_v1alpha1.proto"),
    include_str!("schema/hooks_v1alpha2.proto"),
    include_str!("schema/hooks_v1alpha3.proto"),
];

/// Bytes written as hex pairs and 'quoted text', separated by whitespace.
fn golden(spec: &str) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut rest = spec.trim_start();
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix('\'') {
            let end = quoted.find('\'').expect("unterminated quote");
            bytes.extend_from_slice(&quoted.as_bytes()[..end]);
            rest = &quoted[end + 1..];
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            let token = &rest[..end];
            assert!(token.len().is_multiple_of(2), "odd hex {token:?}");
            for pair in token.as_bytes().chunks(2) {
                let pair = std::str::from_utf8(pair).unwrap();
                bytes.push(u8::from_str_radix(pair, 16).expect("hex"));
            }
            rest = &rest[end..];
        }
        rest = rest.trim_start();
    }
    bytes
}

// ---- the .proto files, read just enough to compare -------------------

#[derive(Debug, Default)]
struct ProtoFile {
    package: String,
    /// Message name to `(number, field name, type)`, type as written
    /// (`string`, `repeated Cell`, `map<string,DiskInfo>`).
    messages: BTreeMap<String, Vec<(u32, String, String)>>,
    /// `(service, rpc, request, response)` in the file's order.
    rpcs: Vec<(String, String, String, String)>,
}

fn parse_proto(text: &str) -> ProtoFile {
    let mut code = String::new();
    for line in text.lines() {
        code.push_str(line.split("//").next().unwrap_or(""));
        code.push('\n');
    }
    let code = code.replace(", ", ",");
    let mut spaced = String::new();
    for c in code.chars() {
        if "{};()=".contains(c) {
            spaced.push_str(&format!(" {c} "));
        } else {
            spaced.push(c);
        }
    }
    let tokens: Vec<&str> = spaced.split_whitespace().collect();
    let mut file = ProtoFile::default();
    let mut i = 0;
    while i < tokens.len() {
        match tokens[i] {
            "package" => {
                file.package = tokens[i + 1].to_string();
                i += 3;
            }
            "message" => {
                let name = tokens[i + 1].to_string();
                assert_eq!(tokens[i + 2], "{");
                i += 3;
                let mut fields = Vec::new();
                while tokens[i] != "}" {
                    let end = i + tokens[i..].iter().position(|t| *t == ";").unwrap();
                    let statement = &tokens[i..end];
                    // [repeated] type name = number
                    let n = statement.len();
                    assert_eq!(statement[n - 2], "=", "{statement:?}");
                    let number = statement[n - 1].parse().unwrap();
                    fields.push((
                        number,
                        statement[n - 3].to_string(),
                        statement[..n - 3].join(" "),
                    ));
                    i = end + 1;
                }
                file.messages.insert(name, fields);
                i += 1;
            }
            "service" => {
                let service = tokens[i + 1].to_string();
                i += 3;
                while tokens[i] != "}" {
                    // rpc Name ( Request ) returns ( Response ) { } or ... ;
                    assert_eq!(tokens[i], "rpc");
                    let rpc = &tokens[i..i + 9];
                    assert_eq!((rpc[2], rpc[5]), ("(", "returns"));
                    file.rpcs.push((
                        service.clone(),
                        rpc[1].to_string(),
                        rpc[3].to_string(),
                        rpc[7].to_string(),
                    ));
                    i += match tokens[i + 9] {
                        ";" => 10,
                        _ => {
                            assert_eq!((tokens[i + 9], tokens[i + 10]), ("{", "}"));
                            11
                        }
                    };
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    file
}

// ---- every message: schema and round trip ----------------------------

struct Entry {
    name: &'static str,
    schema: fn() -> Vec<(u32, &'static str, String)>,
    round_trip: fn(),
}

fn entry<M: Message + Clone + PartialEq + Debug>() -> Entry {
    Entry {
        name: M::NAME,
        schema: M::schema,
        round_trip: round_trip::<M>,
    }
}

/// Every message of the three files, by package.
fn registry() -> Vec<(&'static str, Vec<Entry>)> {
    let cmd = vec![
        entry::<QemuVersionResponse>(),
        entry::<Vmi>(),
        entry::<Cpu>(),
        entry::<Sibling>(),
        entry::<Pages>(),
        entry::<Memory>(),
        entry::<Cell>(),
        entry::<Topology>(),
        entry::<Smbios>(),
        entry::<DiskInfo>(),
        entry::<ClusterConfig>(),
        entry::<InterfaceBindingMigration>(),
        entry::<VirtualMachineOptions>(),
        entry::<VmiRequest>(),
        entry::<MigrationRequest>(),
        entry::<ExecRequest>(),
        entry::<EmptyRequest>(),
        entry::<Response>(),
        entry::<DomainResponse>(),
        entry::<DomainStatsResponse>(),
        entry::<GuestInfoResponse>(),
        entry::<GuestUserListResponse>(),
        entry::<GuestFilesystemsResponse>(),
        entry::<ExecResponse>(),
        entry::<GuestPingRequest>(),
        entry::<GuestPingResponse>(),
        entry::<FreezeRequest>(),
        entry::<MemoryDumpRequest>(),
        entry::<SevInfoResponse>(),
        entry::<LaunchMeasurementResponse>(),
        entry::<InjectLaunchSecretRequest>(),
        entry::<DirtyRateStatsResponse>(),
        entry::<ScreenshotResponse>(),
        entry::<BackupRequest>(),
        entry::<RedefineCheckpointRequest>(),
        entry::<RedefineCheckpointResponse>(),
        entry::<DomainStatsRequest>(),
        entry::<DirtyRateRequest>(),
        entry::<AgentLoadRequest>(),
        entry::<AgentCpuStatsRequest>(),
        entry::<AgentDiskStatsRequest>(),
        entry::<AgentTimeRequest>(),
        entry::<AgentVcpusRequest>(),
        entry::<AgentMemoryBlockInfoRequest>(),
        entry::<AgentUsersRequest>(),
        entry::<AgentOsInfoRequest>(),
        entry::<AgentDisksRequest>(),
        entry::<AgentHostNameRequest>(),
        entry::<AgentTimezoneRequest>(),
        entry::<AgentNetworkRouteRequest>(),
        entry::<AgentNetworkInterfacesRequest>(),
        entry::<AgentMemoryBlocksRequest>(),
        entry::<VmStatsRequest>(),
        entry::<VmStatsResponse>(),
    ];
    let info = vec![entry::<CmdInfoRequest>(), entry::<CmdInfoResponse>()];
    let notify = vec![
        entry::<DomainEventRequest>(),
        entry::<K8sEventRequest>(),
        entry::<NotifyResponse>(),
    ];
    let hooks_info = vec![
        entry::<InfoParams>(),
        entry::<InfoResult>(),
        entry::<HookPoint>(),
    ];
    let hooks_callbacks = vec![
        entry::<OnDefineDomainParams>(),
        entry::<OnDefineDomainResult>(),
        entry::<PreCloudInitIsoParams>(),
        entry::<PreCloudInitIsoResult>(),
        entry::<ShutdownParams>(),
        entry::<ShutdownResult>(),
    ];
    vec![
        ("kubevirt.cmd.v1", cmd),
        ("kubevirt.cmd.info", info),
        ("kubevirt.notify.v1", notify),
        ("kubevirt.hooks.info", hooks_info),
        ("kubevirt.hooks.v1alpha3", hooks_callbacks),
    ]
}

#[test]
fn every_message_matches_its_proto_field_by_field() {
    let files = [
        ("kubevirt.cmd.v1", CMD_PROTO),
        ("kubevirt.cmd.info", INFO_PROTO),
        ("kubevirt.notify.v1", NOTIFY_PROTO),
        ("kubevirt.hooks.info", HOOKS_INFO_PROTO),
        ("kubevirt.hooks.v1alpha3", HOOKS_CALLBACKS_PROTOS[2]),
    ];
    for ((package, entries), (file_package, text)) in registry().into_iter().zip(files) {
        assert_eq!(package, file_package);
        let proto = parse_proto(text);
        assert_eq!(proto.package, package);
        let ours: BTreeMap<&str, &Entry> = entries.iter().map(|e| (e.name, e)).collect();
        let theirs: Vec<&String> = proto.messages.keys().collect();
        assert_eq!(
            ours.keys().collect::<Vec<_>>(),
            theirs,
            "{package}: messages here and in the .proto"
        );
        for (name, fields) in &proto.messages {
            let ours: Vec<(u32, String, String)> = (ours[name.as_str()].schema)()
                .into_iter()
                .map(|(n, f, t)| (n, f.to_string(), t))
                .collect();
            let mut theirs = fields.clone();
            theirs.sort();
            assert_eq!(&ours, &theirs, "{package}.{name}");
        }
    }
}

/// A message with every field set survives encode and decode, writes
/// every field, and encodes the same again; the default writes nothing.
fn round_trip<M: Message + Clone + PartialEq + Debug>() {
    let sample = M::sample(0);
    let bytes = sample.encode();
    let decoded = M::decode(&bytes).unwrap_or_else(|e| panic!("{}: {e}", M::NAME));
    assert_eq!(decoded, sample, "{}", M::NAME);
    assert_eq!(decoded.encode(), bytes, "{}", M::NAME);
    let written: Vec<u32> = Reader::new(&bytes).map(|f| f.unwrap().0).collect();
    for (number, field, _) in M::schema() {
        assert!(written.contains(&number), "{}.{field} not written", M::NAME);
    }
    assert_eq!(M::default().encode(), [] as [u8; 0], "{}", M::NAME);
    assert_eq!(M::decode(&[]).unwrap(), M::default(), "{}", M::NAME);
}

#[test]
fn every_message_round_trips() {
    let mut count = 0;
    for (_, entries) in registry() {
        for entry in entries {
            (entry.round_trip)();
            count += 1;
        }
    }
    assert_eq!(count, 54 + 2 + 3 + 3 + 6);
}

#[test]
fn the_method_table_matches_the_cmd_service() {
    let proto = parse_proto(CMD_PROTO);
    let rpcs: Vec<(String, String, String)> = proto
        .rpcs
        .iter()
        .map(|(service, rpc, request, response)| {
            assert_eq!(service, "Cmd");
            (rpc.clone(), request.clone(), response.clone())
        })
        .collect();
    let ours: Vec<(String, String, String)> = CmdMethod::ALL
        .iter()
        .map(|m| {
            (
                m.name().to_string(),
                m.request_type().to_string(),
                m.response_type().to_string(),
            )
        })
        .collect();
    assert_eq!(ours, rpcs);
    assert_eq!(CmdMethod::ALL.len(), 36);
    for &method in CmdMethod::ALL {
        let path = format!("/{}.Cmd/{}", proto.package, method.name());
        assert_eq!(method.path(), path);
        assert_eq!(CmdMethod::from_path(&path), Some(method));
        assert_eq!(
            LauncherMethod::from_path(&path),
            Some(LauncherMethod::Cmd(method))
        );
    }
}

/// v1alpha1 and v1alpha2 have a subset of v1alpha3's messages and
/// methods, with the same fields: one set of messages serves all three.
#[test]
fn the_hook_versions_share_v1alpha3s_messages_and_methods() {
    let newest = parse_proto(HOOKS_CALLBACKS_PROTOS[2]);
    for (version, text) in ["v1alpha1", "v1alpha2", "v1alpha3"]
        .into_iter()
        .zip(HOOKS_CALLBACKS_PROTOS)
    {
        let proto = parse_proto(text);
        assert_eq!(proto.package, format!("kubevirt.hooks.{version}"));
        for (name, fields) in &proto.messages {
            assert_eq!(Some(fields), newest.messages.get(name), "{version}.{name}");
        }
        for (service, rpc, _, _) in &proto.rpcs {
            assert_eq!(
                callback_path(version, rpc),
                format!("/{}.{service}/{rpc}", proto.package)
            );
            assert!(newest.rpcs.iter().any(|r| &r.1 == rpc), "{rpc}");
        }
    }
    let info = parse_proto(HOOKS_INFO_PROTO);
    let (service, rpc, _, _) = &info.rpcs[0];
    assert_eq!(INFO_PATH, format!("/{}.{service}/{rpc}", info.package));
}

#[test]
fn info_and_notify_paths_match_their_services() {
    let info = parse_proto(INFO_PROTO);
    let (service, rpc, request, response) = &info.rpcs[0];
    assert_eq!(info.rpcs.len(), 1);
    assert_eq!(CMD_INFO_PATH, format!("/{}.{service}/{rpc}", info.package));
    assert_eq!(
        (request.as_str(), response.as_str()),
        ("CmdInfoRequest", "CmdInfoResponse")
    );
    assert_eq!(
        LauncherMethod::from_path(CMD_INFO_PATH),
        Some(LauncherMethod::Info)
    );

    let notify = parse_proto(NOTIFY_PROTO);
    let paths: Vec<String> = notify
        .rpcs
        .iter()
        .map(|(service, rpc, _, _)| format!("/{}.{service}/{rpc}", notify.package))
        .collect();
    assert_eq!(paths, [NOTIFY_DOMAIN_EVENT_PATH, NOTIFY_K8S_EVENT_PATH]);
    assert_eq!(notify.rpcs[0].2, "DomainEventRequest");
    assert_eq!(notify.rpcs[1].2, "K8sEventRequest");
}

#[test]
fn unknown_paths_are_no_method() {
    for path in [
        "",
        "/",
        "/kubevirt.cmd.v1.Cmd/",
        "/kubevirt.cmd.v1.Cmd/Nope",
        "/kubevirt.cmd.v1.Cmd/ping",
        "/kubevirt.cmd.v2.Cmd/Ping",
        "kubevirt.cmd.v1.Cmd/Ping",
        "/kubevirt.cmd.v1.Cmd/Ping/",
        "/kubevirt.cmd.info.CmdInfo/Info2",
        NOTIFY_DOMAIN_EVENT_PATH,
    ] {
        assert_eq!(LauncherMethod::from_path(path), None, "{path:?}");
    }
}

// ---- what Go's client sent --------------------------------------------

/// The VMI kvhandler read from `{"metadata":{"name":"vmi1","namespace":
/// "default","uid":"7c1d"},"spec":{"domain":{"devices":{}}}}`, as Go's
/// encoding/json wrote it back.
const VMI_JSON: &str = r#"{"metadata":{"name":"vmi1","namespace":"default","uid":"7c1d"},"spec":{"domain":{"resources":{},"devices":{}}},"status":{"guestOSInfo":{},"runtimeUser":0}}"#;

fn vmi() -> Option<Vmi> {
    Some(Vmi {
        vmi_json: VMI_JSON.as_bytes().to_vec(),
    })
}

/// Decodes `bytes` as `method`'s request, checks it is `expected`, and
/// that encoding it again gives Go's bytes exactly.
fn check_request(method: CmdMethod, bytes: &[u8], expected: CmdRequest) {
    let decoded = CmdRequest::decode(method, bytes).unwrap();
    assert_eq!(decoded, expected);
    assert_eq!(decoded.method(), method);
    assert_eq!(decoded.encode(), bytes, "{method:?} re-encoded");
}

#[test]
fn sync_with_every_option_as_go_sent_it() {
    // kvhandler sync --vmi vmi.json --options options.json (options: every
    // field of VirtualMachineOptions set; source in the comments).
    let bytes = golden(&format!(
        "0a 9e01 \
           0a 9b01 '{VMI_JSON}'
         12 ca01
           0a 22
             0a 08 'KubeVirt' 12 04 'None' 1a 03 '1.0' 22 01 's' 2a 08 'KubeVirt'
           10 0a
           1a 05 'disk0'
           1a 05 'disk1'
           22 33
             0a 2d
               12 08  08 8008  12 03 'KiB'
               1a 09  08 03  12 03 'KiB'  18 04
               22 02  10 0a
               22 04  08 01  10 15
               2a 04  12 02 00 01
               2a 06  08 01  12 02 00 01
             0a 02  08 01
           2a 20  0a 03 'vda'  12 19
                    0a 05 'qcow2'  12 06 '/b.img'  18 80800c  20 8080808004
           30 01
           3a 06  10 01  20 01  38 01
           42 0e  0a 07 'default'  12 03 'tap'
           4a 19  0a 07 'default'  12 0e  0a 0c 'link-refresh'
           52 02 '{{}}'
           5a 04 'gpu0'"
    ));
    // 1 vmi (158 bytes): 1 vmiJson (155 bytes).
    // 2 options (202 bytes):
    //   1 VirtualMachineSMBios: manufacturer, product, version, sku, family
    //   2 MemBalloonStatsPeriod 10; 3 PreallocatedVolumes x2
    //   4 topology: 1 numa_cells[0]: id 0 (left out), 2 memory {1024 KiB},
    //     3 pages {count 3, KiB, size 4}, 4 distances {id 0, value 10} and
    //     {1, 21}, 5 cpus {id 0, siblings packed [0 1]} and {1, [0 1]};
    //     numa_cells[1] {id 1}
    //   5 DisksInfo entry: key "vda", value DiskInfo {qcow2, /b.img,
    //     actualSize 196608, virtualSize 1 GiB}
    //   6 ExpandDisksEnabled; 7 clusterConfig {2, 4, 7 true}
    //   8 interfaceDomainAttachment {default: tap}
    //   9 interfaceMigration {default: {Method link-refresh}}
    //   10 pluginsJson "{}"; 11 GraceHostDeviceAliases ["gpu0"]
    let cell0 = Cell {
        id: 0,
        memory: Some(Memory {
            amount: 1024,
            unit: "KiB".into(),
        }),
        pages: vec![Pages {
            count: 3,
            unit: "KiB".into(),
            size: 4,
        }],
        distances: vec![Sibling { id: 0, value: 10 }, Sibling { id: 1, value: 21 }],
        cpus: vec![
            Cpu {
                id: 0,
                siblings: vec![0, 1],
            },
            Cpu {
                id: 1,
                siblings: vec![0, 1],
            },
        ],
    };
    let options = VirtualMachineOptions {
        virtual_machine_smbios: Some(Smbios {
            manufacturer: "KubeVirt".into(),
            product: "None".into(),
            version: "1.0".into(),
            sku: "s".into(),
            family: "KubeVirt".into(),
        }),
        mem_balloon_stats_period: 10,
        preallocated_volumes: vec!["disk0".into(), "disk1".into()],
        topology: Some(Topology {
            numa_cells: vec![
                cell0,
                Cell {
                    id: 1,
                    ..Cell::default()
                },
            ],
        }),
        disks_info: BTreeMap::from([(
            "vda".into(),
            DiskInfo {
                format: "qcow2".into(),
                backing_file: "/b.img".into(),
                actual_size: 196_608,
                virtual_size: 1 << 30,
            },
        )]),
        expand_disks_enabled: true,
        cluster_config: Some(ClusterConfig {
            free_page_reporting_disabled: true,
            serial_console_log_disabled: true,
            grace_io_virtualization_enabled: true,
            ..ClusterConfig::default()
        }),
        interface_domain_attachment: BTreeMap::from([("default".into(), "tap".into())]),
        interface_migration: BTreeMap::from([(
            "default".into(),
            InterfaceBindingMigration {
                method: "link-refresh".into(),
            },
        )]),
        plugins_json: b"{}".to_vec(),
        grace_host_device_aliases: vec!["gpu0".into()],
    };
    check_request(
        CmdMethod::SyncVirtualMachine,
        &bytes,
        CmdRequest::SyncVirtualMachine(VmiRequest {
            vmi: vmi(),
            options: Some(options),
        }),
    );
}

#[test]
fn empty_map_entries_and_messages_as_go_sent_them() {
    // kvhandler sync-cpus --vmi <{}> --options with an empty SMBios, a
    // DisksInfo entry "" -> {}, interfaceDomainAttachment "" -> "" and
    // interfaceMigration x -> {}: Go writes a map entry's key and value
    // even when empty, and a present empty message as zero bytes.
    let vmi_json = r#"{"metadata":{},"spec":{"domain":{"resources":{},"devices":{}}},"status":{"guestOSInfo":{},"runtimeUser":0}}"#;
    let bytes = golden(&format!(
        "0a 6d  0a 6b '{vmi_json}'
         12 15
           0a 00
           2a 04  0a 00  12 00
           42 04  0a 00  12 00
           4a 05  0a 01 'x'  12 00"
    ));
    let options = VirtualMachineOptions {
        virtual_machine_smbios: Some(Smbios::default()),
        disks_info: BTreeMap::from([(String::new(), DiskInfo::default())]),
        interface_domain_attachment: BTreeMap::from([(String::new(), String::new())]),
        interface_migration: BTreeMap::from([("x".into(), InterfaceBindingMigration::default())]),
        ..VirtualMachineOptions::default()
    };
    let request = VmiRequest {
        vmi: Some(Vmi {
            vmi_json: vmi_json.as_bytes().to_vec(),
        }),
        options: Some(options),
    };
    check_request(
        CmdMethod::SyncVirtualMachineCPUs,
        &bytes,
        CmdRequest::SyncVirtualMachineCPUs(request),
    );
    // kvhandler kill: the options are present and empty.
    let bytes = golden(&format!("0a 6d  0a 6b '{vmi_json}'  12 00"));
    let decoded = CmdRequest::decode(CmdMethod::KillVirtualMachine, &bytes).unwrap();
    let CmdRequest::KillVirtualMachine(kill) = &decoded else {
        panic!("{decoded:?}")
    };
    assert_eq!(kill.options, Some(VirtualMachineOptions::default()));
    assert_eq!(decoded.encode(), bytes);
}

#[test]
fn exec_with_a_negative_timeout_as_go_sent_it() {
    // kvhandler exec --domain default_vmi1 --timeout -3 -- /bin/echo "a b" ""
    let bytes = golden(
        "0a 0c 'default_vmi1'
         12 09 '/bin/echo'
         1a 03 'a b'
         1a 00
         20 fdffffffffffffffff01",
    );
    // 4 timeoutSeconds: int32 -3 is sign-extended, ten bytes; the empty
    // argument is written all the same.
    check_request(
        CmdMethod::Exec,
        &bytes,
        CmdRequest::Exec(ExecRequest {
            domain_name: "default_vmi1".into(),
            command: "/bin/echo".into(),
            args: vec!["a b".into(), String::new()],
            timeout_seconds: -3,
        }),
    );
}

#[test]
fn small_requests_as_go_sent_them() {
    let vmi_field = format!("0a 9e01 0a 9b01 '{VMI_JSON}'");
    // kvhandler freeze --unfreeze-timeout 30
    check_request(
        CmdMethod::FreezeVirtualMachine,
        &golden(&format!("{vmi_field} 10 1e")),
        CmdRequest::FreezeVirtualMachine(FreezeRequest {
            vmi: vmi(),
            unfreeze_timeout_seconds: 30,
        }),
    );
    // kvhandler memory-dump --path /dump/x.memory.dump
    check_request(
        CmdMethod::VirtualMachineMemoryDump,
        &golden(&format!("{vmi_field} 12 13 '/dump/x.memory.dump'")),
        CmdRequest::VirtualMachineMemoryDump(MemoryDumpRequest {
            vmi: vmi(),
            dump_path: "/dump/x.memory.dump".into(),
        }),
    );
    // kvhandler guest-ping --domain default_vmi1 --timeout 7
    check_request(
        CmdMethod::GuestPing,
        &golden("0a 0c 'default_vmi1' 10 07"),
        CmdRequest::GuestPing(GuestPingRequest {
            domain_name: "default_vmi1".into(),
            timeout_seconds: 7,
        }),
    );
    // kvhandler vm-stats --request {"domainStats":{},"guestGetLoad":{},
    // "guestGetMemoryBlocks":{}}: field 16's tag takes two bytes.
    check_request(
        CmdMethod::GetVMStats,
        &golden("0a 00  1a 00  8201 00"),
        CmdRequest::GetVMStats(VmStatsRequest {
            domain_stats: Some(DomainStatsRequest {}),
            guest_get_load: Some(AgentLoadRequest {}),
            guest_get_memory_blocks: Some(AgentMemoryBlocksRequest {}),
            ..VmStatsRequest::default()
        }),
    );
    // kvhandler ping, and the CmdInfo.Info before every call: no bytes.
    check_request(CmdMethod::Ping, &[], CmdRequest::Ping(EmptyRequest {}));
    assert_eq!(CmdInfoRequest::decode(&[]).unwrap(), CmdInfoRequest {});
    // kvhandler migrate --options {"bandwidth":"64Mi","unsafeMigration":true}:
    // the options travel as Go's JSON of cmd-client's MigrationOptions.
    let options = r#"{"Bandwidth":"64Mi","ProgressTimeout":0,"CompletionTimeoutPerGiB":0,"MaxDowntimeMs":0,"UnsafeMigration":true,"AllowAutoConverge":false,"AllowPostCopy":false,"ParallelMigrationThreads":null,"AllowWorkloadDisruption":false,"StallDetectorOptions":null,"Compression":null,"DowntimeTuning":null}"#;
    check_request(
        CmdMethod::MigrateVirtualMachine,
        &golden(&format!("{vmi_field} 12 a202 '{options}'")),
        CmdRequest::MigrateVirtualMachine(MigrationRequest {
            vmi: vmi(),
            options: options.as_bytes().to_vec(),
        }),
    );
}

// ---- what the launcher answers, as Go's client read it ----------------

fn ok() -> Option<Response> {
    Some(Response {
        success: true,
        message: String::new(),
    })
}

#[test]
fn responses_encode_as_go_reads_them() {
    // CmdInfo.Info: kvhandler negotiated v1 from these bytes on every call
    // above (packed repeated uint32 [1]).
    let info = CmdInfoResponse {
        supported_cmd_versions: super::info::SUPPORTED_CMD_VERSIONS.to_vec(),
    };
    assert_eq!(info.encode(), golden("0a 01 01"));

    // ping: {"ok":true}.
    assert_eq!(ok().unwrap().encode(), golden("08 01"));
    // ping: {"ok":false,"error":"server error. command Ping failed:
    // \"Ping: not supported yet\""}.
    let refused = Response {
        success: false,
        message: "Ping: not supported yet".into(),
    };
    assert_eq!(refused.encode(), golden("12 17 'Ping: not supported yet'"));

    // get-domain: {"exists":true,"domain":{"kind":"Domain",...}}.
    let domain = r#"{"kind":"Domain","metadata":{"name":"default_vmi1"}}"#;
    let response = DomainResponse {
        response: ok(),
        domain: domain.into(),
    };
    assert_eq!(
        response.encode(),
        golden(&format!("0a 02 08 01  12 34 '{domain}'"))
    );
    // get-domain with no domain: {"exists":false, ...}.
    let none = DomainResponse {
        response: ok(),
        domain: String::new(),
    };
    assert_eq!(none.encode(), golden("0a 02 08 01"));

    // exec: exit code -1 and its output ({"exitCode":-1,"stdout":"hi\n"}).
    let exec = ExecResponse {
        response: ok(),
        exit_code: -1,
        std_out: "hi\n".into(),
    };
    assert_eq!(
        exec.encode(),
        golden("0a 02 08 01  10 ffffffffffffffffff01  1a 03 'hi' 0a")
    );

    // dirty-rate: 1 TiB/s and the sign: {"result":1099511627776}.
    let dirty = DirtyRateStatsResponse {
        response: ok(),
        dirty_rate_mbs: 1 << 40,
    };
    assert_eq!(dirty.encode(), golden("0a 02 08 01  10 8080808080 20"));

    // qemu-version: {"result":"9.0.0"}.
    let version = QemuVersionResponse {
        response: ok(),
        version: "9.0.0".into(),
    };
    assert_eq!(version.encode(), golden("0a 02 08 01  12 05 '9.0.0'"));

    // vm-stats: {"DirtyRateMbps":0,"GuestAgentVersion":"5.2.0",
    // "GuestGetLoad":"{\"load1m\":0.5}",...}: present and empty
    // dirtyRateStats is a rate of 0, absent parts are empty strings.
    let stats = VmStatsResponse {
        response: ok(),
        dirty_rate_stats: Some(DirtyRateStatsResponse::default()),
        guest_agent_version: Some(Response {
            success: true,
            message: "5.2.0".into(),
        }),
        guest_get_load: Some(Response {
            success: true,
            message: r#"{"load1m":0.5}"#.into(),
        }),
        ..VmStatsResponse::default()
    };
    assert_eq!(
        stats.encode(),
        golden(
            r#"0a 02 08 01
               1a 00
               22 09  08 01  12 05 '5.2.0'
               2a 12  08 01  12 0e '{"load1m":0.5}'"#
        )
    );
}

#[test]
fn notify_calls_as_gos_notify_server_answered_them() {
    // The same fake, as a client, sent these bytes to `kvhandler
    // notify-server` (KubeVirt's notify server); its answers are Go's
    // bytes. An ADDED event: it printed {"event":"domain","type":"ADDED",
    // "domain":{"kind":"Domain",...}} and answered success.
    let event = DomainEventRequest {
        domain_json: br#"{"kind":"Domain"}"#.to_vec(),
        status_json: Vec::new(),
        event_type: "ADDED".into(),
    };
    let bytes = golden(r#"0a 11 '{"kind":"Domain"}'  1a 05 'ADDED'"#);
    assert_eq!(event.encode(), bytes);
    assert_eq!(DomainEventRequest::decode(&bytes).unwrap(), event);
    let answer = NotifyResponse::decode(&golden("08 01")).unwrap();
    assert!(answer.success);
    // A Kubernetes event for a VMI the server does not know.
    let k8s = K8sEventRequest {
        event_json: br#"{"reason":"Started"}"#.to_vec(),
    };
    assert_eq!(k8s.encode(), golden(r#"0a 14 '{"reason":"Started"}'"#));
    let answer = NotifyResponse::decode(&golden("12 0d 'VMI not found'")).unwrap();
    assert_eq!(
        answer,
        NotifyResponse {
            success: false,
            message: "VMI not found".into()
        }
    );
    // A domain that is not JSON: {"kind"... cut short.
    let cut = DomainEventRequest {
        domain_json: br#"{"ki"#.to_vec(),
        ..DomainEventRequest::default()
    };
    assert_eq!(cut.encode(), golden(r#"0a 04 '{"ki'"#));
    let answer = NotifyResponse::decode(&golden("12 1c 'unexpected end of JSON input'")).unwrap();
    assert_eq!(answer.message, "unexpected end of JSON input");
}

// ---- proto3 decoding rules and bad input --------------------------------

#[test]
fn unknown_fields_of_every_wire_type_are_skipped() {
    let bytes = golden(
        "08 01
         a006 05
         a906 0102030405060708
         b206 03 'abc'
         bd06 01020304
         12 02 'ok'",
    );
    // 100 of each wire type between Response's two fields.
    let response = Response::decode(&bytes).unwrap();
    assert_eq!(
        response,
        Response {
            success: true,
            message: "ok".into()
        }
    );
}

#[test]
fn proto3_merging_rules() {
    // The last scalar wins; a message seen twice is merged; a repeated
    // uint32 is read packed and unpacked, mixed.
    let bytes = golden(
        "0a 04  0a 02 'a1'
         0a 04  12 02 'p2'
         0a 04  0a 02 'a3'",
    );
    let options = VirtualMachineOptions::decode(&bytes).unwrap();
    assert_eq!(
        options.virtual_machine_smbios,
        Some(Smbios {
            manufacturer: "a3".into(),
            product: "p2".into(),
            ..Smbios::default()
        })
    );
    let cpu = Cpu::decode(&golden("08 05  10 07  12 02 08 09  10 0a  08 06")).unwrap();
    assert_eq!(
        cpu,
        Cpu {
            id: 6,
            siblings: vec![7, 8, 9, 10]
        }
    );
    // The last entry for a key wins; an entry without a key is key "".
    let map = golden(
        "42 0a  0a 03 'eth'  12 03 'tap'
         42 0f  0a 03 'eth'  12 08 'passt-bd'
         42 05  12 03 'tap'",
    );
    let options = VirtualMachineOptions::decode(&map).unwrap();
    assert_eq!(
        options.interface_domain_attachment,
        BTreeMap::from([
            ("eth".into(), "passt-bd".into()),
            (String::new(), "tap".into())
        ])
    );
    // 32-bit fields take the low 32 bits, as Go does: uint32 2^32+5 is 5,
    // int32 from 0xffffffff is -1.
    assert_eq!(Cpu::decode(&golden("08 8580808010")).unwrap().id, 5);
    let ping = GuestPingRequest::decode(&golden("10 ffffffff0f")).unwrap();
    assert_eq!(ping.timeout_seconds, -1);
    // A bool is any non-zero varint.
    assert!(Response::decode(&golden("08 02")).unwrap().success);
}

fn decode_error<M: Message + Debug>(bytes: &[u8]) -> DecodeError {
    match M::decode(bytes) {
        Ok(m) => panic!("{:02x?} decoded as {m:?}", bytes),
        Err(e) => e,
    }
}

#[test]
fn bad_input_names_the_message_and_field() {
    // Wrong wire type for a known field, deep inside.
    let e = decode_error::<VmiRequest>(&golden("12 04  22 02  08 01"));
    assert_eq!(
        e.kind,
        DecodeErrorKind::WrongWireType {
            expected: WireType::Len,
            found: WireType::Varint
        }
    );
    assert_eq!(e.message(), "VMIRequest");
    assert_eq!(e.fields(), ["options", "topology", "numa_cells"]);
    let e = decode_error::<VmiRequest>(&golden("12 06  22 04  0a 02  08 ff"));
    assert_eq!(e.kind, DecodeErrorKind::Truncated);
    assert_eq!(
        e.to_string(),
        "protobuf VMIRequest.options.topology.numa_cells: truncated input"
    );
    let e = decode_error::<VmiRequest>(&golden("12 07  0a 05  0d 01020304"));
    assert_eq!(
        e.to_string(),
        "protobuf VMIRequest.options.VirtualMachineSMBios.manufacturer: \
         wire type fixed32 where the .proto says length-delimited"
    );
    let e = decode_error::<ExecRequest>(&golden("22 02 'hi'"));
    assert_eq!(
        e.to_string(),
        "protobuf ExecRequest.timeoutSeconds: \
         wire type length-delimited where the .proto says varint"
    );
    // A string that is not UTF-8, in a map's key and in its value.
    let e = decode_error::<VirtualMachineOptions>(&golden("2a 05  0a 01 ff  12 00"));
    assert_eq!(
        e.to_string(),
        "protobuf VirtualMachineOptions.DisksInfo.key: string is not valid UTF-8"
    );
    let e = decode_error::<VirtualMachineOptions>(&golden("2a 08  0a 00  12 04  0a 02 c328"));
    assert_eq!(
        e.to_string(),
        "protobuf VirtualMachineOptions.DisksInfo.value.format: string is not valid UTF-8"
    );
    // Length past the end, at the top.
    let e = decode_error::<VmiRequest>(&golden("0a 05 01"));
    assert_eq!(
        e.to_string(),
        "protobuf VMIRequest: length 5 past the end (1 left)"
    );
    // A huge declared length inside a nested message.
    let e = decode_error::<VmiRequest>(&golden("0a 0b  0a ffffffffffffffffff01"));
    assert_eq!(
        e.to_string(),
        format!(
            "protobuf VMIRequest.vmi: length {} past the end (0 left)",
            u64::MAX
        )
    );
    // An 11-byte varint as a value.
    let e = decode_error::<GuestPingRequest>(&golden("10 8080808080808080808000"));
    assert_eq!(
        e.to_string(),
        "protobuf GuestPingRequest: varint longer than 64 bits"
    );
    // A group, and wire type 7.
    let e = decode_error::<Response>(&golden("0b 0c"));
    assert_eq!(e.kind, DecodeErrorKind::UnsupportedWireType(3));
    let e = decode_error::<Response>(&golden("0f"));
    assert_eq!(e.kind, DecodeErrorKind::UnsupportedWireType(7));
}

// A message that contains itself, which KubeVirt's .proto has none of,
// to show the depth limit holds where the schema would not.
super::message::proto_message! {
    Nest = "Nest" {
        child: Option<Box<Nest>> = 1 "child",
    }
}

impl Message for Box<Nest> {
    const NAME: &'static str = "Nest";
    fn merge_field(
        &mut self,
        number: u32,
        value: Value<'_>,
        depth: u32,
    ) -> Result<(), DecodeError> {
        (**self).merge_field(number, value, depth)
    }
    fn write_fields(&self, w: &mut Writer) {
        (**self).write_fields(w);
    }
    fn sample(_: u32) -> Self {
        Box::default()
    }
    fn schema() -> Vec<(u32, &'static str, String)> {
        Nest::schema()
    }
}

/// `levels` Nests, each the `child` of the one before; built from the
/// innermost out, so a deep one costs linear time.
fn nested(levels: usize) -> Vec<u8> {
    let mut headers = Vec::with_capacity(levels);
    let mut inner_len = 0;
    for _ in 0..levels {
        let mut w = Writer::new();
        w.tag(1, WireType::Len);
        w.varint(inner_len as u64);
        let header = w.into_bytes();
        inner_len += header.len();
        headers.push(header);
    }
    headers.into_iter().rev().flatten().collect()
}

#[test]
fn nesting_deeper_than_the_limit_is_an_error_not_a_stack_overflow() {
    let limit = usize::try_from(MAX_DEPTH).unwrap();
    assert!(Nest::decode(&nested(limit)).is_ok());
    let e = Nest::decode(&nested(limit + 1)).unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::TooDeep);
    // Far past it: still an error, from a bounded recursion.
    let e = Nest::decode(&nested(100_000)).unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::TooDeep);
    assert_eq!(e.fields().len(), limit + 1);
    // KubeVirt's deepest message path fits well inside the limit.
    let deep = VmiRequest {
        options: Some(VirtualMachineOptions {
            topology: Some(Topology::sample(0)),
            ..VirtualMachineOptions::default()
        }),
        ..VmiRequest::default()
    };
    assert_eq!(VmiRequest::decode(&deep.encode()).unwrap(), deep);
    // An unknown field nested deeply is skipped without being read.
    let mut bytes = Writer::new();
    bytes.len_field(99, &nested(100_000));
    assert_eq!(
        Response::decode(&bytes.into_bytes()).unwrap(),
        Response::default()
    );
}
