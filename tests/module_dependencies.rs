//! The dependency cycles issue 10 named are gone, and stay gone: the
//! modules below must not name the ones they used to depend on circularly.
//! A plain text check of the sources (any mention of the module path), so
//! it needs nothing but the files.

use std::fs;
use std::path::{Path, PathBuf};

fn sources(under: &Path) -> Vec<PathBuf> {
    if under.is_file() {
        return vec![under.to_path_buf()];
    }
    let mut found = Vec::new();
    for entry in fs::read_dir(under).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    found
}

/// Every place under `module` (a file or a directory of `src/`) that
/// names any of `forbidden`.
fn mentions(module: &str, forbidden: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for file in sources(&root.join(module)) {
        let text = fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for needle in forbidden {
                if code.contains(needle) {
                    found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
    }
    found
}

#[test]
fn the_server_does_not_use_the_manager() {
    // The server and the manager meet at the command table
    // (command::ManagerRequest) and the event hub (events::EventHub).
    let found = mentions("server", &["crate::manager", "super::manager"]);
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn the_agent_does_not_use_the_command_line() {
    // Its intervals are configuration (config::AgentIntervals).
    let found = mentions("agent", &["crate::cli"]);
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn network_conversion_does_not_use_storage_conversion() {
    let found = mentions("convert/network.rs", &["storage"]);
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn the_hypervisor_layer_does_not_use_the_manager_or_the_server() {
    let found = mentions(
        "hypervisor",
        &["crate::manager", "crate::server", "crate::command"],
    );
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn signals_do_not_use_the_manager() {
    // A signal is a signals::Signal; the manager names it.
    let found = mentions("signals.rs", &["crate::manager"]);
    assert!(found.is_empty(), "{found:#?}");
}
