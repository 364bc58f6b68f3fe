#!/usr/bin/env bash
# kubevirt-reference.sh: regenerates tests/golden/kubevirt/, the domain XML that
# KubeVirt's own launcher makes for each example VMI, which tests/kubevirt_golden.rs
# compares with this launcher's (docs/kubevirt-differences.md lists what differs).
#
#   scripts/kubevirt-reference.sh [EXAMPLE...]      (default: every examples/*.json)
#
# For each example it writes tests/golden/kubevirt/EXAMPLE.vmi.json, the example with
# KubeVirt's webhook defaults (scripts/kubevirt-reference.jq) as virt-handler would send
# it, and tests/golden/kubevirt/EXAMPLE.xml, the domain KubeVirt's launcher defined for
# it: the last "Domain XML generated" dump of its log, which is what it hands libvirt's
# DomainDefineXML before it starts the domain (its converter's output after one round trip
# through libvirt, which swapped its hotplug placeholders for spare PCIe ports).
#
# How: KubeVirt's launcher (KUBEVIRT_DIR/virt-launcher-go, default ../shared/kubevirt,
# through its run-go-launcher.sh) runs in a network namespace of its own
# (kubevirt-ref) and a private mount namespace with its own /dev (/dev/kvm, so the
# domain type is kvm as in production, and a block device node for each block PVC)
# and the same 4-CPU cpuset as the golden files' context (tests/common/examples.rs);
# the pod's files a VMI's volumes need (container disk images, PVC images, config map
# and secret directories) are made under the run's scratch directory, which the
# launcher sees as /var/run, and Debian's OVMF is shown under KubeVirt's image's names in
# /usr/share/edk2/ovmf. KubeVirt's `kvhandler sync` then hands it the VMI with
# virt-handler's options: the SMBIOS defaults, a balloon stats period of 10 s, the
# golden context's NUMA topology (2 cells of 2 CPUs), the default cluster config and
# the tap attachment of masquerade and bridge interfaces. The VMI's status says
# Running, so KubeVirt's launcher defines the domain without starting it.
#
# Needs root, jq, python3 (the firmware UUID), qemu-img, ip, nsenter, unshare and the
# host's libvirt and QEMU (scripts/setup-host.sh).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KV=${KUBEVIRT_DIR:-$ROOT/../shared/kubevirt}
OUT=$ROOT/tests/golden/kubevirt
NETNS=kubevirt-ref
# The golden files' cpuset and host NUMA cells (tests/common/examples.rs).
CPUSET=0-3

# Inside the private mount namespace: the pod's /dev and cpuset, then KubeVirt's launcher.
if [ "${1:-}" = --inner ]; then
    RUN=$2; shift 2
    # As run-go-launcher.sh makes it without KVM, but with /dev/kvm.
    host_dev=$RUN/hostdev
    mkdir -p "$host_dev"
    mount --bind /dev "$host_dev"
    mount -t tmpfs -o mode=0755,nosuid,size=1m kubevirt-ref-dev /dev
    for n in null zero full random urandom tty ptmx kvm; do
        : > "/dev/$n"; mount --bind "$host_dev/$n" "/dev/$n"
    done
    mkdir /dev/pts /dev/shm /dev/net
    mount --bind "$host_dev/pts" /dev/pts; mount --bind "$host_dev/shm" /dev/shm
    : > /dev/net/tun; mount --bind "$host_dev/net/tun" /dev/net/tun
    ln -s /proc/self/fd /dev/fd; ln -s /proc/self/fd/0 /dev/stdin
    ln -s /proc/self/fd/1 /dev/stdout; ln -s /proc/self/fd/2 /dev/stderr
    minor=200
    for volume in $(cat "$RUN/block-pvcs"); do
        # KubeVirt tells a block PVC by /dev/<volume> being a block device; the
        # domain is only defined, so no device behind the node is opened.
        mknod "/dev/$volume" b 7 $minor; minor=$((minor + 1))
    done
    # KubeVirt's image has its firmware in /usr/share/edk2/ovmf (its --ovmf-path
    # default) under its own names; Debian's OVMF stands in for it.
    ovmf=$RUN/share-extra/edk2/ovmf
    mkdir -p "$ovmf"
    ln -s /usr/share/OVMF/OVMF_CODE_4M.fd "$ovmf/OVMF_CODE.fd"
    ln -s /usr/share/OVMF/OVMF_VARS_4M.fd "$ovmf/OVMF_VARS.fd"
    ln -s /usr/share/OVMF/OVMF_CODE_4M.secboot.fd "$ovmf/OVMF_CODE.secboot.fd"
    ln -s /usr/share/OVMF/OVMF_VARS_4M.ms.fd "$ovmf/OVMF_VARS.secboot.fd"
    mount -t overlay kubevirt-ref-share -o "lowerdir=$RUN/share-extra:/usr/share" /usr/share
    echo "$CPUSET" > "$RUN/cpuset.cpus"
    mount --bind "$RUN/cpuset.cpus" /sys/fs/cgroup/cpuset/cpuset.cpus
    export GO_LAUNCHER_KVM=1
    exec "$KV/run-go-launcher.sh" "$RUN" -- "$@"
fi

[ "$(id -u)" = 0 ] || { echo "kubevirt-reference: needs root" >&2; exit 2; }
for tool in jq python3 qemu-img ip nsenter unshare; do
    command -v $tool >/dev/null || { echo "kubevirt-reference: $tool is missing" >&2; exit 2; }
done
[ -x "$KV/virt-launcher-go" ] && [ -x "$KV/kvhandler" ] ||
    { echo "kubevirt-reference: no KubeVirt launcher in $KV (set KUBEVIRT_DIR)" >&2; exit 2; }
[ -f /sys/fs/cgroup/cpuset/cpuset.cpus ] ||
    { echo "kubevirt-reference: needs cgroup v1's cpuset (KubeVirt's launcher reads it)" >&2; exit 2; }

# memory-cpu-hotplug: KubeVirt's launcher writes <maxMemory slots="0">, which this
# host's libvirt 9.0 refuses to define (docs/kubevirt-differences.md).
NO_REFERENCE=memory-cpu-hotplug
if [ $# -eq 0 ]; then
    set -- $(cd "$ROOT/examples" && ls ./*.json | sed 's|^\./||; s|\.json$||' | grep -vx "$NO_REFERENCE")
fi
mkdir -p "$OUT"
ip netns add $NETNS 2>/dev/null || true
ip -n $NETNS link set lo up

launcher_pid=
RUN=
# Stops KubeVirt's launcher and its daemons: everything in the network namespace,
# which only this script uses. The launcher's own exit path waits for a notify
# server that is not there, and its daemons outlive it when it panics.
stop_pod() {
    if [ -n "$launcher_pid" ]; then
        kill -TERM "$launcher_pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$launcher_pid" 2>/dev/null || break; sleep 0.1; done
    fi
    local pids
    for _ in $(seq 50); do
        pids=$(ip netns pids $NETNS 2>/dev/null || true)
        [ -n "$pids" ] || break
        kill -KILL $pids 2>/dev/null || true
        sleep 0.1
    done
    [ -z "$launcher_pid" ] || wait "$launcher_pid" 2>/dev/null || true
    launcher_pid=
}
cleanup() {
    stop_pod
    remove_pod_network
    if [ -n "$RUN" ] && [ -z "${KUBEVIRT_REF_KEEP:-}" ]; then rm -rf "$RUN"; RUN=; fi
}

# The pod's files for the example's volumes, under RUN/root/run (the launcher's /var/run).
make_pod_files() {
    local vmi=$1 pod=$RUN/root/run
    mkdir -p "$pod/kubevirt/container-disks" "$pod/kubevirt-private" \
        "$pod/secrets/kubernetes.io/serviceaccount"
    : > "$RUN/block-pvcs"
    local index=0 volume kind
    while IFS=$'\t' read -r volume kind; do
        case $kind in
        containerDisk)
            qemu-img create -q -f qcow2 "$pod/kubevirt/container-disks/disk_$index.img" 64M ;;
        persistentVolumeClaim|dataVolume|ephemeral)
            if jq -e --arg v "$volume" '.blockPvcs | index($v)' "$RUN/context.json" >/dev/null; then
                echo "$volume" >> "$RUN/block-pvcs"
            else
                mkdir -p "$pod/kubevirt-private/vmi-disks/$volume"
                qemu-img create -q -f raw "$pod/kubevirt-private/vmi-disks/$volume/disk.img" 64M
            fi ;;
        configMap) mkdir -p "$pod/kubevirt-private/config-map/$volume"
            echo value > "$pod/kubevirt-private/config-map/$volume/key" ;;
        secret) mkdir -p "$pod/kubevirt-private/secret/$volume"
            echo value > "$pod/kubevirt-private/secret/$volume/key" ;;
        downwardAPI) mkdir -p "$pod/kubevirt-private/downwardapi/$volume"
            echo value > "$pod/kubevirt-private/downwardapi/$volume/labels" ;;
        sysprep) mkdir -p "$pod/kubevirt-private/sysprep/$volume"
            echo '<unattend/>' > "$pod/kubevirt-private/sysprep/$volume/autounattend.xml" ;;
        serviceAccount)
            echo token > "$pod/secrets/kubernetes.io/serviceaccount/token"
            echo default > "$pod/secrets/kubernetes.io/serviceaccount/namespace" ;;
        esac
        index=$((index + 1))
    done < <(jq -r '.spec.volumes[]? | [.name, (keys - ["name"])[0]] | @tsv' "$vmi")
    for secret in $(jq -r '.spec.accessCredentials[]? | (.sshPublicKey // .userPassword).source.secret.secretName' "$vmi"); do
        mkdir -p "$pod/kubevirt-private/secret/$secret-access-cred"
        echo 'ssh-ed25519 AAAA reference' > "$pod/kubevirt-private/secret/$secret-access-cred/key"
    done
    local kernel_dir=$pod/kubevirt/container-disks/kernel-boot
    for artifact in $(jq -r '.spec.domain.firmware.kernelBoot.container | (.kernelPath, .initrdPath) // empty' "$vmi"); do
        mkdir -p "$kernel_dir"; : > "$kernel_dir/$(basename "$artifact")"
    done
}

# The pod's network as virt-handler's phase 1 leaves it for each masquerade or bridge
# interface, in the namespace (KubeVirt's launcher reads the pod interface's MAC and
# MTU, finds the tap, and serves DHCP on the bridge): the pod interface (eth0, or
# pod<hash> for a multus network), its bridge k6t-<name> and the tap in it.
make_pod_network() {
    local vmi=$1 name kind n=1
    while IFS=$'\t' read -r name kind; do
        local pod tap bridge hash
        if [ "$kind" = pod ]; then
            pod=eth0 tap=tap0 bridge=k6t-eth0
        else
            hash=$(printf %s "$name" | sha256sum | cut -c1-11)
            pod=pod$hash tap=tap$hash bridge=k6t-$hash
        fi
        # A veth end stands for the pod's interface (no dummy links on every kernel).
        ip -n $NETNS link add "$pod" address "02:42:0a:00:00:0$n" mtu 1500 type veth peer name "peer$n"
        ip -n $NETNS link add "$bridge" type bridge
        ip -n $NETNS tuntap add "$tap" mode tap
        ip -n $NETNS link set "$tap" master "$bridge"
        if [ "$kind" = pod ]; then
            ip -n $NETNS addr add 10.244.0.10/24 dev "$pod"
            ip -n $NETNS addr add 10.0.2.1/24 dev "$bridge"
        else
            # What virt-handler caches for a bridge binding on a network without IPAM.
            echo "{\"Name\": \"$pod\", \"IPAMDisabled\": true, \"Mtu\": 1500}" \
                > "$RUN/root/run/kubevirt-private/vif-cache-$pod.json"
        fi
        for link in "$pod" "peer$n" "$bridge" "$tap"; do ip -n $NETNS link set "$link" up; done
        n=$((n + 1))
    done < <(jq -r '.spec as $spec | $spec.networks[]? | . as $net
        | select([$spec.domain.devices.interfaces[]? | select(.name == $net.name)
                  | select(.masquerade != null or .bridge != null)] | length > 0)
        | [.name, (if .pod != null then "pod" else "multus" end)] | @tsv' "$vmi")
}

# Removes what make_pod_network made.
remove_pod_network() {
    local link
    for link in $(ip -n $NETNS -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//'); do
        [ "$link" = lo ] || ip -n $NETNS link del "$link" 2>/dev/null || true
    done
}

# virt-handler's options for the sync (pkg/virt-handler/options.go).
options_json() {
    jq -n --argjson vmi "$(cat "$1")" '{
        VirtualMachineSMBios: {manufacturer: "KubeVirt", family: "KubeVirt", product: "None"},
        MemBalloonStatsPeriod: 10,
        topology: {numa_cells: [range(0; 2) as $cell | {
            id: $cell,
            distances: [{id: 0, value: (if $cell == 0 then 10 else 20 end)},
                        {id: 1, value: (if $cell == 1 then 10 else 20 end)}],
            cpus: [range($cell * 2; $cell * 2 + 2) as $cpu | {id: $cpu, siblings: [$cpu]}]}]},
        clusterConfig: {BochsDisplayForEFIGuests: true},
        interfaceDomainAttachment: ([$vmi.spec.domain.devices.interfaces[]?
            | select(.masquerade != null or .bridge != null) | {key: .name, value: "tap"}]
            | from_entries)
    }'
}

reference() {
    local example=$1 src=$ROOT/examples/$1.json
    [ -f "$src" ] || { echo "kubevirt-reference: no $src" >&2; return 1; }
    RUN=$(mktemp -d /tmp/kubevirt-ref.XXXXXX)
    local name namespace uid uuid
    name=$(jq -r .metadata.name "$src"); namespace=$(jq -r '.metadata.namespace // "default"' "$src")
    uid=$(jq -r .metadata.uid "$src")
    uuid=$(python3 -c 'import sys, uuid; print(uuid.uuid5(uuid.UUID("6a1a24a1-4061-4607-8bf4-a3963d0c5895"), sys.argv[1]))' "$name")
    jq --arg uuid "$uuid" -f "$ROOT/scripts/kubevirt-reference.jq" "$src" > "$OUT/$example.vmi.json"
    jq '.status.phase = "Running"' "$OUT/$example.vmi.json" > "$RUN/sync-vmi.json"
    echo '{"blockPvcs": ["database", "shared-lun"]}' > "$RUN/context.json"
    make_pod_files "$OUT/$example.vmi.json"
    make_pod_network "$OUT/$example.vmi.json"
    options_json "$OUT/$example.vmi.json" > "$RUN/options.json"

    local grace
    grace=$(jq -r '.spec.terminationGracePeriodSeconds' "$OUT/$example.vmi.json")
    nsenter --net=/var/run/netns/$NETNS unshare --mount --propagation private \
        "$0" --inner "$RUN" --qemu-timeout 5m --name "$name" --namespace "$namespace" \
        --uid "$uid" --kubevirt-share-dir /var/run/kubevirt \
        --ephemeral-disk-dir /var/run/kubevirt-ephemeral-disks \
        --container-disk-dir /var/run/kubevirt/container-disks \
        --hotplug-disk-dir /var/run/kubevirt/hotplug-disks \
        --grace-period-seconds $((grace + 15)) --hook-sidecars 0 \
        > "$RUN/launcher.log" 2>&1 &
    launcher_pid=$!
    local socket=$RUN/root/run/kubevirt/sockets/launcher-sock
    for _ in $(seq 300); do [ -S "$socket" ] && break; sleep 0.1; done
    [ -S "$socket" ] || { tail -20 "$RUN/launcher.log" >&2; echo "$example: KubeVirt's launcher did not get ready" >&2; return 1; }
    local sync
    sync=$(timeout 180 "$KV/kvhandler" --socket "$socket" sync --vmi "$RUN/sync-vmi.json" \
        --options "$RUN/options.json" || true)
    local dump
    dump=$(grep -o 'Domain XML generated. Base64 dump [A-Za-z0-9+/=]*' "$RUN/launcher.log" \
        | tail -1 | sed 's/.* dump //' || true)
    if [ -z "$dump" ]; then
        grep -v 'empty DomainStats' "$RUN/launcher.log" | tail -5 >&2
        echo "$example: KubeVirt's launcher generated no domain: $sync" >&2
        return 1
    fi
    { echo "$dump" | base64 -d; echo; } > "$OUT/$example.xml"
    case $sync in
    *'"ok":true'*) echo "$example: $OUT/$example.xml" ;;
    *) echo "$example: KubeVirt's launcher did not define the domain: $sync" >&2; return 1 ;;
    esac
    cleanup
}

# The first example that fails stops the run (set -e); its launcher log is kept.
current=
on_exit() {
    local status=$?
    if [ $status != 0 ] && [ -n "$RUN" ] && [ -f "$RUN/launcher.log" ]; then
        cp "$RUN/launcher.log" "/tmp/kubevirt-ref-$current.log"
        echo "$current: KubeVirt's launcher log is in /tmp/kubevirt-ref-$current.log" >&2
    fi
    cleanup
    ip netns del $NETNS 2>/dev/null || true
}
trap on_exit EXIT
for current in "$@"; do
    reference "$current"
done
