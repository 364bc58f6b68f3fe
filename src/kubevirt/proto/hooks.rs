//! The messages of KubeVirt's hook sidecar protocol (`pkg/hooks`):
//! `kubevirt.hooks.info` (`schema/hooks_info.proto`), with which a sidecar
//! says what it is, and the `Callbacks` service of versions v1alpha1 to
//! v1alpha3 (`schema/hooks_v1alpha*.proto`). Each version's messages are
//! the earlier one's plus more, with the same names and numbers, so one
//! set serves all three; only the method paths carry the version.

use super::message::proto_message;

/// KubeVirt's VMI annotation that lists the pod's hook sidecars.
pub const HOOK_SIDECARS_ANNOTATION: &str = "hooks.kubevirt.io/hookSidecars";

/// `Info.Info`: a sidecar's name, versions and hook points.
pub const INFO_PATH: &str = "/kubevirt.hooks.info.Info/Info";

/// The hook point names a sidecar subscribes to (`pkg/hooks/info`).
pub const ON_DEFINE_DOMAIN: &str = "OnDefineDomain";
pub const PRE_CLOUD_INIT_ISO: &str = "PreCloudInitIso";
pub const SHUTDOWN: &str = "Shutdown";

/// The `Callbacks` method `method` of `version` (`v1alpha3`):
/// `/kubevirt.hooks.v1alpha3.Callbacks/OnDefineDomain`.
pub fn callback_path(version: &str, method: &str) -> String {
    format!("/kubevirt.hooks.{version}.Callbacks/{method}")
}

proto_message! {
    /// `InfoParams`.
    InfoParams = "InfoParams" {}

    /// `InfoResult`.
    InfoResult = "InfoResult" {
        name: String = 1 "name",
        hook_points: Vec<HookPoint> = 3 "hookPoints",
        versions: Vec<String> = 4 "versions",
    }

    /// `HookPoint`: higher priorities run first.
    HookPoint = "HookPoint" {
        name: String = 1 "name",
        priority: i32 = 2 "priority",
    }

    /// `OnDefineDomainParams`: the domain XML and the VMI as JSON.
    OnDefineDomainParams = "OnDefineDomainParams" {
        domain_xml: Vec<u8> = 1 "domainXML",
        vmi: Vec<u8> = 2 "vmi",
    }

    /// `OnDefineDomainResult`: the domain XML to define.
    OnDefineDomainResult = "OnDefineDomainResult" {
        domain_xml: Vec<u8> = 1 "domainXML",
    }

    /// `PreCloudInitIsoParams`: KubeVirt's `CloudInitData` as JSON, and
    /// for older sidecars its user and network data as a
    /// `CloudInitNoCloudSource`.
    PreCloudInitIsoParams = "PreCloudInitIsoParams" {
        cloud_init_no_cloud_source: Vec<u8> = 1 "cloudInitNoCloudSource",
        vmi: Vec<u8> = 2 "vmi",
        cloud_init_data: Vec<u8> = 3 "cloudInitData",
    }

    /// `PreCloudInitIsoResult`.
    PreCloudInitIsoResult = "PreCloudInitIsoResult" {
        cloud_init_no_cloud_source: Vec<u8> = 1 "cloudInitNoCloudSource",
        cloud_init_data: Vec<u8> = 3 "cloudInitData",
    }

    /// `ShutdownParams` (v1alpha3).
    ShutdownParams = "ShutdownParams" {}

    /// `ShutdownResult` (v1alpha3).
    ShutdownResult = "ShutdownResult" {}
}
