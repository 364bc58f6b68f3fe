#!/usr/bin/env bash
# Runs every test: unit tests, the daemon on libvirt's test driver, and the
# end-to-end tests that boot the test guest under real libvirt and QEMU.
# Needs the host set-up (scripts/setup-host.sh, run by .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
# Build (or reuse) the test guest before the tests that boot it.
scripts/build-test-guest.sh target/test-guest
cargo build --release --locked
cargo test --release --locked -- --test-threads=2
