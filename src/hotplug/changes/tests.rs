use serde_json::{Value, json};

use super::{check, check_bounds};

fn vmi() -> Value {
    json!({
        "metadata": {"name": "vm", "namespace": "ns"},
        "spec": {
            "terminationGracePeriodSeconds": 30,
            "domain": {
                "machine": {"type": "q35"},
                "cpu": {"sockets": 1, "cores": 1, "maxSockets": 2},
                "memory": {"guest": "192Mi", "maxGuest": "512Mi"},
                "resources": {"requests": {"memory": "192Mi"}},
                "devices": {
                    "disks": [{"name": "root", "disk": {"bus": "virtio"}}],
                    "interfaces": [{"name": "default", "masquerade": {}}],
                }
            },
            "networks": [{"name": "default", "pod": {}}],
            "volumes": [{"name": "root", "containerDisk": {"image": "x"}}]
        }
    })
}

fn changed(edit: impl FnOnce(&mut Value)) -> Result<(), String> {
    let old = vmi();
    let mut new = vmi();
    edit(&mut new);
    check(&old, &new).map_err(|e| e.to_string())
}

fn hotplug_volume(name: &str) -> Value {
    json!({"name": name, "persistentVolumeClaim": {"claimName": name, "hotpluggable": true}})
}

#[test]
fn an_identical_vmi_and_fields_without_effect_are_accepted() {
    assert_eq!(changed(|_| {}), Ok(()));
    assert_eq!(
        changed(|v| {
            v["spec"]["terminationGracePeriodSeconds"] = json!(60);
            v["spec"]["nodeSelector"] = json!({"a": "b"});
            v["metadata"]["labels"] = json!({"x": "y"});
            v["status"] = json!({"phase": "Running"});
        }),
        Ok(())
    );
    // Absent, null and empty are the same; list order does not matter.
    assert_eq!(
        changed(|v| {
            v["spec"]["domain"]["devices"]["inputs"] = json!([]);
            v["spec"]["domain"]["features"] = Value::Null;
            v["spec"]["domain"]["devices"]["interfaces"][0]["ports"] = json!([]);
        }),
        Ok(())
    );
}

#[test]
fn hotpluggable_volumes_and_their_disks_come_and_go() {
    let add = |v: &mut Value| {
        v["spec"]["volumes"]
            .as_array_mut()
            .unwrap()
            .push(hotplug_volume("hp1"));
        v["spec"]["domain"]["devices"]["disks"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "hp1", "disk": {"bus": "scsi"}}));
    };
    assert_eq!(changed(add), Ok(()));
    let mut old = vmi();
    add(&mut old);
    assert_eq!(check(&old, &vmi()), Ok(()), "removing it");
    // Reordered: no change.
    let mut reordered = old.clone();
    reordered["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .reverse();
    assert_eq!(check(&old, &reordered), Ok(()));
    // Its bus cannot change in place.
    let mut rebus = old.clone();
    rebus["spec"]["domain"]["devices"]["disks"][1]["disk"]["bus"] = json!("virtio");
    assert_eq!(
        check(&old, &rebus).map_err(|e| e.path),
        Err("spec.domain.devices.disks[1].disk.bus".to_string())
    );
}

#[test]
fn a_memory_dump_volume_comes_and_goes() {
    // KubeVirt adds it to the running VMI for a memory dump, with no disk.
    let add = |v: &mut Value| {
        v["spec"]["volumes"].as_array_mut().unwrap().push(
            json!({"name": "dump", "memoryDump": {"claimName": "dump-pvc", "hotpluggable": true}}),
        );
    };
    assert_eq!(changed(add), Ok(()));
    let mut old = vmi();
    add(&mut old);
    assert_eq!(check(&old, &vmi()), Ok(()), "removing it");
}

#[test]
fn other_volumes_and_disks_need_a_restart() {
    let err = changed(|v| {
        v["spec"]["volumes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "pvc", "persistentVolumeClaim": {"claimName": "pvc"}}));
    })
    .unwrap_err();
    assert!(
        err.starts_with("spec.volumes[1]: volume \"pvc\" was added, but only"),
        "{err}"
    );
    assert!(err.ends_with("it needs a restart of the VMI"), "{err}");
    let err = changed(|v| {
        v["spec"]["volumes"] = json!([]);
        v["spec"]["domain"]["devices"]["disks"] = json!([]);
    })
    .unwrap_err();
    assert!(
        err.starts_with("spec.domain.devices.disks: disk \"root\" was removed, but its volume is not hotpluggable"),
        "{err}"
    );
    let err =
        changed(|v| v["spec"]["volumes"][0]["containerDisk"]["image"] = json!("y")).unwrap_err();
    assert_eq!(
        err,
        "spec.volumes[0].containerDisk.image: changed from \"x\" to \"y\", which a running VMI cannot take; it needs a restart of the VMI"
    );
}

#[test]
fn machine_type_firmware_and_bus_changes_name_their_path() {
    let err =
        changed(|v| v["spec"]["domain"]["machine"]["type"] = json!("pc-q35-7.2")).unwrap_err();
    assert_eq!(
        err,
        "spec.domain.machine.type: changed from \"q35\" to \"pc-q35-7.2\", which a running VMI cannot take; it needs a restart of the VMI"
    );
    let err = changed(|v| {
        v["spec"]["domain"]["firmware"] = json!({"bootloader": {"efi": {}}});
    })
    .unwrap_err();
    assert!(
        err.starts_with("spec.domain.firmware.bootloader.efi: changed from (not set) to {}"),
        "{err}"
    );
    let err =
        changed(|v| v["spec"]["domain"]["devices"]["disks"][0]["disk"]["bus"] = json!("sata"))
            .unwrap_err();
    assert!(
        err.starts_with(
            "spec.domain.devices.disks[0].disk.bus: changed from \"virtio\" to \"sata\""
        ),
        "{err}"
    );
}

#[test]
fn vcpus_and_memory_change_only_with_their_maximum() {
    assert_eq!(
        changed(|v| v["spec"]["domain"]["cpu"]["sockets"] = json!(2)),
        Ok(())
    );
    assert_eq!(
        changed(|v| {
            v["spec"]["domain"]["memory"]["guest"] = json!("320Mi");
            v["spec"]["domain"]["resources"]["requests"]["memory"] = json!("320Mi");
        }),
        Ok(())
    );
    let err = changed(|v| v["spec"]["domain"]["cpu"]["maxSockets"] = json!(4)).unwrap_err();
    assert!(
        err.starts_with("spec.domain.cpu.maxSockets: changed from 2 to 4"),
        "{err}"
    );
    let err = changed(|v| v["spec"]["domain"]["cpu"]["cores"] = json!(2)).unwrap_err();
    assert!(err.starts_with("spec.domain.cpu.cores: "), "{err}");

    let mut fixed = vmi();
    fixed["spec"]["domain"]["cpu"] = json!({"sockets": 1});
    fixed["spec"]["domain"]["memory"] = json!({"guest": "192Mi"});
    let mut more = fixed.clone();
    more["spec"]["domain"]["cpu"]["sockets"] = json!(2);
    let err = check(&fixed, &more).unwrap_err();
    assert_eq!(err.path, "spec.domain.cpu.sockets");
    assert!(
        err.message.contains("without spec.domain.cpu.maxSockets"),
        "{}",
        err.message
    );
    let mut bigger = fixed.clone();
    bigger["spec"]["domain"]["memory"]["guest"] = json!("256Mi");
    let err = check(&fixed, &bigger).unwrap_err();
    assert_eq!(err.path, "spec.domain.memory.guest");
    assert!(
        err.message.contains("without spec.domain.memory.maxGuest"),
        "{}",
        err.message
    );
    // With memory.guest given, the requests do not decide anything.
    let mut requests = fixed.clone();
    requests["spec"]["domain"]["resources"]["requests"]["memory"] = json!("1Gi");
    assert_eq!(check(&fixed, &requests), Ok(()));
    // Device-plugin resources go with host devices.
    let mut gpu = fixed.clone();
    gpu["spec"]["domain"]["resources"]["limits"] = json!({"nvidia.com/gpu": "1"});
    assert_eq!(check(&fixed, &gpu), Ok(()));
}

#[test]
fn interfaces_come_go_and_change_state_but_nothing_else() {
    assert_eq!(
        changed(|v| {
            v["spec"]["domain"]["devices"]["interfaces"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "hot", "bridge": {}, "macAddress": "02:00:00:00:00:01"}));
            v["spec"]["networks"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "hot", "multus": {"networkName": "n"}}));
        }),
        Ok(())
    );
    assert_eq!(
        changed(|v| v["spec"]["domain"]["devices"]["interfaces"][0]["state"] = json!("absent")),
        Ok(())
    );
    let err = changed(|v| {
        v["spec"]["domain"]["devices"]["interfaces"][0]["macAddress"] = json!("02:00:00:00:00:02")
    })
    .unwrap_err();
    assert!(
        err.starts_with("spec.domain.devices.interfaces[0].macAddress: "),
        "{err}"
    );
}

#[test]
fn host_devices_and_gpus_come_and_go() {
    assert_eq!(
        changed(|v| {
            v["spec"]["domain"]["devices"]["hostDevices"] =
                json!([{"name": "nic", "deviceName": "intel.com/sriov"}]);
            v["spec"]["domain"]["devices"]["gpus"] =
                json!([{"name": "gpu1", "deviceName": "nvidia.com/GP100"}]);
        }),
        Ok(())
    );
    let mut old = vmi();
    old["spec"]["domain"]["devices"]["gpus"] =
        json!([{"name": "gpu1", "deviceName": "nvidia.com/GP100"}]);
    let mut new = old.clone();
    new["spec"]["domain"]["devices"]["gpus"][0]["deviceName"] = json!("nvidia.com/other");
    assert_eq!(
        check(&old, &new).map_err(|e| e.path),
        Err("spec.domain.devices.gpus[0].deviceName".to_string())
    );
}

#[test]
fn bounds_name_the_field_that_went_past_its_maximum() {
    let parsed = |v: Value| crate::vmi::parse_vmi(&v).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(check_bounds(&parsed(vmi())), Ok(()));
    let mut v = vmi();
    v["spec"]["domain"]["cpu"]["sockets"] = json!(3);
    let err = check_bounds(&parsed(v)).unwrap_err();
    assert_eq!(err.path, "spec.domain.cpu.sockets");
    assert_eq!(
        err.message,
        "3 sockets is above spec.domain.cpu.maxSockets (2); a running VMI cannot grow past the maximum it started with"
    );
    let mut v = vmi();
    v["spec"]["domain"]["memory"]["guest"] = json!("1Gi");
    let err = check_bounds(&parsed(v)).unwrap_err();
    assert_eq!(err.path, "spec.domain.memory.guest");
    assert!(
        err.message
            .starts_with("1Gi is above spec.domain.memory.maxGuest (512Mi)"),
        "{}",
        err.message
    );
}

#[test]
fn disable_hotplug_changes_the_domain_so_it_needs_a_restart() {
    let err =
        changed(|v| v["spec"]["domain"]["devices"]["disableHotplug"] = json!(true)).unwrap_err();
    assert_eq!(
        err,
        "spec.domain.devices.disableHotplug: changed from (not set) to true, which a running VMI cannot take; it needs a restart of the VMI"
    );
}
