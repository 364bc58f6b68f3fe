#!/usr/bin/env bash
# Sets up what the demo needs on a fresh Debian 12 / Ubuntu machine, builds
# virt-launcher, runs it on libvirt's in-process test driver
# (test:///default: no daemon, no guest) with examples/vmi.json, and shows
# a few exchanges over its socket with socat. The launcher keeps running
# afterwards so you can talk to it yourself.
set -euo pipefail
cd "$(dirname "$0")/.."

# The launcher needs Rust 1.89 or newer (edition 2024, let chains, std file locks). Debian 12's
# own rustc is 1.63, so say how to get a current one instead of failing
# with a compiler error.
RUST_MIN=1.89
rust_help() {
    cat >&2 <<HELP
demo: $1
virt-launcher needs Rust $RUST_MIN or newer (Cargo.toml rust-version); Debian 12's rustc is 1.63.
Install a current toolchain with rustup (https://rustup.rs), then run this script again:
  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
  . "\$HOME/.cargo/env"
HELP
    exit 1
}
command -v cargo >/dev/null || rust_help "cargo is not installed (or not on PATH)"
# A cargo that fails (rustup without a default toolchain, say) must reach
# the help below, not end the script silently under set -e.
cargo_version=$(cargo --version 2>/dev/null | awk '{print $2}') || cargo_version=""
[ -n "$cargo_version" ] || rust_help "cargo --version does not work (rustup without a default toolchain? try: rustup default stable)"
if [ "$(printf '%s\n%s\n' "$RUST_MIN" "${cargo_version%%-*}" | sort -V | head -1)" != "$RUST_MIN" ]; then
    rust_help "cargo $cargo_version is too old"
fi

need=()
for p in libvirt-dev pkg-config socat gcc libc6-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
    echo "demo: installing ${need[*]}"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

cargo build --release --locked
BIN=$PWD/target/release/virt-launcher
DIR=$(mktemp -d /tmp/virt-launcher-demo.XXXXXX)
SOCK=$DIR/share/sockets/launcher-sock

"$BIN" --connect test:///default --vmi examples/vmi.json \
    --kubevirt-share-dir "$DIR/share" --private-dir "$DIR/private" \
    --ephemeral-disk-dir "$DIR/ephemeral" --container-disk-dir "$DIR/container-disks" \
    --hotplug-disk-dir "$DIR/hotplug-disks" >"$DIR/launcher.log" 2>&1 &
PID=$!
for _ in $(seq 1 200); do
    [ -S "$SOCK" ] && break
    kill -0 "$PID" 2>/dev/null || { cat "$DIR/launcher.log"; exit 1; }
    sleep 0.05
done

# Every connection starts with the server's greeting; show it once.
# The requests hold no single quote, so '...' shows them as typed.
say() { printf "\n\$ echo '%s' | socat - UNIX-CONNECT:\$SOCK\n" "$1"; echo "$1" | socat -t1 - "UNIX-CONNECT:$SOCK" | tail -n +2; }
echo "virt-launcher is running (pid $PID) for VMI default/demo; its socket is"
echo "  SOCK=$SOCK"
printf '\nThe greeting a client gets on connect:\n'
socat -t0.2 - "UNIX-CONNECT:$SOCK" </dev/null
say '{"execute":"query-status","id":1}'
say '{"execute":"pause","id":2}'
say '{"execute":"unpause","id":3}'
say '{"execute":"nonsense","id":4}'
cat <<EOF

Talk to it yourself (one JSON object per line; try {"execute":"subscribe"}
in one session and {"execute":"pause"} in another):
  socat READLINE UNIX-CONNECT:$SOCK
Stop it gracefully (the guest is asked to power off, then the launcher exits):
  kill -TERM $PID
Its log: $DIR/launcher.log. The protocol: docs/protocol.md; flags: man -l man/virt-launcher.8
EOF
