#!/bin/bash
# smoke.sh [PATH_TO_BINARY]
#
# A quick tour of the command socket on libvirt's in-process test driver
# (test:///default: no daemon, no guest), using only the launcher binary and
# socat. VL_TEST_URI=test+unix:///default runs it on libvirtd's test driver
# instead (for the static, wire-backend binary, which has no in-process
# driver); the VMI then gets a name of its own, as that driver's state is
# shared by every client of the daemon. It starts the launcher in standalone
# mode with examples/vmi.json in a temporary directory, checks the greeting,
# the introspection commands, pause/unpause, query-domain, query-stats,
# errors of several classes and events, drives the same launcher with the
# binary's own client (ctl, probe), then sends SIGTERM and checks the exit
# status, the socket's removal and the final events a subscriber saw.
#
# PATH_TO_BINARY defaults to target/release/virt-launcher, which is built
# with `cargo build --release` when missing. Prints one line per check that
# passed; on the first failed check it says which, shows the end of the
# launcher's log and exits 1. The temporary directory and any process the
# script started are removed on every exit path.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SMOKE=smoke
VMI_FILE=$ROOT/examples/vmi.json

TMP=""
LAUNCHER_PID=""
SUB_PID=""
SUB_FD_OPEN=0

cleanup() {
    local status=$?
    trap - EXIT INT TERM
    if [ "$SUB_FD_OPEN" = 1 ]; then
        exec 7>&- || true
    fi
    for pid in "$LAUNCHER_PID" "$SUB_PID"; do
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            kill -KILL "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
    done
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

# --- the binary --------------------------------------------------------------
resolve_binary "$@"

# --- start the launcher --------------------------------------------------------
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vl-smoke.XXXXXX")
SOCK=$TMP/share/sockets/launcher-sock

URI=${VL_TEST_URI:-test:///default}
NAME=demo
if [ "$URI" != test:///default ]; then
    NAME=smoke-$$
    sed "s/\"name\": \"demo\",/\"name\": \"$NAME\",/" "$VMI_FILE" >"$TMP/vmi.json"
    VMI_FILE=$TMP/vmi.json
fi
DOMAIN=default_$NAME

"$BIN" --connect "$URI" --vmi "$VMI_FILE" \
    --kubevirt-share-dir "$TMP/share" --private-dir "$TMP/private" \
    --ephemeral-disk-dir "$TMP/ephemeral" --container-disk-dir "$TMP/container-disks" \
    --hotplug-disk-dir "$TMP/hotplug-disks" \
    </dev/null >"$TMP/launcher.log" 2>&1 &
LAUNCHER_PID=$!

for _ in $(seq 200); do
    [ -S "$SOCK" ] && break
    kill -0 "$LAUNCHER_PID" 2>/dev/null || fail "the launcher exited before its socket was ready"
    sleep 0.05
done
[ -S "$SOCK" ] || fail "launcher-sock did not appear within 10 s"
[ ! -e "$TMP/share/sockets/launcher-init-sock" ] || fail "launcher-init-sock still exists next to launcher-sock"
[ -e "$SOCK.lock" ] || fail "the lock file launcher-sock.lock is missing"
mode=$(stat -c %a "$SOCK")
[ "$mode" = 600 ] || fail "launcher-sock has mode $mode, expected 600"
ok "launcher-sock ready (mode 0600, lock file present)"

# --- greeting and introspection --------------------------------------------------
out=$(request '{"execute":"ping","id":1}')
hello=$(printf '%s\n' "$out" | sed -n 1p)
expect "greeting" "$hello" '{"hello":{"protocol":1,"server":"virt-launcher",' \
    "\"pid\":$LAUNCHER_PID," '"vmi":"default/'"$NAME"'"' '"ready":true' \
    '"commands":["ping",' '"max_line_bytes":1048576}}'
ok "greeting: protocol 1, pid $LAUNCHER_PID, vmi default/$NAME, ready"

[ "$(printf '%s\n' "$out" | sed -n 2p)" = '{"return":{},"id":1}' ] \
    || fail "ping: unexpected reply: $(printf '%s\n' "$out" | sed -n 2p)"
ok "ping"

out=$(reply '{"execute":"query-version","id":"v"}')
expect "query-version" "$out" '{"return":{' '"launcher":"' '"protocol":1' \
    '"uri":"'"$URI"'"' '"hypervisor":"TEST ' '"id":"v"}'
backend=$(printf '%s\n' "$hello" | sed -n 's/.*"backend":"\([a-z]*\)".*/\1/p')
[ -n "$backend" ] || fail "the greeting does not say which backend runs: $hello"
expect "query-version" "$out" '"backend":"'"$backend"'"'
ok "query-version (backend $backend)"

# The standalone sync runs after the socket is ready: wait for the domain.
for _ in $(seq 100); do
    status=$(reply '{"execute":"query-status","id":3}')
    contains "$status" '"phase":"Running"' && break
    sleep 0.05
done
expect "query-status" "$status" '"phase":"Running"' '"vmi":"default/'"$NAME"'"' \
    '"name":"'"$DOMAIN"'"' '"defined":true' '"state":"Running"' '"reason":"Booted"' \
    '"agent":{"connected":false}' '"uri":"'"$URI"'"' '"id":3}'
ok "query-status: phase Running, domain $DOMAIN Running (Booted)"

commands=$(reply '{"execute":"query-commands","id":4}')
expect "query-commands" "$commands" '{"return":{"commands":[{"name":"ping","summary":"' '"id":4}'
names=$(printf '%s\n' "$hello" | sed 's/.*"commands":\[\([^]]*\)\].*/\1/' | tr -d '"' | tr ',' ' ')
count=0
for name in $names; do
    expect "query-commands" "$commands" "{\"name\":\"$name\",\"summary\":\""
    count=$((count + 1))
done
[ "$count" -ge 16 ] || fail "the greeting lists only $count commands"
ok "query-commands lists all $count commands of the greeting"

# --- a subscriber in the background --------------------------------------------------
start_subscriber
expect "subscribe" "$(sed -n 2p "$TMP/events.log")" \
    '{"return":{' '"subscribed":true' '"events":["DOMAIN_LIFECYCLE",' '"id":"sub"}'
ok "subscriber connected and subscribed to every event"

# --- pause / unpause -------------------------------------------------------------
out=$(reply '{"execute":"pause","id":10}')
expect "pause" "$out" '{"return":{' '"state":"Paused"' '"reason":"User"' '"id":10}'
out=$(reply '{"execute":"query-status","id":11}')
expect "query-status after pause" "$out" '"state":"Paused"' '"paused_by_user":true'
wait_event 5 '"event":"DOMAIN_LIFECYCLE"' '"event":"Suspended"' '"state":"Paused"' \
    || fail "the subscriber saw no Suspended DOMAIN_LIFECYCLE event after pause"
ok "pause: domain Paused (User), paused_by_user, Suspended event"

out=$(reply '{"execute":"unpause","id":12}')
expect "unpause" "$out" '{"return":{' '"state":"Running"' '"reason":"Unpaused"' '"id":12}'
wait_event 5 '"event":"DOMAIN_LIFECYCLE"' '"event":"Resumed"' '"state":"Running"' \
    || fail "the subscriber saw no Resumed DOMAIN_LIFECYCLE event after unpause"
ok "unpause: domain Running (Unpaused), Resumed event"

# --- query-domain, query-stats ------------------------------------------------------
out=$(reply '{"execute":"query-domain","id":13}')
expect "query-domain" "$out" '{"return":{' '"name":"'"$DOMAIN"'"' '"uuid":"' \
    '"state":"Running"' '"spec":{' '"xml":"<domain' '"id":13}'
ok "query-domain: name, uuid, state, spec and xml"

out=$(reply '{"execute":"query-stats","id":14}')
expect "query-stats" "$out" '{"return":{' '"domain":"'"$DOMAIN"'"' '"stats":{' \
    '"state.state":1' '"id":14}'
ok "query-stats"

# --- errors: one reply per line, in order ------------------------------------------------
out=$(request \
    '{"execute":"ping","id":20' \
    '' \
    '{"execute":"frobnicate","id":21}' \
    '{"execute":"ping","arguments":{"x":1},"id":22}' \
    '{"execute":"unpause","id":23}' \
    '{"id":24}' \
    '{"execute":"guest-ping","id":25}' \
    '{"execute":"ping","id":26}')
[ "$(printf '%s\n' "$out" | wc -l)" -eq 8 ] \
    || fail "errors: expected the greeting and 7 replies (the blank line gets none), got: $out"
line() { printf '%s\n' "$out" | sed -n "$1p"; }
expect "ParseError" "$(line 2)" '{"error":{"class":"ParseError","desc":"invalid JSON: '
contains "$(line 2)" '"id"' && fail "ParseError: a reply to an unparsable line must have no id: $(line 2)"
ok "ParseError for invalid JSON, without id"
expect "CommandNotFound" "$(line 3)" '{"error":{"class":"CommandNotFound",' 'frobnicate' '"id":21}'
ok "CommandNotFound for an unknown command, id echoed"
expect "InvalidArgument" "$(line 4)" '{"error":{"class":"InvalidArgument",' 'unknown argument \"x\"' '"id":22}'
ok "InvalidArgument for an unknown argument"
expect "InvalidState" "$(line 5)" '{"error":{"class":"InvalidState",' 'must be paused' '"id":23}'
ok "InvalidState for unpause of a running domain"
expect "InvalidRequest" "$(line 6)" '{"error":{"class":"InvalidRequest",' 'missing \"execute\"' '"id":24}'
ok "InvalidRequest for a request without execute"
expect "Unavailable" "$(line 7)" '{"error":{"class":"Unavailable",' 'guest agent is not connected' '"id":25}'
ok "Unavailable for a guest command without an agent"
[ "$(line 8)" = '{"return":{},"id":26}' ] || fail "ping after the errors: unexpected reply: $(line 8)"
ok "replies came in request order and the connection survived the errors"

# --- the same launcher through the binary's own client (ctl, probe) ------------------
ctl() { "$BIN" ctl --socket "$SOCK" "$@"; }
out=$(ctl --raw ping) || fail "ctl --raw ping exited with status $?"
[ "$out" = '{"return":{},"id":1}' ] || fail "ctl --raw ping: unexpected line: $out"
ok "ctl --raw ping: the launcher's own reply line"
out=$(ctl query-status) || fail "ctl query-status exited with status $?"
expect "ctl query-status" "$out" '"phase":"Running"' '"name":"'"$DOMAIN"'"'
[ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "ctl query-status: expected one line off a terminal: $out"
ok "ctl query-status: the return object on one line"
suspended() { grep -c '"event":"Suspended"' "$TMP/events.log" || true; }
before=$(suspended)
out=$(ctl pause) || fail "ctl pause exited with status $?"
[ "$out" = '{"reason":"User","state":"Paused"}' ] || fail "ctl pause: unexpected reply: $out"
for _ in $(seq 50); do
    [ "$(suspended)" -gt "$before" ] && break
    sleep 0.1
done
[ "$(suspended)" -gt "$before" ] || fail "the subscriber saw no Suspended event after ctl pause"
set +e
err=$(ctl pause 2>&1 >/dev/null)
status=$?
set -e
[ "$status" = 1 ] || fail "ctl pause of a paused domain exited with status $status, expected 1"
expect "ctl pause error" "$err" 'virt-launcher ctl: InvalidState: pause: '
ok "ctl pause: Paused, the event, and status 1 with the error for a second pause"
out=$(ctl unpause) || fail "ctl unpause exited with status $?"
expect "ctl unpause" "$out" '"state":"Running"'
out=$(ctl guest-ping timeout_seconds=1 2>&1) && fail "ctl guest-ping without an agent succeeded: $out"
expect "ctl guest-ping" "$out" 'virt-launcher ctl: Unavailable: guest-ping: '
ok "ctl unpause, and KEY=VALUE arguments (guest-ping timeout_seconds=1: Unavailable, no agent)"
[ "$(ctl | sed -n 1p | cut -d' ' -f1)" = ping ] || fail "ctl without a command does not list the commands"
ok "ctl alone lists the commands"
set +e
err=$("$BIN" probe --socket "$SOCK" --timeout 2s 2>&1)
status=$?
set -e
[ "$status" = 1 ] || fail "probe without a guest agent exited with status $status, expected 1"
expect "probe" "$err" 'virt-launcher probe: the guest agent did not answer: Unavailable: '
ok "probe without a guest agent: status 1 and the reason"

# --- SIGTERM -------------------------------------------------------------------------
sigterm_and_expect_clean_exit 15
ok "SIGTERM: the launcher exited with status 0"
ok "launcher-sock and its lock file were removed"

seen '"event":"SHUTDOWN_STARTED"' '"signal":"SIGTERM"' '"grace_period_seconds":30' \
    || fail "the subscriber saw no SHUTDOWN_STARTED event"
ok "subscriber saw SHUTDOWN_STARTED (SIGTERM, grace period 30 s)"
seen '"event":"DOMAIN_LIFECYCLE"' '"event":"Stopped"' '"state":"Shutoff"' \
    || fail "the subscriber saw no Stopped DOMAIN_LIFECYCLE event"
ok "subscriber saw the Stopped DOMAIN_LIFECYCLE event"
while IFS= read -r l; do
    contains "$l" '"timestamp":{"seconds":' || fail "event line without a timestamp: $l"
    case "$l" in
        '{"event":"EVENTS_DROPPED"'*) ;;
        '{"seq":'[0-9]*) ;;
        *) fail "event line without its number (seq) first: $l" ;;
    esac
done < <(grep -E '^[{]("seq":[0-9]+,)?"event":' "$TMP/events.log")
ok "every event line has a timestamp, and its number first"

echo "smoke: all checks passed"
