//! KubeVirt's `api.Domain`: what `GetDomain` returns and every domain
//! notification carries, built from what this launcher has (the live
//! domain XML, the state libvirt reports, what the guest agent said).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::gojson::GoTime;
use super::spec::{DomainSpec, KubeVirtMetadata};
use crate::agent::cache::GuestAgentCache;
use crate::agent::model::{FreezeStatus, GuestInterface, GuestOsInfo};
use crate::hypervisor::{DomainState, DomainStatus as LauncherStatus, StateReason};

/// The `kind` and `apiVersion` KubeVirt's launcher gives every domain.
pub const DOMAIN_KIND: &str = "Domain";
pub const DOMAIN_API_VERSION: &str = "1.2.2";

/// A domain XML this module could not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub message: String,
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ApiError {}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Domain {
    /// Kubernetes' TypeMeta, inlined (Go embeds it without a tag).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(rename = "apiVersion", skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(rename = "ObjectMeta")]
    pub object_meta: ObjectMeta,
    #[serde(rename = "Spec")]
    pub spec: DomainSpec,
    #[serde(rename = "Status")]
    pub status: DomainStatus,
}

/// The part of Kubernetes' ObjectMeta KubeVirt's launcher fills (name,
/// namespace, uid, deletion time) and the rest a peer may send; all
/// `omitempty`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ObjectMeta {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(rename = "generateName", skip_serializing_if = "String::is_empty")]
    pub generate_name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(rename = "resourceVersion", skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub generation: i64,
    #[serde(rename = "creationTimestamp", skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<GoTime>,
    #[serde(rename = "deletionTimestamp", skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<GoTime>,
    #[serde(
        rename = "deletionGracePeriodSeconds",
        skip_serializing_if = "Option::is_none"
    )]
    pub deletion_grace_period_seconds: Option<i64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
}

fn is_zero(value: &i64) -> bool {
    *value == 0
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DomainStatus {
    #[serde(rename = "Status")]
    pub status: LifeCycle,
    #[serde(rename = "Reason")]
    pub reason: StateChangeReason,
    #[serde(rename = "Interfaces")]
    pub interfaces: Option<Vec<InterfaceStatus>>,
    #[serde(rename = "OSInfo")]
    pub os_info: GuestOsInfoStatus,
    #[serde(rename = "FSFreezeStatus")]
    pub fs_freeze_status: FsFreeze,
    #[serde(rename = "GuestPanicInfo")]
    pub guest_panic_info: Option<GuestPanicInfo>,
    #[serde(rename = "PanicCount")]
    pub panic_count: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct InterfaceStatus {
    #[serde(rename = "Mac")]
    pub mac: String,
    #[serde(rename = "Ip")]
    pub ip: String,
    #[serde(rename = "IPs")]
    pub ips: Option<Vec<String>>,
    #[serde(rename = "InterfaceName")]
    pub interface_name: String,
}

/// KubeVirt's `api.GuestOSInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GuestOsInfoStatus {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "KernelRelease")]
    pub kernel_release: String,
    #[serde(rename = "Version")]
    pub version: String,
    #[serde(rename = "PrettyName")]
    pub pretty_name: String,
    #[serde(rename = "VersionId")]
    pub version_id: String,
    #[serde(rename = "KernelVersion")]
    pub kernel_version: String,
    #[serde(rename = "Machine")]
    pub machine: String,
    #[serde(rename = "Id")]
    pub id: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FsFreeze {
    /// `thawed`, `frozen`, or empty when unknown.
    #[serde(rename = "Status")]
    pub status: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GuestPanicInfo {
    #[serde(rename = "Type")]
    pub panic_type: String,
    #[serde(rename = "Arg1")]
    pub arg1: u64,
    #[serde(rename = "Arg2")]
    pub arg2: u64,
    #[serde(rename = "Arg3")]
    pub arg3: u64,
    #[serde(rename = "Arg4")]
    pub arg4: u64,
    #[serde(rename = "Arg5")]
    pub arg5: u64,
}

/// Declares a KubeVirt string enum: its known words, and `Other` for a
/// word from a newer peer, kept as it came (Go's type is a plain string).
macro_rules! kubevirt_words {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $word:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
            Other(String),
        }

        impl $name {
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => $word,)+
                    $name::Other(word) => word,
                }
            }

            pub fn from_word(word: &str) -> $name {
                match word {
                    $($word => $name::$variant,)+
                    other => $name::Other(other.to_string()),
                }
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<$name, D::Error> {
                let word = String::deserialize(deserializer)?;
                Ok($name::from_word(&word))
            }
        }
    };
}

kubevirt_words! {
    /// KubeVirt's `api.LifeCycle`.
    LifeCycle {
        NoState => "NoState",
        Running => "Running",
        Blocked => "Blocked",
        Paused => "Paused",
        ShuttingDown => "ShuttingDown",
        Shutoff => "Shutoff",
        Crashed => "Crashed",
        PmSuspended => "PMSuspended",
        /// The launcher is unreachable (virt-handler's word, never a
        /// launcher's).
        Unknown => "Unknown",
    }
}

kubevirt_words! {
    /// KubeVirt's `api.StateChangeReason`. Some words serve two states
    /// (`User`: shutting down or paused by the user; `Crashed`: shut off
    /// or paused after a crash).
    StateChangeReason {
        Unknown => "Unknown",
        User => "User",
        Shutdown => "Shutdown",
        Destroyed => "Destroyed",
        Migrated => "Migrated",
        Crashed => "Crashed",
        Panicked => "Panicked",
        Saved => "Saved",
        Failed => "Failed",
        FromSnapshot => "FromSnapshot",
        NonExistent => "NonExistent",
        Migration => "Migration",
        Save => "Save",
        Dump => "Dump",
        IoError => "IOError",
        Watchdog => "Watchdog",
        ShuttingDown => "ShuttingDown",
        Snapshot => "Snapshot",
        StartingUp => "StartingUp",
        Postcopy => "Postcopy",
        PostcopyFailed => "PostcopyFailed",
    }
}

// Go's zero value, the empty word, is also what KubeVirt's converters
// answer for a number their tables lack (a Go map's zero value).
impl Default for LifeCycle {
    fn default() -> LifeCycle {
        LifeCycle::Other(String::new())
    }
}

impl Default for StateChangeReason {
    fn default() -> StateChangeReason {
        StateChangeReason::Other(String::new())
    }
}

impl LifeCycle {
    /// KubeVirt's `ConvState`, from `virDomainGetState`'s state.
    pub fn from_libvirt(state: i32) -> LifeCycle {
        match state {
            0 => LifeCycle::NoState,
            1 => LifeCycle::Running,
            2 => LifeCycle::Blocked,
            3 => LifeCycle::Paused,
            4 => LifeCycle::ShuttingDown,
            5 => LifeCycle::Shutoff,
            6 => LifeCycle::Crashed,
            7 => LifeCycle::PmSuspended,
            _ => LifeCycle::default(),
        }
    }

    /// The same for this launcher's state.
    pub fn from_state(state: DomainState) -> LifeCycle {
        match state {
            DomainState::NoState => LifeCycle::NoState,
            DomainState::Running => LifeCycle::Running,
            DomainState::Blocked => LifeCycle::Blocked,
            DomainState::Paused => LifeCycle::Paused,
            DomainState::ShuttingDown => LifeCycle::ShuttingDown,
            DomainState::Shutoff => LifeCycle::Shutoff,
            DomainState::Crashed => LifeCycle::Crashed,
            DomainState::PMSuspended => LifeCycle::PmSuspended,
        }
    }
}

impl StateChangeReason {
    /// KubeVirt's `ConvReason`, from `virDomainGetState`'s state and
    /// reason. Its tables name reasons for shutting down, shut off,
    /// crashed and paused domains only: every other state's reason is
    /// `Unknown` (a running domain's too), and a reason missing from a
    /// table (a shut off domain's `daemon`, a paused one's `api error`)
    /// is the empty word.
    pub fn from_libvirt(state: i32, reason: i32) -> StateChangeReason {
        use StateChangeReason as R;
        let table: &[StateChangeReason] = match state {
            4 => &[R::Unknown, R::User],
            5 => &[
                R::Unknown,
                R::Shutdown,
                R::Destroyed,
                R::Crashed,
                R::Migrated,
                R::Saved,
                R::Failed,
                R::FromSnapshot,
            ],
            6 => &[R::Unknown, R::Panicked],
            3 => &[
                R::Unknown,
                R::User,
                R::Migration,
                R::Save,
                R::Dump,
                R::IoError,
                R::Watchdog,
                R::FromSnapshot,
                R::ShuttingDown,
                R::Snapshot,
                R::Crashed,
                R::StartingUp,
                R::Postcopy,
                R::PostcopyFailed,
            ],
            _ => return R::Unknown,
        };
        usize::try_from(reason)
            .ok()
            .and_then(|i| table.get(i).cloned())
            .unwrap_or_default()
    }

    /// The same for this launcher's state and reason; a domain that does
    /// not exist is `NonExistent`, as KubeVirt's notifier says.
    pub fn from_status(status: LauncherStatus) -> StateChangeReason {
        use StateChangeReason as R;
        use StateReason as S;
        match (status.state, status.reason) {
            (DomainState::NoState, S::NonExistent) => R::NonExistent,
            (DomainState::ShuttingDown, reason) => match reason {
                S::Unknown => R::Unknown,
                S::User => R::User,
                _ => R::default(),
            },
            (DomainState::Shutoff, reason) => match reason {
                S::Unknown => R::Unknown,
                S::Shutdown => R::Shutdown,
                S::Destroyed => R::Destroyed,
                S::Crashed => R::Crashed,
                S::Migrated => R::Migrated,
                S::Saved => R::Saved,
                S::Failed => R::Failed,
                S::FromSnapshot => R::FromSnapshot,
                _ => R::default(),
            },
            (DomainState::Crashed, reason) => match reason {
                S::Unknown => R::Unknown,
                S::Panicked => R::Panicked,
                _ => R::default(),
            },
            (DomainState::Paused, reason) => match reason {
                S::Unknown => R::Unknown,
                S::User => R::User,
                S::Migration => R::Migration,
                S::Save => R::Save,
                S::Dump => R::Dump,
                S::IOError => R::IoError,
                S::Watchdog => R::Watchdog,
                S::FromSnapshot => R::FromSnapshot,
                S::ShuttingDown => R::ShuttingDown,
                S::Snapshot => R::Snapshot,
                S::Crashed => R::Crashed,
                S::StartingUp => R::StartingUp,
                S::Postcopy => R::Postcopy,
                S::PostcopyFailed => R::PostcopyFailed,
                _ => R::default(),
            },
            _ => R::Unknown,
        }
    }
}

/// `ns_name` split as KubeVirt splits a domain name: at the first `_`,
/// the namespace `default` when there is none.
pub fn split_domain_name(domain_name: &str) -> (&str, &str) {
    domain_name
        .split_once('_')
        .unwrap_or(("default", domain_name))
}

impl Domain {
    /// A domain that names only its VMI (KubeVirt's
    /// `NewDomainReferenceFromName`).
    pub fn reference(namespace: &str, name: &str) -> Domain {
        Domain {
            kind: DOMAIN_KIND.to_string(),
            api_version: DOMAIN_API_VERSION.to_string(),
            object_meta: ObjectMeta {
                name: name.to_string(),
                namespace: namespace.to_string(),
                ..ObjectMeta::default()
            },
            ..Domain::default()
        }
    }

    /// `GetDomain`'s domain: the spec read from the live domain XML (as
    /// libvirt returns it with flags 0), the state libvirt reports, and
    /// the KubeVirt metadata the launcher keeps (KubeVirt's launcher puts
    /// its metadata cache there, not what the XML says). Like KubeVirt's,
    /// its ObjectMeta has no uid; a notification's has
    /// ([`Domain::for_notification`]). The guest agent's part comes with
    /// [`Domain::set_guest_info`].
    pub fn from_live(
        xml: &str,
        status: LauncherStatus,
        metadata: KubeVirtMetadata,
    ) -> Result<Domain, ApiError> {
        let mut spec = DomainSpec::from_xml(xml).map_err(|err| ApiError {
            message: format!("cannot read the domain XML as KubeVirt's api.DomainSpec: {err}"),
        })?;
        spec.metadata.kubevirt = metadata;
        let (namespace, name) = split_domain_name(&spec.name);
        let mut domain = Domain::reference(namespace, name);
        domain.spec = spec;
        domain.set_status(status);
        Ok(domain)
    }

    /// The domain of a notification for a domain that no longer exists:
    /// names and the VMI's uid only, `NoState`/`NonExistent`. KubeVirt's
    /// notifier keeps the guest agent's last report in its status
    /// ([`Domain::set_guest_info`], [`Domain::set_fs_freeze`]), and once
    /// the domain is undefined says so with a deletion time
    /// ([`Domain::mark_deleted`]): that `Modified` event is its last, it
    /// sends no `Deleted`.
    pub fn non_existent(domain_name: &str, vmi_uid: &str) -> Domain {
        let (namespace, name) = split_domain_name(domain_name);
        let mut domain = Domain::reference(namespace, name);
        domain.spec.metadata.kubevirt.uid = vmi_uid.to_string();
        domain.object_meta.uid = vmi_uid.to_string();
        domain.set_status(LauncherStatus::NON_EXISTENT);
        domain
    }

    pub fn mark_deleted(&mut self, at: GoTime) {
        self.object_meta.deletion_timestamp = Some(at);
    }

    /// The form KubeVirt's notifier sends: the ObjectMeta carries the
    /// VMI's uid from the metadata.
    pub fn for_notification(mut self) -> Domain {
        self.object_meta.uid = self.spec.metadata.kubevirt.uid.clone();
        self
    }

    pub fn set_status(&mut self, status: LauncherStatus) {
        self.status.status = LifeCycle::from_state(status.state);
        self.status.reason = StateChangeReason::from_status(status);
    }

    /// What the guest agent reported, as KubeVirt's launcher adds it: the
    /// interfaces once there are any, the OS once reported. (`GetDomain`
    /// stops there; notifications add the freeze status too, see
    /// [`Domain::set_fs_freeze`].)
    pub fn set_guest_info(&mut self, agent: &GuestAgentCache) {
        if !agent.system.interfaces.is_empty() {
            self.status.interfaces = Some(
                agent
                    .system
                    .interfaces
                    .iter()
                    .map(interface_status)
                    .collect(),
            );
        }
        if let Some(os) = &agent.system.os {
            self.status.os_info = os_info(os);
        }
    }

    pub fn set_fs_freeze(&mut self, status: Option<FreezeStatus>) {
        self.status.fs_freeze_status = FsFreeze {
            status: status
                .map(FreezeStatus::as_str)
                .unwrap_or_default()
                .to_string(),
        };
    }
}

/// One interface as KubeVirt's `api.InterfaceStatus`.
pub fn interface_status(interface: &GuestInterface) -> InterfaceStatus {
    InterfaceStatus {
        mac: interface.mac.clone(),
        ip: interface.ip_address.clone(),
        ips: (!interface.ip_addresses.is_empty()).then(|| interface.ip_addresses.clone()),
        interface_name: interface.interface_name.clone(),
    }
}

pub fn os_info(os: &GuestOsInfo) -> GuestOsInfoStatus {
    GuestOsInfoStatus {
        name: os.name.clone(),
        kernel_release: os.kernel_release.clone(),
        version: os.version.clone(),
        pretty_name: os.pretty_name.clone(),
        version_id: os.version_id.clone(),
        kernel_version: os.kernel_version.clone(),
        machine: os.machine.clone(),
        id: os.id.clone(),
    }
}
