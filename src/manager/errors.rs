//! The manager's one translation of hypervisor errors into the wire's
//! error classes.

use crate::hypervisor::{HypervisorError, HypervisorErrorKind};
use crate::protocol::{CommandError, ErrorClass};

/// The wire error for a failed hypervisor call.
pub fn hypervisor_error(e: &HypervisorError) -> CommandError {
    let (class, desc) = match e.kind {
        HypervisorErrorKind::NoDomain => (ErrorClass::NotFound, "the domain does not exist"),
        HypervisorErrorKind::InvalidOperation => (
            ErrorClass::InvalidState,
            "libvirt refused the operation in the domain's current state",
        ),
        HypervisorErrorKind::InvalidDefinition => (
            ErrorClass::InvalidArgument,
            "libvirt rejected the domain definition",
        ),
        HypervisorErrorKind::AgentUnavailable => (
            ErrorClass::Unavailable,
            "the guest agent is not connected or not responding",
        ),
        HypervisorErrorKind::Unsupported => (
            ErrorClass::Unavailable,
            "the libvirt driver does not support this operation",
        ),
        HypervisorErrorKind::ConnectionLost => (
            ErrorClass::Unavailable,
            "libvirt is unreachable; the launcher is reconnecting",
        ),
        HypervisorErrorKind::Timeout => (ErrorClass::Timeout, "libvirt timed out"),
        HypervisorErrorKind::InvalidCheckpoint => (
            ErrorClass::InvalidArgument,
            "the checkpoint is invalid (unknown to libvirt, or its bitmaps are missing or broken); redefine it with redefine-checkpoint or take a full backup",
        ),
        HypervisorErrorKind::Other => (ErrorClass::Internal, "libvirt call failed"),
    };
    CommandError::new(class, format!("{desc}: {}", e.message)).with_cause(e.to_string())
}
