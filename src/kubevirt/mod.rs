//! KubeVirt's own launcher protocol, the second front end beside the JSON
//! socket: the messages virt-handler and the launcher exchange (`proto`),
//! the JSON payloads inside them (`api`), the `Cmd` service over the domain
//! manager (`service`, with what it keeps of the manager's replies in
//! `converted`), the notify client (`notify`) and the hook sidecars'
//! client (`hooks`).

pub mod api;
mod backup;
mod converted;
pub mod hooks;
pub mod k8s_events;
pub mod migration;
pub mod notify;
pub mod proto;
pub mod service;

use std::path::Path;
use std::time::Duration;

pub use service::cmd_handler;

use crate::grpc::Client;
use proto::cmd::{EmptyRequest, Response};
use proto::info::{CmdInfoRequest, CmdInfoResponse};
use proto::methods::{CMD_INFO_PATH, CmdMethod};

/// The readiness check of KubeVirt's launcher through its own socket: the
/// version negotiation virt-handler makes first, then a `Ping`.
pub fn self_ping(path: &Path, timeout: Duration) -> Result<(), String> {
    let mut client = Client::new(path);
    let info = client
        .call(CMD_INFO_PATH, &CmdInfoRequest::default().encode(), timeout)
        .map_err(|e| format!("CmdInfo.Info: {e}"))?;
    let info = CmdInfoResponse::decode(&info).map_err(|e| format!("CmdInfo.Info: {e}"))?;
    if !info.supported_cmd_versions.contains(&1) {
        return Err(format!(
            "CmdInfo.Info answered versions {:?}, without 1",
            info.supported_cmd_versions
        ));
    }
    let ping = client
        .call(
            CmdMethod::Ping.path(),
            &EmptyRequest::default().encode(),
            timeout,
        )
        .map_err(|e| format!("Ping: {e}"))?;
    match Response::decode(&ping) {
        Ok(response) if response.success => Ok(()),
        Ok(response) => Err(format!("Ping answered: {}", response.message)),
        Err(e) => Err(format!("Ping: {e}")),
    }
}
