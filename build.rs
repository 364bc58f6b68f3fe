//! Build script: two jobs, for the static musl build only. It drops the
//! unwind tables of Rust's code, which a build whose panics abort never
//! reads (see scripts/static-link.ld; src/no_unwind.rs, compiled in under
//! the same cfg, keeps libunwind out too), and it has the linker write its map
//! with a cross-reference table (`virt-launcher.map` in `OUT_DIR`), which
//! names the object that defined each symbol: the binary is stripped as it
//! is linked, so scripts/build-static.sh reads there that `memcpy` and
//! `memmove` are src/memcpy.rs's and not musl's, and `_Unwind_Backtrace`
//! and `_Unwind_Resume` src/no_unwind.rs's and not libunwind's.
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
    // scripts/bench.sh's `allocator` section builds the static binary
    // with musl's own malloc (`--cfg vl_musl_malloc`) to compare it with ours.
    println!("cargo:rustc-check-cfg=cfg(vl_musl_malloc)");
    let musl = env::var("CARGO_CFG_TARGET_ENV").is_ok_and(|v| v == "musl");
    let size_profile = env::var("OPT_LEVEL").is_ok_and(|v| v == "z");
    if musl && size_profile {
        let dir = env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".to_string());
        println!("cargo:rustc-link-arg-bins=-Wl,-T,{dir}/scripts/static-link.ld");
        if let Ok(out) = env::var("OUT_DIR") {
            println!("cargo:rustc-link-arg-bins=-Wl,-Map,{out}/virt-launcher.map,--cref");
        }
        println!("cargo:rustc-cfg=vl_no_unwind_tables");
    }
}
