//! Domain identity: type, name `<namespace>_<name>`, UUID, KubeVirt metadata,
//! lifecycle actions (KubeVirt: converter/metadata, converter/grace.go,
//! compute/reboot_policy.go).

use super::codec::{firmware_uuid_for_name, is_uuid};
use super::paths::is_safe_component;
use super::{Checked, ConvertContext, ConvertError, DomainType, Refused};
use crate::domxml::{Domain, GracePeriodMetadata, KUBEVIRT_XMLNS, KubeVirtMetadata, Metadata};
use crate::limits::MAX_SECONDS;
use crate::vmi::{RebootPolicy, VirtualMachineInstance};

pub(crate) fn configure(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
    domain: &mut Domain,
) -> Result<(), ConvertError> {
    check_context(ctx)?;
    check_architecture(vmi)?;
    hook_sidecar_count(vmi)?;
    check_start_paused(vmi, ctx)?;
    check_grace_period(vmi)?;
    domain.domain_type = ctx.domain_type.as_str().to_string();
    domain.name = format!("{}_{}", ctx.namespace, ctx.name);
    domain.uuid = Some(firmware_uuid(vmi, ctx)?);
    domain.metadata = Some(Metadata {
        kubevirt: Some(KubeVirtMetadata {
            xmlns: KUBEVIRT_XMLNS.to_string(),
            uid: ctx.uid.clone(),
            graceperiod: Some(GracePeriodMetadata {
                deletion_grace_period_seconds: ctx.grace_period_seconds,
                deletion_timestamp: None,
                marked_for_graceful_shutdown: None,
            }),
        }),
    });
    // KubeVirt's "Terminate" policy turns a guest reboot into the end of the
    // VMI so a controller can recreate it with new settings.
    if vmi.spec.domain.reboot_policy == Some(RebootPolicy::Terminate) {
        domain.on_reboot = Some("destroy".to_string());
    }
    Ok(())
}

/// `terminationGracePeriodSeconds` sets how long a signal's graceful stop
/// waits: 0 to ten years ([`MAX_SECONDS`]), as `--grace-period-seconds`.
/// Checked even when that flag overrides it, so that whether a VMI is
/// valid does not depend on the launcher's flags.
fn check_grace_period(vmi: &VirtualMachineInstance) -> Result<(), ConvertError> {
    let seconds = vmi.termination_grace_period_seconds();
    if u64::try_from(seconds).is_ok_and(|s| s <= MAX_SECONDS) {
        return Ok(());
    }
    Err(ConvertError::new(
        "spec.terminationGracePeriodSeconds",
        format!("{seconds} is out of range (0 to {MAX_SECONDS}, ten years)"),
    ))
}

/// `firmware.uuid`, or the name-derived UUID KubeVirt's VM controller
/// assigns when it is absent. It is both the domain UUID and the SMBIOS UUID.
pub(crate) fn firmware_uuid(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
) -> Result<String, ConvertError> {
    match vmi
        .spec
        .domain
        .firmware
        .as_ref()
        .and_then(|f| f.uuid.as_deref())
    {
        Some(uuid) if is_uuid(uuid) => Ok(uuid.to_ascii_lowercase()),
        Some(uuid) => Err(ConvertError::new(
            "spec.domain.firmware.uuid",
            format!(
                "{uuid:?} is not a UUID (expected the form 5a9f3a2e-1c4b-5d6e-8f90-123456789abc)"
            ),
        )),
        None => Ok(firmware_uuid_for_name(&ctx.name)),
    }
}

/// The names become file names and the domain name; refuse anything unsafe.
fn check_context(ctx: &ConvertContext) -> Result<(), ConvertError> {
    for (flag, value) in [
        ("--namespace", &ctx.namespace),
        ("--name", &ctx.name),
        ("--uid", &ctx.uid),
    ] {
        if !is_safe_component(value) {
            return Err(ConvertError::new(
                "metadata",
                format!(
                    "the launcher's {flag} {value:?} is not usable as a file name (letters, digits, '-', '.', '_' only)"
                ),
            ));
        }
    }
    Ok(())
}

/// KubeVirt's annotation naming hook sidecar images (pkg/hooks).
pub(crate) const HOOK_SIDECARS_ANNOTATION: &str = "hooks.kubevirt.io/hookSidecars";

/// How many hook sidecars the annotation names, read as KubeVirt reads it
/// (`pkg/hooks` `UnmarshalHookSidecarList`: a JSON list of objects whose
/// known fields must have their types; unknown fields are ignored). The
/// sidecars themselves are the pod's: the launcher calls those it collected
/// at start-up (`--hook-sidecars`).
pub fn hook_sidecar_count(vmi: &VirtualMachineInstance) -> Result<usize, ConvertError> {
    use serde_json::Value;
    let Some(list) = vmi.metadata.annotations.get(HOOK_SIDECARS_ANNOTATION) else {
        return Ok(0);
    };
    // Checked on serde_json's `Value`, already in the binary, rather than
    // with a derived deserializer of its own.
    let field_ok = |(name, value): (&String, &Value)| match name.as_str() {
        "image" | "imagePullPolicy" => value.is_string() || value.is_null(),
        "command" | "args" => {
            value.is_null()
                || value
                    .as_array()
                    .is_some_and(|a| a.iter().all(Value::is_string))
        }
        "configMap" | "pvc" => {
            value.is_null()
                || value
                    .as_object()
                    .is_some_and(|o| o.values().all(|v| v.is_string() || v.is_null()))
        }
        _ => true,
    };
    let sidecars = serde_json::from_str::<Value>(list)
        .map_err(|e| e.to_string())
        .and_then(|v| {
            let sidecars = v.as_array().ok_or("expected a list")?;
            for (i, sidecar) in sidecars.iter().enumerate() {
                let fields = sidecar
                    .as_object()
                    .ok_or(format!("[{i}]: expected an object"))?;
                if let Some((name, _)) = fields.iter().find(|f| !field_ok(*f)) {
                    return Err(format!("[{i}].{name}: wrong type"));
                }
            }
            Ok(sidecars.len())
        });
    sidecars.map_err(|e| {
        ConvertError::new(
            format!("metadata.annotations.{HOOK_SIDECARS_ANNOTATION}"),
            format!("not a JSON list of hook sidecars as KubeVirt reads it: {e}"),
        )
    })
}

/// libvirt's test driver cannot create a domain paused; refusing here says
/// so instead of libvirt's "unsupported flags (0x1)" after the define.
fn check_start_paused(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
) -> Result<(), ConvertError> {
    if vmi.starts_paused() && ctx.domain_type == DomainType::Test {
        return Err(ConvertError::checked(
            Checked::PausedOnTestDriver,
            "spec.startStrategy",
            "Paused needs a driver that can start a domain paused; libvirt's test driver (test:///default) cannot, use a QEMU connection",
        ));
    }
    Ok(())
}

fn check_architecture(vmi: &VirtualMachineInstance) -> Result<(), ConvertError> {
    match vmi.spec.architecture.as_deref() {
        None | Some("") | Some("amd64") | Some("x86_64") => Ok(()),
        Some(other) => Err(ConvertError::unsupported(
            Refused::Architecture,
            "spec.architecture",
            &format!("architecture {other:?} (only amd64)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{context, convert_err, convert_ok, convert_with};

    #[test]
    fn name_uuid_and_metadata() {
        let domain = convert_ok(json!({})).domain;
        assert_eq!(domain.domain_type, "qemu");
        assert_eq!(domain.name, "default_testvmi");
        let kubevirt = domain
            .metadata
            .and_then(|m| m.kubevirt)
            .unwrap_or_else(|| panic!("no metadata"));
        assert_eq!(kubevirt.xmlns, "http://kubevirt.io");
        assert_eq!(kubevirt.uid, "11111111-2222-3333-4444-555555555555");
        assert_eq!(
            kubevirt
                .graceperiod
                .map(|g| g.deletion_grace_period_seconds),
            Some(30)
        );
        assert_eq!(domain.on_reboot, None);
    }

    #[test]
    fn the_grace_period_is_0_to_ten_years() {
        for ok in [0, 30, 315_360_000] {
            convert_ok(json!({"terminationGracePeriodSeconds": ok}));
        }
        for bad in [-1, 315_360_001, i64::MAX, i64::MIN] {
            assert_eq!(
                convert_err(json!({"terminationGracePeriodSeconds": bad})),
                format!(
                    "spec.terminationGracePeriodSeconds: {bad} is out of range (0 to 315360000, ten years)"
                )
            );
        }
    }

    #[test]
    fn explicit_uuid_is_used_and_checked() {
        let domain = convert_ok(
            json!({"domain": {"firmware": {"uuid": "5A9F3A2E-1C4B-5D6E-8F90-123456789ABC"}}}),
        )
        .domain;
        assert_eq!(
            domain.uuid.as_deref(),
            Some("5a9f3a2e-1c4b-5d6e-8f90-123456789abc")
        );
        let message = convert_err(json!({"domain": {"firmware": {"uuid": "nope"}}}));
        assert!(
            message.starts_with("spec.domain.firmware.uuid: \"nope\" is not a UUID"),
            "{message}"
        );
    }

    #[test]
    fn reboot_policy_terminate_destroys() {
        let domain = convert_ok(json!({"domain": {"rebootPolicy": "Terminate"}})).domain;
        assert_eq!(domain.on_reboot.as_deref(), Some("destroy"));
    }

    #[test]
    fn foreign_architecture_and_unsafe_names_are_refused() {
        let message = convert_err(json!({"architecture": "arm64"}));
        assert_eq!(
            message,
            "spec.architecture: architecture \"arm64\" (only amd64) is not supported by this launcher"
        );
        let mut ctx = context();
        ctx.name = "../etc".into();
        let err = convert_with(json!({}), &ctx)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("--name \"../etc\" is not usable"), "{err}");
    }

    #[test]
    fn hook_sidecar_lists_are_read_as_kubevirt_reads_them_and_paused_starts_on_the_test_driver_are_refused()
     {
        let with = |list: &str| {
            let mut vmi = super::super::test_support::vmi_with(json!({}));
            vmi.metadata
                .annotations
                .insert("hooks.kubevirt.io/hookSidecars".into(), list.into());
            vmi
        };
        // KubeVirt's smbios example, and a list with every field.
        let smbios = with(
            r#"[{"args": ["--version", "v1alpha2"], "image": "registry:5000/kubevirt/example-hook-sidecar:devel", "imagePullPolicy": "IfNotPresent", "unknown": 1}]"#,
        );
        assert_eq!(super::hook_sidecar_count(&smbios), Ok(1));
        assert!(super::super::convert(&smbios, &context()).is_ok());
        let full = with(
            r#"[{"image": "a", "configMap": {"name": "c", "key": "k", "hookPath": "/usr/bin/onDefineDomain"}}, {"pvc": {"name": "p", "volumePath": "/v", "sharedComputePath": "/s"}, "command": ["/hook"]}]"#,
        );
        assert_eq!(super::hook_sidecar_count(&full), Ok(2));
        for bad in [r#"{"image": "a"}"#, r#"[{"args": "--version"}]"#, "[", "3"] {
            let err = super::super::convert(&with(bad), &context())
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                err.starts_with("metadata.annotations.hooks.kubevirt.io/hookSidecars: not a JSON list of hook sidecars as KubeVirt reads it: "),
                "{bad}: {err}"
            );
        }
        let mut test = context();
        test.domain_type = super::super::DomainType::Test;
        let paused = convert_with(json!({"startStrategy": "Paused"}), &test)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            paused.starts_with(
                "spec.startStrategy: Paused needs a driver that can start a domain paused"
            ),
            "{paused}"
        );
        convert_ok(json!({"startStrategy": "Paused"}));
    }
}
