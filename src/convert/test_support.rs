//! Shared fixtures for the converter's unit tests.

use serde_json::{Value, json};

use super::{Conversion, ConvertContext, ConvertError, DomainType, convert};
use crate::vmi::{VirtualMachineInstance, parse_vmi};

/// KubeVirt's default directories, fixed OVMF paths, TCG.
pub(crate) fn context() -> ConvertContext {
    ConvertContext {
        namespace: "default".into(),
        name: "testvmi".into(),
        uid: "11111111-2222-3333-4444-555555555555".into(),
        ..super::kubevirt_defaults(DomainType::Qemu)
    }
}

/// A VMI with 128Mi of memory and whatever `spec.domain` / `spec` additions
/// the test merges in.
pub(crate) fn vmi_with(spec: Value) -> VirtualMachineInstance {
    let mut base = json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "testvmi", "namespace": "default", "uid": "11111111-2222-3333-4444-555555555555"},
        "spec": {"domain": {"resources": {"requests": {"memory": "128Mi"}}, "devices": {}}}
    });
    merge(&mut base["spec"], spec);
    parse_vmi(&base).unwrap_or_else(|e| panic!("test VMI does not parse: {e}"))
}

fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                merge(target.entry(key).or_insert(Value::Null), value);
            }
        }
        (target, patch) => *target = patch,
    }
}

pub(crate) fn convert_ok(spec: Value) -> Conversion {
    convert(&vmi_with(spec), &context()).unwrap_or_else(|e| panic!("{e}"))
}

pub(crate) fn convert_err(spec: Value) -> String {
    match convert(&vmi_with(spec), &context()) {
        Ok(_) => panic!("expected a conversion error"),
        Err(err) => err.to_string(),
    }
}

pub(crate) fn convert_with(spec: Value, ctx: &ConvertContext) -> Result<Conversion, ConvertError> {
    convert(&vmi_with(spec), ctx)
}
