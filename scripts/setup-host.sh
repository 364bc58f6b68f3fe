#!/usr/bin/env bash
# One-time host set-up for running virt-launcher and its tests on a fresh
# Debian 12 / Ubuntu machine (root). Idempotent: safe to run again.
#
#  1. installs the Debian packages the launcher and the tests need;
#  2. checks that every program the launcher, its tests and its scripts run
#     is present and works (the PROGRAMS table below), reinstalls the
#     package of any that an install step removed or broke, and otherwise
#     fails naming the program and its package;
#  3. does what Debian's container-less libvirt install leaves out: the
#     libvirt-qemu user and group the QEMU driver insists on, and a
#     qemu.conf that runs QEMU as root without security labels;
#  4. starts the host's virtlogd and libvirtd (for qemu:///system without
#     --spawn-libvirt) and warms libvirt's QEMU capabilities cache, which
#     every launcher-spawned daemon then starts from.
#
# Why step 2 exists: a machine image may ship a newer qemu-utils (from
# backports) than Debian 12's qemu-system-x86; installing the latter makes
# apt remove the former, and qemu-img silently vanishes. Installing
# qemu-utils again (Debian 12's version) repairs it.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
    echo "setup-host: run as root" >&2
    exit 1
fi

# Every program something in this repository runs, the Debian package that
# provides it, and a command that proves it works (run with bash -c, output
# discarded, at most 60 s). Add a row when your code or test runs a new
# program; the package is then installed by this script as well.
PROGRAMS=$(cat <<'TABLE'
# program          package               check
qemu-img           qemu-utils            qemu-img --version
qemu-system-x86_64 qemu-system-x86       qemu-system-x86_64 --version
qemu-ga            qemu-guest-agent      /usr/sbin/qemu-ga --version
libvirtd           libvirt-daemon        libvirtd --version
virtlogd           libvirt-daemon        virtlogd --version
virsh              libvirt-clients       virsh --version
virt-admin         libvirt-clients       virt-admin --version
virt-xml-validate  libvirt-clients       virt-xml-validate "$SETUP_TMP/domain.xml" domain
xmllint            libxml2-utils         xmllint --version
pkg-config         pkg-config            pkg-config --exists libvirt libvirt-qemu
cc                 gcc                   printf "int main(void){return 0;}" | cc -x c - -o "$SETUP_TMP/a.out"
strip              binutils              strip --version
socat              socat                 socat -V
xorriso            xorriso               xorriso -version
isoinfo            genisoimage           isoinfo -version
blkid              util-linux            blkid -V
flock              util-linux            flock -V
su                 util-linux            su --version
script             bsdutils              script -qec true /dev/null
setpriv            util-linux            setpriv --version
unshare            util-linux            unshare --version
useradd            passwd                useradd --help
userdel            passwd                userdel --help
id                 coreutils             id -u
mount              mount                 mount -V
umount             mount                 umount -V
mkfs.ext4          e2fsprogs             mkfs.ext4 -V
debugfs            e2fsprogs             debugfs -V
pgrep              procps                pgrep -V
kill               procps                "$(type -P kill)" -V
ip                 iproute2              ip -V
nft                nftables              nft --version
passt              passt                 passt --version
swtpm              swtpm                 swtpm --version
/usr/lib/qemu/virtiofsd qemu-system-common /usr/lib/qemu/virtiofsd --version
swtpm_setup        swtpm-tools           swtpm_setup --print-capabilities
groff              groff-base            groff -man -Tutf8 -ww "$SETUP_TMP/page.8"
mandoc             mandoc                mandoc -Tlint "$SETUP_TMP/page.8"
man                man-db                man --version
gzip               gzip                  gzip --version
dpkg-deb           dpkg                  dpkg-deb --version
ldd                libc-bin              ldd --version
file               file                  file --version
mmdebstrap         mmdebstrap            mmdebstrap --version
pivot_root         util-linux            pivot_root --version
chroot             coreutils             chroot --version
TABLE
)
# passt: the passt binding. Debian 12's libvirt 9.0 rejects <backend
# type='passt'/> (it came in 9.2), so the launcher runs passt itself and
# QEMU joins its socket (src/network/passt.rs); tests/network.rs boots a
# guest with it.

# virtiofsd: a VMI's filesystems (src/daemons/virtiofs.rs); Debian 12 has
# QEMU's C one only, at this path (bookworm has no virtiofsd package).

# mmdebstrap: scripts/newer-stack.sh builds the second runtime stack's root
# filesystem (libvirt 11 and QEMU 10 from bookworm-backports) with it.

# Packages no program row names: libraries and data the build and the
# launcher need.
# ovmf: the EFI firmware of EFI VMIs (tests/examples_qemu.rs boots one).
# libseccomp-dev, libcap-ng-dev: scripts/newer-stack.sh builds the Rust
# virtiofsd (crates.io) for its root filesystem, which links both.
EXTRA_PACKAGES=(libvirt-daemon-driver-qemu libvirt-dev libc6-dev ovmf libseccomp-dev libcap-ng-dev)

rows() { grep -v '^#' <<<"$PROGRAMS" | grep -v '^[[:space:]]*$'; }

packages=("${EXTRA_PACKAGES[@]}")
while read -r _ pkg _; do
    packages+=("$pkg")
done < <(rows)
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)

export DEBIAN_FRONTEND=noninteractive
apt_updated=0
apt_install() { # PACKAGE... (installs or upgrades to the candidate)
    if [ "$apt_updated" = 0 ]; then
        apt-get update -qq
        apt_updated=1
    fi
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
is_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

missing=()
for p in "${packages[@]}"; do
    is_installed "$p" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup-host: installing ${missing[*]}"
    apt_install "${missing[@]}"
fi

SETUP_TMP=$(mktemp -d /tmp/setup-host.XXXXXX)
export SETUP_TMP
trap 'rm -rf "$SETUP_TMP"' EXIT
printf '%s\n' '<domain type="qemu"><name>setup-host</name><memory>131072</memory><os><type>hvm</type></os></domain>' \
    >"$SETUP_TMP/domain.xml"
printf '%s\n' '.TH SETUP\-HOST 8 2025-01-01 setup\-host' '.SH NAME' 'setup\-host \- check' \
    >"$SETUP_TMP/page.8"

# check_programs: prints "program package" for every row whose program is
# missing or whose check fails.
check_programs() {
    local prog pkg check
    while read -r prog pkg check; do
        if ! type -P "$prog" >/dev/null && [ ! -x "/usr/sbin/$prog" ]; then
            echo "$prog $pkg missing"
        elif ! timeout 60 bash -c "$check" >/dev/null 2>&1 </dev/null; then
            echo "$prog $pkg broken"
        fi
    done < <(rows)
}

failed=$(check_programs)
if [ -n "$failed" ]; then
    repair=()
    reinstall=()
    while read -r prog pkg why; do
        echo "setup-host: $prog ($pkg) is $why; repairing"
        if is_installed "$pkg"; then reinstall+=("$pkg"); else repair+=("$pkg"); fi
    done <<<"$failed"
    mapfile -t repair < <(printf '%s\n' "${repair[@]}" | grep -v '^$' | sort -u)
    mapfile -t reinstall < <(printf '%s\n' "${reinstall[@]}" | grep -v '^$' | sort -u)
    [ "${#repair[@]}" -eq 0 ] || apt_install "${repair[@]}" || true
    [ "${#reinstall[@]}" -eq 0 ] || apt_install --reinstall "${reinstall[@]}" || true
    failed=$(check_programs)
    if [ -n "$failed" ]; then
        while read -r prog pkg why; do
            echo "setup-host: $prog is $why after repair: install Debian package $pkg (apt-get install $pkg) and run this script again" >&2
        done <<<"$failed"
        exit 1
    fi
fi
echo "setup-host: all $(rows | wc -l) programs present and working"

# Non-root mode (virt-launcher --spawn-libvirt as an ordinary user, and
# tests/nonroot.rs): an unprivileged process makes a user namespace, and in
# it the daemons' PID and mount namespaces. Debian kernels can switch this
# off; switch it on, then check it as user nobody.
if [ "$(cat /proc/sys/kernel/unprivileged_userns_clone 2>/dev/null || echo 1)" = 0 ]; then
    sysctl -qw kernel.unprivileged_userns_clone=1
fi
if ! setpriv --reuid=65534 --regid=65534 --clear-groups -- \
    unshare --user --pid --mount --fork true; then
    echo "setup-host: an unprivileged user cannot create user, PID and mount namespaces;" \
        "non-root mode and its tests need them (sysctl user.max_user_namespaces > 0)" >&2
    exit 1
fi
echo "setup-host: unprivileged user namespaces work (non-root mode)"

# The QEMU driver resolves its default user and group (libvirt-qemu) before
# it reads qemu.conf, and fails to start when they do not exist.
getent group kvm >/dev/null || groupadd -r kvm
getent group libvirt-qemu >/dev/null || groupadd -r libvirt-qemu
getent passwd libvirt-qemu >/dev/null ||
    useradd -r -g libvirt-qemu -G kvm -d /var/lib/libvirt -s /usr/sbin/nologin libvirt-qemu

# Also the mount points a launcher's own daemons get its directories over
# (--spawn-libvirt), which a non-root launcher cannot create itself.
mkdir -p /etc/libvirt /var/log/libvirt /var/run/libvirt /var/lib/libvirt /var/cache/libvirt
if ! grep -q "virt-launcher host set-up" /etc/libvirt/qemu.conf 2>/dev/null; then
    [ -f /etc/libvirt/qemu.conf ] && cp /etc/libvirt/qemu.conf /etc/libvirt/qemu.conf.orig
    cat > /etc/libvirt/qemu.conf <<'CONF'
# virt-launcher host set-up: QEMU runs as root without security labels, as
# inside a KubeVirt launcher pod. See virt-launcher's docs/running.md (one-time host set-up).
user = "root"
group = "root"
security_driver = "none"
CONF
fi

# The host's daemons (used by launchers without --spawn-libvirt). Alive is
# told by the host daemon's own pid file, not by a process name: a launcher
# started with --spawn-libvirt runs daemons of the same names in its private
# namespace, and a host daemon that died leaves its socket file behind.
host_daemon_alive() {
    local pid
    pid=$(cat "/run/$1.pid" 2>/dev/null) && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}
if ! host_daemon_alive virtlogd; then
    virtlogd -d
fi
if ! host_daemon_alive libvirtd; then
    libvirtd -d
fi
for _ in $(seq 1 100); do
    virsh -c qemu:///system uri >/dev/null 2>&1 && break
    sleep 0.1
done
# Probe QEMU once now (seconds, cold) so that every daemon after this one
# starts from the cache.
virsh -c qemu:///system domcapabilities --virttype qemu >/dev/null
echo "setup-host: libvirt $(virsh -c qemu:///system version --daemon | sed -n 's/.*daemon: //p' | head -1), $(qemu-system-x86_64 --version | head -1)"

# libvirtd's test driver over its socket (test+unix:///default): the static
# (wire backend) binary runs the daemon suite and scripts/smoke.sh on it.
virsh -c test+unix:///default version >/dev/null ||
    { echo "setup-host: libvirtd does not serve test+unix:///default" >&2; exit 1; }

# The static build (scripts/build-static.sh, run by scripts/test.sh): Rust's
# x86_64-unknown-linux-musl target, added with rustup for the toolchain
# cargo runs. It brings its own musl C library and start files, and no
# dependency of the wire build compiles C, so musl-tools (musl-gcc) is not
# needed; gcc links. Checked by building and running a static executable.
MUSL_TARGET=x86_64-unknown-linux-musl
if ! type -P rustup >/dev/null; then
    echo "setup-host: rustup not found; install Rust with rustup (README) to build the static binary" >&2
    exit 1
fi
if ! rustup target list --installed | grep -qx "$MUSL_TARGET"; then
    echo "setup-host: adding the Rust target $MUSL_TARGET"
    rustup target add "$MUSL_TARGET" >/dev/null
fi
printf 'fn main() { println!("static ok"); }\n' >"$SETUP_TMP/static.rs"
if ! rustc --edition 2021 --target "$MUSL_TARGET" -C target-feature=+crt-static \
        -C relocation-model=static -o "$SETUP_TMP/static" "$SETUP_TMP/static.rs" 2>"$SETUP_TMP/rustc.err" ||
    [ "$("$SETUP_TMP/static")" != "static ok" ] ||
    ! file -b "$SETUP_TMP/static" | grep -q "statically linked"; then
    cat "$SETUP_TMP/rustc.err" >&2
    echo "setup-host: rustc cannot build a static $MUSL_TARGET executable ($(file -b "$SETUP_TMP/static" 2>&1))" >&2
    exit 1
fi
echo "setup-host: $MUSL_TARGET builds static executables; libvirtd serves test+unix:///default"

# Miri, which scripts/test.sh runs the static build's allocator's unit tests
# under (src/block_cache.rs: unsafe code, atomics, threads): a nightly
# toolchain's component, with the standard library's sources it builds its
# sysroot from. The machine image carries a nightly toolchain beside the
# stable one; rustup fetches the components (or the toolchain, if it is
# missing).
# A machine that cannot fetch them goes on without Miri: scripts/test.sh
# then says that the allocator's tests ran without it.
if ! cargo +nightly miri --version >/dev/null 2>&1; then
    echo "setup-host: adding Miri (the nightly toolchain's miri and rust-src components)"
    if rustup toolchain list | grep -q '^nightly'; then
        rustup component add --toolchain nightly miri rust-src >/dev/null || true
    else
        rustup toolchain install nightly --profile minimal --component miri,rust-src >/dev/null || true
    fi
fi
if cargo +nightly miri --version >/dev/null 2>&1; then
    echo "setup-host: $(cargo +nightly miri --version)"
else
    echo "setup-host: Miri cannot be installed here (rustup could not fetch it); scripts/test.sh runs the allocator's unit tests without it" >&2
fi
