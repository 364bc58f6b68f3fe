//! The JSON payloads virt-handler reads from its launcher, in KubeVirt's
//! own shapes (at commit d923fdb815): `GetDomain`'s and the notifications'
//! `api.Domain`, `GetDomainStats`' `stats.DomainStats`, and the `v1` guest
//! agent types of `GetGuestInfo`, `GetUsers` and `GetFilesystems`; with
//! the conversions from what this launcher has (the live domain XML, the
//! domain's state, the guest agent's cache, the statistics sample).
//!
//! The types are serde types with KubeVirt's exact JSON: `api.Domain` and
//! `stats.DomainStats` are Go structs without JSON tags, so every field is
//! written under its Go name (`null` for a nil pointer or slice); the
//! Kubernetes and `v1` types have camelCase tags and `omitempty`, which
//! becomes `skip_serializing_if`. They read KubeVirt's JSON back too.
//! `testdata/go-launcher/` holds what KubeVirt's own launcher answered for
//! the test guest (scripts/kubevirt-capture.sh), which the tests compare
//! with these conversions field by field.

mod devices;
mod domain;
mod dual;
mod gojson;
mod guest;
mod spec;
mod stats;

pub use devices::*;
pub use domain::{
    ApiError, DOMAIN_API_VERSION, DOMAIN_KIND, Domain, DomainStatus, FsFreeze, GuestOsInfoStatus,
    GuestPanicInfo, InterfaceStatus, LifeCycle, ObjectMeta, StateChangeReason, interface_status,
    os_info, split_domain_name,
};
pub use dual::{Alias, USER_ALIAS_PREFIX, XmlName};
pub use gojson::GoTime;
pub use guest::{
    FileSystem, FileSystemDisk, FileSystemInfo, GuestAgentCommandInfo, GuestAgentInfo,
    GuestOsInfoV1, GuestOsUser, guest_filesystems, guest_users,
};
pub use spec::*;
pub use stats::{
    BlockStats, CpuStats, DirtyRateStats, DomainJobInfo, DomainStats, LoadStats, MemoryStats,
    NetStats, StatsSources, VcpuStats, cpu_map, cpu_set, host_cpu_count,
};

#[cfg(test)]
mod tests;
