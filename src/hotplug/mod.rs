//! Live changes to a running domain, as KubeVirt's SyncVMI makes them:
//! hotplugged volumes, interfaces and host devices, vCPUs and memory. The
//! manager runs them (`manager::hotplug`); this module decides what they
//! are, without touching libvirt.
//!
//! | module | owns |
//! |---|---|
//! | `changes` | which VMI changes can be made live (a refusal names the JSON path) |
//! | `plan` | the steps from the live domain to the converted VMI, by device alias |
//! | `ready` | whether a step's image or host device is there, checked before any step runs |

pub mod changes;
pub mod plan;
pub mod ready;
