#!/usr/bin/env bash
# build-static.sh: builds virt-launcher as one static binary for
# x86_64-unknown-linux-musl, with the wire backend (libvirt's RPC protocol
# spoken directly: no libvirt library, no shared library at all). Adds the
# musl target with rustup when it is missing. Prints the binary's path on
# the last line of stdout; checks that file(1) calls it statically linked
# and ldd(1) finds nothing to load.
#
#   scripts/build-static.sh            # -> target/x86_64-unknown-linux-musl/static/virt-launcher
#
# The one-line equivalent, once the target is installed (the `static`
# profile is release optimised for size, stripped; .cargo/config.toml makes
# it a plain static executable rather than static-pie):
#   cargo build --profile static --no-default-features --features wire --target x86_64-unknown-linux-musl
set -euo pipefail
cd "$(dirname "$0")/.."
target=x86_64-unknown-linux-musl
if ! rustup target list --installed | grep -qx "$target"; then
    echo "build-static: adding the Rust target $target" >&2
    rustup target add "$target" >&2
fi
cargo build --profile static --locked --no-default-features --features wire --target "$target" >&2
bin=${CARGO_TARGET_DIR:-target}/$target/static/virt-launcher
kind=$(file -b "$bin")
case "$kind" in
    *"statically linked"* | *"static-pie linked"*) ;;
    *) echo "build-static: $bin is not static: $kind" >&2; exit 1 ;;
esac
if ldd_out=$(ldd "$bin" 2>&1); then
    case "$ldd_out" in
        *"not a dynamic executable"* | *"statically linked"*) ;;
        *) echo "build-static: ldd finds libraries to load: $ldd_out" >&2; exit 1 ;;
    esac
fi
size=$(stat -c %s "$bin")
echo "build-static: $bin: $kind; ldd: ${ldd_out:-not a dynamic executable}; $((size / 1024)) KiB" >&2
echo "$bin"
