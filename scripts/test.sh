#!/usr/bin/env bash
# scripts/test.sh [--fast]
#
# With no argument (what .ci/run runs), every test: unit tests, the daemon
# on libvirt's test driver, the end-to-end tests that boot the test guest
# under real libvirt and QEMU, and the socat smoke tours; then the same real
# suites again with the static musl binary (wire backend,
# scripts/build-static.sh). Needs the host set-up (scripts/setup-host.sh,
# which .ci/run runs first). VL_TESTS=all: a test whose prerequisite is
# missing fails, and none may be skipped (tests/common/needs.rs).
#
# --fast: the tier that needs only Rust and a C linker: every test binary
# with VL_TESTS=fast, so that the unit tests, the golden and fuzz suites,
# the module rules and every test on libvirt's in-process test driver run,
# and the tests that need root, QEMU, the host's libvirtd or the test guest
# are skipped (one line per suite says so). A test that needs a program
# (socat, qemu-img, isoinfo, kvhandler, ...) runs where it is installed.
# Where libvirt's library is missing (no libvirt-dev: pkg-config finds no
# libvirt), it tests the wire build (--no-default-features --features
# wire), which needs none; the tests on the in-process test driver, which
# only the library has, are then skipped too, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)

case "${1:-}" in
"") ;;
--fast)
    export VL_TESTS=fast
    build=()
    if ! pkg-config --exists libvirt 2>/dev/null; then
        build=(--no-default-features --features wire)
        echo "test.sh --fast: no libvirt library here (pkg-config finds no libvirt): testing the wire build" >&2
    fi
    # Built first, so that the time to build and the time to run are told
    # apart (the second is what a change costs once built).
    cargo test --locked "${build[@]}" --no-run
    built=$(date +%s)
    cargo test --locked "${build[@]}" -- --test-threads=2
    echo "test.sh --fast: passed in $(( $(date +%s) - started )) s" \
        "($(( built - started )) s to build, $(( $(date +%s) - built )) s to run)"
    exit 0
    ;;
*)
    echo "usage: scripts/test.sh [--fast]" >&2
    exit 2
    ;;
esac

# The full run asks for every test: one whose prerequisite is missing
# fails instead of being skipped.
export VL_TESTS=all
# Runs a `cargo test` (or a test binary) of the full run, and fails if any
# test was skipped (tests/common/needs.rs prints "skipping the tests that
# need ..." when it skips one): nothing may be skipped in CI.
run_tests() {
    if [ "${VL_TESTS:-}" != all ]; then
        echo "test.sh: VL_TESTS is '${VL_TESTS:-}' in the full run, where it must be 'all'" >&2
        exit 1
    fi
    local log
    log=$(mktemp)
    "$@" 2>&1 | tee "$log"
    if grep 'skipping the tests that need' "$log" >&2; then
        rm -f "$log"
        echo "test.sh: tests were skipped in the full run (above)" >&2
        exit 1
    fi
    rm -f "$log"
}
# The non-root tests (tests/nonroot.rs, and the daemon suite below) run the
# launcher and the test guest as unprivileged users: they must be able to
# reach this checkout (and its target/).
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"; }
if ! as_nobody test -r "$PWD/Cargo.toml"; then
    # A checkout under a private directory (a CI runner's, /root): let other
    # users pass through its parents (search only, nothing listed or read),
    # and read the checkout itself, which holds nothing secret.
    dir=$PWD
    while [ "$dir" != / ]; do
        dir=$(dirname "$dir")
        if ! as_nobody test -x "$dir"; then
            echo "test.sh: letting other users pass through $dir (chmod o+x) for the non-root tests" >&2
            chmod o+x "$dir"
        fi
    done
    as_nobody test -r "$PWD/Cargo.toml" || chmod -R o+rX "$PWD"
fi
if ! as_nobody test -r "$PWD/Cargo.toml"; then
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
run_tests env -i HOME="$HOME" PATH=/nonexistent "$lib_tests" --test-threads=2
# Two test threads: the guests run under plain emulation on two cores.
run_tests cargo test --locked -- --test-threads=2
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
(cd /tmp && run_tests setpriv --reuid="$(id -u "$test_user")" --regid="$(id -g "$test_user")" \
    --clear-groups -- env -i HOME=/nonexistent PATH="$PATH" TMPDIR=/tmp VL_TESTS=all \
    "$daemon_tests" --test-threads=2)
userdel "$test_user"
trap - EXIT
cargo build --release --locked
bin=${CARGO_TARGET_DIR:-target}/release/virt-launcher
scripts/smoke.sh "$bin"
scripts/smoke-qemu.sh "$bin"
echo "test.sh: the default (virt backend) build passed in $(( $(date +%s) - started )) s"

# The static binary (wire backend: no libvirt library). The daemon suite
# and the smoke tour run on the test driver served by the host's libvirtd
# (test+unix:///default); the real-QEMU scenarios below cover the wire
# backend's calls on a real guest: spawned daemons' private sockets and the
# host's libvirtd, events and the agent, a daemon killed and reconnected, a
# live migration, disks plugged in and out (DEVICE_REMOVED), vCPUs, virtio-mem
# and a NIC changed live, the dirty rate, a memory dump and a screenshot (a
# libvirt stream), changed block tracking backups (checkpoints created,
# listed, redefined and deleted, push and pull, an abort, a launcher
# restart, and virt-handler's BackupVirtualMachine); a guest paused by a full
# volume (the disks libvirt names); the guest reading its downward metrics from
# the vhostmd disk and port; hook sidecars changing the domain and the cloud-init
# ISO (tests/hook_sidecars.rs); and the whole KubeVirt suite (tests/kubevirt.rs: the
# launcher in a pod driven by virt-handler's own client), and what virt-handler reads from it
# compared field by field with KubeVirt's own launcher (tests/kubevirt_equivalence.rs). (tests/backends.rs,
# in the first pass, compares both backends call by call on one guest.)
# VL_STATIC_SUITES=all runs the whole qemu, agent and migration suites with it
# instead of this selection.
wire_started=$(date +%s)
static=$(scripts/build-static.sh)
# Its size goal (issue 27): at most 3 MiB stripped, as it is built. What
# is left to take when it grows: docs/architecture.md, "Backends".
static_size=$(stat -c %s "$static")
if [ "$static_size" -gt $((3 * 1024 * 1024)) ]; then
    echo "test.sh: the static binary is $static_size bytes, over its 3 MiB goal (3145728 bytes); docs/architecture.md says what is left to take" >&2
    exit 1
fi
# The static build's own allocator (src/block_cache.rs) under load from
# many threads, in the binary itself (a hidden mode): blocks of every
# class, freed by other threads, realloc chains, every byte checked.
"$static" __allocator-self-test
# Its unit tests under Miri (undefined behaviour, data races, leaks; about
# 2 minutes). src/memcpy.rs's use inline assembly, which Miri cannot run.
if cargo +nightly miri --version >/dev/null 2>&1; then
    run_tests cargo +nightly miri test --locked --lib --no-default-features --features wire block_cache
else
    # scripts/setup-host.sh could not install it (no rustup download here):
    # the same tests, natively, and a line saying Miri did not run.
    echo "test.sh: Miri is not installed (cargo +nightly miri); the allocator's unit tests run without it" >&2
    run_tests cargo test --locked --lib --no-default-features --features wire block_cache
fi
export VL_LAUNCHER_BIN=$static VL_LAUNCHER_BACKEND=wire
VL_TEST_URI=test+unix:///default run_tests cargo test --locked --test daemon -- --test-threads=2
# docs/protocol.md's examples of the static build's output (the first pass
# checked the default build's, and says how many it left to this one), and
# the guest agent's examples on the real guest through the wire backend.
VL_TEST_URI=test+unix:///default run_tests cargo test --locked --test protocol_doc -- --test-threads=2
VL_TEST_URI=test+unix:///default scripts/smoke.sh "$static"
if [ "${VL_STATIC_SUITES:-}" = all ]; then
    run_tests cargo test --locked --test qemu --test agent --test migration --test hotplug --test kubevirt \
        --test kubevirt_equivalence --test day2 --test downward_metrics --test hook_sidecars --test upgrade \
        -- --test-threads=2 --skip host_devices_from_the_environment \
        --skip upgrades_on_the_test_driver --skip a_sigterm_right_after_the_upgrade_reply
else
    run_tests cargo test --locked --test qemu --test agent --test migration --test hotplug --test kubevirt \
        --test kubevirt_equivalence --test day2 --test downward_metrics --test hook_sidecars --test upgrade \
        -- --test-threads=2 --exact \
        boots_connects_the_agent_reports_stats_and_pauses \
        filesystems_share_a_writable_claim_and_a_read_only_config_map_through_virtiofs \
        runs_on_the_hosts_libvirt_daemon_without_spawning_one \
        a_killed_libvirt_daemon_is_restarted_and_the_guest_never_stops \
        reports_what_the_guest_really_has_and_runs_guest_commands \
        a_running_guest_moves_to_another_launcher_and_keeps_running \
        disks_plug_in_on_scsi_and_virtio_unplug_and_keep_their_data \
        vcpus_memory_and_a_nic_change_live \
        virt_handler_drives_a_guests_whole_life_through_the_pods_launcher \
        sigterm_powers_the_guest_off_by_acpi_and_the_pod_ends_as_kubevirts \
        virt_handler_reads_the_same_from_this_launcher_as_from_kubevirts \
        bad_bytes_on_the_grpc_socket_lose_nothing_and_kill_stops_the_domain \
        version_vm_stats_dirty_rate_memory_dump_and_screenshot_of_the_test_guest \
        efi_variables_and_tpm_state_outlive_the_launcher_in_the_backend_storage_dir \
        persistent_efi_variables_follow_a_migration_on_a_shared_backend_storage_dir \
        full_and_incremental_backups_of_a_changed_block_tracking_disk_restore_the_guest_disk \
        an_aborted_backup_and_a_restarted_launcher_leave_the_next_incremental_working \
        virt_handlers_backup_and_redefine_checkpoint_calls_back_up_the_tracked_disk \
        a_full_volume_pauses_the_guest_and_virt_handler_hears_which_as_an_io_error \
        the_guest_reads_its_metrics_from_the_vhostmd_disk_and_the_virtio_serial_port \
        the_guest_sees_the_hooks_base_board_manufacturer_and_user_data \
        upgrades_under_a_running_guest_on_the_hosts_libvirtd_keep_its_qemu \
        upgrades_under_a_running_guest_with_spawned_daemons_keep_them_and_its_qemu
fi
# The mixed fleet on the wire backend (issue 28): migrations between this
# launcher and KubeVirt's, both ways, through virt-handler's proxies
# across two network namespaces, cancels and a target dying mid-flight.
run_tests cargo test --locked --test kubevirt_migration -- --test-threads=2
# Non-root mode on the wire backend: a guest booted as an unprivileged
# user (its session daemon's socket), a migration between two such
# launchers, and the user's own qemu:///session found as libvirt's client
# finds it (the whole of tests/nonroot.rs passed this way; ~50 s).
run_tests cargo test --locked --test nonroot -- --test-threads=2 --exact \
    boots_as_an_unprivileged_user_with_its_agent_pause_and_the_subcommands \
    a_guest_migrates_between_two_nonroot_launchers \
    without_spawn_libvirt_a_nonroot_launcher_uses_the_users_session_daemon
scripts/smoke-qemu.sh "$static"
unset VL_LAUNCHER_BIN VL_LAUNCHER_BACKEND
echo "test.sh: the static (wire backend) binary passed in $(( $(date +%s) - wire_started )) s"

# The newer runtime stack (issue 31): libvirt 11.3 and QEMU 10.0 from
# Debian's bookworm-backports, in a root filesystem scripts/newer-stack.sh
# makes with mmdebstrap (cached in /var/cache/virt-launcher) and runs the
# real-guest suites in, whole, for the default build and the static one
# (scripts/newer-stack.sh --tests says which).
newer_started=$(date +%s)
run_tests scripts/newer-stack.sh --tests "$static"
echo "test.sh: the newer stack (libvirt 11, QEMU 10) passed in $(( $(date +%s) - newer_started )) s"
echo "test.sh: all tests passed in $(( $(date +%s) - started )) s"
