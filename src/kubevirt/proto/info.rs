//! The messages of `kubevirt.cmd.info` (`schema/info.proto`): the
//! `CmdInfo.Info` call with which virt-handler picks the `Cmd` version.

use super::message::proto_message;

/// The `Cmd` versions this launcher serves: virt-handler takes the highest
/// it knows too, and KubeVirt has only v1.
pub const SUPPORTED_CMD_VERSIONS: &[u32] = &[1];

proto_message! {
    /// `CmdInfoRequest`.
    CmdInfoRequest = "CmdInfoRequest" {}

    /// `CmdInfoResponse`.
    CmdInfoResponse = "CmdInfoResponse" {
        supported_cmd_versions: Vec<u32> = 1 "supportedCmdVersions",
    }
}
