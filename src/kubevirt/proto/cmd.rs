//! The messages of `kubevirt.cmd.v1` (`schema/cmd.proto`): what
//! virt-handler sends the launcher's `Cmd` service and what it answers.
//! Rust names follow Rust's conventions; each message's and field's .proto
//! name is beside it (and in errors).

use std::collections::BTreeMap;

use super::message::proto_message;

proto_message! {
    /// `QemuVersionResponse`: GetQemuVersion's answer.
    QemuVersionResponse = "QemuVersionResponse" {
        response: Option<Response> = 1 "response",
        version: String = 2 "version",
    }

    /// `VMI`: the VirtualMachineInstance as KubeVirt's JSON.
    Vmi = "VMI" {
        vmi_json: Vec<u8> = 1 "vmiJson",
    }

    /// `CPU`: a NUMA cell's host CPU and its siblings.
    Cpu = "CPU" {
        id: u32 = 1 "id",
        siblings: Vec<u32> = 2 "siblings",
    }

    /// `Sibling`: the distance to another NUMA cell.
    Sibling = "Sibling" {
        id: u32 = 1 "id",
        value: u64 = 2 "value",
    }

    /// `Pages`: a NUMA cell's pages of one size.
    Pages = "Pages" {
        count: u64 = 1 "count",
        unit: String = 2 "unit",
        size: u32 = 3 "size",
    }

    /// `Memory`: a NUMA cell's memory.
    Memory = "Memory" {
        amount: u64 = 1 "amount",
        unit: String = 2 "unit",
    }

    /// `Cell`: one host NUMA cell.
    Cell = "Cell" {
        id: u32 = 1 "id",
        memory: Option<Memory> = 2 "memory",
        pages: Vec<Pages> = 3 "pages",
        distances: Vec<Sibling> = 4 "distances",
        cpus: Vec<Cpu> = 5 "cpus",
    }

    /// `Topology`: the host's NUMA cells.
    Topology = "Topology" {
        numa_cells: Vec<Cell> = 1 "numa_cells",
    }

    /// `SMBios`: the SMBIOS system information the cluster configures.
    Smbios = "SMBios" {
        manufacturer: String = 1 "manufacturer",
        product: String = 2 "product",
        version: String = 3 "version",
        sku: String = 4 "sku",
        family: String = 5 "family",
    }

    /// `DiskInfo`: what virt-handler found out about a disk's image.
    DiskInfo = "DiskInfo" {
        format: String = 1 "format",
        backing_file: String = 2 "backingFile",
        actual_size: u64 = 3 "actualSize",
        virtual_size: u64 = 4 "virtualSize",
    }

    /// `ClusterConfig`: the feature gates and settings the launcher needs.
    ClusterConfig = "ClusterConfig" {
        /// Deprecated in the .proto.
        expand_disks_enabled: bool = 1 "ExpandDisksEnabled",
        free_page_reporting_disabled: bool = 2 "FreePageReportingDisabled",
        bochs_display_for_efi_guests: bool = 3 "BochsDisplayForEFIGuests",
        serial_console_log_disabled: bool = 4 "SerialConsoleLogDisabled",
        pci_numa_aware_topology_enabled: bool = 5 "PCINUMAAwareTopologyEnabled",
        vgpu_live_migration_enabled: bool = 6 "VGPULiveMigrationEnabled",
        grace_io_virtualization_enabled: bool = 7 "GraceIOVirtualizationEnabled",
    }

    /// `InterfaceBindingMigration`: how an interface's binding migrates.
    InterfaceBindingMigration = "InterfaceBindingMigration" {
        method: String = 1 "Method",
    }

    /// `VirtualMachineOptions`: what virt-handler adds to the VMI.
    VirtualMachineOptions = "VirtualMachineOptions" {
        virtual_machine_smbios: Option<Smbios> = 1 "VirtualMachineSMBios",
        mem_balloon_stats_period: u32 = 2 "MemBalloonStatsPeriod",
        preallocated_volumes: Vec<String> = 3 "PreallocatedVolumes",
        topology: Option<Topology> = 4 "topology",
        /// Keyed by volume name.
        disks_info: BTreeMap<String, DiskInfo> = 5 "DisksInfo",
        /// Deprecated in the .proto: `cluster_config.expand_disks_enabled`.
        expand_disks_enabled: bool = 6 "ExpandDisksEnabled",
        cluster_config: Option<ClusterConfig> = 7 "clusterConfig",
        /// Interface name to its domain attachment (`tap`, `managedTap`).
        interface_domain_attachment: BTreeMap<String, String> = 8 "interfaceDomainAttachment",
        interface_migration: BTreeMap<String, InterfaceBindingMigration> = 9 "interfaceMigration",
        plugins_json: Vec<u8> = 10 "pluginsJson",
        grace_host_device_aliases: Vec<String> = 11 "GraceHostDeviceAliases",
    }

    /// `VMIRequest`: most calls' request.
    VmiRequest = "VMIRequest" {
        vmi: Option<Vmi> = 1 "vmi",
        options: Option<VirtualMachineOptions> = 2 "options",
    }

    /// `MigrationRequest`: `options` is KubeVirt's `MigrationOptions` as JSON.
    MigrationRequest = "MigrationRequest" {
        vmi: Option<Vmi> = 1 "vmi",
        options: Vec<u8> = 2 "options",
    }

    /// `ExecRequest`: a command for the guest agent to run.
    ExecRequest = "ExecRequest" {
        domain_name: String = 1 "domainName",
        command: String = 2 "Command",
        args: Vec<String> = 3 "Args",
        timeout_seconds: i32 = 4 "timeoutSeconds",
    }

    /// `EmptyRequest`.
    EmptyRequest = "EmptyRequest" {}

    /// `Response`: most calls' answer; `success: false` is an error whose
    /// text is `message`.
    Response = "Response" {
        success: bool = 1 "success",
        message: String = 2 "message",
    }

    /// `DomainResponse`: `domain` is KubeVirt's `api.Domain` as JSON, empty
    /// when there is no domain.
    DomainResponse = "DomainResponse" {
        response: Option<Response> = 1 "response",
        domain: String = 2 "domain",
    }

    /// `DomainStatsResponse`: `domainStats` is `stats.DomainStats` as JSON.
    DomainStatsResponse = "DomainStatsResponse" {
        response: Option<Response> = 1 "response",
        domain_stats: String = 2 "domainStats",
    }

    /// `GuestInfoResponse`: KubeVirt's `v1.VirtualMachineInstanceGuestAgentInfo` as JSON.
    GuestInfoResponse = "GuestInfoResponse" {
        response: Option<Response> = 1 "response",
        guest_info_response: String = 2 "guestInfoResponse",
    }

    /// `GuestUserListResponse`: KubeVirt's `v1.VirtualMachineInstanceGuestOSUserList` as JSON.
    GuestUserListResponse = "GuestUserListResponse" {
        response: Option<Response> = 1 "response",
        guest_user_list_response: String = 2 "guestUserListResponse",
    }

    /// `GuestFilesystemsResponse`: KubeVirt's `v1.VirtualMachineInstanceFileSystemList` as JSON.
    GuestFilesystemsResponse = "GuestFilesystemsResponse" {
        response: Option<Response> = 1 "response",
        guest_filesystems_response: String = 2 "guestFilesystemsResponse",
    }

    /// `ExecResponse`.
    ExecResponse = "ExecResponse" {
        response: Option<Response> = 1 "response",
        exit_code: i32 = 2 "exitCode",
        std_out: String = 3 "stdOut",
    }

    /// `GuestPingRequest`.
    GuestPingRequest = "GuestPingRequest" {
        domain_name: String = 1 "domainName",
        timeout_seconds: i32 = 2 "timeoutSeconds",
    }

    /// `GuestPingResponse`.
    GuestPingResponse = "GuestPingResponse" {
        response: Option<Response> = 1 "response",
    }

    /// `FreezeRequest`.
    FreezeRequest = "FreezeRequest" {
        vmi: Option<Vmi> = 1 "vmi",
        unfreeze_timeout_seconds: i32 = 2 "unfreezeTimeoutSeconds",
    }

    /// `MemoryDumpRequest`.
    MemoryDumpRequest = "MemoryDumpRequest" {
        vmi: Option<Vmi> = 1 "vmi",
        dump_path: String = 2 "dumpPath",
    }

    /// `SEVInfoResponse`: `sevInfo` is KubeVirt's `v1.SEVPlatformInfo` as JSON.
    SevInfoResponse = "SEVInfoResponse" {
        response: Option<Response> = 1 "response",
        sev_info: Vec<u8> = 2 "sevInfo",
    }

    /// `LaunchMeasurementResponse`: KubeVirt's `v1.SEVMeasurementInfo` as JSON.
    LaunchMeasurementResponse = "LaunchMeasurementResponse" {
        response: Option<Response> = 1 "response",
        launch_measurement: Vec<u8> = 2 "launchMeasurement",
    }

    /// `InjectLaunchSecretRequest`: `options` is KubeVirt's `v1.SEVSecretOptions` as JSON.
    InjectLaunchSecretRequest = "InjectLaunchSecretRequest" {
        vmi: Option<Vmi> = 1 "vmi",
        options: Vec<u8> = 2 "options",
    }

    /// `DirtyRateStatsResponse`.
    DirtyRateStatsResponse = "DirtyRateStatsResponse" {
        response: Option<Response> = 1 "response",
        dirty_rate_mbs: i64 = 2 "dirtyRateMbs",
    }

    /// `ScreenshotResponse`.
    ScreenshotResponse = "ScreenshotResponse" {
        response: Option<Response> = 1 "response",
        mime: String = 2 "mime",
        data: Vec<u8> = 3 "data",
    }

    /// `BackupRequest`: `options` is KubeVirt's `BackupOptions` as JSON.
    BackupRequest = "BackupRequest" {
        vmi: Option<Vmi> = 1 "vmi",
        options: Vec<u8> = 2 "options",
    }

    /// `RedefineCheckpointRequest`: `checkpoint` is KubeVirt's `BackupCheckpoint` as JSON.
    RedefineCheckpointRequest = "RedefineCheckpointRequest" {
        vmi: Option<Vmi> = 1 "vmi",
        checkpoint: Vec<u8> = 2 "checkpoint",
    }

    /// `RedefineCheckpointResponse`.
    RedefineCheckpointResponse = "RedefineCheckpointResponse" {
        response: Option<Response> = 1 "response",
        checkpoint_invalid: bool = 2 "checkpointInvalid",
    }

    /// `DomainStatsRequest`: asks VMStatsRequest for the domain's stats.
    DomainStatsRequest = "DomainStatsRequest" {}
    /// `DirtyRateRequest`.
    DirtyRateRequest = "DirtyRateRequest" {}
    /// `AgentLoadRequest`.
    AgentLoadRequest = "AgentLoadRequest" {}
    /// `AgentCpuStatsRequest`.
    AgentCpuStatsRequest = "AgentCpuStatsRequest" {}
    /// `AgentDiskStatsRequest`.
    AgentDiskStatsRequest = "AgentDiskStatsRequest" {}
    /// `AgentTimeRequest`.
    AgentTimeRequest = "AgentTimeRequest" {}
    /// `AgentVcpusRequest`.
    AgentVcpusRequest = "AgentVcpusRequest" {}
    /// `AgentMemoryBlockInfoRequest`.
    AgentMemoryBlockInfoRequest = "AgentMemoryBlockInfoRequest" {}
    /// `AgentUsersRequest`.
    AgentUsersRequest = "AgentUsersRequest" {}
    /// `AgentOsInfoRequest`.
    AgentOsInfoRequest = "AgentOsInfoRequest" {}
    /// `AgentDisksRequest`.
    AgentDisksRequest = "AgentDisksRequest" {}
    /// `AgentHostNameRequest`.
    AgentHostNameRequest = "AgentHostNameRequest" {}
    /// `AgentTimezoneRequest`.
    AgentTimezoneRequest = "AgentTimezoneRequest" {}
    /// `AgentNetworkRouteRequest`.
    AgentNetworkRouteRequest = "AgentNetworkRouteRequest" {}
    /// `AgentNetworkInterfacesRequest`.
    AgentNetworkInterfacesRequest = "AgentNetworkInterfacesRequest" {}
    /// `AgentMemoryBlocksRequest`.
    AgentMemoryBlocksRequest = "AgentMemoryBlocksRequest" {}

    /// `VMStatsRequest`: each present field asks for one part of the answer.
    VmStatsRequest = "VMStatsRequest" {
        domain_stats: Option<DomainStatsRequest> = 1 "domainStats",
        dirty_rate: Option<DirtyRateRequest> = 2 "dirtyRate",
        guest_get_load: Option<AgentLoadRequest> = 3 "guestGetLoad",
        guest_get_cpu_stats: Option<AgentCpuStatsRequest> = 4 "guestGetCpuStats",
        guest_get_disk_stats: Option<AgentDiskStatsRequest> = 5 "guestGetDiskStats",
        guest_get_time: Option<AgentTimeRequest> = 6 "guestGetTime",
        guest_get_vcpus: Option<AgentVcpusRequest> = 7 "guestGetVcpus",
        guest_get_memory_block_info: Option<AgentMemoryBlockInfoRequest> = 8 "guestGetMemoryBlockInfo",
        guest_get_users: Option<AgentUsersRequest> = 9 "guestGetUsers",
        guest_get_os_info: Option<AgentOsInfoRequest> = 10 "guestGetOsInfo",
        guest_get_disks: Option<AgentDisksRequest> = 11 "guestGetDisks",
        guest_get_host_name: Option<AgentHostNameRequest> = 12 "guestGetHostName",
        guest_get_timezone: Option<AgentTimezoneRequest> = 13 "guestGetTimezone",
        guest_network_get_route: Option<AgentNetworkRouteRequest> = 14 "guestNetworkGetRoute",
        guest_network_get_interfaces: Option<AgentNetworkInterfacesRequest> = 15 "guestNetworkGetInterfaces",
        guest_get_memory_blocks: Option<AgentMemoryBlocksRequest> = 16 "guestGetMemoryBlocks",
    }

    /// `VMStatsResponse`: the parts VMStatsRequest asked for; each guest
    /// agent part is a `Response` whose `message` carries the agent's answer.
    VmStatsResponse = "VMStatsResponse" {
        response: Option<Response> = 1 "response",
        domain_stats: Option<DomainStatsResponse> = 2 "domainStats",
        dirty_rate_stats: Option<DirtyRateStatsResponse> = 3 "dirtyRateStats",
        guest_agent_version: Option<Response> = 4 "guestAgentVersion",
        guest_get_load: Option<Response> = 5 "guestGetLoad",
        guest_get_cpu_stats: Option<Response> = 6 "guestGetCpuStats",
        guest_get_disk_stats: Option<Response> = 7 "guestGetDiskStats",
        guest_get_time: Option<Response> = 8 "guestGetTime",
        guest_get_vcpus: Option<Response> = 9 "guestGetVcpus",
        guest_get_memory_block_info: Option<Response> = 10 "guestGetMemoryBlockInfo",
        guest_get_users: Option<Response> = 11 "guestGetUsers",
        guest_get_os_info: Option<Response> = 12 "guestGetOsInfo",
        guest_get_disks: Option<Response> = 13 "guestGetDisks",
        guest_get_host_name: Option<Response> = 14 "guestGetHostName",
        guest_get_timezone: Option<Response> = 15 "guestGetTimezone",
        guest_network_get_route: Option<Response> = 16 "guestNetworkGetRoute",
        guest_network_get_interfaces: Option<Response> = 17 "guestNetworkGetInterfaces",
        guest_get_memory_blocks: Option<Response> = 18 "guestGetMemoryBlocks",
    }
}
