use serde_json::json;

use super::*;

fn minimal() -> serde_json::Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "demo", "namespace": "default", "uid": "1234",
                     "managedFields": [{"anything": true}]},
        "spec": {
            "domain": {
                "resources": {"requests": {"memory": "128Mi"}},
                "devices": {
                    "disks": [
                        {"name": "root", "disk": {"bus": "virtio"}},
                        {"name": "data", "disk": {"bus": "sata"}}
                    ]
                }
            },
            "volumes": [
                {"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora:40"}},
                {"name": "data", "emptyDisk": {"capacity": "1Gi"}}
            ]
        },
        "status": {"phase": "Running", "whatever": [1, 2, 3]}
    })
}

fn error_for(edit: impl FnOnce(&mut serde_json::Value)) -> String {
    let mut value = minimal();
    edit(&mut value);
    match parse_vmi(&value) {
        Ok(_) => panic!("expected an error"),
        Err(err) => err.to_string(),
    }
}

#[test]
fn parses_a_minimal_vmi_and_ignores_status_and_metadata_extras() {
    let vmi = parse_vmi(&minimal()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(vmi.name(), "demo");
    assert_eq!(vmi.namespace(), "default");
    assert_eq!(vmi.uid(), "1234");
    assert_eq!(vmi.spec.domain.devices.disks.len(), 2);
    assert_eq!(
        vmi.spec.domain.devices.disks[1]
            .disk
            .as_ref()
            .and_then(|d| d.bus),
        Some(DiskBus::Sata)
    );
    assert_eq!(vmi.termination_grace_period_seconds(), 30);
}

#[test]
fn unknown_bus_names_the_path_and_the_choices() {
    let message =
        error_for(|v| v["spec"]["domain"]["devices"]["disks"][1]["disk"]["bus"] = json!("foo"));
    assert_eq!(
        message,
        "spec.domain.devices.disks[1].disk.bus: unknown bus \"foo\" (use virtio, sata, scsi or usb)"
    );
}

#[test]
fn typo_in_a_domain_field_is_an_error_with_its_path() {
    let message = error_for(|v| v["spec"]["domain"]["devices"]["disks"][0]["bootorder"] = json!(1));
    assert!(
        message.starts_with("spec.domain.devices.disks[0].bootorder: unknown field `bootorder`"),
        "{message}"
    );
}

#[test]
fn unsupported_feature_is_rejected_with_its_path() {
    let message = error_for(|v| v["spec"]["domain"]["devices"]["clientPassthrough"] = json!({}));
    assert_eq!(
        message,
        "spec.domain.devices.clientPassthrough: not supported by this launcher; remove this field from the VMI"
    );
    let sound = error_for(|v| v["spec"]["domain"]["devices"]["sound"] = json!({"name": "s"}));
    assert!(
        sound.starts_with("spec.domain.devices.sound: not supported"),
        "{sound}"
    );
}

#[test]
fn a_filesystem_needs_its_virtiofs_object() {
    let message =
        error_for(|v| v["spec"]["domain"]["devices"]["filesystems"] = json!([{"name": "fs1"}]));
    assert!(
        message.starts_with("spec.domain.devices.filesystems[0]") && message.contains("virtiofs"),
        "{message}"
    );
}

#[test]
fn empty_unsupported_lists_are_accepted() {
    let mut value = minimal();
    value["spec"]["resourceClaims"] = json!([]);
    value["spec"]["domain"]["devices"]["sound"] = serde_json::Value::Null;
    assert!(parse_vmi(&value).is_ok());
}

#[test]
fn bad_quantity_names_the_path() {
    let message = error_for(|v| v["spec"]["volumes"][1]["emptyDisk"]["capacity"] = json!("10GB"));
    assert!(
        message.starts_with(
            "spec.volumes[1].emptyDisk.capacity: invalid quantity \"10GB\": unknown suffix \"GB\""
        ),
        "{message}"
    );
}

#[test]
fn pod_level_fields_are_accepted() {
    let mut value = minimal();
    let spec = &mut value["spec"];
    spec["nodeSelector"] = json!({"kubernetes.io/os": "linux"});
    spec["affinity"] = json!({"nodeAffinity": {}});
    spec["tolerations"] = json!([{"key": "k", "operator": "Exists"}]);
    spec["evictionStrategy"] = json!("LiveMigrate");
    spec["readinessProbe"] = json!({"tcpSocket": {"port": 22}});
    spec["dnsPolicy"] = json!("ClusterFirst");
    spec["terminationGracePeriodSeconds"] = json!(120);
    spec["startStrategy"] = json!("Paused");
    let vmi = parse_vmi(&value).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(vmi.termination_grace_period_seconds(), 120);
    assert!(vmi.starts_paused());
}

#[test]
fn a_virtual_machine_is_not_a_vmi() {
    let message = error_for(|v| v["kind"] = json!("VirtualMachine"));
    assert!(
        message.starts_with("kind: expected \"VirtualMachineInstance\""),
        "{message}"
    );
}

#[test]
fn missing_spec_is_reported_at_the_root() {
    let err = parse_vmi(&json!({"kind": "VirtualMachineInstance"})).err();
    assert_eq!(
        err.map(|e| e.to_string()).as_deref(),
        Some("missing field `spec`")
    );
}

#[test]
fn wrong_type_names_the_path() {
    let message = error_for(|v| v["spec"]["domain"]["cpu"] = json!({"cores": "two"}));
    assert!(
        message.starts_with("spec.domain.cpu.cores: invalid type"),
        "{message}"
    );
}

#[test]
fn arrays_are_refused_where_objects_are_expected() {
    let cpu = error_for(|v| v["spec"]["domain"]["cpu"] = json!([3]));
    assert_eq!(
        cpu,
        "spec.domain.cpu: invalid type: sequence, expected an object"
    );
    let metadata = error_for(|v| v["metadata"] = json!(["demo", "default"]));
    assert_eq!(
        metadata,
        "metadata: invalid type: sequence, expected an object"
    );
    let disk = error_for(|v| v["spec"]["domain"]["devices"]["disks"][0] = json!(["root"]));
    assert_eq!(
        disk,
        "spec.domain.devices.disks[0]: invalid type: sequence, expected an object"
    );
    let spec = error_for(|v| v["spec"] = json!([{"domain": {}}]));
    assert_eq!(spec, "spec: invalid type: sequence, expected an object");
}
