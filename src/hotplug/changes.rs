//! What a sync may change on a running VMI, judged on the VMI itself so
//! that a refusal names the field to put back (KubeVirt's JSON path).
//!
//! The last VMI applied to the running domain is compared with the new one.
//! A change is accepted when the launcher can make it live:
//!
//! * hotpluggable volumes (`persistentVolumeClaim` or `dataVolume` with
//!   `hotpluggable: true`) and their disks, added or removed;
//! * interfaces and their networks, added or removed, and an interface's
//!   `state` (`absent` unplugs it);
//! * `hostDevices` and `gpus`, added or removed;
//! * `cpu.sockets` when `cpu.maxSockets` is set, `memory.guest` when
//!   `memory.maxGuest` is set (and the resource requests and limits that
//!   go with them);
//! * fields that do not touch the running domain (scheduling, probes, the
//!   termination grace period, ...).
//!
//! Anything else changed needs a restart and is refused before anything is
//! touched. Lists of named things are matched by name, so reordering them
//! is not a change; an absent field, `null` and `[]` are the same (but `{}`
//! is not: `efi: {}` or `masquerade: {}` mean something).

use std::collections::BTreeSet;
use std::fmt;

use serde_json::{Map, Value};

use crate::vmi::VirtualMachineInstance;

/// A change the launcher cannot make to a running domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotLive {
    /// The JSON path inside the VMI, e.g. `spec.domain.machine.type`.
    pub path: String,
    pub message: String,
}

impl NotLive {
    fn new(path: impl Into<String>, message: impl Into<String>) -> NotLive {
        NotLive {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for NotLive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

const RESTART: &str = "it needs a restart of the VMI";

/// Top-level `spec` fields that do not affect a running domain: the pod,
/// scheduling and probes, things used only when the domain is created, and
/// the grace period (which the launcher applies itself).
const NO_EFFECT_ON_A_RUNNING_DOMAIN: [&str; 18] = [
    "terminationGracePeriodSeconds",
    "startStrategy",
    "evictionStrategy",
    "nodeSelector",
    "affinity",
    "tolerations",
    "topologySpreadConstraints",
    "schedulerName",
    "priorityClassName",
    "livenessProbe",
    "readinessProbe",
    "subdomain",
    "dnsPolicy",
    "dnsConfig",
    "accessCredentials",
    "hostname",
    "serviceAccountName",
    "resourceClaims",
];

/// Checks that `new` differs from `old` (both whole VMIs as JSON) only in
/// what can change live.
pub fn check(old: &Value, new: &Value) -> Result<(), NotLive> {
    let (old_spec, new_spec) = (field(old, "spec"), field(new, "spec"));
    let ctx = Context {
        old_volumes: hotpluggable_volumes(old_spec),
        new_volumes: hotpluggable_volumes(new_spec),
        max_sockets: path_set(new_spec, &["domain", "cpu", "maxSockets"]),
        max_guest: path_set(new_spec, &["domain", "memory", "maxGuest"]),
        guest_set: path_set(old_spec, &["domain", "memory", "guest"])
            && path_set(new_spec, &["domain", "memory", "guest"]),
        topology_set: ["sockets", "cores", "threads"].iter().all(|k| {
            path_set(old_spec, &["domain", "cpu", k]) == path_set(new_spec, &["domain", "cpu", k])
        }) && ["sockets", "cores", "threads"]
            .iter()
            .any(|k| path_set(new_spec, &["domain", "cpu", k])),
    };
    for key in keys(old_spec, new_spec) {
        if NO_EFFECT_ON_A_RUNNING_DOMAIN.contains(&key.as_str()) {
            continue;
        }
        let path = format!("spec.{key}");
        let (a, b) = (field(old_spec, &key), field(new_spec, &key));
        match key.as_str() {
            "domain" => check_domain(&ctx, a, b)?,
            "volumes" => named_list(&path, a, b, |change| match change {
                Change::Added(v) if ctx.new_volumes.contains(&name_of(v)) => Ok(()),
                Change::Removed(v) if ctx.old_volumes.contains(&name_of(v)) => Ok(()),
                Change::Added(v) => Err(format!(
                    "volume {:?} was added, but only persistentVolumeClaim and dataVolume volumes with hotpluggable: true can be added to a running VMI; {RESTART}",
                    name_of(v)
                )),
                Change::Removed(v) => Err(format!(
                    "volume {:?} was removed, but only hotpluggable volumes can be removed from a running VMI; {RESTART}",
                    name_of(v)
                )),
            })?,
            "networks" => named_list(&path, a, b, |_| Ok(()))?,
            _ => same(&path, a, b)?,
        }
    }
    Ok(())
}

/// Checks the vCPU and memory counts a running domain can reach: at most
/// `maxSockets` sockets and `maxGuest` of memory, which it started with.
pub fn check_bounds(vmi: &VirtualMachineInstance) -> Result<(), NotLive> {
    let domain = &vmi.spec.domain;
    if let Some(cpu) = &domain.cpu
        && let (Some(sockets), Some(max)) = (cpu.sockets, cpu.max_sockets)
        && sockets > max
    {
        return Err(NotLive::new(
            "spec.domain.cpu.sockets",
            format!(
                "{sockets} sockets is above spec.domain.cpu.maxSockets ({max}); a running VMI cannot grow past the maximum it started with"
            ),
        ));
    }
    let memory = domain.memory.as_ref();
    if let (Some(guest), Some(max)) = (
        memory.and_then(|m| m.guest.as_ref()),
        memory.and_then(|m| m.max_guest.as_ref()),
    ) && let (Ok(g), Ok(m)) = (guest.floor(), max.floor())
        && g > m
    {
        return Err(NotLive::new(
            "spec.domain.memory.guest",
            format!(
                "{guest} is above spec.domain.memory.maxGuest ({max}); a running VMI cannot grow past the maximum it started with"
            ),
        ));
    }
    Ok(())
}

/// Facts about the two VMIs the rules need.
struct Context {
    old_volumes: BTreeSet<String>,
    new_volumes: BTreeSet<String>,
    max_sockets: bool,
    max_guest: bool,
    /// `memory.guest` is given in both, so requests do not decide memory.
    guest_set: bool,
    /// The CPU topology is given (unchanged but for sockets), so CPU
    /// requests do not decide the vCPU count.
    topology_set: bool,
}

fn check_domain(ctx: &Context, old: &Value, new: &Value) -> Result<(), NotLive> {
    for key in keys(old, new) {
        let path = format!("spec.domain.{key}");
        let (a, b) = (field(old, &key), field(new, &key));
        match key.as_str() {
            "devices" => check_devices(ctx, a, b)?,
            "cpu" => check_allowing(&path, a, b, |k| {
                (k == "sockets" && ctx.max_sockets).then_some(())
            })
            .map_err(|e| explain(e, "sockets", "spec.domain.cpu.maxSockets"))?,
            "memory" => check_allowing(&path, a, b, |k| {
                (k == "guest" && ctx.max_guest).then_some(())
            })
            .map_err(|e| explain(e, "guest", "spec.domain.memory.maxGuest"))?,
            "resources" => check_resources(ctx, a, b)?,
            _ => same(&path, a, b)?,
        }
    }
    Ok(())
}

/// Says what would have made a refused vCPU or memory change possible.
fn explain(mut e: NotLive, field: &str, needs: &str) -> NotLive {
    if e.path.ends_with(&format!(".{field}")) {
        e.message = format!(
            "{} without {needs}; set {needs} when the VMI starts to change this live, or restart it",
            e.message.trim_end_matches(&format!("; {RESTART}"))
        );
    }
    e
}

fn check_resources(ctx: &Context, old: &Value, new: &Value) -> Result<(), NotLive> {
    for key in keys(old, new) {
        let path = format!("spec.domain.resources.{key}");
        let (a, b) = (field(old, &key), field(new, &key));
        match key.as_str() {
            "requests" | "limits" => check_allowing(&path, a, b, |resource| {
                let free = match resource {
                    "memory" => ctx.max_guest || ctx.guest_set,
                    "cpu" => ctx.max_sockets || ctx.topology_set,
                    // Device-plugin resources come and go with host devices.
                    _ => true,
                };
                free.then_some(())
            })?,
            // Only the pod's overhead.
            "overcommitGuestOverhead" => {}
            _ => same(&path, a, b)?,
        }
    }
    Ok(())
}

fn check_devices(ctx: &Context, old: &Value, new: &Value) -> Result<(), NotLive> {
    for key in keys(old, new) {
        let path = format!("spec.domain.devices.{key}");
        let (a, b) = (field(old, &key), field(new, &key));
        match key.as_str() {
            "disks" => named_list(&path, a, b, |change| match change {
                Change::Added(d) if ctx.new_volumes.contains(&name_of(d)) => Ok(()),
                Change::Removed(d) if ctx.old_volumes.contains(&name_of(d)) => Ok(()),
                Change::Added(d) => Err(format!(
                    "disk {:?} was added, but its volume is not hotpluggable (persistentVolumeClaim or dataVolume with hotpluggable: true); {RESTART}",
                    name_of(d)
                )),
                Change::Removed(d) => Err(format!(
                    "disk {:?} was removed, but its volume is not hotpluggable; {RESTART}",
                    name_of(d)
                )),
            })?,
            "interfaces" => named_list_with(&path, a, b, &["state"], |_| Ok(()))?,
            "hostDevices" | "gpus" => named_list(&path, a, b, |_| Ok(()))?,
            _ => same(&path, a, b)?,
        }
    }
    Ok(())
}

/// A named element that is in only one of the two lists.
enum Change<'a> {
    Added(&'a Value),
    Removed(&'a Value),
}

/// Lists of objects with a `name`, matched by name: elements in both must be
/// the same, `judge` decides on the others.
fn named_list(
    path: &str,
    old: &Value,
    new: &Value,
    judge: impl Fn(Change) -> Result<(), String>,
) -> Result<(), NotLive> {
    named_list_with(path, old, new, &[], judge)
}

/// As `named_list`, and in elements in both only `mutable` fields may
/// change.
fn named_list_with(
    path: &str,
    old: &Value,
    new: &Value,
    mutable: &[&str],
    judge: impl Fn(Change) -> Result<(), String>,
) -> Result<(), NotLive> {
    let (Some(old_items), Some(new_items)) = (as_list(old), as_list(new)) else {
        return same(path, old, new);
    };
    // Without unique names the lists cannot be matched; the parser and the
    // converter report those. Compare them as they are.
    let (Some(_), Some(new_names)) = (names(&old_items), names(&new_items)) else {
        return same(path, old, new);
    };
    for (i, item) in new_items.iter().enumerate() {
        let name = name_of(item);
        match old_items.iter().find(|o| name_of(o) == name) {
            Some(before) => check_allowing(&format!("{path}[{i}]"), before, item, |k| {
                mutable.contains(&k).then_some(())
            })?,
            None => judge(Change::Added(item))
                .map_err(|message| NotLive::new(format!("{path}[{i}]"), message))?,
        }
    }
    for item in &old_items {
        if !new_names.contains(&name_of(item)) {
            judge(Change::Removed(item)).map_err(|message| NotLive::new(path, message))?;
        }
    }
    Ok(())
}

/// Compares two objects key by key; `free(key)` allows a key to differ.
fn check_allowing(
    path: &str,
    old: &Value,
    new: &Value,
    free: impl Fn(&str) -> Option<()>,
) -> Result<(), NotLive> {
    if !(is_object_or_empty(old) && is_object_or_empty(new)) {
        return same(path, old, new);
    }
    for key in keys(old, new) {
        if free(&key).is_some() {
            continue;
        }
        same(&format!("{path}.{key}"), field(old, &key), field(new, &key))?;
    }
    Ok(())
}

/// Equal, or the error names the first leaf that differs.
fn same(path: &str, old: &Value, new: &Value) -> Result<(), NotLive> {
    if equivalent(old, new) {
        return Ok(());
    }
    match (old, new) {
        (Value::Object(_), Value::Object(_))
        | (Value::Object(_), Value::Null)
        | (Value::Null, Value::Object(_)) => {
            for key in keys(old, new) {
                same(&format!("{path}.{key}"), field(old, &key), field(new, &key))?;
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                same(&format!("{path}[{i}]"), x, y)?;
            }
        }
        _ => {}
    }
    // No part differs on its own (`{}` set where nothing was): the value
    // as a whole changed.
    Err(NotLive::new(
        path,
        format!(
            "changed from {} to {}, which a running VMI cannot take; {RESTART}",
            shown(old),
            shown(new)
        ),
    ))
}

/// JSON equality where absent, `null` and `[]` are all "not set".
fn equivalent(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            keys(a, b).iter().all(|k| equivalent(get(x, k), get(y, k)))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| equivalent(p, q))
        }
        _ if unset(a) && unset(b) => true,
        _ => a == b,
    }
}

fn unset(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

static NULL: Value = Value::Null;

fn get<'a>(map: &'a Map<String, Value>, key: &str) -> &'a Value {
    map.get(key).unwrap_or(&NULL)
}

fn field<'a>(v: &'a Value, key: &str) -> &'a Value {
    v.get(key).unwrap_or(&NULL)
}

fn path_set(v: &Value, path: &[&str]) -> bool {
    !unset(path.iter().fold(v, |v, k| field(v, k)))
}

/// The keys of both objects, in a stable order.
fn keys(a: &Value, b: &Value) -> Vec<String> {
    let mut all = BTreeSet::new();
    for v in [a, b] {
        if let Value::Object(map) = v {
            all.extend(map.keys().cloned());
        }
    }
    all.into_iter().collect()
}

fn is_object_or_empty(v: &Value) -> bool {
    v.is_object() || unset(v)
}

fn as_list(v: &Value) -> Option<Vec<&Value>> {
    match v {
        Value::Array(items) => Some(items.iter().collect()),
        _ if unset(v) => Some(Vec::new()),
        _ => None,
    }
}

fn name_of(v: &Value) -> String {
    v.get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The names of a list's elements, if every element has a distinct one.
fn names(items: &[&Value]) -> Option<BTreeSet<String>> {
    let mut set = BTreeSet::new();
    for item in items {
        let name = item.get("name").and_then(Value::as_str)?;
        if !set.insert(name.to_string()) {
            return None;
        }
    }
    Some(set)
}

/// Volumes the handler mounts into a running VMI's pod.
fn hotpluggable_volumes(spec: &Value) -> BTreeSet<String> {
    as_list(field(spec, "volumes"))
        .unwrap_or_default()
        .into_iter()
        .filter(|v| {
            ["persistentVolumeClaim", "dataVolume"]
                .iter()
                .any(|source| field(field(v, source), "hotpluggable") == &Value::Bool(true))
                // A memory dump's volume is no disk of the domain.
                || !unset(field(v, "memoryDump"))
        })
        .map(name_of)
        .collect()
}

/// A value for a message: compact JSON, cut when long; `(not set)`.
fn shown(v: &Value) -> String {
    if unset(v) {
        return "(not set)".to_string();
    }
    let text = v.to_string();
    const MAX: usize = 80;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests;
