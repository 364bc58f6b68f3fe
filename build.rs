//! Build script: one job, for the static musl build only (see
//! scripts/static-link.ld): drop the unwind tables of Rust's code, which a
//! build whose panics abort never reads.
//!
//! Cargo does not tell a build script the profile's name or its panic
//! strategy (`CARGO_CFG_PANIC` reflects the target, not the profile), so
//! the static build is recognised by what only Cargo.toml's `static`
//! profile combines: the musl target and `opt-level = "z"`. The crate
//! then gets `cfg(vl_no_unwind_tables)`, and src/main.rs refuses to compile
//! such a build unless its panics abort, so a musl size build that unwinds
//! cannot silently lose the tables it needs.

use std::env;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=scripts/static-link.ld");
    println!("cargo:rustc-check-cfg=cfg(vl_no_unwind_tables)");
    let musl = env::var("CARGO_CFG_TARGET_ENV").is_ok_and(|v| v == "musl");
    let size_profile = env::var("OPT_LEVEL").is_ok_and(|v| v == "z");
    if musl && size_profile {
        let dir = env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".to_string());
        println!("cargo:rustc-link-arg-bins=-Wl,-T,{dir}/scripts/static-link.ld");
        println!("cargo:rustc-cfg=vl_no_unwind_tables");
    }
}
