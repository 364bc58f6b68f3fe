//! `probe`, `freeze` and `unfreeze`: KubeVirt's virt-probe (guest-agent
//! ping) and virt-freezer, through the launcher's socket.

use std::time::Instant;

use serde_json::{Map, Value, json};

use super::connection::{Connection, Reply};
use super::fail;
use crate::cli::ClientTarget;
use crate::command::MAX_GUEST_TIMEOUT_SECONDS;

/// `probe`: exit 0 when the guest agent answers `guest-ping` within the
/// timeout; the whole exchange shares that one deadline.
pub fn probe(target: &ClientTarget) -> i32 {
    let deadline = crate::limits::deadline_in(target.timeout);
    let outcome = Connection::open(&target.socket, deadline).and_then(|mut c| {
        // The agent gets as long as the probe has (whole seconds, at
        // least one); the probe's own deadline still bounds the wait.
        let seconds = target.timeout.as_secs().clamp(1, MAX_GUEST_TIMEOUT_SECONDS);
        c.request(
            "guest-ping",
            Some(object(json!({ "timeout_seconds": seconds }))),
            Some(deadline),
        )
    });
    match outcome {
        Ok(Reply::Return { .. }) => 0,
        Ok(Reply::Error { error, .. }) => {
            fail("probe", format!("the guest agent did not answer: {error}"))
        }
        Err(e) => fail("probe", e.message(target.timeout)),
    }
}

/// `freeze`, as `virt-freezer --freeze`.
pub fn freeze(target: &ClientTarget, unfreeze_timeout_seconds: u64) -> i32 {
    let deadline = crate::limits::deadline_in(target.timeout);
    let mut c = match ready_guest(target, deadline, "freeze") {
        Ok(Some(c)) => c,
        Ok(None) => return 0,
        Err(code) => return code,
    };
    let arguments = object(json!({ "unfreeze_timeout_seconds": unfreeze_timeout_seconds }));
    match c.request("freeze", Some(arguments), Some(deadline)) {
        Ok(Reply::Return { value, .. }) => {
            let count = value
                .get("frozen_filesystems")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            let already = value.get("already_frozen") == Some(&Value::Bool(true));
            let thaw = if unfreeze_timeout_seconds == 0 {
                "they stay frozen until unfreeze".to_string()
            } else {
                format!(
                    "they thaw by themselves in {unfreeze_timeout_seconds} s unless unfreeze comes first"
                )
            };
            if already {
                println!("the guest's filesystems were already frozen; {thaw}");
            } else {
                println!("froze {count} filesystems in the guest; {thaw}");
            }
            0
        }
        Ok(Reply::Error { error, .. }) => {
            // As virt-freezer: never leave a guest half frozen behind a
            // failed freeze.
            let thawed = match c.request("unfreeze", None, Some(deadline)) {
                Ok(Reply::Return { .. }) => "they were thawed again".to_string(),
                Ok(Reply::Error { error, .. }) => format!("thawing them again failed too: {error}"),
                Err(e) => format!("thawing them again failed too: {e}"),
            };
            fail("freeze", format!("the freeze failed: {error}; {thawed}"))
        }
        Err(e) => fail("freeze", e.message(target.timeout)),
    }
}

/// `unfreeze`, as `virt-freezer --unfreeze`.
pub fn unfreeze(target: &ClientTarget) -> i32 {
    let deadline = crate::limits::deadline_in(target.timeout);
    let mut c = match ready_guest(target, deadline, "unfreeze") {
        Ok(Some(c)) => c,
        Ok(None) => return 0,
        Err(code) => return code,
    };
    match c.request("unfreeze", None, Some(deadline)) {
        Ok(Reply::Return { value, .. }) => {
            let count = value
                .get("thawed_filesystems")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            println!("thawed {count} filesystems in the guest");
            0
        }
        Ok(Reply::Error { error, .. }) => fail("unfreeze", format!("the thaw failed: {error}")),
        Err(e) => fail("unfreeze", e.message(target.timeout)),
    }
}

/// Connects and checks what virt-freezer checks first: a running domain
/// with a guest agent. `Ok(None)` (after saying why) when there is
/// nothing to do; `Err` carries the exit status.
fn ready_guest(
    target: &ClientTarget,
    deadline: Instant,
    name: &str,
) -> Result<Option<Connection>, i32> {
    let opened = Connection::open(&target.socket, deadline)
        .and_then(|mut c| Ok((c.request("query-status", None, Some(deadline))?, c)));
    let (status, c) = match opened {
        Ok((Reply::Return { value, .. }, c)) => (value, c),
        Ok((Reply::Error { error, .. }, _)) => {
            return Err(fail(name, format!("query-status failed: {error}")));
        }
        Err(e) => return Err(fail(name, e.message(target.timeout))),
    };
    let nothing = if name == "freeze" {
        "nothing to freeze"
    } else {
        "nothing to thaw"
    };
    let state = status
        .get("domain")
        .and_then(|d| d.get("state"))
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    if state != "Running" {
        println!("the domain is not running (state {state}); {nothing}");
        return Ok(None);
    }
    let agent = status
        .get("agent")
        .and_then(|a| a.get("connected"))
        .and_then(Value::as_bool);
    if agent != Some(true) {
        println!("no guest agent is connected; {nothing}");
        return Ok(None);
    }
    Ok(Some(c))
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}
