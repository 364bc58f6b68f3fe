#!/usr/bin/env bash
# Prints the launcher's figures (no pass/fail): start-up, round trips,
# memory, conversion time, binary size, and on real QEMU the sync, agent,
# SIGTERM and poll figures, migration hops, reconnects, exit times, how
# soon a SIGKILLed launcher's processes are gone, sync of a running guest
# (re-sync, hotplugged disk), non-root mode and pod networking (set-up
# time, DHCP answer time, TCP throughput per binding). A section name runs
# only that section: `scripts/bench.sh test`, `qemu`, `migration`,
# `reconnect`, `exit`, `sigkill`, `hotplug`, `nonroot`, `network` or `vs-go`
# (issue 16's rows beside KubeVirt's Go launcher, each with its target). The
# real-QEMU sections need the host set-up (scripts/setup-host.sh) and
# build the test guest.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! scripts/build-test-guest.sh target/test-guest >target/test-guest.log 2>&1; then
    cat target/test-guest.log >&2
    exit 1
fi
cargo bench --bench launcher --locked -- "$@"
