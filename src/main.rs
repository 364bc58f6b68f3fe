//! The `virt-launcher` binary; everything lives in the library.

use std::panic;

// musl's allocator returns freed memory to the kernel at once; the static
// build keeps a few freed blocks for the next request (src/block_cache.rs).
// `--cfg vl_musl_malloc` leaves musl's, for scripts/bench.sh's comparison.
#[cfg(all(target_env = "musl", not(vl_musl_malloc)))]
#[global_allocator]
static ALLOCATOR: virt_launcher::block_cache::BlockCache =
    virt_launcher::block_cache::BlockCache::new();

// build.rs links the static build without Rust's unwind tables
// (scripts/static-link.ld); only a build whose panics abort may do that.
#[cfg(all(vl_no_unwind_tables, not(panic = "abort")))]
compile_error!(
    "a musl build with opt-level \"z\" is linked without unwind tables (build.rs): \
     build it with panic = \"abort\", as Cargo.toml's `static` profile does"
);

fn main() {
    // The static build aborts on a panic: log it and exit with the same
    // status the catch below gives.
    virt_launcher::threads::exit_on_panic();
    // With --spawn-libvirt this binary is also PID 1 of the daemons' PID
    // namespace, re-executed in a hidden mode: decided before flags are
    // parsed or any thread starts.
    if let Some(code) = virt_launcher::daemons::init::run_if_requested() {
        std::process::exit(code);
    }
    // In a KubeVirt pod, the libvirt daemon runs under this binary in
    // another hidden mode, which reaps the QEMU processes it double-forks.
    if let Some(code) = virt_launcher::daemons::reaper::run_if_requested() {
        std::process::exit(code);
    }
    // Installed as the pod's libvirt `qemu` hook (KubeVirt mode), this
    // binary is run by libvirt under that name: the hook client.
    if let Some(code) = virt_launcher::migration::hook::client_if_requested() {
        std::process::exit(code);
    }
    if let Some(code) = allocator_self_test_if_requested() {
        std::process::exit(code);
    }
    // args_os: an argument that is not UTF-8 is a usage error, not a panic.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let code = match panic::catch_unwind(|| virt_launcher::launcher::main(argv)) {
        Ok(code) => code,
        Err(payload) => {
            eprintln!(
                "virt-launcher: internal error: {}",
                virt_launcher::threads::panic_message(&payload)
            );
            virt_launcher::exit::ExitCode::Internal.code()
        }
    };
    std::process::exit(code);
}

/// `virt-launcher __allocator-self-test`, a hidden mode: the stress of
/// src/block_cache.rs on this binary's block cache, from many threads. In
/// the static build that is the global allocator itself, which serves the
/// test's own threads, channels and vectors too (scripts/test.sh runs it
/// there); other builds (and the static one built with musl's malloc for
/// the benchmark) have none, and stress one of their own.
fn allocator_self_test_if_requested() -> Option<i32> {
    use virt_launcher::block_cache::stress;
    if std::env::args_os().nth(1)? != stress::MODE {
        return None;
    }
    #[cfg(all(target_env = "musl", not(vl_musl_malloc)))]
    let cache = &ALLOCATOR;
    #[cfg(not(all(target_env = "musl", not(vl_musl_malloc))))]
    let cache = &virt_launcher::block_cache::BlockCache::new();
    Some(stress::self_test(cache))
}
