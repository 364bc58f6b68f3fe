#!/usr/bin/env bash
# Installs virt-launcher and its man page:
#
#   PREFIX/bin/virt-launcher                  (mode 0755)
#   PREFIX/share/man/man8/virt-launcher.8     (mode 0644)
#
# Environment:
#   PREFIX   where to install (default /usr/local, which man(1) searches)
#   DESTDIR  staging root prepended to every path, for packagers (default empty)
#   BIN      the binary to install (default target/release/virt-launcher,
#            built with `cargo build --release --locked` when missing)
#
#   sudo scripts/install.sh                    # then: man virt-launcher
#   PREFIX=/usr DESTDIR=/tmp/pkg scripts/install.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
BIN=${BIN:-target/release/virt-launcher}
case $PREFIX in
    /*) ;;
    *) echo "install: PREFIX must be an absolute path, not $PREFIX" >&2; exit 2 ;;
esac

if [ ! -x "$BIN" ]; then
    echo "install: $BIN is missing; building it (cargo build --release --locked)"
    cargo build --release --locked
fi
[ -x "$BIN" ] || { echo "install: $BIN is not an executable file" >&2; exit 1; }

# The checked-in page is what the binary generates (a test keeps them equal);
# take the binary's own so that an installed page always matches it.
page=$(mktemp)
trap 'rm -f "$page"' EXIT
"$BIN" --generate-man >"$page"

bindir=$DESTDIR$PREFIX/bin
mandir=$DESTDIR$PREFIX/share/man/man8
install -d -m 0755 "$bindir" "$mandir"
install -m 0755 "$BIN" "$bindir/virt-launcher"
install -m 0644 "$page" "$mandir/virt-launcher.8"
echo "install: $bindir/virt-launcher"
echo "install: $mandir/virt-launcher.8"
if [ -z "$DESTDIR" ] && command -v mandb >/dev/null; then
    # Refresh man's index so `man -k virt-launcher` finds it too; `man
    # virt-launcher` works without it.
    mandb -q "$PREFIX/share/man" 2>/dev/null || true
fi
