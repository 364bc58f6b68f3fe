#!/usr/bin/env bash
# run-in-pod.sh: runs a command as if inside a KubeVirt launcher pod's compute
# container, so that the launcher in KubeVirt mode (--kubevirt) can start its
# libvirt daemons as plain children on the container's fixed paths
# (/run/libvirt, /etc/libvirt, ...) on a machine whose host has its own.
#
#   run-in-pod.sh RUN -- COMMAND [ARG...]
#
# RUN is a scratch directory of the caller's (created if missing). The command
# runs in a private mount namespace where:
#   /run (so /var/run)      -> RUN/root/run   (the pod's /var/run/kubevirt*,
#                                               /var/run/libvirt)
#   /etc/libvirt            -> RUN/root/etc-libvirt (qemu.conf: QEMU as root
#                              without a security driver; the daemons' own
#                              configuration as KubeVirt's image has it)
#   /var/lib/libvirt, /var/log/libvirt, /var/cache/libvirt -> under RUN/root
#                              (empty, as a fresh pod's: its daemon probes
#                              QEMU; with POD_KVM=1 seeded with the host's
#                              QEMU capabilities, so the daemon starts warm)
#   /dev                    -> a small tmpfs without /dev/kvm, as a pod
#                              without the KVM device plugin (TCG); set
#                              POD_KVM=1 to keep the real /dev
# Nothing is mounted or written on the host outside RUN. Run it inside
# `ip netns exec NS` for a network namespace of its own. SIGTERM to this
# script's process is passed on to COMMAND, and the script waits for it.
# POD_USER=UID:GID runs COMMAND as that user, as a non-root pod runs its
# compute container (KubeVirt's is 107:107): RUN/root is made theirs first.
# Needs root and util-linux's unshare (and setpriv for POD_USER).
set -euo pipefail
[ $# -ge 3 ] && [ "$2" = "--" ] || { sed -n '2,28p' "$0" >&2; exit 2; }
RUN=$(mkdir -p "$1" && cd "$1" && pwd); shift 2

if [ "${POD_INNER:-}" != 1 ]; then
    R=$RUN/root
    mkdir -p "$R"/run "$R"/etc-libvirt "$R"/var-lib-libvirt "$R"/var-log-libvirt \
        "$R"/var-cache-libvirt "$R"/hostdev
    # QEMU's user: root, or a non-root pod's own (KubeVirt's image names
    # qemu, 107, its non-root pods' user).
    user=root group=root
    if [ -n "${POD_USER:-}" ]; then user=+${POD_USER%%:*} group=+${POD_USER##*:}; fi
    printf 'user = "%s"\ngroup = "%s"\nsecurity_driver = "none"\nstdio_handler = "logd"\n' \
        "$user" "$group" > "$R/etc-libvirt/qemu.conf"
    for daemon in virtqemud libvirtd; do
        printf 'listen_tls = 0\nlisten_tcp = 0\nlog_outputs = "1:stderr"\n' \
            > "$R/etc-libvirt/$daemon.conf"
    done
    : > "$R/etc-libvirt/virtlogd.conf"
    # The host's entries were probed with /dev/kvm: a pod without it finds
    # them stale (their `kvm` flag) and probes anyway, after parsing them
    # (measured: the same probe time, 3.8 MiB more private dirty memory in
    # the daemon than an empty cache).
    if [ "${POD_KVM:-}" = 1 ] && [ -d /var/cache/libvirt/qemu/capabilities ] &&
        [ ! -d "$R/var-cache-libvirt/qemu" ]; then
        mkdir -p "$R/var-cache-libvirt/qemu"
        cp -a /var/cache/libvirt/qemu/capabilities "$R/var-cache-libvirt/qemu/" 2>/dev/null || true
    fi
    if [ -n "${POD_USER:-}" ]; then
        chown -R "$POD_USER" "$R"
    fi
    POD_INNER=1 unshare --mount --propagation private "$0" "$RUN" -- "$@" &
    child=$!
    trap 'kill -TERM $child 2>/dev/null' TERM INT
    while kill -0 $child 2>/dev/null; do wait $child || true; done
    wait $child
    exit $?
fi

# Inside the private mount namespace.
R=$RUN/root
if [ "${POD_KVM:-}" != 1 ]; then
    mount --bind /dev "$R/hostdev"
    mount -t tmpfs -o mode=0755,nosuid,size=1m pod-dev /dev
    for n in null zero full random urandom tty ptmx; do
        : > "/dev/$n"; mount --bind "$R/hostdev/$n" "/dev/$n"
    done
    mkdir /dev/pts /dev/shm /dev/net
    mount --bind "$R/hostdev/pts" /dev/pts
    mount --bind "$R/hostdev/shm" /dev/shm
    if [ -e "$R/hostdev/net/tun" ]; then
        : > /dev/net/tun; mount --bind "$R/hostdev/net/tun" /dev/net/tun
    fi
    ln -s /proc/self/fd /dev/fd; ln -s /proc/self/fd/0 /dev/stdin
    ln -s /proc/self/fd/1 /dev/stdout; ln -s /proc/self/fd/2 /dev/stderr
fi
mount --bind "$R/run" /run
mount --bind "$R/etc-libvirt" /etc/libvirt
mount --bind "$R/var-lib-libvirt" /var/lib/libvirt
mount --bind "$R/var-log-libvirt" /var/log/libvirt
mount --bind "$R/var-cache-libvirt" /var/cache/libvirt
if [ -n "${POD_USER:-}" ]; then
    exec setpriv --reuid="${POD_USER%%:*}" --regid="${POD_USER##*:}" --clear-groups -- "$@"
fi
exec "$@"
