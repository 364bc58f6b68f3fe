//! KubeVirt's `Cmd` service (cmd v1) and `CmdInfo`, over the domain
//! manager: each RPC becomes the JSON protocol's command (the same
//! validation, caches, state checks and errors), and its reply KubeVirt's
//! response message. Like KubeVirt's launcher, a failed call is answered
//! with gRPC status OK and `success: false` with the reason (only `Exec`
//! and `GuestPing` also fail at the gRPC level); a call this launcher
//! cannot do yet says so the same way, naming the RPC.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::api;
use super::backup as kv_backup;
use super::converted::{Converted, StatsKey};
use super::k8s_events::K8sEvent;
use super::migration::{self as kv_migration, HandlerMigrationOptions};
use super::notify::K8sEventSender;
use super::proto::cmd::*;
use super::proto::info::{CmdInfoResponse, SUPPORTED_CMD_VERSIONS};
use super::proto::methods::{CmdMethod, CmdRequest, LauncherMethod};
use crate::command::{Command, ManagerCommand, ManagerRequest, MigrationCommand, ReplyTo};
use crate::config::Config;
use crate::grpc::{Code, Handler, Status};
use crate::hypervisor::{DomainState, DomainStatus, StateReason};
use crate::migration::{MigrationPhase, MigrationStatus, Role};
use crate::protocol::{CommandError, CommandResult, Encoded, ErrorClass, Return};
use crate::replies::{DiskErrorReply, Part};
use crate::sink::Sink;

/// The gRPC handler for the launcher's `Cmd` and `CmdInfo` services;
/// the Kubernetes events a call gives rise to go to `k8s_events`.
pub fn cmd_handler(
    manager: Sink<ManagerRequest>,
    config: Arc<Config>,
    k8s_events: K8sEventSender,
) -> Arc<dyn Handler> {
    Arc::new(CmdService {
        client: ManagerClient::new(manager, config),
        k8s_events,
    })
}

struct CmdService {
    client: ManagerClient,
    k8s_events: K8sEventSender,
}

impl std::ops::Deref for CmdService {
    type Target = ManagerClient;
    fn deref(&self) -> &ManagerClient {
        &self.client
    }
}

/// Runs the JSON protocol's commands on the domain manager and reads their
/// replies back into KubeVirt's shapes; the gRPC service and the notifier
/// share it.
pub struct ManagerClient {
    manager: Sink<ManagerRequest>,
    config: Arc<Config>,
    /// The host's CPU count, for the stats' CPU maps: read once.
    host_cpus: Option<usize>,
    converted: Converted,
}

impl Handler for CmdService {
    fn call(&self, method: &str, request: &[u8]) -> Result<Vec<u8>, Status> {
        let Some(method) = LauncherMethod::from_path(method) else {
            return Err(Status::unimplemented(method));
        };
        match method {
            LauncherMethod::Info => Ok(CmdInfoResponse {
                supported_cmd_versions: SUPPORTED_CMD_VERSIONS.to_vec(),
            }
            .encode()),
            LauncherMethod::Cmd(method) => {
                let request = CmdRequest::decode(method, request).map_err(|e| {
                    Status::new(Code::InvalidArgument, format!("{}: {e}", method.name()))
                })?;
                self.dispatch(request)
            }
        }
    }
}

/// `Response{success: true}`.
fn ok() -> Response {
    Response {
        success: true,
        message: String::new(),
    }
}

fn failed(message: impl Into<String>) -> Response {
    Response {
        success: false,
        message: message.into(),
    }
}

/// A command's result as KubeVirt's `Response`.
fn response(result: &CommandResult) -> Response {
    match result {
        Ok(_) => ok(),
        Err(e) => failed(describe(e)),
    }
}

fn describe(e: &CommandError) -> String {
    format!("{}: {}", e.class.as_str(), e.desc)
}

/// What KubeVirt's launcher answers for an RPC it cannot serve.
fn unsupported(method: CmdMethod) -> Response {
    failed(format!(
        "{} is not supported by this launcher (virt-launcher {}) yet",
        method.name(),
        env!("CARGO_PKG_VERSION")
    ))
}

/// What of virt-handler's `VirtualMachineOptions` the launcher applies, as
/// the `sync` command's `options` (see `convert::ClusterOptions`), read as
/// KubeVirt's `generateConverterContext` reads them (Go's zero values for
/// what is absent). The interfaces' migration is applied when the
/// migration is finalized. The rest is not applied: disks info (this
/// launcher reads the images itself, as KubeVirt's does), and the cluster
/// settings for hardware this launcher does not pass through (PCI NUMA
/// awareness, vGPU migration, Grace).
fn cluster_options(options: &VirtualMachineOptions) -> Value {
    let cluster = options.cluster_config.clone().unwrap_or_default();
    let mut out = json!({
        "memBalloonStatsPeriod": options.mem_balloon_stats_period,
        "preallocatedVolumes": options.preallocated_volumes,
        "freePageReportingDisabled": cluster.free_page_reporting_disabled,
        "bochsDisplayForEfiGuests": cluster.bochs_display_for_efi_guests,
        "serialConsoleLogDisabled": cluster.serial_console_log_disabled,
    });
    if let Some(topology) = &options.topology
        && !topology.numa_cells.is_empty()
    {
        out["topology"] = json!({
            "cells": topology.numa_cells.iter().map(|cell| json!({
                "id": cell.id,
                "cpus": cell.cpus.iter()
                    .map(|cpu| json!({"id": cpu.id, "siblings": cpu.siblings}))
                    .collect::<Vec<_>>(),
                "distances": cell.distances.iter()
                    .map(|d| json!({"id": d.id, "value": d.value}))
                    .collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        });
    }
    out["interfaceDomainAttachment"] = json!(options.interface_domain_attachment);
    if let Some(smbios) = &options.virtual_machine_smbios {
        out["smbios"] = json!({
            "manufacturer": smbios.manufacturer,
            "product": smbios.product,
            "version": smbios.version,
            "sku": smbios.sku,
            "family": smbios.family,
        });
    }
    out
}

/// The interfaces whose binding migrates by `LinkRefresh` (KubeVirt's
/// `interfacesToReconnect`): their links go down and up on the target.
fn links_to_refresh(options: Option<&VirtualMachineOptions>) -> Vec<String> {
    options
        .into_iter()
        .flat_map(|o| &o.interface_migration)
        .filter(|(_, migration)| migration.method == "LinkRefresh")
        .map(|(name, _)| name.clone())
        .collect()
}

/// Where `GetVMStats` puts one guest agent command's answer.
type AgentSlot = fn(&mut VmStatsResponse) -> &mut Option<Response>;

/// The guest agent commands a `VMStatsRequest` asks for, in KubeVirt's
/// order, each with its place in the response.
fn vm_stats_agent_commands(request: &VmStatsRequest) -> Vec<(&'static str, AgentSlot)> {
    let r = request;
    let all: [(bool, &'static str, AgentSlot); 14] = [
        (r.guest_get_load.is_some(), "guest-get-load", |s| {
            &mut s.guest_get_load
        }),
        (r.guest_get_cpu_stats.is_some(), "guest-get-cpustats", |s| {
            &mut s.guest_get_cpu_stats
        }),
        (
            r.guest_get_disk_stats.is_some(),
            "guest-get-diskstats",
            |s| &mut s.guest_get_disk_stats,
        ),
        (r.guest_get_time.is_some(), "guest-get-time", |s| {
            &mut s.guest_get_time
        }),
        (r.guest_get_vcpus.is_some(), "guest-get-vcpus", |s| {
            &mut s.guest_get_vcpus
        }),
        (
            r.guest_get_memory_block_info.is_some(),
            "guest-get-memory-block-info",
            |s| &mut s.guest_get_memory_block_info,
        ),
        (r.guest_get_users.is_some(), "guest-get-users", |s| {
            &mut s.guest_get_users
        }),
        (r.guest_get_os_info.is_some(), "guest-get-osinfo", |s| {
            &mut s.guest_get_os_info
        }),
        (r.guest_get_disks.is_some(), "guest-get-disks", |s| {
            &mut s.guest_get_disks
        }),
        (
            r.guest_get_host_name.is_some(),
            "guest-get-host-name",
            |s| &mut s.guest_get_host_name,
        ),
        (r.guest_get_timezone.is_some(), "guest-get-timezone", |s| {
            &mut s.guest_get_timezone
        }),
        (
            r.guest_network_get_route.is_some(),
            "guest-network-get-route",
            |s| &mut s.guest_network_get_route,
        ),
        (
            r.guest_network_get_interfaces.is_some(),
            "guest-network-get-interfaces",
            |s| &mut s.guest_network_get_interfaces,
        ),
        (
            r.guest_get_memory_blocks.is_some(),
            "guest-get-memory-blocks",
            |s| &mut s.guest_get_memory_blocks,
        ),
    ];
    all.into_iter()
        .filter(|(asked, _, _)| *asked)
        .map(|(_, name, slot)| (name, slot))
        .collect()
}

/// One guest agent answer as `GetVMStats` carries it in a `Response`'s
/// message: the agent's reply as JSON text, as libvirt hands it over.
fn agent_data(value: &Value) -> String {
    json!({ "return": value }).to_string()
}

/// The VMI a request carries, as KubeVirt's launcher reads it.
fn vmi_of(vmi: Option<&Vmi>) -> Result<Value, Response> {
    let invalid = || failed("No valid vmi object present in command server request");
    let vmi = vmi.ok_or_else(invalid)?;
    match serde_json::from_slice::<Value>(&vmi.vmi_json) {
        Ok(value) if value.is_object() => Ok(value),
        _ => Err(invalid()),
    }
}

/// The domain as a notification tells it, before the notifier adds its
/// own parts.
pub struct DomainRead {
    pub domain: api::Domain,
    /// The disks whose I/O errors paused the domain.
    pub disk_errors: Vec<DiskErrorReply>,
    /// The guest agent's last `guest-fsfreeze-status` (`thawed`,
    /// `frozen`), empty before the agent reported one: notifications carry
    /// it, GetDomain does not (as in KubeVirt).
    pub fs_freeze_status: String,
}

impl ManagerClient {
    pub fn new(manager: Sink<ManagerRequest>, config: Arc<Config>) -> ManagerClient {
        ManagerClient {
            manager,
            config,
            host_cpus: api::host_cpu_count(),
            converted: Converted::default(),
        }
    }

    /// Runs one command of the JSON protocol and waits for its reply (the
    /// manager answers every request, or drops it with an error).
    fn run(&self, name: &str, arguments: Value) -> CommandResult {
        let arguments = match arguments {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        let Command::Manager(command) = Command::parse(name, arguments)? else {
            return Err(CommandError::internal(format!(
                "{name} is not a command of the domain manager"
            )));
        };
        self.send(name, command)
    }

    /// Sends a command to the manager and waits for its reply.
    fn send(&self, name: &str, command: ManagerCommand) -> CommandResult {
        let (reply, answer) = ReplyTo::channel();
        self.manager
            .send(ManagerRequest { command, reply })
            .map_err(|_| {
                CommandError::new(ErrorClass::Unavailable, "the domain manager has stopped")
            })?;
        answer.recv().unwrap_or_else(|_| {
            Err(CommandError::internal(format!(
                "{name}: the domain manager dropped the request"
            )))
        })
    }

    /// A command whose `NotFound` (no domain) is success, as KubeVirt's
    /// idempotent kill, delete and shutdown are.
    fn run_idempotent(&self, name: &str) -> Response {
        match self.run(name, json!({})) {
            Err(e) if e.class == ErrorClass::NotFound => ok(),
            // KubeVirt's kill and shutdown have nothing to do on a domain
            // that is not running (KillVMI, SignalShutdownVMI), such as one
            // that stopped and waits for virt-handler's Delete, which the
            // manager refuses as InvalidState.
            Err(e)
                if e.class == ErrorClass::InvalidState
                    && name != "delete"
                    && !self.domain_is_active() =>
            {
                ok()
            }
            result => response(&result),
        }
    }

    /// Whether a QEMU process runs the domain (running, paused, shutting
    /// down); no domain is not.
    fn domain_is_active(&self) -> bool {
        self.run("query-domain", json!({ "fields": ["state"] }))
            .map(|reply| status_of(&reply).state.is_active())
            .unwrap_or(false)
    }

    /// The domain as KubeVirt's `api.Domain` JSON; `None` when there is none.
    fn kubevirt_domain(&self) -> Result<Option<String>, String> {
        let Some(domain) = self.read_domain()? else {
            return Ok(None);
        };
        serde_json::to_string(&domain)
            .map(Some)
            .map_err(|e| format!("cannot encode the domain: {e}"))
    }

    /// The live domain with its state and what the guest agent reported.
    pub fn read_domain(&self) -> Result<Option<api::Domain>, String> {
        Ok(self.read_domain_for_notify()?.map(|read| read.domain))
    }

    /// `read_domain`, with what a notification adds: the disks whose I/O
    /// errors paused the domain and the agent's last freeze status.
    pub fn read_domain_for_notify(&self) -> Result<Option<DomainRead>, String> {
        let reply = match self.run(
            "query-domain",
            json!({ "fields": ["xml", "state", "guest"] }),
        ) {
            Ok(reply) => reply,
            Err(e) if e.class == ErrorClass::NotFound => return Ok(None),
            Err(e) => return Err(describe(&e)),
        };
        let status = status_of(&reply);
        let disk_errors = reply
            .as_domain()
            .and_then(|d| d.disk_errors.clone())
            .unwrap_or_default();
        let xml = reply
            .as_domain()
            .and_then(|d| d.xml.as_ref())
            .filter(|xml| xml.get() != "\"\"");
        let Some(xml) = xml else {
            if status.state == DomainState::NoState {
                return Ok(None);
            }
            return Err("query-domain answered no domain XML".into());
        };
        let spec = self.converted.spec(xml)?;
        let (namespace, name) = api::split_domain_name(&spec.name);
        let mut domain = api::Domain::reference(namespace, name);
        domain.spec = (*spec).clone();
        domain.set_status(status);
        // A migration's progress and outcome, where KubeVirt's launcher
        // keeps them for virt-handler.
        if let Ok(reply) = self.run("query-migration", json!({}))
            && let Some(migration) = reply.as_migration()
        {
            domain.spec.metadata.kubevirt.migration =
                migration.migration.as_ref().map(kv_migration::metadata);
        }
        // When virt-handler's Shutdown first asked the guest to power off:
        // virt-handler counts the grace period from it before it kills the
        // domain, and KubeVirt's launcher keeps it in the grace period
        // metadata (SignalShutdownVMI).
        if let Ok(reply) = self.run("query-status", json!({}))
            && let Some(at) = reply.as_status().and_then(|s| s.shutdown_requested)
            && let Some(seconds) = std::time::Duration::try_from_secs_f64(at)
                .ok()
                .and_then(|since| i64::try_from(since.as_secs()).ok())
            && let Some(grace) = domain.spec.metadata.kubevirt.grace_period.as_mut()
        {
            grace.deletion_timestamp = Some(api::GoTime::from_unix(seconds));
        }
        // What the guest agent last reported, once it has: the interfaces
        // and the OS, as KubeVirt's launcher merges them into the status,
        // kept after the guest stopped as KubeVirt's agent store keeps them.
        let guest = reply
            .as_domain()
            .and_then(|d| d.guest.clone())
            .unwrap_or_default();
        if !guest.interfaces.is_empty() {
            domain.status.interfaces =
                Some(guest.interfaces.iter().map(api::interface_status).collect());
        }
        if let Some(os) = &guest.os {
            domain.status.os_info = api::os_info(os);
        }
        Ok(Some(DomainRead {
            domain,
            disk_errors,
            fs_freeze_status: guest.fs_freeze_status.unwrap_or_default().to_string(),
        }))
    }
}

impl CmdService {
    fn dispatch(&self, request: CmdRequest) -> Result<Vec<u8>, Status> {
        use CmdRequest as R;
        let method = request.method();
        let plain = |response: Response| Ok(response.encode());
        match request {
            R::SyncVirtualMachine(r)
            | R::HotplugHostDevices(r)
            | R::SyncVirtualMachineCPUs(r)
            | R::SyncVirtualMachineMemory(r) => {
                // A sync applies whatever changed: hotplugged host devices,
                // vCPUs and memory among it.
                match vmi_of(r.vmi.as_ref()) {
                    Ok(vmi) => {
                        let mut arguments = json!({ "vmi": vmi });
                        if let Some(options) = &r.options {
                            arguments["options"] = cluster_options(options);
                        }
                        plain(response(&self.run("sync", arguments)))
                    }
                    Err(refused) => plain(refused),
                }
            }
            R::PauseVirtualMachine(_) => plain(response(&self.run("pause", json!({})))),
            R::UnpauseVirtualMachine(_) => plain(response(&self.run("unpause", json!({})))),
            R::ResetVirtualMachine(_) => plain(response(&self.run("reset", json!({})))),
            R::SoftRebootVirtualMachine(_) => plain(response(&self.run("reboot", json!({})))),
            R::ShutdownVirtualMachine(_) => plain(self.run_idempotent("shutdown")),
            R::KillVirtualMachine(_) => plain(self.run_idempotent("kill")),
            R::DeleteVirtualMachine(_) => plain(self.run_idempotent("delete")),
            R::FreezeVirtualMachine(r) => {
                let timeout = u64::try_from(r.unfreeze_timeout_seconds).unwrap_or(0);
                plain(response(&self.run(
                    "freeze",
                    json!({ "unfreeze_timeout_seconds": timeout }),
                )))
            }
            R::UnfreezeVirtualMachine(_) => plain(response(&self.run("unfreeze", json!({})))),
            R::CancelVirtualMachineMigration(_) => {
                // KubeVirt's cancel never fails: nothing to cancel is done.
                if let Err(e) = self.run("migrate-cancel", json!({})) {
                    log::debug!("kubevirt: CancelVirtualMachineMigration: {}", describe(&e));
                }
                plain(ok())
            }
            R::SignalTargetPodCleanup(r) => plain(self.signal_target_pod_cleanup(r.vmi.as_ref())),
            R::Ping(_) => plain(ok()),
            R::GetDomain(_) => Ok(self.get_domain().encode()),
            R::GetDomainStats(_) => Ok(self.get_domain_stats().encode()),
            R::GetGuestInfo(_) => Ok(self.get_guest_info().encode()),
            R::GetUsers(_) => Ok(self.get_users().encode()),
            R::GetFilesystems(_) => Ok(self.get_filesystems().encode()),
            R::Exec(r) => self.exec(&r),
            R::GuestPing(r) => self.guest_ping(&r),
            R::GetQemuVersion(_) => Ok(self.qemu_version().encode()),
            R::VirtualMachineMemoryDump(r) => {
                // Started here, finished in the background: virt-handler
                // follows it in the domain's metadata, as with KubeVirt.
                plain(response(
                    &self.run("memory-dump", json!({ "path": r.dump_path })),
                ))
            }
            R::MigrateVirtualMachine(r) => plain(self.migrate(&r)),
            R::SyncMigrationTarget(r) => plain(self.sync_migration_target(r.vmi.as_ref())),
            R::FinalizeVirtualMachineMigration(r) => match vmi_of(r.vmi.as_ref()) {
                Ok(_) => plain(response(&self.run(
                    "finalize-migration",
                    json!({ "refresh_links": links_to_refresh(r.options.as_ref()) }),
                ))),
                Err(refused) => plain(refused),
            },
            R::InjectLaunchSecret(_) => plain(unsupported(method)),
            R::BackupVirtualMachine(r) => plain(self.backup(&r)),
            R::GetSEVInfo(_) => Ok(SevInfoResponse {
                response: Some(unsupported(method)),
                ..Default::default()
            }
            .encode()),
            R::GetLaunchMeasurement(_) => Ok(LaunchMeasurementResponse {
                response: Some(unsupported(method)),
                ..Default::default()
            }
            .encode()),
            R::GetDomainDirtyRateStats(_) => Ok(self.dirty_rate().encode()),
            R::GetScreenshot(_) => Ok(self.screenshot().encode()),
            R::RedefineCheckpoint(r) => Ok(self.redefine_checkpoint(&r).encode()),
            R::GetVMStats(r) => self.vm_stats(&r).map(|stats| stats.encode()),
        }
    }

    /// `BackupVirtualMachine`: KubeVirt's start (idempotent for the
    /// same backup name and start time) or abort of a changed block
    /// tracking backup, as the `backup` and `backup-abort` commands.
    fn backup(&self, request: &BackupRequest) -> Response {
        let vmi = match vmi_of(request.vmi.as_ref()) {
            Ok(vmi) => vmi,
            Err(refused) => return refused,
        };
        let vmi_name = vmi["metadata"]["name"]
            .as_str()
            .unwrap_or(&self.config.name);
        let call = match kv_backup::backup_call(&request.options, vmi_name, &self.config.dirs.share)
        {
            Ok(call) => call,
            Err(message) => return failed(message),
        };
        // The last backup, as query-status reports it.
        let last = self
            .run("query-status", json!({}))
            .ok()
            .and_then(|status| status.into_object().get("backup").cloned())
            .filter(Value::is_object);
        let last_is = |checkpoint: &str| {
            last.as_ref()
                .filter(|b| b["checkpoint"] == checkpoint)
                .map(|b| b["phase"] == "InProgress")
        };
        match call {
            kv_backup::BackupCall::Start {
                checkpoint,
                arguments,
                make_dir,
                quiesce,
            } => {
                match last_is(&checkpoint) {
                    Some(true) => return ok(),
                    Some(false) => {
                        return failed(format!(
                            "backup {checkpoint} already executed: {}",
                            last.as_ref().map_or(Value::Null, |b| b["phase"].clone())
                        ));
                    }
                    None => {}
                }
                if let Some(dir) = make_dir
                    && let Err(e) = std::fs::create_dir_all(&dir)
                {
                    return failed(format!(
                        "error creating dir for backup: {}: {e}",
                        dir.display()
                    ));
                }
                // As KubeVirt's launcher: the guest's filesystems frozen
                // while libvirt takes the checkpoint, a failed freeze only
                // logged.
                let frozen = quiesce
                    && match self.run("freeze", json!({})) {
                        Ok(_) => true,
                        Err(e) => {
                            log::warn!(
                                "kubevirt: backup {checkpoint}: Failed freezing guest filesystem: {}",
                                describe(&e)
                            );
                            false
                        }
                    };
                let started = self.run("backup", arguments);
                if frozen && let Err(e) = self.run("unfreeze", json!({})) {
                    log::warn!(
                        "kubevirt: backup {checkpoint}: Failed to unfreeze filesystem after backup completion: {}",
                        describe(&e)
                    );
                }
                response(&started)
            }
            kv_backup::BackupCall::Abort { checkpoint } => match last_is(&checkpoint) {
                Some(true) => response(&self.run("backup-abort", json!({}))),
                Some(false) => failed("failed to abort backup: backup already completed"),
                None if last.as_ref().is_some_and(|b| b["phase"] == "InProgress") => {
                    failed("failed to abort backup: requested backup differs from ongoing one")
                }
                None => failed("failed to abort backup: could not find ongoing backup"),
            },
        }
    }

    /// `RedefineCheckpoint`: the `redefine-checkpoint` command over the
    /// VMI's changedBlockTracking disks; an invalid checkpoint (its
    /// bitmaps missing or broken) fails with `checkpointInvalid`.
    fn redefine_checkpoint(
        &self,
        request: &RedefineCheckpointRequest,
    ) -> RedefineCheckpointResponse {
        let answer = |response: Response, checkpoint_invalid: bool| RedefineCheckpointResponse {
            response: Some(response),
            checkpoint_invalid,
        };
        if let Err(refused) = vmi_of(request.vmi.as_ref()) {
            return answer(refused, false);
        }
        let (name, arguments) = match kv_backup::redefine_arguments(&request.checkpoint) {
            Ok(parsed) => parsed,
            Err(message) => return answer(failed(message), false),
        };
        match self.run("redefine-checkpoint", arguments) {
            Ok(reply) => {
                let reply = reply.into_object();
                if reply.get("valid") == Some(&Value::Bool(true)) {
                    answer(ok(), false)
                } else {
                    let reason = reply
                        .get("reason")
                        .and_then(Value::as_str)
                        .unwrap_or("libvirt found its bitmaps invalid");
                    answer(
                        failed(format!("failed to redefine checkpoint {name}: {reason}")),
                        true,
                    )
                }
            }
            Err(e) => answer(failed(describe(&e)), false),
        }
    }

    /// This launcher's migration record, as `query-migration` has it.
    fn migration_record(&self) -> Option<MigrationStatus> {
        let reply = self.run("query-migration", json!({})).ok()?;
        reply.as_migration()?.migration.clone()
    }

    /// `MigrateVirtualMachine` on the source: the domain goes through
    /// virt-handler's proxy sockets in the share directory, with the
    /// VMI's migration UID and the disks KubeVirt copies. Asked again for
    /// a migration that runs, it is done; one that ended is not repeated
    /// (KubeVirt's migrations are one shot).
    fn migrate(&self, request: &MigrationRequest) -> Response {
        let vmi = match vmi_of(request.vmi.as_ref()) {
            Ok(vmi) => vmi,
            Err(refused) => return refused,
        };
        let Some(migration_uid) = crate::migration::kubevirt_migration_uid(&vmi) else {
            return failed("cannot migrate VMI until migrationState is ready");
        };
        if let Some(record) = self.migration_record()
            && record.migration_uid.as_deref() == Some(&migration_uid)
        {
            if record.ended.is_none() {
                return ok();
            }
            return failed(format!(
                "migration job {migration_uid} already executed, phase {}",
                record.phase.as_str()
            ));
        }
        let handler_options = match HandlerMigrationOptions::parse(&request.options) {
            Ok(options) => options,
            Err(e) => return failed(e),
        };
        let xml = match self.run("query-domain", json!({ "fields": ["xml"] })) {
            // The XML is carried as the JSON string the reply writes.
            Ok(reply) => reply
                .as_domain()
                .and_then(|d| d.xml.as_ref())
                .and_then(|xml| serde_json::from_str::<String>(xml.get()).ok())
                .unwrap_or_default(),
            Err(e) => return failed(describe(&e)),
        };
        let copy_disks = match kv_migration::disks_to_copy(&vmi, &xml) {
            Ok(disks) => disks,
            Err(e) => return failed(e),
        };
        let uid = vmi
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .filter(|uid| !uid.is_empty())
            .unwrap_or(&self.config.uid)
            .to_string();
        let target = kv_migration::target_address(
            &self.config.dirs.share,
            &uid,
            kv_migration::vmi_is_non_root(&vmi),
        );
        let kubevirt = crate::migration::KubeVirtMigration {
            migration_uid,
            copy_disks,
            ..Default::default()
        };
        let options = match handler_options.into_options(target, kubevirt) {
            Ok(options) => options,
            Err(e) => return failed(e),
        };
        response(&self.send(
            "migrate",
            ManagerCommand::Migration(MigrationCommand::Migrate(Box::new(options))),
        ))
    }

    /// `SyncMigrationTarget`: this fresh launcher prepares for the incoming
    /// domain as KubeVirt's target does (disks, network, and the
    /// directory QEMU listens in for the proxied streams). Asked again
    /// while prepared, it is done.
    fn sync_migration_target(&self, vmi: Option<&Vmi>) -> Response {
        let vmi = match vmi_of(vmi) {
            Ok(vmi) => vmi,
            Err(refused) => return refused,
        };
        if let Some(record) = self.migration_record()
            && record.role == Role::Target
            && matches!(
                record.phase,
                MigrationPhase::Prepared | MigrationPhase::Running
            )
        {
            return ok();
        }
        let dir = kv_migration::proxy_dir(&self.config.dirs.share);
        if let Err(e) = std::fs::create_dir_all(&dir) {
            return failed(format!("cannot create {}: {e}", dir.display()));
        }
        response(&self.run("prepare-migration-target", json!({ "vmi": vmi })))
    }

    /// `SignalTargetPodCleanup`: virt-handler gave up a migration into
    /// this pod. As KubeVirt's launcher, only the VMI's target pod (its
    /// `POD_NAME`) takes it; a target still waiting for the domain cleans
    /// up and exits, and one the domain is arriving into destroys the
    /// incoming domain (which fails the source's migration) and exits, as
    /// KubeVirt's target pod ends on the signal whatever it was doing.
    fn signal_target_pod_cleanup(&self, vmi: Option<&Vmi>) -> Response {
        let vmi = match vmi_of(vmi) {
            Ok(vmi) => vmi,
            Err(refused) => return refused,
        };
        let pod = std::env::var("POD_NAME").unwrap_or_default();
        let target_pod = vmi
            .pointer("/status/migrationState/targetPod")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if pod.is_empty() || pod != target_pod {
            return ok();
        }
        let unfinished = self.migration_record().is_some_and(|record| {
            record.role == Role::Target
                && matches!(
                    record.phase,
                    MigrationPhase::Prepared | MigrationPhase::Running
                )
        });
        if unfinished {
            log::info!("kubevirt: target pod {pod} signalled to clean up");
            if let Err(e) = self.run("migrate-cancel", json!({})) {
                log::warn!("kubevirt: SignalTargetPodCleanup: {}", describe(&e));
            }
        }
        ok()
    }

    fn get_domain(&self) -> DomainResponse {
        let (response, domain) = match self.kubevirt_domain() {
            Ok(Some(domain)) => (ok(), domain),
            // No domain: an empty answer, as KubeVirt's launcher gives.
            Ok(None) => (ok(), String::new()),
            Err(message) => (failed(message), String::new()),
        };
        DomainResponse {
            response: Some(response),
            domain,
        }
    }

    /// From the manager's cached statistics and live domain; made again
    /// only when either changed (`converted`).
    fn get_domain_stats(&self) -> DomainStatsResponse {
        let result = (|| -> Result<String, String> {
            let reply = match self.run("query-stats", json!({})) {
                Ok(reply) => reply,
                Err(e) if e.class == ErrorClass::NotFound => return Ok(String::new()),
                Err(e) => return Err(describe(&e)),
            };
            let bulk = reply
                .as_stats()
                .map(|s| s.stats.clone())
                .unwrap_or_else(|| Encoded::new(&Map::new()));
            let described = self
                .run("query-domain", json!({ "fields": ["uuid", "xml"] }))
                .ok();
            let key = StatsKey {
                bulk,
                uuid: described
                    .as_ref()
                    .and_then(|r| r.as_domain())
                    .and_then(|d| d.uuid.clone())
                    .unwrap_or_default(),
                xml: described
                    .as_ref()
                    .and_then(|r| r.as_domain())
                    .and_then(|d| d.xml.clone()),
            };
            self.converted.stats(key, |key| self.make_domain_stats(key))
        })();
        let (response, domain_stats) = match result {
            Ok(stats) => (ok(), stats),
            Err(message) => (failed(message), String::new()),
        };
        DomainStatsResponse {
            response: Some(response),
            domain_stats,
        }
    }

    /// KubeVirt's `stats.DomainStats` JSON from the manager's replies.
    fn make_domain_stats(&self, key: &StatsKey) -> Result<String, String> {
        let bulk: Map<String, Value> = serde_json::from_str(key.bulk.get())
            .map_err(|e| format!("query-stats: the statistics are not an object: {e}"))?;
        // Without a readable domain, the statistics without what it adds
        // (device aliases, vCPU pinning), as before the domain is read.
        let spec = key
            .xml
            .as_ref()
            .and_then(|xml| self.converted.spec(xml).ok());
        let stats = api::DomainStats::from_sources(&api::StatsSources {
            name: &self.config.domain_name,
            uuid: &key.uuid,
            bulk: &bulk,
            domain: spec.as_deref(),
            host_cpus: self.host_cpus,
            load: None,
            migration: None,
        });
        serde_json::to_string(&stats).map_err(|e| format!("cannot encode the stats: {e}"))
    }

    /// A guest-agent query's answer as JSON text: what `answer` takes
    /// of the reply (`null` when the reply is not the command's); an
    /// agent that is not there answers `empty`, as KubeVirt's agent cache
    /// does before its first poll.
    fn agent_json<T: Serialize>(
        &self,
        command: &str,
        answer: impl FnOnce(&Return) -> Option<&T>,
        empty: &str,
    ) -> (Response, String) {
        match self.run(command, json!({})) {
            Ok(reply) => {
                // Through a JSON value: its objects write their keys in
                // byte order, as the socket's replies do.
                let text = serde_json::to_value(answer(&reply))
                    .and_then(|value| serde_json::to_string(&value));
                match text {
                    Ok(text) => (ok(), text),
                    Err(e) => (
                        failed(format!("cannot encode {command}: {e}")),
                        String::new(),
                    ),
                }
            }
            Err(e) if matches!(e.class, ErrorClass::Unavailable | ErrorClass::NotFound) => {
                (ok(), empty.to_string())
            }
            Err(e) => (failed(describe(&e)), String::new()),
        }
    }

    fn get_guest_info(&self) -> GuestInfoResponse {
        let (response, guest_info_response) =
            self.agent_json("query-guest-info", Return::as_guest_info, "{}");
        GuestInfoResponse {
            response: Some(response),
            guest_info_response,
        }
    }

    fn get_users(&self) -> GuestUserListResponse {
        let (response, guest_user_list_response) =
            self.agent_json("query-users", |r| r.as_users().map(|u| &u.users), "[]");
        GuestUserListResponse {
            response: Some(response),
            guest_user_list_response,
        }
    }

    fn get_filesystems(&self) -> GuestFilesystemsResponse {
        let (response, guest_filesystems_response) = self.agent_json(
            "query-filesystems",
            |r| r.as_filesystems().map(|f| &f.filesystems),
            "[]",
        );
        GuestFilesystemsResponse {
            response: Some(response),
            guest_filesystems_response,
        }
    }

    /// A request naming another domain than this launcher's.
    fn other_domain(&self, domain_name: &str) -> Option<Status> {
        (!domain_name.is_empty() && domain_name != self.config.domain_name).then(|| {
            Status::new(
                Code::NotFound,
                format!(
                    "domain {domain_name} is not this launcher's ({})",
                    self.config.domain_name
                ),
            )
        })
    }

    fn exec(&self, request: &ExecRequest) -> Result<Vec<u8>, Status> {
        if let Some(status) = self.other_domain(&request.domain_name) {
            return Err(status);
        }
        let timeout = u64::try_from(request.timeout_seconds).unwrap_or(0).max(1);
        let result = self.run(
            "guest-exec",
            json!({
                "command": request.command,
                "args": request.args,
                "timeout_seconds": timeout,
            }),
        );
        match result {
            Ok(reply) => {
                let executed = reply.as_executed();
                let exit_code = executed
                    .and_then(|e| e.exit_code)
                    .and_then(|c| i32::try_from(c).ok())
                    .unwrap_or(-1);
                let std_out = executed.map(|e| e.stdout.clone()).unwrap_or_default();
                Ok(ExecResponse {
                    response: Some(ok()),
                    exit_code,
                    std_out,
                }
                .encode())
            }
            Err(e) => Err(Status::new(Code::Unknown, describe(&e))),
        }
    }

    fn guest_ping(&self, request: &GuestPingRequest) -> Result<Vec<u8>, Status> {
        if let Some(status) = self.other_domain(&request.domain_name) {
            return Err(status);
        }
        let timeout = u64::try_from(request.timeout_seconds).unwrap_or(0).max(1);
        match self.run("guest-ping", json!({ "timeout_seconds": timeout })) {
            Ok(_) => Ok(GuestPingResponse {
                response: Some(ok()),
            }
            .encode()),
            Err(e) => {
                // virt-handler records it on the VMI, as KubeVirt's
                // launcher reports a failed probe.
                self.k8s_events
                    .send(K8sEvent::guest_agent_ping_failed(&self.config.name));
                Err(Status::new(Code::Unknown, describe(&e)))
            }
        }
    }

    /// `GetVMStats` (KubeVirt's VMStatsCollector feature gate,
    /// `--vm-stats-collector`): the parts asked for, the domain statistics
    /// and the dirty rate as their own calls give them, the guest agent's
    /// answers as `query-vm-stats` keeps them; a part that failed is named
    /// in the response's message and the rest is still returned, as in
    /// KubeVirt. Without the feature gate, a gRPC error, as KubeVirt's.
    fn vm_stats(&self, request: &VmStatsRequest) -> Result<VmStatsResponse, Status> {
        if !self.config.kubevirt.vm_stats_collector {
            return Err(Status::new(
                Code::Unknown,
                "VMStatsCollector feature gate is not enabled".to_string(),
            ));
        }
        let mut errors = Vec::new();
        let mut stats = VmStatsResponse::default();
        if request.domain_stats.is_some() {
            let domain = self.get_domain_stats();
            if let Some(failed) = domain.response.as_ref().filter(|r| !r.success) {
                errors.push(format!("domain stats: {}", failed.message));
            }
            stats.domain_stats = Some(domain);
        }
        if request.dirty_rate.is_some() {
            let rate = self.dirty_rate();
            if let Some(failed) = rate.response.as_ref().filter(|r| !r.success) {
                errors.push(format!("dirty rate stats: {}", failed.message));
            }
            stats.dirty_rate_stats = Some(rate);
        }
        let asked = vm_stats_agent_commands(request);
        if !asked.is_empty() {
            let names: Vec<&str> = asked.iter().map(|(name, _)| *name).collect();
            let read = self.run(
                "query-vm-stats",
                json!({ "domain_stats": false, "dirty_rate": false, "agent": names }),
            );
            let read = read.as_ref().map(|reply| reply.as_vm_stats());
            let version = match &read {
                Ok(Some(vm)) => vm.guest_agent_version.clone().flatten(),
                _ => None,
            };
            stats.guest_agent_version = Some(Response {
                success: true,
                message: version.unwrap_or_default(),
            });
            for (name, slot) in asked {
                let part = match &read {
                    Ok(Some(vm)) => vm.agent.as_ref().and_then(|agent| agent.get(name)),
                    _ => None,
                };
                let answer = match (part, &read) {
                    (Some(Part::Read(answer)), _) => Response {
                        success: true,
                        message: agent_data(&answer.value),
                    },
                    (Some(Part::Failed { error }), _) => failed(error.clone()),
                    (None, Err(e)) => failed(describe(e)),
                    (None, Ok(_)) => failed(format!("{name}: no answer kept")),
                };
                if !answer.success {
                    errors.push(format!("agent data {name}: {}", answer.message));
                }
                *slot(&mut stats) = Some(answer);
            }
        }
        stats.response = Some(if errors.is_empty() {
            ok()
        } else {
            failed(errors.join("; "))
        });
        Ok(stats)
    }

    /// KubeVirt's one-second dirty rate measurement.
    fn dirty_rate(&self) -> DirtyRateStatsResponse {
        match self.run("query-dirty-rate", json!({ "seconds": 1 })) {
            Ok(reply) => DirtyRateStatsResponse {
                response: Some(ok()),
                dirty_rate_mbs: reply
                    .as_dirty_rate()
                    .map_or(0, |rate| rate.megabytes_per_second),
            },
            Err(e) => DirtyRateStatsResponse {
                response: Some(failed(describe(&e))),
                dirty_rate_mbs: 0,
            },
        }
    }

    fn screenshot(&self) -> ScreenshotResponse {
        let taken = self.run("screenshot", json!({})).and_then(|reply| {
            let Some(shot) = reply.as_screenshot() else {
                return Ok((String::new(), Vec::new()));
            };
            let data = crate::encoding::base64_decode(&shot.data).map_err(|e| {
                CommandError::internal(format!("screenshot: the image is not base64: {e}"))
            })?;
            Ok((shot.mime.to_string(), data))
        });
        match taken {
            Ok((mime, data)) => ScreenshotResponse {
                response: Some(ok()),
                mime,
                data,
            },
            Err(e) => ScreenshotResponse {
                response: Some(failed(describe(&e))),
                ..Default::default()
            },
        }
    }

    fn qemu_version(&self) -> QemuVersionResponse {
        match self.run("query-qemu-version", json!({})) {
            Ok(reply) => QemuVersionResponse {
                response: Some(ok()),
                version: reply
                    .as_qemu_version()
                    .map(|v| v.version.clone())
                    .unwrap_or_default(),
            },
            Err(e) => QemuVersionResponse {
                response: Some(failed(describe(&e))),
                version: String::new(),
            },
        }
    }
}

/// The state and reason of a `query-domain` reply.
fn status_of(reply: &Return) -> DomainStatus {
    let domain = reply.as_domain();
    let state = domain.and_then(|d| d.state).unwrap_or_default();
    let reason = domain.and_then(|d| d.reason).unwrap_or_default();
    DomainStatus::new(
        DomainState::from_name(state).unwrap_or(DomainState::NoState),
        StateReason::from_name(reason).unwrap_or(StateReason::Unknown),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::ClusterOptions;
    use crate::kubevirt::proto::cmd::{Cell, Cpu, Sibling, Topology};
    use std::collections::BTreeMap;

    #[test]
    fn virt_handlers_options_become_syncs_options() {
        let options = VirtualMachineOptions {
            virtual_machine_smbios: Some(Smbios {
                manufacturer: "Acme".into(),
                product: "Rocket".into(),
                version: "2.1".into(),
                sku: "R-1".into(),
                family: "Rockets".into(),
            }),
            mem_balloon_stats_period: 3,
            preallocated_volumes: vec!["thick".into()],
            cluster_config: Some(ClusterConfig {
                free_page_reporting_disabled: true,
                bochs_display_for_efi_guests: true,
                serial_console_log_disabled: true,
                ..Default::default()
            }),
            topology: Some(Topology {
                numa_cells: vec![Cell {
                    id: 0,
                    cpus: vec![Cpu {
                        id: 2,
                        siblings: vec![2, 3],
                    }],
                    distances: vec![Sibling { id: 0, value: 10 }],
                    ..Default::default()
                }],
            }),
            interface_domain_attachment: BTreeMap::from([("cni".into(), "managedTap".into())]),
            ..Default::default()
        };
        // What the sync command then parses.
        let parsed: ClusterOptions = serde_json::from_value(cluster_options(&options)).unwrap();
        let smbios = parsed.smbios.clone().unwrap();
        assert_eq!(
            [
                smbios.manufacturer,
                smbios.product,
                smbios.version,
                smbios.sku,
                smbios.family
            ],
            ["Acme", "Rocket", "2.1", "R-1", "Rockets"]
        );
        assert_eq!(parsed.mem_balloon_stats_period, 3);
        assert!(parsed.preallocated_volumes.contains("thick"));
        assert!(parsed.free_page_reporting_disabled);
        assert_eq!(parsed.bochs_display_for_efi_guests, Some(true));
        assert!(parsed.serial_console_log_disabled);
        assert_eq!(
            parsed.topology.as_ref().and_then(|t| t.to_host()),
            Some(crate::convert::HostTopology {
                cells: vec![crate::convert::HostCell {
                    id: 0,
                    cpus: vec![(2, vec![2, 3])],
                    distances: vec![(0, 10)],
                }]
            })
        );
        assert_eq!(
            ClusterOptions::domain_attachment(Some(&parsed), "cni"),
            Some(crate::convert::DomainAttachment::Tap)
        );
        // Options without SMBIOS or cluster settings: Go's zero values, as
        // KubeVirt's launcher reads them (VGA for EFI guests among them).
        let parsed: ClusterOptions =
            serde_json::from_value(cluster_options(&VirtualMachineOptions::default())).unwrap();
        assert_eq!(
            parsed,
            ClusterOptions {
                bochs_display_for_efi_guests: Some(false),
                interface_domain_attachment: Some(BTreeMap::new()),
                ..ClusterOptions::default()
            }
        );
    }

    #[test]
    fn interfaces_migrating_by_link_refresh_are_refreshed_on_finalize() {
        use crate::kubevirt::proto::cmd::InterfaceBindingMigration;
        let method = |m: &str| InterfaceBindingMigration { method: m.into() };
        let options = VirtualMachineOptions {
            interface_migration: BTreeMap::from([
                ("blue".into(), method("LinkRefresh")),
                ("red".into(), method("")),
                ("default".into(), method("LinkRefresh")),
            ]),
            ..Default::default()
        };
        assert_eq!(links_to_refresh(Some(&options)), ["blue", "default"]);
        assert!(links_to_refresh(None).is_empty());
        // What the finalize-migration command then parses.
        let command = Command::parse(
            "finalize-migration",
            json!({ "refresh_links": links_to_refresh(Some(&options)) })
                .as_object()
                .cloned()
                .unwrap_or_default(),
        );
        assert_eq!(
            command.ok(),
            Some(Command::Manager(ManagerCommand::Migration(
                crate::command::MigrationCommand::Finalize {
                    refresh_links: vec!["blue".into(), "default".into()]
                }
            )))
        );
    }

    use std::sync::Mutex;

    /// What the fake manager answers: the statistics and the live domain.
    struct Answers {
        stats: Encoded,
        uuid: String,
        xml: String,
    }

    const UUID: &str = "3d5c2a8e-1f4b-5e6a-9c7d-0b1a2c3d4e5f";

    fn xml() -> String {
        format!(
            "<domain type='qemu'><name>e2e_vm</name><uuid>{UUID}</uuid><vcpu placement='static'>1</vcpu>\
             <devices><interface type='ethernet'><mac address='52:54:00:7e:57:01'/>\
             <target dev='tap0' managed='no'/><alias name='ua-default'/></interface></devices></domain>"
        )
    }

    fn bulk(cpu_time: u64) -> Encoded {
        Encoded::new(&json!({
            "state.state": 1,
            "cpu.time": cpu_time,
            "net.count": 1,
            "net.0.name": "tap0",
            "net.0.rx.bytes": 1234,
        }))
    }

    /// A domain manager that answers `query-stats` and `query-domain` from
    /// `answers` as the real one answers from its caches: the same encoded
    /// members until they change.
    fn fake_manager(answers: Arc<Mutex<Answers>>) -> Sink<ManagerRequest> {
        let (tx, rx) = crossbeam_channel::unbounded::<ManagerRequest>();
        std::thread::spawn(move || {
            for request in rx {
                let answers = answers.lock().unwrap();
                let reply: Return = match request.command.name() {
                    "query-stats" => crate::replies::StatsReply {
                        age_ms: 0,
                        domain: "e2e_vm".into(),
                        stats: answers.stats.clone(),
                    }
                    .into(),
                    "query-domain" => crate::replies::DomainReply {
                        name: "e2e_vm".into(),
                        uuid: Some(answers.uuid.clone()),
                        xml: Some(Encoded::new(&answers.xml)),
                        ..Default::default()
                    }
                    .into(),
                    "query-vm-stats" => crate::replies::VmStats {
                        agent: Some(
                            [
                                (
                                    "guest-get-host-name".to_string(),
                                    Part::Read(crate::replies::AgentReturn {
                                        age_ms: 0,
                                        value: json!({"host-name": "kvguest"}),
                                    }),
                                ),
                                (
                                    "guest-get-load".to_string(),
                                    Part::Failed {
                                        error: "The command guest-get-load has not been found"
                                            .into(),
                                    },
                                ),
                            ]
                            .into(),
                        ),
                        dirty_rate: None,
                        domain: "e2e_vm".into(),
                        domain_stats: None,
                        errors: Vec::new(),
                        guest_agent_version: Some(Some("7.2.22".into())),
                    }
                    .into(),
                    other => panic!("unexpected {other}"),
                };
                request.reply.send(Ok(reply));
            }
        });
        tx.into()
    }

    fn config() -> Arc<Config> {
        config_with(&[])
    }

    fn config_with(flags: &[&str]) -> Arc<Config> {
        let mut argv = vec!["--name", "vm", "--namespace", "e2e", "--uid", "u1"];
        argv.extend_from_slice(flags);
        match crate::cli::parse(argv) {
            Ok(crate::cli::Action::Run(args)) => Arc::new(Config::resolve(*args).unwrap()),
            _ => unreachable!(),
        }
    }

    fn domain_stats(service: &dyn Handler) -> Value {
        let bytes = service
            .call("/kubevirt.cmd.v1.Cmd/GetDomainStats", &[])
            .unwrap();
        let response = DomainStatsResponse::decode(&bytes).unwrap();
        assert!(response.response.unwrap().success);
        serde_json::from_str(&response.domain_stats).unwrap()
    }

    #[test]
    fn domain_stats_follow_each_change_of_the_statistics_and_the_domain() {
        let answers = Arc::new(Mutex::new(Answers {
            stats: bulk(1_000),
            uuid: UUID.into(),
            xml: xml(),
        }));
        let service = cmd_handler(
            fake_manager(answers.clone()),
            config(),
            crate::kubevirt::notify::k8s_event_queue().0,
        );
        let first = domain_stats(&*service);
        assert_eq!(first["Name"], "e2e_vm");
        assert_eq!(first["UUID"], UUID);
        assert_eq!(first["Cpu"]["Time"], 1_000);
        assert_eq!(first["Net"][0]["Alias"], "default");
        assert_eq!(first["Net"][0]["RxBytes"], 1234);
        // Asked again with nothing changed: the same answer.
        assert_eq!(domain_stats(&*service), first);

        // A new sample: the guest used more CPU.
        answers.lock().unwrap().stats = bulk(2_500);
        let sampled = domain_stats(&*service);
        assert_eq!(sampled["Cpu"]["Time"], 2_500);
        assert_eq!(sampled["Net"][0]["Alias"], "default");

        // The live domain changed (its interface was renamed): the alias
        // follows.
        answers.lock().unwrap().xml = xml().replace("ua-default", "ua-other");
        assert_eq!(domain_stats(&*service)["Net"][0]["Alias"], "other");

        // A domain XML that cannot be read: the statistics without what it
        // adds, as before.
        answers.lock().unwrap().xml = "<domain".into();
        let unread = domain_stats(&*service);
        assert_eq!(unread["Cpu"]["Time"], 2_500);
        assert_eq!(unread["Net"][0]["AliasSet"], false);
    }

    #[test]
    fn vm_stats_need_the_feature_gate_and_carry_each_part_asked_for() {
        let answers = Arc::new(Mutex::new(Answers {
            stats: bulk(1_000),
            uuid: UUID.into(),
            xml: xml(),
        }));
        let request = VmStatsRequest {
            domain_stats: Some(DomainStatsRequest {}),
            guest_get_host_name: Some(AgentHostNameRequest {}),
            guest_get_load: Some(AgentLoadRequest {}),
            ..Default::default()
        }
        .encode();
        let method = "/kubevirt.cmd.v1.Cmd/GetVMStats";

        // Without --vm-stats-collector: a gRPC error, as KubeVirt's.
        let gated = cmd_handler(
            fake_manager(answers.clone()),
            config(),
            crate::kubevirt::notify::k8s_event_queue().0,
        );
        let refused = gated.call(method, &request).err().map(|s| s.message);
        assert_eq!(
            refused.as_deref(),
            Some("VMStatsCollector feature gate is not enabled")
        );

        let service = cmd_handler(
            fake_manager(answers),
            config_with(&["--vm-stats-collector"]),
            crate::kubevirt::notify::k8s_event_queue().0,
        );
        let bytes = service.call(method, &request).unwrap();
        let stats = VmStatsResponse::decode(&bytes).unwrap();
        // One part failed: the call says which, the others are there.
        let response = stats.response.unwrap();
        assert!(!response.success);
        assert_eq!(
            response.message,
            "agent data guest-get-load: The command guest-get-load has not been found"
        );
        let domain = stats.domain_stats.unwrap();
        assert!(domain.response.unwrap().success);
        let domain: Value = serde_json::from_str(&domain.domain_stats).unwrap();
        assert_eq!(domain["Cpu"]["Time"], 1_000);
        let host = stats.guest_get_host_name.unwrap();
        assert!(host.success);
        assert_eq!(host.message, r#"{"return":{"host-name":"kvguest"}}"#);
        assert!(!stats.guest_get_load.unwrap().success);
        assert_eq!(stats.guest_agent_version.unwrap().message, "7.2.22");
        // What was not asked for is absent.
        assert!(stats.dirty_rate_stats.is_none());
        assert!(stats.guest_get_time.is_none());
    }
}
