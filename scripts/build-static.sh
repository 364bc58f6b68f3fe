#!/usr/bin/env bash
# build-static.sh: builds virt-launcher as one static binary for
# x86_64-unknown-linux-musl, with the wire backend (libvirt's RPC protocol
# spoken directly: no libvirt library, no shared library at all). Adds the
# musl target with rustup when it is missing. Prints the binary's path on
# the last line of stdout; checks that file(1) calls it statically linked
# and ldd(1) finds nothing to load, and that its memcpy and memmove are
# src/memcpy.rs's, not musl's (the binary is stripped as it is linked, so
# the check reads the linker's map, which build.rs asks for: its
# cross-reference table names the object that defined each symbol), and
# likewise that its `_Unwind_Backtrace` and `_Unwind_Resume` are
# src/no_unwind.rs's, not libunwind's (the stubs that keep libunwind and
# std's backtrace printer out).
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
# JSON on stdout (diagnostics rendered on stderr as usual): it says where
# the build script's OUT_DIR, and so the linker's map, is.
messages=$(cargo build --profile static --locked --no-default-features --features wire \
    --target "$target" --message-format=json-render-diagnostics)
bin=${CARGO_TARGET_DIR:-target}/$target/static/virt-launcher
out_dir=$(printf '%s\n' "$messages" | grep '"reason":"build-script-executed"' \
    | grep '"package_id":"[^"]*virt-launcher' | sed -n 's/.*"out_dir":"\([^"]*\)".*/\1/p' | tail -1)
map=$out_dir/virt-launcher.map
if [ -z "$out_dir" ] || [ ! -f "$map" ]; then
    echo "build-static: no linker map for $bin (build.rs writes it to OUT_DIR: ${out_dir:-not found})" >&2
    exit 1
fi
# The defining object of each symbol: the first file of its line in the
# map's cross-reference table. Ours is the crate's LTO object
# (deps/virt_launcher-*.rcgu.o); musl's would be libc.a(memcpy.lo),
# libunwind's libunwind.a(...-UnwindLevel1.o) and the like.
for symbol in memcpy memmove _Unwind_Backtrace _Unwind_Resume; do
    definer=$(awk -v symbol="$symbol" '/^Cross Reference Table/ { table = 1 }
        table && $1 == symbol && NF == 2 { print $2; exit }' "$map")
    case "$(basename "$definer")" in
        virt_launcher-*.rcgu.o) ;;
        *)
            echo "build-static: $symbol in $bin is defined by ${definer:-nothing}, not by the crate (src/memcpy.rs, src/no_unwind.rs; linker map: $map)" >&2
            exit 1
            ;;
    esac
done
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
echo "build-static: $bin: $kind; ldd: ${ldd_out:-not a dynamic executable}; memcpy and memmove from src/memcpy.rs, libunwind's functions from src/no_unwind.rs; $((size / 1024)) KiB ($size bytes)" >&2
echo "$bin"
