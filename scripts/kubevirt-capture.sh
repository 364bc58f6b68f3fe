#!/usr/bin/env bash
# kubevirt-capture.sh OUTDIR
#
# Captures what KubeVirt's own launcher (../shared/kubevirt/virt-launcher-go,
# run by run-go-launcher.sh) answers virt-handler for the test guest, with
# the libvirt data it answered from, as fixtures for src/kubevirt/api's
# field-by-field comparison (src/kubevirt/api/testdata/). Redo it with
#
#   scripts/kubevirt-capture.sh src/kubevirt/api/testdata/go-launcher
#
# Needs root, the host's libvirt and QEMU (scripts/setup-host.sh), and the
# test guest in target/test-guest (scripts/build-test-guest.sh). Under TCG
# the whole run takes a minute or two.
#
# The VMI (vmi.json here) is the test guest booted from a kernelBoot
# container, with a hostDisk data volume (ext4, mounted at /mnt/data by
# the guest: a filesystem for GetFilesystems) and an
# emptyDisk (a qcow2 image KubeVirt's launcher creates), and a masquerade
# interface on the pod network. virt-handler normally plumbs that network
# in the pod: here the script makes a network namespace as virt-handler
# leaves it (eth0, the bridge k6t-eth0 with the gateway's address, tap0 on
# it) and passes the option virt-handler passes for it (the interface is
# attached as a tap); KubeVirt's launcher then serves the guest DHCP there.
#
# Each step writes, at one moment:
#   NAME.get-domain.json     kvhandler get-domain's result (api.Domain)
#   NAME.xml                 virsh dumpxml (flags 0, as the launcher reads it)
#   NAME.state               virsh domstate --reason
# and, for the running guest, get-domain-stats/get-guest-info/get-users/
# get-filesystems with the raw inputs: virsh domstats (bulk statistics),
# virsh vcpupin, virsh guestinfo and the agent's raw replies.
# notify.jsonl is every event the notify server received, in order.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
KV=${KUBEVIRT_DIR:-$HERE/../shared/kubevirt}
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
GUEST=$HERE/target/test-guest
[ -f "$GUEST/vmlinuz" ] || { echo "no test guest in $GUEST" >&2; exit 1; }

RUN=$(mktemp -d /tmp/kv-capture.XXXXXX)
R=$RUN/root
SHARE=/var/run/kubevirt
SOCK=$R/run/kubevirt/sockets/launcher-sock
UID_=6a1e3f52-8c1d-4c7e-9a43-2f0d5b9e7c11
# virt-controller sets a VMI's firmware UUID; without one each define
# would get a new UUID from libvirt.
FW_UUID=3d5c2a8e-1f4b-5e6a-9c7d-0b1a2c3d4e5f
DOM=e2e_kvcap
NS=kvcap-$$
K() { "$KV/kvhandler" --socket "$SOCK" "$@"; }
pids=()
cleanup() {
    local rc=$?
    # The launcher first (the notify server should see its last events),
    # then the notify server.
    local i
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        kill -TERM "${pids[i]}" 2>/dev/null || true
        wait "${pids[i]}" 2>/dev/null || true
    done
    # The launcher's daemons (virtlogd outlives it) run in its private
    # mount namespace, which names RUN: end those, by their ids.
    sleep 1
    for m in /proc/[0-9]*/mountinfo; do
        grep -qs "$RUN/root" "$m" || continue
        p=${m#/proc/}; p=${p%/mountinfo}
        kill -TERM "$p" 2>/dev/null || true
    done
    if [ "$rc" != 0 ]; then
        echo "failed; the launcher's log:" >&2
        tail -40 "$RUN/launcher.log" >&2 || true
    fi
    ip netns del "$NS" 2>/dev/null || true
    rm -rf "$RUN"
}
trap cleanup EXIT

# A hostDisk volume is, in the launcher's pod, the host's directory of its
# path mounted at /var/run/kubevirt-private/vmi-disks/VOLUME/.
DATA=$R/run/kubevirt-private/vmi-disks/data/data.img
mkdir -p "$R/run/kubevirt/container-disks/kernel-boot" "$(dirname "$DATA")" \
    "$R/run/kubevirt-ephemeral-disks" "$R/run/kubevirt/hotplug-disks"
cp "$GUEST/vmlinuz" "$GUEST/initrd.img" "$R/run/kubevirt/container-disks/kernel-boot/"
truncate -s 64M "$DATA"
mkfs.ext4 -q -F "$DATA"

ip netns add "$NS"
IPN() { ip -n "$NS" "$@"; }
IPN link set lo up
IPN link add eth0 type veth peer name eth0-peer  # no dummy driver here
IPN link add k6t-eth0 type bridge
IPN addr add 10.0.2.1/24 dev k6t-eth0
IPN tuntap add dev tap0 mode tap
IPN link set tap0 master k6t-eth0
for l in eth0 eth0-peer k6t-eth0 tap0; do IPN link set "$l" up; done
echo '{"interfaceDomainAttachment": {"default": "tap"}}' > "$OUT/options.json"

cat > "$OUT/vmi.json" <<EOF
{
  "apiVersion": "kubevirt.io/v1",
  "kind": "VirtualMachineInstance",
  "metadata": {"name": "kvcap", "namespace": "e2e", "uid": "$UID_"},
  "spec": {
    "terminationGracePeriodSeconds": 20,
    "domain": {
      "cpu": {"cores": 1},
      "memory": {"guest": "192Mi"},
      "firmware": {"uuid": "$FW_UUID", "kernelBoot": {
        "kernelArgs": "console=ttyS0 quiet panic=-1 tg.hostname=kvcap tg.mount=/dev/vda:/mnt/data",
        "container": {"image": "local/test-guest", "kernelPath": "/boot/vmlinuz", "initrdPath": "/boot/initrd.img"}
      }},
      "devices": {
        "autoattachGraphicsDevice": false,
        "interfaces": [{"name": "default", "masquerade": {}, "macAddress": "52:54:00:7e:57:01"}],
        "disks": [
          {"name": "data", "disk": {"bus": "virtio"}, "serial": "data1"},
          {"name": "scratch", "disk": {"bus": "virtio"}}
        ]
      }
    },
    "networks": [{"name": "default", "pod": {}}],
    "volumes": [
      {"name": "data", "hostDisk": {"path": "/var/lib/kvcap/data.img", "type": "Disk"}},
      {"name": "scratch", "emptyDisk": {"capacity": "16Mi"}}
    ]
  }
}
EOF

mkdir -p "$R/run/kubevirt"
"$KV/kvhandler" notify-server --share-dir "$R/run/kubevirt" --vmi "$OUT/vmi.json" \
    > "$OUT/notify.jsonl" 2> "$RUN/notify.log" &
pids+=($!)
# run-go-launcher.sh gives the launcher a /dev of its own without
# /dev/net/tun, which QEMU needs to open tap0: a copy that adds it.
mkdir -p "$RUN/bin"
ln -s "$KV/virt-launcher-go" "$RUN/bin/virt-launcher-go"
ln -s "$KV/etc" "$RUN/bin/etc"
sed 's|^    mkdir /dev/pts /dev/shm$|&; mkdir /dev/net; : > /dev/net/tun; mount --bind "$R/hostdev/net/tun" /dev/net/tun|' \
    "$KV/run-go-launcher.sh" > "$RUN/bin/run-go-launcher.sh"
chmod 755 "$RUN/bin/run-go-launcher.sh"
grep -q /dev/net/tun "$RUN/bin/run-go-launcher.sh" || { echo "cannot add /dev/net/tun to run-go-launcher.sh" >&2; exit 1; }
# nsenter, not `ip netns exec`: that remounts /sys, and the launcher reads
# its pod cpuset from /sys/fs/cgroup.
nsenter --net="/var/run/netns/$NS" "$RUN/bin/run-go-launcher.sh" "$RUN" -- --qemu-timeout 5m --name kvcap --namespace e2e \
    --uid "$UID_" --kubevirt-share-dir "$SHARE" \
    --ephemeral-disk-dir /var/run/kubevirt-ephemeral-disks \
    --container-disk-dir /var/run/kubevirt/container-disks \
    --hotplug-disk-dir /var/run/kubevirt/hotplug-disks \
    --grace-period-seconds 20 --hook-sidecars 0 --allow-emulation \
    --qemu-agent-sys-interval 10s --qemu-agent-file-interval 10s \
    > "$RUN/launcher.log" 2>&1 &
pids+=($!)

wait_for() { # SECONDS DESCRIPTION COMMAND...
    local limit=$1 what=$2; shift 2
    for _ in $(seq "$limit"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
    echo "timed out waiting for $what" >&2
    return 1
}
# (The shorter agent intervals above, flags virt-controller can set too,
# only shorten the waits below.)
wait_for 60 "the launcher's socket" K ping
libvirt_sock() { # Debian's libvirtd under virtqemud's name: either name
    for s in "$R"/run/libvirt/virtqemud-sock "$R"/run/libvirt/libvirt-sock; do
        [ -S "$s" ] && { echo "$s"; return 0; }
    done
    return 1
}
wait_for 60 "the launcher's libvirt daemon" libvirt_sock
LIBVIRT_SOCK=$(libvirt_sock)
V() { virsh -c "qemu:///system?socket=$LIBVIRT_SOCK" "$@"; }

K sync --vmi "$OUT/vmi.json" --options "$OUT/options.json" > "$OUT/sync.json" || { cat "$OUT/sync.json" >&2; exit 1; }
running() { V domstate "$DOM" | grep -qx running; }
wait_for 60 "the domain to run" running
agent_up() { V qemu-agent-command "$DOM" '{"execute":"guest-ping"}'; }
wait_for 180 "the guest agent" agent_up
# KubeVirt's launcher polls the agent on its own schedule (first round when
# the agent connects, then backing off): wait until it has seen the OS, the
# users and the data disk's filesystem.
has_os() { K get-domain | jq -e '.result.domain.Status.OSInfo.Id != ""'; }
wait_for 120 "OS info in GetDomain" has_os
has_fs() { K get-filesystems | jq -e '[.result.items[]? | select(.mountPoint == "/mnt/data")] | length > 0'; }
wait_for 180 "the data filesystem in GetFilesystems" has_fs
# The guest's NIC with an address: its IPv6 link-local one (no IPv4 lease
# came from the launcher's DHCP server in this namespace within 3 minutes
# when tried; GetDomain's interface status is the same shape either way).
has_ip() { K get-domain | jq -e '[.result.domain.Status.Interfaces[]? | select(.Ip != "")] | length > 0'; }
wait_for 180 "the guest's address in GetDomain" has_ip
has_users() { K get-users | jq -e '(.result.items // []) | length > 0'; }
wait_for 180 "a user in GetUsers" has_users

snapshot() { # NAME: the domain as GetDomain shows it and as libvirt holds it
    local name=$1
    V domstate --reason "$DOM" | sed '/^$/d' > "$OUT/$name.state"
    V dumpxml "$DOM" > "$OUT/$name.xml"
    K get-domain > "$OUT/$name.get-domain.json"
    V dumpxml "$DOM" | cmp -s - "$OUT/$name.xml" || echo "note: the XML changed during $name" >&2
}

snapshot running
K get-domain-stats > "$OUT/running.get-domain-stats.json"
V domstats "$DOM" > "$OUT/running.domstats"
V dommemstat "$DOM" > "$OUT/running.dommemstat"
V vcpupin "$DOM" > "$OUT/running.vcpupin"
K get-guest-info > "$OUT/running.get-guest-info.json"
K get-users > "$OUT/running.get-users.json"
K get-filesystems > "$OUT/running.get-filesystems.json"
V guestinfo "$DOM" > "$OUT/running.guestinfo"
for cmd in guest-info guest-get-fsinfo guest-fsfreeze-status; do
    V qemu-agent-command "$DOM" "{\"execute\":\"$cmd\"}" > "$OUT/running.agent.$cmd.json"
done
nproc --all > "$OUT/host-cpus"  # each CPU map row's length

K pause --vmi "$OUT/vmi.json" > /dev/null
paused() { V domstate "$DOM" | grep -qx paused; }
wait_for 30 "the pause" paused
snapshot paused
K unpause --vmi "$OUT/vmi.json" > /dev/null
wait_for 30 "the unpause" running

K freeze --vmi "$OUT/vmi.json" > /dev/null
frozen() { K get-guest-info | jq -e '.result.fsFreezeStatus == "frozen"'; }
wait_for 60 "the freeze" frozen
snapshot frozen
K get-guest-info > "$OUT/frozen.get-guest-info.json"
K unfreeze --vmi "$OUT/vmi.json" > /dev/null

K kill --vmi "$OUT/vmi.json" > /dev/null
shutoff() { V domstate "$DOM" | grep -qx 'shut off'; }
wait_for 60 "the kill" shutoff
snapshot killed

# virt-handler deletes the domain once the VMI is gone: the notifier's
# last event (NoState/NonExistent with a deletion time), after which
# KubeVirt's launcher exits.
# (The call itself may fail: the launcher can exit before it answers.)
K delete --vmi "$OUT/vmi.json" > "$RUN/delete.json" || true
gone() { grep -q '"NonExistent"' "$OUT/notify.jsonl"; }
wait_for 30 "the notification of the delete" gone
echo "captured into $OUT"
