//! `scripts/install.sh` and the man page as a user meets them: installed
//! into a staging root, found by `man`, and clean under the two roff
//! linters (groff and mandoc, both installed by scripts/setup-host.sh).

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use common::{BIN, Need, TempTree, require};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?} (scripts/setup-host.sh installs it): {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn install_puts_the_binary_and_the_man_page_where_man_finds_them() {
    if !require(&[Need::Program("man")]) {
        return;
    }
    let tree = TempTree::new("install");
    let destdir = tree.path("stage");
    run(Command::new(format!("{ROOT}/scripts/install.sh"))
        .env("PREFIX", "/opt/vl")
        .env("DESTDIR", &destdir)
        .env("BIN", BIN));
    let bin = destdir.join("opt/vl/bin/virt-launcher");
    let page = destdir.join("opt/vl/share/man/man8/virt-launcher.8");
    assert_eq!(mode(&bin), 0o755);
    assert_eq!(mode(&page), 0o644);
    // Nothing else was installed.
    let mut found = Vec::new();
    let mut stack = vec![destdir.clone()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path.strip_prefix(&destdir).unwrap().display().to_string());
            }
        }
    }
    found.sort();
    assert_eq!(
        found,
        [
            "opt/vl/bin/virt-launcher",
            "opt/vl/share/man/man8/virt-launcher.8"
        ]
    );

    // The installed binary runs, and its page is the checked-in one.
    let version = run(Command::new(&bin).arg("--version"));
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("virt-launcher {}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(
        fs::read_to_string(&page).unwrap(),
        fs::read_to_string(format!("{ROOT}/man/virt-launcher.8")).unwrap()
    );

    // `man virt-launcher` finds it under the prefix's man directory (as it
    // does under /usr/local/share/man without MANPATH), and `man -l` reads
    // the file directly.
    let by_name = run(Command::new("man")
        .arg("virt-launcher")
        .env("MANPATH", destdir.join("opt/vl/share/man"))
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "80"));
    let text = String::from_utf8_lossy(&by_name.stdout);
    assert!(text.contains("VIRT-LAUNCHER(8)"), "{text}");
    assert!(text.contains("--spawn-libvirt"), "{text}");
    let direct = run(Command::new("man")
        .arg("-l")
        .arg(&page)
        .env("MANPAGER", "cat"));
    assert!(String::from_utf8_lossy(&direct.stdout).contains("EXIT STATUS"));
}

#[test]
fn install_refuses_a_relative_prefix() {
    let out = Command::new(format!("{ROOT}/scripts/install.sh"))
        .env("PREFIX", "relative/dir")
        .env("BIN", BIN)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("PREFIX must be an absolute path"));
}

/// grotty's bold and underline are `c BACKSPACE c` and `_ BACKSPACE c`:
/// keep the last character of each.
fn without_overstrike(text: &str) -> String {
    let mut out: Vec<char> = Vec::new();
    for c in text.chars() {
        if c == '\u{8}' {
            out.pop();
        } else {
            out.push(c);
        }
    }
    // After "c\bc" the first c was popped by \b; only the second remains.
    out.into_iter().collect()
}

#[test]
fn man_page_is_clean_under_groff_and_mandoc() {
    if !require(&[Need::Program("groff"), Need::Program("mandoc")]) {
        return;
    }
    let page = format!("{ROOT}/man/virt-launcher.8");
    // groff: every warning category (-ww) to stderr; none may appear.
    let groff = run(Command::new("groff").args(["-man", "-Tutf8", "-ww", &page]));
    let warnings = String::from_utf8_lossy(&groff.stderr);
    assert!(warnings.is_empty(), "groff -ww:\n{warnings}");
    // Rendered text keeps flags and paths intact: no hyphenation, and no
    // typographic hyphen (U+2010) where the source says `\-`.
    let text = without_overstrike(&String::from_utf8_lossy(&groff.stdout));
    assert!(!text.contains('\u{2010}'), "typographic hyphen in:\n{text}");
    for literal in [
        "--spawn-libvirt",
        "/var/run/kubevirt-ephemeral-disks",
        "--qemu-fsfreeze-status-interval",
        "RequestTooLarge",
    ] {
        assert!(text.contains(literal), "{literal} not intact in:\n{text}");
    }
    // mandoc: -Tlint reports warnings and worse on stdout (exit 0 when there
    // are none); style notes are allowed.
    let lint = Command::new("mandoc")
        .args(["-Tlint", "-Wwarning", &page])
        .output()
        .expect("run mandoc (scripts/setup-host.sh installs it)");
    let report =
        String::from_utf8_lossy(&lint.stdout).to_string() + &String::from_utf8_lossy(&lint.stderr);
    assert!(
        lint.status.success() && report.trim().is_empty(),
        "mandoc -Tlint:\n{report}"
    );
}

/// Runs scripts/demo.sh with `cargo` on `PATH` replaced by `fake_cargo`
/// (a script's body), or with no cargo at all; returns its exit status
/// and standard error. The Rust check comes first, so nothing is installed
/// or built.
fn demo_with_cargo(fake_cargo: Option<&str>) -> (Option<i32>, String) {
    let tree = TempTree::new("demo-rust");
    let bin = tree.path("bin");
    fs::create_dir_all(&bin).unwrap();
    if let Some(body) = fake_cargo {
        let cargo = bin.join("cargo");
        fs::write(&cargo, format!("#!/bin/sh\n{body}\n")).unwrap();
        fs::set_permissions(&cargo, fs::Permissions::from_mode(0o755)).unwrap();
    }
    // The system's programs, but not ~/.cargo/bin.
    let path = format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin.display());
    let out = Command::new("bash")
        .arg(Path::new(ROOT).join("scripts/demo.sh"))
        .env("PATH", path)
        .output()
        .expect("run scripts/demo.sh");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn demo_says_how_to_get_rust_when_cargo_is_missing_or_too_old() {
    let rustup =
        "curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal";
    for (cargo, says) in [
        (None, "demo: cargo is not installed (or not on PATH)"),
        (Some("echo 'cargo 1.63.0'"), "demo: cargo 1.63.0 is too old"),
        (
            Some("echo 'cargo 1.88.0 (873a06493 2025-05-10)'"),
            "demo: cargo 1.88.0 is too old",
        ),
        (Some("exit 1"), "demo: cargo --version does not work"),
    ] {
        let (status, stderr) = demo_with_cargo(cargo);
        assert_eq!(status, Some(1), "{cargo:?}: {stderr}");
        assert!(stderr.contains(says), "{cargo:?}: {stderr}");
        assert!(stderr.contains("needs Rust 1.89 or newer"), "{stderr}");
        assert!(stderr.contains(rustup), "{stderr}");
        assert!(!stderr.contains("error[E"), "a compiler error: {stderr}");
    }
    // The figure the script checks is Cargo.toml's.
    let manifest = fs::read_to_string(Path::new(ROOT).join("Cargo.toml")).unwrap();
    assert!(manifest.contains("rust-version = \"1.89\""), "{manifest}");
}
