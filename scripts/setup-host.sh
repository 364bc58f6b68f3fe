#!/usr/bin/env bash
# One-time host set-up for running virt-launcher and its tests on a fresh
# Debian 12 / Ubuntu machine (root). Idempotent: safe to run again.
#
#  1. installs the Debian packages the launcher and the tests need;
#  2. does what Debian's container-less libvirt install leaves out: the
#     libvirt-qemu user and group the QEMU driver insists on, and a
#     qemu.conf that runs QEMU as root without security labels;
#  3. starts the host's virtlogd and libvirtd (for qemu:///system without
#     --spawn-libvirt) and warms libvirt's QEMU capabilities cache, which
#     every launcher-spawned daemon then starts from.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
    echo "setup-host: run as root" >&2
    exit 1
fi

packages=(
    libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients libvirt-dev pkg-config
    qemu-system-x86 qemu-utils qemu-guest-agent
    socat xorriso genisoimage libxml2-utils e2fsprogs procps util-linux
)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup-host: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The QEMU driver resolves its default user and group (libvirt-qemu) before
# it reads qemu.conf, and fails to start when they do not exist.
getent group kvm >/dev/null || groupadd -r kvm
getent group libvirt-qemu >/dev/null || groupadd -r libvirt-qemu
getent passwd libvirt-qemu >/dev/null ||
    useradd -r -g libvirt-qemu -G kvm -d /var/lib/libvirt -s /usr/sbin/nologin libvirt-qemu

mkdir -p /etc/libvirt /var/log/libvirt /var/run/libvirt /var/lib/libvirt /var/cache/libvirt
if ! grep -q "virt-launcher host set-up" /etc/libvirt/qemu.conf 2>/dev/null; then
    [ -f /etc/libvirt/qemu.conf ] && cp /etc/libvirt/qemu.conf /etc/libvirt/qemu.conf.orig
    cat > /etc/libvirt/qemu.conf <<'CONF'
# virt-launcher host set-up: QEMU runs as root without security labels, as
# inside a KubeVirt launcher pod. See virt-launcher's README.
user = "root"
group = "root"
security_driver = "none"
CONF
fi

# The host's daemons (used by launchers without --spawn-libvirt).
if ! pgrep -x virtlogd >/dev/null; then
    virtlogd -d
fi
if ! pgrep -x libvirtd >/dev/null; then
    libvirtd -d
fi
for _ in $(seq 1 100); do
    [ -S /var/run/libvirt/libvirt-sock ] && break
    sleep 0.1
done
# Probe QEMU once now (seconds, cold) so that every daemon after this one
# starts from the cache.
virsh -c qemu:///system domcapabilities --virttype qemu >/dev/null
echo "setup-host: libvirt $(virsh -c qemu:///system version --daemon | sed -n 's/.*daemon: //p' | head -1), $(qemu-system-x86_64 --version | head -1)"
