//! The wire backend against a fake libvirtd on a unix socket: the opening
//! handshake, arguments, events, error kinds, bad bytes, keepalive and
//! reconnection.

use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, unbounded};
use serde_json::json;

use super::*;
use crate::hypervisor::DomainState;
use crate::hypervisor::wire::codec::{Header, MessageStatus, MessageType, UUID_BYTES};
use crate::hypervisor::wire::fake::{FakeDaemon, Received};
use crate::hypervisor::wire::procedures::errors;
use crate::scratch::ScratchDir;

/// One connection's view, for the handler.
struct Session {
    daemon: FakeDaemon,
    /// 0 for the first connection, 1 for the next...
    number: usize,
}

enum Flow {
    Continue,
    Close,
}

/// Every call received: (connection, procedure, payload).
type CallLog = Arc<Mutex<Vec<(usize, i32, Vec<u8>)>>>;

type Handler = dyn Fn(&mut Session, &Received) -> Flow + Send + Sync;

struct FakeLibvirtd {
    /// Holds the socket; removed when the fake is dropped.
    _dir: ScratchDir,
    socket: PathBuf,
    calls: CallLog,
}

impl FakeLibvirtd {
    /// Serves connections; `answer_pings` false makes a daemon that stops
    /// answering keepalives after the handshake.
    fn start(answer_pings: bool, handler: Arc<Handler>) -> FakeLibvirtd {
        let dir = ScratchDir::new("wire");
        let socket = dir.join("libvirt-sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let recorded = calls.clone();
        std::thread::spawn(move || {
            for (number, stream) in listener.incoming().enumerate() {
                let Ok(stream) = stream else { return };
                let handler = handler.clone();
                let recorded = recorded.clone();
                std::thread::spawn(move || {
                    let mut session = Session {
                        daemon: FakeDaemon::new(stream),
                        number,
                    };
                    let mut registered = 0;
                    while let Some(frame) = session.daemon.read() {
                        if frame.header.program == proc::KEEPALIVE.number {
                            if frame.header.procedure == 1 && (answer_pings || registered < 5) {
                                session.daemon.keepalive(2);
                            }
                            continue;
                        }
                        recorded.lock().unwrap().push((
                            number,
                            frame.header.procedure,
                            frame.payload.clone(),
                        ));
                        if frame.header.procedure == 316 {
                            registered += 1;
                        }
                        if let Flow::Close = handler(&mut session, &frame) {
                            return;
                        }
                    }
                });
            }
        });
        FakeLibvirtd {
            _dir: dir,
            socket,
            calls,
        }
    }

    fn uri(&self) -> String {
        format!("test+unix:///default?socket={}", self.socket.display())
    }

    fn procedures(&self, connection: usize) -> Vec<i32> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(c, _, _)| *c == connection)
            .map(|(_, p, _)| *p)
            .collect()
    }

    fn payload_of(&self, procedure: i32) -> Vec<u8> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|(_, p, _)| *p == procedure)
            .map(|(_, _, payload)| payload.clone())
            .unwrap_or_else(|| panic!("procedure {procedure} never called"))
    }
}

fn enc(f: impl FnOnce(&mut Encoder)) -> Vec<u8> {
    let mut e = Encoder::new();
    f(&mut e);
    e.into_bytes()
}

const OUR_DOMAIN: &str = "default_demo";

fn dom(name: &str) -> DomainRef {
    DomainRef {
        name: name.to_string(),
        uuid: [0xab; UUID_BYTES],
        id: 3,
    }
}

/// Answers the opening handshake and the domain lookup like libvirtd's
/// test driver; true when it answered.
fn standard(s: &mut Session, call: &Received) -> bool {
    let h = &call.header;
    let reply = match h.procedure {
        66 => enc(|e| {
            e.u32(1).u32(auth::NONE);
        }),
        60 => enc(|e| {
            e.i32(1);
        }),
        1 | 360 => Vec::new(),
        3 => enc(|e| {
            e.string("TEST");
        }),
        157 => enc(|e| {
            e.u64(9_000_000);
        }),
        4 => enc(|e| {
            e.u64(2);
        }),
        316 => enc(|e| {
            e.i32(1);
        }),
        23 => {
            let mut d = Decoder::new(&call.payload);
            let name = d.string().unwrap();
            if name != OUR_DOMAIN {
                s.daemon.reply_error(
                    h,
                    errors::NO_DOMAIN,
                    &format!("Domain not found: no domain with matching name '{name}'"),
                );
                return true;
            }
            enc(|e| dom(&name).encode(e))
        }
        _ => return false,
    };
    s.daemon.reply(h, &reply);
    true
}

fn handler(f: impl Fn(&mut Session, &Received) -> Flow + Send + Sync + 'static) -> Arc<Handler> {
    Arc::new(f)
}

fn quick() -> ClientOptions {
    ClientOptions {
        keepalive_interval: Duration::from_millis(100),
        keepalive_count: 3,
        write_timeout: Duration::from_secs(5),
    }
}

fn connect(fake: &FakeLibvirtd) -> (WireHypervisor, Receiver<HypervisorEvent>) {
    let (tx, rx) = unbounded();
    let hv = WireHypervisor::connect_with(
        &fake.uri(),
        OUR_DOMAIN,
        tx.into(),
        &Environment::of_this_process(),
        quick(),
    )
    .unwrap();
    (hv, rx)
}

#[test]
fn opening_speaks_libvirts_handshake_and_reads_the_facts() {
    let fake = FakeLibvirtd::start(
        true,
        handler(|s, call| {
            standard(s, call);
            Flow::Continue
        }),
    );
    let (hv, _rx) = connect(&fake);
    assert_eq!(
        fake.procedures(0),
        [66, 60, 1, 60, 60, 360, 3, 157, 316, 316, 316, 316, 316, 316]
    );
    let calls = fake.calls.lock().unwrap().clone();
    let feature = |i: usize| Decoder::new(&calls[i].2).i32().unwrap();
    assert_eq!(
        [feature(1), feature(3), feature(4)],
        [
            features::PROGRAM_KEEPALIVE,
            features::REMOTE_EVENT_CALLBACK,
            features::REMOTE_CLOSE_CALLBACK
        ]
    );
    // The daemon is asked to open the URI without our socket parameter.
    let mut d = Decoder::new(&calls[2].2);
    assert_eq!(d.opt_string().unwrap().as_deref(), Some("test:///default"));
    assert_eq!(d.u32().unwrap(), 0);
    // Every event the launcher uses, for any domain.
    let registered: Vec<(i32, bool)> = calls[8..]
        .iter()
        .map(|(_, _, p)| {
            let mut d = Decoder::new(p);
            (d.i32().unwrap(), d.pointer().unwrap())
        })
        .collect();
    assert_eq!(
        registered,
        [
            (0, false),
            (1, false),
            (15, false),
            (19, false),
            (18, false),
            (21, false)
        ]
    );
    let info = hv.info();
    assert_eq!(info.driver, DriverKind::Test);
    assert_eq!(info.backend, "wire");
    assert_eq!(info.library_version, None);
    assert_eq!(info.daemon_version, "9.0.0");
    assert_eq!(info.uri, fake.uri());
    assert!(hv.is_connected());
}

#[test]
fn calls_send_what_libvirts_client_sends() {
    let fake = FakeLibvirtd::start(
        true,
        handler(|s, call| {
            if !standard(s, call) {
                let reply = match call.header.procedure {
                    305 => enc(|e| {
                        e.opaque(&[]);
                    }),
                    344 => enc(|e| {
                        e.u32(1);
                        dom(OUR_DOMAIN).encode(e);
                        e.typed_params(&[TypedParam::ullong("cpu.time", 5)]);
                    }),
                    420 => enc(|e| {
                        e.i32(0);
                    }),
                    _ => Vec::new(),
                };
                s.daemon.reply(&call.header, &reply);
            }
            Flow::Continue
        }),
    );
    let (hv, _rx) = connect(&fake);
    hv.migrate(
        OUR_DOMAIN,
        &MigrationRequest {
            target_uri: "qemu+unix:///system?socket=/t/sock".into(),
            migration_uri: Some("unix:///t/mig".into()),
            dest_xml: Some("<domain/>".into()),
            bandwidth_mib_per_s: Some(64),
            disks_uri: None,
            block_disks: vec!["vda".into(), "vdb".into()],
            auto_converge: true,
            post_copy: false,
            unsafe_migration: false,
            parallel_connections: Some(8),
            compression: Some("zstd".into()),
        },
    )
    .unwrap();
    let payload = fake.payload_of(305);
    let mut d = Decoder::new(&payload);
    assert_eq!(decode_domain(&mut d).unwrap(), dom(OUR_DOMAIN));
    assert_eq!(
        d.opt_string().unwrap().as_deref(),
        Some("qemu+unix:///system?socket=/t/sock")
    );
    assert_eq!(
        d.typed_params(64).unwrap(),
        vec![
            ("migrate_uri".to_string(), json!("unix:///t/mig")),
            ("destination_xml".to_string(), json!("<domain/>")),
            ("persistent_xml".to_string(), json!("<domain/>")),
            ("bandwidth".to_string(), json!(64)),
            ("migrate_disks".to_string(), json!("vda")),
            ("migrate_disks".to_string(), json!("vdb")),
            ("parallel.connections".to_string(), json!(8)),
            ("compression".to_string(), json!("zstd")),
        ]
    );
    assert_eq!(d.opaque(16).unwrap(), b"");
    // LIVE, PEER2PEER, PERSIST_DEST, NON_SHARED_INC, AUTO_CONVERGE,
    // COMPRESSED, PARALLEL.
    assert_eq!(d.u32().unwrap(), 1 | 2 | 8 | 128 | 8192 | 2048 | 131072);
    d.finish().unwrap();

    assert_eq!(
        hv.stats(OUR_DOMAIN).unwrap(),
        vec![("cpu.time".to_string(), json!(5))]
    );
    let payload = fake.payload_of(344);
    let mut d = Decoder::new(&payload);
    assert_eq!(d.u32().unwrap(), 1);
    assert_eq!(decode_domain(&mut d).unwrap().name, OUR_DOMAIN);
    // State, CPU, balloon, vCPU, interface, block and, as KubeVirt asks,
    // the dirty rate; NOWAIT.
    assert_eq!(d.u32().unwrap(), 63 | 512);
    assert_eq!(d.u32().unwrap(), 1 << 29);

    hv.sync_guest_time(OUR_DOMAIN, Duration::from_secs(7))
        .unwrap();
    // The agent response timeout first, then the time.
    let payload = fake.payload_of(420);
    let mut d = Decoder::new(&payload);
    decode_domain(&mut d).unwrap();
    assert_eq!((d.i32().unwrap(), d.u32().unwrap()), (7, 0));
    let payload = fake.payload_of(338);
    let mut d = Decoder::new(&payload);
    decode_domain(&mut d).unwrap();
    let seconds = d.i64().unwrap();
    let now = i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap();
    assert!((now - seconds).abs() < 5);
    assert!(d.u32().unwrap() < 1_000_000_000);
}

#[test]
fn device_and_vcpu_calls_send_the_xml_count_and_affect_flags() {
    let fake = FakeLibvirtd::start(
        true,
        handler(|s, call| {
            if !standard(s, call) {
                s.daemon.reply(&call.header, &[]);
            }
            Flow::Continue
        }),
    );
    let (hv, _rx) = connect(&fake);
    let disk = "<disk type='file' device='disk'><alias name='ua-hp1'/></disk>";
    hv.attach_device(OUR_DOMAIN, disk, Affect::LIVE_AND_CONFIG)
        .unwrap();
    hv.detach_device(OUR_DOMAIN, disk, Affect::LIVE).unwrap();
    hv.update_device(OUR_DOMAIN, "<memory model='virtio-mem'/>", Affect::LIVE)
        .unwrap();
    for (procedure, xml, flags) in [
        (160, disk, 3),
        (161, disk, 1),
        (174, "<memory model='virtio-mem'/>", 1),
    ] {
        let payload = fake.payload_of(procedure);
        let mut d = Decoder::new(&payload);
        assert_eq!(decode_domain(&mut d).unwrap(), dom(OUR_DOMAIN));
        assert_eq!(d.string().unwrap(), xml, "procedure {procedure}");
        assert_eq!(d.u32().unwrap(), flags, "procedure {procedure}");
        d.finish().unwrap();
    }
    hv.set_vcpus(OUR_DOMAIN, 2, Affect::LIVE_AND_CONFIG)
        .unwrap();
    let payload = fake.payload_of(199);
    let mut d = Decoder::new(&payload);
    decode_domain(&mut d).unwrap();
    assert_eq!((d.u32().unwrap(), d.u32().unwrap()), (2, 3));
    d.finish().unwrap();
    let err = hv.attach_device("missing", disk, Affect::LIVE).unwrap_err();
    assert_eq!(err.kind, HypervisorErrorKind::NoDomain);
    assert_eq!(err.operation, "virDomainAttachDeviceFlags");
}

#[test]
fn the_domain_is_looked_up_once_and_again_when_redefined_with_another_uuid() {
    // The daemon's domain has UUID byte `uuid`; a call naming another
    // UUID finds no domain, as libvirt's drivers look domains up by UUID.
    let uuid = Arc::new(std::sync::atomic::AtomicU8::new(1));
    let current = uuid.clone();
    let fake = FakeLibvirtd::start(
        true,
        handler(move |s, call| {
            let h = &call.header;
            let ours = current.load(Ordering::SeqCst);
            match h.procedure {
                23 => {
                    let mut d = Decoder::new(&call.payload);
                    let name = d.string().unwrap();
                    if name == OUR_DOMAIN {
                        let dom = DomainRef {
                            name,
                            uuid: [ours; UUID_BYTES],
                            id: -1,
                        };
                        s.daemon.reply(h, &enc(|e| dom.encode(e)));
                        return Flow::Continue;
                    }
                }
                212 => {
                    let mut d = Decoder::new(&call.payload);
                    let dom = decode_domain(&mut d).unwrap();
                    if dom.uuid == [ours; UUID_BYTES] {
                        s.daemon.reply(
                            h,
                            &enc(|e| {
                                e.i32(5).i32(0);
                            }),
                        );
                    } else {
                        s.daemon.reply_error(
                            h,
                            errors::NO_DOMAIN,
                            "Domain not found: no domain with matching uuid",
                        );
                    }
                    return Flow::Continue;
                }
                _ => {}
            }
            if !standard(s, call) {
                s.daemon.reply(h, &[]);
            }
            Flow::Continue
        }),
    );
    let (hv, _rx) = connect(&fake);
    let lookups = || fake.procedures(0).iter().filter(|p| **p == 23).count();
    let shut_off = Some(DomainStatus::from_libvirt(5, 0));
    assert_eq!(hv.domain_status(OUR_DOMAIN).unwrap(), shut_off);
    assert_eq!(hv.domain_status(OUR_DOMAIN).unwrap(), shut_off);
    assert_eq!(lookups(), 1, "{:?}", fake.procedures(0));
    // Undefined and defined again with another UUID: the cached reference
    // finds nothing, and the call is made again on a fresh lookup.
    uuid.store(2, Ordering::SeqCst);
    assert_eq!(hv.domain_status(OUR_DOMAIN).unwrap(), shut_off);
    assert_eq!(lookups(), 2, "{:?}", fake.procedures(0));
    assert_eq!(hv.domain_status(OUR_DOMAIN).unwrap(), shut_off);
    assert_eq!(lookups(), 2);
    // Another name is looked up, and a domain that is not there is none.
    assert_eq!(hv.domain_status("someone_else").unwrap(), None);
}

#[test]
fn replies_decode_into_the_launchers_values() {
    let fake = FakeLibvirtd::start(
        true,
        handler(|s, call| {
            if standard(s, call) {
                return Flow::Continue;
            }
            let reply = match call.header.procedure {
                212 => enc(|e| {
                    e.i32(3).i32(1);
                }),
                14 => enc(|e| {
                    e.string("<domain type='test'/>");
                }),
                196 => enc(|e| dom(OUR_DOMAIN).encode(e)),
                298 => enc(|e| {
                    e.i32(3)
                        .typed_params(&[TypedParam::ullong("time_elapsed", 120)]);
                }),
                418 => enc(|e| {
                    e.typed_params(&[TypedParam::string("hostname", "guest")]);
                }),
                420 => enc(|e| {
                    e.i32(0);
                }),
                // The new checkpoint: its name and its domain.
                411 => enc(|e| {
                    e.string("c1");
                    dom(OUR_DOMAIN).encode(e);
                }),
                // Everything else is void.
                _ => Vec::new(),
            };
            s.daemon.reply(&call.header, &reply);
            Flow::Continue
        }),
    );
    let (hv, _rx) = connect(&fake);
    let status = hv.domain_status(OUR_DOMAIN).unwrap().unwrap();
    assert_eq!(status, DomainStatus::from_libvirt(3, 1));
    assert_eq!(status.state, DomainState::Paused);
    assert_eq!(hv.domain_status("someone_else").unwrap(), None);
    let (xml, uuid) = hv.domain_xml(OUR_DOMAIN).unwrap();
    assert_eq!(xml, "<domain type='test'/>");
    assert_eq!(uuid, "abababab-abab-abab-abab-abababababab");
    hv.start(OUR_DOMAIN, true).unwrap();
    let payload = fake.payload_of(196);
    let mut d = Decoder::new(&payload);
    decode_domain(&mut d).unwrap();
    assert_eq!(d.u32().unwrap(), 1, "START_PAUSED");
    assert_eq!(
        hv.job_stats(OUR_DOMAIN, true).unwrap(),
        vec![
            ("time_elapsed".to_string(), json!(120)),
            ("type".to_string(), json!(3)),
        ]
    );
    assert_eq!(
        hv.guest_info(OUR_DOMAIN, &[GuestInfoKind::Hostname])
            .unwrap(),
        vec![("hostname".to_string(), json!("guest"))]
    );
    // A checkpoint redefined: its XML and the REDEFINE|REDEFINE_VALIDATE
    // flags go out, and the checkpoint reference that comes back is read
    // whole.
    hv.checkpoint_create(OUR_DOMAIN, "<domaincheckpoint/>", true)
        .unwrap();
    let payload = fake.payload_of(411);
    let mut d = Decoder::new(&payload);
    assert_eq!(decode_domain(&mut d).unwrap(), dom(OUR_DOMAIN));
    assert_eq!(
        (d.string().unwrap(), d.u32().unwrap()),
        ("<domaincheckpoint/>".to_string(), 1 | 4)
    );
    d.finish().unwrap();
    // The guest info call alone does not set the agent response timeout.
    assert!(!fake.procedures(0).contains(&420));
    hv.set_agent_timeout(OUR_DOMAIN, Duration::from_secs(5))
        .unwrap();
    let payload = fake.payload_of(420);
    let mut d = Decoder::new(&payload);
    assert_eq!(decode_domain(&mut d).unwrap(), dom(OUR_DOMAIN));
    assert_eq!((d.i32().unwrap(), d.u32().unwrap()), (5, 0));
    d.finish().unwrap();
    for (result, procedure) in [
        (hv.suspend(OUR_DOMAIN), 34),
        (hv.resume(OUR_DOMAIN), 28),
        (hv.reset(OUR_DOMAIN), 245),
        (hv.abort_job(OUR_DOMAIN), 164),
        (hv.undefine(OUR_DOMAIN), 231),
        (hv.destroy(OUR_DOMAIN, true), 234),
        (hv.shutdown_acpi(OUR_DOMAIN), 258),
        (hv.reboot(OUR_DOMAIN, RebootMode::Acpi), 27),
        (hv.migrate_set_max_downtime(OUR_DOMAIN, 300), 166),
        (hv.migrate_start_post_copy(OUR_DOMAIN), 364),
    ] {
        assert_eq!(result, Ok(()), "procedure {procedure}");
        assert!(fake.procedures(0).contains(&procedure), "{procedure}");
    }
    // The test driver: no NVRAM or ACPI flags.
    let payload = fake.payload_of(231);
    let mut d = Decoder::new(&payload);
    decode_domain(&mut d).unwrap();
    assert_eq!(d.u32().unwrap(), 0);
}

#[test]
fn the_agent_command_goes_to_the_qemu_program_with_its_timeout() {
    let fake = FakeLibvirtd::start(
        true,
        handler(|s, call| {
            if call.header.program == proc::QEMU.number {
                let mut d = Decoder::new(&call.payload);
                decode_domain(&mut d).unwrap();
                let cmd = d.string().unwrap();
                let timeout = d.i32().unwrap();
                let reply = if timeout == 7 {
                    enc(|e| {
                        e.opt_string(Some(&format!("{{\"return\":{cmd}}}")));
                    })
                } else {
                    enc(|e| {
                        e.opt_string(None);
                    })
                };
                s.daemon.reply(&call.header, &reply);
            } else {
                standard(s, call);
            }
            Flow::Continue
        }),
    );
    let (hv, _rx) = connect(&fake);
    let out = hv
        .agent_command(OUR_DOMAIN, "{}", Duration::from_secs(7))
        .unwrap();
    assert_eq!(out, "{\"return\":{}}");
    let err = hv
        .agent_command(OUR_DOMAIN, "{}", Duration::from_secs(1))
        .unwrap_err();
    assert_eq!(err.kind, HypervisorErrorKind::Other);
    assert_eq!(err.operation, "virDomainQemuAgentCommand");
}

#[test]
fn daemon_errors_keep_libvirts_kind_and_message() {
    let fake = FakeLibvirtd::start(
        true,
        handler(|s, call| {
            if standard(s, call) {
                return Flow::Continue;
            }
            let (code, message) = match call.header.procedure {
                34 => (
                    errors::OPERATION_INVALID,
                    "Requested operation is not valid: domain is not running",
                ),
                350 => (errors::INVALID_ARG, "invalid argument: bad XML"),
                // As libvirt's test driver answers (it has no agent to
                // wait for: setting the timeout is a no-op).
                420 => (
                    errors::NO_SUPPORT,
                    "this function is not supported by the connection driver: virDomainAgentSetResponseTimeout",
                ),
                418 => (
                    errors::AGENT_UNRESPONSIVE,
                    "Guest agent is not responding: QEMU guest agent is not connected",
                ),
                // A migration's link to the target failing is not our
                // connection failing.
                305 => (errors::RPC, "Unable to connect to the target"),
                _ => (1, "internal error"),
            };
            s.daemon.reply_error(&call.header, code, message);
            Flow::Continue
        }),
    );
    let (hv, _rx) = connect(&fake);
    let err = hv.suspend(OUR_DOMAIN).unwrap_err();
    assert_eq!(err.kind, HypervisorErrorKind::InvalidOperation);
    assert_eq!(err.operation, "virDomainSuspend");
    assert_eq!(
        err.message,
        "Requested operation is not valid: domain is not running"
    );
    let err = hv.define("<domain/>").unwrap_err();
    assert_eq!(err.kind, HypervisorErrorKind::InvalidDefinition);
    let err = hv.guest_info(OUR_DOMAIN, &[GuestInfoKind::Os]).unwrap_err();
    assert_eq!(err.kind, HypervisorErrorKind::AgentUnavailable);
    assert_eq!(
        hv.set_agent_timeout(OUR_DOMAIN, Duration::from_secs(5)),
        Ok(())
    );
    let err = hv.suspend("missing").unwrap_err();
    assert_eq!(err.kind, HypervisorErrorKind::NoDomain);
    assert_eq!(err.operation, "virDomainSuspend");
    let err = hv
        .migrate(OUR_DOMAIN, &MigrationRequest::default())
        .unwrap_err();
    assert_eq!(err.kind, HypervisorErrorKind::Other);
    assert!(hv.is_connected());
}

#[test]
fn our_domains_events_arrive_built_by_the_state_tables() {
    let fake = FakeLibvirtd::start(
        true,
        handler(|s, call| {
            standard(s, call);
            let registered = call.header.procedure == 316
                && Decoder::new(&call.payload).i32().unwrap() == event_ids::JOB_COMPLETED;
            if registered {
                let other = dom("default_other");
                let ours = dom(OUR_DOMAIN);
                s.daemon.event(
                    events::LIFECYCLE,
                    &enc(|e| {
                        e.i32(1);
                        other.encode(e);
                        e.i32(5).i32(1);
                    }),
                );
                s.daemon.event(999, &[0, 0, 0, 1]);
                s.daemon.event(events::LIFECYCLE, &[0, 0]);
                s.daemon.event(
                    events::LIFECYCLE,
                    &enc(|e| {
                        e.i32(1);
                        ours.encode(e);
                        e.i32(2).i32(0);
                    }),
                );
                s.daemon.event(
                    events::AGENT_LIFECYCLE,
                    &enc(|e| {
                        e.i32(4);
                        ours.encode(e);
                        e.i32(1).i32(2);
                    }),
                );
                s.daemon.event(
                    events::REBOOT,
                    &enc(|e| {
                        e.i32(2);
                        ours.encode(e);
                    }),
                );
                s.daemon.event(
                    events::DEVICE_REMOVED,
                    &enc(|e| {
                        e.i32(3);
                        ours.encode(e);
                        e.string("ua-disk1");
                    }),
                );
                s.daemon.event(
                    events::DEVICE_ADDED,
                    &enc(|e| {
                        e.i32(6);
                        ours.encode(e);
                        e.string("ua-hp1");
                    }),
                );
                s.daemon.event(
                    events::JOB_COMPLETED,
                    &enc(|e| {
                        e.i32(5);
                        ours.encode(e);
                        e.typed_params(&[TypedParam::ullong("downtime", 42)]);
                    }),
                );
                s.daemon.event(
                    events::CONNECTION_CLOSED,
                    &enc(|e| {
                        e.i32(1);
                    }),
                );
            }
            Flow::Continue
        }),
    );
    let (_hv, rx) = connect(&fake);
    let got: Vec<HypervisorEvent> = (0..7)
        .map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap())
        .collect();
    assert_eq!(
        got,
        vec![
            HypervisorEvent::Lifecycle(LifecycleEvent::from_libvirt(2, 0)),
            HypervisorEvent::AgentLifecycle(crate::hypervisor::AgentLifecycle {
                connected: true,
                reason: crate::hypervisor::AgentChannelReason::Channel,
            }),
            HypervisorEvent::Reboot,
            HypervisorEvent::DeviceRemoved {
                alias: "ua-disk1".into()
            },
            HypervisorEvent::DeviceAdded {
                alias: "ua-hp1".into()
            },
            HypervisorEvent::JobCompleted {
                stats: vec![("downtime".to_string(), json!(42))]
            },
            HypervisorEvent::ConnectionClosed {
                connection: crate::hypervisor::ConnectionId::FIRST,
                reason: LibvirtCloseReason::Eof
            },
        ]
    );
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
}

#[test]
fn an_undecodable_reply_fails_the_call_as_internal_and_keeps_the_connection() {
    let fake = FakeLibvirtd::start(
        true,
        handler(|s, call| {
            if !standard(s, call) {
                // GET_STATE answered with half an int.
                s.daemon.reply(&call.header, &[0, 0]);
            }
            Flow::Continue
        }),
    );
    let (hv, rx) = connect(&fake);
    let err = hv.domain_status(OUR_DOMAIN).unwrap_err();
    assert_eq!(err.kind, HypervisorErrorKind::Other);
    assert_eq!(err.operation, "virDomainGetState");
    assert!(err.message.contains("does not decode"), "{}", err.message);
    assert!(err.message.contains("truncated"), "{}", err.message);
    assert!(hv.is_connected());
    assert!(rx.try_recv().is_err());
}

#[test]
fn bad_bytes_lose_the_connection_and_reconnecting_registers_events_again() {
    let fake = FakeLibvirtd::start(
        true,
        handler(|s, call| {
            if standard(s, call) {
                return Flow::Continue;
            }
            if s.number == 0 {
                // An absurd length on the first connection.
                s.daemon.send_raw(&[0x7f, 0xff, 0xff, 0xff, 1, 2, 3]);
                return Flow::Close;
            }
            s.daemon.reply(
                &call.header,
                &enc(|e| {
                    e.i32(1).i32(1);
                }),
            );
            Flow::Continue
        }),
    );
    let (hv, rx) = connect(&fake);
    let err = hv.domain_status(OUR_DOMAIN).unwrap_err();
    assert_eq!(err.kind, HypervisorErrorKind::ConnectionLost);
    assert!(
        err.message.contains("exceeds the protocol's maximum"),
        "{}",
        err.message
    );
    // Reported once, by the failed call or by the reader, whichever came
    // first.
    assert!(matches!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        HypervisorEvent::ConnectionClosed {
            connection: crate::hypervisor::ConnectionId::FIRST,
            reason: LibvirtCloseReason::Error | LibvirtCloseReason::CallFailed
        }
    ));
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    assert!(!hv.is_connected());
    // Calls fail fast until the manager reconnects.
    let t = Instant::now();
    assert_eq!(
        hv.suspend(OUR_DOMAIN).unwrap_err().kind,
        HypervisorErrorKind::ConnectionLost
    );
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(
        hv.reconnect().unwrap(),
        crate::hypervisor::ConnectionId::FIRST.next()
    );
    assert!(hv.is_connected());
    assert_eq!(
        fake.procedures(1).iter().filter(|p| **p == 316).count(),
        6,
        "events registered again"
    );
    let status = hv.domain_status(OUR_DOMAIN).unwrap().unwrap();
    assert_eq!(status.state, DomainState::Running);
}

#[test]
fn a_daemon_that_stops_answering_is_found_by_keepalive() {
    let fake = FakeLibvirtd::start(
        false,
        handler(|s, call| {
            standard(s, call);
            Flow::Continue
        }),
    );
    let (hv, rx) = connect(&fake);
    // No call in flight: keepalive alone notices (3 probes, 100 ms apart).
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        HypervisorEvent::ConnectionClosed {
            connection: crate::hypervisor::ConnectionId::FIRST,
            reason: LibvirtCloseReason::Keepalive
        }
    );
    assert!(!hv.is_connected());
    let err = hv.suspend(OUR_DOMAIN).unwrap_err();
    assert_eq!(err.kind, HypervisorErrorKind::ConnectionLost);
}

#[test]
fn a_missing_socket_is_connection_lost_and_test_default_is_refused() {
    let (tx, _rx) = unbounded();
    let err = WireHypervisor::connect(
        "qemu+unix:///system?socket=/nonexistent/libvirt-sock",
        OUR_DOMAIN,
        tx.clone().into(),
    )
    .err()
    .unwrap();
    assert_eq!(err.kind, HypervisorErrorKind::ConnectionLost);
    assert!(
        err.message.contains("/nonexistent/libvirt-sock"),
        "{}",
        err.message
    );
    let err = WireHypervisor::connect("test:///default", OUR_DOMAIN, tx.into())
        .err()
        .unwrap();
    assert_eq!(err.kind, HypervisorErrorKind::Unsupported);
    assert!(
        err.message.contains("use test+unix:///default"),
        "{}",
        err.message
    );
}

#[test]
fn sasl_only_daemons_are_refused_with_a_reason() {
    let fake = FakeLibvirtd::start(
        true,
        handler(|s, call| {
            if call.header.procedure == 66 {
                s.daemon.reply(
                    &call.header,
                    &enc(|e| {
                        e.u32(1).u32(auth::SASL);
                    }),
                );
            }
            Flow::Continue
        }),
    );
    let (tx, _rx) = unbounded();
    let err = WireHypervisor::connect_with(
        &fake.uri(),
        OUR_DOMAIN,
        tx.into(),
        &Environment::of_this_process(),
        quick(),
    )
    .err()
    .unwrap();
    assert_eq!(err.kind, HypervisorErrorKind::Unsupported);
    assert!(err.message.contains("SASL"), "{}", err.message);
}

#[test]
fn header_of_a_reply_matches_its_call() {
    // Guard for the fake itself: replies echo program, version, procedure
    // and serial.
    let call = Header {
        program: proc::REMOTE.number,
        version: 1,
        procedure: 23,
        kind: crate::hypervisor::wire::codec::MessageType::Call,
        serial: 9,
        status: crate::hypervisor::wire::codec::MessageStatus::Ok,
    };
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let mut daemon = FakeDaemon::new(a);
    daemon.reply(&call, &[]);
    let mut peer = FakeDaemon::new(b);
    let got = peer.read().unwrap();
    assert_eq!(got.header.serial, 9);
    assert_eq!(got.header.procedure, 23);
}

#[test]
fn a_domain_read_has_its_xml_and_state_calls_in_flight_at_once() {
    // This daemon answers the XML call only once the state call has
    // arrived, and answers them in the other order: a client that waited
    // for one reply before sending the next call would get no XML.
    let held: Arc<Mutex<Option<Header>>> = Arc::new(Mutex::new(None));
    let fake = FakeLibvirtd::start(
        true,
        handler(move |s, call| {
            if standard(s, call) {
                return Flow::Continue;
            }
            match call.header.procedure {
                14 => *held.lock().unwrap() = Some(call.header),
                212 => {
                    s.daemon.reply(
                        &call.header,
                        &enc(|e| {
                            e.i32(1).i32(1);
                        }),
                    );
                    if let Some(xml_call) = held.lock().unwrap().take() {
                        s.daemon.reply(
                            &xml_call,
                            &enc(|e| {
                                e.string("<domain type='test'/>");
                            }),
                        );
                    }
                }
                _ => s.daemon.reply(&call.header, &[]),
            }
            Flow::Continue
        }),
    );
    let (hv, _rx) = connect(&fake);
    let (tx, done) = unbounded();
    std::thread::spawn(move || {
        let _ = tx.send((
            hv.domain_xml_and_status(OUR_DOMAIN),
            hv.domain_xml_and_status("someone_else").map_err(|e| e.kind),
        ));
    });
    let (ours, other) = done
        .recv_timeout(Duration::from_secs(10))
        .expect("the XML call was not answered: the state call was not sent beside it");
    let ((xml, uuid), status) = ours.unwrap();
    assert_eq!(xml, "<domain type='test'/>");
    assert_eq!(uuid, "abababab-abab-abab-abab-abababababab");
    assert_eq!(status, Some(DomainStatus::from_libvirt(1, 1)));
    assert_eq!(other.unwrap_err(), HypervisorErrorKind::NoDomain);
}

/// A STREAM message of the call `call` opened.
fn stream_packet(s: &mut Session, call: &Header, status: MessageStatus, payload: &[u8]) {
    let frame = Header {
        kind: MessageType::Stream,
        status,
        ..*call
    }
    .frame(payload);
    s.daemon.send_raw(&frame);
}

#[test]
fn day_two_calls_send_what_libvirts_client_sends() {
    let fake = FakeLibvirtd::start(
        true,
        handler(|s, call| {
            if !standard(s, call) {
                let reply = match call.header.procedure {
                    344 => enc(|e| {
                        e.u32(1);
                        dom(OUR_DOMAIN).encode(e);
                        e.typed_params(&[TypedParam::ullong("dirtyrate.megabytes_per_second", 42)]);
                    }),
                    // Three disks: no space, no error, another error.
                    263 => enc(|e| {
                        e.u32(3);
                        e.string("vdb").i32(2);
                        e.string("vda").i32(0);
                        e.string("sda").i32(1);
                        e.i32(3);
                    }),
                    _ => Vec::new(),
                };
                s.daemon.reply(&call.header, &reply);
            }
            Flow::Continue
        }),
    );
    let (hv, _rx) = connect(&fake);
    // The opening read the version once (the test driver's, 2); this
    // reads it again.
    assert_eq!(hv.hypervisor_version().unwrap(), 2);
    assert!(fake.payload_of(4).is_empty());

    hv.start_dirty_rate_calc(OUR_DOMAIN, 1).unwrap();
    let payload = fake.payload_of(427);
    let mut d = Decoder::new(&payload);
    assert_eq!(decode_domain(&mut d).unwrap(), dom(OUR_DOMAIN));
    // One second, page sampling.
    assert_eq!((d.i32().unwrap(), d.u32().unwrap()), (1, 0));
    d.finish().unwrap();

    assert_eq!(
        hv.dirty_rate_stats(OUR_DOMAIN).unwrap(),
        vec![("dirtyrate.megabytes_per_second".to_string(), json!(42))]
    );
    let payload = fake.payload_of(344);
    let mut d = Decoder::new(&payload);
    assert_eq!(d.u32().unwrap(), 1);
    decode_domain(&mut d).unwrap();
    // VIR_DOMAIN_STATS_DIRTYRATE, and waiting for the domain's job lock.
    assert_eq!((d.u32().unwrap(), d.u32().unwrap()), (512, 0));

    assert_eq!(
        hv.disk_errors(OUR_DOMAIN).unwrap(),
        vec![
            DiskError {
                target: "vdb".into(),
                kind: DiskErrorKind::NoSpace
            },
            DiskError {
                target: "sda".into(),
                kind: DiskErrorKind::Unspecified
            },
        ]
    );
    let payload = fake.payload_of(263);
    let mut d = Decoder::new(&payload);
    decode_domain(&mut d).unwrap();
    // Room for REMOTE_DOMAIN_DISK_ERRORS_MAX, no flags.
    assert_eq!((d.u32().unwrap(), d.u32().unwrap()), (256, 0));
    d.finish().unwrap();

    hv.dump_memory(OUR_DOMAIN, Path::new("/dumps/vm.memory.dump"))
        .unwrap();
    let payload = fake.payload_of(334);
    let mut d = Decoder::new(&payload);
    decode_domain(&mut d).unwrap();
    assert_eq!(d.string().unwrap(), "/dumps/vm.memory.dump");
    // Raw format, VIR_DUMP_MEMORY_ONLY.
    assert_eq!((d.u32().unwrap(), d.u32().unwrap()), (0, 16));
    d.finish().unwrap();
}

#[test]
fn a_screenshot_reads_the_stream_to_its_end_and_finishes_it() {
    let fake = FakeLibvirtd::start(
        true,
        handler(|s, call| {
            if standard(s, call) {
                return Flow::Continue;
            }
            let h = call.header;
            match (h.procedure, h.kind) {
                (211, MessageType::Call) => {
                    // Data may come before the reply (the daemon streams
                    // from its event loop while a worker answers).
                    stream_packet(s, &h, MessageStatus::Continue, b"P6\n2 1\n");
                    s.daemon.reply(
                        &h,
                        &enc(|e| {
                            e.opt_string(Some("image/x-portable-pixmap"));
                        }),
                    );
                    stream_packet(s, &h, MessageStatus::Continue, b"255\n");
                    stream_packet(s, &h, MessageStatus::Continue, b"\xff\x00\x00\x00\x00\xff");
                    // The end of the data: an empty CONTINUE, as libvirtd
                    // sends it (an empty OK is only the finish's answer).
                    stream_packet(s, &h, MessageStatus::Continue, b"");
                }
                // The client's finish: confirmed with an empty OK packet.
                (211, MessageType::Stream) => {
                    assert_eq!(h.status, MessageStatus::Ok);
                    assert!(call.payload.is_empty());
                    stream_packet(s, &h, MessageStatus::Ok, b"");
                }
                // Running (1), booted (1).
                _ => s.daemon.reply(&h, &[0, 0, 0, 1, 0, 0, 0, 1]),
            }
            Flow::Continue
        }),
    );
    let (hv, _rx) = connect(&fake);
    let shot = hv.screenshot(OUR_DOMAIN, 0).unwrap();
    assert_eq!(shot.mime, "image/x-portable-pixmap");
    assert_eq!(shot.data, b"P6\n2 1\n255\n\xff\x00\x00\x00\x00\xff");
    let payload = fake.payload_of(211);
    // The last 211 is the finish (empty); the call came before it.
    assert!(payload.is_empty());
    let calls = fake.calls.lock().unwrap().clone();
    let call = calls
        .iter()
        .find(|(_, p, payload)| *p == 211 && !payload.is_empty())
        .unwrap();
    let mut d = Decoder::new(&call.2);
    decode_domain(&mut d).unwrap();
    assert_eq!((d.u32().unwrap(), d.u32().unwrap()), (0, 0));
    // The connection is still good for the next call.
    assert!(hv.domain_status(OUR_DOMAIN).is_ok());
}

#[test]
fn a_failed_screenshot_stream_is_an_error_and_the_connection_stays() {
    let fake = FakeLibvirtd::start(
        true,
        handler(|s, call| {
            if standard(s, call) {
                return Flow::Continue;
            }
            let h = call.header;
            match (h.procedure, h.kind) {
                (211, MessageType::Call) => {
                    s.daemon.reply(
                        &h,
                        &enc(|e| {
                            e.opt_string(Some("image/x-portable-pixmap"));
                        }),
                    );
                    stream_packet(s, &h, MessageStatus::Continue, b"P6\n");
                    let error = crate::hypervisor::wire::fake::error_payload(
                        1,
                        "internal error: unable to read screenshot",
                    );
                    stream_packet(s, &h, MessageStatus::Error, &error);
                }
                (211, MessageType::Stream) => {}
                _ => s.daemon.reply(&h, &[0, 0, 0, 1, 0, 0, 0, 1]),
            }
            Flow::Continue
        }),
    );
    let (hv, _rx) = connect(&fake);
    let err = hv.screenshot(OUR_DOMAIN, 0).unwrap_err();
    assert_eq!(err.operation, "virDomainScreenshot");
    assert!(err.message.contains("unable to read screenshot"), "{err}");
    assert!(hv.is_connected());
    assert!(hv.domain_status(OUR_DOMAIN).is_ok());
}

#[test]
fn versions_at_opens_its_own_connection_reads_the_versions_and_closes_it() {
    let ours = FakeLibvirtd::start(
        true,
        handler(|s, call| {
            standard(s, call);
            Flow::Continue
        }),
    );
    let target = FakeLibvirtd::start(
        true,
        handler(|s, call| {
            if !standard(s, call) && call.header.procedure == 2 {
                s.daemon.reply(&call.header, &[]);
            }
            Flow::Continue
        }),
    );
    let (hv, _rx) = connect(&ours);
    let before = ours.procedures(0).len();
    let versions = hv.versions_at(&target.uri()).unwrap();
    assert_eq!(
        versions,
        DaemonVersions {
            libvirt: "9.0.0".into(),
            hypervisor: "TEST 0.0.2".into(),
        }
    );
    // Authentication, keepalive support, open; the type and both
    // versions; close. No event registration, and nothing on ours.
    assert_eq!(target.procedures(0), [66, 60, 1, 3, 157, 4, 2]);
    assert_eq!(ours.procedures(0).len(), before);
    assert!(hv.is_connected());
}
