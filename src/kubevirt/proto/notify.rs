//! The messages of `kubevirt.notify.v1` (`schema/notify.proto`): what the
//! launcher sends virt-handler's notify server.

use super::message::proto_message;

/// notify.v1's `Response` has the same fields and numbers as cmd.v1's.
pub use super::cmd::Response;

proto_message! {
    /// `DomainEventRequest`: `domainJSON` is KubeVirt's `api.Domain` as
    /// JSON, `statusJSON` a Kubernetes `metav1.Status` (for an error
    /// event), `eventType` the watch event (`ADDED`, `MODIFIED`,
    /// `DELETED`, `ERROR`).
    DomainEventRequest = "DomainEventRequest" {
        domain_json: Vec<u8> = 1 "domainJSON",
        status_json: Vec<u8> = 2 "statusJSON",
        event_type: String = 3 "eventType",
    }

    /// `K8sEventRequest`: `eventJSON` is a Kubernetes `k8sv1.Event` as JSON.
    K8sEventRequest = "K8sEventRequest" {
        event_json: Vec<u8> = 1 "eventJSON",
    }
}
