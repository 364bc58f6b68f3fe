#!/usr/bin/env bash
# Prints the launcher's figures (no pass/fail): start-up, round trips,
# memory, conversion time, binary size, and on real QEMU the sync, agent,
# SIGTERM and poll figures, migration hops, reconnects, exit times, how
# soon a SIGKILLed launcher's processes are gone, sync of a running guest
# (re-sync, hotplugged disk), non-root mode, pod networking (set-up
# time, DHCP answer time, TCP throughput per binding) and the default and
# static builds side by side (`backends`; VL_BENCH_SOAK_MINUTES=10 makes its
# agent-polling soak long). A section name runs only that section:
# `scripts/bench.sh test`, `qemu`, `migration`, `reconnect`, `exit`,
# `sigkill`, `hotplug`, `nonroot`, `network`, `vs-go` (issue 16's rows beside
# KubeVirt's Go launcher, each with its target), `backends` or `kubevirt`
# (KubeVirt mode through kvhandler beside virt-launcher-go: round trips,
# Sync -> Running, Kill -> exit, the pod's memory) or `backup` (full and
# incremental backup and memory dump throughput, beside `qemu-img convert`
# of the same disk). The
# real-QEMU sections need the host set-up (scripts/setup-host.sh) and
# build the test guest.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p target # a fresh checkout has none yet
if ! scripts/build-test-guest.sh target/test-guest >target/test-guest.log 2>&1; then
    cat target/test-guest.log >&2
    exit 1
fi
# The static (wire backend) binary, for the backends, vs-go and kubevirt
# sections.
if [ $# -eq 0 ] || [[ " $* " == *" backends "* ]] || [[ " $* " == *" vs-go "* ]] ||
    [[ " $* " == *" kubevirt "* ]]; then
    VL_STATIC_BIN=$(scripts/build-static.sh)
    export VL_STATIC_BIN
fi
# Build first, then flush: pages of a just-linked binary are dirty in the
# page cache until written back, and smaps counts them as the launcher's
# private dirty memory (3.4 MiB instead of 0.9 for the static build).
cargo bench --bench launcher --locked --no-run
sync
cargo bench --bench launcher --locked -- "$@"
