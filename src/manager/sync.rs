//! `sync`: reconcile the domain with a VMI, as KubeVirt's SyncVMI does.
//!
//! The VMI is parsed and converted on the manager thread (pure and fast),
//! so a bad VMI is refused before anything happens. Disk preparation,
//! define and start then run as one job; if any step fails, what the job
//! created is removed again, so a failed sync leaves no defined domain and
//! no stray files.

use std::borrow::Cow;
use std::fs::OpenOptions;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::errors::hypervisor_error;
use super::hotplug::{LiveChange, apply_live};
use super::jobs::{JobOutput, Observation, Operation};
use super::reply::{JobValue, Steps, SyncAction, Synced};
use super::{DomainManager, Phase};
use crate::command::ReplyTo;
use crate::convert::{self, ConvertContext, DomainType, OvmfPaths, UserNetBackend};
use crate::disks::{self, DiskError, DiskErrorKind, DiskPlan, DiskStep, IsoContents};
use crate::hypervisor::{
    DomainState, DriverKind, Hypervisor, HypervisorError, HypervisorErrorKind, StateReason,
};
use crate::kubevirt::hooks::{HookError, HookSidecars};
use crate::protocol::{CommandError, ErrorClass};

/// Facts about the host, probed once at start-up, that decide how VMIs
/// are converted.
#[derive(Debug, Clone)]
pub struct HostFacts {
    /// Whether /dev/kvm can be opened for reading and writing, and why not.
    pub kvm: Result<(), String>,
    pub ovmf: Option<OvmfPaths>,
    pub user_net_backend: UserNetBackend,
}

impl HostFacts {
    /// `ovmf_path` is --ovmf-path: when given, only that directory holds
    /// the EFI firmware.
    pub fn probe(ovmf_path: Option<&Path>) -> HostFacts {
        let kvm = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
            .map(drop)
            .map_err(|e| format!("/dev/kvm: {e}"));
        let passt = ["/usr/bin/passt", "/usr/local/bin/passt"]
            .iter()
            .any(|p| Path::new(p).exists());
        HostFacts {
            kvm,
            ovmf: match ovmf_path {
                Some(dir) => convert::detect_ovmf_in(&[dir.to_path_buf()]),
                None => convert::detect_ovmf(),
            },
            user_net_backend: if passt {
                UserNetBackend::Passt
            } else {
                UserNetBackend::Slirp
            },
        }
    }
}

/// Which domain type to write for this host and these flags.
pub fn decide_domain_type(
    driver: DriverKind,
    force_emulation: bool,
    allow_emulation: bool,
    kvm: &Result<(), String>,
) -> Result<DomainType, CommandError> {
    match (driver, kvm) {
        (DriverKind::Test, _) => Ok(DomainType::Test),
        (DriverKind::Qemu, _) if force_emulation => Ok(DomainType::Qemu),
        (DriverKind::Qemu, Ok(())) => Ok(DomainType::Kvm),
        (DriverKind::Qemu, Err(_)) if allow_emulation => Ok(DomainType::Qemu),
        (DriverKind::Qemu, Err(why)) => Err(CommandError::new(
            ErrorClass::Unavailable,
            format!(
                "KVM is not usable on this host ({why}); start the launcher with --allow-emulation to run the guest under plain QEMU emulation (much slower)"
            ),
        )),
    }
}

/// "arguments.vmi.<path>: <message>", or "arguments.vmi: <message>" for
/// a problem with the VMI as a whole.
fn at_vmi_path(path: &str, message: &str) -> String {
    if path.is_empty() {
        format!("arguments.vmi: {message}")
    } else {
        format!("arguments.vmi.{path}: {message}")
    }
}

/// Only a VMI with dedicated CPUs needs the cpuset and host topology.
fn wants_dedicated_cpus(vmi: &crate::vmi::VirtualMachineInstance) -> bool {
    vmi.spec
        .domain
        .cpu
        .as_ref()
        .is_some_and(|cpu| cpu.dedicated_cpu_placement)
}

/// Everything the sync job needs, decided before it starts.
pub(super) struct SyncPlan {
    domain_name: String,
    domain: crate::domxml::Domain,
    /// Pod networking to set up before the domain starts (not on the
    /// test driver, whose domains are not real).
    pub(super) network: Option<crate::network::NetworkJob>,
    /// The filesystems' virtiofsd, started before the domain (not on the
    /// test driver).
    virtiofs: Option<crate::daemons::virtiofs::VirtiofsJob>,
    pub(super) disk_plan: DiskPlan,
    /// QEMU runs as the launcher's unprivileged user: its disks are checked
    /// for access before the domain is defined (crate::unprivileged).
    unprivileged: bool,
    start_paused: bool,
    /// The grace period a later signal gives this VMI's guest (unless
    /// --grace-period-seconds sets one); applied once the sync is accepted.
    pub(super) grace_period: Duration,
    /// The VMI, parsed and as JSON (for the record of what was applied).
    vmi: crate::vmi::VirtualMachineInstance,
    vmi_json: Value,
    /// What to change if the domain runs already.
    live: Option<LiveChange>,
    /// The hook sidecars the domain and cloud-init data go through.
    hooks: Option<HookRun>,
    /// The ISO of the first cloud-init volume (KubeVirt's cloud-init data
    /// store), if the VMI has one.
    cloud_init: Option<convert::CloudInitIso>,
    /// How long the steps so far took (the conversion).
    steps: Steps,
}

impl SyncPlan {
    /// The domain the VMI becomes in this pod.
    pub(super) fn domain(&self) -> &crate::domxml::Domain {
        &self.domain
    }

    /// Whether the VMI asks for dedicated CPUs.
    pub(super) fn dedicated_cpus(&self) -> bool {
        wants_dedicated_cpus(&self.vmi)
    }

    /// A migration target's disks: the cloud-init ISO of the size
    /// virt-handler recorded for the source's (`status.volumeStatus[]`'s
    /// `size` of that volume), as KubeVirt's target makes it (empty there,
    /// the VMI's data here, zero-filled or cut at its end): the block copy
    /// fills it, and QEMU copies a disk only onto one of its own size (a
    /// source whose ISO another writer made, KubeVirt's, has another).
    /// Without a recorded size, the ISO as `sync` writes it.
    pub(super) fn sized_as_the_sources<'a>(
        &self,
        mut disk_plan: Cow<'a, DiskPlan>,
    ) -> Cow<'a, DiskPlan> {
        let Some(iso) = &self.cloud_init else {
            return disk_plan;
        };
        let recorded = self.vmi_json["status"]["volumeStatus"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|status| status["name"] == iso.volume.as_str())
            .and_then(|status| status["size"].as_u64())
            .filter(|size| *size > 0);
        let Some(recorded) = recorded else {
            return disk_plan;
        };
        let step = disk_plan
            .steps
            .iter()
            .position(|s| matches!(s, DiskStep::WriteIso { path, .. } if *path == iso.path));
        if let Some(at) = step
            && let DiskStep::WriteIso { size, .. } = &mut disk_plan.to_mut().steps[at]
        {
            *size = Some(recorded);
        }
        disk_plan
    }
}

impl DomainManager {
    /// `sync`. Validation first: a VMI that is not valid for this
    /// launcher is refused as such whatever the launcher is doing; only a
    /// valid one meets the state checks.
    pub(super) fn start_sync(
        &mut self,
        vmi: Value,
        options: Option<convert::ClusterOptions>,
        reply: ReplyTo,
    ) {
        let mut steps = Steps::default();
        let mut plan = match steps.time("convert", || self.plan_sync(&vmi, options)) {
            Ok(plan) => plan,
            Err(e) => return reply.send(Err(e)),
        };
        plan.steps = steps;
        if self.migration_running_as_source() {
            return reply.send(Err(CommandError::invalid_state(
                "sync: a migration is running; wait for it or migrate-cancel it",
            )));
        }
        let refused = match self.phase.now() {
            Phase::MigrationTarget => Some("sync: this launcher is waiting for a migrating domain"),
            Phase::Exiting => Some("sync: the launcher is exiting"),
            Phase::ShuttingDown => Some("sync: the launcher is stopping the domain after a signal"),
            _ => None,
        };
        if let Some(why) = refused {
            return reply.send(Err(CommandError::invalid_state(why)));
        }
        if let Err(busy) = self.jobs.ensure_idle("sync") {
            return reply.send(Err(busy));
        }
        self.stop.adopt_grace_period(plan.grace_period);
        let mut plan = plan;
        if self.domain_is_live()
            && let Some(synced) = self.unchanged_sync(&plan.domain)
        {
            return reply.send(Ok(JobValue::Synced(synced).into_reply()));
        }
        plan.live = Some(self.prepare_live_change(&plan.vmi_json, &plan.vmi, &plan.domain));
        self.jobs.spawn(
            Operation::Sync,
            Some(reply),
            self.config.qemu_timeout,
            move |hv| run_sync(hv, plan),
        );
    }

    /// Parses, checks and converts a VMI (with the cluster's `options`):
    /// everything `sync` decides before touching anything.
    pub(super) fn plan_sync(
        &self,
        vmi_json: &Value,
        options: Option<convert::ClusterOptions>,
    ) -> Result<SyncPlan, CommandError> {
        let vmi = crate::vmi::parse_vmi(vmi_json)
            .map_err(|e| CommandError::invalid_argument(at_vmi_path(&e.path, &e.message)))?;
        self.check_identity(vmi.namespace(), vmi.name(), vmi.uid())?;
        self.check_live_vmi(vmi_json, &vmi)?;
        let info = self.hypervisor.info();
        let domain_type = decide_domain_type(
            info.driver,
            self.config.force_emulation,
            self.config.allow_emulation,
            &self.host.kvm,
        )?;
        let ctx = ConvertContext {
            domain_type,
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            uid: self.config.uid.clone(),
            private_dir: self.config.dirs.private.clone(),
            ephemeral_disk_dir: self.config.dirs.ephemeral.clone(),
            share_dir: self.config.dirs.share.clone(),
            container_disk_dir: self.config.dirs.container_disks.clone(),
            hotplug_disk_dir: self.config.dirs.hotplug_disks.clone(),
            ovmf: self.host.ovmf.clone(),
            user_net_backend: self.host.user_net_backend,
            block_pvcs: convert::detect_block_pvcs(
                &vmi,
                Path::new("/dev"),
                &self.config.dirs.hotplug_disks,
            ),
            grace_period_seconds: i64::try_from(self.grace_period_for(&vmi).as_secs())
                .unwrap_or(i64::MAX),
            service_account_dir: self.config.service_account_dir.clone(),
            present_paths: Default::default(),
            cpuset: Err(String::new()),
            host_topology: None,
            libvirt_version: crate::hypervisor::state::parse_libvirt_version(&info.daemon_version),
            device_env: std::env::vars()
                .filter(|(name, _)| convert::is_device_variable(name))
                .collect(),
            vsock_local_namespace: vmi.spec.domain.devices.autoattach_vsock == Some(true)
                && convert::read_vsock_local_namespace(Path::new("/proc")),
            dra_devices: convert::detect_dra_devices(&vmi, &self.config.dra_metadata_dir),
            backend_storage_dir: self.config.backend_storage_dir.clone(),
            // Only the launcher's own daemons mount the directory's swtpm/
            // (in KubeVirt's pod, the pod mounts the PVC's there).
            backend_storage_keeps_tpm: self.daemons.is_some() || self.config.pod_daemons,
            options,
        };
        let ctx = ConvertContext {
            present_paths: convert::detect_present_paths(&vmi, &ctx),
            cpuset: if wants_dedicated_cpus(&vmi) {
                let file = self
                    .config
                    .cpuset_file
                    .clone()
                    .unwrap_or_else(convert::default_cpuset_file);
                convert::read_cpuset(&file)
            } else {
                Err("not read: the VMI asks for no dedicated CPUs".to_string())
            },
            // virt-handler's reading of the node, when it sent one, as
            // KubeVirt's launcher places dedicated CPUs by it.
            host_topology: if wants_dedicated_cpus(&vmi) {
                ctx.options
                    .as_ref()
                    .and_then(|o| o.topology.as_ref())
                    .and_then(convert::NumaTopology::to_host)
                    .or_else(|| convert::detect_host_topology(Path::new("/sys")))
            } else {
                None
            },
            ..ctx
        };
        let conversion = convert::convert(&vmi, &ctx)
            .map_err(|e| CommandError::invalid_argument(at_vmi_path(&e.path, &e.message)))?;
        let unprivileged = self.config.qemu_unprivileged() && info.driver == DriverKind::Qemu;
        if unprivileged {
            crate::unprivileged::check_domain(&conversion.domain)
                .and_then(|()| {
                    crate::unprivileged::check_domain_host_devices(
                        &conversion.domain,
                        &crate::unprivileged::VfioHost::system(),
                        &crate::unprivileged::Identity::current(),
                    )
                })
                .map_err(|e| CommandError::new(ErrorClass::Unavailable, e))?;
        }
        if conversion.domain.devices.vsock.is_some() {
            self.check_vhost_vsock()?;
        }
        // The VMI's sidecars are the pod's: they must be among those that
        // answered at start-up, or the VMI would start without their change.
        let wanted = convert::hook_sidecar_count(&vmi)
            .map_err(|e| CommandError::invalid_argument(at_vmi_path(&e.path, &e.message)))?;
        if wanted > self.config.hooks.sidecars.len() {
            return Err(CommandError::new(
                ErrorClass::Unavailable,
                format!(
                    "sync: metadata.annotations.{}: the VMI names {wanted} hook sidecar(s), but {} answered when the launcher started; start it with --hook-sidecars {wanted}, their sockets in --hook-sidecars-dir",
                    crate::kubevirt::proto::hooks::HOOK_SIDECARS_ANNOTATION,
                    self.config.hooks.sidecars.len()
                ),
            ));
        }
        let network = self.plan_network(&vmi, &conversion.domain, info.driver)?;
        let virtiofs = if (conversion.filesystems.is_empty()
            && conversion.pr_helper_socket.is_none())
            || info.driver == DriverKind::Test
        {
            None
        } else {
            let missing = if conversion.filesystems.is_empty() {
                None
            } else {
                crate::daemons::virtiofs::unavailable()
            };
            let missing = missing.or_else(|| {
                conversion
                    .pr_helper_socket
                    .as_ref()
                    .and_then(|_| crate::daemons::pr_helper::unavailable())
            });
            if let Some(why) = missing {
                return Err(CommandError::new(
                    ErrorClass::Unavailable,
                    format!("sync: {why}"),
                ));
            }
            Some(crate::daemons::virtiofs::VirtiofsJob {
                shares: conversion.filesystems,
                pr_helper: conversion.pr_helper_socket,
                daemons: self.daemons.clone(),
                slot: self.virtiofs.clone(),
                fatal: self.fatal.clone(),
            })
        };
        Ok(SyncPlan {
            domain_name: self.config.domain_name.clone(),
            domain: conversion.domain,
            network,
            virtiofs,
            disk_plan: conversion.disk_plan,
            unprivileged,
            start_paused: vmi.starts_paused(),
            grace_period: self.grace_period_for(&vmi),
            vmi,
            vmi_json: vmi_json.clone(),
            live: None,
            hooks: (!self.config.hooks.is_empty()).then(|| HookRun {
                sidecars: self.config.hooks.clone(),
                vmi: vmi_json.to_string().into_bytes(),
                cloud_init: conversion.cloud_init.clone(),
            }),
            cloud_init: conversion.cloud_init,
            steps: Steps::default(),
        })
    }

    /// The host device a vsock needs, checked on every driver (the test
    /// driver too, so that `--vhost-vsock-device` can be tested there): a
    /// kernel without vhost_vsock is named here rather than by QEMU
    /// failing at start.
    fn check_vhost_vsock(&self) -> Result<(), CommandError> {
        let device = &self.config.vhost_vsock_device;
        match std::fs::metadata(device) {
            Ok(_) => Ok(()),
            Err(e) => Err(CommandError::new(
                ErrorClass::Unavailable,
                format!(
                    "sync: spec.domain.devices.autoattachVSOCK needs the host's {} ({e}): load the kernel module vhost_vsock, or name the device with --vhost-vsock-device",
                    device.display()
                ),
            )),
        }
    }

    /// The VMI's pod networking (crate::network), decided on the manager
    /// thread; `None` on the test driver.
    fn plan_network(
        &self,
        vmi: &crate::vmi::VirtualMachineInstance,
        domain: &crate::domxml::Domain,
        driver: DriverKind,
    ) -> Result<Option<crate::network::NetworkJob>, CommandError> {
        let (interfaces, networks) = convert::interfaces_and_networks(vmi);
        let queues = |name: &str| {
            domain
                .devices
                .interfaces
                .iter()
                .find(|nic| {
                    nic.alias
                        .as_ref()
                        .is_some_and(|a| a.name == format!("ua-{name}"))
                })
                .and_then(|nic| nic.driver.as_ref().and_then(|d| d.queues))
                .unwrap_or(1)
        };
        let mut plan = crate::network::plan::plan(vmi, &interfaces, &networks, queues)
            .map_err(|e| CommandError::invalid_argument(at_vmi_path(&e.path, &e.message)))?;
        let by_libvirt = convert::passt_by_libvirt(
            crate::hypervisor::state::parse_libvirt_version(&self.hypervisor.info().daemon_version),
        );
        for passt in &mut plan.passt {
            passt.by_libvirt = by_libvirt;
            passt.socket = convert::passt_socket(&self.config.dirs.private, &passt.name);
            if !by_libvirt && driver != DriverKind::Test {
                log::info!(
                    "manager: interface {:?} (passt binding): libvirt {} is older than 9.2, which added <backend type='passt'/>; the launcher runs passt itself and QEMU joins it through <qemu:commandline> (-netdev stream)",
                    passt.name,
                    self.hypervisor.info().daemon_version
                );
            }
        }
        for name in &plan.slirp {
            log::warn!(
                "manager: interface {name:?} uses slirp (QEMU user networking), which KubeVirt removed; \
                 the guest is not on the pod network and only reaches out through NAT"
            );
        }
        if driver == DriverKind::Test || (plan.taps.is_empty() && plan.passt.is_empty()) {
            return Ok(None);
        }
        let passt_spawner = self.daemons.clone().map(|daemons| {
            crate::network::passt::Spawner(std::sync::Arc::new(move |command| {
                daemons.spawn_member(command)
            }))
        });
        if plan.taps.is_empty() {
            return Ok(Some(crate::network::NetworkJob {
                plan,
                options: crate::network::SetupOptions {
                    mode: crate::network::Mode::Existing,
                    resolv_conf: self.config.resolv_conf.clone(),
                    tap_owner: None,
                    mac_seed: format!("{}/{}", self.config.domain_name, self.config.uid),
                    passt_spawner,
                },
                slot: self.network.clone(),
            }));
        }
        let (mode, why) = if self.config.nonroot && self.config.spawn_libvirt {
            // Its user namespace shows every capability, over nothing
            // outside it: never set up. (setup itself is refused at start.)
            (
                crate::network::Mode::Existing,
                "non-root mode: the launcher creates no network devices",
            )
        } else {
            crate::network::decide_mode(self.config.pod_network, self.config.spawn_libvirt)
        };
        log::info!("manager: pod network mode {mode:?} ({why})");
        if self.config.qemu_unprivileged() && mode == crate::network::Mode::Existing {
            let taps: Vec<String> = plan.taps.iter().map(|t| t.tap.clone()).collect();
            crate::unprivileged::check_taps(&taps, &crate::unprivileged::Identity::current())
                .map_err(|e| CommandError::new(ErrorClass::Unavailable, e))?;
        }
        Ok(Some(crate::network::NetworkJob {
            plan,
            options: crate::network::SetupOptions {
                mode,
                resolv_conf: self.config.resolv_conf.clone(),
                tap_owner: None,
                mac_seed: format!("{}/{}", self.config.domain_name, self.config.uid),
                passt_spawner,
            },
            slot: self.network.clone(),
        }))
    }

    /// The grace period for `vmi`: the flag's, else the VMI's own. The
    /// converter refuses a VMI's out of its range (0 to ten years); this
    /// holds it there anyway, as the stop's deadline is built from it.
    fn grace_period_for(&self, vmi: &crate::vmi::VirtualMachineInstance) -> Duration {
        self.config.grace_period.unwrap_or_else(|| {
            let seconds = u64::try_from(vmi.termination_grace_period_seconds()).unwrap_or(0);
            Duration::from_secs(seconds.min(crate::limits::MAX_SECONDS))
        })
    }

    /// A VMI for another VM must not be run by this launcher.
    fn check_identity(&self, namespace: &str, name: &str, uid: &str) -> Result<(), CommandError> {
        let mismatch = |field: &str, got: &str, want: &str| {
            CommandError::invalid_argument(format!(
                "arguments.vmi.metadata.{field}: \"{got}\" does not match this launcher's VMI {} ({field} \"{want}\")",
                self.config.vmi_ref()
            ))
        };
        if !name.is_empty() && name != self.config.name {
            return Err(mismatch("name", name, &self.config.name));
        }
        if !namespace.is_empty() && namespace != self.config.namespace {
            return Err(mismatch("namespace", namespace, &self.config.namespace));
        }
        if !uid.is_empty() && uid != self.config.uid {
            return Err(mismatch("uid", uid, &self.config.uid));
        }
        Ok(())
    }
}

fn run_sync(hv: &dyn Hypervisor, mut plan: SyncPlan) -> JobOutput {
    let mut steps = std::mem::take(&mut plan.steps);
    let action = match sync_domain(hv, &plan, &mut steps) {
        Ok(action) => action,
        Err(e) => return JobOutput::reply(Err(e)),
    };
    // A domain that ran already gets the VMI's changes live.
    let mut changes = Vec::new();
    if !action.started()
        && let Some(live) = &mut plan.live
    {
        live.read_unknown_stack(hv);
        changes = match steps.time("live_changes", || {
            apply_live(hv, &plan.domain_name, live, plan.network.as_ref())
        }) {
            Ok(changes) => changes,
            Err(e) => return JobOutput::reply(Err(e)),
        };
    }
    let mut action = match action {
        SyncAction::None if !changes.is_empty() => SyncAction::Updated,
        other => other,
    };
    let mut status = steps.time("read_state_after", || hv.domain_status(&plan.domain_name));
    // A daemon that restarted while QEMU was starting may report the
    // half-started domain as running, then give it up (libvirt 11: shut off,
    // reason "daemon"): the domain this sync found running is gone. Start it
    // as for a domain found down (once).
    if !action.started()
        && let Ok(Some(after)) = status
        && !after.state.is_active()
    {
        log::info!(
            "manager: sync: the domain found running is {:?} ({:?}) now; starting it again",
            after.state,
            after.reason
        );
        action = match sync_domain(hv, &plan, &mut steps) {
            Ok(again) => again,
            Err(e) => return JobOutput::reply(Err(e)),
        };
        changes.clear();
        status = steps.time("read_state_after", || hv.domain_status(&plan.domain_name));
    }
    // A re-sync that changed nothing is routine (virt-handler repeats
    // them); one that did something is worth a line.
    let level = if action == SyncAction::None {
        log::Level::Debug
    } else {
        log::Level::Info
    };
    log::log!(
        level,
        "manager: sync {} ({})",
        action.as_str(),
        steps.describe()
    );
    let mut synced = Synced {
        domain: plan.domain_name.clone(),
        action,
        started_paused: plan.start_paused && action.started(),
        after: None,
        changes,
        steps,
    };
    match status {
        Ok(status) => {
            synced.after = status;
            JobOutput {
                result: Ok(JobValue::Synced(synced)),
                observed: Observation::Status(status),
            }
        }
        // The sync itself worked; its events will show the state.
        Err(_) => JobOutput::reply(Ok(JobValue::Synced(synced))),
    }
}

/// Define if missing, start if down, resume if paused by something other
/// than the user.
fn sync_domain(
    hv: &dyn Hypervisor,
    plan: &SyncPlan,
    steps: &mut Steps,
) -> Result<SyncAction, CommandError> {
    let name = &plan.domain_name;
    let existing = steps
        .time("read_state", || hv.domain_status(name))
        .map_err(|e| hypervisor_error(&e))?;
    let action = match existing {
        None => {
            create_domain(hv, plan, steps)?;
            SyncAction::DefinedAndStarted
        }
        Some(status) if !status.state.is_active() => {
            // A stopped domain's definition may be stale (left by an
            // earlier launcher on a shared daemon): replace it with this
            // VMI's rather than start an old spec.
            steps
                .time("undefine", || hv.undefine(name))
                .map_err(|e| hypervisor_error(&e))?;
            create_domain(hv, plan, steps)?;
            SyncAction::RedefinedAndStarted
        }
        // Paused by the user (pause, or started paused) or by a migration
        // in progress: left alone.
        Some(status)
            if status.state == DomainState::Paused
                && !status.is_paused_by_user()
                && status.reason != StateReason::Migration =>
        {
            match steps.time("resume", || hv.resume(name)) {
                Ok(()) => SyncAction::Resumed,
                // A daemon that restarted while QEMU was starting reports the
                // half-started domain as paused, then gives it up: the resume
                // finds it gone. What is true now decides.
                Err(e) if e.kind == HypervisorErrorKind::InvalidOperation => {
                    let now = steps
                        .time("read_state", || hv.domain_status(name))
                        .map_err(|e| hypervisor_error(&e))?;
                    match now {
                        Some(status) if status.state.is_active() => {
                            return Err(hypervisor_error(&e));
                        }
                        Some(_) => {
                            steps
                                .time("undefine", || hv.undefine(name))
                                .map_err(|e| hypervisor_error(&e))?;
                            create_domain(hv, plan, steps)?;
                            SyncAction::RedefinedAndStarted
                        }
                        None => {
                            create_domain(hv, plan, steps)?;
                            SyncAction::DefinedAndStarted
                        }
                    }
                }
                Err(e) => return Err(hypervisor_error(&e)),
            }
        }
        Some(_) => SyncAction::None,
    };
    Ok(action)
}

fn create_domain(
    hv: &dyn Hypervisor,
    plan: &SyncPlan,
    steps: &mut Steps,
) -> Result<(), CommandError> {
    let Some(job) = &plan.virtiofs else {
        return define_and_start(hv, plan, steps);
    };
    // Each filesystem's virtiofsd listens before QEMU connects to it, as
    // KubeVirt's virtiofs containers start with the pod.
    let what = if job.pr_helper.is_some() {
        "the domain's helper daemons"
    } else {
        "virtiofsd"
    };
    steps.time("virtiofs", || job.run()).map_err(|e| {
        CommandError::new(ErrorClass::Unavailable, format!("cannot start {what}: {e}"))
    })?;
    let started = define_and_start(hv, plan, steps);
    // Stopped again unless a QEMU may be using them (the daemon was lost
    // during the start, so whether the domain runs is not known).
    if started.is_err() {
        let may_run = match hv.domain_status(&plan.domain_name) {
            Ok(None) => false,
            Ok(Some(status)) => status.state.is_active(),
            Err(_) => true,
        };
        if !may_run {
            crate::daemons::virtiofs::stop(&job.slot);
        }
    }
    started
}

fn define_and_start(
    hv: &dyn Hypervisor,
    plan: &SyncPlan,
    steps: &mut Steps,
) -> Result<(), CommandError> {
    // A host device that is not there is named now rather than by QEMU's
    // failure to start (the test driver uses no host device).
    if hv.info().driver == DriverKind::Qemu {
        let host = crate::hotplug::ready::HostPaths::system();
        crate::hotplug::ready::host_devices_present(&plan.domain.devices.hostdevs, &host)
            .map_err(|e| CommandError::invalid_argument(format!("sync: {}", e.message)))?;
    }
    // Pod networking first, as KubeVirt's virt-handler prepares the pod
    // before the launcher defines the domain; dropped (removed) on failure.
    let mut domain = plan.domain.clone();
    let active = match &plan.network {
        Some(job) => {
            let active = steps.time("network", || job.run()).map_err(|e| {
                CommandError::new(
                    ErrorClass::Unavailable,
                    format!("cannot set up the pod network: {e}"),
                )
            })?;
            crate::network::setup::patch_domain(&mut domain, &active);
            Some(active)
        }
        None => None,
    };
    // As KubeVirt's launcher: the cloud-init data through the
    // `PreCloudInitIso` hooks, the disks, their cache modes from the images
    // just prepared, then the domain through the `OnDefineDomain` hooks.
    let disk_plan = match &plan.hooks {
        Some(hooks) => steps.time("hooks", || hooks.pre_cloud_init(&plan.disk_plan, "sync"))?,
        None => Cow::Borrowed(&plan.disk_plan),
    };
    let prepared = steps
        .time("disks", || disks::prepare(&disk_plan))
        .map_err(disk_error)?;
    // The test driver opens no image.
    if hv.info().driver == DriverKind::Qemu
        && let Err(e) = steps.time("cache_modes", || {
            disks::set_cache_modes(&mut domain, &disk_plan, &mut disks::HostProbe)
        })
    {
        prepared.rollback();
        return Err(CommandError::invalid_argument(format!("sync: {e}")));
    }
    let xml = match steps.time("write_xml", || domain.to_xml()) {
        Ok(xml) => xml,
        Err(e) => {
            prepared.rollback();
            return Err(CommandError::internal(format!(
                "cannot write the domain XML: {e}"
            )));
        }
    };
    let xml = match &plan.hooks {
        Some(hooks) => {
            match steps.time("hooks", || hooks.on_define(xml, &plan.domain_name, "sync")) {
                Ok(xml) => xml,
                Err(e) => {
                    prepared.rollback();
                    return Err(e);
                }
            }
        }
        None => xml,
    };
    log::debug!("manager: domain XML for {}:\n{xml}", plan.domain_name);
    if plan.unprivileged
        && let Err(e) = crate::unprivileged::check_disks(&domain)
    {
        prepared.rollback();
        return Err(CommandError::new(ErrorClass::Unavailable, e));
    }
    if let Err(e) = steps.time("define", || hv.define(&xml)) {
        prepared.rollback();
        return Err(hypervisor_error(&e));
    }
    if let Err(e) = steps.time("start", || hv.start(&plan.domain_name, plan.start_paused)) {
        let lost = e.kind == HypervisorErrorKind::ConnectionLost;
        let error = undo_failed_start(hv, plan, prepared, &e);
        // A QEMU that may have started uses the pod network too; otherwise
        // dropping `active` removes it.
        if lost && let (Some(job), Some(active)) = (&plan.network, active) {
            job.keep(active);
        }
        return Err(error);
    }
    if let (Some(job), Some(active)) = (&plan.network, active) {
        job.keep(active);
    }
    Ok(())
}

/// A missing or unusable image is the VMI's problem; a failed write or
/// qemu-img run is the host's.
fn disk_error(e: DiskError) -> CommandError {
    let class = match e.kind {
        DiskErrorKind::Missing | DiskErrorKind::Invalid => ErrorClass::InvalidArgument,
        DiskErrorKind::Io | DiskErrorKind::Command => ErrorClass::Internal,
    };
    CommandError::new(class, format!("cannot prepare the VMI's disks: {e}"))
}

impl SyncPlan {
    /// A migration target's hook sidecars, as KubeVirt's target launcher
    /// calls them while it prepares (`prepareMigrationTarget`): the
    /// cloud-init data through `PreCloudInitIso` (the target writes its
    /// own ISO, which then holds what the source's does), and the target's
    /// own domain through `OnDefineDomain`, for the setup a sidecar does
    /// there; the domain it returns is not used (the incoming domain is
    /// the source's, which its sidecars changed already), but a failed or
    /// refused call fails the preparation. Run by the preparation's job.
    pub(super) fn run_target_hooks(
        &self,
        active: Option<&crate::network::ActiveNetwork>,
    ) -> Result<Cow<'_, DiskPlan>, CommandError> {
        let Some(hooks) = &self.hooks else {
            return Ok(Cow::Borrowed(&self.disk_plan));
        };
        let mut domain = self.domain.clone();
        if let Some(active) = active {
            crate::network::setup::patch_domain(&mut domain, active);
        }
        let disk_plan = hooks.pre_cloud_init(&self.disk_plan, "prepare-migration-target")?;
        let xml = domain
            .to_xml()
            .map_err(|e| CommandError::internal(format!("cannot write the domain XML: {e}")))?;
        hooks.on_define(xml, &self.domain_name, "prepare-migration-target")?;
        Ok(disk_plan)
    }
}

/// The hook sidecars' part of a sync, run by the sync job (on a worker
/// thread: a sidecar that hangs holds the job, never the manager).
struct HookRun {
    sidecars: Arc<HookSidecars>,
    /// The VMI as the client sent it, as JSON: what the hooks get.
    vmi: Vec<u8>,
    cloud_init: Option<convert::CloudInitIso>,
}

impl HookRun {
    /// As KubeVirt's launcher, before it writes the disks: the cloud-init
    /// data through the `PreCloudInitIso` hooks; returns the disk plan with
    /// the ISO's new contents.
    fn pre_cloud_init<'a>(
        &self,
        disk_plan: &'a DiskPlan,
        command: &str,
    ) -> Result<Cow<'a, DiskPlan>, CommandError> {
        let mut disk_plan = Cow::Borrowed(disk_plan);
        let step = self.cloud_init.as_ref().and_then(|iso| {
            let at = disk_plan
                .steps
                .iter()
                .position(|s| matches!(s, DiskStep::WriteIso { path, .. } if *path == iso.path))?;
            Some((iso, at))
        });
        if let Some((iso, at)) = step
            && let DiskStep::WriteIso { contents, what, .. } = &mut disk_plan.to_mut().steps[at]
        {
            let files = disks::iso_files(contents, &iso.path, what).map_err(disk_error)?;
            let data = self
                .sidecars
                .pre_cloud_init_iso(iso.hook_data(&files), &self.vmi)
                .map_err(|e| hook_failed(e, command))?;
            *contents = IsoContents::Files(iso.apply_hook_data(files, &data));
        }
        Ok(disk_plan)
    }

    /// The domain XML through the `OnDefineDomain` hooks (after the disks
    /// and their cache modes, as KubeVirt's launcher); returns the XML to
    /// define.
    fn on_define(
        &self,
        xml: String,
        domain_name: &str,
        command: &str,
    ) -> Result<String, CommandError> {
        self.sidecars
            .on_define_domain(xml, &self.vmi, |xml| {
                let domain = crate::domxml::Domain::from_xml(xml).map_err(|e| e.to_string())?;
                if domain.name != domain_name {
                    return Err(format!(
                        "it names domain {:?}, not this launcher's {domain_name:?}",
                        domain.name
                    ));
                }
                Ok(())
            })
            .map_err(|e| hook_failed(e, command))
    }
}

fn hook_failed(e: HookError, command: &str) -> CommandError {
    match e {
        HookError::Call(why) => {
            CommandError::new(ErrorClass::Unavailable, format!("{command}: {why}"))
        }
        HookError::BadResult(why) => CommandError::invalid_argument(format!("{command}: {why}")),
    }
}

/// After a failed start: leave nothing half-created where that is known to
/// be safe, and say what is true.
fn undo_failed_start(
    hv: &dyn Hypervisor,
    plan: &SyncPlan,
    prepared: disks::PreparedDisks,
    e: &HypervisorError,
) -> CommandError {
    if e.kind == HypervisorErrorKind::ConnectionLost {
        // The daemon went away during the start: the domain may or may not
        // run now (QEMU outlives its daemon), so its files stay, and the
        // definition cannot be removed anyway.
        return CommandError::new(
            ErrorClass::Unavailable,
            format!(
                "sync: libvirt was lost while starting the domain, so whether it started is not known: {}",
                e.message
            ),
        )
        .with_cause(e.to_string())
        .with_cause(
            "the domain stays defined and its files stay; the launcher reconnects and reads the domain's state (see query-status and DOMAIN_LIFECYCLE events); if it did not start, sync again, which replaces the definition",
        );
    }
    let error = hypervisor_error(e);
    match hv.undefine(&plan.domain_name) {
        Ok(()) => {
            prepared.rollback();
            error.with_cause("the domain was undefined again")
        }
        Err(undefine) => {
            log::warn!("manager: could not undefine after a failed start: {undefine}");
            prepared.rollback();
            error.with_cause(format!(
                "the domain stays defined (undefining it failed: {undefine}); the next sync replaces the definition"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domain_type_decision() {
        let ok = Ok(());
        let missing: Result<(), String> = Err("/dev/kvm: No such file".into());
        assert_eq!(
            decide_domain_type(DriverKind::Test, false, false, &missing),
            Ok(DomainType::Test)
        );
        assert_eq!(
            decide_domain_type(DriverKind::Qemu, false, false, &ok),
            Ok(DomainType::Kvm)
        );
        assert_eq!(
            decide_domain_type(DriverKind::Qemu, true, true, &ok),
            Ok(DomainType::Qemu)
        );
        assert_eq!(
            decide_domain_type(DriverKind::Qemu, false, true, &missing),
            Ok(DomainType::Qemu)
        );
        let err = decide_domain_type(DriverKind::Qemu, false, false, &missing).unwrap_err();
        assert_eq!(err.class, ErrorClass::Unavailable);
        assert!(err.desc.contains("--allow-emulation"));
        assert!(err.desc.contains("No such file"));
    }
}
