//! The gRPC methods: the `Cmd` service's RPCs as [`CmdMethod`] (with each
//! one's request and response message), and the paths of `CmdInfo.Info`
//! and of the notify server's two calls. A gRPC request names its method
//! in the HTTP/2 `:path` header, `/<package>.<Service>/<Method>`.

use super::cmd::*;
use super::message::Message;
use super::wire::DecodeError;

/// `CmdInfo.Info`: which `Cmd` versions the launcher serves.
pub const CMD_INFO_PATH: &str = "/kubevirt.cmd.info.CmdInfo/Info";
/// `Notify.HandleDomainEvent` (virt-handler's notify server).
pub const NOTIFY_DOMAIN_EVENT_PATH: &str = "/kubevirt.notify.v1.Notify/HandleDomainEvent";
/// `Notify.HandleK8sEvent` (virt-handler's notify server).
pub const NOTIFY_K8S_EVENT_PATH: &str = "/kubevirt.notify.v1.Notify/HandleK8sEvent";

/// The `:path` prefix of the `Cmd` service's methods.
const CMD_SERVICE: &str = "/kubevirt.cmd.v1.Cmd/";

/// Declares `CmdMethod` and `CmdRequest` from one table of
/// `Method(Request) -> Response;`, in the .proto's order.
macro_rules! cmd_methods {
    ($( $method:ident($request:ty) -> $response:ty; )*) => {
        /// An RPC of KubeVirt's `kubevirt.cmd.v1.Cmd` service.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum CmdMethod {
            $( $method, )*
        }

        impl CmdMethod {
            /// Every method, in the .proto's order.
            pub const ALL: &'static [CmdMethod] = &[$( CmdMethod::$method, )*];

            /// The RPC's name, as in the .proto (`SyncVirtualMachine`).
            pub fn name(self) -> &'static str {
                match self {
                    $( CmdMethod::$method => stringify!($method), )*
                }
            }

            /// The full gRPC path (`/kubevirt.cmd.v1.Cmd/SyncVirtualMachine`).
            pub fn path(self) -> &'static str {
                match self {
                    $( CmdMethod::$method => concat!("/kubevirt.cmd.v1.Cmd/", stringify!($method)), )*
                }
            }

            /// The .proto name of the request message.
            pub fn request_type(self) -> &'static str {
                match self {
                    $( CmdMethod::$method => <$request as Message>::NAME, )*
                }
            }

            /// The .proto name of the response message.
            pub fn response_type(self) -> &'static str {
                match self {
                    $( CmdMethod::$method => <$response as Message>::NAME, )*
                }
            }
        }

        /// A `Cmd` call's request, decoded as its method's message type.
        // Built once per call and handed on by value, so the size gap
        // between a VMIRequest and an EmptyRequest costs nothing worth a Box.
        #[allow(clippy::large_enum_variant)]
        #[derive(Debug, Clone, PartialEq)]
        pub enum CmdRequest {
            $( $method($request), )*
        }

        impl CmdRequest {
            /// Decodes `bytes` (a gRPC message's payload) as `method`'s request.
            pub fn decode(method: CmdMethod, bytes: &[u8]) -> Result<Self, DecodeError> {
                match method {
                    $( CmdMethod::$method => <$request>::decode(bytes).map(CmdRequest::$method), )*
                }
            }

            pub fn method(&self) -> CmdMethod {
                match self {
                    $( CmdRequest::$method(_) => CmdMethod::$method, )*
                }
            }

            /// The request's protobuf bytes (the client's side; tests).
            pub fn encode(&self) -> Vec<u8> {
                match self {
                    $( CmdRequest::$method(request) => request.encode(), )*
                }
            }
        }
    };
}

cmd_methods! {
    SyncVirtualMachine(VmiRequest) -> Response;
    PauseVirtualMachine(VmiRequest) -> Response;
    UnpauseVirtualMachine(VmiRequest) -> Response;
    FreezeVirtualMachine(FreezeRequest) -> Response;
    UnfreezeVirtualMachine(VmiRequest) -> Response;
    ResetVirtualMachine(VmiRequest) -> Response;
    SoftRebootVirtualMachine(VmiRequest) -> Response;
    ShutdownVirtualMachine(VmiRequest) -> Response;
    KillVirtualMachine(VmiRequest) -> Response;
    DeleteVirtualMachine(VmiRequest) -> Response;
    MigrateVirtualMachine(MigrationRequest) -> Response;
    SyncMigrationTarget(VmiRequest) -> Response;
    CancelVirtualMachineMigration(VmiRequest) -> Response;
    SignalTargetPodCleanup(VmiRequest) -> Response;
    FinalizeVirtualMachineMigration(VmiRequest) -> Response;
    HotplugHostDevices(VmiRequest) -> Response;
    GetDomain(EmptyRequest) -> DomainResponse;
    GetDomainStats(EmptyRequest) -> DomainStatsResponse;
    GetGuestInfo(EmptyRequest) -> GuestInfoResponse;
    GetUsers(EmptyRequest) -> GuestUserListResponse;
    GetFilesystems(EmptyRequest) -> GuestFilesystemsResponse;
    Ping(EmptyRequest) -> Response;
    Exec(ExecRequest) -> ExecResponse;
    GuestPing(GuestPingRequest) -> GuestPingResponse;
    VirtualMachineMemoryDump(MemoryDumpRequest) -> Response;
    GetQemuVersion(EmptyRequest) -> QemuVersionResponse;
    SyncVirtualMachineCPUs(VmiRequest) -> Response;
    SyncVirtualMachineMemory(VmiRequest) -> Response;
    GetSEVInfo(EmptyRequest) -> SevInfoResponse;
    GetLaunchMeasurement(VmiRequest) -> LaunchMeasurementResponse;
    InjectLaunchSecret(InjectLaunchSecretRequest) -> Response;
    GetDomainDirtyRateStats(EmptyRequest) -> DirtyRateStatsResponse;
    GetScreenshot(VmiRequest) -> ScreenshotResponse;
    BackupVirtualMachine(BackupRequest) -> Response;
    RedefineCheckpoint(RedefineCheckpointRequest) -> RedefineCheckpointResponse;
    GetVMStats(VmStatsRequest) -> VmStatsResponse;
}

impl CmdMethod {
    /// The method a request's `:path` names, if it is one of `Cmd`'s.
    pub fn from_path(path: &str) -> Option<Self> {
        let name = path.strip_prefix(CMD_SERVICE)?;
        CmdMethod::ALL.iter().copied().find(|m| m.name() == name)
    }
}

/// A method the launcher's gRPC server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LauncherMethod {
    /// `CmdInfo.Info`: request `CmdInfoRequest`, response `CmdInfoResponse`.
    Info,
    Cmd(CmdMethod),
}

impl LauncherMethod {
    /// The method a request's `:path` names; `None` is gRPC's UNIMPLEMENTED.
    pub fn from_path(path: &str) -> Option<Self> {
        if path == CMD_INFO_PATH {
            return Some(LauncherMethod::Info);
        }
        CmdMethod::from_path(path).map(LauncherMethod::Cmd)
    }
}
