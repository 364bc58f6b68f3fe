//! `query-domain` and `query-stats` on a real guest (real libvirt, real
//! QEMU): answered from the launcher's caches, and never older than a
//! change libvirt told the launcher of. The changes come from outside the
//! launcher (`virsh` on the launcher's own daemon), as a hotplug or a
//! redefinition by anyone would.

mod common;

use std::fs;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use common::guest::{GuestOptions, REAL_GUEST, STEP, boot};
use common::{Client, TempTree, lifecycle, named, require};

/// `virsh` on the launcher's daemon; panics with its output on failure.
fn virsh(uri: &str, args: &[&str]) -> String {
    let out = Command::new("virsh")
        .arg("-c")
        .arg(uri)
        .args(args)
        .output()
        .expect("run virsh");
    assert!(
        out.status.success(),
        "virsh {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn age_ms(reply: &Value) -> u64 {
    reply["age_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("no age_ms in {reply}"))
}

/// A read older than `pause` is the cached one; a younger one was read
/// after the pause.
const PAUSE_MS: u64 = 600;
const PAUSE: Duration = Duration::from_millis(PAUSE_MS);

fn channels(reply: &Value) -> Vec<String> {
    reply["spec"]["devices"]["channel"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|c| c["target"]["@name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn uri_of(client: &mut Client) -> String {
    client.ok("query-status", Value::Null)["libvirt"]["uri"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn query_domain_is_cached_and_never_older_than_a_hotplug_or_a_redefinition() {
    if !require(REAL_GUEST) {
        return;
    }
    let opts = GuestOptions::new("queries");
    let tree = TempTree::new("queries");
    let channel_xml = tree.path("channel.xml");
    fs::write(
        &channel_xml,
        format!(
            "<channel type='unix'><source mode='bind' path='{}'/><target type='virtio' name='org.test.queries.0'/></channel>",
            tree.path("test-channel.sock").display()
        ),
    )
    .unwrap();
    let mut booted = boot(tree, &opts, &[]);
    let domain = "e2e_queries";
    let uri = uri_of(&mut booted.client);
    let client = &mut booted.client;
    let watcher = &mut booted.watcher;

    let first = client.ok("query-domain", Value::Null);
    assert_eq!(first["name"], domain);
    assert_eq!(first["state"], "Running");
    assert!(first["xml"].as_str().unwrap().contains("<domain"));
    assert!(!channels(&first).contains(&"org.test.queries.0".to_string()));
    std::thread::sleep(PAUSE);
    let cached = client.ok("query-domain", Value::Null);
    assert_eq!(cached["xml"], first["xml"]);
    assert!(
        age_ms(&cached) >= PAUSE_MS,
        "not answered from the cache: {}",
        cached["age_ms"]
    );
    let fresh = client.ok("query-domain", json!({"max_age_ms": 0}));
    assert!(age_ms(&fresh) < PAUSE_MS, "{}", fresh["age_ms"]);

    // A device plugged in from outside: once DEVICE_ADDED is out, the
    // reply has it.
    std::thread::sleep(PAUSE);
    virsh(
        &uri,
        &[
            "attach-device",
            domain,
            &channel_xml.to_string_lossy(),
            "--live",
        ],
    );
    watcher.wait_event(STEP, "DEVICE_ADDED", named("DEVICE_ADDED"));
    let plugged = client.ok("query-domain", Value::Null);
    assert!(
        channels(&plugged).contains(&"org.test.queries.0".to_string()),
        "the hotplugged channel is missing: {:?}",
        channels(&plugged)
    );
    assert!(
        plugged["xml"]
            .as_str()
            .unwrap()
            .contains("org.test.queries.0")
    );

    // And unplugged: gone once DEVICE_REMOVED is out.
    virsh(
        &uri,
        &[
            "detach-device",
            domain,
            &channel_xml.to_string_lossy(),
            "--live",
        ],
    );
    watcher.wait_event(STEP, "DEVICE_REMOVED", named("DEVICE_REMOVED"));
    let unplugged = client.ok("query-domain", Value::Null);
    assert!(
        !channels(&unplugged).contains(&"org.test.queries.0".to_string()),
        "the unplugged channel is still there"
    );

    // Redefined from outside: the read after the Defined event is new.
    let cached = client.ok("query-domain", Value::Null);
    std::thread::sleep(PAUSE);
    let inactive = tree_file(
        &booted.launcher.tree.path("redefined.xml"),
        &virsh(&uri, &["dumpxml", "--inactive", domain]),
    );
    virsh(&uri, &["define", &inactive]);
    watcher.wait_event(STEP, "Defined", lifecycle("Defined", "Updated"));
    let redefined = client.ok("query-domain", Value::Null);
    assert!(
        age_ms(&redefined) < PAUSE_MS,
        "the read from before the redefinition ({} ms old then) was served: {} ms",
        age_ms(&cached),
        age_ms(&redefined)
    );

    // Only the state: no XML, no age.
    let state = client.ok("query-domain", json!({"fields": ["state"]}));
    assert_eq!(
        state,
        json!({"name": domain, "state": "Running", "reason": "Booted"})
    );
}

fn tree_file(path: &std::path::Path, text: &str) -> String {
    fs::write(path, text).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn query_stats_is_cached_and_never_older_than_a_pause() {
    if !require(REAL_GUEST) {
        return;
    }
    let opts = GuestOptions::new("qstats");
    let mut booted = boot(TempTree::new("qstats"), &opts, &[]);
    let client = &mut booted.client;
    let first = client.ok("query-stats", Value::Null);
    assert_eq!(first["domain"], "e2e_qstats");
    assert_eq!(first["stats"]["state.state"], 1, "{first}");
    assert!(first["stats"]["cpu.time"].as_u64().is_some(), "{first}");
    assert!(age_ms(&first) < 1000);
    // Answered from the sample (refreshed every 3 s in the background):
    // after a pause, the same sample, older by the pause.
    std::thread::sleep(PAUSE);
    let cached = client.ok("query-stats", Value::Null);
    assert!(
        (PAUSE_MS..=5000).contains(&age_ms(&cached)),
        "not answered from the cache: {}",
        cached["age_ms"]
    );
    assert_eq!(cached["stats"]["cpu.time"], first["stats"]["cpu.time"]);
    // max_age_ms 0 forces a new sample.
    let fresh = client.ok("query-stats", json!({"max_age_ms": 0}));
    assert!(age_ms(&fresh) < PAUSE_MS, "{}", fresh["age_ms"]);
    assert_ne!(fresh["stats"]["cpu.time"], first["stats"]["cpu.time"]);
    // The pause's reply comes after the sample is dropped: paused (3) at
    // once.
    assert_eq!(client.ok("pause", Value::Null)["state"], "Paused");
    let paused = client.ok("query-stats", Value::Null);
    assert_eq!(paused["stats"]["state.state"], 3, "{paused}");
    assert_eq!(client.ok("unpause", Value::Null)["state"], "Running");
    let running = client.ok("query-stats", Value::Null);
    assert_eq!(running["stats"]["state.state"], 1, "{running}");
}
