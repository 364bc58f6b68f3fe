#!/bin/bash
# build-test-guest.sh OUTDIR
#
# Builds a tiny Linux test guest for virt-launcher's end-to-end tests from
# Debian bookworm packages only:
#   - linux-image-cloud-amd64 (-> linux-image-6.1.*-cloud-amd64), fetched with
#     `apt-get download` and unpacked with `dpkg-deb -x` (never installed),
#   - busybox-static (same way; it is also the cpio/depmod used on the host),
#   - dhcpcd-base (same way): the guest's IPv6 client (router advertisements
#     and DHCPv6; busybox has no udhcpc6 here),
#   - qemu-guest-agent, taken from the host's /usr/sbin/qemu-ga plus the
#     shared libraries ldd lists.
#
# OUTDIR receives:
#   vmlinuz     the Debian cloud kernel (bzImage)
#   initrd.img  gzip'ed newc cpio: busybox userland, qemu-ga, virtio modules
#   cmdline     the default kernel command line
#   versions    key=value lines (kernel, busybox, dhcpcd, qemu-ga versions)
#   cache/      unpacked packages, reused while the apt candidates are the same
#   .stamp      hash of this script and all inputs; when it matches, nothing
#               is rebuilt
#
# Guest kernel command-line switches (all optional):
#   tg.hostname=NAME              host name (default tg-guest)
#   tg.net=dhcp|none|A.B.C.D/NN[,GW]
#                                 first NIC: udhcpc in the background (default),
#                                 leave it down, or a static address/gateway
#   tg.net6=dhcp|none             with tg.net=dhcp, also dhcpcd -6 on the first
#                                 NIC (router advertisements and DHCPv6; default
#                                 none: the kernel's own IPv6 only)
#   tg.mount=DEV:DIR[,DEV:DIR...] mount DEV (any fs type) on DIR at boot
#   tg.acpi=ignore                ignore the ACPI power button (no acpid)
#   tg.getty=0                    no autologin root getty on ttyS0
#
# Guest commands: /bin/tg-agent-off SECONDS (stop qemu-ga for SECONDS; works
# through guest-exec), /sbin/shutdown (shim for qemu-ga's guest-shutdown).
#
# The guest boots under TCG (-machine accel=tcg); on the project's machines
# a Linux guest never boots under the nested /dev/kvm.
set -euo pipefail

usage() { echo "usage: $0 OUTDIR" >&2; exit 2; }
[ $# -eq 1 ] || usage
[ -n "$1" ] || usage

START_NS=$(date +%s%N)
log() { echo "build-test-guest: $*" >&2; }
die() { log "error: $*"; exit 1; }

SELF=$(readlink -f "${BASH_SOURCE[0]}")
mkdir -p "$1"
OUT=$(readlink -f "$1")
CACHE=$OUT/cache
mkdir -p "$CACHE"

# One build at a time per OUTDIR.
exec 9>"$OUT/.lock"
flock 9

export LC_ALL=C
export DEBIAN_FRONTEND=noninteractive

KERNEL_META=linux-image-cloud-amd64
BUSYBOX_PKG=busybox-static
DHCPCD_PKG=dhcpcd-base
QGA=/usr/sbin/qemu-ga

# Modules wanted in the guest; the ones in OPTIONAL_MODULES are taken only if
# this kernel builds them as modules.  Built-in ones are skipped.
REQUIRED_MODULES="virtio_pci virtio_console virtio_net virtio_blk virtio_scsi
virtio_balloon virtio_rng virtio_mem button evdev isofs sd_mod sr_mod cdrom
virtiofs"
OPTIONAL_MODULES="libahci ahci ata_piix i6300esb"
# Modules put in the initrd but not loaded at boot: a test loads them where
# the guest can use them (efivarfs only loads in an EFI guest).
ON_DEMAND_MODULES="efivarfs"
# Must be available (built in, or a module that then gets loaded).
MUST_HAVE_FS="ext4"

DEFAULT_CMDLINE="console=ttyS0 quiet panic=-1"

# ---------------------------------------------------------------- apt inputs
have_lists() {
    compgen -G "/var/lib/apt/lists/*_Packages*" >/dev/null
}

candidate() { # PKG -> candidate version or empty
    apt-cache policy "$1" 2>/dev/null | awk '!f && $1 == "Candidate:" && $2 != "(none)" { print $2; f = 1 }'
}

# One apt-cache call for both candidates: "Package: / Version: / Depends:".
apt_info() {
    apt-cache show --no-all-versions "$KERNEL_META" "$BUSYBOX_PKG" "$DHCPCD_PKG" 2>/dev/null |
        awk '/^Package: / { p = $2 } /^Version: / { v[p] = $2 }
             /^Depends: / { d[p] = substr($0, 10) }
             END { for (k in v) printf "%s\t%s\t%s\n", k, v[k], d[k] }' || true
}

if ! have_lists; then
    log "apt lists missing; running apt-get update"
    apt-get update -q >&2
fi
APT_INFO=$(apt_info)
if ! grep -q "^$KERNEL_META	" <<<"$APT_INFO"; then
    log "no $KERNEL_META in the apt lists; running apt-get update"
    apt-get update -q >&2
    APT_INFO=$(apt_info)
fi

KMETA_VER=$(awk -F'\t' -v p="$KERNEL_META" '$1 == p { print $2 }' <<<"$APT_INFO")
[ -n "$KMETA_VER" ] || die "no candidate for $KERNEL_META"
BB_VER=$(awk -F'\t' -v p="$BUSYBOX_PKG" '$1 == p { print $2 }' <<<"$APT_INFO")
[ -n "$BB_VER" ] || die "no candidate for $BUSYBOX_PKG"
DHCPCD_VER=$(awk -F'\t' -v p="$DHCPCD_PKG" '$1 == p { print $2 }' <<<"$APT_INFO")
[ -n "$DHCPCD_VER" ] || die "no candidate for $DHCPCD_PKG"
# The meta package depends on the real linux-image-6.1.*-cloud-amd64,
# normally with an exact version: "linux-image-6.1.0-57-cloud-amd64 (= 6.1.192-3)".
KDEP=$(awk -F'\t' -v p="$KERNEL_META" '$1 == p { print $3 }' <<<"$APT_INFO" | sed 's/[,|]/\n/g' |
    sed -n 's/^ *\(linux-image-[0-9][^ ]*-cloud-amd64\)\( *(\(.*\))\)\{0,1\} *$/\1 \3/p' | sed -n 1p)
KPKG=${KDEP%% *}
[ -n "$KPKG" ] || die "cannot find the kernel package $KERNEL_META depends on"
KPKG_VER=${KDEP#"$KPKG"}
KPKG_VER=${KPKG_VER# }
case $KPKG_VER in
    "= "*) KPKG_VER=${KPKG_VER#= } ;;
    *) KPKG_VER=$(candidate "$KPKG") ;;
esac
[ -n "$KPKG_VER" ] || die "no candidate for $KPKG"

if [ ! -x "$QGA" ]; then
    log "$QGA missing; installing qemu-guest-agent"
    apt-get install -y -q qemu-guest-agent >&2
fi
[ -x "$QGA" ] || die "$QGA still missing"
QGA_PKG_VER=$(dpkg-query -W -f='${Version}' qemu-guest-agent 2>/dev/null || echo unknown)
QGA_VER=$("$QGA" --version 2>/dev/null | awk '!f && /Guest Agent/ { print $NF; f = 1 }')
[ -n "$QGA_VER" ] || QGA_VER=unknown

# qemu-ga's shared libraries (and the dynamic loader), as ldd lists them.
QGA_LIBS=$(ldd "$QGA" | awk '
    $2 == "=>" && $3 ~ /^\// { print $3; next }
    $1 ~ /^\// { print $1 }' | sort -u)
[ -n "$QGA_LIBS" ] || die "ldd found no libraries for $QGA"

# ---------------------------------------------------------------- stamp
INPUT_HASH=$( {
    sha256sum "$SELF" | cut -d' ' -f1
    echo "kernel=$KPKG $KPKG_VER meta=$KMETA_VER"
    echo "busybox=$BB_VER"
    echo "dhcpcd=$DHCPCD_VER"
    echo "qga=$QGA_PKG_VER"
    # shellcheck disable=SC2086
    sha256sum "$QGA" $QGA_LIBS
} | sha256sum | cut -d' ' -f1)

summary() {
    local f
    echo "== test guest in $OUT"
    for f in vmlinuz initrd.img cmdline versions; do
        printf '  %-12s %10s bytes  %s\n' "$f" "$(stat -c %s "$OUT/$f")" "$OUT/$f"
    done
    echo "  cmdline: $(cat "$OUT/cmdline")"
    sed 's/^/  /' "$OUT/versions"
    echo "  cache: $(du -sh "$CACHE" | cut -f1) in $CACHE"
    echo "  took $(( ($(date +%s%N) - START_NS) / 1000000 )) ms ($1)"
}

if [ -f "$OUT/.stamp" ] && [ "$(cat "$OUT/.stamp")" = "$INPUT_HASH" ] &&
   [ -s "$OUT/vmlinuz" ] && [ -s "$OUT/initrd.img" ] &&
   [ -s "$OUT/cmdline" ] && [ -s "$OUT/versions" ]; then
    summary "up to date, nothing rebuilt"
    exit 0
fi

# ---------------------------------------------------------------- fetch + unpack
safe() { printf '%s' "$1" | tr -c 'A-Za-z0-9.+-' '_'; }

fetch_unpack() { # PKG VERSION DIR
    local pkg=$1 ver=$2 dir=$3 dl deb
    if [ -f "$dir/.unpacked" ]; then
        log "cache hit: $pkg $ver"
        return 0
    fi
    rm -rf "$dir" "$dir.tmp"
    dl=$(mktemp -d "$CACHE/.dl.XXXXXX")
    log "downloading $pkg=$ver"
    (cd "$dl" && apt-get download -q -o APT::Sandbox::User=root "$pkg=$ver" >&2)
    deb=$(find "$dl" -maxdepth 1 -name '*.deb' -print -quit)
    [ -n "$deb" ] || die "apt-get download $pkg=$ver produced no .deb"
    mkdir -p "$dir.tmp"
    dpkg-deb -x "$deb" "$dir.tmp"
    rm -rf "$dl"
    touch "$dir.tmp/.unpacked"
    mv "$dir.tmp" "$dir"
}

KDIR=$CACHE/kernel-$(safe "$KPKG_VER")
BBDIR=$CACHE/busybox-$(safe "$BB_VER")
fetch_unpack "$KPKG" "$KPKG_VER" "$KDIR"
fetch_unpack "$BUSYBOX_PKG" "$BB_VER" "$BBDIR"
DHDIR=$CACHE/dhcpcd-$(safe "$DHCPCD_VER")
fetch_unpack "$DHCPCD_PKG" "$DHCPCD_VER" "$DHDIR"
# Drop unpacked trees of other versions.
for d in "$CACHE"/kernel-* "$CACHE"/busybox-* "$CACHE"/dhcpcd-* "$CACHE"/.dl.*; do
    [ -e "$d" ] || continue
    case $d in "$KDIR" | "$BBDIR" | "$DHDIR") ;; *) log "removing stale $d"; rm -rf "$d" ;; esac
done

BB=$BBDIR/bin/busybox
[ -x "$BB" ] || die "no busybox binary in $BBDIR"
BB_RELEASE=$("$BB" --help 2>&1 | sed -n '1s/^BusyBox v\([^ ]*\).*/\1/p')

if [ -d "$KDIR/lib/modules" ]; then MODROOT_REL=lib/modules; else MODROOT_REL=usr/lib/modules; fi
KREL=$(find "$KDIR/$MODROOT_REL" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' -quit)
[ -n "$KREL" ] || die "no kernel release under $KDIR/$MODROOT_REL"
KMODS=$KDIR/$MODROOT_REL/$KREL
VMLINUZ=$KDIR/boot/vmlinuz-$KREL
[ -f "$VMLINUZ" ] || die "no $VMLINUZ"

# ---------------------------------------------------------------- modules
declare -A MODPATH=() BUILTIN=() PICKED=()
while IFS= read -r rel; do
    b=${rel##*/}
    b=${b%%.ko*}
    MODPATH[${b//-/_}]=$rel
done < <(cd "$KMODS" && find kernel -name '*.ko' -o -name '*.ko.xz' -o -name '*.ko.zst' -o -name '*.ko.gz')
if [ -f "$KMODS/modules.builtin" ]; then
    while IFS= read -r rel; do
        b=${rel##*/}
        b=${b%%.ko*}
        BUILTIN[${b//-/_}]=1
    done < "$KMODS/modules.builtin"
fi
log "kernel $KREL: ${#MODPATH[@]} modules, ${#BUILTIN[@]} built in"

modinfo_field() { # FILE FIELD
    local f=$1
    case $f in
        *.xz) xz -dc "$f" ;;
        *.zst) zstd -qdc "$f" ;;
        *.gz) gzip -dc "$f" ;;
        *) cat "$f" ;;
    esac | tr '\0' '\n' | awk -v k="$2=" '!f && index($0, k) == 1 { print substr($0, length(k) + 1); f = 1 }'
}

pick() { # NAME: add module and (recursively) its dependencies
    local m=${1//-/_} deps d
    [ -z "${PICKED[$m]:-}" ] || return 0
    if [ -n "${BUILTIN[$m]:-}" ]; then return 0; fi
    [ -n "${MODPATH[$m]:-}" ] || die "module $m is neither built in nor a module"
    PICKED[$m]=${MODPATH[$m]}
    deps=$(modinfo_field "$KMODS/${MODPATH[$m]}" depends)
    for d in ${deps//,/ }; do pick "$d"; done
}

LOAD_MODULES=()
NOTES=()
for m in $REQUIRED_MODULES $OPTIONAL_MODULES $MUST_HAVE_FS; do
    n=${m//-/_}
    if [ -n "${BUILTIN[$n]:-}" ]; then
        NOTES+=("$n:builtin")
    elif [ -n "${MODPATH[$n]:-}" ]; then
        pick "$n"
        LOAD_MODULES+=("$n")
        NOTES+=("$n:module")
    else
        case " $OPTIONAL_MODULES " in
            *" $m "*) NOTES+=("$n:absent") ;;
            *) die "module $m is neither built in nor a module of $KREL" ;;
        esac
    fi
done
for m in $ON_DEMAND_MODULES; do
    n=${m//-/_}
    if [ -n "${BUILTIN[$n]:-}" ]; then
        NOTES+=("$n:builtin")
    elif [ -n "${MODPATH[$n]:-}" ]; then
        pick "$n"
        NOTES+=("$n:on-demand")
    else
        NOTES+=("$n:absent")
    fi
done
# ext4 with metadata_csum needs crc32c at mount time.
if [ -z "${BUILTIN[crc32c_generic]:-}" ] && [ -n "${MODPATH[crc32c_generic]:-}" ]; then
    pick crc32c_generic
    LOAD_MODULES+=(crc32c_generic)
fi
log "module status: ${NOTES[*]}"
log "modules in initrd: $(printf '%s\n' "${!PICKED[@]}" | sort | tr '\n' ' ')"

# ---------------------------------------------------------------- staging
STAGE=$(mktemp -d "$OUT/.stage.XXXXXX")
cleanup() { rm -rf "$STAGE" "$OUT"/.initrd.tmp.* "$OUT"/.vmlinuz.tmp.*; }
trap cleanup EXIT

mkdir -p "$STAGE"/{bin,sbin,usr/bin,usr/sbin,usr/share/udhcpc,etc/init.d,etc/acpi/PWRF,etc/tg}
mkdir -p "$STAGE"/{proc,sys,dev,run,tmp,root,mnt,var/log,lib,lib64}
chmod 1777 "$STAGE/tmp"
chmod 0700 "$STAGE/root"
ln -s ../run "$STAGE/var/run"
ln -s /proc/mounts "$STAGE/etc/mtab"
mknod -m 600 "$STAGE/dev/console" c 5 1 2>/dev/null || log "warning: cannot mknod /dev/console (not root?)"
mknod -m 666 "$STAGE/dev/null" c 1 3 2>/dev/null || true

# busybox and its applet links
install -m 0755 "$BB" "$STAGE/bin/busybox"
while IFS= read -r applet; do
    [ -n "$applet" ] || continue
    [ "$applet" != bin/busybox ] || continue
    mkdir -p "$STAGE/$(dirname "$applet")"
    [ -e "$STAGE/$applet" ] || ln -s /bin/busybox "$STAGE/$applet"
done < <("$BB" --list-full)
BB_APPLETS=" $("$BB" --list | tr '\n' ' ') "
for a in sh mount umount modprobe depmod insmod ip udhcpc acpid getty login \
         poweroff halt reboot init setsid hostname sync sleep cat uevent; do
    [[ $BB_APPLETS == *" $a "* ]] || die "busybox lacks the $a applet"
done

# qemu-ga and its libraries
install -m 0755 "$QGA" "$STAGE/usr/sbin/qemu-ga"
for lib in $QGA_LIBS; do
    mkdir -p "$STAGE$(dirname "$lib")"
    cp -L "$lib" "$STAGE$lib"
done

# dhcpcd (IPv6 only; hooks off: udhcpc owns resolv.conf) and the libraries
# ldd lists for it (libc: already there for qemu-ga).
DHCPCD=$DHDIR/usr/sbin/dhcpcd
[ -x "$DHCPCD" ] || die "no dhcpcd binary in $DHDIR"
install -m 0755 "$DHCPCD" "$STAGE/usr/sbin/dhcpcd"
for lib in $(ldd "$DHCPCD" | awk '$2 == "=>" && $3 ~ /^\// { print $3; next } $1 ~ /^\// { print $1 }'); do
    [ -e "$STAGE$lib" ] && continue
    mkdir -p "$STAGE$(dirname "$lib")"
    cp -L "$lib" "$STAGE$lib"
done
mkdir -p "$STAGE/var/lib/dhcpcd"

# kernel modules
mkdir -p "$STAGE/lib/modules/$KREL"
for m in "${!PICKED[@]}"; do
    rel=${PICKED[$m]}
    mkdir -p "$STAGE/lib/modules/$KREL/$(dirname "$rel")"
    cp "$KMODS/$rel" "$STAGE/lib/modules/$KREL/$rel"
done
for f in modules.builtin modules.builtin.modinfo modules.order; do
    [ ! -f "$KMODS/$f" ] || cp "$KMODS/$f" "$STAGE/lib/modules/$KREL/$f"
done
"$BB" depmod -b "$STAGE" "$KREL"
[ -s "$STAGE/lib/modules/$KREL/modules.dep" ] || die "busybox depmod wrote no modules.dep"
printf '%s\n' "${LOAD_MODULES[@]}" > "$STAGE/etc/tg/modules"

# ---------------------------------------------------------------- guest files
w() { # PATH MODE  (content on stdin)
    rm -f "$STAGE$1"
    mkdir -p "$STAGE$(dirname "$1")"
    cat > "$STAGE$1"
    chmod "$2" "$STAGE$1"
}

w /etc/passwd 0644 <<'EOF'
root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
w /etc/shadow 0600 <<'EOF'
root::19000:0:99999:7:::
daemon:*:19000:0:99999:7:::
nobody:*:19000:0:99999:7:::
EOF
w /etc/group 0644 <<'EOF'
root:x:0:
daemon:x:1:
tty:x:5:
disk:x:6:
utmp:x:43:
nogroup:x:65534:
EOF
w /etc/nsswitch.conf 0644 <<'EOF'
passwd: files
group: files
shadow: files
hosts: files dns
EOF
w /etc/fstab 0644 </dev/null
w /etc/securetty 0644 <<'EOF'
console
ttyS0
EOF
w /etc/profile 0644 <<'EOF'
export PATH=/sbin:/bin:/usr/sbin:/usr/bin
export PS1='\h:\w\$ '
EOF
w /etc/os-release 0644 <<'EOF'
ID=tg-guest
ID_LIKE=debian
NAME="tg-guest"
PRETTY_NAME="tg test guest (Debian 12 packages)"
VERSION_ID="12"
VERSION="12 (busybox, qemu-ga)"
VARIANT="test guest"
VARIANT_ID=tg
HOME_URL="https://www.debian.org/"
EOF

# Shared shell helpers for the guest scripts.
w /lib/tg/functions 0644 <<'EOF'
export PATH=/sbin:/bin:/usr/sbin:/usr/bin
# tg_arg NAME DEFAULT: value of NAME=VALUE on the kernel command line.
tg_arg() {
    local w v="$2"
    set -f
    for w in $(cat /proc/cmdline); do
        case $w in "$1="*) v=${w#*=} ;; esac
    done
    set +f
    printf '%s\n' "$v"
}
tg_log() { echo "tg: $*" > /dev/console; }
tg_uptime() { local u r; read -r u r < /proc/uptime; echo "$u"; }
EOF

w /init 0755 <<'EOF'
#!/bin/sh
# tg-guest /init: basic mounts, inittab from the command line, then busybox init.
export PATH=/sbin:/bin:/usr/sbin:/usr/bin
mount -t proc -o nosuid,nodev,noexec proc /proc
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys
mount -t devtmpfs -o mode=0755,nosuid devtmpfs /dev
exec </dev/console >/dev/console 2>&1
mkdir -p /dev/pts /dev/shm
mount -t devpts -o nosuid,noexec,gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o nosuid,nodev,mode=0755 tmpfs /run
mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs /tmp
mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs /dev/shm
[ -L /var/run ] || { rm -rf /var/run; ln -s /run /var/run; }
ln -sfn /proc/self/fd /dev/fd
ln -sfn /proc/self/fd/0 /dev/stdin
ln -sfn /proc/self/fd/1 /dev/stdout
ln -sfn /proc/self/fd/2 /dev/stderr
touch /run/utmp /var/log/wtmp
chgrp utmp /run/utmp 2>/dev/null
chmod 664 /run/utmp

. /lib/tg/functions
{
    echo "::sysinit:/etc/init.d/rcS"
    echo "::respawn:/sbin/tg-qga-wrapper"
    echo "::respawn:/sbin/uevent /sbin/tg-uevent"
    if [ "$(tg_arg tg.acpi on)" != ignore ]; then
        echo "::respawn:/sbin/acpid -f"
    fi
    if [ "$(tg_arg tg.getty 1)" != 0 ]; then
        echo "ttyS0::respawn:/sbin/getty -n -l /bin/autologin 115200 ttyS0 vt100"
    fi
    echo "::ctrlaltdel:/sbin/reboot"
    echo "::shutdown:/etc/init.d/rcK"
} > /etc/inittab
exec /sbin/init
EOF

w /etc/init.d/rcS 0755 <<'EOF'
#!/bin/sh
# tg-guest boot script (busybox init sysinit)
. /lib/tg/functions

# 1. kernel modules. Memory that virtio-mem plugs in later goes online at
#    once (the cloud kernel leaves hotplugged memory offline and there is
#    no udev to online it); hotplugged vCPUs go online by /sbin/tg-uevent
#    (respawned from inittab); disks and NICs need nothing.
[ -w /sys/devices/system/memory/auto_online_blocks ] &&
    echo online > /sys/devices/system/memory/auto_online_blocks
for m in $(cat /etc/tg/modules); do
    modprobe "$m" 2>/dev/null || tg_log "modprobe $m failed"
done

# 2. host name
h=$(tg_arg tg.hostname tg-guest)
hostname "$h"
echo "$h" > /etc/hostname
printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost\n' "$h" > /etc/hosts

# 3. /dev/virtio-ports/<name> (no udev); wait up to ~3 s for named ports
#    when a virtio-serial device (virtio id 3) exists.
vserial=
for d in /sys/bus/virtio/devices/*; do
    [ "$(cat "$d/device" 2>/dev/null)" = 0x0003 ] && vserial=1
done
if [ -n "$vserial" ]; then
    i=0
    while [ $i -lt 30 ]; do
        named=
        for p in /sys/class/virtio-ports/vport*; do
            [ -s "$p/name" ] && named=1
        done
        [ -n "$named" ] && break
        sleep 0.1
        i=$((i + 1))
    done
fi
/sbin/tg-vports

# 4. data mounts: tg.mount=DEV:DIR[,DEV:DIR...]
mounts=$(tg_arg tg.mount "")
if [ -n "$mounts" ]; then
    set -f
    oldifs=$IFS
    IFS=,
    for item in $mounts; do
        IFS=$oldifs
        dev=${item%%:*}
        dir=${item#*:}
        if [ "$dev" = "$item" ] || [ -z "$dev" ] || [ -z "$dir" ]; then
            tg_log "mount: bad item '$item' (want DEV:DIR)"
            continue
        fi
        i=0
        while [ ! -b "$dev" ] && [ $i -lt 30 ]; do sleep 0.1; i=$((i + 1)); done
        mkdir -p "$dir"
        # busybox has no blkid: spot ISO 9660 ourselves and mount it read-only
        # (saves rw attempts with every fs type); others: auto-detect.
        opts=
        if [ "$(dd if="$dev" bs=1 skip=32769 count=5 2>/dev/null)" = CD001 ]; then
            opts="-t iso9660 -o ro"
        fi
        if err=$(mount $opts "$dev" "$dir" 2>&1); then
            fstype=$(awk -v d="$dir" '$2 == d { t = $3; o = $4 } END { print t " " o }' /proc/mounts)
            tg_log "mounted $dev on $dir ($fstype)"
        else
            tg_log "mount $dev on $dir FAILED: $err"
        fi
    done
    IFS=$oldifs
    set +f
fi

# 5. network
ip link set lo up
ip addr add 127.0.0.1/8 dev lo 2>/dev/null
nic=
for n in /sys/class/net/*; do
    n=${n##*/}
    [ "$n" = lo ] && continue
    nic=$n
    break
done
net=$(tg_arg tg.net dhcp)
if [ -z "$nic" ]; then
    [ "$net" = none ] || tg_log "no network interface"
else
    case $net in
    none)
        ;;
    dhcp)
        ip link set "$nic" up
        udhcpc -f -i "$nic" -s /usr/share/udhcpc/default.script \
            -p "/run/udhcpc.$nic.pid" -x "hostname:$h" \
            </dev/null >>/run/udhcpc.log 2>&1 &
        # IPv6 when asked: router advertisements (route) and DHCPv6
        # (address); no hooks, so resolv.conf stays udhcpc's. A job of its
        # own, so the boot never waits for it.
        if [ "$(tg_arg tg.net6 none)" = dhcp ]; then
            mkdir -p /run/dhcpcd
            dhcpcd -6 -B -q -c /bin/true -j /run/dhcpcd.log "$nic" \
                </dev/null >/dev/null 2>&1 &
        fi
        ;;
    */*)
        addr=${net%%,*}
        gw=
        case $net in *,*) gw=${net#*,} ;; esac
        ip link set "$nic" up
        if ip addr add "$addr" dev "$nic"; then
            [ -z "$gw" ] || ip route add default via "$gw" dev "$nic" ||
                tg_log "net: cannot add default route via $gw"
            tg_log "net: $nic $addr${gw:+ gw $gw}"
        else
            tg_log "net: cannot set $addr on $nic"
        fi
        ;;
    *)
        tg_log "net: unknown tg.net=$net (want dhcp, none or A.B.C.D/NN[,GW])"
        ;;
    esac
fi

tg_log "guest up after $(tg_uptime) s"
exit 0
EOF

w /etc/init.d/rcK 0755 <<'EOF'
#!/bin/sh
# tg-guest shutdown script (busybox init ::shutdown:), run before init
# sends SIGTERM/SIGKILL to everything.
. /lib/tg/functions
tg_log "shutting down"
# Stop everything else first so no process keeps a data disk busy.
kill -TERM -1 2>/dev/null
i=0
while [ $i -lt 10 ]; do
    others=
    for p in /proc/[0-9]*; do
        p=${p##*/}
        [ "$p" = 1 ] || [ "$p" = $$ ] && continue
        # kernel threads and zombies have no exe link
        [ -e "/proc/$p/exe" ] && { others=1; break; }
    done
    [ -z "$others" ] && break
    sleep 0.1
    i=$((i + 1))
done
kill -KILL -1 2>/dev/null
sync
# Unmount block-device filesystems, newest first; read-only remount if busy.
for d in $(awk '$1 ~ "^/dev/" { print $2 }' /proc/mounts | sed '1!G;h;$!d'); do
    umount "$d" 2>/dev/null || mount -o remount,ro "$d" 2>/dev/null ||
        tg_log "cannot unmount $d"
done
umount -a -r 2>/dev/null
sync
exit 0
EOF

w /sbin/tg-vports 0755 <<'EOF'
#!/bin/sh
# Create /dev/virtio-ports/<name> -> ../vportNpM from sysfs (no udev here).
mkdir -p /dev/virtio-ports
for p in /sys/class/virtio-ports/vport*; do
    [ -e "$p/name" ] || continue
    n=$(cat "$p/name" 2>/dev/null)
    [ -n "$n" ] || continue
    [ -e "/dev/${p##*/}" ] || continue
    ln -sfn "../${p##*/}" "/dev/virtio-ports/$n"
done
exit 0
EOF

w /sbin/tg-uevent 0755 <<'EOF'
#!/bin/sh
# Run by busybox uevent (respawned from inittab) for each kernel uevent: a
# vCPU plugged in goes online, as udev's rule for the cpu subsystem does
# (the kernel leaves a hotplugged x86 CPU offline).
[ "$ACTION" = add ] && [ "$SUBSYSTEM" = cpu ] || exit 0
f=/sys$DEVPATH/online
[ -w "$f" ] && [ "$(cat "$f")" = 0 ] && echo 1 > "$f"
exit 0
EOF

w /sbin/tg-qga-wrapper 0755 <<'EOF'
#!/bin/sh
# Runs qemu-ga (respawned from inittab).  While /run/tg-agent-off holds an
# expiry (uptime seconds) in the future, the agent stays stopped.
. /lib/tg/functions
PORT=/dev/virtio-ports/org.qemu.guest_agent.0
FLAG=/run/tg-agent-off
warned=
while :; do
    if [ -f "$FLAG" ]; then
        expiry=$(cat "$FLAG" 2>/dev/null)
        now=$(tg_uptime); now=${now%%.*}
        case $expiry in ''|*[!0-9]*) expiry=0 ;; esac
        if [ "$now" -lt "$expiry" ]; then
            sleep 1
            continue
        fi
        rm -f "$FLAG"
        tg_log "qemu-ga back on"
    fi
    [ -e "$PORT" ] || /sbin/tg-vports
    if [ ! -e "$PORT" ]; then
        [ -n "$warned" ] || tg_log "no $PORT yet; qemu-ga waits for it"
        warned=1
        sleep 2
        continue
    fi
    /usr/sbin/qemu-ga -m virtio-serial -p "$PORT" -t /run -f /run/qemu-ga.pid
    sleep 1
done
EOF

w /bin/tg-agent-off 0755 <<'EOF'
#!/bin/sh
# tg-agent-off SECONDS: stop qemu-ga now and keep it stopped for SECONDS;
# it then comes back by itself.  Safe to run through guest-exec: the kill
# happens ~1 s later from a detached process, after this command has exited.
. /lib/tg/functions
case ${1:-} in
    ''|*[!0-9]*) echo "usage: tg-agent-off SECONDS" >&2; exit 2 ;;
esac
now=$(tg_uptime); now=${now%%.*}
echo $((now + 1 + $1)) > /run/tg-agent-off
setsid sh -c '
    sleep 1
    pid=$(cat /run/qemu-ga.pid 2>/dev/null)
    if [ -n "$pid" ]; then kill "$pid"; else killall qemu-ga; fi
' </dev/null >/dev/null 2>&1 &
tg_log "qemu-ga off for $1 s"
echo "qemu-ga off for $1 s"
exit 0
EOF

w /sbin/shutdown 0755 <<'EOF'
#!/bin/sh
# shutdown shim for qemu-ga's guest-shutdown, which runs
#   /sbin/shutdown -h -P|-H|-r +0 "message"
# busybox has no shutdown applet: map it to poweroff/halt/reboot.
. /lib/tg/functions
action=poweroff
msg=
for a in "$@"; do
    case $a in
    -c) echo "shutdown: cancel not supported" >&2; exit 1 ;;
    --*) ;;
    -*)
        flags=${a#-}
        while [ -n "$flags" ]; do
            f=${flags%"${flags#?}"}
            flags=${flags#?}
            case $f in
                r) action=reboot ;;
                H) action=halt ;;
                P) action=poweroff ;;
            esac
        done
        ;;
    +[0-9]*|now|[0-9]*:[0-9]*) ;;
    *) msg="$msg${msg:+ }$a" ;;
    esac
done
tg_log "shutdown: $action${msg:+ ($msg)}"
exec "/sbin/$action"
EOF

w /bin/autologin 0755 <<'EOF'
#!/bin/sh
exec /bin/login -f root
EOF

w /etc/acpi/PWRF/00000080 0755 <<'EOF'
#!/bin/sh
echo "tg: ACPI power button: powering off" > /dev/console
exec /sbin/poweroff
EOF

w /usr/share/udhcpc/default.script 0755 <<'EOF'
#!/bin/sh
# udhcpc event script: address, routes, resolv.conf.
[ -n "$1" ] || exit 1
case $1 in
deconfig)
    ip -4 addr flush dev "$interface"
    ip link set "$interface" up
    ;;
bound|renew)
    old=$(ip -4 -o addr show dev "$interface" | awk '{ print $4; exit }')
    if [ "$old" != "$ip/${mask:-24}" ]; then
        ip -4 addr flush dev "$interface"
        ip addr add "$ip/${mask:-24}" ${broadcast:+broadcast "$broadcast"} dev "$interface"
    fi
    if [ -n "$router" ]; then
        while ip route del default dev "$interface" 2>/dev/null; do :; done
        metric=0
        for r in $router; do
            ip route add default via "$r" dev "$interface" metric $metric
            metric=$((metric + 1))
        done
    fi
    {
        [ -z "$domain" ] || echo "search $domain"
        for d in $dns; do echo "nameserver $d"; done
    } > /etc/resolv.conf
    [ "$1" = renew ] || echo "tg: $interface $ip/${mask:-24} via ${router:-none} (dhcp)" > /dev/console
    ;;
leasefail|nak)
    echo "tg: $interface dhcp $1${message:+: $message}" > /dev/console
    ;;
esac
exit 0
EOF

# Sanity check: qemu-ga runs inside the initramfs tree (all its libraries
# are there).
if [ "$(id -u)" = 0 ]; then
    chroot "$STAGE" /usr/sbin/qemu-ga --version >/dev/null ||
        die "qemu-ga does not run inside the initramfs tree"
    chroot "$STAGE" /usr/sbin/dhcpcd --version >/dev/null ||
        die "dhcpcd does not run inside the initramfs tree"
    chroot "$STAGE" /bin/sh -n /init
fi

# ---------------------------------------------------------------- write outputs
TMP_INITRD=$(mktemp "$OUT/.initrd.tmp.XXXXXX")
(cd "$STAGE" && find . -mindepth 1 | sort | "$BB" cpio -o -H newc 2>/dev/null) |
    gzip -6 -n > "$TMP_INITRD"
gzip -t "$TMP_INITRD"
NFILES=$(find "$STAGE" -mindepth 1 | wc -l)
UNPACKED=$(du -sb "$STAGE" | cut -f1)
TMP_VMLINUZ=$(mktemp "$OUT/.vmlinuz.tmp.XXXXXX")
cp "$VMLINUZ" "$TMP_VMLINUZ"
chmod 0644 "$TMP_INITRD" "$TMP_VMLINUZ"
mv -f "$TMP_VMLINUZ" "$OUT/vmlinuz"
mv -f "$TMP_INITRD" "$OUT/initrd.img"
echo "$DEFAULT_CMDLINE" > "$OUT/cmdline"
cat > "$OUT/versions" <<EOF
kernel=$KREL
kernel_package=$KPKG $KPKG_VER
busybox=$BB_RELEASE
busybox_package=$BUSYBOX_PKG $BB_VER
dhcpcd_package=$DHCPCD_PKG $DHCPCD_VER
qemu_ga=$QGA_VER
qemu_ga_package=qemu-guest-agent $QGA_PKG_VER
modules=$(printf '%s\n' "${!PICKED[@]}" | sort | tr '\n' ' ' | sed 's/ $//')
EOF
echo "$INPUT_HASH" > "$OUT/.stamp"
log "initramfs: $NFILES files, $UNPACKED bytes unpacked"
summary "rebuilt"
