#!/bin/bash
# smoke-qemu.sh [PATH_TO_BINARY]
#
# A quick tour of the command socket on a real guest: the test guest of
# scripts/build-test-guest.sh (built or reused in target/test-guest), booted
# under plain QEMU emulation by a launcher with its own libvirt daemons
# (--spawn-libvirt --force-emulation), in standalone mode (--vmi) with a VMI
# like the one tests/common/guest.rs makes. Uses only the launcher binary,
# socat and standard shell tools. It waits for the guest agent, checks
# query-status, query-stats, query-guest-info, guest-exec, guest-ping and
# pause/unpause, then sends SIGTERM and checks the exit status, the socket's
# removal, the events a subscriber saw and that no QEMU of this guest is left.
#
# Needs root (--spawn-libvirt) and a host set up by scripts/setup-host.sh.
# PATH_TO_BINARY defaults to target/release/virt-launcher, which is built
# with `cargo build --release` when missing. Prints one line per check that
# passed; on the first failed check it says which, shows the end of the
# launcher's log and exits 1. On every exit path the launcher it started is
# stopped (kill command, then signals; its libvirt daemons and QEMU with it)
# and the temporary directory is removed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SMOKE=smoke-qemu
GUEST_DIR=$ROOT/target/test-guest
START=$(date +%s)

# The guest: VMI smoke-qemu/tg-PID, libvirt domain smoke-qemu_tg-PID.
NAMESPACE=smoke-qemu
NAME=tg-$$
DOMAIN=${NAMESPACE}_$NAME
# Deadlines, sized for a guest under emulation on a busy host.
READY_SECONDS=60     # launcher-sock (spawning libvirtd included)
BOOT_SECONDS=120     # the guest agent connects
POLL_SECONDS=60      # the agent poller has read the guest's data
STOP_SECONDS=120     # SIGTERM to exit
GRACE_SECONDS=90     # the guest's terminationGracePeriodSeconds

TMP=""
SOCK=""
LAUNCHER_PID=""
SUB_PID=""
SUB_FD_OPEN=0

# descendants PID: the process ids below PID, deepest first.
descendants() {
    local child
    for child in $(pgrep -P "$1" 2>/dev/null || true); do
        descendants "$child"
        echo "$child"
    done
}

# qemu_of_guest: the QEMU processes running this guest.
qemu_of_guest() { pgrep -f -- "qemu-system.*guest=$DOMAIN," 2>/dev/null || true; }

stop_launcher() {
    [ -n "$LAUNCHER_PID" ] || return 0
    if kill -0 "$LAUNCHER_PID" 2>/dev/null; then
        # kill destroys the guest; the launcher then stops its own daemons.
        if [ -S "$SOCK" ]; then
            echo '{"execute":"kill","id":"cleanup"}' \
                | timeout 10 socat -t 5 - "UNIX-CONNECT:$SOCK" >/dev/null 2>&1 || true
        fi
        local i
        for i in $(seq 200); do
            kill -0 "$LAUNCHER_PID" 2>/dev/null || break
            if [ "$i" = 100 ]; then
                kill -TERM "$LAUNCHER_PID" 2>/dev/null || true
            fi
            sleep 0.1
        done
        if kill -0 "$LAUNCHER_PID" 2>/dev/null; then
            echo "smoke-qemu: the launcher did not stop; killing it and its processes" >&2
            local pids
            pids=$(descendants "$LAUNCHER_PID")
            kill -KILL "$LAUNCHER_PID" $pids 2>/dev/null || true
        fi
    fi
    wait "$LAUNCHER_PID" 2>/dev/null || true
    LAUNCHER_PID=""
    local qemu
    qemu=$(qemu_of_guest)
    if [ -n "$qemu" ]; then
        echo "smoke-qemu: ending QEMU left behind: $qemu" >&2
        kill -KILL $qemu 2>/dev/null || true
    fi
}

cleanup() {
    local status=$?
    trap - EXIT INT TERM
    set +e
    if [ "$SUB_FD_OPEN" = 1 ]; then
        exec 7>&- || true
    fi
    stop_launcher
    if [ -n "$SUB_PID" ] && kill -0 "$SUB_PID" 2>/dev/null; then
        kill -KILL "$SUB_PID" 2>/dev/null || true
    fi
    [ -n "$SUB_PID" ] && { wait "$SUB_PID" 2>/dev/null || true; }
    if [ -n "$TMP" ]; then
        rm -rf "$TMP"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# shellcheck source=smoke-lib.sh
. "$ROOT/scripts/smoke-lib.sh"

command -v socat >/dev/null || fail "socat is not installed"
[ "$(id -u)" = 0 ] || fail "run as root: --spawn-libvirt needs it"

# --- the binary and the guest ---------------------------------------------------
resolve_binary "$@"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/vl-smoke-qemu.XXXXXX")
SOCK=$TMP/share/sockets/launcher-sock

"$ROOT/scripts/build-test-guest.sh" "$GUEST_DIR" >"$TMP/build-guest.log" 2>&1 || {
    tail -n 15 "$TMP/build-guest.log" | sed 's/^/    /' >&2
    fail "scripts/build-test-guest.sh $GUEST_DIR failed"
}
KERNEL=$(sed -n 's/^kernel=//p' "$GUEST_DIR/versions")
[ -n "$KERNEL" ] && [ -s "$GUEST_DIR/vmlinuz" ] && [ -s "$GUEST_DIR/initrd.img" ] \
    || fail "the test guest in $GUEST_DIR is incomplete (vmlinuz, initrd.img, versions)"
ok "test guest ready in $GUEST_DIR (kernel $KERNEL)"

# --- the VMI (as tests/common/guest.rs guest_vmi() makes it) -------------------------
cat >"$TMP/vmi.json" <<EOF
{
  "apiVersion": "kubevirt.io/v1",
  "kind": "VirtualMachineInstance",
  "metadata": {"name": "$NAME", "namespace": "$NAMESPACE"},
  "spec": {
    "terminationGracePeriodSeconds": $GRACE_SECONDS,
    "domain": {
      "cpu": {"cores": 1},
      "memory": {"guest": "192Mi"},
      "firmware": {"kernelBoot": {
        "kernelArgs": "console=ttyS0 quiet panic=-1 tg.hostname=$NAME",
        "container": {
          "image": "local/test-guest",
          "kernelPath": "$GUEST_DIR/vmlinuz",
          "initrdPath": "$GUEST_DIR/initrd.img"
        }
      }},
      "devices": {
        "autoattachGraphicsDevice": false,
        "disks": [],
        "interfaces": [{"name": "default", "binding": {"name": "slirp"}, "macAddress": "52:54:00:7e:57:01"}]
      }
    },
    "networks": [{"name": "default", "pod": {}}],
    "volumes": []
  }
}
EOF

# --- start the launcher ----------------------------------------------------------
"$BIN" --spawn-libvirt --force-emulation --vmi "$TMP/vmi.json" \
    --kubevirt-share-dir "$TMP/share" --private-dir "$TMP/private" \
    --ephemeral-disk-dir "$TMP/ephemeral" --container-disk-dir "$TMP/container-disks" \
    --hotplug-disk-dir "$TMP/hotplug-disks" \
    </dev/null >"$TMP/launcher.log" 2>&1 &
LAUNCHER_PID=$!

for _ in $(seq $((READY_SECONDS * 10))); do
    [ -S "$SOCK" ] && break
    kill -0 "$LAUNCHER_PID" 2>/dev/null || fail "the launcher exited before its socket was ready"
    sleep 0.1
done
[ -S "$SOCK" ] || fail "launcher-sock did not appear within $READY_SECONDS s"
ok "launcher-sock ready (pid $LAUNCHER_PID, own libvirt daemons, domain $DOMAIN)"

# --- a subscriber in the background ------------------------------------------------
start_subscriber
expect "subscribe" "$(sed -n 2p "$TMP/events.log")" '{"return":{' '"subscribed":true' '"id":"sub"}'
ok "subscriber connected and subscribed to every event"

# --- boot -------------------------------------------------------------------------
wait_event "$BOOT_SECONDS" '"event":"AGENT_CONNECTED"' "\"domain\":\"$DOMAIN\"" \
    || fail "no AGENT_CONNECTED event within $BOOT_SECONDS s (did the guest boot? see $TMP/private/libvirt/log/qemu/$DOMAIN.log)"
ok "guest booted: AGENT_CONNECTED after $(($(date +%s) - START)) s"

out=$(reply '{"execute":"query-status","id":1}')
expect "query-status" "$out" '"phase":"Running"' '"agent":{"connected":true}' \
    "\"name\":\"$DOMAIN\"" '"state":"Running"' "\"vmi\":\"$NAMESPACE/$NAME\"" \
    '"uri":"qemu+unix:///system?socket=' '"id":1}'
ok "query-status: phase Running, domain Running, agent connected"

out=$(reply '{"execute":"query-stats","id":2}' 35)
expect "query-stats" "$out" '{"return":{' "\"domain\":\"$DOMAIN\"" '"cpu.time":' '"id":2}'
ok "query-stats has cpu.time"

# The agent cache fills on the poller's first round after AGENT_CONNECTED.
for _ in $(seq $((POLL_SECONDS * 2))); do
    out=$(reply '{"execute":"query-guest-info","id":3}')
    contains "$out" '"hostname":""' || break
    sleep 0.5
done
hostname=$(printf '%s\n' "$out" | sed -n 's/.*"hostname":"\([^"]*\)".*/\1/p')
[ "$hostname" = "$NAME" ] \
    || fail "query-guest-info: hostname is \"$hostname\", expected \"$NAME\" (tg.hostname): ${out:0:800}"
ok "query-guest-info: hostname $hostname (tg.hostname)"

out=$(reply '{"execute":"guest-exec","arguments":{"command":"/bin/uname","args":["-r"],"timeout_seconds":30},"id":4}' 45)
expect "guest-exec uname -r" "$out" '{"return":{' '"exit_code":0' "\"stdout\":\"$KERNEL\\n\"" '"id":4}'
ok "guest-exec uname -r: $KERNEL"

out=$(reply '{"execute":"guest-ping","id":5}' 15)
[ "$out" = '{"return":{},"id":5}' ] || fail "guest-ping: unexpected reply: $out"
ok "guest-ping"

# --- pause / unpause -------------------------------------------------------------
out=$(reply '{"execute":"pause","id":6}' 35)
expect "pause" "$out" '{"return":{' '"state":"Paused"' '"reason":"User"' '"id":6}'
out=$(reply '{"execute":"query-status","id":7}')
expect "query-status after pause" "$out" '"state":"Paused"' '"paused_by_user":true'
wait_event 10 '"event":"DOMAIN_LIFECYCLE"' '"event":"Suspended"' '"state":"Paused"' \
    || fail "the subscriber saw no Suspended DOMAIN_LIFECYCLE event after pause"
ok "pause: domain Paused (User), Suspended event"

out=$(reply '{"execute":"unpause","id":8}' 35)
expect "unpause" "$out" '{"return":{' '"state":"Running"' '"reason":"Unpaused"' '"id":8}'
wait_event 10 '"event":"DOMAIN_LIFECYCLE"' '"event":"Resumed"' '"state":"Running"' \
    || fail "the subscriber saw no Resumed DOMAIN_LIFECYCLE event after unpause"
out=$(reply '{"execute":"query-status","id":9}')
expect "query-status after unpause" "$out" '"state":"Running"' '"paused_by_user":false'
ok "unpause: domain Running (Unpaused), Resumed event"

# --- SIGTERM -------------------------------------------------------------------------
sigterm_and_expect_clean_exit "$STOP_SECONDS"
ok "SIGTERM: the guest powered off and the launcher exited with status 0 after $STOPPED_AFTER s"
ok "launcher-sock and its lock file were removed"

seen '"event":"SHUTDOWN_STARTED"' '"signal":"SIGTERM"' "\"grace_period_seconds\":$GRACE_SECONDS" \
    || fail "the subscriber saw no SHUTDOWN_STARTED event"
ok "subscriber saw SHUTDOWN_STARTED (SIGTERM, grace period $GRACE_SECONDS s)"
seen '"event":"DOMAIN_LIFECYCLE"' '"event":"Stopped"' '"detail":"Shutdown"' '"state":"Shutoff"' \
    || fail "the subscriber saw no Stopped/Shutdown DOMAIN_LIFECYCLE event: $(grep '"Stopped"' "$TMP/events.log" || true)"
ok "subscriber saw DOMAIN_LIFECYCLE Stopped (detail Shutdown)"

for _ in $(seq 150); do
    [ -z "$(qemu_of_guest)" ] && break
    sleep 0.1
done
[ -z "$(qemu_of_guest)" ] || fail "QEMU of $DOMAIN still running: $(qemu_of_guest)"
ok "no qemu-system process of $DOMAIN is left"

echo "smoke-qemu: all checks passed in $(($(date +%s) - START)) s"
