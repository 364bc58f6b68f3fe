#!/usr/bin/env bash
# Runs every test: unit tests, the daemon on libvirt's test driver, the
# end-to-end tests that boot the test guest under real libvirt and QEMU,
# and the socat smoke tours. Needs the host set-up (scripts/setup-host.sh,
# which .ci/run runs first).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
# The non-root tests (tests/nonroot.rs, and the daemon suite below) run the
# launcher and the test guest as unprivileged users: they must be able to
# reach this checkout (and its target/).
if ! setpriv --reuid=65534 --regid=65534 --clear-groups -- test -r "$PWD/Cargo.toml"; then
    echo "test.sh: $PWD is not readable by other users, and the non-root tests run the launcher" \
        "as unprivileged users: make its parent directories searchable (chmod o+x) or check out elsewhere" >&2
    exit 1
fi
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
# The daemon suite once more as an unprivileged user made for it (and
# removed after): the launcher without root, on the test driver.
# (tests/nonroot.rs runs the real-guest scenarios as such users.)
# (cargo also builds the launcher binary for it: keep the test's executable.)
daemon_tests=$(cargo test --locked --test daemon --no-run --message-format=json \
    | grep '"kind":\["test"\]' \
    | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
test_user=vltestd$$
useradd --system --user-group --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin "$test_user"
trap 'userdel "$test_user" 2>/dev/null || userdel --force "$test_user" || true' EXIT
(cd /tmp && setpriv --reuid="$(id -u "$test_user")" --regid="$(id -g "$test_user")" \
    --clear-groups -- env -i HOME=/nonexistent PATH="$PATH" TMPDIR=/tmp \
    "$daemon_tests" --test-threads=2)
userdel "$test_user"
trap - EXIT
cargo build --release --locked
bin=${CARGO_TARGET_DIR:-target}/release/virt-launcher
scripts/smoke.sh "$bin"
scripts/smoke-qemu.sh "$bin"
echo "test.sh: all tests passed in $(( $(date +%s) - started )) s"
