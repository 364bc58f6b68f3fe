//! Console, guest-agent channel, graphics, inputs, balloon, RNG, watchdog,
//! panic devices and the USB / virtio-serial controllers (KubeVirt:
//! converter/compute/{console,channels,graphics,input_device,balloon,rng,
//! watchdog,panic_devices}.go and converter.go's controllers).

use super::virtio::virtio_model;
use super::{
    Checked, ClusterOptions, ConvertContext, ConvertError, DEFAULT_BALLOON_STATS_PERIOD, paths,
};
use crate::disks::DiskPlan;
use crate::domxml::{
    Alias, BalloonStats, Channel, CharLog, CharSource, CharTarget, Console, Controller, Domain,
    Graphics, GraphicsListen, Input, MemBalloon, Panic, Rng, RngBackend, Serial, Tpm, TpmBackend,
    Video, VideoModel, Vsock, VsockCid, Watchdog,
};
use crate::vmi::{InputBus, InputType, VirtualMachineInstance, WatchdogAction};

/// The guest agent's virtio-serial port name.
pub const GUEST_AGENT_CHANNEL: &str = "org.qemu.guest_agent.0";

pub(crate) fn configure(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
    domain: &mut Domain,
    plan: &mut DiskPlan,
) -> Result<(), ConvertError> {
    let devices = &vmi.spec.domain.devices;
    configure_vsock(vmi, ctx, domain)?;
    let console = configure_console(vmi, ctx, domain);
    configure_agent_channel(domain);
    if devices.downward_metrics.is_some() {
        configure_metrics_channel(ctx, domain);
    }
    let graphics = configure_graphics(vmi, ctx, domain);
    if console {
        check_socket_path(
            Checked::SerialConsoleSocket,
            &paths::serial_socket(ctx),
            "serial console",
        )?;
    }
    if graphics {
        check_socket_path(Checked::VncSocket, &paths::vnc_socket(ctx), "VNC")?;
    }
    configure_tpm(vmi, ctx, domain)?;
    if console || graphics {
        // QEMU binds the console and VNC sockets in the per-VMI private dir.
        plan.make_dir(
            paths::vmi_private_dir(ctx),
            "serial console and VNC sockets",
        );
    }
    configure_inputs(vmi, domain)?;
    configure_balloon(vmi, domain);
    if devices.rng.is_some() {
        domain.devices.rngs.push(Rng {
            model: virtio_model(vmi).to_string(),
            backend: RngBackend {
                model: "random".to_string(),
                source: "/dev/urandom".to_string(),
            },
            ..Rng::default()
        });
    }
    configure_watchdog(vmi, domain)?;
    for panic in &devices.panic_devices {
        domain.devices.panics.push(Panic {
            // QEMU's ISA pvpanic device is the x86 default.
            model: Some(panic.model.map_or("isa", |m| m.as_str()).to_string()),
            ..Panic::default()
        });
    }
    configure_controllers(vmi, domain);
    Ok(())
}

/// KubeVirt's CID in a vsock namespace of the `local` mode
/// (pkg/vsock `LocalCID`): each namespace has its own CIDs, and the guest
/// is the namespace's only one.
pub const VSOCK_LOCAL_CID: u32 = 3;

/// `autoattachVSOCK: true`: a vhost-vsock device with the CID
/// virt-controller allocated (`status.VSOCKCID`), as KubeVirt's
/// `VSOCKDomainConfigurator` writes it; the host's vsock namespace in the
/// `local` mode gives the guest KubeVirt's local CID instead. KubeVirt adds
/// no device when the status has no CID; a VMI that asks for one is refused
/// here instead, since the guest would lack the socket it asked for.
fn configure_vsock(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
    domain: &mut Domain,
) -> Result<(), ConvertError> {
    if vmi.spec.domain.devices.autoattach_vsock != Some(true) {
        return Ok(());
    }
    let cid = vmi
        .status
        .as_ref()
        .and_then(|s| s.vsock_cid)
        .ok_or_else(|| {
            ConvertError::new(
                "status.VSOCKCID",
                "autoattachVSOCK needs the guest's vsock CID, which virt-controller allocates and writes to the VMI's status; this VMI's status has none",
            )
        })?;
    // CIDs 0 to 2 are the hypervisor's, the local loopback and the host's;
    // the kernel refuses them and CID_ANY (u32::MAX) for a guest.
    if cid < 3 || cid == u32::MAX {
        return Err(ConvertError::new(
            "status.VSOCKCID",
            format!("{cid} is not a guest's vsock CID (3 to 4294967294)"),
        ));
    }
    domain.devices.vsock = Some(Vsock {
        // virtio 1.0 only, as KubeVirt forces for vhost-vsock-pci.
        model: Some("virtio-non-transitional".to_string()),
        cid: VsockCid {
            auto: "no".to_string(),
            address: Some(if ctx.vsock_local_namespace {
                VSOCK_LOCAL_CID
            } else {
                cid
            }),
        },
        ..Vsock::default()
    });
    Ok(())
}

/// A unix socket the launcher proxies to clients, with a log file, and a pty
/// console on the same port. Returns whether one was added.
fn configure_console(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
    domain: &mut Domain,
) -> bool {
    let devices = &vmi.spec.domain.devices;
    if devices.autoattach_serial_console == Some(false) {
        return false;
    }
    let logged =
        ClusterOptions::serial_console_log(ctx.options.as_ref(), devices.log_serial_console);
    let log = logged.then(|| CharLog {
        file: paths::text(&paths::serial_log(ctx)),
        append: Some("on".to_string()),
    });
    domain.devices.serials.push(Serial {
        serial_type: "unix".to_string(),
        source: Some(CharSource {
            mode: Some("bind".to_string()),
            path: Some(paths::text(&paths::serial_socket(ctx))),
        }),
        target: Some(CharTarget {
            port: Some(0),
            ..CharTarget::default()
        }),
        log,
        alias: None,
    });
    domain.devices.consoles.push(Console {
        console_type: "pty".to_string(),
        target: Some(CharTarget {
            target_type: Some("serial".to_string()),
            port: Some(0),
            ..CharTarget::default()
        }),
        ..Console::default()
    });
    true
}

/// libvirt chooses the socket path of the guest-agent channel.
fn configure_agent_channel(domain: &mut Domain) {
    domain.devices.channels.push(Channel {
        channel_type: "unix".to_string(),
        target: Some(CharTarget {
            target_type: Some("virtio".to_string()),
            name: Some(GUEST_AGENT_CHANNEL.to_string()),
            ..CharTarget::default()
        }),
        ..Channel::default()
    });
}

/// The downward metrics' channel: QEMU listens on KubeVirt's socket, and
/// the launcher connects and answers the guest (src/metrics).
fn configure_metrics_channel(ctx: &ConvertContext, domain: &mut Domain) {
    domain.devices.channels.push(Channel {
        channel_type: "unix".to_string(),
        source: Some(CharSource {
            mode: Some("bind".to_string()),
            path: Some(paths::text(&crate::metrics::channel_socket(
                &ctx.private_dir,
            ))),
        }),
        target: Some(CharTarget {
            target_type: Some("virtio".to_string()),
            name: Some(crate::metrics::CHANNEL_NAME.to_string()),
            ..CharTarget::default()
        }),
        ..Channel::default()
    });
}

/// VNC on a unix socket and a video card, unless autoattachGraphicsDevice
/// is false. Returns whether graphics were added.
fn configure_graphics(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
    domain: &mut Domain,
) -> bool {
    let devices = &vmi.spec.domain.devices;
    if devices.autoattach_graphics_device == Some(false) {
        return false;
    }
    domain.devices.graphics.push(Graphics {
        graphics_type: "vnc".to_string(),
        socket: None,
        listen: vec![GraphicsListen {
            listen_type: "socket".to_string(),
            socket: Some(paths::text(&paths::vnc_socket(ctx))),
            address: None,
        }],
    });
    // KubeVirt on amd64: bochs for EFI guests (a VGA BIOS is no use to
    // OVMF) unless the cluster says VGA, vga otherwise, unless the VMI
    // names a type.
    let efi = ClusterOptions::bochs_for_efi(ctx.options.as_ref())
        && vmi
            .spec
            .domain
            .firmware
            .as_ref()
            .and_then(|f| f.bootloader.as_ref())
            .is_some_and(|b| b.efi.is_some());
    let model_type = devices
        .video
        .as_ref()
        .and_then(|v| v.video_type.clone())
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| if efi { "bochs" } else { "vga" }.to_string());
    let vga = model_type == "vga";
    domain.devices.videos.push(Video {
        model: VideoModel {
            model_type,
            // KubeVirt's defaults: one head, 16 MiB of VGA memory.
            vram: vga.then_some(16384),
            heads: Some(1),
            primary: None,
        },
        ..Video::default()
    });
    true
}

/// `sun_path` holds 108 bytes including the terminating NUL.
const MAX_SOCKET_PATH: usize = 107;

/// QEMU binds the console and VNC sockets; a path too long for a unix
/// socket (from a long `--private-dir`) would fail only when QEMU starts.
/// The error names the field that adds the device (on by default).
fn check_socket_path(
    device: Checked,
    path: &std::path::Path,
    what: &str,
) -> Result<(), ConvertError> {
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(ConvertError::checked(
            device,
            device.path(),
            format!(
                "the {what} socket {} is {len} bytes long, but a unix socket path holds at most {MAX_SOCKET_PATH}; start the launcher with a shorter --private-dir",
                path.display()
            ),
        ));
    }
    Ok(())
}

/// An emulated TPM 2.0 that libvirt runs swtpm for. KubeVirt uses tpm-tis
/// unless the TPM is persistent; this launcher always uses tpm-crb, the
/// interface Windows 11 and current Linux expect of a TPM 2.0 (the model
/// KubeVirt picks for persistent TPMs). `persistent_state` keeps the state
/// when the domain is undefined (a sync redefines it): libvirt keeps it in
/// its swtpm directory, which `--spawn-libvirt` places under the private
/// dir (`<private-dir>/libvirt/lib/swtpm/<domain uuid>`), or with
/// `--backend-storage-dir` in its `swtpm/`. A libvirt that is not the
/// launcher's own keeps it in its own directory whatever the launcher is
/// given: a persistent TPM with `--backend-storage-dir` is refused there
/// rather than kept elsewhere than the flag says.
fn configure_tpm(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
    domain: &mut Domain,
) -> Result<(), ConvertError> {
    let Some(tpm) = vmi
        .spec
        .domain
        .devices
        .tpm
        .as_ref()
        .filter(|t| t.is_enabled())
    else {
        return Ok(());
    };
    if tpm.persistent == Some(true)
        && ctx.backend_storage_dir.is_some()
        && !ctx.backend_storage_keeps_tpm
    {
        return Err(ConvertError::checked(
            Checked::PersistentTpmOutsideBackendStorage,
            "spec.domain.devices.tpm.persistent",
            "a persistent TPM's state is kept in --backend-storage-dir only by the launcher's own libvirt daemons (--spawn-libvirt), which mount its swtpm/ over libvirt's swtpm directory; this launcher's libvirt keeps it in its own (the host daemon's /var/lib/libvirt/swtpm/<domain uuid>/): start the launcher with --spawn-libvirt, or without --backend-storage-dir",
        ));
    }
    domain.devices.tpms.push(Tpm {
        model: Some("tpm-crb".to_string()),
        backend: TpmBackend {
            backend_type: "emulator".to_string(),
            version: Some("2.0".to_string()),
            persistent_state: (tpm.persistent == Some(true)).then(|| "yes".to_string()),
        },
        alias: None,
    });
    Ok(())
}

fn configure_inputs(vmi: &VirtualMachineInstance, domain: &mut Domain) -> Result<(), ConvertError> {
    let devices = &vmi.spec.domain.devices;
    for (i, input) in devices.inputs.iter().enumerate() {
        let bus = input.bus.unwrap_or(InputBus::Usb);
        if !paths::is_dns_label(&input.name) {
            return Err(ConvertError::new(
                format!("spec.domain.devices.inputs[{i}].name"),
                format!("{:?} is not a valid device name", input.name),
            ));
        }
        domain.devices.inputs.push(Input {
            input_type: input
                .input_type
                .unwrap_or(InputType::Tablet)
                .as_str()
                .to_string(),
            bus: Some(bus.as_str().to_string()),
            model: (bus == InputBus::Virtio).then(|| "virtio".to_string()),
            alias: Some(Alias::user(&input.name)),
            address: None,
        });
    }
    // autoattachInputDevice: a USB tablet, as KubeVirt's defaulting adds.
    if devices.inputs.is_empty() && devices.autoattach_input_device == Some(true) {
        domain.devices.inputs.push(Input {
            input_type: InputType::Tablet.as_str().to_string(),
            bus: Some(InputBus::Usb.as_str().to_string()),
            model: None,
            alias: Some(Alias::user("default-0")),
            address: None,
        });
    }
    Ok(())
}

/// virtio balloon with statistics every 10 s (KubeVirt's default period);
/// free page reporting unless the VMI is a high-performance one (dedicated
/// CPUs, realtime or hugepages: the reporting would fault pinned or
/// preallocated memory back in) or its annotation turns it off, as
/// KubeVirt's `isFreePageReportingEnabled` decides.
fn configure_balloon(vmi: &VirtualMachineInstance, domain: &mut Domain) {
    if vmi.spec.domain.devices.autoattach_mem_balloon == Some(false) {
        domain.devices.memballoon = Some(MemBalloon {
            model: "none".to_string(),
            ..MemBalloon::default()
        });
        return;
    }
    let high_performance = vmi.hugepages().is_some()
        || vmi
            .spec
            .domain
            .cpu
            .as_ref()
            .is_some_and(|cpu| cpu.dedicated_cpu_placement || cpu.realtime.is_some());
    let disabled = vmi
        .metadata
        .annotations
        .get(FREE_PAGE_REPORTING_DISABLED_ANNOTATION)
        .is_some_and(|value| value == "true");
    domain.devices.memballoon = Some(MemBalloon {
        model: virtio_model(vmi).to_string(),
        free_page_reporting: Some(
            if high_performance || disabled {
                "off"
            } else {
                "on"
            }
            .to_string(),
        ),
        stats: Some(BalloonStats {
            period: DEFAULT_BALLOON_STATS_PERIOD,
        }),
        alias: None,
        address: None,
    });
}

/// KubeVirt's annotation that turns free page reporting off for one VMI.
const FREE_PAGE_REPORTING_DISABLED_ANNOTATION: &str = "kubevirt.io/free-page-reporting-disabled";

fn configure_watchdog(
    vmi: &VirtualMachineInstance,
    domain: &mut Domain,
) -> Result<(), ConvertError> {
    let Some(watchdog) = &vmi.spec.domain.devices.watchdog else {
        return Ok(());
    };
    let i6300esb = watchdog.i6300esb.as_ref().ok_or_else(|| {
        ConvertError::new(
            "spec.domain.devices.watchdog",
            "no watchdog type given; add i6300esb: {}",
        )
    })?;
    domain.devices.watchdogs.push(Watchdog {
        model: "i6300esb".to_string(),
        // KubeVirt's API default action.
        action: Some(
            i6300esb
                .action
                .unwrap_or(WatchdogAction::Reset)
                .as_str()
                .to_string(),
        ),
        alias: Some(Alias::user(&watchdog.name)),
        address: None,
    });
    Ok(())
}

/// USB only when a device needs it (KubeVirt `IsUSBNeeded`), and the
/// virtio-serial controller of the console and agent channel.
fn configure_controllers(vmi: &VirtualMachineInstance, domain: &mut Domain) {
    let usb_input = domain
        .devices
        .inputs
        .iter()
        .any(|i| i.bus.as_deref() == Some("usb"));
    let usb_disk = domain
        .devices
        .disks
        .iter()
        .any(|d| d.target.bus.as_deref() == Some("usb"));
    let usb_hostdev = domain
        .devices
        .hostdevs
        .iter()
        .any(|d| d.hostdev_type == "usb");
    domain.devices.controllers.push(Controller {
        controller_type: "usb".to_string(),
        index: 0,
        model: Some(
            if usb_input || usb_disk || usb_hostdev {
                "qemu-xhci"
            } else {
                "none"
            }
            .to_string(),
        ),
        ..Controller::default()
    });
    domain.devices.controllers.push(Controller {
        controller_type: "virtio-serial".to_string(),
        index: 0,
        model: Some(virtio_model(vmi).to_string()),
        ..Controller::default()
    });
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::set_balloon_stats_period;
    use super::super::test_support::convert_ok;
    use super::*;
    use crate::disks::DiskStep;

    #[test]
    fn the_downward_metrics_device_is_kubevirts_vhostmd_channel() {
        let conversion = convert_ok(json!({"domain": {"devices": {"downwardMetrics": {}}}}));
        let channels = &conversion.domain.devices.channels;
        assert_eq!(channels.len(), 2);
        let metrics = &channels[1];
        assert_eq!(metrics.channel_type, "unix");
        assert_eq!(
            metrics.source,
            Some(CharSource {
                mode: Some("bind".into()),
                path: Some(
                    "/var/run/kubevirt-private/downwardmetrics-channel/downwardmetrics.sock".into()
                ),
            })
        );
        let target = metrics.target.clone().unwrap_or_default();
        assert_eq!(
            (target.target_type.as_deref(), target.name.as_deref()),
            (Some("virtio"), Some("org.github.vhostmd.1"))
        );
    }

    #[test]
    fn console_channel_graphics_by_default() {
        let conversion = convert_ok(json!({}));
        let devices = &conversion.domain.devices;
        let serial = &devices.serials[0];
        assert_eq!(
            serial.source.as_ref().and_then(|s| s.path.as_deref()),
            Some("/var/run/kubevirt-private/11111111-2222-3333-4444-555555555555/virt-serial0")
        );
        assert_eq!(
            serial
                .log
                .as_ref()
                .map(|l| (l.file.as_str(), l.append.as_deref())),
            Some((
                "/var/run/kubevirt-private/11111111-2222-3333-4444-555555555555/virt-serial0-log",
                Some("on")
            ))
        );
        assert_eq!(devices.consoles[0].console_type, "pty");
        assert_eq!(
            devices.channels[0]
                .target
                .as_ref()
                .and_then(|t| t.name.as_deref()),
            Some("org.qemu.guest_agent.0")
        );
        assert_eq!(
            devices.graphics[0].listen[0].socket.as_deref(),
            Some("/var/run/kubevirt-private/11111111-2222-3333-4444-555555555555/virt-vnc")
        );
        assert_eq!(devices.videos[0].model.model_type, "vga");
        let balloon = devices.memballoon.clone().unwrap_or_default();
        assert_eq!(
            (balloon.model.as_str(), balloon.stats.map(|s| s.period)),
            ("virtio-non-transitional", Some(10))
        );
        // Besides the scsi controller and the PCIe root ports hotplug
        // needs (convert/hotplug_ports.rs).
        let controllers: Vec<(&str, Option<&str>)> = devices
            .controllers
            .iter()
            .filter(|c| c.controller_type != "pci" && c.controller_type != "scsi")
            .map(|c| (c.controller_type.as_str(), c.model.as_deref()))
            .collect();
        assert_eq!(
            controllers,
            [
                ("usb", Some("none")),
                ("virtio-serial", Some("virtio-non-transitional"))
            ]
        );
        assert!(matches!(
            &conversion.disk_plan.steps[..],
            [DiskStep::MakeDir { .. }]
        ));
    }

    #[test]
    fn opting_out() {
        let devices = convert_ok(
            json!({"domain": {"devices": {"autoattachGraphicsDevice": false,
            "autoattachSerialConsole": false, "autoattachMemBalloon": false}}}),
        )
        .domain
        .devices;
        assert!(devices.graphics.is_empty() && devices.videos.is_empty());
        assert!(devices.serials.is_empty() && devices.consoles.is_empty());
        assert_eq!(devices.memballoon.map(|b| b.model).as_deref(), Some("none"));
        assert_eq!(devices.channels.len(), 1);
        let no_log = convert_ok(json!({"domain": {"devices": {"logSerialConsole": false}}})).domain;
        assert!(no_log.devices.serials[0].log.is_none());
    }

    #[test]
    fn tablet_needs_usb_and_watchdog_rng_panic() {
        let devices = convert_ok(json!({"domain": {"devices": {
            "inputs": [{"name": "tablet", "type": "tablet"}],
            "watchdog": {"name": "wd", "i6300esb": {"action": "poweroff"}},
            "rng": {}, "panicDevices": [{}]}}}))
        .domain
        .devices;
        assert_eq!(devices.inputs[0].bus.as_deref(), Some("usb"));
        let usb = devices
            .controllers
            .iter()
            .find(|c| c.controller_type == "usb")
            .and_then(|c| c.model.as_deref());
        assert_eq!(usb, Some("qemu-xhci"));
        assert_eq!(devices.watchdogs[0].action.as_deref(), Some("poweroff"));
        assert_eq!(
            devices.watchdogs[0].alias.as_ref().map(|a| a.name.as_str()),
            Some("ua-wd")
        );
        assert_eq!(devices.rngs[0].backend.source, "/dev/urandom");
        assert_eq!(devices.panics[0].model.as_deref(), Some("isa"));
        // KubeVirt's default: an i6300esb that resets the guest.
        let default = convert_ok(json!({"domain": {"devices": {"watchdog": {"name": "wd"}}}}))
            .domain
            .devices
            .watchdogs;
        assert_eq!(
            (default[0].model.as_str(), default[0].action.as_deref()),
            ("i6300esb", Some("reset"))
        );
    }

    /// A VMI with `autoattachVSOCK` and the status virt-controller wrote.
    fn vsock_vmi(status: serde_json::Value) -> VirtualMachineInstance {
        let mut vmi = super::super::test_support::vmi_with(
            json!({"domain": {"devices": {"autoattachVSOCK": true}}}),
        );
        vmi.status = serde_json::from_value(status).unwrap();
        vmi
    }

    #[test]
    fn vsock_takes_the_cid_of_the_vmis_status_as_kubevirt_writes_it() {
        let ctx = super::super::test_support::context();
        let vmi = vsock_vmi(json!({"VSOCKCID": 50, "phase": "Scheduled"}));
        let domain = crate::convert::convert(&vmi, &ctx).unwrap().domain;
        let vsock = domain.devices.vsock.clone().unwrap();
        assert_eq!(
            Domain::device_xml("vsock", &vsock).unwrap(),
            "<vsock model=\"virtio-non-transitional\"><cid auto=\"no\" address=\"50\"/></vsock>"
        );
        // In a vsock namespace of the local mode the guest is CID 3.
        let local = ConvertContext {
            vsock_local_namespace: true,
            ..ctx.clone()
        };
        let domain = crate::convert::convert(&vmi, &local).unwrap().domain;
        assert_eq!(domain.devices.vsock.unwrap().cid.address, Some(3));
        // Without autoattachVSOCK a CID in the status adds nothing.
        let mut off = vmi.clone();
        off.spec.domain.devices.autoattach_vsock = Some(false);
        let domain = crate::convert::convert(&off, &ctx).unwrap().domain;
        assert_eq!(domain.devices.vsock, None);
    }

    #[test]
    fn vsock_without_a_cid_in_the_status_is_refused_naming_it() {
        let ctx = super::super::test_support::context();
        let refused = |status: serde_json::Value| {
            crate::convert::convert(&vsock_vmi(status), &ctx)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            refused(json!(null)),
            "status.VSOCKCID: autoattachVSOCK needs the guest's vsock CID, which virt-controller allocates and writes to the VMI's status; this VMI's status has none"
        );
        assert!(
            refused(json!({"phase": "Pending"}))
                .starts_with("status.VSOCKCID: autoattachVSOCK needs"),
        );
        assert_eq!(
            refused(json!({"VSOCKCID": 2})),
            "status.VSOCKCID: 2 is not a guest's vsock CID (3 to 4294967294)"
        );
    }

    #[test]
    fn free_page_reporting_is_off_for_high_performance_vmis_and_by_annotation() {
        let reporting = |spec: serde_json::Value, annotations: serde_json::Value| {
            let mut vmi = super::super::test_support::vmi_with(spec);
            vmi.metadata.annotations = serde_json::from_value(annotations).unwrap();
            let ctx = crate::convert::ConvertContext {
                cpuset: Ok(vec![0, 1, 2, 3]),
                ..super::super::test_support::context()
            };
            crate::convert::convert(&vmi, &ctx)
                .unwrap()
                .domain
                .devices
                .memballoon
                .and_then(|b| b.free_page_reporting)
        };
        let on = Some("on".to_string());
        let off = Some("off".to_string());
        assert_eq!(reporting(json!({}), json!({})), on);
        assert_eq!(
            reporting(
                json!({"domain": {"cpu": {"cores": 2, "dedicatedCpuPlacement": true}}}),
                json!({})
            ),
            off
        );
        assert_eq!(
            reporting(
                json!({"domain": {"memory": {"hugepages": {"pageSize": "2Mi"}}}}),
                json!({})
            ),
            off
        );
        assert_eq!(
            reporting(
                json!({}),
                json!({"kubevirt.io/free-page-reporting-disabled": "true"})
            ),
            off
        );
    }

    #[test]
    fn balloon_period_can_be_changed() {
        let mut domain = convert_ok(json!({})).domain;
        set_balloon_stats_period(&mut domain, 5);
        assert_eq!(
            domain
                .devices
                .memballoon
                .and_then(|b| b.stats)
                .map(|s| s.period),
            Some(5)
        );
    }

    #[test]
    fn tpm_is_tpm_crb_on_swtpm() {
        let tpms = convert_ok(json!({"domain": {"devices": {"tpm": {}}}}))
            .domain
            .devices
            .tpms;
        assert_eq!(tpms.len(), 1);
        assert_eq!(tpms[0].model.as_deref(), Some("tpm-crb"));
        assert_eq!(tpms[0].backend.backend_type, "emulator");
        assert_eq!(tpms[0].backend.version.as_deref(), Some("2.0"));
        assert!(tpms[0].backend.persistent_state.is_none());
        let persistent = convert_ok(json!({"domain": {"devices": {"tpm": {"persistent": true}}}}))
            .domain
            .devices
            .tpms;
        assert_eq!(
            persistent[0].backend.persistent_state.as_deref(),
            Some("yes")
        );
        let off = convert_ok(json!({"domain": {"devices": {"tpm": {"enabled": false}}}}));
        assert!(off.domain.devices.tpms.is_empty());
    }

    #[test]
    fn efi_guests_get_bochs_video() {
        let efi = convert_ok(
            json!({"domain": {"firmware": {"bootloader": {"efi": {"secureBoot": false}}}}}),
        )
        .domain
        .devices
        .videos;
        assert_eq!(efi[0].model.model_type, "bochs");
        assert_eq!(efi[0].model.vram, None);
        let chosen = convert_ok(json!({"domain": {"firmware": {"bootloader": {"efi": {}}},
            "devices": {"video": {"type": "vga"}}}}))
        .domain
        .devices
        .videos;
        assert_eq!(chosen[0].model.model_type, "vga");
    }

    #[test]
    fn socket_paths_too_long_for_a_unix_socket_are_refused() {
        let mut ctx = super::super::test_support::context();
        ctx.private_dir = std::path::PathBuf::from(format!("/{}", "p".repeat(60)));
        let err = super::super::test_support::convert_with(json!({}), &ctx)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        // The error names the field that adds the device.
        assert!(
            err.starts_with(
                "spec.domain.devices.autoattachSerialConsole: the serial console socket /pppp"
            ) && err
                .ends_with("holds at most 107; start the launcher with a shorter --private-dir"),
            "{err}"
        );
        // The VNC socket's name is shorter.
        ctx.private_dir = std::path::PathBuf::from(format!("/{}", "p".repeat(64)));
        let err = super::super::test_support::convert_with(
            json!({"domain": {"devices": {"autoattachSerialConsole": false}}}),
            &ctx,
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(
            err.starts_with("spec.domain.devices.autoattachGraphicsDevice: the VNC socket /pppp"),
            "{err}"
        );
        // Without the console and VNC there is no socket to bind.
        super::super::test_support::convert_with(
            json!({"domain": {"devices": {"autoattachSerialConsole": false, "autoattachGraphicsDevice": false}}}),
            &ctx,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
}
