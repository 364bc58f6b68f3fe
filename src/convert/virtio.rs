//! The virtio device model every virtio device of a VMI uses.

use crate::vmi::VirtualMachineInstance;

/// "virtio-transitional" for old guests that need virtio 0.9, else
/// "virtio-non-transitional" (KubeVirt: converter/virtio).
pub(crate) fn virtio_model(vmi: &VirtualMachineInstance) -> &'static str {
    if vmi.spec.domain.devices.use_virtio_transitional == Some(true) {
        "virtio-transitional"
    } else {
        "virtio-non-transitional"
    }
}
