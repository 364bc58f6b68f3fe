//! KubeVirt `VirtualMachineInstance` JSON: typed model and strict parsing.
//!
//! [`parse_vmi`] turns the JSON a client sends into [`VirtualMachineInstance`].
//! Errors carry the JSON path of the offending field, e.g.
//! `spec.domain.devices.disks[1].disk.bus: unknown bus "foo" (use virtio,
//! sata, scsi or usb)`: the deserializer of our own in `value_de.rs` tracks
//! it, and reads structs only from JSON objects.

pub mod defaults;
mod quantity;
pub(crate) mod strict;
mod types;
mod value_de;
mod without_effect;

use std::fmt;

pub use quantity::{Quantity, QuantityError};
pub use strict::{Empty, Unsupported};
pub use types::*;
pub use without_effect::{WITHOUT_EFFECT, WithoutEffect, fields_without_effect};

/// An invalid VMI: `path` is the JSON path of the bad field ("" for the
/// document itself), `message` says what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmiError {
    pub path: String,
    pub message: String,
}

impl fmt::Display for VmiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for VmiError {}

/// The only API kind this launcher runs.
const VMI_KIND: &str = "VirtualMachineInstance";

/// Parses and validates the shape of a VMI. Semantic checks that need the
/// whole VMI (a disk without a volume, ...) happen in `crate::convert`.
pub fn parse_vmi(value: &serde_json::Value) -> Result<VirtualMachineInstance, VmiError> {
    check_kind(value)?;
    value_de::from_value::<VirtualMachineInstance>(value).map_err(|err| VmiError {
        path: err.path(),
        message: err.message().to_string(),
    })
}

/// Catches the common mistake of sending a VirtualMachine (whose VMI is in
/// `spec.template`) before its unrelated fields produce a confusing error.
fn check_kind(value: &serde_json::Value) -> Result<(), VmiError> {
    match value.get("kind").and_then(serde_json::Value::as_str) {
        None | Some(VMI_KIND) => Ok(()),
        Some(other) => Err(VmiError {
            path: "kind".to_string(),
            message: format!(
                "expected {VMI_KIND:?}, got {other:?} (for a VirtualMachine, send its spec.template as a VirtualMachineInstance)"
            ),
        }),
    }
}

impl VirtualMachineInstance {
    /// `metadata.name`, or "" when absent.
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// `metadata.namespace`, or "" when absent.
    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or_default()
    }

    /// `metadata.uid`, or "" when absent.
    pub fn uid(&self) -> &str {
        self.metadata.uid.as_deref().unwrap_or_default()
    }

    /// KubeVirt's default grace period is 30 s.
    pub fn termination_grace_period_seconds(&self) -> i64 {
        self.spec.termination_grace_period_seconds.unwrap_or(30)
    }

    /// True when the VMI asks to be started paused.
    pub fn starts_paused(&self) -> bool {
        self.spec.start_strategy == Some(StartStrategy::Paused)
    }

    /// `spec.domain.memory.hugepages`: the guest's memory is backed by
    /// huge pages.
    pub fn hugepages(&self) -> Option<&Hugepages> {
        self.spec.domain.memory.as_ref()?.hugepages.as_ref()
    }
}

#[cfg(test)]
mod tests;
