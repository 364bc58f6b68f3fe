//! Inputs from outside the launcher never make it panic: VMIs mutated at
//! random (a client's `sync`), request lines (a client's socket), DHCP and
//! DHCPv6 datagrams (the guest), domain XML (libvirt's, read back), the
//! files of config map, secret and cloud-init volumes (ISO images) and
//! KubeVirt's protobuf requests (virt-handler's gRPC calls). Each
//! case either succeeds or gives an error; a panic fails the test and
//! prints the input that caused it.
//!
//! The mutations come from a fixed seed, so a failure repeats. Longer runs:
//! `VL_FUZZ_ROUNDS=20 cargo test --test fuzz_inputs` (the default is 1;
//! each round is a few thousand cases per target). The test profile checks
//! arithmetic overflow, which a release build would let wrap silently.
//!
//! Numbers get a pass of their own, not left to chance: every numeric field
//! of docs/vmi.md's "Numbers" table, every numeric flag and subcommand flag
//! and every whole-number socket argument, at the edges of every integer
//! type (0, -1, i64::MAX, u64::MAX, 1e308, huge unit multipliers, ...).
//! Each is refused or accepted within its documented range.

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::panic::{AssertUnwindSafe, catch_unwind};

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use common::examples::{GOLDEN_DIR, example_context, example_json, examples, files_with_ext};
use virt_launcher::command::Command;
use virt_launcher::convert::{DomainType, convert};
use virt_launcher::disks::iso9660::{IsoFile, write_iso};
use virt_launcher::domxml::Domain;
use virt_launcher::kubevirt::proto::cmd::{
    Cell, ClusterConfig, Cpu, DiskInfo, ExecRequest, FreezeRequest, InterfaceBindingMigration,
    Memory, MigrationRequest, Pages, Sibling, Smbios, Topology, VirtualMachineOptions,
    VmStatsRequest, Vmi, VmiRequest,
};
use virt_launcher::kubevirt::proto::notify::Response as NotifyResponse;
use virt_launcher::kubevirt::proto::{CmdMethod, CmdRequest, DecodeErrorKind};
use virt_launcher::network::dhcp::wire::{MessageType, client_message};
use virt_launcher::network::dhcp::{Answerer, ExtraOptions, LeaseConfig, Outcome};
use virt_launcher::network::dhcpv6::{self, V6Lease};
use virt_launcher::protocol::{CommandError, ErrorClass, RequestId, encode_error, parse_request};
use virt_launcher::vmi::parse_vmi;

/// xorshift64*: small, fast, and the same sequence everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        match u64::try_from(n) {
            Ok(0) | Err(_) => 0,
            Ok(n) => usize::try_from(self.next() % n).unwrap_or(0),
        }
    }

    fn byte(&mut self) -> u8 {
        self.next().to_le_bytes()[0]
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

fn rounds() -> usize {
    std::env::var("VL_FUZZ_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// Runs `case`; a panic becomes a test failure naming `what`.
fn no_panic(what: impl FnOnce() -> String, case: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(case)).is_err() {
        panic!("panicked on {}", what());
    }
}

/// Values a careless conversion trips over: extremes, wrong types, odd
/// quantities and names.
fn nasty_value(rng: &mut Rng) -> Value {
    let strings = [
        "",
        "0",
        "-1",
        "1e400",
        "9223372036854775808",
        "18446744073709551616Ki",
        "99999999999Ei",
        "-5Gi",
        "0.000001m",
        "1.5",
        "Gi",
        "1Xi",
        "a/../../b",
        "/",
        "name with spaces",
        "ünïcödé-☃",
        "\u{0}",
        "<tag>&amp;\"'",
        "1Gi",
        "2",
        "virtio",
        "sata",
        "scsi",
        "usb",
        "bridge",
        "masquerade",
        "host-passthrough",
        "Always",
        "default",
        "pod",
    ];
    match rng.below(16) {
        14 => json!(i64::MAX),
        15 => json!(-1e308),
        0 => Value::Null,
        1 => json!(true),
        2 => json!(0),
        3 => json!(-1),
        4 => json!(u64::MAX),
        5 => json!(i64::MIN),
        6 => json!(1e308),
        7 => json!(4294967296u64),
        8 => json!(65536),
        9 => json!([]),
        10 => json!({}),
        11 => json!("x".repeat(rng.below(3) * 300)),
        12 => json!(rng.below(300)),
        _ => json!(*rng.pick(&strings)),
    }
}

/// Every path in `value` to a member or element, in document order.
fn paths(value: &Value, prefix: &mut Vec<PathStep>, out: &mut Vec<Vec<PathStep>>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                prefix.push(PathStep::Key(key.clone()));
                out.push(prefix.clone());
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(list) => {
            for (i, child) in list.iter().enumerate() {
                prefix.push(PathStep::Index(i));
                out.push(prefix.clone());
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

#[derive(Clone, Debug)]
enum PathStep {
    Key(String),
    Index(usize),
}

fn at_mut<'a>(value: &'a mut Value, path: &[PathStep]) -> Option<&'a mut Value> {
    path.iter().try_fold(value, |v, step| match step {
        PathStep::Key(k) => v.get_mut(k.as_str()),
        PathStep::Index(i) => v.get_mut(*i),
    })
}

/// One to three random changes: a value replaced, a member removed, an
/// array element repeated many times, a number pushed to an extreme.
fn mutate(doc: &mut Value, rng: &mut Rng) -> Vec<String> {
    let mut done = Vec::new();
    for _ in 0..=rng.below(3) {
        let mut all = Vec::new();
        paths(doc, &mut Vec::new(), &mut all);
        if all.is_empty() {
            break;
        }
        let path = rng.pick(&all).clone();
        let shown = format!("{path:?}");
        let (parent_path, last) = path.split_at(path.len() - 1);
        let Some(parent) = at_mut(doc, parent_path) else {
            continue;
        };
        match rng.below(5) {
            0 => {
                if let (Value::Object(map), PathStep::Key(k)) = (&mut *parent, &last[0]) {
                    map.remove(k);
                    done.push(format!("removed {shown}"));
                }
            }
            1 => {
                if let (Value::Array(list), PathStep::Index(i)) = (&mut *parent, &last[0]) {
                    let copy = list[*i].clone();
                    let times = 1 + rng.below(40);
                    list.extend(std::iter::repeat_n(copy, times));
                    done.push(format!("repeated {shown} {times} times"));
                }
            }
            _ => {
                let nasty = nasty_value(rng);
                if let Some(slot) = at_mut(parent, last) {
                    done.push(format!("{shown} = {nasty}"));
                    *slot = nasty;
                }
            }
        }
    }
    done
}

#[test]
fn mutated_vmis_convert_or_fail_cleanly() {
    let mut rng = Rng(0x5eed_0001);
    let mut converted = 0usize;
    let mut refused = 0usize;
    let per_example = 250 * rounds();
    for (stem, path) in examples() {
        let original = example_json(&path);
        for _ in 0..per_example {
            let mut doc = original.clone();
            let changes = mutate(&mut doc, &mut rng);
            let domain_type = if rng.below(2) == 0 {
                DomainType::Kvm
            } else {
                DomainType::Qemu
            };
            no_panic(
                || format!("examples/{stem}.json with {changes:?}"),
                || match parse_vmi(&doc) {
                    Ok(vmi) => match convert(&vmi, &example_context(&vmi, domain_type)) {
                        Ok(done) => match done.domain.to_xml() {
                            Ok(_) => converted += 1,
                            Err(_) => refused += 1,
                        },
                        Err(_) => refused += 1,
                    },
                    Err(_) => refused += 1,
                },
            );
        }
    }
    eprintln!("mutated VMIs: {converted} converted, {refused} refused");
    // Both outcomes happen: the mutations reach the converter and some of
    // them are refused.
    assert!(converted > 100, "only {converted} mutated VMIs converted");
    assert!(refused > 100, "only {refused} mutated VMIs refused");
}

#[test]
fn mutated_request_lines_get_a_reply_or_an_error() {
    let mut rng = Rng(0x5eed_0002);
    let lines: Vec<&[u8]> = [
        r#"{"execute":"ping","id":1}"#,
        r#"{"execute":"sync","arguments":{"vmi":{"metadata":{"name":"a","namespace":"b"},"spec":{}}},"id":"x"}"#,
        r#"{"execute":"guest-exec","arguments":{"command":"ls","args":["-l"],"timeout_seconds":5},"id":[1,2]}"#,
        r#"{"execute":"subscribe","arguments":{"events":["lifecycle","agent"]}}"#,
        r#"{"execute":"migrate","arguments":{"target_uri":"qemu+tcp://h/system","bandwidth_mib":10}}"#,
        r#"{"execute":"shutdown","arguments":{"grace_seconds":30},"id":-0}"#,
    ]
    .iter()
    .map(|s| s.as_bytes())
    .collect();
    let splices: [&[u8]; 12] = [
        b"\"",
        b"\\",
        b"\\u",
        b"\\ud800",
        b"{",
        b"}",
        b"[",
        b"1e999",
        b"-",
        b"null",
        b"\xff\xfe",
        b"18446744073709551616",
    ];
    // What became of the lines: refused as a line (ParseError,
    // InvalidRequest), refused as a command (CommandNotFound,
    // InvalidArgument), or a command to run.
    let mut outcomes: BTreeMap<&str, usize> = BTreeMap::new();
    for _ in 0..5000 * rounds() {
        let base: &&[u8] = rng.pick(&lines);
        let line = mangle(base, &splices, &mut rng);
        let shown = || format!("request line {:?}", String::from_utf8_lossy(&line));
        no_panic(shown, || {
            let outcome = match parse_request(&line) {
                Err(rejected) => {
                    assert_error_reply(&rejected.error, rejected.id.as_ref(), &shown);
                    let class = rejected.error.class;
                    assert!(
                        matches!(class, ErrorClass::ParseError | ErrorClass::InvalidRequest),
                        "{class} for {}",
                        shown()
                    );
                    class.as_str()
                }
                Ok(request) => match Command::parse(&request.execute, request.arguments) {
                    Ok(command) => {
                        assert_eq!(command.name(), request.execute, "{}", shown());
                        "a command"
                    }
                    Err(error) => {
                        assert_error_reply(&error, request.id.as_ref(), &shown);
                        let known = virt_launcher::command::COMMANDS
                            .iter()
                            .any(|c| c.name == request.execute);
                        let expected = if known {
                            ErrorClass::InvalidArgument
                        } else {
                            ErrorClass::CommandNotFound
                        };
                        assert_eq!(error.class, expected, "{error} for {}", shown());
                        error.class.as_str()
                    }
                },
            };
            *outcomes.entry(outcome).or_default() += 1;
        });
    }
    eprintln!("mutated request lines: {outcomes:?}");
    // Every outcome happens: the mutations reach each step.
    for outcome in [
        "ParseError",
        "InvalidRequest",
        "CommandNotFound",
        "InvalidArgument",
        "a command",
    ] {
        assert!(
            outcomes.get(outcome).copied().unwrap_or(0) > 20,
            "too few {outcome}: {outcomes:?}"
        );
    }
}

/// The error reply the launcher writes for `error`: one JSON line with
/// the class and description, and the request's id when it had one.
fn assert_error_reply(error: &CommandError, id: Option<&RequestId>, shown: &impl Fn() -> String) {
    assert!(
        !error.desc.is_empty(),
        "an empty description for {}",
        shown()
    );
    let line = encode_error(error, id);
    let reply: Value = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("the reply {line:?} to {} is not JSON: {e}", shown()));
    assert_eq!(reply["error"]["class"], error.class.as_str(), "{line}");
    assert_eq!(reply["error"]["desc"], error.desc.as_str(), "{line}");
    let echoed = id.map(|id| serde_json::from_str::<Value>(id.as_str()).unwrap_or(Value::Null));
    assert_eq!(reply.get("id"), echoed.as_ref(), "{line} for {}", shown());
}

#[test]
fn commands_refuse_arguments_of_any_shape_without_panicking() {
    let mut rng = Rng(0x5eed_0003);
    let names: Vec<&str> = virt_launcher::command::COMMANDS
        .iter()
        .map(|c| c.name)
        .collect();
    let keys = [
        "vmi",
        "timeout_seconds",
        "grace_seconds",
        "command",
        "args",
        "events",
        "target_uri",
        "bandwidth_mib",
        "max_downtime_ms",
        "max_age_ms",
        "unfreeze_timeout_seconds",
        "bandwidth_mib_per_s",
        "completion_timeout_per_gib",
        "progress_timeout",
        "options",
        "time",
        "disk",
        "name",
        "mountpoints",
        "x",
    ];
    let (mut accepted, mut refused) = (0usize, 0usize);
    for _ in 0..3000 * rounds() {
        let name = *rng.pick(&names);
        let mut arguments = Map::new();
        for _ in 0..rng.below(4) {
            arguments.insert(rng.pick(&keys).to_string(), nasty_value(&mut rng));
        }
        let shown = Value::Object(arguments.clone());
        // "x" is no command's argument.
        let unknown_argument = arguments.contains_key("x");
        no_panic(
            || format!("{name} with arguments {shown}"),
            || match Command::parse(name, arguments) {
                Ok(command) => {
                    assert_eq!(command.name(), name);
                    assert!(
                        !unknown_argument,
                        "{name} accepted the unknown argument x: {shown}"
                    );
                    accepted += 1;
                }
                Err(error) => {
                    assert_eq!(
                        error.class,
                        ErrorClass::InvalidArgument,
                        "{name} {shown}: {error}"
                    );
                    assert!(!error.desc.is_empty(), "{name} {shown}");
                    refused += 1;
                }
            },
        );
    }
    eprintln!("commands with random arguments: {accepted} accepted, {refused} refused");
    assert!(accepted > 100, "only {accepted} accepted");
    assert!(refused > 100, "only {refused} refused");
}

fn v4_lease(mac: [u8; 6]) -> LeaseConfig {
    LeaseConfig {
        client_mac: mac,
        address: Ipv4Addr::new(10, 0, 2, 2),
        prefix: 24,
        server: Ipv4Addr::new(10, 0, 2, 1),
        router: Some(Ipv4Addr::new(10, 0, 2, 1)),
        routes: Vec::new(),
        dns_servers: vec![Ipv4Addr::new(10, 96, 0, 10)],
        search_domains: vec!["svc.cluster.local".into(), "cluster.local".into()],
        hostname: "fuzz".into(),
        mtu: 1480,
        extra: ExtraOptions {
            boot_file_name: Some("pxelinux.0".into()),
            tftp_server_name: None,
            ntp_servers: vec![Ipv4Addr::new(10, 0, 0, 123)],
            private: vec![(240, b"private".to_vec())],
        },
    }
}

/// One to five random edits of `input`: cut short, a token from `splices`
/// or random bytes put in, a byte overwritten (at random or with a value
/// at a limit), a run of bytes taken out.
fn mangle(input: &[u8], splices: &[&[u8]], rng: &mut Rng) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..=rng.below(4) {
        let at = rng.below(out.len() + 1);
        match rng.below(4) {
            0 => out.truncate(at),
            1 => {
                let put: Vec<u8> = if splices.is_empty() || rng.below(2) == 0 {
                    (0..rng.below(64)).map(|_| rng.byte()).collect()
                } else {
                    rng.pick(splices).to_vec()
                };
                out.splice(at..at, put);
            }
            2 if at < out.len() => {
                let random = rng.byte();
                out[at] = *rng.pick(&[random, random, 0, 1, 0x7f, 0x80, 0xfe, 0xff]);
            }
            _ => {
                let end = (at + rng.below(16)).min(out.len());
                out.drain(at..end);
            }
        }
    }
    out
}

/// Lengths and counts at their limits, put into datagrams.
const DATAGRAM_SPLICES: [&[u8]; 5] = [&[0], &[0xff], &[0, 0], &[0xff, 0xff], &[0xff; 4]];

/// Feeds `check` 20,000 datagrams a round: mangled copies of `valid`, and
/// one in ten random bytes up to `random_max` long.
fn fuzz_datagrams(
    rng: &mut Rng,
    valid: &[Vec<u8>],
    random_max: usize,
    what: &str,
    check: impl Fn(&[u8]),
) {
    for _ in 0..20_000 * rounds() {
        let datagram: Vec<u8> = if rng.below(10) == 0 {
            (0..rng.below(random_max)).map(|_| rng.byte()).collect()
        } else {
            let base = rng.pick(valid);
            mangle(base, &DATAGRAM_SPLICES, rng)
        };
        no_panic(
            || format!("{what} datagram {datagram:02x?}"),
            || check(&datagram),
        );
    }
}

#[test]
fn the_guests_dhcp_datagrams_never_panic_the_server() {
    let mut rng = Rng(0x5eed_0004);
    let mac = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
    let answerer = Answerer::new(v4_lease(mac));
    let valid = [
        client_message(MessageType::Discover, mac, 7, &[]),
        client_message(
            MessageType::Request,
            mac,
            8,
            &[(50, vec![10, 0, 2, 2]), (54, vec![10, 0, 2, 1])],
        ),
        client_message(
            MessageType::Request,
            mac,
            9,
            &[
                (55, (1..=255).collect()),
                (61, vec![1, 0x52, 0x54, 0, 0x12, 0x34, 0x56]),
            ],
        ),
    ];
    // The valid ones are answered: the mangled ones start from real packets.
    for datagram in &valid {
        let outcome = answerer.answer(datagram);
        assert!(matches!(outcome, Outcome::Reply { .. }), "{outcome:?}");
    }
    fuzz_datagrams(&mut rng, &valid, 600, "DHCP", |datagram| {
        let _ = answerer.answer(datagram);
    });
}

#[test]
fn the_guests_dhcpv6_datagrams_never_panic_the_server() {
    let mut rng = Rng(0x5eed_0005);
    let lease = V6Lease {
        address: Ipv6Addr::new(0xfd10, 0, 2, 0, 0, 0, 0, 2),
        server_mac: [2, 0, 0, 0, 0, 1],
        dns_servers: vec![Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x10)],
        search_domains: vec!["cluster.local".into()],
    };
    let option = |code: u16, value: &[u8]| {
        let mut out = code.to_be_bytes().to_vec();
        out.extend_from_slice(&u16::try_from(value.len()).unwrap_or(u16::MAX).to_be_bytes());
        out.extend_from_slice(value);
        out
    };
    let message = |kind: u8, options: &[Vec<u8>]| {
        let mut out = vec![kind, 0xab, 0xcd, 0xef];
        for o in options {
            out.extend_from_slice(o);
        }
        out
    };
    let client_id = option(1, &[0, 3, 0, 1, 0x52, 0x54, 0, 1, 2, 3]);
    let server_id = option(2, &[0, 3, 0, 1, 2, 0, 0, 0, 0, 1]);
    let ia_na = option(3, &[0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0]);
    let valid = [
        // SOLICIT, SOLICIT with rapid commit, REQUEST, RENEW, INFORMATION-REQUEST.
        message(1, &[client_id.clone(), ia_na.clone()]),
        message(1, &[client_id.clone(), ia_na.clone(), option(14, &[])]),
        message(3, &[client_id.clone(), server_id.clone(), ia_na.clone()]),
        message(5, &[client_id.clone(), server_id.clone(), ia_na.clone()]),
        message(11, &[client_id.clone(), option(6, &[0, 23, 0, 24])]),
    ];
    for datagram in &valid {
        if let Err(e) = dhcpv6::answer(&lease, datagram) {
            panic!("a valid message {datagram:02x?} is refused: {e}");
        }
    }
    fuzz_datagrams(&mut rng, &valid, 300, "DHCPv6", |datagram| {
        let _ = dhcpv6::answer(&lease, datagram);
        let _ = virt_launcher::network::ra::is_solicitation(datagram);
    });
}

#[test]
fn mangled_domain_xml_is_read_or_refused() {
    let mut rng = Rng(0x5eed_0006);
    let splices: [&str; 14] = [
        "<",
        ">",
        "/>",
        "</domain>",
        "&",
        "&amp;",
        "&#xffffff;",
        "\"",
        "<![CDATA[x]]>",
        "<!--",
        "<disk type='file' device='disk'>",
        "<target dev='vda' bus='virtio'/>",
        " unit='Ei'",
        "99999999999999999999",
    ];
    let (mut read, mut refused) = (0usize, 0usize);
    for (stem, path) in files_with_ext(GOLDEN_DIR, "xml") {
        let golden = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{stem}: {e}"));
        assert!(
            Domain::from_xml(&golden).is_ok(),
            "{stem}: the golden XML is refused"
        );
        for _ in 0..200 * rounds() {
            let mut xml = golden.clone();
            for _ in 0..=rng.below(3) {
                let mut at = rng.below(xml.len() + 1);
                while !xml.is_char_boundary(at) {
                    at -= 1;
                }
                let end = (at + rng.below(40)).min(xml.len());
                let end = (end..=xml.len())
                    .find(|&i| xml.is_char_boundary(i))
                    .unwrap_or(at);
                match rng.below(3) {
                    0 => xml.replace_range(at..end, ""),
                    1 => {
                        let splice: &&str = rng.pick(&splices);
                        xml.insert_str(at, splice);
                    }
                    // A number or name somewhere replaced by another.
                    _ => {
                        let other: &&str = rng.pick(&["0", "-1", "4294967296", "x"]);
                        xml.replace_range(at..end, other);
                    }
                }
            }
            no_panic(
                || format!("{stem}.xml mangled into {xml}"),
                || match Domain::from_xml(&xml) {
                    Ok(_) => read += 1,
                    Err(_) => refused += 1,
                },
            );
        }
    }
    eprintln!("mangled domain XML: {read} read, {refused} refused");
    assert!(
        read > 100 && refused > 100,
        "{read} read, {refused} refused"
    );
}

#[test]
fn any_volume_files_become_an_image_or_a_clear_refusal() {
    let mut rng = Rng(0x5eed_0007);
    let good = [
        "user-data",
        "meta-data",
        "network-config",
        "openstack",
        "latest",
        "a",
        "A",
        ".hidden",
        "ünïcödé",
        "☃",
        "CaSe",
        "case",
        "name.with.many.dots.txt",
        "12345678.123",
    ];
    let bad = [
        "..",
        ".",
        "",
        "trailing.",
        "😀",
        "x:y",
        "back\\slash",
        "semi;colon",
        "tab\there",
        "very-long-name-that-goes-on-and-on-past-the-joliet-limit-of-sixty-four-characters",
    ];
    let labels = [
        "cidata",
        "config-2",
        "",
        "a label",
        "x".repeat(33).leak(),
        "ünï",
        "cfg+1.0",
    ];
    let (mut written, mut refused) = (0usize, 0usize);
    for _ in 0..1500 * rounds() {
        let files: Vec<IsoFile> = (0..rng.below(12))
            .map(|_| {
                let deepest = if rng.below(10) == 0 { 10 } else { 4 };
                let depth = 1 + rng.below(deepest);
                let path: Vec<&str> = (0..depth)
                    .map(|_| {
                        if rng.below(25) == 0 {
                            *rng.pick(&bad)
                        } else {
                            *rng.pick(&good)
                        }
                    })
                    .collect();
                let len = *rng.pick(&[0usize, 1, 2047, 2048, 2049, 5000]);
                IsoFile {
                    path: path.join("/"),
                    data: (0..len).map(|_| rng.byte()).collect(),
                }
            })
            .collect();
        let label = *rng.pick(&labels);
        let shown: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        no_panic(
            || format!("an image labelled {label:?} of {shown:?}"),
            || {
                let mut image = Vec::new();
                match write_iso(&mut image, label, &files) {
                    Ok(()) => {
                        assert_eq!(image.len() % 2048, 0, "not whole sectors");
                        written += 1;
                    }
                    Err(e) => {
                        assert!(!e.to_string().is_empty());
                        refused += 1;
                    }
                }
            },
        );
    }
    eprintln!("volume images: {written} written, {refused} refused");
    assert!(
        written > 100 && refused > 100,
        "{written} written, {refused} refused"
    );
}

/// A VMIRequest with every option set, as virt-handler's sync sends.
fn full_vmi_request() -> VmiRequest {
    let cell = Cell {
        id: 1,
        memory: Some(Memory {
            amount: 1 << 20,
            unit: "KiB".into(),
        }),
        pages: vec![Pages {
            count: 512,
            unit: "KiB".into(),
            size: 2048,
        }],
        distances: vec![Sibling { id: 0, value: 21 }, Sibling { id: 1, value: 10 }],
        cpus: vec![Cpu {
            id: 3,
            siblings: vec![3, 7],
        }],
    };
    VmiRequest {
        vmi: Some(Vmi {
            vmi_json: br#"{"metadata":{"name":"vmi1"},"spec":{"domain":{"devices":{}}}}"#.to_vec(),
        }),
        options: Some(VirtualMachineOptions {
            virtual_machine_smbios: Some(Smbios {
                manufacturer: "KubeVirt".into(),
                family: "KubeVirt".into(),
                ..Smbios::default()
            }),
            mem_balloon_stats_period: 10,
            preallocated_volumes: vec!["disk0".into()],
            topology: Some(Topology {
                numa_cells: vec![cell.clone(), cell],
            }),
            disks_info: [(
                "disk0".to_string(),
                DiskInfo {
                    format: "qcow2".into(),
                    backing_file: "/base.img".into(),
                    actual_size: 1 << 20,
                    virtual_size: 1 << 30,
                },
            )]
            .into(),
            cluster_config: Some(ClusterConfig {
                free_page_reporting_disabled: true,
                ..ClusterConfig::default()
            }),
            interface_domain_attachment: [("default".to_string(), "tap".to_string())].into(),
            interface_migration: [(
                "default".to_string(),
                InterfaceBindingMigration {
                    method: "link-refresh".into(),
                },
            )]
            .into(),
            plugins_json: b"{}".to_vec(),
            grace_host_device_aliases: vec!["gpu0".into()],
            ..VirtualMachineOptions::default()
        }),
    }
}

/// Protobuf's hard cases: an 11-byte varint, a length of 2^64 - 1, a
/// group, wire types 6 and 7, field number 0, a string field holding a
/// varint, a run of nested empty messages, bytes that are not UTF-8.
const PROTOBUF_SPLICES: [&[u8]; 10] = [
    &[
        0x10, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00,
    ],
    &[
        0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
    ],
    &[0x0b, 0x08, 0x01, 0x0c],
    &[0x0e],
    &[0x0f],
    &[0x00, 0x01],
    &[0x0a, 0x02, 0x08, 0x01],
    &[0x22, 0x06, 0x0a, 0x04, 0x0a, 0x02, 0x0a, 0x00],
    &[0xff, 0xfe, 0xc3, 0x28],
    &[0x82, 0x01, 0x00],
];

#[test]
fn mangled_grpc_requests_decode_or_fail_cleanly() {
    let mut rng = Rng(0x5eed_0008);
    let valid: Vec<CmdRequest> = vec![
        CmdRequest::SyncVirtualMachine(full_vmi_request()),
        CmdRequest::FreezeVirtualMachine(FreezeRequest {
            vmi: full_vmi_request().vmi,
            unfreeze_timeout_seconds: -1,
        }),
        CmdRequest::MigrateVirtualMachine(MigrationRequest {
            vmi: full_vmi_request().vmi,
            options: br#"{"Bandwidth":"64Mi"}"#.to_vec(),
        }),
        CmdRequest::Exec(ExecRequest {
            domain_name: "default_vmi1".into(),
            command: "/bin/echo".into(),
            args: vec!["a b".into(), String::new()],
            timeout_seconds: 10,
        }),
        CmdRequest::GetVMStats(VmStatsRequest {
            domain_stats: Some(Default::default()),
            guest_get_memory_blocks: Some(Default::default()),
            ..VmStatsRequest::default()
        }),
    ];
    let valid_bytes: Vec<Vec<u8>> = valid.iter().map(CmdRequest::encode).collect();
    for (request, bytes) in valid.iter().zip(&valid_bytes) {
        assert_eq!(
            CmdRequest::decode(request.method(), bytes).as_ref(),
            Ok(request)
        );
    }
    // The shapes the reader must refuse, each on its own.
    for (splice, kind) in [
        (0, DecodeErrorKind::VarintOverflow),
        (
            1,
            DecodeErrorKind::LengthPastEnd {
                length: u64::MAX,
                left: 0,
            },
        ),
        (2, DecodeErrorKind::UnsupportedWireType(3)),
        (4, DecodeErrorKind::UnsupportedWireType(7)),
        (5, DecodeErrorKind::InvalidFieldNumber(0)),
    ] {
        let mut bytes = valid_bytes[0].clone();
        bytes.extend_from_slice(PROTOBUF_SPLICES[splice]);
        let error = CmdRequest::decode(CmdMethod::SyncVirtualMachine, &bytes).unwrap_err();
        assert_eq!(error.kind, kind, "{error}");
    }
    let (mut decoded, mut refused) = (0usize, 0usize);
    for _ in 0..20_000 * rounds() {
        // Mostly the method the bytes were made for, else any of them.
        let base = rng.below(valid.len());
        let method = if rng.below(2) == 0 {
            valid[base].method()
        } else {
            *rng.pick(CmdMethod::ALL)
        };
        let bytes: Vec<u8> = if rng.below(10) == 0 {
            (0..rng.below(200)).map(|_| rng.byte()).collect()
        } else {
            mangle(&valid_bytes[base], &PROTOBUF_SPLICES, &mut rng)
        };
        no_panic(
            || format!("{method:?} request {bytes:02x?}"),
            || match CmdRequest::decode(method, &bytes) {
                // What decodes survives its own round trip: nothing read
                // is lost or changed on the way to the manager.
                Ok(request) => {
                    decoded += 1;
                    assert_eq!(CmdRequest::decode(method, &request.encode()), Ok(request));
                }
                Err(error) => {
                    refused += 1;
                    assert!(error.to_string().starts_with("protobuf "), "{error}");
                }
            },
        );
        // The launcher reads the notify server's answers too.
        no_panic(
            || format!("notify response {bytes:02x?}"),
            || {
                let _ = NotifyResponse::decode(&bytes);
            },
        );
    }
    eprintln!("mangled gRPC requests: {decoded} decoded, {refused} refused");
    assert!(
        decoded > 1000 && refused > 1000,
        "{decoded} decoded, {refused} refused"
    );
}

/// Numbers at and past the edges of every integer type, in every shape a
/// JSON number or a Kubernetes quantity can take.
fn extreme_numbers() -> Vec<Value> {
    let mut out: Vec<Value> = [
        0i64,
        1,
        -1,
        2,
        223,
        224,
        254,
        255,
        4095,
        4096,
        4097,
        16_383,
        16_384,
        65_535,
        65_536,
        315_360_000,
        315_360_001,
        3_155_760_000,
        3_155_760_001,
        -3_155_760_000,
        -3_155_760_001,
        4_294_967_295,
        4_294_967_296,
        i64::from(i32::MIN),
        i64::MAX,
        i64::MIN,
    ]
    .into_iter()
    .map(Value::from)
    .collect();
    out.push(json!(u64::MAX));
    out.extend([1e308, -1e308, 0.5, 1.5, 4096.0, -0.0].map(|f| json!(f)));
    out.extend(
        [
            "1",
            "0",
            "-1",
            "1e400",
            "1e-400",
            "18446744073709551616Ki",
            "99999999999Ei",
            "9223372036854775807",
            "9223372036854775808",
            "-5Gi",
            "0.000001m",
            "100m",
            "4Pi",
            "4097",
            "8Ei",
            "1Mi",
            "2Mi",
            "1Gi",
            "",
        ]
        .map(|s| json!(s)),
    );
    out.push(Value::Null);
    out
}

/// One row of docs/vmi.md's "Numbers" table.
struct DocumentedNumber {
    /// `spec.domain.devices.interfaces[].acpiIndex`
    field: String,
    /// The whole-number range, when the row gives one ("0 to 16383").
    range: Option<(i128, i128)>,
    /// A Kubernetes quantity (a string such as "1Gi"), not a plain integer.
    quantity: bool,
}

fn documented_numbers() -> Vec<DocumentedNumber> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/vmi.md");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let section = text
        .split("\n## Numbers\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("docs/vmi.md has a Numbers section");
    section
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            let field = cells[0].trim_matches('`').to_string();
            let range = cells[1].split_once(" to ").and_then(|(a, b)| {
                Some((
                    a.trim().parse::<i128>().ok()?,
                    b.trim().parse::<i128>().ok()?,
                ))
            });
            DocumentedNumber {
                field,
                range,
                quantity: cells
                    .get(2)
                    .is_some_and(|notes| notes.starts_with("a quantity")),
            }
        })
        .collect()
}

/// A VMI that reaches every field of the Numbers table (each list's first
/// element), valid as it is; `volume` is the first volume.
fn numbers_vmi(volume: Value) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "numbers", "namespace": "default", "uid": "0c0f4a3e-5b1d-4f6a-9d2e-7a8b9c0d1e2f"},
        "spec": {
            "terminationGracePeriodSeconds": 30,
            "domain": {
                "cpu": {"sockets": 1, "cores": 1, "threads": 1, "maxSockets": 2},
                "memory": {"guest": "128Mi", "maxGuest": "256Mi"},
                "resources": {
                    "requests": {"memory": "128Mi", "cpu": "1"},
                    "limits": {"memory": "128Mi", "cpu": "1"}
                },
                "clock": {"utc": {"offsetSeconds": 0}},
                "features": {"hyperv": {"spinlocks": {"spinlocks": 8191}}},
                "ioThreads": {"supplementalPoolThreadCount": 1},
                "devices": {
                    "disks": [{
                        "name": "vol",
                        "disk": {"bus": "virtio"},
                        "bootOrder": 1,
                        "blockSize": {"custom": {"logical": 512, "physical": 4096}}
                    }],
                    "interfaces": [{
                        "name": "default",
                        "masquerade": {},
                        "bootOrder": 2,
                        "acpiIndex": 1,
                        "ports": [{"port": 80}],
                        "portRanges": [{"protocol": "TCP", "start": 1000, "end": 2000}],
                        "dhcpOptions": {"privateOptions": [{"option": 240, "value": "x"}]}
                    }]
                }
            },
            "networks": [{"name": "default", "pod": {}}],
            "volumes": [volume]
        }
    })
}

/// Sets `field` (`a.b[].c`, each `[]` the list's first element) to `value`,
/// creating the objects on the way.
fn set_field(doc: &mut Value, field: &str, value: Value) {
    let mut at = doc;
    for part in field.split('.') {
        let (name, first) = match part.strip_suffix("[]") {
            Some(name) => (name, true),
            None => (part, false),
        };
        if !at.is_object() {
            *at = json!({});
        }
        at = &mut at[name];
        if first {
            at = &mut at[0];
        }
    }
    *at = value;
}

/// Parses, converts and plans the pod networking of `doc`, as `sync` does
/// before libvirt sees it; Ok when all of them accept it.
fn sync_checks(doc: &Value) -> Result<(), String> {
    let vmi = parse_vmi(doc).map_err(|e| e.to_string())?;
    convert(&vmi, &example_context(&vmi, DomainType::Kvm)).map_err(|e| e.to_string())?;
    let (interfaces, networks) = (&vmi.spec.domain.devices.interfaces, &vmi.spec.networks);
    virt_launcher::network::plan::plan(&vmi, interfaces, networks, |_| 1)
        .map_err(|e| format!("{}: {}", e.path, e.message))?;
    Ok(())
}

#[test]
fn every_number_of_a_vmi_at_its_extremes_is_in_its_documented_range_or_refused() {
    let rows = documented_numbers();
    assert!(rows.len() >= 20, "docs/vmi.md lists {} numbers", rows.len());
    let (mut accepted, mut refused) = (0usize, 0usize);
    for row in &rows {
        let volume = if row.field.contains("hostDisk") {
            json!({"name": "vol", "hostDisk": {"path": "/var/tmp/vl-numbers.img", "type": "DiskOrCreate", "capacity": "1Gi"}})
        } else {
            json!({"name": "vol", "emptyDisk": {"capacity": "1Gi"}})
        };
        let base = numbers_vmi(volume);
        if let Err(e) = sync_checks(&base) {
            panic!("the base VMI for {} is refused: {e}", row.field);
        }
        for value in extreme_numbers() {
            let mut doc = base.clone();
            set_field(&mut doc, &row.field, value.clone());
            let mut outcome = Err(String::new());
            no_panic(
                || format!("{} = {value}", row.field),
                || outcome = sync_checks(&doc),
            );
            let Ok(()) = outcome else {
                refused += 1;
                continue;
            };
            accepted += 1;
            if row.quantity || value.is_null() {
                continue;
            }
            // A plain integer field takes whole numbers in its range only.
            let whole = value
                .as_i64()
                .map(i128::from)
                .or(value.as_u64().map(i128::from));
            let Some(n) = whole else {
                panic!(
                    "{} accepted {value}, which is not a whole number",
                    row.field
                );
            };
            if let Some((least, most)) = row.range {
                assert!(
                    (least..=most).contains(&n),
                    "{} accepted {n}, outside its documented {least} to {most}",
                    row.field
                );
            }
        }
    }
    eprintln!("VMI numbers: {accepted} accepted, {refused} refused");
    assert!(
        accepted > 50 && refused > 200,
        "{accepted} accepted, {refused} refused"
    );
}

#[test]
fn every_numeric_flag_at_its_extremes_is_parsed_within_its_range_or_refused() {
    use virt_launcher::cli::subcommands::{SUBCOMMANDS, Subcommand};
    use virt_launcher::cli::{Action, FLAGS, FlagKind, parse};
    use virt_launcher::limits::{MAX_DURATION, later};
    let values = [
        "0",
        "-1",
        "1",
        "63",
        "64",
        "65536",
        "65537",
        "315360000",
        "315360001",
        "9223372036854775807",
        "18446744073709551615",
        "18446744073709551616",
        "99999999999999999999999999999999",
        "1e308",
        "1.5",
        "5000000000000000h",
        "18446744073709551615h",
        "18446744073709551615ms",
        "18446744073709551615s18446744073709551615h",
        "87600h",
        "87600h1ms",
        "1024MiB",
        "1025MiB",
        "18446744073709551615MiB",
        "18446744073709551615KiB",
        "",
        "-",
    ];
    let now = std::time::Instant::now();
    let durations_fit = |durations: &[std::time::Duration]| {
        for d in durations {
            assert!(*d <= MAX_DURATION, "{d:?} accepted");
            assert!(now.checked_add(*d).is_some());
            let _ = later(now, *d);
        }
    };
    for flag in FLAGS {
        if !matches!(flag.kind, FlagKind::Value { .. }) {
            continue;
        }
        for value in values {
            let argv = [
                "--name".to_string(),
                "a".to_string(),
                "--namespace".to_string(),
                "b".to_string(),
                format!("--{}={value}", flag.long),
            ];
            let mut outcome = None;
            no_panic(
                || format!("--{}={value}", flag.long),
                || outcome = Some(parse(argv.clone())),
            );
            if let Some(Ok(Action::Run(args))) = outcome {
                let mut durations = vec![
                    args.qemu_timeout,
                    args.agent_intervals.sys,
                    args.agent_intervals.file,
                    args.agent_intervals.user,
                    args.agent_intervals.version,
                    args.agent_intervals.fsfreeze,
                ];
                durations.extend(args.client_idle_timeout);
                durations.extend(
                    args.grace_period_seconds
                        .map(std::time::Duration::from_secs),
                );
                durations_fit(&durations);
                assert!((1..=65_536).contains(&args.max_clients));
                assert!((64..=1 << 30).contains(&args.max_line_bytes));
            }
        }
    }
    for sub in SUBCOMMANDS {
        for flag in sub.flags.iter().filter(|f| f.value.is_some()) {
            for value in values {
                let argv = [sub.name.to_string(), format!("--{}={value}", flag.long)];
                let mut outcome = None;
                no_panic(
                    || format!("{} --{}={value}", sub.name, flag.long),
                    || outcome = Some(parse(argv.clone())),
                );
                let target = match outcome {
                    Some(Ok(Action::Subcommand(
                        Subcommand::Probe(t) | Subcommand::Unfreeze(t),
                    ))) => t,
                    Some(Ok(Action::Subcommand(Subcommand::Ctl { target, .. }))) => target,
                    Some(Ok(Action::Subcommand(Subcommand::Freeze {
                        target,
                        unfreeze_timeout_seconds,
                    }))) => {
                        assert!(unfreeze_timeout_seconds <= 3600);
                        target
                    }
                    _ => continue,
                };
                durations_fit(&[target.timeout]);
            }
        }
    }
}

#[test]
fn every_whole_number_argument_at_its_extremes_is_parsed_or_refused() {
    let target = json!({"libvirt_uri": "qemu+unix:///system"});
    let cases = [
        ("query-domain", "max_age_ms", json!({})),
        ("query-stats", "max_age_ms", json!({})),
        ("guest-ping", "timeout_seconds", json!({})),
        ("guest-exec", "timeout_seconds", json!({"command": "x"})),
        ("freeze", "unfreeze_timeout_seconds", json!({})),
        ("migrate", "bandwidth_mib_per_s", json!({"target": target})),
        (
            "migrate",
            "completion_timeout_per_gib",
            json!({"target": target}),
        ),
        ("migrate", "progress_timeout", json!({"target": target})),
        ("migrate", "max_downtime_ms", json!({"target": target})),
    ];
    for (command, name, base) in cases {
        for value in extreme_numbers() {
            let Value::Object(mut arguments) = base.clone() else {
                unreachable!("the bases are objects")
            };
            arguments.insert(name.to_string(), value.clone());
            no_panic(
                || format!("{command} with {name} = {value}"),
                || {
                    let _ = Command::parse(command, arguments);
                },
            );
        }
    }
}
