#!/usr/bin/env bash
# Runs every test: unit tests, the daemon on libvirt's test driver, the
# end-to-end tests that boot the test guest under real libvirt and QEMU,
# and the socat smoke tours. Needs the host set-up (scripts/setup-host.sh,
# which .ci/run runs first).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
# Build (or reuse) the test guest before the tests that boot it.
scripts/build-test-guest.sh target/test-guest
# Formatting, lints as policy (Cargo.toml's [lints]: SAFETY comments,
# no lossy casts) and documentation without warnings.
cargo fmt --check
cargo clippy --all-targets --locked -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --locked
# The unit tests need nothing outside the process: run them with no
# program on PATH (cargo itself needs the linker, so it only builds them).
lib_tests=$(cargo test --lib --locked --no-run --message-format=json \
    | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
env -i HOME="$HOME" PATH=/nonexistent "$lib_tests" --test-threads=2
# Two test threads: the guests run under plain emulation on two cores.
cargo test --locked -- --test-threads=2
cargo build --release --locked
bin=${CARGO_TARGET_DIR:-target}/release/virt-launcher
scripts/smoke.sh "$bin"
scripts/smoke-qemu.sh "$bin"
echo "test.sh: all tests passed in $(( $(date +%s) - started )) s"
