#!/usr/bin/env bash
# scripts/newer-stack.sh --build | --tests STATIC_BINARY | COMMAND [ARG]...
#
# The second runtime stack (issue 31): libvirt 11 and QEMU 10 from Debian's
# bookworm-backports, in a root filesystem made with mmdebstrap, while the
# host keeps Debian 12's libvirt 9.0 and QEMU 7.2 (scripts/setup-host.sh).
#
# --build: makes the root filesystem (or finds it cached) and prints its
#   path. It is cached outside the checkout, in
#   ${VL_STACK_CACHE:-/var/cache/virt-launcher}/stack-libvirt11-<key>, the
#   key a hash of the recipe below (suites, packages, set-up): a change to
#   the recipe builds a new one (and removes the old). Made in 40 s on the
#   project's 2-core machine from deb.debian.org (440 MB); then reused.
#
# --tests STATIC_BINARY: what scripts/test.sh runs (with VL_TESTS=all):
#   builds the test binaries of the suites below on the host, then runs
#   them whole in the root filesystem, once with the default build's
#   launcher (the virt backend, on the root filesystem's libvirt0 11.3) and
#   once with STATIC_BINARY (scripts/build-static.sh, the wire backend).
#   VL_NEWER_STACK_SUITES=selection runs only the selection below, for
#   both builds (a quicker pass).
#   VL_TEST_GUEST_BUILT=1: the test guest scripts/test.sh built on the
#   host is used as it is (its build script's inputs are the host's).
#
# COMMAND: runs it in that root filesystem, as root, with the host's /dev,
#   /sys and /tmp and this checkout (at the same absolute path) in it: a
#   test binary built on the host links the root filesystem's libvirt0 and
#   its launcher spawns the root filesystem's daemons. It runs in private
#   mount and PID namespaces over a throw-away overlay of the cached tree,
#   so nothing it mounts or writes reaches the host or the cache, and every
#   process it leaves is killed when it ends. The root filesystem's own
#   virtlogd and libvirtd run there first, at its /run/libvirt (what tests
#   that use "the host's libvirtd" reach), their QEMU capabilities cache
#   warmed. The command's exit status is this script's.
set -euo pipefail
cd "$(dirname "$0")/.."
checkout=$PWD

if [ "$(id -u)" != 0 ]; then
    echo "newer-stack: run as root" >&2
    exit 1
fi

MIRROR=http://deb.debian.org/debian
# The runtime stack, from bookworm-backports (apt -t bookworm-backports:
# every package backports has comes from there), and the programs the tests
# run inside it (setup-host.sh's table, for those the real-guest suites use).
PACKAGES=(
    libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients libvirt0
    qemu-system-x86 qemu-utils swtpm swtpm-tools passt ovmf
    socat e2fsprogs xorriso genisoimage util-linux procps passwd mount
    iproute2 nftables libxml2-utils file bsdutils libseccomp2 libcap-ng0
)
# QEMU 10 ships no virtiofsd (QEMU 8 dropped its C one) and bookworm has no
# package of the Rust one (Debian 13's needs a newer glibc): it is built
# from crates.io on the host, against bookworm's libseccomp and libcap-ng,
# into the root filesystem's /usr/libexec/virtiofsd, where distributions
# and KubeVirt's image have it (src/daemons/virtiofs.rs looks there first).
VIRTIOFSD_VERSION=1.14.0
# What the host's set-up does for its own daemons (setup-host.sh).
SETUP=$(cat <<'SETUP'
set -e
getent group kvm >/dev/null || groupadd -r kvm
getent group libvirt-qemu >/dev/null || groupadd -r libvirt-qemu
getent passwd libvirt-qemu >/dev/null ||
    useradd -r -g libvirt-qemu -G kvm -d /var/lib/libvirt -s /usr/sbin/nologin libvirt-qemu
mkdir -p /etc/libvirt /var/log/libvirt /var/run/libvirt /var/lib/libvirt /var/cache/libvirt
cat > /etc/libvirt/qemu.conf <<'CONF'
# virt-launcher host set-up (scripts/newer-stack.sh): QEMU runs as root
# without security labels, as inside a KubeVirt launcher pod.
user = "root"
group = "root"
security_driver = "none"
CONF
SETUP
)
key=$(printf '%s\n' "$MIRROR" "${PACKAGES[*]}" "$SETUP" "virtiofsd $VIRTIOFSD_VERSION" | sha256sum | cut -c1-12)
cache=${VL_STACK_CACHE:-/var/cache/virt-launcher}
rootfs=$cache/stack-libvirt11-$key

build() {
    [ -f "$rootfs/.complete" ] && return 0
    mkdir -p "$cache"
    local started partial
    started=$(date +%s)
    partial=$(mktemp -d "$cache/.building.XXXXXX")
    # shellcheck disable=SC2064 # expanded now, on purpose
    trap "rm -rf '$partial'" EXIT
    echo "newer-stack: building $rootfs (mmdebstrap, bookworm + bookworm-backports)" >&2
    local include
    include=$(IFS=,; echo "${PACKAGES[*]}")
    mmdebstrap --quiet --variant=apt --components=main \
        --aptopt='APT::Default-Release "bookworm-backports"' \
        --aptopt='Acquire::Retries "3"' \
        --dpkgopt='path-exclude=/usr/share/{doc,man,locale}/*' \
        --include="$include" \
        bookworm "$partial/root" \
        "deb $MIRROR bookworm main" "deb $MIRROR bookworm-backports main" >&2
    chroot "$partial/root" bash -c "$SETUP"
    echo "newer-stack: building virtiofsd $VIRTIOFSD_VERSION (crates.io)" >&2
    cargo install --quiet --locked "virtiofsd@$VIRTIOFSD_VERSION" \
        --root "$partial/virtiofsd" --target-dir "$partial/virtiofsd-build" >&2
    install -D -m 0755 "$partial/virtiofsd/bin/virtiofsd" "$partial/root/usr/libexec/virtiofsd"
    chroot "$partial/root" dpkg-query -W -f='${Package} ${Version}\n' \
        libvirt-daemon qemu-system-x86 libvirt0 passt swtpm >"$partial/root/.versions"
    echo "virtiofsd $VIRTIOFSD_VERSION" >>"$partial/root/.versions"
    touch "$partial/root/.complete"
    # Old roots of an earlier recipe go; this one takes its place at once.
    rm -rf "$cache"/stack-libvirt11-*
    mv "$partial/root" "$rootfs"
    rm -rf "$partial"
    trap - EXIT
    echo "newer-stack: built in $(( $(date +%s) - started )) s:" $(cat "$rootfs/.versions") >&2
}

build
if [ "${1:-}" = --build ]; then
    echo "$rootfs"
    exit 0
fi
if [ "${1:-}" = --tests ]; then
    static=${2:?usage: scripts/newer-stack.sh --tests STATIC_BINARY}
    # The selection (VL_NEWER_STACK_SUITES=selection): both backends call
    # by call; boot, agent, stats and pause; a disk's discard granularity
    # (libvirt 9.7) as the guest sees it; a daemon killed and restarted
    # (twice: once during a start); the host's (here the root
    # filesystem's) daemon without spawning one; the guest agent; vCPUs,
    # virtio-mem and a NIC changed live, and fewer vCPUs live under TCG
    # (done here, refused on the host's stack), up to what QEMU's TCG
    # translation contexts allow; a live migration; a bridge and
    # masquerade pod network; passt started by libvirt itself and gone
    # with a SIGKILLed launcher, and its whole test (the guest's address,
    # a connection out to a server beyond the gateway, a forwarded port);
    # a SIGKILLed launcher; non-root mode; two virtiofs filesystems served
    # by the Rust virtiofsd built into the root filesystem; and, run on the
    # host, a migration from its stack to this one and one refused the
    # other way (tests/migration.rs, VL_OTHER_STACK).
    #
    # Both builds run the suites whole by default: every real-guest test
    # passes here (the static build skips three test-driver tests, below),
    # in about 4 minutes per build on the project's 2-core machine
    # (docs/testing.md, "Two runtime stacks", has each suite's time); the
    # selection takes about 1.5 per build. Either way, from tests/day2.rs
    # only changed block tracking of a block PVC under its <dataStore>
    # (libvirt 10.10) runs here.
    suites=(backends qemu agent hotplug migration network sigkill nonroot)
    tests=(
        both_backends_give_the_same_values_on_the_same_guest
        boots_connects_the_agent_reports_stats_and_pauses
        a_disks_block_sizes_and_discard_granularity_reach_the_guest
        filesystems_share_a_writable_claim_and_a_read_only_config_map_through_virtiofs
        a_killed_libvirt_daemon_is_restarted_and_the_guest_never_stops
        a_daemon_that_dies_while_sync_starts_qemu_gets_a_true_reply_and_the_next_sync_works
        runs_on_the_hosts_libvirt_daemon_without_spawning_one
        reports_what_the_guest_really_has_and_runs_guest_commands
        vcpus_memory_and_a_nic_change_live
        fewer_vcpus_live_under_tcg_where_the_stack_can_take_them_away
        a_running_guest_moves_to_another_launcher_and_keeps_running
        masquerade_gives_kubevirts_addresses_nat_ports_dns_ipv6_and_cleans_up_on_sigterm
        bridge_moves_the_pod_address_to_the_guest_and_back_after_kill
        a_sigkilled_launcher_leaves_no_passt
        passt_gives_the_pod_address_forwards_listed_ports_and_stops_with_the_launcher
        a_sigkilled_launcher_takes_its_daemons_and_qemu_with_it
        boots_as_an_unprivileged_user_with_its_agent_pause_and_the_subcommands
    )
    mapfile -t bins < <(cargo test --locked "${suites[@]/#/--test=}" --no-run --message-format=json \
        | grep '"kind":\["test"\]' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p')
    migration_bin=$(printf '%s\n' "${bins[@]}" | grep '/migration-' | head -1)
    day2_bin=$(cargo test --locked --test=day2 --no-run --message-format=json \
        | grep '"kind":\["test"\]' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
    for launcher in default "$static"; do
        started=$(date +%s)
        env=(VL_TESTS=all VL_TEST_GUEST_BUILT=1)
        [ "$launcher" = default ] || env+=(VL_LAUNCHER_BIN="$launcher" VL_LAUNCHER_BACKEND=wire)
        if [ "${VL_NEWER_STACK_SUITES:-all}" = all ]; then
            args=(--test-threads=2)
            # tests/hotplug.rs's test-driver tests start their launcher on
            # the in-process test:///default, which the wire backend does
            # not have (scripts/test.sh's static pass skips them too).
            [ "$launcher" = default ] || args+=(--skip host_devices_from_the_environment
                --skip kubevirts_dra_gpu_example --skip kubevirts_vmi_usb_example)
        else
            args=(--test-threads=2 --exact "${tests[@]}")
        fi
        "$0" env "${env[@]}" BINS="${bins[*]}" \
            sh -c 'for bin in $BINS; do "$bin" "$@" || exit 1; done' newer-stack "${args[@]}"
        "$0" env "${env[@]}" "$day2_bin" --exact \
            a_tracked_block_device_is_the_data_store_of_its_metadata_image_where_libvirt_has_it
        # Migrations between the two stacks: the test runs on the host,
        # one launcher there (libvirt 9.0, QEMU 7.2) and one here, started
        # through this script (VL_OTHER_STACK); both directions at once.
        env "${env[@]}" VL_OTHER_STACK="$checkout/scripts/newer-stack.sh" "$migration_bin" \
            --test-threads=2 --exact \
            a_guest_moves_from_qemu_7_2_to_qemu_10_on_its_pinned_machine_type \
            a_guest_on_qemu_10_cannot_move_to_qemu_7_2_and_keeps_running
        echo "newer-stack: the $launcher launcher passed on libvirt 11 in $(( $(date +%s) - started )) s" >&2
    done
    exit 0
fi
if [ $# -eq 0 ]; then
    echo "usage: scripts/newer-stack.sh --build | COMMAND [ARG]..." >&2
    exit 2
fi

# The overlay's upper layer: on disk beside the cache (guests' disks and
# the daemons' state can be large), removed afterwards.
# Those of runs whose script was killed (SIGKILL leaves no trap to run)
# go first: each names its script's PID.
for stale in "$cache"/.run.*; do
    [ -f "$stale/pid" ] && ! kill -0 "$(cat "$stale/pid")" 2>/dev/null && rm -rf "$stale" || true
done
run=$(mktemp -d "$cache/.run.XXXXXX")
echo $$ >"$run/pid"
trap 'rm -rf "$run"' EXIT
mkdir -p "$run/upper" "$run/work" "$run/root"

# Inside: the overlay mounted, the host's pieces bound into it, then
# pivot_root (not a bare chroot: a chrooted process may not create a user
# namespace, which the non-root tests do), the daemons started, the command.
inside=$(cat <<'INSIDE'
set -euo pipefail
run=$1 rootfs=$2 checkout=$3
shift 3
new=$run/root
mount -t overlay overlay -o "lowerdir=$rootfs,upperdir=$run/upper,workdir=$run/work" "$new"
mount -t proc proc "$new/proc"
mount --rbind /sys "$new/sys"
mount --rbind /dev "$new/dev"
mount --bind /tmp "$new/tmp"
# The host's /etc/hosts (the root filesystem has none): libvirt looks up
# its host's name at a domain's start and in a migration, and without it
# the lookup goes to DNS, which a pod's network namespace in the network
# tests cannot reach: 10 s each, enough to time a migration out.
cp /etc/hosts "$new/etc/hosts"
mkdir -p "$new$checkout" "$new/.old-root"
mount --rbind "$checkout" "$new$checkout"
# The user's toolchain is not needed inside; the lock file the tests share is.
cd "$new"
pivot_root . .old-root
cd /
umount -l /.old-root
rmdir /.old-root
mkdir -p /run/libvirt /var/run/libvirt /var/log/libvirt
virtlogd -d
libvirtd -d
for _ in $(seq 1 100); do
    virsh -c qemu:///system uri >/dev/null 2>&1 && break
    sleep 0.1
done
virsh -c qemu:///system domcapabilities --virttype qemu >/dev/null
echo "newer-stack: libvirt $(virsh -c qemu:///system version --daemon | sed -n 's/.*daemon: //p' | head -1)," \
    "$(qemu-system-x86_64 --version | head -1)" >&2
cd "$checkout"
set +e
"$@"
status=$?
exit "$status"
INSIDE
)
# If this script is killed, even by SIGKILL, so is unshare (--pdeathsig),
# and with it the namespace's first process (--kill-child), and with that
# every process in the namespace: a launcher a test started through this
# script never outlives it (nor keeps the lock file the test held open).
set +e
setpriv --pdeathsig KILL -- \
    unshare --mount --pid --kill-child=KILL --propagation private -- \
    bash -c "$inside" newer-stack "$run" "$rootfs" "$checkout" "$@"
status=$?
set -e
exit "$status"
