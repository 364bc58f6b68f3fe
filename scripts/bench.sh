#!/usr/bin/env bash
# Prints the launcher's figures (no pass/fail): start-up, round trips,
# memory, conversion time, binary size, and on real QEMU the sync, agent,
# SIGTERM and poll figures, migration hops, reconnects, exit times, how
# soon a SIGKILLed launcher's processes are gone, sync of a running guest
# (re-sync, hotplugged disk), non-root mode, pod networking (set-up
# time, DHCP answer time, TCP throughput per binding) and the default and
# static builds side by side (`backends`; VL_BENCH_SOAK_MINUTES=10 makes its
# agent-polling soak long) and the static build's allocator beside musl's
# malloc (`allocator`). A section name runs only that section:
# `scripts/bench.sh test`, `qemu`, `migration`, `reconnect`, `exit`,
# `sigkill`, `hotplug`, `nonroot`, `network`, `vs-go` (issue 16's rows beside
# KubeVirt's Go launcher, each with its target), `backends`, `allocator` or
# `kubevirt`
# (KubeVirt mode through kvhandler beside virt-launcher-go: round trips,
# Sync -> Running, Kill -> exit, the pod's memory), `mixed` (live
# migration between this launcher and KubeVirt's across two nodes through
# virt-handler's proxies: total time and downtime per pairing, KubeVirt ->
# KubeVirt beside them) or `backup` (full and incremental backup and
# memory dump throughput, beside `qemu-img convert` of the same disk), or
# `upgrade` (20 in-place upgrades in a row under a client pinging every
# 10 ms, default and static builds: the hand-over time and the longest
# client-visible gap), or `stacks` (the main real-guest rows, the `qemu`
# and `migration` sections of the default build, on the host's runtime
# stack and then on the newer one, libvirt 11.3 and QEMU 10.0 in
# scripts/newer-stack.sh's root filesystem, printed row beside row; it
# runs last in a run of every section). The
# real-QEMU sections need the host set-up (scripts/setup-host.sh) and
# build the test guest.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p target # a fresh checkout has none yet
if ! scripts/build-test-guest.sh target/test-guest >target/test-guest.log 2>&1; then
    cat target/test-guest.log >&2
    exit 1
fi
# The static (wire backend) binary, for the backends, allocator, vs-go,
# kubevirt and upgrade sections.
if [ $# -eq 0 ] || [[ " $* " == *" backends "* ]] || [[ " $* " == *" vs-go "* ]] ||
    [[ " $* " == *" kubevirt "* ]] || [[ " $* " == *" allocator "* ]] ||
    [[ " $* " == *" upgrade "* ]]; then
    VL_STATIC_BIN=$(scripts/build-static.sh)
    export VL_STATIC_BIN
fi
# The same static binary with musl's own malloc in place of ours, for the
# allocator section (in a target directory of its own: the flags differ).
# RUSTFLAGS replaces .cargo/config.toml's flags for the target, so they
# are repeated here.
if [ $# -eq 0 ] || [[ " $* " == *" allocator "* ]]; then
    RUSTFLAGS="-C relocation-model=static -C target-feature=+crt-static -C llvm-args=-enable-machine-outliner=always --cfg vl_musl_malloc" \
        cargo build --profile static --locked --no-default-features --features wire \
        --target x86_64-unknown-linux-musl --target-dir target/musl-malloc >&2
    VL_STATIC_MUSL_MALLOC_BIN=target/musl-malloc/x86_64-unknown-linux-musl/static/virt-launcher
    export VL_STATIC_MUSL_MALLOC_BIN
fi
# Build first, then flush: pages of a just-linked binary are dirty in the
# page cache until written back, and smaps counts them as the launcher's
# private dirty memory (3.4 MiB instead of 0.9 for the static build).
cargo bench --bench launcher --locked --no-run
sync
# The sections the bench binary runs: all of them with no argument;
# `stacks` is this script's.
sections=()
for arg in "$@"; do
    [ "$arg" = stacks ] || sections+=("$arg")
done
if [ $# -eq 0 ] || [ ${#sections[@]} -gt 0 ]; then
    cargo bench --bench launcher --locked -- "${sections[@]}"
fi
if [ $# -eq 0 ] || [[ " $* " == *" stacks "* ]]; then
    # The same bench binary on both stacks, one after the other (never at
    # once: two guests under plain emulation on two cores would measure
    # each other).
    bench_bin=$(cargo bench --bench launcher --locked --no-run --message-format=json \
        | grep '"kind":\["bench"\]' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
    host_rows=$(mktemp) newer_rows=$(mktemp)
    trap 'rm -f "$host_rows" "$newer_rows"' EXIT
    # The test guest is built above: the bench binary only checks it.
    VL_TEST_GUEST_BUILT=1 "$bench_bin" --bench qemu migration | grep -v '^virt-launcher .* benchmarks' >"$host_rows"
    scripts/newer-stack.sh env VL_TEST_GUEST_BUILT=1 "$bench_bin" --bench qemu migration \
        | grep -v '^virt-launcher .* benchmarks' >"$newer_rows"
    host_stack=libvirt\ $(virsh -c qemu:///system version --daemon | sed -n 's/.*daemon: //p' | head -1)
    host_qemu=$(qemu-system-x86_64 --version | head -1)
    newer_stack=$(awk '$1=="libvirt-daemon"{l=$2} $1=="qemu-system-x86"{q=$2} END{print "libvirt " l ", QEMU " q}' \
        "$(scripts/newer-stack.sh --build)/.versions")
    echo "both runtime stacks, the qemu and migration rows of the default build:"
    echo "  [host]  $host_stack, $host_qemu"
    echo "  [newer] $newer_stack (scripts/newer-stack.sh)"
    # The rows come in the same order from both: each host row, then the
    # newer stack's.
    paste -d '\n' <(sed 's/^/  [host]  /' "$host_rows") <(sed 's/^/  [newer] /' "$newer_rows")
fi
