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

/// The `libc` functions a line of code calls (`libc::name(`); constants
/// and types (`libc::O_CLOEXEC`, `libc::c_int`) are not calls.
fn libc_calls(code: &str) -> Vec<&str> {
    code.match_indices("libc::")
        .filter_map(|(at, _)| {
            let rest = &code[at + "libc::".len()..];
            let name_len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let name = &rest[..name_len];
            let is_function = name.starts_with(|c: char| c.is_ascii_lowercase());
            (is_function && rest[name_len..].starts_with('(')).then_some(name)
        })
        .collect()
}

#[test]
fn raw_os_calls_live_in_the_os_module() {
    // Issue 10: the OS calls `std` lacks sit behind one small module
    // (src/os/) with SAFETY comments; libvirt's FFI is the other place.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let allowed = [root.join("os"), root.join("hypervisor/ffi.rs")];
    let mut found = Vec::new();
    for file in sources(&root) {
        if allowed.iter().any(|a| file.starts_with(a)) {
            continue;
        }
        let text = fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if !libc_calls(code).is_empty() {
                found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
    // The check itself sees a call, and not a constant or a type.
    assert_eq!(libc_calls("check(unsafe { libc::kill(pid, 9) })"), ["kill"]);
    assert!(libc_calls("libc::O_CLOEXEC | x as libc::c_ulong)").is_empty());
}

#[test]
fn the_architecture_module_table_lists_every_top_level_module() {
    // Issue 10: the module table (docs/architecture.md since issue 30) names
    // every module of src/lib.rs.
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = fs::read_to_string(manifest.join("src/lib.rs")).unwrap();
    let doc = fs::read_to_string(manifest.join("docs/architecture.md")).unwrap();
    let modules: Vec<&str> = lib
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            ["pub mod ", "pub(crate) mod ", "mod "]
                .iter()
                .find_map(|p| l.strip_prefix(p))
        })
        .filter_map(|l| l.strip_suffix(';'))
        .collect();
    assert!(modules.len() > 20, "{modules:?}");
    let table: String = doc
        .lines()
        .filter(|l| l.starts_with("| `src/"))
        .map(|l| l.split(" | ").next().unwrap_or_default())
        .collect();
    let missing: Vec<&&str> = modules
        .iter()
        .filter(|m| {
            !table.contains(&format!("`src/{m}.rs`")) && !table.contains(&format!("`src/{m}/`"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "not in docs/architecture.md's module table: {missing:?}"
    );
}

/// The sibling modules of `src/manager` that `code` names: `super::name`,
/// `super::{a, b::c}` and `crate::manager::name`.
fn manager_modules_named(code: &str, siblings: &[String]) -> Vec<String> {
    let mut named = Vec::new();
    let mut note = |path: &str| {
        let first = path.trim().split("::").next().unwrap_or("").trim();
        if siblings.iter().any(|s| s == first) && !named.iter().any(|n| n == first) {
            named.push(first.to_string());
        }
    };
    for prefix in ["super::", "crate::manager::"] {
        for (at, _) in code.match_indices(prefix) {
            let rest = &code[at + prefix.len()..];
            if let Some(group) = rest.strip_prefix('{') {
                // The top-level items of the group: `a`, `b::c`, `d::{e}`.
                let mut depth = 0;
                let mut item = String::new();
                for c in group.chars() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            note(&item);
                            item.clear();
                            continue;
                        }
                        _ => {}
                    }
                    if depth == 0 {
                        item.push(c);
                    }
                }
                note(&item);
            } else {
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(rest.len());
                note(&rest[..end]);
            }
        }
    }
    named
}

/// The production code of a source file: comments dropped, and nothing
/// from its first `#[cfg(test)]` on (test modules may name anything).
fn production_code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A cycle in `edges` (module → the modules it names), if there is one.
fn find_cycle(edges: &std::collections::BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &std::collections::BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = std::collections::BTreeSet::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut Vec::new(), &mut done))
}

#[test]
fn the_managers_modules_form_no_cycle() {
    // Issue 30: the manager's modules depend on each other one way; what
    // they share (reads, samples, results) is in `reply`, a leaf. `mod.rs`
    // declares them all and is left out; a module's own directory
    // (`hotplug/`) counts as that module.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/manager");
    let mut files: std::collections::BTreeMap<String, Vec<PathBuf>> = Default::default();
    for entry in fs::read_dir(&dir).unwrap().flatten() {
        let path = entry.path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if name == "mod" || name == "tests" {
            continue;
        }
        files.entry(name).or_default().extend(sources(&path));
    }
    let siblings: Vec<String> = files.keys().cloned().collect();
    assert!(siblings.len() > 15, "{siblings:?}");
    let mut edges = std::collections::BTreeMap::new();
    for (module, paths) in &files {
        let mut named = Vec::new();
        for path in paths {
            let code = production_code(&fs::read_to_string(path).unwrap());
            for other in manager_modules_named(&code, &siblings) {
                // A file inside the module's own directory names its
                // parent as `super::`.
                if other != *module && !named.contains(&other) {
                    named.push(other);
                }
            }
        }
        edges.insert(module.clone(), named);
    }
    assert_eq!(find_cycle(&edges), None, "{edges:#?}");
    // The shared vocabulary and the launcher's phase name no other module
    // of the manager.
    for leaf in ["reply", "phase"] {
        assert!(
            edges[leaf].is_empty(),
            "{leaf} is a leaf: {:?}",
            edges[leaf]
        );
    }

    // The check itself: it reads every form of path, and sees a cycle.
    let names: Vec<String> = ["jobs", "reply", "stats"].map(String::from).to_vec();
    assert_eq!(
        manager_modules_named(
            "use super::{DomainManager, reply::JobValue, stats::{a, b}};\nlet x = super::jobs::X;",
            &names
        ),
        ["reply", "stats", "jobs"]
    );
    let mut cyclic = std::collections::BTreeMap::new();
    cyclic.insert("jobs".to_string(), vec!["reply".to_string()]);
    cyclic.insert("reply".to_string(), vec!["stats".to_string()]);
    cyclic.insert("stats".to_string(), vec!["jobs".to_string()]);
    assert_eq!(
        find_cycle(&cyclic),
        Some(
            ["jobs", "reply", "stats", "jobs"]
                .map(String::from)
                .to_vec()
        )
    );
}

/// The fields of `pub(super) struct name { ... }` in `code` that are
/// visible outside its module (`pub`, `pub(super)`, `pub(crate)`).
fn public_fields(code: &str, name: &str) -> Option<Vec<String>> {
    let start = code.find(&format!("struct {name} {{"))?;
    let body = &code[start..];
    let body = &body[body.find('{')? + 1..body.find("\n}")?];
    Some(
        body.lines()
            .map(str::trim)
            .filter(|l| l.starts_with("pub") && l.contains(':'))
            .map(str::to_string)
            .collect(),
    )
}

#[test]
fn the_managers_state_keeps_its_fields_to_its_module() {
    // Issue 30: each concern owns its state; the rest of the manager
    // changes it through methods that say what happened.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/manager");
    for (file, state) in [
        ("shutdown.rs", "GracefulStop"),
        ("guest.rs", "AgentState"),
        ("migration.rs", "MigrationState"),
        ("hotplug.rs", "HotplugState"),
        ("domain_cache.rs", "DomainCache"),
        ("phase.rs", "LauncherPhase"),
    ] {
        let code = production_code(&fs::read_to_string(dir.join(file)).unwrap());
        let public = public_fields(&code, state)
            .unwrap_or_else(|| panic!("no struct {state} in src/manager/{file}"));
        assert!(public.is_empty(), "{file}: {state}: {public:?}");
    }
    // The check itself sees a field the rest of the manager could set.
    let old = "pub(super) struct GracefulStop {\n    /// Why.\n    pub(super) period: Duration,\n    presses: u32,\n}\n";
    assert_eq!(
        public_fields(old, "GracefulStop"),
        Some(vec!["pub(super) period: Duration,".to_string()])
    );
}
